"""Letta agent files round-trip without loss: import -> export -> import is the identity on everything the file
carries (tools, tool rules, env var names, files and sources, groups, settings, reasoning, tool returns, Letta-only
messages), and an export differs from the original only where docs/AGENTFILE.md says so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tiermem.base.config import BlockSpec, load_settings
from tiermem.base.errors import NotFoundError, ValidationError
from tiermem.cli.main import main
from tiermem.domain.factory import open_memory
from tiermem.domain.memory import Memory
from tiermem.interop import af_export, agentfile, letta_passthrough
from tiermem.interop.commands import run_export, run_import

from .conftest import ROOT

LETTA = ROOT / "tests" / "fixtures" / "agent-file"
OWN = ROOT / "tests" / "fixtures" / "agent-file-own"
FILES = [
    LETTA / "evie.af",
    LETTA / "loop.af",
    LETTA / "memgpt_agent_with_convo.af",
    LETTA / "customer_service.af",
    LETTA / "memgpt_agent_with_convo_v1.af",
    LETTA / "letta_memgpt_agent_with_convo.af",
    OWN / "custom_tools_files.af",
    OWN / "pair_groups.af",
    OWN / "old_indices_string.af",
]
SECRETS = ("sk-weather-SECRET-42", "ghp_SECRET_token_99", "sk-old-SECRET-7", "metric")


def fresh(tmp_path: Path, name: str) -> Memory:
    return open_memory(load_settings(data_dir=tmp_path / name, embedding_model="hashing"))


def import_file(mem: Memory, path: Path) -> list[str]:
    return list(run_import(mem, path, fmt="af", agent="default", rename=None, replace=False)["imported"])


def export(mem: Memory, names: list[str]) -> dict[str, Any]:
    return af_export.export_agent_files(mem, names)[0]


def without_rows(data: dict[str, Any], mem: Memory) -> dict[str, Any]:
    """``data`` without the ids of the tiermem rows its messages and passages were made from (each data directory's
    own: what an import looks up in the forget record), checked to be ``mem``'s rows first."""
    data = json.loads(json.dumps(data))
    rows = mem.archive.rows
    messages = {m.id for a in mem.core.list_agents() for m in rows.messages_of(a.id)}
    passages = {p.id for a in mem.core.list_agents() for p in rows.passages_of(a.id)}
    for agent in data["agents"]:
        for m in agent.get("messages") or []:
            own = m.get(agentfile.EXTENSION)
            if isinstance(own, dict) and "id" in own:
                assert own.pop("id") in messages
    for listed in (data.get(agentfile.EXTENSION) or {}).get("passages", {}).values():
        for p in listed:
            assert p.pop("tiermem_id") in passages
    return data


# -- an id-free view of an agent file: references are replaced by what they point at --------------------------


def _strip(x: Any, drop: tuple[str, ...] = ("id", "agent_id")) -> Any:
    if isinstance(x, dict):
        return {k: _strip(v, ()) for k, v in x.items() if k not in drop and k != agentfile.EXTENSION}
    if isinstance(x, list):
        return [_strip(v, ()) for v in x]
    return x


def canonical(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with every file-local id replaced by its target's content, lists of objects sorted."""
    if "agents" not in data:
        data = agentfile._from_single_agent(data)  # documented: the old layout is written in the current one
    blocks = {b["id"]: b for b in data.get("blocks") or []}
    tools = {t["id"]: t for t in data.get("tools") or []}
    names = {a["id"]: a["name"] for a in data["agents"]}
    groups = {g["id"]: g for g in data.get("groups") or []}
    sources = {s["id"]: s["name"] for s in data.get("sources") or []}
    files = {f["id"]: f["file_name"] for f in data.get("files") or []}

    def block(ref: str) -> str:
        return f"{blocks[ref]['label']}={blocks[ref]['value']}" if ref in blocks else f"dangling:{ref}"

    def group(g: dict[str, Any]) -> dict[str, Any]:
        out = _strip(g)
        out["agent_ids"] = sorted(names.get(a, a) for a in g.get("agent_ids") or [])
        if isinstance(g.get("manager_config"), dict) and "manager_agent_id" in g["manager_config"]:
            out["manager_config"]["manager_agent_id"] = names.get(g["manager_config"]["manager_agent_id"])
        out["shared_block_ids"] = sorted(block(b) for b in g.get("shared_block_ids") or [])
        return out

    agents = []
    for a in data["agents"]:
        out = _strip(a)
        out["messages"] = [_strip(m) for m in a["messages"]]
        ids = [m["id"] for m in a["messages"]]
        out["in_context_message_ids"] = [ids.index(i) for i in a.get("in_context_message_ids") or []]
        out["block_ids"] = sorted(block(b) for b in a.get("block_ids") or [])
        out["tool_ids"] = sorted(tools[t]["name"] for t in a.get("tool_ids") or [])
        out["group_ids"] = sorted(
            json.dumps(group(groups[g]), sort_keys=True) if g in groups else f"dangling:{g}"
            for g in a.get("group_ids") or []
        )
        out["source_ids"] = sorted(sources[s] for s in a.get("source_ids") or [])
        out["files_agents"] = [
            {**_strip(fa), "file_id": files[fa["file_id"]], "source_id": sources[fa["source_id"]]}
            for fa in a.get("files_agents") or []
        ]
        agents.append(out)
    return {
        **{
            k: v
            for k, v in data.items()
            if k not in ("agents", "blocks", "tools", "groups", "files", "sources", "created_at", agentfile.EXTENSION)
        },
        "agents": sorted(agents, key=lambda a: a["name"]),
        "blocks": sorted((_strip(b) for b in data.get("blocks") or []), key=lambda b: json.dumps(b, sort_keys=True)),
        "tools": sorted((_strip(t) for t in data.get("tools") or []), key=lambda t: json.dumps(t, sort_keys=True)),
        "groups": sorted((group(g) for g in data.get("groups") or []), key=lambda g: json.dumps(g, sort_keys=True)),
        "sources": sorted((_strip(s) for s in data.get("sources") or []), key=lambda s: s["name"]),
        "files": sorted(
            ({**_strip(f), "source_id": sources.get(f.get("source_id"))} for f in data.get("files") or []),
            key=lambda f: f["file_name"],
        ),
    }


def documented(original: dict[str, Any]) -> dict[str, Any]:
    """The original with the differences docs/AGENTFILE.md documents applied."""
    want = canonical(original)
    if "agents" not in original:  # the old single-agent layout, written in the current one
        for a in want["agents"]:
            a["memory_blocks"] = []
        for b in want["blocks"]:
            b.setdefault("read_only", False)
    want.setdefault("skills", [])
    want.setdefault("mcp_servers", [])
    want.setdefault("metadata", {"exported_by": "tiermem"})
    for a in want["agents"]:
        for key in letta_passthrough.ENV_FIELDS:  # values never leave the file they came in
            if key in a:
                a[key] = letta_passthrough.blank_values(a[key])[0]
    return want


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_import_export_import_is_the_identity(tmp_path: Path, path: Path) -> None:
    original, _ = agentfile.load_json(path)
    first = fresh(tmp_path, "first")
    names = import_file(first, path)
    exported = export(first, names)
    assert canonical(exported) == documented(original)
    out = tmp_path / "export.af"
    out.write_text(json.dumps(exported))
    second = fresh(tmp_path, "second")
    assert import_file(second, out) == names
    again = export(second, names)
    exported.pop("created_at"), again.pop("created_at")
    assert without_rows(again, second) == without_rows(exported, first)  # the same file, ids and all


def test_custom_tools_rules_files_reasoning_and_returns_come_back(tmp_path: Path) -> None:
    mem = fresh(tmp_path, "data")
    report = run_import(mem, OWN / "custom_tools_files.af", fmt="af", agent="default", rename=None, replace=False)
    original, _ = agentfile.load_json(OWN / "custom_tools_files.af")
    name = report["imported"][0]
    assert name == "Wren-the-researcher"
    note = "\n".join(report["notes"])
    for kept in (
        "get_weather (custom)",
        "word_count",
        "search_repos (external_mcp)",
        "max_count_per_step: word_count",
        "WEATHER_API_KEY",
        "GITHUB_TOKEN",
        f"notes/launch.md ({len(original['files'][0]['content'])} chars)",
        "project-notes",
        "dangling_group_ids",
        "group-9",
        "unreferenced_blocks: scratch_unused",
        "unreferenced_tools: unused_helper",
        "unreferenced_mcp_servers: github",
        "1 approval",
        "1 system",
    ):
        assert kept in note
    assert report["kept_not_run"][name]["env_var_names"] == ["WEATHER_API_KEY", "UNITS", "GITHUB_TOKEN"]
    data = export(mem, [name])
    agent = data["agents"][0]
    assert agent["name"] == "Wren the researcher" and agent["tool_rules"] == original["agents"][0]["tool_rules"]
    by_name = {t["name"]: t for t in data["tools"]}
    assert by_name["get_weather"]["source_code"] == original["tools"][0]["source_code"]
    assert by_name["get_weather"]["json_schema"] == original["tools"][0]["json_schema"]
    assert data["files"][0]["content"] == original["files"][0]["content"]
    assert agent["files_agents"][0]["file_id"] == data["files"][0]["id"]
    assert data["files"][0]["source_id"] == data["sources"][0]["id"] == agent["source_ids"][0]
    assert agent["tool_exec_environment_variables"] == {"WEATHER_API_KEY": "", "UNITS": ""}
    assert agent["secrets"] == [{"key": "GITHUB_TOKEN", "description": "for the MCP server", "value": ""}]
    messages = agent["messages"]
    assert [m["role"] for m in messages] == [m["role"] for m in original["agents"][0]["messages"]]
    thought = messages[2]["content"][0]
    assert thought["signature"] == "sig-abc123==" and thought["reasoning"] == "I should call get_weather."
    assert messages[4]["tool_returns"][0]["stdout"] == ["fetched 1 forecast"]
    assert messages[4]["tool_returns"][0]["stderr"] == ["warning: cached"]
    # what tiermem runs, it runs: the messages are in recall and the window, reasoning kept in the payload
    stored = mem.archive.rows.messages_of(mem.get_agent(name).id)
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant", "user"]
    assert json.loads(stored[1].payload)["reasoning"] == "I should call get_weather."
    window = mem.in_context_messages(mem.context_window(stored[0].agent_id, "default"))
    assert len(window) == 5


def test_env_values_and_secrets_are_never_stored_or_exported(tmp_path: Path) -> None:
    mem = fresh(tmp_path, "data")
    for path in (OWN / "custom_tools_files.af", OWN / "old_indices_string.af"):
        import_file(mem, path)
    text = json.dumps(export(mem, [a.name for a in mem.list_agents()]))
    assert "WEATHER_API_KEY" in text and "GITHUB_TOKEN" in text
    stored = b"".join(p.read_bytes() for p in (tmp_path / "data").rglob("*") if p.is_file())
    for secret in SECRETS[:3]:
        assert secret not in text and secret.encode() not in stored


def test_a_variable_in_both_env_fields_is_named_once(tmp_path: Path) -> None:
    # Letta's current files (void.af, ezra.af) list each variable in tool_exec_environment_variables and in secrets
    data, _ = agentfile.load_json(OWN / "custom_tools_files.af")
    agent = data["agents"][0]
    agent["tool_exec_environment_variables"] = {"BSKY_PASSWORD": "pw-1", "PDS_URI": "https://bsky.social"}
    agent["secrets"] = {"BSKY_PASSWORD": "pw-1", "PDS_URI": "https://bsky.social"}
    path = tmp_path / "both.af"
    path.write_text(json.dumps(data))
    report = run_import(fresh(tmp_path, "data"), path, fmt="af", agent="default", rename=None, replace=False)
    assert report["kept_not_run"][report["imported"][0]]["env_var_names"] == ["BSKY_PASSWORD", "PDS_URI"]
    note = next(n for n in report["notes"] if "values are not stored" in n)
    assert note.endswith("names kept: BSKY_PASSWORD, PDS_URI (set the values again where the agent runs)"), note


def test_old_in_context_message_indices_and_json_in_a_string(tmp_path: Path) -> None:
    raw = (OWN / "old_indices_string.af").read_text()
    assert isinstance(json.loads(raw), str)  # the file is a JSON string holding the JSON
    mem = fresh(tmp_path, "data")
    name = import_file(mem, OWN / "old_indices_string.af")[0]
    agent = mem.get_agent(name)
    window = mem.in_context_messages(mem.context_window(agent.id, "default"))
    assert [m.content for m in window] == ["second question", "second answer"]  # indices 3 and 4 (0 is the system)
    assert len(mem.archive.rows.messages_of(agent.id)) == 4
    exported = export(mem, [name])["agents"][0]
    listed = [m for m in exported["messages"] if m["id"] in exported["in_context_message_ids"]]
    assert [m["role"] for m in listed] == ["system", "user", "assistant"]
    bad = json.loads(json.loads(raw))
    bad["in_context_message_indices"] = [0, 9]
    (tmp_path / "bad.af").write_text(json.dumps(bad))
    with pytest.raises(ValidationError, match="position 9"):
        run_import(mem, tmp_path / "bad.af", fmt="af", agent="default", rename="other", replace=False)
    with pytest.raises(NotFoundError):
        mem.get_agent("other")


def test_the_window_keeps_its_order_the_system_message_first(tmp_path: Path) -> None:
    # Letta 0.6.x: the window starts with the system message recompiled after a memory edit (stored late, position
    # 89), then the summary alert (81), stored after the message the window starts with (80). The model reads it in
    # that order; an export lists it so, and an import of the export reads the same window again.
    path = LETTA / "letta_memgpt_agent_with_convo.af"
    original, _ = agentfile.load_json(path)
    assert original["in_context_message_indices"] == [89, 81, 80, *range(82, 89), 90]
    mem = fresh(tmp_path, "data")
    name = import_file(mem, path)[0]
    agent = export(mem, [name])["agents"][0]
    positions = {m["id"]: i for i, m in enumerate(agent["messages"])}
    assert [positions[i] for i in agent["in_context_message_ids"]] == original["in_context_message_indices"]
    first = agent["messages"][positions[agent["in_context_message_ids"][0]]]
    assert first["role"] == "system"
    window = mem.in_context_messages(mem.context_window(mem.get_agent(name).id, "default"))
    assert "prior messages" in window[0].content and window[1].content == "am I your friend? "


def test_several_agents_keep_shared_blocks_and_groups(tmp_path: Path) -> None:
    mem = fresh(tmp_path, "data")
    names = import_file(mem, LETTA / "evie.af")
    out = tmp_path / "pair.af"
    report = run_export(mem, agent=names, fmt="af", output=str(out), vectors=False)
    assert report["agents"] == names and report["groups"] == 1 and "notes" not in report
    data = json.loads(out.read_text())
    main_agent, sleeper = data["agents"]
    shared = set(main_agent["block_ids"]) & set(sleeper["block_ids"])
    assert len(shared) == 12 and len(data["blocks"]) == 13  # each shared block written once
    group = data["groups"][0]
    assert group["manager_config"]["manager_agent_id"] == main_agent["id"] and group["agent_ids"] == [sleeper["id"]]
    assert main_agent["group_ids"] == [group["id"]] and sleeper["agent_type"] == "sleeptime_agent"
    # one agent alone: the group is written with the members that came, and the export says what is missing
    alone = run_export(mem, agent=[names[0]], fmt="af", output=str(tmp_path / "alone.af"), vectors=False)
    assert "export them together" in alone["notes"][0]
    # a change made in tiermem is what is exported: block edits and the sleep-time frequency
    evie = mem.get_agent(names[0])
    mem.set_agent_metadata(evie.id, {"sleeptime_frequency": "9"})
    mem.update_block(evie.id, "server_rules", limit=1200)
    data = export(mem, names)
    assert data["groups"][0]["manager_config"]["sleeptime_agent_frequency"] == 9
    assert next(b for b in data["blocks"] if b["label"] == "server_rules")["limit"] == 1200
    # --all and names together are refused; a missing agent is named and nothing is written
    with pytest.raises(ValidationError, match="not both"):
        run_export(mem, agent=names, fmt="af", output=str(tmp_path / "x.af"), vectors=False, all_agents=True)
    with pytest.raises(NotFoundError, match="nobody"):
        run_export(mem, agent=[names[0], "nobody"], fmt="af", output=str(tmp_path / "x.af"), vectors=False)
    assert not (tmp_path / "x.af").exists()


def test_agents_from_two_files_and_native_agents_export_together(tmp_path: Path) -> None:
    mem = fresh(tmp_path, "data")
    names = import_file(mem, OWN / "pair_groups.af") + import_file(mem, LETTA / "loop.af")
    native = mem.create_agent("native", system="You are native.")
    mem.create_block(native.id, BlockSpec(label="notes", value="hello", limit=100))
    out = tmp_path / "all.af"
    report = run_export(mem, fmt="af", output=str(out), vectors=False, all_agents=True)
    assert sorted(report["agents"]) == sorted([*names, "native"])
    data = json.loads(out.read_text())
    assert len({a["id"] for a in data["agents"]}) == 4 and len(data["groups"]) == 2
    assert {b["label"] for b in data["blocks"]} >= {"team_notes", "notes", "memory_persona"}
    other = fresh(tmp_path, "other")
    assert sorted(import_file(other, out)) == sorted([*names, "native"])
    again = export(other, report["agents"])
    data.pop("created_at"), again.pop("created_at")
    # the native agent gains the settings an import derives (agent_type, model settings) in tiermem's extension
    native_id = next(a["id"] for a in data["agents"] if a["name"] == "native")
    before, after = data["tiermem"]["agents"].pop(native_id), again["tiermem"]["agents"].pop(native_id)
    assert before.items() <= after.items() and after["agent_type"] == "letta_v1"
    assert without_rows(again, other) == without_rows(data, mem)


def test_agents_show_lists_what_is_kept_but_not_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data_dir = str(tmp_path / "data")
    assert (
        main(["import", str(OWN / "custom_tools_files.af"), "--data-dir", data_dir, "--embedding-model", "hashing"])
        == 0
    )
    capsys.readouterr()
    assert main(["agents", "show", "Wren-the-researcher", "--data-dir", data_dir, "--embedding-model", "hashing"]) == 0
    shown = capsys.readouterr().out
    for kept in (
        "kept for export, not run by tiermem",
        "get_weather (custom)",
        "conditional: get_weather",
        "env var names (3)",
        "GITHUB_TOKEN",
        "letta only messages",
    ):
        assert kept in shown
    assert (
        "folders: project-notes (1 files, 1 open)" in shown
    )  # its source became a folder tiermem serves (not kept aside)
    assert "tiermem_files" not in shown
    assert "SECRET" not in shown and "letta_agent_file" not in shown
    assert (
        main(
            ["agents", "show", "Wren-the-researcher", "--json", "--data-dir", data_dir, "--embedding-model", "hashing"]
        )
        == 0
    )
    info = json.loads(capsys.readouterr().out)
    assert info["kept_not_run"]["env_var_names"] == ["WEATHER_API_KEY", "UNITS", "GITHUB_TOKEN"]
    assert main(["agents", "show", "nobody", "--data-dir", data_dir, "--embedding-model", "hashing"]) == 1
    out = tmp_path / "two.af"
    assert main(["import", str(LETTA / "loop.af"), "--data-dir", data_dir, "--embedding-model", "hashing"]) == 0
    assert (
        main(
            [
                "export",
                "Wren-the-researcher",
                "Loop",
                "-o",
                str(out),
                "--data-dir",
                data_dir,
                "--embedding-model",
                "hashing",
            ]
        )
        == 0
    )
    assert [a["name"] for a in json.loads(out.read_text())["agents"]] == ["Wren the researcher", "Loop"]


def test_renamed_agents_export_under_their_tiermem_name(tmp_path: Path) -> None:
    mem = fresh(tmp_path, "data")
    report = run_import(mem, OWN / "custom_tools_files.af", fmt="af", agent="default", rename="wren2", replace=False)
    assert report["imported"] == ["wren2"]
    assert export(mem, ["wren2"])["agents"][0]["name"] == "wren2"


def test_agents_show_for_an_agent_imported_by_an_earlier_tiermem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = load_settings(data_dir=tmp_path / "data", embedding_model="hashing")
    mem = open_memory(settings)
    old = mem.create_agent("old")
    mem.set_agent_metadata(old.id, {"letta_unsupported": json.dumps({"tools": ["get_weather"], "tool_rules": 2})})
    mem.create_agent("plain")
    args = ["--data-dir", str(tmp_path / "data"), "--embedding-model", "hashing"]
    assert main(["agents", "show", "old", *args]) == 0
    shown = capsys.readouterr().out
    assert "get_weather" in shown and "names only" in shown
    assert main(["agents", "show", "plain", *args]) == 0
    assert "kept but not run: nothing" in capsys.readouterr().out


def test_a_letta_tool_message_is_its_calls_tool(tmp_path: Path) -> None:
    """A Letta tool message names its call, and in ``name`` the agent (or nothing): its tool is the one the call
    named, so the send_message results are the agent loop's plumbing and a search of tool results leaves them out,
    while the memory edits' results stay."""
    mem = fresh(tmp_path, "data")
    name = import_file(mem, LETTA / "letta_memgpt_agent_with_convo.af")[0]
    agent = mem.get_agent(name).id
    tools = {
        m.id: json.loads(m.payload or "{}").get("name") for m in mem.archive.rows.messages_of(agent) if m.role == "tool"
    }
    named = list(tools.values())
    assert named.count("send_message") == 23 and named.count("core_memory_replace") == 3
    assert named.count("core_memory_append") == 2 and len(named) == 28
    stored = mem.archive.store.conn.rows("messages", columns=("id", "plumbing"))
    assert {r["id"] for r in stored if r["plumbing"]} >= {i for i, n in tools.items() if n == "send_message"}
    hits = mem.archive.conversation_search(agent, "status OK message", roles=["tool"], limit=50).hits
    assert hits and {tools[h.id] for h in hits} <= {"core_memory_replace", "core_memory_append"}
