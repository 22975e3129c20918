"""A holder whose lease lapsed stops before its next commit (moto's S3 server on loopback, real LanceDB on it).

Every lease is renewed while held (tests/test_lease_renewal.py), but when no renewal gets through for two thirds of
its seconds (the bucket slow or unreachable, the renewing thread starved) it runs out while its LanceDB work goes on,
another replica takes it, and LanceDB's commits carry no fencing token that would refuse the first holder's. Here
replica A's bucket refuses every renewal, the leases' clocks are the test's (``Lease(wall=, ticks=)``: time passes
only when the test moves it), and replica B does the same work once A's lease has run out. A's next commit must be
refused (``LeaseLapsedError``) and B's work left whole.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tiermem.base.errors import LeaseLapsedError, StoreError
from tiermem.core.bucket import Bucket
from tiermem.core.lease import CREATE_LEASE, UPKEEP_LEASE, Lease, write_lease
from tiermem.core.object_layout import loads
from tiermem.domain.archive_files import CHUNKS_LOCK
from tiermem.store import Filter, Store

from .test_object_storage import BUCKET, s3_endpoint  # noqa: F401 (the module-scoped moto server fixture)

OPTIONS = {"aws_access_key_id": "test", "aws_secret_access_key": "test", "region": "us-east-1", "allow_http": "true"}
SECONDS = 60.0  # the leases' seconds: renewed every 20 s of real time (A's renewals are refused anyway)
DIM = 8


class Clock:
    """The leases' time (both replicas'): ``now`` (the lease's end, compared across replicas) and ``ticks`` (a
    holder's own count since its last renewal) move only when the test moves them."""

    def __init__(self) -> None:
        self.at, self.tick = datetime.now(UTC), 1000.0

    def now(self) -> datetime:
        return self.at

    def ticks(self) -> float:
        return self.tick

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)
        self.tick += seconds


class RenewalsRefused(Bucket):
    """Replica A's view of the bucket: every renewal of a lease (a replacement naming the holder it replaces) fails,
    as on a slow or unreachable store; taking a lease and giving it back get through."""

    def replace(self, path: str, data: bytes, etag: str) -> str | None:
        holder, stored = loads(data, "lease").get("holder"), self.get(path)
        if holder is not None and stored is not None and loads(stored.data, "lease").get("holder") == holder:
            raise StoreError("the renewal timed out (the object store did not answer)")
        return super().replace(path, data, etag)


def leases(bucket: Bucket, clock: Clock) -> Callable[[str], AbstractContextManager[object]]:
    """The write leases of a replica (as ``factory._write_leases`` makes them), on ``bucket`` and the test's clock."""
    return lambda name: Lease(bucket, write_lease(name), SECONDS, wall=clock.now, ticks=clock.ticks).waiting(5)


def chunk(file_id: str, i: int, content: str) -> dict[str, Any]:
    return {
        "id": f"{file_id}.{i}",
        "agent_id": "folder-1",
        "group_id": file_id,
        "chunk": i,
        "content": content,
        "tags": [file_id],
        "text": content,
        "created_us": 0,
        "vector": None,
    }


@pytest.fixture
def replicas(s3_endpoint: str) -> Iterator[tuple[Store, Store, Clock]]:  # noqa: F811
    """Replicas A and B of one new store on S3, A's bucket refusing renewals, both on one test clock."""
    uri, options, clock = (
        f"s3://{BUCKET}/fence-{uuid.uuid4().hex[:8]}",
        {**OPTIONS, "aws_endpoint": s3_endpoint},
        Clock(),
    )

    def store(bucket: Bucket) -> Store:
        return Store(
            uri,
            embedding_model="hashing-8",
            embedding_dim=DIM,
            storage_options=options,
            optimize_every=0,
            leases=leases(bucket, clock),
        )

    a, b = store(RenewalsRefused(uri, options)), store(Bucket(uri, options))
    yield a, b, clock


def in_b(b: Store) -> None:
    """Replica B's replacement of the file's chunks under the file-chunks lock, in a thread of its own (another
    process: none of A's leases in force)."""
    failed: list[BaseException] = []

    def replace_chunks() -> None:
        try:
            with b.conn.exclusive(CHUNKS_LOCK):
                b.rows.delete("file_chunks", Filter(group_ids=("file-1",)))
                b.rows.add_rows("file_chunks", [chunk("file-1", 0, "B's text"), chunk("file-1", 1, "B's more")])
        except BaseException as exc:  # noqa: BLE001 (raised below)
            failed.append(exc)

    replica = threading.Thread(target=replace_chunks)
    replica.start()
    replica.join(120)
    assert not replica.is_alive() and not failed, failed


def stored_chunks(store: Store, file_id: str) -> list[str]:
    rows = store.conn.rows("file_chunks", Filter(group_ids=(file_id,)), columns=("id", "content"), latest=True)
    return sorted(f"{r['id']}={r['content']}" for r in rows)


def test_a_holder_whose_lease_lapsed_does_not_commit_and_the_other_replicas_work_stays_whole(
    replicas: tuple[Store, Store, Clock],
) -> None:
    """A file's chunks replaced under the file-chunks lock (``FileRows.write``: a deletion, then an append): A
    deletes, its work then outlasts the lease with no renewal getting through, B takes the lease and replaces the
    chunks, and A's append is refused instead of leaving both appends (the file's chunks twice)."""
    a, b, clock = replicas
    a.rows.add_rows("file_chunks", [chunk("file-1", 0, "old text")])
    with a.conn.exclusive(CHUNKS_LOCK):
        a.rows.delete("file_chunks", Filter(group_ids=("file-1",)))  # A's lease is fresh: this commit is A's to make
        clock.advance(SECONDS * 0.7)  # A's LanceDB work goes on; every renewal of its lease is refused
        clock.advance(SECONDS * 0.4)  # ... past the lease's end: another replica may take it now
        in_b(b)  # B takes the lapsed lease (its ``waiting`` would time out otherwise) and replaces the chunks
        with pytest.raises(LeaseLapsedError) as refused:
            a.rows.add_rows("file_chunks", [chunk("file-1", 0, "A's text")])
    message = str(refused.value)
    assert "Nothing was written by this step" in message and write_lease(CHUNKS_LOCK) in message, message
    assert "last renewed 66 s ago" in message and "only 40 s after a renewal" in message, message
    assert stored_chunks(b, "file-1") == ["file-1.0=B's text", "file-1.1=B's more"]


@pytest.mark.parametrize("write", ["append", "upsert", "deletion", "settings", "keyword texts"])
def test_every_kind_of_commit_under_a_lapsed_lease_is_refused_and_writes_nothing(
    write: str, replicas: tuple[Store, Store, Clock]
) -> None:
    a, _, clock = replicas
    a.rows.add_rows("file_chunks", [chunk("file-1", 0, "kept")])
    before = a.conn.table_versions()
    commits: dict[str, Callable[[], object]] = {
        "append": lambda: a.rows.add_rows("file_chunks", [chunk("file-2", 0, "new")]),
        "upsert": lambda: a.rows.upsert_rows("file_chunks", "id", [chunk("file-1", 0, "changed")]),
        "deletion": lambda: a.rows.delete("file_chunks", Filter(group_ids=("file-1",))),
        "settings": lambda: a.conn.set_meta("some-key", "some value"),
        "keyword texts": lambda: a.rows.set_texts("file_chunks", ["file-1.0"], lambda r: "other text"),
    }
    with a.conn.exclusive(CHUNKS_LOCK):
        clock.advance(SECONDS * 0.7)  # two thirds of the lease without a renewal: A no longer trusts it
        with pytest.raises(LeaseLapsedError, match=r"Stopped before writing .* Nothing was written by this step"):
            commits[write]()
    assert a.conn.table_versions() == before  # no commit to any table
    assert stored_chunks(a, "file-1") == ["file-1.0=kept"]


def test_a_holder_whose_renewals_get_through_keeps_committing_past_the_leases_seconds(s3_endpoint: str) -> None:  # noqa: F811
    """The check trusts the last renewal that got through, not the take: a lease renewed all along is held however
    long its work runs (the renewing thread runs every third of ``seconds`` of real time; the test waits for a
    renewal sent after the clock moved)."""
    uri, options, clock = (
        f"s3://{BUCKET}/fence-{uuid.uuid4().hex[:8]}",
        {**OPTIONS, "aws_endpoint": s3_endpoint},
        Clock(),
    )
    short = 0.3
    renewed = threading.Event()
    bucket = Bucket(uri, options)
    replace = bucket.replace

    def noted(path: str, data: bytes, etag: str) -> str | None:
        got = replace(path, data, etag)
        if got is not None and loads(data, "lease").get("holder") is not None and clock.tick > 1000.0:
            renewed.set()  # a renewal sent after the clock moved got through
        return got

    bucket.replace = noted  # type: ignore[method-assign]
    store = Store(
        uri,
        embedding_model="hashing-8",
        embedding_dim=DIM,
        storage_options=options,
        optimize_every=0,
        leases=lambda name: Lease(bucket, write_lease(name), short, wall=clock.now, ticks=clock.ticks).waiting(5),
    )
    with store.conn.exclusive(CHUNKS_LOCK):
        clock.advance(short * 3)  # far past the lease's seconds since it was taken
        assert renewed.wait(30), "no renewal got through"
        store.rows.add_rows("file_chunks", [chunk("file-1", 0, "text")])
    assert stored_chunks(store, "file-1") == ["file-1.0=text"]


def test_a_background_upkeep_whose_lease_lapsed_stops_before_compacting(
    replicas: tuple[Store, Store, Clock],
    s3_endpoint: str,  # noqa: F811
) -> None:
    """The upkeep lease (``Connection.upkeep_lease``) guards compactions: an upkeep whose lease lapsed before its
    first compaction stops there (a store error: the server's upkeep thread logs it, the next one tries again)."""
    a, _, clock = replicas
    a.rows.add_rows("file_chunks", [chunk("file-1", 0, "one")])
    a.rows.add_rows("file_chunks", [chunk("file-2", 0, "two")])
    lease = Lease(
        RenewalsRefused(a.conn.uri, {**OPTIONS, "aws_endpoint": s3_endpoint}),
        UPKEEP_LEASE,
        SECONDS,
        wall=clock.now,
        ticks=clock.ticks,
    )

    @contextmanager
    def lapsing() -> Iterator[bool]:
        with lease.held() as held:
            clock.advance(SECONDS * 0.7)  # reading the tables' versions outlasted two thirds of the lease
            yield held

    a.conn.upkeep_lease = lapsing
    before = a.conn.table_versions()
    with pytest.raises(LeaseLapsedError, match="upkeep"):
        a.indexes.optimize(background=True)
    assert a.conn.table_versions() == before  # nothing compacted


def test_a_store_creation_whose_lease_lapsed_creates_no_table(s3_endpoint: str) -> None:  # noqa: F811
    """The creation lease (``Connection.creating``): a creation whose lease lapsed before its first table creates
    none (two creations of one table commit twice, the later replacing the earlier and its rows); the store opens
    whole for the next replica."""
    uri, options, clock = (
        f"s3://{BUCKET}/fence-{uuid.uuid4().hex[:8]}",
        {**OPTIONS, "aws_endpoint": s3_endpoint},
        Clock(),
    )
    bucket = RenewalsRefused(uri, options)

    @contextmanager
    def lapsing() -> Iterator[None]:
        with Lease(bucket, CREATE_LEASE, SECONDS, wall=clock.now, ticks=clock.ticks).waiting(5):
            clock.advance(SECONDS * 0.7)  # listing the tables outlasted two thirds of the lease
            yield

    with pytest.raises(LeaseLapsedError, match="create"):
        Store(uri, embedding_model="hashing-8", embedding_dim=DIM, storage_options=options, creation_lock=lapsing)
    assert not [o.path for o in Bucket(uri, options).list("") if ".lance/" in o.path]
    b = Store(uri, embedding_model="hashing-8", embedding_dim=DIM, storage_options=options, optimize_every=0)
    b.rows.add_rows("file_chunks", [chunk("file-1", 0, "text")])
    assert stored_chunks(b, "file-1") == ["file-1.0=text"]
