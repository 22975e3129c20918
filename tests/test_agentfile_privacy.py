"""An agent file's credentials never reach the store, nor an export, by any path: the fields tiermem holds natively
and the Letta fields it keeps for export alike (a source's, a file's, an MCP server's); and a refused import writes
nothing at all (docs/security.md, docs/AGENTFILE.md). Each store is checked byte for byte, as a person would grep it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tiermem.base.config import load_settings
from tiermem.base.errors import TiermemError
from tiermem.domain import secrets
from tiermem.domain.factory import open_memory
from tiermem.domain.memory import Memory
from tiermem.interop import agentfile, letta_passthrough
from tiermem.interop.commands import run_export, run_import
from tiermem.interop.redactions import Redactions

from .conftest import PYTHON, ROOT
from .test_secrets import AKIA, AWS_SECRET, GHP

SOURCES = ROOT / "tests" / "fixtures" / "agent-file" / "test_agent_with_files_and_sources.af"
PASSWORD = "Tr0ub4dor-x7Qz9LmK2p"
DB_URL = f"postgres://app:{PASSWORD}@db.internal.example.com:5432/prod"


def fresh(tmp_path: Path) -> Memory:
    return open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="hashing"))


def stored_bytes(data_dir: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(data_dir.rglob("*")) if p.is_file())


def write(tmp_path: Path, data: dict, name: str = "creds.af") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def base() -> dict:
    data, _ = agentfile.load_json(SOURCES)
    assert isinstance(data, dict)
    return data


def test_a_sources_and_files_kept_letta_fields_are_stored_and_exported_redacted(tmp_path: Path) -> None:
    # A source's description and instructions are held natively (redacted) and also kept as the file had them for
    # export: the kept copy, and every other kept field of a source or file, is redacted as it enters too.
    data = base()
    source = data["sources"][0]
    source["description"] = f"source {GHP}"
    source["instructions"] = f"use {DB_URL}"
    source["metadata"] = {"deploy": f"key {AKIA}"}
    data["files"][0]["metadata"] = {"note": f"token {GHP}"}
    mem = fresh(tmp_path)
    report = run_import(mem, write(tmp_path, data), fmt="af", agent="default", rename=None, replace=False)
    raw = stored_bytes(tmp_path / "data")
    for secret in (GHP, PASSWORD, AKIA):
        assert secret.encode() not in raw
    folder = mem.files.folder(source["name"])
    assert folder.description == "source [redacted: GitHub token]"
    said = [n for n in report["notes"] if "redacted in" in n and n.startswith("folder ")]
    assert f"folder {source['name']!r}: credentials redacted in source.metadata.deploy: AWS access key (1), each " \
        "now [redacted: AWS access key]" in said  # fmt: skip
    assert any("redacted in files[test.txt].metadata.note: GitHub token (1)" in n for n in said), said
    assert any("redacted in its description: GitHub token (1)" in n for n in said), said
    out = tmp_path / "out.af"
    run_export(mem, agent=report["imported"], fmt="af", output=str(out), vectors=False)
    text = out.read_text()
    for secret in (GHP, PASSWORD, AKIA):
        assert secret not in text
    exported = json.loads(text)["sources"][0]
    assert exported["description"] == "source [redacted: GitHub token]"
    assert exported["instructions"] == "use " + DB_URL.replace(PASSWORD, "[redacted: password in a URL]")
    assert exported["metadata"] == {"deploy": "key [redacted: AWS access key]"}


def test_an_mcp_servers_env_values_and_tokens_are_blanked_not_refused(tmp_path: Path) -> None:
    # As the agent's own environment variables: the names are kept, the values are never stored nor exported, and
    # the report says so. An AWS secret key is told by its variable's name only: the import must not refuse it.
    data = base()
    data["mcp_servers"] = [
        {
            "id": "mcp_server-0",
            "server_name": "local",
            "server_type": "stdio",
            "stdio_config": {"command": "npx", "args": ["-y", "srv"], "env": {"AWS_SECRET_ACCESS_KEY": AWS_SECRET}},
        },
        {
            "id": "mcp_server-1",
            "server_name": "gh",
            "server_type": "streamable_http",
            "server_url": "https://mcp.example.com/mcp",
            "token": "Zq8vR2kP9xLm4Tn7Wc3Yb6Hd",
            "custom_headers": {"X-Api-Key": "Kf7Lp2Qm9Rx4Vt8Zb3Nc6Wd"},
        },
    ]
    mem = fresh(tmp_path)
    report = run_import(mem, write(tmp_path, data), fmt="af", agent="default", rename=None, replace=False)
    raw = stored_bytes(tmp_path / "data")
    for secret in (AWS_SECRET, "Zq8vR2kP9xLm4Tn7Wc3Yb6Hd", "Kf7Lp2Qm9Rx4Vt8Zb3Nc6Wd"):
        assert secret.encode() not in raw
    name = report["imported"][0]
    assert any(
        "values are not stored; names kept:" in n
        and "AWS_SECRET_ACCESS_KEY (MCP server local)" in n
        and "token (MCP server gh)" in n
        and "X-Api-Key (MCP server gh)" in n
        for n in report["notes"]
    ), report["notes"]
    servers = json.loads(json.dumps(export(mem, tmp_path, name)["mcp_servers"]))
    assert servers[0]["stdio_config"] == {"command": "npx", "args": ["-y", "srv"], "env": {"AWS_SECRET_ACCESS_KEY": ""}}
    assert (servers[1]["token"], servers[1]["custom_headers"]) == ("", {"X-Api-Key": ""})


def export(mem: Memory, tmp_path: Path, name: str) -> dict:
    out = tmp_path / "out.af"
    run_export(mem, agent=[name], fmt="af", output=str(out), vectors=False)
    data: dict = json.loads(out.read_text())
    return data


def test_a_secret_a_key_names_is_redacted_in_the_kept_document_and_the_report(tmp_path: Path) -> None:
    # {"db_password": "..."}: the value alone is no credential; its key says it is one (as Letta's metadata may).
    data = base()
    data["agents"][0]["metadata"] = {"db_password": "hunter2Xk9pQz7Lm"}
    mem = fresh(tmp_path)
    report = run_import(mem, write(tmp_path, data), fmt="af", agent="default", rename="kept", replace=False)
    assert b"hunter2Xk9pQz7Lm" not in stored_bytes(tmp_path / "data")
    assert any("redacted in agent.metadata.db_password" in n for n in report["notes"]), report["notes"]
    assert export(mem, tmp_path, "kept")["agents"][0]["metadata"] == {"db_password": "[redacted: secret]"}


def table_rows(mem: Memory) -> dict[str, int]:
    rows = mem.archive.store.rows
    return {t: rows.count(t) for t in ("agents", "blocks", "attachments", "messages", "passages")}


def test_a_refused_import_writes_nothing_however_often_it_is_run(tmp_path: Path) -> None:
    # The agent's name is how it is called, so a credential there is refused, not redacted: before anything is
    # written (its folders were written first, and each retry added another, NAME_(1), NAME_(2), ...).
    data = base()
    data["agents"][0]["name"] = f"agent_{GHP}"
    data["sources"][0]["description"] = f"source {GHP}"
    path = write(tmp_path, data)
    mem = fresh(tmp_path)
    before = table_rows(mem)
    for _ in range(2):
        with pytest.raises(TiermemError, match="Nothing was written") as exc:
            run_import(mem, path, fmt="af", agent="default", rename=None, replace=False)
    assert mem.files.folders() == [] and list(mem.archive.files.listing()) == []
    assert table_rows(mem) == before
    assert GHP.encode() not in stored_bytes(tmp_path / "data")
    said = str(exc.value)
    assert "the name of agent 'agent-0' in the file would store a GitHub token" in said and GHP not in said
    # the command line says the same, and writes nothing either
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERMEM_")}
    env.update(TIERMEM_EMBEDDING_MODEL="hashing", XDG_CONFIG_HOME=str(tmp_path / "cfg"))
    cli = tmp_path / "cli"
    done = subprocess.run(
        [PYTHON, "-m", "tiermem", "import", str(path), "--data-dir", str(cli)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 1 and "Nothing was written" in done.stderr, done.stderr
    listed = subprocess.run(
        [PYTHON, "-m", "tiermem", "folders", "list", "--json", "--data-dir", str(cli)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env=env,
        check=False,
    )
    assert listed.returncode == 0 and json.loads(listed.stdout) in ([], {"folders": []}), listed.stdout
    assert GHP.encode() not in stored_bytes(cli)


@pytest.mark.parametrize("oversized", [False, True], ids=["label-refused", "value-too-long"])
def test_a_block_refused_in_an_import_is_named_by_its_label_redacted(tmp_path: Path, oversized: bool) -> None:
    # a block's label is what it is called: a credential there is refused, and the refusal quotes it redacted (as
    # every refusal quotes a label), the same when the block is refused for another reason (its value too long)
    data = base()
    data["blocks"][0]["label"] = f"human_{GHP}"
    if oversized:
        data["blocks"][0]["value"] = "x" * 200_000
    mem = fresh(tmp_path)
    before = table_rows(mem)
    with pytest.raises(TiermemError) as exc:
        run_import(mem, write(tmp_path, data), fmt="af", agent="default", rename=None, replace=False)
    said = str(exc.value)
    assert GHP not in said and GHP[4:24] not in said, said
    assert "block 'human_[redacted: GitHub token]'" in said, said
    assert table_rows(mem) == before


def test_json_is_redacted_with_what_its_keys_say_and_tool_call_ids_are_kept() -> None:
    doc = {
        "env": {"AWS_SECRET_ACCESS_KEY": AWS_SECRET},
        "tool_calls": [{"id": "call_Ab3dEf6hIj9kLm2nOp5qRs8t", "input": {"note": f"key {GHP}"}}],
    }
    out = json.loads(secrets.redact_json(json.dumps(doc)))
    assert out["env"] == {"AWS_SECRET_ACCESS_KEY": "[redacted: AWS secret access key]"}
    assert out["tool_calls"] == [
        {"id": "call_Ab3dEf6hIj9kLm2nOp5qRs8t", "input": {"note": "key [redacted: GitHub token]"}}
    ]
    # stored as its text (an agent's metadata), where every string is quoted: nothing is left that storing refuses
    text = secrets.redact_json(json.dumps(doc), as_text=True)
    assert secrets.find(text) == [] and AWS_SECRET not in text and GHP not in text


def test_a_refusal_names_a_kept_field_by_its_path_in_the_file() -> None:
    doc = {"orphans": {"mcp_servers": [{"server_name": "local", "stdio_config": {"env": {"KEY": "secret here"}}}]}}
    text = json.dumps(doc, ensure_ascii=False)
    at = text.index("secret here")
    assert agentfile._field_of(letta_passthrough.KEY, text, at, "Wren") == (
        "the file's mcp_servers[0].stdio_config.env.KEY"
    )
    doc = {"agent": {"metadata": {"note": "secret here"}}}
    text = json.dumps(doc, ensure_ascii=False)
    assert agentfile._field_of(letta_passthrough.KEY, text, text.index("secret"), "Wren") == (
        "the file's agents[Wren].metadata.note"
    )
    assert agentfile._field_of("tags", '["secret here"]', 2, "Wren") == "the metadata entry 'tags'"


def test_a_source_with_a_credential_is_the_same_folder_when_imported_again(tmp_path: Path) -> None:
    # The folder holds the description redacted: the same source, imported again under another agent name, is
    # compared as it would be stored, and used again (not copied to NAME_(1)).
    data = base()
    data["sources"][0]["description"] = f"source {GHP}"
    path = write(tmp_path, data)
    mem = fresh(tmp_path)
    run_import(mem, path, fmt="af", agent="default", rename=None, replace=False)
    again = run_import(mem, path, fmt="af", agent="default", rename="second", replace=False)
    assert [f.name for f in mem.files.folders()] == [data["sources"][0]["name"]]
    assert not any("_(1)" in n for n in again["notes"]), again["notes"]


def test_tiermems_own_fields_of_passages_and_messages_are_redacted_too(tmp_path: Path) -> None:
    # tiermem's extension: a passage's tags and project, a message's project (docs/FILES.md), redacted as they enter.
    data = base()
    agent = data["agents"][0]
    passage = {"content": "The loom used punched cards.", "tags": [f"deploy {GHP}"], "project": f"proj-{AKIA}"}
    data["tiermem"] = {"passages": {agent["id"]: [passage]}}
    user = next(m for m in agent["messages"] if m["role"] == "user")
    user["tiermem"] = {"project": f"proj-{AKIA}"}
    mem = fresh(tmp_path)
    report = run_import(mem, write(tmp_path, data), fmt="af", agent="default", rename="own", replace=False)
    raw = stored_bytes(tmp_path / "data")
    assert GHP.encode() not in raw and AKIA.encode() not in raw
    said = " | ".join(report["notes"])
    assert "redacted in the tags of archival passages: GitHub token (1)" in said
    assert "redacted in the projects of archival passages: AWS access key (1)" in said
    assert "redacted in the projects of messages: AWS access key (1)" in said


def test_a_file_whose_name_holds_a_credential_is_skipped_with_its_views(tmp_path: Path) -> None:
    # As an upload or a sync skips it: a file's name is stored as it is and shown to every agent its folder is
    # attached to. Its views go with it; the report names it redacted; nothing of it is stored nor exported.
    data = base()
    folder = data["sources"][0]["name"]
    named = data["files"][0]
    named["file_name"], named["original_file_name"] = f"{folder}/{GHP}.txt", f"{GHP}.txt"
    pathed = {**named, "id": "file-9", "file_name": f"{folder}/notes.txt", "original_file_name": "notes.txt"}
    data["files"].append({**pathed, "file_path": f"/home/alex/{AKIA}/notes.txt"})
    row = data["agents"][0]["files_agents"][0]
    assert row["file_id"] == named["id"]
    row["file_name"] = named["file_name"]
    mem = fresh(tmp_path)
    report = run_import(mem, write(tmp_path, data), fmt="af", agent="default", rename="named", replace=False)
    raw = stored_bytes(tmp_path / "data")
    for secret in (GHP, AKIA):
        assert secret.encode() not in raw and secret[4:24].encode() not in raw
    said = " | ".join(report["notes"])
    assert GHP not in said and AKIA not in said
    assert (
        f"folder {folder!r}: skipped file '{folder}/[redacted: GitHub token].txt': its name holds a GitHub token"
        in said
    ), said
    assert f"skipped file '{folder}/notes.txt': its path holds an AWS access key" in said, said
    assert report["files"] == 1 and "(1 file views, 1 open)" in said, said  # test.md and its view stay
    assert [f.name for f in mem.archive.files.files([mem.files.folder(folder).id])] == ["test.md"]
    exported = export(mem, tmp_path, "named")
    text = json.dumps(exported)
    assert GHP not in text and AKIA not in text
    assert [f["file_name"] for f in exported["files"]] == [f"{folder}/test.md"]
    assert [v["file_name"] for v in exported["agents"][0]["files_agents"]] == [f"{folder}/test.md"]


def test_the_report_never_names_a_place_by_a_credential() -> None:
    # A key holding a credential is named redacted; so is a list item named by its name, label or id.
    redacted = Redactions(scanning=True)
    redacted.document("Wren", "metadata", {GHP: "x"})
    redacted.document("Wren", "agent", {"tools": [{"name": f"t {GHP}", "source_code": f"key {AKIA}"}]})
    said = " | ".join(redacted.notes())
    assert GHP not in said and GHP[4:24] not in said, said
    assert "credentials redacted in metadata.[redacted: GitHub token]: GitHub token (1)" in said, said
    assert "credentials redacted in agent.tools[t [redacted: GitHub token]].source_code: AWS access key (1)" in said


DEEP = "[" * 5000  # nests too deep to parse: Python's json raises RecursionError, not ValueError


def test_json_nested_too_deep_is_text_or_refused_before_anything_is_written(tmp_path: Path) -> None:
    # Letta's own texts (a user message, a metadata value) that nest too deep are imported as text, redacted as text;
    # tiermem's own payload of a message, which tiermem always writes as JSON, is refused before anything is written.
    redacted = Redactions(scanning=True)
    redacted.message("Wren", None, f"{DEEP} {GHP}")
    assert redacted.notes() == [
        "Wren: credentials redacted in messages: GitHub token (1 message), each now [redacted: GitHub token]"
    ]
    data = base()
    agent = data["agents"][0]
    user = next(m for m in agent["messages"] if m["role"] == "user")
    user["content"] = [{"type": "text", "text": f"{DEEP} {GHP}"}]
    agent["metadata"] = {"deep": f"{DEEP} {GHP}"}
    mem = fresh(tmp_path)
    report = run_import(mem, write(tmp_path, data), fmt="af", agent="default", rename="deep", replace=False)
    assert report["imported"] == ["deep"]
    assert GHP.encode() not in stored_bytes(tmp_path / "data")
    own = next(m for m in data["agents"][0]["messages"] if m["role"] == "assistant")
    own["tiermem"] = {"role": "assistant", "content": "hi", "payload": DEEP}
    other = fresh(tmp_path / "other")
    before = table_rows(other)
    with pytest.raises(TiermemError, match=r"messages\[\d+\] \(id '[^']+'\): its `tiermem.payload` nests JSON") as exc:
        run_import(other, write(tmp_path, data, "own.af"), fmt="af", agent="default", rename="own", replace=False)
    assert "Nothing was written" in str(exc.value)
    assert table_rows(other) == before and other.files.folders() == []


# Letta Code's approval messages (as Letta's own tests/test_agent_files/test_agent.af has them): an Anthropic
# reasoning signature and toolu_ tool-call ids, random-looking but no credential.
SIGNATURE = (
    "EtYCCkYIChgCKkCc9sF+VJwjjfbdESXDLni5hKJGFSiUkCwl+FS55TmNnev1IrMvQfZf4alBLtd0OZxvmBsEAsYq8X0hJj3BmG69EgycIORj"
    "HEC3vhA/qYQaDNGyiEHMyPQUZhyfeSIw14VHe3CcSTqIjeCqJltqVycGEmSBi/YaU7KeDQvk5FFpoTXiFkLYljPWtxs"
)
CALL = "toolu_01U6oBrCiQWoHsUAxq3hiDEp"


def with_approvals(data: dict) -> dict:
    agent = data["agents"][0]
    fields = ("name", "otid", "tool_calls", "tool_call_id", "approve", "approval_request_id", "denial_reason")

    def message(i: int, role: str, content: list, **kw: object) -> dict:
        m = {k: None for k in fields}
        m.update(type="message", role=role, content=content, id=f"message-{i}", agent_id=agent["id"])
        m.update(tool_returns=[], approvals=[], created_at=f"2025-11-29T02:5{i}:00+00:00")
        m.update(kw)
        return m

    call = {"id": CALL, "type": "function", "function": {"name": "Read", "arguments": '{"file_path": "README.md"}'}}
    thought = {"type": "reasoning", "is_native": True, "reasoning": f"The key is {GHP}.", "signature": SIGNATURE}
    result = {"tool_call_id": CALL, "status": "success", "stdout": None, "stderr": None, "func_response": "# Readme"}
    agent["messages"] = [
        agent["messages"][0],
        message(1, "user", [{"type": "text", "text": "read the readme", "signature": None}]),
        message(2, "approval", [thought], tool_calls=[call], tool_call_id=CALL, model="claude-sonnet-4-5-20250929"),
        message(3, "approval", [], approvals=[result]),
        message(4, "tool", [{"type": "text", "text": "# Readme"}], tool_call_id=CALL, tool_returns=[result]),
    ]
    agent["in_context_message_ids"] = [m["id"] for m in agent["messages"]]
    return data


def test_approval_messages_keep_their_tool_call_ids_and_signatures_not_their_credentials(tmp_path: Path) -> None:
    # Kept for export (tiermem does not log approvals), they are redacted as a logged message's payload is: a
    # random-looking id or signature is not taken for a high-entropy secret (calls would no longer match their
    # results); a credential in their text still is.
    data = with_approvals(base())
    mem = fresh(tmp_path)
    report = run_import(mem, write(tmp_path, data), fmt="af", agent="default", rename="coder", replace=False)
    said = " | ".join(report["notes"])
    assert "high-entropy" not in said, said
    assert "credentials redacted in unlogged_messages[1].message.content[0].reasoning: GitHub token (1)" in said
    assert GHP.encode() not in stored_bytes(tmp_path / "data")
    messages = export(mem, tmp_path, "coder")["agents"][0]["messages"]
    sent = {m["id"]: m for m in data["agents"][0]["messages"]}
    request, response, tool = messages[2], messages[3], messages[4]
    assert request["content"][0]["signature"] == SIGNATURE
    assert request["content"][0]["reasoning"] == "The key is [redacted: GitHub token]."
    assert request["tool_calls"] == sent["message-2"]["tool_calls"] and request["tool_call_id"] == CALL
    assert response["approvals"] == sent["message-3"]["approvals"]
    assert tool["tool_call_id"] == tool["tool_returns"][0]["tool_call_id"] == CALL


def test_a_kept_document_is_checked_as_a_payload_is(tmp_path: Path) -> None:
    # What create_agent refuses in the document of Letta's messages: a credential, named by its path; not an id.
    mem = fresh(tmp_path)
    ids = json.dumps({"unlogged_messages": [{"message": {"tool_calls": [{"id": CALL}], "signature": SIGNATURE}}]})
    mem.refuse_in_document(ids, "a metadata value")
    with pytest.raises(TiermemError, match=r"GitHub token at unlogged_messages\.0\.message\.text") as exc:
        mem.refuse_in_document(json.dumps({"unlogged_messages": [{"message": {"text": f"k {GHP}"}}]}), "a value")
    assert GHP not in str(exc.value)
    with pytest.raises(TiermemError, match="Nothing was written"):
        mem.create_agent("x", metadata={"doc": ids}, documents=frozenset())  # as text: the ids look random
    mem.create_agent("x", metadata={"doc": ids}, documents=frozenset({"doc"}))
