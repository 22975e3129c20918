"""`tiermem reembed` against other writers and interruptions: every searchable table re-embedded (folder files
too), no write lost or silently mixed with another model's vectors, an unfinished reembed never taken for a whole
store."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import lancedb
import pytest

from tiermem.base.config import Settings, load_settings
from tiermem.base.errors import ReembedUnfinishedError, SchemaError, StoreBusyError
from tiermem.base.files import locked_unless_held
from tiermem.core.bucket import Bucket
from tiermem.core.lease import REEMBED_LEASE, REEMBED_SECONDS, Lease
from tiermem.domain.factory import open_memory
from tiermem.domain.maintenance import doctor, reembed
from tiermem.embedding.embedders import make_embedder
from tiermem.store import Store
from tiermem.store import search as search_module
from tiermem.store.reembed import embed_rows
from tiermem.store.schemas import REEMBED_RUN_LOCK_FILE
from tiermem.store.swaps import finish_swap, settle_copies


def _switched(settings: Settings) -> Settings:
    return load_settings(data_dir=settings.data_dir, embedding_model="hashing-256", tools=["all"])


def test_reembed_rewrites_folder_file_chunks_too(settings: Settings) -> None:
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    memory.files.create_folder("docs")
    memory.files.upload("docs", "plan.txt", b"Plan: migrate the billing service in March.\n")
    memory.files.attach(agent, "docs")
    reembed(_switched(settings))
    after = open_memory(_switched(settings))
    assert "plan.txt" in after.semantic_search_files(agent, "billing migration", 5)
    after.files.upload("docs", "budget.txt", b"Budget review notes.\n")  # embedded with the new model, stored
    assert {f.name: f.status for f in after.files.files("docs")} == {"plan.txt": "completed", "budget.txt": "completed"}


def test_writes_are_refused_while_a_reembed_runs_and_after_it_switched_models(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    running = open_memory(settings)  # a server that opened the store before the reembed
    agent = running.ensure_agent("default").id
    running.archive.insert(agent, "Otters hold hands while they sleep")
    store = Store.for_reembed(settings.store_uri())
    store.reembed.begin("hashing-256", 256)  # what `tiermem reembed` does first (or all an interrupted one did)
    with pytest.raises(StoreBusyError, match="tiermem reembed"):
        running.archive.insert(agent, "a fact remembered meanwhile")
    with pytest.raises(StoreBusyError, match="tiermem reembed"):
        running.archive.log_messages(agent, [{"role": "user", "content": "hello"}])
    with pytest.raises(ReembedUnfinishedError, match="run `tiermem reembed` again"):
        open_memory(settings)  # no other process opens a store that may hold two models' vectors
    assert doctor(settings) == 1
    out = capsys.readouterr().out
    assert "[FAIL] schema" in out and "hashing-256" in out and "run it again" in out
    reembed(_switched(settings))  # a reembed started again finishes the job
    assert doctor(_switched(settings)) == 0
    with pytest.raises(SchemaError, match="restart this process"):  # its vectors would be of the old model
        running.archive.insert(agent, "a fact remembered after")
    after = open_memory(_switched(settings))
    assert [p.content for p in after.archive.list_passages(agent)[0]] == ["Otters hold hands while they sleep"]


def test_a_server_opened_before_a_reembed_searches_by_keywords_and_says_why(settings: Settings) -> None:
    """Its query vectors are of the old model: while a reembed runs and once it has switched models, a search of a
    process that opened the store before ranks by keywords alone and its note says why (restart, once switched),
    rather than comparing its query with vectors of another model."""
    running = open_memory(settings)  # a server that opened the store before the reembed
    agent = running.ensure_agent("default").id
    running.archive.insert(agent, "Otters hold hands while they sleep")
    before = running.archive.search(agent, "otters sleeping")
    assert before.mode == "hybrid" and not before.notes
    store = Store.for_reembed(settings.store_uri())
    store.reembed.begin("hashing-256", 256)
    rows, embedder = store.rows.all_rows("passages"), make_embedder("hashing-256", Path())
    embed_rows(rows, embedder.embed_blocking)
    store.reembed.replace_vectors(
        "passages", rows, 256, embedder.embed_blocking
    )  # swapped: a new table, its index rebuilt
    during = running.archive.search(agent, "otters sleeping")
    assert during.mode == "fts" and [h.content for h in during.hits] == ["Otters hold hands while they sleep"]
    assert "Keyword-only" in during.notes[0] and "rebuilding every vector" in during.notes[0]
    reembed(_switched(settings))  # the rest of the job (begun again: what finishes an interrupted one)
    after = running.archive.search(agent, "otters sleeping")
    assert after.mode == "fts" and [h.content for h in after.hits] == ["Otters hold hands while they sleep"]
    assert "hashing-256 (dim 256)" in after.notes[0] and "Restart the server" in after.notes[0]
    fresh = open_memory(_switched(settings)).archive.search(agent, "otters sleeping")
    assert fresh.mode == "hybrid" and not fresh.notes


def test_a_server_opened_before_a_reembed_never_finds_another_agents_rows_in_the_new_tables(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server proves an agent owns every row of a table at a version and then skips the agent filter there
    (``store/search.py``). A reembed replaces the table, whose versions start again: once it has finished, the
    server reopens its tables, so a proof of the old table is never taken for the new one's same version, where a
    later process has written another agent's rows."""
    monkeypatch.setattr(search_module, "SETTLED_SECONDS", 0.0)  # as if every version had held still that long
    running = open_memory(settings)
    running.archive.store.search.sole_agent_shortcut = True
    alice = running.ensure_agent("alice").id
    running.archive.insert(alice, "Otters hold hands while they sleep")
    for _ in range(2):  # the first search proves alice owns the table, the second skips the filter
        assert [h.content for h in running.archive.search(alice, "otters").hits] == [
            "Otters hold hands while they sleep"
        ]
    proved = running.archive.store.conn.version("passages")
    reembed(_switched(settings))
    later = open_memory(_switched(settings))
    bob = later.ensure_agent("bob").id
    while later.archive.store.conn.version("passages") < proved:
        later.archive.insert(bob, "Bob's otters diary")
    assert later.archive.store.conn.version("passages") == proved  # the new table at the version proved of the old
    found = running.archive.search(alice, "otters diary")
    assert [h.content for h in found.hits] == ["Otters hold hands while they sleep"] and found.mode == "fts"


def test_rows_committed_during_a_reembed_are_merged_into_the_new_table(settings: Settings, tmp_path: Path) -> None:
    """On object storage a write can land between a reembed's read of a table and its swap (no shared lock there):
    the swap keeps it, embedded with the new model, and leaves out rows deleted meanwhile."""
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    first, second = memory.archive.insert(agent, "first fact")[0], memory.archive.insert(agent, "second fact")[0]
    store = Store.for_reembed(settings.store_uri())
    new = make_embedder("hashing-256", tmp_path)
    rows = store.rows.all_rows("passages")  # the reembed's read ...
    for r, v in zip(rows, new.embed_blocking([r["content"] for r in rows]), strict=True):
        r["vector"] = v
    late = memory.archive.insert(agent, "a fact remembered while it embedded")[0]  # ... then other writers
    memory.archive.delete(agent, first)
    assert store.reembed.replace_vectors("passages", rows, new.dim, new.embed_blocking) == (2, 1)
    stored = {r["id"]: r for r in store.rows.all_rows("passages")}
    assert set(stored) == {second, late}
    assert all(len(r["vector"]) == 256 for r in stored.values())
    assert stored[late]["vector"] == pytest.approx(new.embed_blocking(["a fact remembered while it embedded"])[0])


def test_a_row_changed_during_a_reembed_is_embedded_again_and_counted_once(settings: Settings, tmp_path: Path) -> None:
    """A row whose text changed between the reembed's read and its swap gets a vector of its new text; the count the
    summary adds up holds each row of the new table once (not the read row and its changed self)."""
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    memory.archive.insert(agent, "first fact")
    changed = memory.archive.insert(agent, "second fact")[0]
    store = Store.for_reembed(settings.store_uri())
    new = make_embedder("hashing-256", tmp_path)
    rows = store.rows.all_rows("passages")
    for r, v in zip(rows, new.embed_blocking([r["content"] for r in rows]), strict=True):
        r["vector"] = v
    edited = next(dict(r) for r in memory.archive.store.rows.all_rows("passages") if r["id"] == changed)
    edited["content"] = "second fact, corrected"
    memory.archive.store.rows.upsert_rows("passages", "id", [edited])  # another writer changes it meanwhile
    assert store.reembed.replace_vectors("passages", rows, new.dim, new.embed_blocking) == (2, 1)
    stored = {r["id"]: r for r in store.rows.all_rows("passages")}
    assert stored[changed]["content"] == "second fact, corrected"
    assert stored[changed]["vector"] == pytest.approx(new.embed_blocking(["second fact, corrected"])[0])


def test_a_second_reembed_is_refused_while_one_runs_and_changes_nothing(settings: Settings) -> None:
    """Two reembeds at once would rewrite the same tables: the second is refused before it opens the store (the lock
    the first holds for its whole run, here held by this process as another reembed would); once the first is gone
    (it finished, or died: the lock goes with it) a reembed runs."""
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    memory.archive.insert(agent, "Otters hold hands while they sleep")
    uri = settings.store_uri()
    with locked_unless_held(Path(uri) / REEMBED_RUN_LOCK_FILE, "pid 4242, started earlier") as holder:
        assert holder is None
        with pytest.raises(
            StoreBusyError, match=r"Another `tiermem reembed` is running .*\(pid 4242, started earlier\)"
        ):
            reembed(_switched(settings))
    assert Store.recorded_meta(uri)["embedding_model"] == "hashing-384"  # not marked, not switched
    assert not Store.recorded_meta(uri).get("reembedding")
    reembed(_switched(settings))
    assert Store.recorded_meta(uri)["embedding_model"] == "hashing-256"


def _half_written_copy(settings: Settings, table: str) -> Path:
    """What a reembed killed inside ``create_table`` of its copy of ``table`` leaves: a folder of data files and no
    committed version (LanceDB lists it as a table that does not open)."""
    data = Path(settings.store_uri()) / f"{table}__reembed.lance" / "data"
    data.mkdir(parents=True)
    (data / ".tmpkilled").write_bytes(b"half a fragment")
    return data.parent


def test_a_copy_a_killed_reembed_left_half_written_is_removed_by_the_reembed_run_again(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reembed killed while it wrote a table's copy leaves a folder LanceDB lists but cannot open. Every other
    process refuses the store, saying to run the reembed again (it may be running: its copy is left alone), and
    doctor says so; the reembed run again removes the copy and rebuilds every table."""
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    memory.archive.insert(agent, "Otters hold hands while they sleep")
    Store.for_reembed(settings.store_uri()).reembed.begin("hashing-256", 256)
    copy = _half_written_copy(settings, "passages")
    for _ in range(2):
        with pytest.raises(ReembedUnfinishedError, match="run `tiermem reembed` again"):
            open_memory(settings)
        assert copy.is_dir()  # a running reembed's: never touched by another process
    assert doctor(settings) == 1
    out = capsys.readouterr().out
    assert "[FAIL] schema" in out and "hashing-256" in out and "run it again with the same --embedding-model" in out
    assert "permissions" not in out
    reembed(_switched(settings))
    assert not copy.exists()
    assert doctor(_switched(settings)) == 0
    after = open_memory(_switched(settings))
    assert [p.content for p in after.archive.list_passages(agent)[0]] == ["Otters hold hands while they sleep"]
    assert after.archive.search(agent, "otters sleeping").mode == "hybrid"


def _older_reembed_copy(settings: Settings, table: str) -> list[dict[str, Any]]:
    """What an interrupted reembed of tiermem 0.1.0 leaves: a committed copy of ``table`` with vectors of another
    model, and no mark in the meta table (that version wrote none). Returns the table's rows as they were."""
    db = lancedb.connect(settings.store_uri())  # as the older tiermem left it: no open of ours settles it first
    original = db.open_table(table).to_arrow()
    rows = original.to_pylist()
    copy = [{**r, "vector": [1.0] + [0.0] * (len(r["vector"]) - 1)} for r in rows]  # not the recorded model's
    db.create_table(f"{table}__reembed", data=copy, schema=original.schema)
    assert not Store.recorded_meta(settings.store_uri()).get("reembedding")
    return rows


def test_a_copy_an_older_reembed_left_is_never_swapped_in_under_the_old_model(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    """tiermem 0.1.0 recorded neither a mark nor the model of an interrupted reembed's copy, and may have swapped
    other tables already: the copy is removed (its table is whole), never put in place under the model the store
    records, and the store is refused until a reembed rebuilds every vector with one model; doctor says how."""
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    memory.archive.insert(agent, "Otters hold hands while they sleep")
    before = _older_reembed_copy(settings, "passages")
    with pytest.raises(ReembedUnfinishedError, match=r"tiermem 0\.1\.0 .* was interrupted") as refused:
        open_memory(settings)
    assert not refused.value.recorded and "--embedding-model MODEL" in str(refused.value)
    assert "hashing-384 (dim 384)" in str(refused.value)  # the model the store records, to keep it
    db = lancedb.connect(settings.store_uri())
    assert "passages__reembed" not in set(db.list_tables().tables)
    assert db.open_table("passages").to_arrow().to_pylist() == before  # the old model's vectors, as recorded
    with pytest.raises(ReembedUnfinishedError, match=r"tiermem 0\.1\.0"):  # every later open, until a reembed
        open_memory(settings)
    assert doctor(settings) == 1
    out = capsys.readouterr().out
    assert "[FAIL] schema" in out and "tiermem reembed --embedding-model MODEL" in out
    reembed(settings)  # keeping the recorded model: every vector rebuilt with it
    after = open_memory(settings)
    assert [p.content for p in after.archive.list_passages(agent)[0]] == ["Otters hold hands while they sleep"]
    assert after.archive.search(agent, "otters sleeping").mode == "hybrid"


def test_a_copy_an_older_reembed_left_in_place_of_its_dropped_table_is_kept(settings: Settings) -> None:
    """A 0.1.0 reembed killed after dropping a table for its copy left the rows in the copy alone: it is put in
    place (nothing lost), and the store is refused until a reembed rebuilds every vector."""
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    memory.archive.insert(agent, "Otters hold hands while they sleep")
    _older_reembed_copy(settings, "passages")
    lancedb.connect(settings.store_uri()).drop_table("passages")
    with pytest.raises(ReembedUnfinishedError, match=r"tiermem 0\.1\.0"):
        open_memory(settings)
    reembed(_switched(settings))
    after = open_memory(_switched(settings))
    assert [p.content for p in after.archive.list_passages(agent)[0]] == ["Otters hold hands while they sleep"]


class _ReembedEndsAtTheListing:
    """A LanceDB connection whose table listing is followed, before the lister reads on, by the last steps of a
    reembed running in another process: its last copy put in place, then its mark cleared (``finish_reembed``)."""

    def __init__(self, db: Any, finish: Any) -> None:
        self.db, self.finish, self.listings = db, finish, 0

    def list_tables(self) -> Any:
        listed = self.db.list_tables()
        self.listings += 1
        if self.listings == 1:
            self.finish()
        return listed

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


def test_a_copy_listed_as_a_running_reembed_ends_is_not_taken_for_an_older_ones(settings: Settings) -> None:
    """A process opening the store lists the tables while a reembed's copy is still there, and the reembed then puts
    it in place and clears its mark before the process reads the meta table: the copy was that reembed's (the mark was
    read before the listing), so the store is not marked as left by tiermem 0.1.0's, and it opens."""
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    memory.archive.insert(agent, "Otters hold hands while they sleep")
    uri = settings.store_uri()
    store = Store.for_reembed(uri)
    store.reembed.begin("hashing-384", 384)  # the model the store records: its vectors stay right
    db = lancedb.connect(uri)
    db.create_table("passages__reembed", data=db.open_table("passages").to_arrow())

    def finish() -> None:
        finish_swap(db, uri, "passages")
        store.reembed.finish_reembed("hashing-384", 384)

    racing = _ReembedEndsAtTheListing(db, finish)
    settle_copies(racing, uri, reembedding=False)
    assert racing.listings >= 2  # the reembed ended after the first listing
    assert not Store.recorded_meta(uri).get("reembedding")
    assert "passages__reembed" not in set(db.list_tables().tables)
    after = open_memory(settings)
    assert [p.content for p in after.archive.list_passages(agent)[0]] == ["Otters hold hands while they sleep"]


# -- object storage: the same refusal through a lease object (moto's S3 server) -----------------------------------

pytest.importorskip("moto.server", reason="moto[server] is not installed")
from .test_object_storage import s3_config, s3_endpoint  # noqa: E402,F401  (the module's moto fixture)


def test_a_second_reembed_on_object_storage_is_refused_while_the_lease_is_held(
    tmp_path: Path,
    s3_endpoint: str,  # noqa: F811
) -> None:
    config = s3_config(tmp_path, s3_endpoint, f"reembed-{uuid.uuid4().hex[:8]}")
    on_s3 = load_settings(config=config, data_dir=tmp_path / "local")
    memory = open_memory(on_s3, start_embedder=False)
    memory.ensure_agent("default")
    memory.core.close()
    assert on_s3.uri is not None
    other = Lease(
        Bucket(on_s3.uri, on_s3.storage_options), REEMBED_LEASE, REEMBED_SECONDS, note="pid 4242 on elsewhere"
    )
    etag = other.take()  # another reembed, on another host, holds it
    assert etag is not None
    switched = load_settings(config=config, data_dir=tmp_path / "local", embedding_model="hashing-256")
    with pytest.raises(StoreBusyError, match=r"Another `tiermem reembed` is running .*pid 4242 on elsewhere"):
        reembed(switched)
    assert Store.recorded_meta(on_s3.uri, on_s3.storage_options)["embedding_model"] == "hashing-384"
    renewed = other.renew(etag)  # what its holder's thread does every third of the lease's time
    assert renewed is not None  # another holder's stale ETag renews nothing (its own: its answer was lost)
    assert Lease(other.bucket, REEMBED_LEASE, REEMBED_SECONDS).renew(etag) is None
    other.give_back(renewed)
    reembed(switched)
    assert Store.recorded_meta(on_s3.uri, on_s3.storage_options)["embedding_model"] == "hashing-256"
    assert other.take() is not None  # the reembed gave its lease back


@pytest.mark.anyio
async def test_a_tool_refused_by_a_reembed_logs_one_line_without_a_traceback(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """A write refused while a reembed runs is an expected state, not a failure: the server's log gets one line
    naming the tool and the refusal, no traceback (a storage failure keeps the library's error under it)."""
    import logging

    from mcp import Client

    from .conftest import serve_in_process, text_of

    async with Client(serve_in_process(settings), cache=None) as c:
        first = await c.call_tool("archival_memory_insert", {"content": "Otters hold hands while they sleep"})
        assert not first.is_error, text_of(first)
        Store.for_reembed(settings.store_uri()).reembed.begin("hashing-256", 256)
        with caplog.at_level(logging.WARNING, logger="tiermem.server.tools"):
            refused = await c.call_tool("archival_memory_insert", {"content": "a fact remembered meanwhile"})
    assert refused.is_error and "tiermem reembed" in text_of(refused)
    logged = [r for r in caplog.records if r.name == "tiermem.server.tools"]
    assert [r.getMessage().split(":", 1)[0] for r in logged] == ["tool archival_memory_insert refused"], logged
    assert logged[0].exc_info is None


def test_a_half_written_copy_on_object_storage_is_removed_by_the_reembed_run_again(
    tmp_path: Path,
    s3_endpoint: str,  # noqa: F811
) -> None:
    """The copy a killed reembed left half-written in the bucket (data objects, no committed version) is removed
    from the bucket by the reembed run again; other processes refuse the store meanwhile, saying to run it."""
    import boto3

    from .test_object_storage import BUCKET

    prefix = f"reembed-{uuid.uuid4().hex[:8]}"
    config = s3_config(tmp_path, s3_endpoint, prefix)
    on_s3 = load_settings(config=config, data_dir=tmp_path / "local")
    memory = open_memory(on_s3, start_embedder=False)
    agent = memory.ensure_agent("default").id
    memory.archive.insert(agent, "Otters hold hands while they sleep")
    memory.core.close()
    assert on_s3.uri is not None
    Store.for_reembed(on_s3.uri, storage_options=on_s3.storage_options).reembed.begin("hashing-256", 256)
    s3 = boto3.client(
        "s3", endpoint_url=s3_endpoint, aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1"
    )
    copy = f"{prefix}/passages__reembed.lance/"
    s3.put_object(Bucket=BUCKET, Key=f"{copy}data/killed.lance", Body=b"half a fragment")
    with pytest.raises(ReembedUnfinishedError, match="run `tiermem reembed` again"):
        open_memory(on_s3, start_embedder=False)
    assert s3.list_objects_v2(Bucket=BUCKET, Prefix=copy).get("KeyCount") == 1  # left to the reembed
    switched = load_settings(config=config, data_dir=tmp_path / "local", embedding_model="hashing-256")
    reembed(switched)
    assert s3.list_objects_v2(Bucket=BUCKET, Prefix=copy).get("KeyCount") == 0
    after = open_memory(switched, start_embedder=False)
    assert [p.content for p in after.archive.list_passages(agent)[0]] == ["Otters hold hands while they sleep"]
    after.core.close()
