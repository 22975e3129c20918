"""The rough edges a new user met, each as the user meets it: the real CLI and server processes.

Agents are created on purpose (a mistyped ``--agent`` is refused) and can be deleted, crash-safely; HTTP is
protected by default; files with tokens are private; a busy port, a missing data directory and a malformed stdio
line are reported; and a few smaller ones (import report, help and headers, Lance's log lines, insert into an
empty block).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tiermem.base.config import load_settings
from tiermem.domain.factory import open_memory

from .cli_inproc import run_cli
from .conftest import PYTHON, ROOT
from .test_transports import free_port, server_env, stdio_server

FIXTURES = ROOT / "tests" / "fixtures" / "agent-file"


def run(
    tmp_path: Path, *args: str, stdin: str | None = None, process: bool = False, **env: str
) -> subprocess.CompletedProcess[str]:
    """``tiermem ARGS --data-dir tmp_path/data``: in this process (``run_cli``) unless ``process`` asks for a real
    ``python -m tiermem`` (stdin not a terminal, recovery by the next process, Lance's own stderr, a server)."""
    full = [*args, "--data-dir", str(tmp_path / "data")]
    if not process:
        return run_cli(*full, env=server_env(tmp_path, **env), stdin=stdin)
    return subprocess.run(
        [PYTHON, "-m", "tiermem", *full],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=server_env(tmp_path, **env),
        timeout=120,
    )


def names(tmp_path: Path) -> list[str]:
    return [a["name"] for a in json.loads(run(tmp_path, "agents", "list", "--json").stdout)]


def test_a_mistyped_agent_is_refused_and_nothing_is_created(tmp_path: Path) -> None:
    assert run(tmp_path, "agents", "create", "work").returncode == 0
    for args in (
        ("blocks", "list", "--agent", "wrok"),
        ("blocks", "set", "human", "x", "--agent", "wrok"),
        ("search", "tea", "--agent", "wrok"),
        ("blocks", "attach", "human", "--from", "work", "--agent", "wrok"),
        ("agents", "set", "wrok", "--sleeptime", "2"),
        ("agents", "show", "wrok"),
        ("agents", "delete", "wrok"),
    ):
        done = run(tmp_path, *args)
        assert done.returncode == 1, (args, done.stderr)
        assert "No agent named 'wrok'" in done.stderr and "work" in done.stderr, (args, done.stderr)
        if args[:2] != ("agents", "delete"):  # a delete names the agents there are, not how to create one
            assert "tiermem agents create wrok" in done.stderr
    assert names(tmp_path) == ["work"]  # nothing was created
    assert run(tmp_path, "blocks", "list").returncode == 0  # the built-in default agent is made on first use
    assert names(tmp_path) == ["default", "work"]


def test_serve_creates_its_agent_and_says_so(tmp_path: Path) -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    lines = [
        init,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": "memory://blocks/human"}},
    ]
    proc = subprocess.Popen(
        [PYTHON, "-m", "tiermem", "serve", "--agent", "fresh", "--data-dir", str(tmp_path / "data")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=server_env(tmp_path),
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write("".join(json.dumps(x) + "\n" for x in lines))
    proc.stdin.flush()
    replies = [json.loads(proc.stdout.readline()) for _ in range(2)]
    proc.stdin.close()
    stderr = proc.stderr.read()
    proc.wait(60)
    assert replies[1]["id"] == 2 and "contents" in replies[1]["result"]
    assert "created agent 'fresh'" in stderr
    assert names(tmp_path) == ["fresh"]


def test_agents_delete_shows_what_goes_asks_and_deletes(tmp_path: Path) -> None:
    s = load_settings(data_dir=tmp_path / "data", embedding_model="hashing")
    m = open_memory(s)
    gone, stays = m.ensure_agent("gone"), m.ensure_agent("stays")
    m.create_block(
        gone.id, __import__("tiermem.base.config", fromlist=["BlockSpec"]).BlockSpec(label="team", value="shared")
    )
    team = m.block(gone.id, "team")
    m.attach(stays.id, team.id)
    from tiermem.domain.blocks import Rethink

    m.edit(gone.id, "human", Rethink("Name: Ada Lovelace-Byron"), actor="human")
    m.archive.insert(gone.id, "a passage of the deleted agent")
    m.archive.insert(stays.id, "a passage that stays")
    m.archive.log_messages(gone.id, [{"role": "user", "content": "hello"}])
    human = m.block(gone.id, "human").id

    refused = run(tmp_path, "agents", "delete", "gone", process=True)  # stdin is not a terminal: no silent deletion
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert (
        "blocks: persona, human" in refused.stderr
        and "team" in refused.stderr
        and "messages: 1, archival passages: 1" in refused.stderr
    )
    assert names(tmp_path) == ["gone", "stays"]
    done = run(tmp_path, "agents", "delete", "gone", "--yes")
    assert done.returncode == 0 and "deleted agent gone" in done.stdout, done.stderr
    assert names(tmp_path) == ["stays"]
    m = open_memory(s)
    assert m.core.get_block(human) is None and m.core.history(human) == []  # the block and its history went
    core_files = [p for p in (tmp_path / "data").iterdir() if p.name.startswith("core.sqlite3")]
    assert core_files and not [p.name for p in core_files if b"Lovelace-Byron" in p.read_bytes()]  # nor its bytes
    assert m.block(stays.id, "team").value == "shared" and m.core.agents_of_block(team.id) == [stays.id]
    assert m.archive.rows.stray_rows([stays.id]) == {"messages": 0, "passages": 0}
    assert [p.content for p in m.archive.rows.passages_of(stays.id)] == ["a passage that stays"]
    assert run(tmp_path, "agents", "delete", "gone", "--yes").returncode == 1  # it is gone: named, not found


def test_an_interrupted_delete_is_finished_by_the_next_run(tmp_path: Path) -> None:
    from tiermem.domain.memory import DELETING_KEY

    s = load_settings(data_dir=tmp_path / "data", embedding_model="hashing")
    m = open_memory(s)
    agent = m.ensure_agent("half")
    m.archive.insert_many(agent.id, [(f"passage {i}", []) for i in range(300)])
    human = m.block(agent.id, "human").id
    # A deletion killed right after its first step (the mark) leaves this state: the agent marked, nothing gone yet.
    m.set_agent_metadata(agent.id, {DELETING_KEY: "2026-01-01T00:00:00+00:00"})
    doctor = run(tmp_path, "doctor", process=True)
    assert (
        "finished deleting agent 'half'" in doctor.stderr
        and "agent deletions: no deletion left unfinished" in doctor.stdout
    )
    # its rows are gone from search, not yet from the store's files: said, with the command that purges them
    assert (
        doctor.returncode == 0 and "still in the store's files" in doctor.stdout and "tiermem optimize" in doctor.stdout
    )
    assert run(tmp_path, "optimize", process=True).returncode == 0
    assert run(tmp_path, "doctor", process=True).returncode == 0
    m = open_memory(s)
    assert m.list_agents() == [] and m.core.get_block(human) is None
    assert m.archive.rows.stray_rows([]) == {"messages": 0, "passages": 0}

    # A real kill: whenever it lands, the next run leaves the agent whole (not yet marked) or wholly gone.
    agent = m.ensure_agent("killed")
    m.archive.insert_many(agent.id, [(f"passage {i}", []) for i in range(2000)])
    proc = subprocess.Popen(
        [PYTHON, "-m", "tiermem", "agents", "delete", "killed", "--yes", "--data-dir", str(tmp_path / "data")],
        cwd=ROOT,
        env=server_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        if any(DELETING_KEY in a.metadata for a in m.core.list_agents()):
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    assert run(tmp_path, "blocks", "list", process=True).returncode == 0  # any command finishes an interrupted deletion
    m = open_memory(s)
    left = [a for a in m.list_agents() if a.name == "killed"]
    if left:  # killed before the mark: nothing was deleted
        assert DELETING_KEY not in left[0].metadata and m.archive.counts(left[0].id)[1] == 2000
    else:
        assert m.archive.rows.stray_rows([a.id for a in m.list_agents()]) == {"messages": 0, "passages": 0}


def test_http_without_tokens_uses_a_per_run_secret(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            PYTHON,
            "-m",
            "tiermem",
            "serve",
            "--transport",
            "http",
            "--port",
            str(port),
            "--data-dir",
            str(tmp_path / "data"),
        ],
        cwd=ROOT,
        env=server_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        lines: list[str] = []
        while not any("/ui/#token=" in line for line in lines):
            line = proc.stderr.readline()
            assert line, "".join(lines)
            lines.append(line)
        secret = next(line for line in lines if "/ui/#token=" in line).rsplit("#token=", 1)[1].strip()
        assert f"Bearer {secret}" in "".join(lines) and len(secret) >= 32
        url = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{url}/ui/api/agents", timeout=30).status_code == 401  # other local users: no secret
        assert httpx.get(f"{url}/ui/", timeout=30).status_code == 200  # the page itself holds no memory
        ok = httpx.get(f"{url}/ui/api/agents", headers={"authorization": f"Bearer {secret}"}, timeout=30)
        assert ok.status_code == 200
        assert httpx.post(f"{url}/mcp", json={}, timeout=30).status_code == 401
    finally:
        proc.terminate()
        proc.wait(20)
    # --token (or TIERMEM_HTTP_TOKEN) chooses it, and a placeholder is refused with the fix
    chosen = subprocess.run(
        [
            PYTHON,
            "-m",
            "tiermem",
            "serve",
            "--transport",
            "http",
            "--token",
            "changeme-please-12345",
            "--data-dir",
            str(tmp_path / "data"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=server_env(tmp_path),
        timeout=60,
    )
    assert chosen.returncode == 1 and "placeholder" in chosen.stderr and "openssl rand -hex 32" in chosen.stderr
    # a secret on the command line is one every local user reads with ps: said, with the ways that keep it private
    assert "--token puts the secret on this process's command line" in chosen.stderr
    assert "TIERMEM_HTTP_TOKEN" in chosen.stderr and "--tokens-file" in chosen.stderr
    from_env = subprocess.run(
        [PYTHON, "-m", "tiermem", "serve", "--transport", "http", "--data-dir", str(tmp_path / "data")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=server_env(tmp_path, TIERMEM_HTTP_TOKEN="changeme-please-12345"),
        timeout=60,
    )
    assert from_env.returncode == 1 and "placeholder" in from_env.stderr and "command line" not in from_env.stderr


def test_files_with_tokens_are_private(tmp_path: Path) -> None:
    target = tmp_path / "tiermem-http.toml"
    old = os.umask(0o022)
    try:
        with target.open("w") as out:  # what `tiermem config http > tiermem-http.toml` does in a shell
            done = subprocess.run(
                [PYTHON, "-m", "tiermem", "config", "http", "--data-dir", str(tmp_path / "d")],
                stdout=out,
                stderr=subprocess.PIPE,
                text=True,
                cwd=ROOT,
                env=server_env(tmp_path),
                timeout=60,
            )
        assert done.returncode == 0, done.stderr
        assert stat.S_IMODE(target.stat().st_mode) == 0o600 and "auth_tokens" in target.read_text()
        written = tmp_path / "by-flag.toml"
        done = run(tmp_path, "config", "http", "-o", str(written))
        assert done.returncode == 0 and stat.S_IMODE(written.stat().st_mode) == 0o600
        # the file's first comment and the note on stderr run the file written, not the name suggested otherwise
        assert written.read_text().splitlines()[0].endswith(f"tiermem serve --config {written}")
        assert f"--config {written}`" in done.stderr and "tiermem-http.toml" not in done.stderr
    finally:
        os.umask(old)
    loose = tmp_path / "tokens.toml"
    loose.write_text('[[tokens]]\ntoken = "3f9c2a7e1b4d6f8a0c2e4b6d8f1a3c5e"\nagents = ["*"]\n')
    loose.chmod(0o644)
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:  # a busy port: a clear error before any "listening", and a warning about the readable tokens file
        port = str(busy.getsockname()[1])
        done = run(tmp_path, "serve", "--transport", "http", "--port", port, "--tokens-file", str(loose), process=True)
    finally:
        busy.close()
    assert (
        done.returncode == 1
        and f"Port {port} on 127.0.0.1 is already in use" in done.stderr
        and "--port" in done.stderr
    )
    assert "listening" not in done.stderr and "Errno 98" not in done.stderr
    assert "chmod 600" in done.stderr


def test_a_malformed_stdio_line_is_answered_and_logged(tmp_path: Path) -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    done = subprocess.run(
        [PYTHON, "-m", "tiermem", "serve", "--data-dir", str(tmp_path / "data")],
        input='{"jsonrpc": "2.0", "id": 7, "method": \n{"just": "json"}\n' + json.dumps(init) + "\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=server_env(tmp_path),
        timeout=60,
    )
    replies = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert [r.get("error", {}).get("code") for r in replies[:2]] == [-32700, -32600], replies
    assert replies[0]["id"] is None and replies[2]["result"]["serverInfo"]["name"] == "tiermem"
    assert "not JSON" in done.stderr and "not a JSON-RPC 2.0 message" in done.stderr


def test_a_stdio_request_with_a_lone_surrogate_is_answered_with_its_id(tmp_path: Path) -> None:
    # Python's json reads a "\\ud83d" escape without its other half; the SDK's parser refuses the line, which was
    # answered -32700 "not JSON" with id null: the request itself was never answered and the client waited forever.
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    half = '{"label": "human", "new_string": "half an emoji \\ud83d"}'
    lines = [
        json.dumps(init),
        '{"jsonrpc": "2.0", "method": "notifications/initialized"}',
        '{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "memory_insert", "arguments": '
        + half
        + "}}",
        '{"jsonrpc": "2.0", "method": "notifications/\\udc80"}',  # a notification: no answer
        '{"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "memory_open", "arguments": '
        '{"label": "human"}}}',
    ]
    server = stdio_server(tmp_path)
    assert server.stdin is not None and server.stdout is not None
    try:
        server.stdin.write("\n".join(lines) + "\n")
        server.stdin.flush()
        replies: dict[object, dict[str, object]] = {}
        while 8 not in replies:  # the last request's answer (without the fix: the null-id one came before it)
            reply = json.loads(server.stdout.readline())
            replies[reply["id"]] = reply
        _, stderr = server.communicate(timeout=60)
    finally:
        server.kill()
        server.wait()
    assert set(replies) == {1, 7, 8}, replies
    error = replies[7]["error"]
    assert isinstance(error, dict)
    assert error["code"] == -32602, error
    assert "params.arguments.new_string holds a lone surrogate" in error["message"], error
    assert "position 14" in error["message"] and "\\ud83d\\ude00" in error["message"], error
    assert "half an emoji" not in json.dumps(replies[8]["result"])  # nothing was stored
    assert "lone surrogate" in stderr


def test_protocol_errors_over_stdio_say_what_was_wrong(tmp_path: Path) -> None:
    # The SDK's own -32602 for these says only "Invalid request parameters"; a list cursor it would ignore.
    def request(id_: int, method: str, params: dict[str, object] | None = None) -> str:
        return json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, **({"params": params} if params else {})})

    hello = {"capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    lines = [
        request(1, "tools/list"),
        request(2, "initialize", hello),
        request(3, "initialize", {"protocolVersion": "2025-11-25", **hello}),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        request(4, "logging/setLevel", {"level": "loud"}),
        request(5, "tools/call", {"arguments": {}}),
        request(6, "tools/list", {"cursor": "bm9wZQ"}),
        request(7, "resources/list", {"cursor": "x"}),
        request(8, "prompts/list", {"cursor": "x"}),
        request(9, "resources/templates/list", {"cursor": "x"}),
        request(10, "tools/list", {"cursor": None}),
        request(11, "initialize", {"protocolVersion": "2025-06-18", **hello}),  # a second handshake: refused
        request(12, "ping"),
    ]
    server = subprocess.Popen(
        [PYTHON, "-m", "tiermem", "serve", "--data-dir", str(tmp_path / "data")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
        env=server_env(tmp_path),
    )
    assert server.stdin is not None and server.stdout is not None
    replies = {}
    try:
        for line in lines:  # one at a time, each answer read before the next line (the notification has none)
            server.stdin.write(line + "\n")
            server.stdin.flush()
            if '"id"' in line:
                reply = json.loads(server.stdout.readline())
                replies[reply["id"]] = reply
    finally:
        server.stdin.close()
        server.wait(timeout=60)
    errors = {i: r["error"] for i, r in replies.items() if "error" in r}
    assert set(errors) == {1, 2, 4, 5, 6, 7, 8, 9, 11}, replies
    assert {e["code"] for i, e in errors.items() if i != 11} == {-32602} and errors[11]["code"] == -32600, replies
    assert errors[11]["message"].startswith("Invalid Request: initialize was already answered on this connection")
    assert "(stdio: start the server again; SSE: open a new event stream; streamable HTTP:" in errors[11]["message"]
    assert replies[12]["result"] == {}
    assert "tools/list was sent before initialize" in errors[1]["message"]
    assert "params.protocolVersion: Field required" in errors[2]["message"]
    assert "params.level: Input should be 'alert'" in errors[4]["message"]
    assert errors[4]["data"] == [{"field": "params.level", "problem": errors[4]["data"][0]["problem"]}]
    assert "Invalid parameters for tools/call: params.name: Field required" in errors[5]["message"]
    for i, method in enumerate(["tools/list", "resources/list", "prompts/list", "resources/templates/list"], 6):
        assert errors[i]["message"].startswith(f"Invalid cursor for {method}: "), errors[i]
    assert replies[3]["result"]["serverInfo"]["name"] == "tiermem" and replies[10]["result"]["tools"]


def test_import_rename_report_blocks_help_and_lance_logs(tmp_path: Path) -> None:
    done = run(tmp_path, "import", str(FIXTURES / "customer_service.af"), "--rename", "ada-copy")
    assert done.returncode == 0, done.stderr
    assert "`tiermem agents show ada-copy`" in done.stderr and "agents show customer_service" not in done.stderr
    helped = run(tmp_path, "blocks", "show", "--help").stdout
    assert "--core" in helped and "--all" not in helped and "--all" not in run(tmp_path, "blocks", "--help").stdout
    listed = run(tmp_path, "blocks", "list", "--agent", "ada-copy").stdout.splitlines()
    assert listed[0].split() == ["label", "chars", "limit", "read_only", "pinned", "version", "id"]
    reembed = run(tmp_path, "reembed", process=True)  # Lance logs to the process's stderr itself
    assert reembed.returncode == 0 and "WARN" not in reembed.stderr and "lance::" not in reembed.stderr, reembed.stderr


def test_insert_into_an_empty_block_adds_no_blank_line(tmp_path: Path) -> None:
    assert run(tmp_path, "blocks", "create", "notes").returncode == 0
    from tiermem.domain.blocks import Insert

    m = open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="hashing"))
    agent = m.ensure_agent("default").id
    assert m.edit(agent, "notes", Insert("Name: Ada")).value == "Name: Ada"
    assert m.edit(agent, "notes", Insert("Likes tea")).value == "Name: Ada\nLikes tea"
    assert json.loads(run(tmp_path, "blocks", "show", "notes", "--json").stdout)["value"] == "Name: Ada\nLikes tea"


@pytest.mark.parametrize(
    "name",
    [
        "memory_replace",
        "memory_insert",
        "memory_rethink",
        "core_memory_append",
        "core_memory_replace",
        "memory_apply_patch",
        "memory_revert",
    ],
)
def test_a_revertible_block_edit_is_not_destructive(name: str) -> None:
    from tiermem.server.registry import BY_NAME

    assert BY_NAME[name].annotations.destructive_hint is False
    assert BY_NAME["archival_memory_delete"].annotations.destructive_hint is True  # a deleted passage is gone


def test_delete_agent_on_every_core_backend(memory) -> None:  # type: ignore[no-untyped-def]
    """``Memory.delete_agent`` (and ``CoreStore.delete_agent``) on SQLite and on object storage alike."""
    from tiermem.base.config import BlockSpec
    from tiermem.domain.blocks import Rethink

    gone, stays = memory.create_agent("gone"), memory.create_agent("stays")
    own = memory.create_block(gone.id, BlockSpec(label="own", value="mine"))
    shared = memory.create_block(gone.id, BlockSpec(label="team", value="ours"))
    memory.attach(stays.id, shared.id)
    memory.edit(gone.id, "own", Rethink("mine, edited"), actor="human")
    memory.archive.insert(gone.id, "a passage of the deleted agent")
    plan = memory.deletion_plan(gone.id)
    assert plan.blocks[-1] == "own" and plan.shared_blocks_kept == ("team",) and plan.passages == 1
    memory.delete_agent(gone.id)
    assert [a.name for a in memory.list_agents()] == ["stays"] and memory.pending_deletions() == []
    assert memory.core.get_block(own.id) is None and memory.core.history(own.id) == []
    assert memory.block(stays.id, "team").value == "ours" and memory.core.agents_of_block(shared.id) == [stays.id]
    assert memory.archive.rows.stray_rows([stays.id]) == {"messages": 0, "passages": 0}


def test_no_write_for_a_deleted_agent(memory) -> None:  # type: ignore[no-untyped-def]
    """A server may still hold the id of an agent deleted meanwhile: every write of rows or blocks for that id is
    refused, storing nothing (a later agent of the same name has the same id and would find them), on both core
    backends; an agent whose deletion has started (marked) is refused too."""
    from tiermem.base.config import BlockSpec
    from tiermem.base.errors import NotFoundError
    from tiermem.domain.memory import DELETING_KEY

    gone = memory.ensure_agent("gone")
    memory.delete_agent(gone.id)
    writes = {
        "archival_insert": lambda: memory.archival_insert(gone.id, "written after the deletion", None),
        "conversation_log": lambda: memory.conversation_log(gone.id, [{"role": "user", "content": "after"}]),
        "archive.insert_many": lambda: memory.archive.insert_many(gone.id, [("after", [])]),
        "create_block": lambda: memory.create_block(gone.id, BlockSpec(label="late", value="after")),
    }
    for name, write in writes.items():
        with pytest.raises(NotFoundError, match="it was deleted"):
            write()
            pytest.fail(f"{name} wrote for a deleted agent")
    assert memory.archive.rows.stray_rows([]) == {"messages": 0, "passages": 0}
    again = memory.ensure_agent("gone")  # the same name: the same (stable) id, and nothing of the old one
    assert again.id == gone.id and memory.archive.counts(again.id)[:2] == (0, 0)
    assert [b.label for b in memory.blocks(again.id)] == [s.label for s in memory.default_blocks]

    memory.set_agent_metadata(again.id, {DELETING_KEY: "2024-01-01T00:00:00+00:00"})  # a deletion under way
    with pytest.raises(NotFoundError, match="is being deleted"):
        memory.archival_insert(again.id, "written during the deletion", None)
    assert memory.archive.counts(again.id)[:2] == (0, 0)
