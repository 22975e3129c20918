"""`tiermem reembed` against other writers and interruptions: every searchable table re-embedded (folder files
too), no write lost or silently mixed with another model's vectors, an unfinished reembed never taken for a whole
store."""

from __future__ import annotations

import uuid
from pathlib import Path

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


def test_a_copy_a_running_reembed_wrote_is_left_to_it_when_another_process_opens_the_store(settings: Settings) -> None:
    """Opening a store finishes the swap of a table copy an interrupted reembed left; a copy of a reembed that is
    still running is its own to swap (two swaps of one table would race): left alone while its run lock is held."""
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    memory.archive.insert(agent, "Otters hold hands while they sleep")
    conn = memory.archive.store.conn
    conn.db.create_table("passages__reembed", data=conn.db.open_table("passages").to_arrow())
    uri = settings.store_uri()
    with locked_unless_held(Path(uri) / REEMBED_RUN_LOCK_FILE, "pid 4242, started earlier") as holder:
        assert holder is None
        open_memory(settings)
        assert "passages__reembed" in conn.table_names()  # the running reembed's to swap
    open_memory(settings)  # its run is gone (it died): this open finishes the swap
    assert "passages__reembed" not in conn.table_names()


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
    assert renewed is not None and other.renew(etag) is None  # a stale ETag renews nothing
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
