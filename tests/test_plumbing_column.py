"""Whether a message is the agent loop's plumbing (``store.query.is_plumbing``) is decided when it is written, from the
row's own tool, into the messages' ``plumbing`` column: a search reads that column, never the payload (a Letta import's
holds the whole original message), and a payload merely quoting a plumbing tool's name is no plumbing. A store of
schema version 2 gets the column on its next open, its rows classified the same way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tiermem.base.config import Settings
from tiermem.domain.factory import open_memory
from tiermem.domain.memory import Memory
from tiermem.store import Filter, Store
from tiermem.store.connection import connect
from tiermem.store.schemas import SCHEMA_VERSION, table_schemas

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


def _v2_store(uri: str) -> None:
    """A store as tiermem wrote it at schema version 2 (no ``plumbing`` column), holding ``TURNS``."""
    db, _ = connect(uri, None, 8 << 20, 8 << 20)
    for name, schema in table_schemas(384).items():
        if "plumbing" in schema.names:
            schema = schema.remove(schema.get_field_index("plumbing"))
        db.create_table(name, schema=schema)
    db.open_table("meta").add(
        [
            {"key": "schema_version", "value": "2"},
            {"key": "embedding_model", "value": "hashing-384"},
            {"key": "embedding_dim", "value": "384"},
        ]
    )
    rows: list[dict[str, Any]] = [
        {
            "id": f"message-{n}",
            "agent_id": "agent-1",
            "conversation_id": "c",
            "seq": n,
            "role": role,
            "content": content,
            "payload": json.dumps(payload),
            "text": content,
            "created_us": 1_700_000_000_000_000 + n,
            "vector": None,
            "project": None,
        }
        for n, (role, content, payload) in enumerate(TURNS)
    ]
    db.open_table("messages").add(rows)


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
