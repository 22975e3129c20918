"""The recall and archival store's upkeep on object storage (moto's S3 server on loopback, real LanceDB): it keeps
pace with commits (every LanceDB operation there lists the table's versions), replicas take turns at it through
a lease, and two replicas optimizing at once while others write lose nothing."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import boto3

from tiermem.base.config import load_settings
from tiermem.core.bucket import Bucket
from tiermem.core.lease import UPKEEP_LEASE, Lease
from tiermem.core.objects import ObjectCore
from tiermem.domain.factory import open_memory
from tiermem.domain.memory import Memory
from tiermem.store import Store

from .conftest import memory_over
from .test_object_storage import BUCKET, s3_endpoint  # noqa: F401 (the module-scoped moto server fixture)

OPTIONS = {"aws_access_key_id": "test", "aws_secret_access_key": "test", "region": "us-east-1", "allow_http": "true"}


# Retention where replicas write while others clean up: shorter than these tests' writing, so cleanups delete versions
# under way, and longer than any one call takes on a loaded machine. A call still reading a version older than the
# retention fails (README: `version_retention_seconds`, 10 s on object storage); at 0.5-1 s, under load, it did.
RACING_RETENTION = timedelta(seconds=3)


def options(endpoint: str) -> dict[str, str]:
    return {**OPTIONS, "aws_endpoint": endpoint}


def two_replicas(endpoint: str, name: str) -> tuple[list[Memory], str]:
    """Two memories over one new prefix (two replicas, no upkeep of their own, ``RACING_RETENTION``) and the id of
    their one agent."""
    uri = f"s3://{BUCKET}/{name}-{uuid.uuid4().hex[:8]}"
    replicas = [
        memory_over(
            Store(
                uri,
                embedding_model="hashing-384",
                embedding_dim=384,
                storage_options=options(endpoint),
                optimize_every=0,
                version_retention=RACING_RETENTION,
            ),
            core=ObjectCore.open(Bucket(uri, options(endpoint))),
        )
        for _ in range(2)
    ]
    agent = replicas[0].ensure_agent("default").id
    assert replicas[1].ensure_agent("default").id == agent
    return replicas, agent


def versions_of(endpoint: str, prefix: str, table: str) -> int:
    """The version manifests of ``table`` on the bucket (what every LanceDB operation lists)."""
    s3 = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1"
    )
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{prefix}/{table}.lance/_versions/")
    return sum(len(p.get("Contents", [])) for p in pages)


def test_upkeep_on_object_storage_keeps_pace_with_commits_not_rows(tmp_path: Path, s3_endpoint: str) -> None:
    """One row per commit (a conversation_log of one message) never reaches ``optimize_every`` rows soon, but on
    object storage the upkeep also runs every ``optimize_every_commits`` commits and deletes the versions older
    than the retention: the versions stay bounded. A local directory keeps the row count alone."""
    prefix = f"cadence-{uuid.uuid4().hex[:8]}"
    store = Store(
        f"s3://{BUCKET}/{prefix}",
        embedding_model="hashing-384",
        embedding_dim=384,
        storage_options=options(s3_endpoint),
        optimize_every=10_000,
        optimize_every_commits=10,
        version_retention=timedelta(seconds=1),
    )
    memory = memory_over(store, core=ObjectCore.open(Bucket(store.uri, options(s3_endpoint))))
    agent = memory.ensure_agent("default").id
    for i in range(40):
        memory.conversation_log(agent, [{"role": "user", "content": f"message {i}"}])
        if i % 10 == 5:
            time.sleep(1.1)  # the versions made so far are past the retention at the next upkeep
    store.conn.finish_upkeep()
    kept = versions_of(s3_endpoint, prefix, "messages")
    assert kept < 20, f"{kept} version manifests kept after 40 commits"  # 41+ without upkeep by commits
    said = [m.content for m in memory.archive.rows.messages_of(agent)]
    assert sorted(said) == sorted(f"message {i}" for i in range(40))  # compaction and cleanup lost nothing
    local = Store(str(tmp_path / "db"), embedding_model="hashing-384", embedding_dim=384)
    assert (local.conn.optimize_every_commits, local.conn.version_retention) == (0, timedelta(minutes=10))
    assert store.conn.remote and not local.conn.remote


def test_one_replica_at_a_time_holds_the_lease_and_an_expired_one_is_taken_over(s3_endpoint: str) -> None:  # noqa: F811
    bucket = Bucket(f"s3://{BUCKET}/lease-{uuid.uuid4().hex[:8]}", options(s3_endpoint))
    a, b = Lease(bucket), Lease(bucket)
    with a.held() as got_a:
        assert got_a
        with b.held() as got_b:
            assert not got_b  # a holds it
    with b.held() as got_b:
        assert got_b  # given back on the way out
    short = Lease(bucket, seconds=0.2)
    assert short.take() is not None  # and never given back: its holder "died"
    assert a.take() is None
    time.sleep(0.3)
    assert a.take() is not None  # taken over once its time was up
    # four takers at once of a lease given back: exactly one gets it
    bucket.put(UPKEEP_LEASE, b'{"holder": null, "until_us": 0}')
    got: list[str | None] = []
    takers = [threading.Thread(target=lambda: got.append(Lease(bucket).take())) for _ in range(4)]
    for t in takers:
        t.start()
    for t in takers:
        t.join()
    assert sum(x is not None for x in got) == 1, got


def test_a_background_upkeep_is_skipped_while_another_replica_holds_the_lease(tmp_path: Path, s3_endpoint: str) -> None:  # noqa: F811
    uri = f"s3://{BUCKET}/turns-{uuid.uuid4().hex[:8]}"
    memory = open_memory(
        load_settings(
            uri=uri, embedding_model="hashing", storage_options=options(s3_endpoint), data_dir=tmp_path / "d"
        ),
        start_embedder=False,
    )
    store = memory.archive.store
    assert store.conn.upkeep_lease is not None  # replicas on object storage take turns
    other = Lease(Bucket(uri, options(s3_endpoint)))
    etag = other.take()
    assert etag is not None
    assert store.indexes.optimize(background=True) == {"skipped": "another replica is optimizing"}
    assert "passages" in store.indexes.optimize()  # an explicit optimize does not wait for the lease
    other.give_back(etag)
    memory.archival_insert(memory.ensure_agent("default").id, "a passage since", None)
    assert "passages" in store.indexes.optimize(background=True)  # the lease is free again


def test_two_replicas_optimizing_at_once_while_both_write_lose_nothing(tmp_path: Path, s3_endpoint: str) -> None:  # noqa: F811
    """Two stores on one prefix (two replicas), a short retention (``RACING_RETENTION``), each writing passages and messages while both
    run the whole upkeep (compaction, version cleanup, index updates) over and over, at the same moments: every
    acknowledged row is there exactly once afterwards, and searches keep answering throughout."""
    replicas, agent = two_replicas(s3_endpoint, "both")
    errors: list[str] = []
    written: list[str] = []
    stop = threading.Event()

    def write(r: int) -> None:
        try:
            for i in range(25):
                replicas[r].archival_insert(agent, f"fact {r}-{i} about the upkeep", None)
                replicas[r].conversation_log(agent, [{"role": "user", "content": f"said {r}-{i}"}])
                written.append(f"{r}-{i}")
        except Exception as exc:  # reported below: the test is that there are none
            errors.append(f"write {r}: {exc!r}")

    def upkeep(r: int) -> None:
        while not stop.is_set():
            try:
                replicas[r].archive.store.indexes.optimize()
                replicas[r].archival_search(
                    agent,
                    "fact about the upkeep",
                    tags=None,
                    tag_match_mode="any",
                    top_k=5,
                    start_datetime=None,
                    end_datetime=None,
                )
            except Exception as exc:
                errors.append(f"upkeep {r}: {exc!r}")

    writers = [threading.Thread(target=write, args=(r,)) for r in range(2)]
    keepers = [threading.Thread(target=upkeep, args=(r,)) for r in range(2)]
    for t in writers + keepers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    for t in keepers:
        t.join()
    assert errors == []
    assert len(written) == 50
    for m in replicas:
        passages, total = m.archival_list(agent, offset=0, limit=100, tags=None)
        assert total == 50 and sorted(p.content for p in passages) == sorted(
            f"fact {w} about the upkeep" for w in written
        )
        said = [x.content for x in m.archive.rows.messages_of(agent)]
        assert sorted(said) == sorted(f"said {w}" for w in written)


def test_a_replica_sees_anothers_rows_once_the_read_staleness_has_passed(tmp_path: Path, s3_endpoint: str) -> None:  # noqa: F811
    """On object storage a check for a table's newest version holds ``object_read_staleness_ms`` (LanceDB's read
    consistency interval): a replica's own writes are seen at once, another replica's once that long has passed.
    A local directory checks at every read."""
    uri = f"s3://{BUCKET}/stale-{uuid.uuid4().hex[:8]}"
    settings = load_settings(
        uri=uri,
        embedding_model="hashing",
        storage_options=options(s3_endpoint),
        data_dir=tmp_path / "d",
        object_read_staleness_ms=300,
    )
    a, b = (open_memory(settings, start_embedder=False) for _ in range(2))
    assert a.archive.store.conn.read_staleness == timedelta(milliseconds=300)
    agent = a.ensure_agent("default").id
    assert b.ensure_agent("default").id == agent
    for i in range(3):
        a.archival_insert(agent, f"seen by both {i}", None)
        assert a.archival_list(agent, offset=0, limit=10, tags=None)[1] == i + 1  # its own write: at once
        time.sleep(0.35)
        assert b.archival_list(agent, offset=0, limit=10, tags=None)[1] == i + 1  # another's: after the window
    strict = load_settings(
        uri=uri,
        embedding_model="hashing",
        storage_options=options(s3_endpoint),
        data_dir=tmp_path / "d",
        object_read_staleness_ms=0,
    )
    assert open_memory(strict, start_embedder=False).archive.store.conn.read_staleness == timedelta(0)
    local = Store(
        str(tmp_path / "db"), embedding_model="hashing-384", embedding_dim=384, read_staleness=timedelta(seconds=5)
    )
    assert local.conn.read_staleness == timedelta(0)  # a local directory always checks


def test_a_background_upkeep_skips_tables_no_commit_changed(tmp_path: Path) -> None:
    """Each table optimized costs requests on object storage; a background upkeep leaves alone those no commit
    changed since this process last optimized them (an explicit optimize does them all)."""
    store = Store(str(tmp_path / "db"), embedding_model="hashing-384", embedding_dim=384, optimize_every=0)
    memory = memory_over(store)
    agent = memory.ensure_agent("default").id
    assert "passages" in store.indexes.optimize(background=True)
    memory.conversation_log(agent, [{"role": "user", "content": "only the messages table changed"}])
    again = store.indexes.optimize(background=True)
    assert "messages" in again and "passages" not in again and "meta" not in again
    assert "passages" in store.indexes.optimize()


def test_a_retried_append_checks_the_newest_version_for_rows_already_stored(s3_endpoint: str) -> None:  # noqa: F811
    """An append tried again after a failed try appends only the rows not stored yet, read at the table's newest
    version (not one up to ``read_staleness`` old): whatever the failed try left behind, no row is doubled."""
    uri = f"s3://{BUCKET}/retried-{uuid.uuid4().hex[:8]}"
    a, b = (
        Store(
            uri,
            embedding_model="hashing-384",
            embedding_dim=384,
            storage_options=options(s3_endpoint),
            optimize_every=0,
            read_staleness=timedelta(seconds=30),
        )
        for _ in range(2)
    )

    def row(n: int) -> dict[str, object]:
        return {
            "id": f"m{n}",
            "agent_id": "agent",
            "conversation_id": "default",
            "seq": n,
            "role": "user",
            "content": f"turn {n}",
            "payload": "",
            "text": f"turn {n}",
            "created_us": n,
            "vector": [0.5] * 384,
        }

    assert b.rows.count("messages") == 0  # b has checked the table's version now: it holds for 30 s
    a.rows.add_rows("messages", [row(1), row(2)])  # another replica's commit
    assert b.rows.count("messages") == 0  # b does not see it yet
    assert [r["id"] for r in b.rows._not_stored("messages", [row(1), row(2), row(3)])] == ["m3"]
    b.rows.add_rows("messages", [row(3)])
    assert sorted(r["id"] for r in b.rows.all_rows("messages")) == ["m1", "m2", "m3"]


def test_two_replicas_appending_hard_to_one_table_while_it_is_compacted_lose_and_double_nothing(
    s3_endpoint: str,
) -> None:  # noqa: F811
    """Two replicas on one prefix, three threads each appending to the messages and passages tables as fast as they
    can while one replica compacts and cleans up versions (``RACING_RETENTION``) over and over: commits lose races to each
    other and to the upkeep all the time; every call succeeds and every acknowledged row is stored exactly once."""
    replicas, agent = two_replicas(s3_endpoint, "hard")
    errors: list[str] = []
    said: list[str] = []
    noted: list[str] = []
    writing = threading.Event()

    def write(r: int, t: int) -> None:
        for i in range(14):
            try:
                replicas[r].conversation_log(agent, [{"role": "user", "content": f"said {r}-{t}-{i}"}])
                said.append(f"said {r}-{t}-{i}")
                replicas[r].archival_insert(agent, f"noted {r}-{t}-{i}", None)
                noted.append(f"noted {r}-{t}-{i}")
            except Exception as exc:  # reported below: the test is that there are none
                errors.append(f"write {r}-{t}-{i}: {exc!r}")

    def upkeep() -> None:
        while writing.is_set():
            try:
                replicas[0].archive.store.indexes.optimize()
            except Exception as exc:
                errors.append(f"upkeep: {exc!r}")

    writers = [threading.Thread(target=write, args=(r, t)) for r in range(2) for t in range(3)]
    keeper = threading.Thread(target=upkeep)
    writing.set()
    for t in [*writers, keeper]:
        t.start()
    for t in writers:
        t.join()
    writing.clear()
    keeper.join()
    assert errors == []
    assert len(said) == len(noted) == 84
    store = replicas[1].archive.store
    messages = store.rows.all_rows("messages")
    passages = store.rows.all_rows("passages")
    assert sorted(r["content"] for r in messages) == sorted(said)  # none lost, none doubled
    assert sorted(r["content"] for r in passages) == sorted(noted)
    assert len({r["id"] for r in messages}) == len(messages) and len({r["id"] for r in passages}) == len(passages)
