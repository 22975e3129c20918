"""Import and export: Letta agent files (the public examples, both formats), round trips, jsonl backups,
the reference memory server's graph, /memories directories; idempotent re-imports; bad files change nothing."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tiermem.agent.llm import to_api_messages
from tiermem.base.config import Settings, load_settings
from tiermem.base.errors import ValidationError
from tiermem.base.records import Message
from tiermem.domain.factory import open_memory
from tiermem.domain.memory import Memory
from tiermem.interop import af_export, agentfile, letta_messages
from tiermem.interop.commands import run_export, run_import

from .cli_inproc import run_cli
from .conftest import ROOT
from .test_secrets import AKIA, GHP

FIXTURES = ROOT / "tests" / "fixtures" / "agent-file"


def fresh(tmp_path: Path, name: str = "data") -> Memory:
    return open_memory(load_settings(data_dir=tmp_path / name, embedding_model="hashing"))


@pytest.fixture
def mem(settings: Settings) -> Memory:
    return open_memory(settings)


def load(name: str) -> dict:
    data, _ = agentfile.load_json(FIXTURES / name)
    return data


def counts(memory: Memory) -> dict[str, int]:
    return {t: memory.archive.store.rows.count(t) for t in ("agents", "blocks", "attachments", "messages", "passages")}


@pytest.mark.parametrize("name", ["memgpt_agent_with_convo.af", "customer_service.af", "loop.af", "evie.af"])
def test_public_examples_import_with_blocks_messages_and_system(mem: Memory, name: str) -> None:
    data = load(name)
    report = run_import(mem, FIXTURES / name, fmt="auto", agent="default", rename=None, replace=False)
    assert report["format"] == "af" and len(report["imported"]) == len(data["agents"])
    blocks = {b["id"]: b for b in data["blocks"]}
    for source, imported_name in zip(data["agents"], report["imported"], strict=True):
        agent = mem.get_agent(imported_name)
        assert agent.system == source["system"]
        got = {b.label: b for b in mem.blocks(agent.id)}
        for ref in source["block_ids"]:
            want = blocks[ref]
            assert got[want["label"]].value == want["value"]
            assert got[want["label"]].read_only == bool(want.get("read_only"))
        stored = mem.archive.rows.messages_of(agent.id)
        assert len(stored) == sum(1 for m in source["messages"] if m["role"] != "system")
        assert [m.seq for m in stored] == sorted(m.seq for m in stored)
        assert agent.metadata["agent_type"] in ("letta_v1", "memgpt")


def test_sleeptime_group_and_shared_blocks(mem: Memory) -> None:
    report = run_import(mem, FIXTURES / "evie.af", fmt="af", agent="default", rename=None, replace=False)
    data = load("evie.af")
    group = data["groups"][0]["manager_config"]
    main = next(a for a in data["agents"] if a["id"] == group["manager_agent_id"])
    other = next(a for a in data["agents"] if a["id"] != main["id"])
    main_agent = mem.get_agent(main["name"])
    assert main_agent.metadata["sleeptime_frequency"] == str(group["sleeptime_agent_frequency"])
    sleeper = mem.get_agent(report["imported"][1] if report["imported"][0] == main["name"] else report["imported"][0])
    assert (
        sleeper.metadata["letta_sleeptime_of"] == main["name"]
        and sleeper.metadata["letta_agent_type"] == "sleeptime_agent"
    )
    shared = set(main["block_ids"]) & set(other["block_ids"])
    assert shared
    ids_main = {b.label: b.id for b in mem.blocks(main_agent.id)}
    ids_other = {b.label: b.id for b in mem.blocks(sleeper.id)}
    labels = {b["id"]: b["label"] for b in data["blocks"]}
    for ref in shared:  # one block, attached to both agents: an edit through one is seen by the other
        assert ids_main[labels[ref]] == ids_other[labels[ref]]
    assert len(mem.core.agents_of_block(ids_main[labels[next(iter(shared))]])) == 2


def test_unsupported_parts_are_reported_and_kept(mem: Memory) -> None:
    report = run_import(mem, FIXTURES / "customer_service.af", fmt="af", agent="default", rename=None, replace=False)
    agent = mem.get_agent(report["imported"][0])
    kept = json.loads(agent.metadata["letta_unsupported"])
    data = load("customer_service.af")
    custom = {t["name"] for t in data["tools"]} - agentfile.KNOWN_TOOLS
    assert custom and set(kept["tools"]) == custom
    note = next(n for n in report["notes"] if "not run by tiermem" in n)
    assert all(name in note for name in custom) and "tiermem agents show" in note


def test_older_single_agent_format(mem: Memory) -> None:
    data = load("memgpt_agent_with_convo_v1.af")
    assert "core_memory" in data and "agents" not in data
    report = run_import(
        mem, FIXTURES / "memgpt_agent_with_convo_v1.af", fmt="af", agent="default", rename=None, replace=False
    )
    agent = mem.get_agent(report["imported"][0])
    assert agent.metadata["agent_type"] == "memgpt"
    assert {b.label: b.value for b in mem.blocks(agent.id)} == {b["label"]: b["value"] for b in data["core_memory"]}
    stored = mem.archive.rows.messages_of(agent.id)
    users = [m for m in stored if m.role == "user" and json.loads(m.payload)["kind"] == "user"]
    # Letta's JSON wrapper around user messages is unwrapped; heartbeats keep their kind.
    assert users and not users[0].content.lstrip().startswith("{")
    calls = [c for m in stored if m.role == "assistant" for c in json.loads(m.payload)["tool_calls"]]
    assert calls and all(isinstance(c["input"], dict) for c in calls) and "send_message" in {c["name"] for c in calls}
    in_context = sum(1 for m in data["messages"] if m.get("in_context") and m["role"] != "system")
    window = mem.context_window(agent.id, "default")
    assert len(mem.in_context_messages(window)) == in_context
    found = mem.archive.conversation_search(agent.id, "virtual world", limit=3)  # type: ignore[union-attr]
    assert found.hits


def test_send_message_replies_are_the_assistant_text_recall_searches(mem: Memory) -> None:
    # Letta's sample MemGPT agent answers with send_message only: what it said is found (with roles=["assistant"]
    # too), as Letta's conversation_search reads it; the model is shown its inner thoughts and the call, as before.
    report = run_import(
        mem, FIXTURES / "test_agent_with_files_and_sources.af", fmt="af", agent="default", rename="fs", replace=False
    )
    agent = mem.get_agent(report["imported"][0])
    found = mem.conversation_search(
        agent.id, "More human than human is our motto", roles=["assistant"], limit=3, start_date=None, end_date=None
    )
    assert found.hits[0].content == "More human than human is our motto."
    row = next(m for m in mem.archive.rows.messages_of(agent.id) if m.content == "More human than human is our motto.")
    turn = next(t for t in to_api_messages([row]) if t["role"] == "assistant")
    assert [b.get("text") or b.get("input") for b in turn["content"]] == [
        "Bootup sequence complete. Persona activated. Testing messaging functionality.",
        {"message": "More human than human is our motto."},
    ]
    # A reply logged by tiermem's own loop goes out as Letta's message (the model's text, the call) and comes back.
    native = Message(
        "message-x", agent.id, "default", 1, "assistant", "Tea it is.", row.created_at,
        json.dumps({"kind": "assistant", "tool_calls": [{"id": "c1", "name": "send_message",
                    "input": {"message": "Tea it is."}}], "model_text": "User wants tea."}),
    )  # fmt: skip
    out = af_export._letta_message(native)
    assert out["content"] == [{"type": "text", "text": "User wants tea."}]
    back = letta_messages.message_row(out, 0, "fs")
    assert back is not None and (back["content"], back["payload"]) == (native.content, native.payload)


def test_an_import_says_what_it_redacted_per_place_and_kind(mem: Memory, tmp_path: Path) -> None:
    # Credentials are redacted as a file enters memory (docs/security.md); the report names each place and kind
    # with its count (never the secret), in the text and --json report alike (both print report["notes"]).
    data = load("test_agent_with_files_and_sources.af")
    agent = data["agents"][0]
    agent["system"] += f" Use {GHP}."
    data["tools"][0]["source_code"] = f"def conversation_search(q):\n    TOKEN = '{GHP}'\n    return q\n"
    next(b for b in data["blocks"] if b["label"] == "human")["value"] += f" key {AKIA} and {GHP}"
    user = next(m for m in agent["messages"] if m["role"] == "user")
    user["content"] = [{"type": "text", "text": f"my token is {GHP}"}]
    data["files"][0]["content"] = f"token {GHP}"
    path = tmp_path / "secrets.af"
    path.write_text(json.dumps(data))
    report = run_import(mem, path, fmt="af", agent="default", rename="sec", replace=False)
    said = sorted(n for n in report["notes"] if "redacted" in n)
    assert said == sorted(
        [
            "sec: credentials redacted in the system prompt: GitHub token (1), each now [redacted: GitHub token]",
            "sec: credentials redacted in tools[conversation_search].source_code: GitHub token (1), each now "
            "[redacted: GitHub token]",
            "sec: credentials redacted in block 'human': GitHub token (1), each now [redacted: GitHub token]",
            "sec: credentials redacted in block 'human': AWS access key (1), each now [redacted: AWS access key]",
            "sec: credentials redacted in messages: GitHub token (1 message), each now [redacted: GitHub token]",
            "folder 'test_disk_export_source': credentials redacted in file 'test.txt': GitHub token (1), each now "
            "[redacted: GitHub token]",
        ]
    )
    assert GHP not in json.dumps(report)


def test_an_agents_timezone_reads_and_shows_the_search_tools_dates(mem: Memory, tmp_path: Path) -> None:
    # As Letta: a date without a zone is in the agent's timezone (00:30 on 2 June in Paris is 1 June in UTC), and
    # results show their times in it; an agent without one, or with a name that is no zone, stays in UTC.
    data = load("test_agent_with_files_and_sources.af")
    agent = data["agents"][0]
    agent["timezone"] = "Europe/Paris"
    user = next(m for m in agent["messages"] if m["role"] == "user")
    user["content"] = [{"type": "text", "text": "Midnight thought: the loom inspired the engine."}]
    user["created_at"] = "2025-06-01T22:30:00+00:00"
    passage = {"content": "The loom used punched cards.", "tags": [], "created_at": "2025-06-01T22:40:00+00:00"}
    data["tiermem"] = {"passages": {agent["id"]: [passage]}}
    (tmp_path / "paris.af").write_text(json.dumps(data))
    agent["timezone"] = "Mars/Olympus"
    (tmp_path / "mars.af").write_text(json.dumps(data))

    def days(name: str) -> dict[str, list[str]]:
        a = mem.get_agent(name)
        found = {}
        for day in ("2025-06-01", "2025-06-02"):
            turns = mem.conversation_search(a.id, "loom", roles=["user"], limit=5, start_date=day, end_date=day)
            passages = mem.archival_search(
                a.id, "loom", tags=None, tag_match_mode="any", top_k=5, start_datetime=day, end_datetime=day
            )
            found[day] = [h.created_at.isoformat() for h in turns.hits if "loom" in h.content]
            found[day] += [h.created_at.isoformat() for h in passages.hits]
        return found

    run_import(mem, tmp_path / "paris.af", fmt="af", agent="default", rename="paris", replace=False)
    assert days("paris") == {"2025-06-01": [], "2025-06-02": ["2025-06-02T00:30:00+02:00", "2025-06-02T00:40:00+02:00"]}
    report = run_import(mem, tmp_path / "mars.af", fmt="af", agent="default", rename="mars", replace=False)
    assert any("timezone 'Mars/Olympus' is not an IANA time zone" in n for n in report["notes"])
    assert days("mars") == {"2025-06-01": ["2025-06-01T22:30:00+00:00", "2025-06-01T22:40:00+00:00"], "2025-06-02": []}


def test_reimport_is_idempotent_and_clashes_are_refused(mem: Memory) -> None:
    path = FIXTURES / "memgpt_agent_with_convo.af"
    run_import(mem, path, fmt="af", agent="default", rename=None, replace=False)
    before = counts(mem)
    again = run_import(mem, path, fmt="af", agent="default", rename=None, replace=False)
    assert again["imported"] == [] and len(again["skipped"]) == 1 and counts(mem) == before
    # The same name from another file is refused unless renamed or replaced.
    other = json.loads(path.read_text())
    other["blocks"][0]["value"] += "\nchanged"
    changed = Path(mem.archive.store.uri).parent / "changed.af"
    changed.write_text(json.dumps(other))
    with pytest.raises(ValidationError, match="already exists.*--rename NEW.*--replace"):
        run_import(mem, changed, fmt="af", agent="default", rename=None, replace=False)
    assert counts(mem) == before
    renamed = run_import(mem, changed, fmt="af", agent="default", rename="copy", replace=False)
    assert renamed["imported"] == ["copy"]
    name = other["agents"][0]["name"]
    run_import(mem, changed, fmt="af", agent="default", rename=None, replace=True)
    replaced = mem.get_agent(name)
    assert any(b.value.endswith("changed") for b in mem.blocks(replaced.id))
    assert len(mem.list_agents()) == 2


def test_bad_files_change_nothing(mem: Memory, tmp_path: Path) -> None:
    before = counts(mem)
    broken = tmp_path / "broken.af"
    broken.write_text("{not json")
    with pytest.raises(ValidationError, match="not a JSON agent file"):
        run_import(mem, broken, fmt="af", agent="default", rename=None, replace=False)
    data = load("evie.af")
    data["agents"][1]["block_ids"].append("block-999")  # the second agent is bad: the first must not be written
    bad = tmp_path / "bad.af"
    bad.write_text(json.dumps(data))
    with pytest.raises(ValidationError, match="block-999"):
        run_import(mem, bad, fmt="af", agent="default", rename=None, replace=False)
    data = load("loop.af")
    data["blocks"][0]["label"] = "../etc"
    bad.write_text(json.dumps(data))
    with pytest.raises(ValidationError):
        run_import(mem, bad, fmt="af", agent="default", rename=None, replace=False)
    assert counts(mem) == before


def _populate(mem: Memory) -> str:
    from tiermem.base.config import BlockSpec
    from tiermem.base.records import ContextWindow

    agent = mem.create_agent("orig", system="You are Orig.")
    mem.create_block(
        agent.id,
        BlockSpec(label="project", value="Ship v2 in March.", limit=300, description="the project", read_only=True),
    )
    archive = mem.archive
    assert archive is not None
    rows = archive.log_messages(
        agent.id,
        [
            {
                "role": "user",
                "content": "old chatter",
                "payload": json.dumps({"kind": "user"}),
                "timestamp": "2026-01-02T10:00:00Z",
                "project": "/repo/x",  # a hook logged it in this project
            },
            {
                "role": "system",
                "content": "Note: prior messages ... summary: the user likes tea.",
                "payload": json.dumps({"kind": "summary"}),
            },
            {
                "role": "assistant",
                "content": "Noting that.",
                "payload": json.dumps(
                    {
                        "kind": "assistant",
                        "tool_calls": [
                            {
                                "id": "toolu_1",
                                "name": "memory_insert",
                                "input": {"label": "human", "new_str": "Likes tea"},
                            }
                        ],
                    }
                ),
            },
            {
                "role": "tool",
                "content": json.dumps({"status": "OK", "message": "Likes tea", "time": "t"}),
                "payload": json.dumps(
                    {"kind": "tool_result", "tool_call_id": "toolu_1", "name": "memory_insert", "is_error": False}
                ),
            },
            {"role": "user", "content": "side thread", "conversation_id": "other"},
        ],
    )
    mem.set_context_window(ContextWindow(agent.id, "default", start_seq=rows[2].seq, summary_id=rows[1].id))
    archive.insert(agent.id, "The launch is on 3 March.", tags=["dates", "launch"], project="/repo/x")
    archive.insert(agent.id, "Ada prefers tea.")
    return agent.id


def _snapshot(mem: Memory, name: str) -> dict:
    agent = mem.get_agent(name)
    window = mem.context_window(agent.id, "default")
    passages, _ = mem.archive.list_passages(agent.id, offset=0, limit=100)  # type: ignore[union-attr]
    return {
        "system": agent.system,
        "blocks": sorted((b.label, b.value, b.limit, b.description, b.read_only) for b in mem.blocks(agent.id)),
        "messages": [
            (m.conversation_id, m.role, m.content, m.payload, m.created_at, m.project)
            for m in mem.archive.rows.messages_of(agent.id)
        ],
        "window": [m.content for m in mem.in_context_messages(window)],
        "passages": sorted((p.content, p.tags, p.created_at, p.project or "") for p in passages),
    }


def test_agent_file_round_trip_loses_nothing(mem: Memory, tmp_path: Path) -> None:
    _populate(mem)
    out = tmp_path / "orig.af"
    run_export(mem, agent="orig", fmt="af", output=str(out), vectors=False)
    exported = json.loads(out.read_text())
    assert set(exported) >= {"agents", "groups", "blocks", "files", "sources", "tools", "mcp_servers", "metadata"}
    assert exported["agents"][0]["in_context_message_ids"][0] == "message-0"
    other = fresh(tmp_path, "other")
    run_import(other, out, fmt="auto", agent="default", rename=None, replace=False)
    assert _snapshot(other, "orig") == _snapshot(mem, "orig")
    # and a second hop (export the import, import again) is still identical
    again = tmp_path / "again.af"
    run_export(other, agent="orig", fmt="af", output=str(again), vectors=False)
    third = fresh(tmp_path, "third")
    run_import(third, again, fmt="af", agent="default", rename=None, replace=False)
    assert _snapshot(third, "orig") == _snapshot(mem, "orig")


def test_exported_agents_carry_the_model_settings_letta_requires(mem: Memory, tmp_path: Path) -> None:
    # Letta refuses to create an agent without llm_config and embedding_config.
    _populate(mem)
    native = af_export.export_agent_files(mem, ["orig"])[0]["agents"][0]
    assert {"model", "model_endpoint_type", "context_window"} <= set(native["llm_config"])
    assert {"embedding_endpoint_type", "embedding_model", "embedding_dim"} <= set(native["embedding_config"])
    for name, agent in (("loop.af", "Loop"), ("memgpt_agent_with_convo_v1.af", None)):
        original = load(name)
        source = original["agents"][0] if "agents" in original else original
        run_import(mem, FIXTURES / name, fmt="af", agent="default", rename=None, replace=False)
        exported = af_export.export_agent_files(mem, [agent or source["name"]])[0]["agents"][0]
        assert exported["llm_config"] == source["llm_config"]
        assert exported["embedding_config"] == source["embedding_config"]


def test_jsonl_backup_restores_everything_once(mem: Memory, tmp_path: Path) -> None:
    _populate(mem)
    mem.edit(
        mem.get_agent("orig").id, "human", __import__("tiermem.domain.blocks", fromlist=["Append"]).Append("Name: Ada")
    )
    out = tmp_path / "backup.jsonl"
    report = run_export(mem, agent=None, fmt="jsonl", output=str(out), vectors=True)
    assert report["rows"]["passages"] == 2
    other = fresh(tmp_path, "restored")
    inserted = run_import(other, out, fmt="auto", agent="default", rename=None, replace=False)["inserted"]
    assert inserted["agents"] == 1 and inserted["block_history"] >= 3
    assert _snapshot(other, "orig") == _snapshot(mem, "orig")
    assert [v.value for v in other.history(other.get_agent("orig").id, "human")] == [
        v.value for v in mem.history(mem.get_agent("orig").id, "human")
    ]
    assert other.archive.vectors.missing()["passages"] == 0  # same model: vectors kept
    again = run_import(other, out, fmt="jsonl", agent="default", rename=None, replace=False)["inserted"]
    assert sum(again.values()) == 0
    hits = other.archive.search(other.get_agent("orig").id, "when is the launch")  # type: ignore[union-attr]
    assert "3 March" in hits.hits[0].content


def test_a_backup_holding_credentials_is_restored_as_saved_and_says_so(mem: Memory, tmp_path: Path) -> None:
    token = "ghp_" + "Zq3xW9vB7nM2kL5jH8gF4dS1aP6oI0uY2tR4"  # split: no scanner flags this file
    mem.secret_scan = False  # a store kept with scanning off
    agent = mem.ensure_agent("orig").id
    mem.archival_insert(agent, f"the deploy token is {token}", None)
    mem.archival_insert(agent, "a plain fact", None)
    out = tmp_path / "backup.jsonl"
    run_export(mem, agent=None, fmt="jsonl", output=str(out), vectors=False)
    other = fresh(tmp_path, "restored")
    report = run_import(other, out, fmt="jsonl", agent="default", rename=None, replace=False)
    assert report["inserted"]["passages"] == 2
    assert report["notes"] == [
        "the backup holds credentials in 1 row(s) (passages: 1), restored as they were saved; remove them with "
        "`tiermem doctor --secrets --redact --yes`"
    ]
    assert token not in " ".join(report["notes"])
    clean = tmp_path / "clean.jsonl"
    fourth = fresh(tmp_path, "fourth")
    fourth.archival_insert(fourth.ensure_agent("orig").id, "nothing secret here", None)
    run_export(fourth, agent=None, fmt="jsonl", output=str(clean), vectors=False)
    assert (
        run_import(fresh(tmp_path, "third"), clean, fmt="jsonl", agent="default", rename=None, replace=False)["notes"]
        == []
    )


def test_memory_graph_import(mem: Memory, tmp_path: Path) -> None:
    graph = tmp_path / "memory.jsonl"
    graph.write_text(
        "\n".join(
            json.dumps(x)
            for x in [
                {
                    "type": "entity",
                    "name": "Ada",
                    "entityType": "person",
                    "observations": ["Prefers tea", "Works on compilers"],
                },
                {"type": "entity", "name": "Lyon", "entityType": "city", "observations": []},
                {"type": "relation", "from": "Ada", "to": "Lyon", "relationType": "lives_in"},
            ]
        )
        + "\n"
    )
    first = run_import(mem, graph, fmt="auto", agent="default", rename=None, replace=False)
    assert first["format"] == "memory-graph" and first["passages"] == 4
    second = run_import(mem, graph, fmt="auto", agent="default", rename=None, replace=False)
    assert second["passages"] == 0 and second["already_present"] == 4
    agent = mem.get_agent("default")
    result = mem.archive.search(agent.id, "where does Ada live", tags=["relation:lives_in"])  # type: ignore[union-attr]
    assert result.hits[0].content == "Ada lives_in Lyon" and "entity:Lyon" in result.hits[0].tags
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"type": "entity", "name": "X"}) + "\n" + json.dumps({"type": "relation", "from": "X"}) + "\n"
    )
    before = counts(mem)
    with pytest.raises(ValidationError, match="relation needs from, to and relationType"):
        run_import(mem, bad, fmt="memory-graph", agent="default", rename=None, replace=False)
    assert counts(mem) == before


def test_json_lines_nested_too_deeply_are_refused_and_nothing_is_written(mem: Memory, tmp_path: Path) -> None:
    """A backup or a memory.jsonl line nesting JSON too deeply to read is refused with a clear error (no
    RecursionError traceback), before anything is written: no agent is made for a graph."""
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    graph = tmp_path / "graph.jsonl"
    graph.write_text(json.dumps({"type": "entity", "name": "X"}) + "\n" + deep.read_text())
    before, agents = counts(mem), [a.name for a in mem.list_agents()]
    for path, fmt in ((deep, "jsonl"), (deep, "memory-graph"), (graph, "memory-graph"), (graph, "auto")):
        with pytest.raises(ValidationError, match="nests JSON arrays or objects too deeply to read"):
            run_import(mem, path, fmt=fmt, agent="newcomer", rename=None, replace=False)
    assert counts(mem) == before and [a.name for a in mem.list_agents()] == agents


def test_memories_directory_import(mem: Memory, tmp_path: Path) -> None:
    root = tmp_path / "memories"
    (root / "notes").mkdir(parents=True)
    (root / "preferences.md").write_text("Prefers tea.\nDark mode.")
    (root / "notes" / "project.txt").write_text("Ship v2 in March.")
    (root / "long.md").write_text("A long design document. " * 400)
    report = run_import(mem, root, fmt="auto", agent="default", rename=None, replace=False)
    assert sorted(report["blocks_created"]) == ["notes_project", "preferences"] and report["passages"] == 1
    agent = mem.get_agent("default")
    assert mem.block(agent.id, "preferences").value == "Prefers tea.\nDark mode."
    again = run_import(mem, root, fmt="auto", agent="default", rename=None, replace=False)
    assert again["blocks_created"] == [] and sorted(again["blocks_unchanged"]) == ["notes_project", "preferences"]
    assert again["passages"] == 0
    (root / "preferences.md").write_text("Prefers coffee now.")
    conflict = run_import(mem, root, fmt="memories", agent="default", rename=None, replace=False)
    assert conflict["conflicts"] == ["preferences"] and mem.block(agent.id, "preferences").value.startswith(
        "Prefers tea"
    )
    run_import(mem, root, fmt="memories", agent="default", rename=None, replace=True)
    assert mem.block(agent.id, "preferences").value == "Prefers coffee now."
    assert mem.history(agent.id, "preferences")[0].actor == "import"


def test_cli_export_and_import(tmp_path: Path) -> None:
    env = {"TIERMEM_EMBEDDING_MODEL": "hashing", "XDG_CONFIG_HOME": str(tmp_path / "cfg")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, env={**{k: v for k, v in os.environ.items() if not k.startswith("TIERMEM_")}, **env})

    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    done = run("import", str(FIXTURES / "loop.af"), "--data-dir", a, "--json")
    assert done.returncode == 0, done.stderr
    name = json.loads(done.stdout)["imported"][0]
    out = tmp_path / "loop-out.af"
    done = run("export", name, "-o", str(out), "--data-dir", a)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["agents"][0]["name"] == name
    done = run("export", "--format", "jsonl", "--data-dir", a)
    assert done.returncode == 0 and done.stdout.startswith('{"type": "tiermem-backup"')
    done = run("import", str(out), "--data-dir", b)
    assert done.returncode == 0 and f"imported: {name}" in done.stdout
    missing = run("export", "nobody", "-o", str(tmp_path / "x.af"), "--data-dir", a)
    assert missing.returncode == 1 and "nobody" in missing.stderr and not (tmp_path / "x.af").exists()


def test_progress_bar_only_on_a_terminal() -> None:
    import io

    from tiermem.interop.progress import Progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty, pipe = Terminal(), io.StringIO()
    for stream in (tty, pipe):
        bar = Progress("importing", 3, stream)
        for _ in range(3):
            bar.advance()
        bar.close()
    assert tty.getvalue().rstrip().endswith("[" + "#" * 30 + "] 3/3") and pipe.getvalue() == ""


def test_an_import_stopped_partway_says_so_and_running_it_again_finishes_it(tmp_path: Path) -> None:
    """A store failure in the middle of an import (here: a reembed started meanwhile refuses the rows) is not
    reported as "Nothing was written": the agents and blocks before it were. The same import run again completes
    without storing anything twice."""
    from tiermem.base.errors import StoreBusyError
    from tiermem.domain.maintenance import reembed
    from tiermem.store import Store

    source = fresh(tmp_path, "source")
    agent = source.ensure_agent("default").id
    source.archive.insert(agent, "Otters hold hands while they sleep")
    source.archive.log_messages(agent, [{"role": "user", "content": "I love sea otters"}])
    backup = tmp_path / "backup.jsonl"
    run_export(source, fmt="jsonl", output=str(backup), vectors=False)
    target = fresh(tmp_path, "target")
    settings = load_settings(data_dir=tmp_path / "target", embedding_model="hashing")
    Store.for_reembed(settings.store_uri()).reembed.begin("hashing-384", 384)
    with pytest.raises(StoreBusyError) as stopped:
        run_import(target, backup, fmt="auto", agent="default", rename=None, replace=False)
    text = str(stopped.value)
    assert "stopped partway" in text and "Nothing was written" not in text and "This step wrote nothing" in text
    assert "run the same import again" in text
    assert target.core.all_rows("blocks")  # written before the failure (the agent row comes last)
    reembed(settings)  # the reembed finishes; the import is run again
    again = open_memory(settings)
    run_import(again, backup, fmt="auto", agent="default", rename=None, replace=False)
    assert [p.content for p in again.archive.list_passages(agent)[0]] == ["Otters hold hands while they sleep"]
    assert again.archive.store.rows.count("messages") == 1


def test_import_texts_name_the_agent_and_the_blocks(mem: Memory, tmp_path: Path) -> None:
    """--rename's notes name the agent as stored; a refusal names the labels, block ids and agents the file has."""
    data = load("loop.af")
    data["agents"][0]["name"] = "Wren the researcher"
    path = tmp_path / "wren.af"
    path.write_text(json.dumps(data))
    renamed = run_import(mem, path, fmt="af", agent="default", rename="Wren2", replace=False)
    assert renamed["imported"] == ["Wren2"]
    assert not [n for n in renamed["notes"] if "is named" in n], renamed["notes"]
    plain = run_import(fresh(tmp_path, "other"), path, fmt="af", agent="default", rename=None, replace=False)
    assert "agent 'Wren the researcher' is named 'Wren-the-researcher'" in " ".join(plain["notes"])
    before = counts(mem)
    first = data["agents"][0]["block_ids"][0]
    label = next(b["label"] for b in data["blocks"] if b["id"] == first)
    cases: list[tuple[Any, str]] = [
        (
            lambda d: (
                d["blocks"].append({"id": "block-dup", "label": label, "value": "x"}),
                d["agents"][0]["block_ids"].append("block-dup"),
            ),
            f"Agent 'Wren the researcher' has two blocks labelled {label!r}: block {first!r} and block 'block-dup'",
        ),
        (
            lambda d: d["agents"][0].update(memory_blocks=[{"label": label, "value": "inline"}]),
            f"two blocks labelled {label!r}: block {first!r} and memory_blocks[0]",
        ),
        (
            lambda d: next(b for b in d["blocks"] if b["id"] == first).update(label=None),
            f"Agent 'Wren the researcher': block {first!r} has no label (it is None)",
        ),
        (
            lambda d: d["agents"].append(dict(d["agents"][0], id="agent-copy", name="Wren-the-researcher")),
            "the agents 'Wren the researcher' and 'Wren-the-researcher', both named 'Wren-the-researcher' here,",
        ),
    ]
    for mutate, expected in cases:
        bad = json.loads(json.dumps(data))
        mutate(bad)
        path.write_text(json.dumps(bad))
        with pytest.raises(ValidationError) as e:
            run_import(mem, path, fmt="af", agent="default", rename=None, replace=False)
        assert expected in str(e.value)
    assert counts(mem) == before
    path.write_text(json.dumps(data))
    run_import(mem, path, fmt="af", agent="default", rename=None, replace=False)
    data["system"] = data["agents"][0]["system"] = "another file"
    path.write_text(json.dumps(data))
    with pytest.raises(
        ValidationError, match="An agent named 'Wren-the-researcher' \\(the file's 'Wren the researcher'\\) already"
    ):
        run_import(mem, path, fmt="af", agent="default", rename=None, replace=False)
