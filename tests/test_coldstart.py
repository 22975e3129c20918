"""Answer first, load later: the stdio server answers the handshake and tools/list without the heavy libraries.

The server runs under ``tests/harness/without_heavy.py``, which makes lancedb, pyarrow, onnxruntime,
numpy, fastembed and pandas impossible to import. Whatever it answers there, it answered without them;
opening the memory store (which needs them) fails in the background and a tool call reports that clearly.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from tiermem.base.config import Settings
from tiermem.base.errors import SchemaError, StoreError
from tiermem.domain.memory import Memory
from tiermem.server.runtime import MemoryHandle

from .conftest import PYTHON, ROOT, serve_in_process, text_of
from .test_transports import server_env, stdio_server

HEAVY = ("lancedb", "pyarrow", "onnxruntime", "numpy", "fastembed", "pandas")
HARNESS = Path(__file__).parent / "harness" / "without_heavy.py"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("mode", "extra"),
    [("legacy", ()), ("auto", ()), ("legacy", ("--agent-loop",))],
    ids=["handshake", "modern", "agent-loop"],
)
async def test_initialize_and_tools_list_need_no_heavy_library(
    tmp_path: Path, mode: str, extra: tuple[str, ...]
) -> None:
    params = StdioServerParameters(
        command=PYTHON,
        args=[str(HARNESS), ",".join(HEAVY), "serve", "--data-dir", str(tmp_path / "data"), *extra],
        env=server_env(tmp_path, TIERMEM_LLM_PROVIDER="sampling"),
        cwd=str(ROOT),
    )
    log = tmp_path / "stderr.log"
    with log.open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode=mode) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"memory_replace", "core_memory_view", "archival_memory_search"} <= names
            # Block tools need only the core state (SQLite): they answer although the archive cannot open.
            edit = await client.call_tool("memory_insert", {"label": "human", "new_string": "Likes rain"})
            block = await client.read_resource("memory://blocks/human")
            result = await client.call_tool("archival_memory_search", {"query": "rain"})
    stderr = log.read_text()
    assert not edit.is_error and "Likes rain" in text_of(edit), text_of(edit)
    assert "Likes rain" in block.contents[0].text
    # Opening the archive needed the refused libraries: the call that needs it says so instead of hanging.
    assert result.is_error, text_of(result)
    assert "could not open its memory store" in text_of(result)
    refused = [line for line in stderr.splitlines() if line.startswith("refused import")]
    assert refused, stderr  # the block was in force: the opener did ask for them
    # Only the archive's background opener asked for them; the code that answered requests never did.
    assert all(line.endswith("in thread tiermem-open-archive") for line in refused), stderr


@pytest.mark.anyio
async def test_opening_starts_once_the_handshake_is_answered(settings: Settings) -> None:
    """The lifespan opens the store after the first answer; nothing opens it while nobody has asked."""
    server = serve_in_process(settings)
    handle = server.runtime.handle
    assert not handle.started
    async with Client(server, mode="legacy") as client:  # initialize, then notifications/initialized
        await client.list_tools()
        assert handle.started
        result = await client.call_tool("memory_insert", {"label": "human", "new_string": "Likes rain"})
        assert not result.is_error, text_of(result)


@pytest.mark.anyio
async def test_a_tool_is_a_plain_function(settings: Settings) -> None:
    """A tool can be imported and called on its own; without a request it finds the runtime on the server."""
    from mcp.server.mcpserver import Context
    from mcp.server.subscriptions import InMemorySubscriptionBus

    from tiermem.server.tools import core_memory_view, memory_insert

    server = serve_in_process(settings)
    ctx = Context(mcp_server=server, subscriptions=InMemorySubscriptionBus())  # what MCPServer.call_tool makes
    assert (await memory_insert("human", "Name: Ada", ctx)).endswith("Name: Ada")
    view = await core_memory_view(ctx)
    assert "Name: Ada" in view.content[0].text and view.structured_content["blocks"][1]["value"].endswith("Name: Ada")


def test_a_call_waits_for_the_opening_a_bounded_time() -> None:
    release = threading.Event()

    def slow() -> tuple[Memory, str]:
        release.wait()
        raise OSError("disk gone")

    handle = MemoryHandle(slow, timeout=0.05)
    with pytest.raises(StoreError, match="still opening its memory store"):
        handle.get()
    release.set()
    with pytest.raises(StoreError, match=r"could not open its memory store \(OSError: disk gone\)"):
        handle.get()


def test_our_own_opening_errors_pass_through_unchanged() -> None:
    def refuse() -> tuple[Memory, str]:
        raise SchemaError("The data directory was written by another embedding model; run `tiermem reembed`.")

    with pytest.raises(SchemaError, match="run `tiermem reembed`"):
        MemoryHandle(refuse).get()


def test_a_server_closed_right_after_its_first_answer_exits_cleanly(tmp_path: Path) -> None:
    """A host that sends one block edit and closes stdin at once leaves the archive and the real model still
    opening in background threads: the server lets them finish (``Memory.settle``) and exits with status 0 and
    no error output. (Before the settle, one spawn in a `python -m bench coldstart` run printed "FATAL:
    exception not rethrown": native code torn down mid-import at interpreter shutdown. The race is rare; this
    test checks the clean exit, it does not reproduce that race on demand.)"""
    import json

    env = server_env(tmp_path)
    env.pop("TIERMEM_EMBEDDING_MODEL")  # the packaged model: onnxruntime loads in the background
    proc = stdio_server(tmp_path, env=env)
    assert proc.stdin is not None and proc.stdout is not None

    def send(message: dict[str, object]) -> None:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
        proc.stdin.flush()

    send(
        {
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
    )
    assert json.loads(proc.stdout.readline())["id"] == 1
    send({"method": "notifications/initialized"})
    send(
        {
            "id": 2,
            "method": "tools/call",
            "params": {"name": "memory_insert", "arguments": {"label": "human", "new_string": "Likes rain"}},
        }
    )
    while True:  # log notifications may come first
        reply = json.loads(proc.stdout.readline())
        if reply.get("id") == 2:
            break
    assert not reply["result"].get("isError"), reply
    proc.stdin.close()
    status = proc.wait(timeout=120)
    stderr = proc.stderr.read() if proc.stderr else ""
    assert status == 0, stderr
    assert "FATAL" not in stderr and "Traceback" not in stderr, stderr


def test_tool_modules_load_when_the_tools_are_first_listed(tmp_path: Path) -> None:
    """The registry names each tool's function by module; a server is built (and answers `initialize`) first."""
    import json
    import subprocess

    code = (
        "import json, sys\n"
        "import tiermem.cli.main\n"
        "from tiermem.base.config import load_settings\n"
        "from tiermem.server.runtime import MemoryHandle\n"
        "from tiermem.server.app import build_server\n"
        # (tiermem.domain.blocks is not among them: initialize renders core memory with it, for the instructions)
        "MODULES = ('tiermem.server.tools', 'tiermem.server.search_tools', 'tiermem.server.memory_tool')\n"
        "server = build_server(MemoryHandle(lambda: None), load_settings(data_dir=sys.argv[1], tools='all'))\n"
        "before = [m for m in MODULES if m in sys.modules]\n"
        "names = [t.name for t in server._tool_manager.list_tools()]\n"
        "print(json.dumps([before, [m for m in MODULES if m in sys.modules], len(names)]))\n"
    )
    out = subprocess.run([PYTHON, "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    before, after, count = json.loads(out.stdout.strip().splitlines()[-1])
    assert before == []
    assert after == ["tiermem.server.tools", "tiermem.server.search_tools", "tiermem.server.memory_tool"]
    assert count >= 15


WATCH_HARNESS = Path(__file__).parent / "harness" / "watch_start.py"


@pytest.fixture(scope="module")
def watched_start(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], dict[str, Any]]:
    """One ``tiermem serve`` under ``harness/watch_start.py``: initialize, initialized, a block edit, an archival
    search, stdin closed. Returns (the harness's report lines by their first word, the answers by id)."""
    import json
    import subprocess

    tmp_path = tmp_path_factory.mktemp("watched")
    proc = subprocess.Popen(
        [PYTHON, str(WATCH_HARNESS), "serve", "--data-dir", str(tmp_path / "data")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=server_env(tmp_path),
    )
    assert proc.stdin is not None and proc.stdout is not None
    answers: dict[str, Any] = {}

    def call(message: dict[str, Any]) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
        proc.stdin.flush()
        while "id" in message and message["id"] not in answers:  # log notifications may come first
            reply = json.loads(proc.stdout.readline())
            if "id" in reply:
                answers[reply["id"]] = reply

    call(
        {
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
    )
    call({"method": "notifications/initialized"})
    call(
        {
            "id": 2,
            "method": "tools/call",
            "params": {"name": "memory_insert", "arguments": {"label": "human", "new_string": "Likes rain"}},
        }
    )
    call(
        {"id": 3, "method": "tools/call", "params": {"name": "archival_memory_search", "arguments": {"query": "rain"}}}
    )
    proc.stdin.close()
    status = proc.wait(timeout=120)
    stderr = proc.stderr.read() if proc.stderr else ""
    assert status == 0, stderr[-3000:]
    report = {
        line.split()[0]: line
        for line in stderr.splitlines()
        if line.split()[:1]
        and line.split()[0] in ("gc-before-answer", "threads-at-answer", "heavy-at-answer", "gc-exit")
    }
    assert len(report) == 4, stderr[-3000:]
    return report, answers


def test_the_garbage_collector_waits_until_initialize_is_answered(
    watched_start: tuple[dict[str, str], dict[str, Any]],
) -> None:
    """``tiermem serve`` holds the cyclic collector off while it starts (gcpause): not one collection runs before
    the answer to ``initialize``; once the client has that answer the start is frozen and collections run again."""
    report, answers = watched_start
    assert "<memory_blocks>" in answers[1]["result"]["instructions"]  # core memory was read for it, as before
    assert not answers[2]["result"].get("isError"), answers[2]
    assert report["gc-before-answer"] == "gc-before-answer 0", report
    fields = dict(part.split("=") for part in report["gc-exit"].split()[1:])
    assert fields["enabled"] == "True", report
    assert int(fields["frozen"]) > 10_000, report  # the start's objects: out of later collections
    assert int(fields["collections"]) > 0, report  # and the collector ran again afterwards


def test_the_archive_starts_opening_once_initialize_is_answered(
    watched_start: tuple[dict[str, str], dict[str, Any]],
) -> None:
    """``initialize`` waits for core memory (its instructions carry it), not for the archive: the archive's
    opening thread and its libraries start only once the client has that answer, and then it opens."""
    report, answers = watched_start
    threads = report["threads-at-answer"].split(" ", 1)[1].split(",")
    assert "tiermem-open-archive" not in threads, report
    assert report["heavy-at-answer"].split()[1:] == [], report
    search = answers[3]["result"]
    assert not search.get("isError"), search  # opened after the answer: the search found its store
    assert "Likes rain" not in json.dumps(search)  # (a block edit is not archival memory: nothing to find)


def test_a_hold_of_the_collector_ends_once() -> None:
    import gc

    from tiermem.base import gcpause

    assert gc.isenabled() and not gcpause.held()
    try:
        assert gcpause.hold(deadline=60)
        assert not gc.isenabled() and gcpause.held()
        assert not gcpause.hold(deadline=60)  # one hold at a time
        frozen = gc.get_freeze_count()
        assert gcpause.release()
        assert gc.isenabled() and not gcpause.held() and gc.get_freeze_count() > frozen
        assert not gcpause.release()  # every request calls it: without a hold it does nothing
        gc.disable()  # someone else's: not ours to turn on
        assert not gcpause.hold() and not gcpause.release() and not gc.isenabled()
        gc.enable()
        assert gcpause.hold(deadline=0.05)  # nobody releases it: the deadline does
        for _ in range(400):
            if gc.isenabled():
                break
            threading.Event().wait(0.05)
        assert gc.isenabled() and not gcpause.held()
    finally:
        gcpause.release()
        gc.enable()
        gc.unfreeze()
