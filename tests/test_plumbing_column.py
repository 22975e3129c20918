"""Whether a message is the agent loop's plumbing (``store.query.is_plumbing``) is decided when it is written, from the
row's own tool, into the messages' ``plumbing`` column: a search reads that column, never the payload (a Letta import's
holds the whole original message), and a payload merely quoting a plumbing tool's name is no plumbing. A store of
schema version 2 gets the column on its next open, its rows classified the same way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tiermem.base.config import Settings
from tiermem.base.errors import ReembedUnfinishedError
from tiermem.domain import maintenance
from tiermem.domain.factory import open_memory
from tiermem.domain.memory import Memory
from tiermem.store import Filter, Store
from tiermem.store.connection import connect
from tiermem.store.schemas import REEMBEDDING, SCHEMA_VERSION, table_schemas

QUOTED = {"name": "conversation_search"}  # the pair a payload may quote without being the loop's own search

# An answer of the agent loop filing an issue whose labels are objects (GitHub's shape), one named like the tool
FILING = {
    "kind": "assistant",
    "tool_calls": [
        {"id": "call_1", "name": "github_create_issue", "input": {"title": "Quillfeather sync", "labels": [QUOTED]}}
    ],
}
# The result of listing those labels, imported from a Letta agent file: the original message kept under ``letta``
LABELS = {
    "kind": "tool_result",
    "tool_call_id": "call_2",
    "name": "github_list_labels",
    "is_error": False,
    "letta": {
        "role": "tool",
        "name": "github_list_labels",
        "tool_call_id": "call_2",
        "tool_returns": [{"tool_call_id": "call_2", "status": "success", "func_response": {"labels": [QUOTED]}}],
    },
}
SEARCH_CALL = {"kind": "assistant", "tool_calls": [{"id": "call_3", "name": "conversation_search", "input": {}}]}
SEARCH_RESULT = {"kind": "tool_result", "tool_call_id": "call_3", "name": "conversation_search", "is_error": False}
SENT = {"kind": "tool_result", "tool_call_id": "call_4", "name": "send_message", "is_error": False}

TURNS = [
    ("user", "Please file the Quillfeather sync issue.", {"kind": "user"}),
    ("assistant", "Filing the Quillfeather sync issue now.", FILING),
    ("tool", "Quillfeather labels: sync, conversation_search", LABELS),
    ("assistant", "Searching Quillfeather history", SEARCH_CALL),
    ("tool", "Quillfeather search hits", SEARCH_RESULT),
    ("tool", "Quillfeather sent", SENT),
]
PLUMBING = {"Searching Quillfeather history", "Quillfeather search hits", "Quillfeather sent"}
REAL = {"Please file the Quillfeather sync issue.", "Filing the Quillfeather sync issue now."}


def _contents(mem: Memory, agent_id: str, roles: list[str] | None) -> set[str]:
    return {h.content for h in mem.archive.conversation_search(agent_id, "Quillfeather", roles=roles, limit=20).hits}


def _check_found(mem: Memory, agent_id: str) -> None:
    # the messages quoting the pair are found, by a search of what was said and by one of tool results
    assert _contents(mem, agent_id, None) == REAL
    assert _contents(mem, agent_id, ["user", "assistant", "tool"]) == REAL | {TURNS[2][1]}
    assert _contents(mem, agent_id, ["tool"]) == {TURNS[2][1]}


def test_a_payload_quoting_a_plumbing_tools_name_is_found(settings: Settings) -> None:
    mem = open_memory(settings)
    agent = mem.ensure_agent("default")
    mem.archive.log_messages(agent.id, [{"role": r, "content": c, "payload": json.dumps(p)} for r, c, p in TURNS])
    stored = mem.archive.store.conn.rows("messages", Filter(agent_id=agent.id), columns=("content", "plumbing"))
    assert {r["content"] for r in stored if r["plumbing"]} == PLUMBING
    _check_found(mem, agent.id)


def _v2_schema(name: str) -> pa.Schema:
    schema = table_schemas(384)[name]
    return schema.remove(schema.get_field_index("plumbing")) if "plumbing" in schema.names else schema


def _v2_store(uri: str, turns: list[tuple[str, str, str]] | None = None, meta: dict[str, str] | None = None) -> None:
    """A store as tiermem wrote it at schema version 2 (no ``plumbing`` column), holding ``TURNS`` (or ``turns``:
    role, content and payload text), its meta table holding ``meta`` too."""
    db, _ = connect(uri, None, 8 << 20, 8 << 20)
    for name in table_schemas(384):
        db.create_table(name, schema=_v2_schema(name))
    entries = {"schema_version": "2", "embedding_model": "hashing-384", "embedding_dim": "384", **(meta or {})}
    db.open_table("meta").add([{"key": k, "value": v} for k, v in entries.items()])
    db.open_table("messages").add(pa.Table.from_pylist(_v2_rows(turns), schema=_v2_schema("messages")))


def _v2_rows(turns: list[tuple[str, str, str]] | None = None, first: int = 0) -> list[dict[str, Any]]:
    """Messages as a tiermem of schema version 2 writes them (no ``plumbing``)."""
    turns = turns if turns is not None else [(r, c, json.dumps(p)) for r, c, p in TURNS]
    return [
        {
            "id": f"message-{n}",
            "agent_id": "agent-1",
            "conversation_id": "c",
            "seq": n,
            "role": role,
            "content": content,
            "payload": payload,
            "text": content,
            "created_us": 1_700_000_000_000_000 + n,
            "vector": None,
            "project": None,
        }
        for n, (role, content, payload) in enumerate(turns, start=first)
    ]


def test_a_version_2_store_gets_the_column_with_its_rows_classified_exactly(tmp_path: Path) -> None:
    uri = str(tmp_path / "db")
    _v2_store(uri)
    store = Store(uri, embedding_model="hashing-384", embedding_dim=384)
    assert store.conn.meta()["schema_version"] == str(SCHEMA_VERSION) == "3"
    stored = store.conn.rows("messages", columns=("content", "plumbing"))
    assert {r["content"]: r["plumbing"] for r in stored} == {c: c in PLUMBING for _, c, _ in TURNS}
    tool_rows = store.rows.count("messages", Filter(roles=("tool",), plumbing_results=False))
    assert tool_rows == 1  # the imported labels, not the loop's search and send_message results
    again = Store(uri, embedding_model="hashing-384", embedding_dim=384)  # opened again: nothing to do
    assert again.conn.meta()["schema_version"] == "3" and again.rows.count("messages") == len(TURNS)


# Payloads naming send_message as their own tool in ways a pattern over the text may miss: a space before the colon,
# an escaped character in the name, the key escaped
ODDLY_WRITTEN = [
    ("tool", "Quillfeather spaced", '{"kind": "tool_result", "name" : "send_message"}'),
    ("tool", "Quillfeather escaped", '{"kind": "tool_result", "name": "send\\u005fmessage"}'),
    ("tool", "Quillfeather key escaped", '{"kind": "tool_result", "n\\u0061me": "conversation_search"}'),
    ("assistant", "Quillfeather call", '{"tool_calls": [{"name":"conversation\\u005Fsearch", "input": {}}]}'),
    ("tool", "Quillfeather other tool", '{"kind": "tool_result", "name": "web_search", "note": "caf\\u00e9"}'),
]


def test_the_migration_decides_each_row_as_is_plumbing_does(tmp_path: Path) -> None:
    uri = str(tmp_path / "db")
    _v2_store(uri, ODDLY_WRITTEN)
    store = Store(uri, embedding_model="hashing-384", embedding_dim=384)
    stored = store.conn.rows("messages", columns=("content", "plumbing"))
    assert {r["content"]: r["plumbing"] for r in stored} == {c: "other" not in c for _, c, _ in ODDLY_WRITTEN}


def _columns(uri: str, table: str) -> list[str]:
    db, _ = connect(uri, None, 8 << 20, 8 << 20)
    return list(db.open_table(table).schema.names)


def test_a_store_a_reembed_marked_is_refused_before_it_is_migrated(tmp_path: Path) -> None:
    """An older tiermem's reembed rewrites the tables with its own schema: a column added meanwhile would be lost
    in its copies while the store says version 3. So the store is refused, and left as it is."""
    uri = str(tmp_path / "db")
    _v2_store(uri, meta={REEMBEDDING: "hashing-384 (dim 384)"})
    with pytest.raises(ReembedUnfinishedError):
        Store(uri, embedding_model="hashing-384", embedding_dim=384)
    db, _ = connect(uri, None, 8 << 20, 8 << 20)
    meta = {r["key"]: r["value"] for r in db.open_table("meta").to_arrow().to_pylist()}
    assert meta["schema_version"] == "2" and "plumbing" not in _columns(uri, "messages")


def test_a_store_at_version_3_without_its_columns_gets_them_again(tmp_path: Path) -> None:
    """What an older tiermem's reembed leaves when it swaps in its copies after the store was migrated: the store
    says version 3 and its tables lack the columns. The next open adds them again and decides the plumbing."""
    uri = str(tmp_path / "db")
    _v2_store(uri)
    Store(uri, embedding_model="hashing-384", embedding_dim=384)
    db, _ = connect(uri, None, 8 << 20, 8 << 20)
    db.open_table("messages").drop_columns(["plumbing", "project"])
    db.open_table("passages").drop_columns(["project"])
    store = Store(uri, embedding_model="hashing-384", embedding_dim=384)
    assert store.conn.meta()["schema_version"] == "3"
    assert {"plumbing", "project"} <= set(_columns(uri, "messages")) and "project" in _columns(uri, "passages")
    stored = store.conn.rows("messages", columns=("content", "plumbing", "project"))
    assert {r["content"]: r["plumbing"] for r in stored} == {c: c in PLUMBING for _, c, _ in TURNS}
    assert store.rows.count("messages", Filter(roles=("tool",), plumbing_results=False)) == 1


def test_rows_an_older_tiermem_writes_after_the_migration_are_decided(settings: Settings) -> None:
    """A server of schema version 2 still running writes rows without the column (null): tiermem optimize decides
    them, and so does the migration run again (a migration cut short before an older tiermem wrote)."""
    mem = open_memory(settings)
    agent = mem.ensure_agent("default")
    table = mem.archive.store.conn.tables["messages"]
    rows = [{**r, "agent_id": agent.id} for r in _v2_rows()]
    table.add(pa.Table.from_pylist(rows, schema=_v2_schema("messages")))

    def undecided() -> int:
        return sum(r["plumbing"] is None for r in mem.archive.store.conn.rows("messages", columns=("plumbing",)))

    assert undecided() == len(TURNS)
    assert _contents(mem, agent.id, ["tool"]) != {TURNS[2][1]}  # the loop's results shown
    maintenance.optimize(mem)
    _check_found(mem, agent.id)
    assert undecided() == 0
    assert mem.archive.store.rows.settle_plumbing() == 0  # nothing left: a count


def test_a_migration_run_again_decides_the_rows_written_since(tmp_path: Path) -> None:
    uri = str(tmp_path / "db")
    _v2_store(uri)
    Store(uri, embedding_model="hashing-384", embedding_dim=384)
    db, _ = connect(uri, None, 8 << 20, 8 << 20)
    # a migration cut short before it recorded the version, and an older tiermem writing meanwhile
    db.open_table("meta").update(where="key = 'schema_version'", values={"value": "2"})
    more = [(r, f"{c} again", json.dumps(p)) for r, c, p in TURNS]
    db.open_table("messages").add(pa.Table.from_pylist(_v2_rows(more, first=10), schema=_v2_schema("messages")))
    store = Store(uri, embedding_model="hashing-384", embedding_dim=384)
    assert store.conn.meta()["schema_version"] == "3"
    stored = store.conn.rows("messages", columns=("content", "plumbing"))
    assert {r["content"]: r["plumbing"] for r in stored} == {
        **{c: c in PLUMBING for _, c, _ in TURNS},
        **{f"{c} again": c in PLUMBING for _, c, _ in TURNS},
    }


def test_a_servers_background_upkeep_decides_rows_an_older_tiermem_wrote(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A running server's own upkeep (``optimize_in_background``, what its writes schedule) decides rows a server of
    schema version 2 wrote without the column, a bounded number a round, and unmarks the store: their keyword texts
    may hold a tool's result, which ``recontext`` rewrites."""
    from tiermem.store import schemas

    monkeypatch.setattr(schemas, "PLUMBING_ROUND", 4)  # read by the store at each round
    mem = open_memory(settings)
    agent = mem.ensure_agent("default")
    store = mem.archive.store
    assert mem.archive.rows.keyword_contexts_settled()
    rows = [{**r, "agent_id": agent.id} for r in _v2_rows()]
    store.conn.tables["messages"].add(pa.Table.from_pylist(rows, schema=_v2_schema("messages")))

    def undecided() -> int:
        return sum(r["plumbing"] is None for r in store.conn.rows("messages", columns=("plumbing",)))

    assert undecided() == len(TURNS)
    first = store.indexes.optimize_in_background()
    assert first["plumbing"] == "4 message(s) an older tiermem wrote decided"
    assert undecided() == len(TURNS) - 4  # bounded: the rest wait for the next round
    assert not mem.archive.rows.keyword_contexts_settled()
    store.indexes.optimize_in_background()
    assert undecided() == 0
    _check_found(mem, agent.id)
    assert "plumbing" not in store.indexes.optimize_in_background()  # nothing left: a count, nothing written


def test_a_recontext_under_way_does_not_mark_the_store_an_upkeep_unmarked(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows an older tiermem wrote after ``recontext`` read the turns, decided by a server's upkeep before it marks
    the store: the store stays unmarked, so the next ``recontext`` looks at them."""
    from tiermem.domain import keyword_context

    mem = open_memory(settings)
    agent = mem.ensure_agent("default")
    store = mem.archive.store
    mem.archive.rows.unsettle_keyword_contexts()
    turns = mem.archive.rows.turns

    def read_then_older_server_writes() -> list[dict[str, Any]]:
        read = turns()
        rows = [{**r, "agent_id": agent.id} for r in _v2_rows()]
        store.conn.tables["messages"].add(pa.Table.from_pylist(rows, schema=_v2_schema("messages")))
        assert store.rows.settle_plumbing_round() == len(TURNS)  # the server's upkeep, between the read and the mark
        return read

    monkeypatch.setattr(mem.archive.rows, "turns", read_then_older_server_writes)
    keyword_context.recontext(mem.archive)
    assert not mem.archive.rows.keyword_contexts_settled()
    monkeypatch.setattr(mem.archive.rows, "turns", turns)
    keyword_context.recontext(mem.archive)  # the next run looks at every row, and marks the store
    assert mem.archive.rows.keyword_contexts_settled()


def test_a_background_round_that_failed_is_tried_again_by_the_next_upkeep(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A background upkeep whose round of deciding failed (a store error: a lease not had, a commit lost) leaves the
    rows undecided, and the next upkeep tries again, though no commit changed messages since (the first upkeep
    compacted them: only a change would make it count the undecided rows again otherwise)."""
    from tiermem.base.errors import StoreBusyError

    mem = open_memory(settings)
    agent = mem.ensure_agent("default")
    store = mem.archive.store
    rows = [{**r, "agent_id": agent.id} for r in _v2_rows()]
    store.conn.tables["messages"].add(pa.Table.from_pylist(rows, schema=_v2_schema("messages")))
    settle = store.rows.settle_plumbing

    def busy(limit: int | None = None) -> int:
        raise StoreBusyError("the messages table is busy")

    monkeypatch.setattr(store.rows, "settle_plumbing", busy)
    assert store.indexes.optimize_in_background()["plumbing"] == "retry later: the messages table is busy"
    monkeypatch.setattr(store.rows, "settle_plumbing", settle)
    assert (
        store.indexes.optimize_in_background()["plumbing"] == f"{len(TURNS)} message(s) an older tiermem wrote decided"
    )
    assert not store.rows.count("messages", Filter(undecided=True))
    _check_found(mem, agent.id)


def test_optimize_unmarks_the_store_under_the_keyword_texts_lock(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tiermem optimize`` deciding rows an older tiermem wrote unmarks the store under the lock a ``recontext``
    compares and marks it under (``keyword_context_unmarked``), as a server's upkeep does: another ``optimize``'s
    ``recontext`` cannot mark the store between this one's change of that key and its unmarking."""
    import fcntl

    from tiermem.store import TEXTS_LOCK

    mem = open_memory(settings)
    agent = mem.ensure_agent("default")
    conn = mem.archive.store.conn
    rows = [{**r, "agent_id": agent.id} for r in _v2_rows()]
    conn.tables["messages"].add(pa.Table.from_pylist(rows, schema=_v2_schema("messages")))
    real, held = conn.unsettle_keyword_contexts, []

    def unsettle() -> None:
        with open(conn._local(f".tiermem-{TEXTS_LOCK}.lock"), "a+") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held.append(True)
            else:
                fcntl.flock(f, fcntl.LOCK_UN)
                held.append(False)
        real()

    monkeypatch.setattr(conn, "unsettle_keyword_contexts", unsettle)
    maintenance.optimize(mem)
    assert held and all(held), held
    assert mem.archive.rows.keyword_contexts_settled()  # its own recontext marked it again
