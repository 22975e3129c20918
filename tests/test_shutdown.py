"""Clean exit: SIGINT and SIGTERM stop ``tiermem serve`` on every transport once the requests in flight are done, and
no write a client was told succeeded is lost. (How fast: ``python -m bench shutdown``; no timed asserts here.)"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.sse import sse_client

from tiermem.base.config import load_settings
from tiermem.base.errors import ShuttingDownError
from tiermem.domain.factory import open_memory
from tiermem.process.shutdown import Shutdown

from .conftest import PYTHON, ROOT
from .test_transports import AUTH, HTTP_TOKEN, free_port, http_target, server_env, wait_for_port

EXIT_WAIT = 60  # seconds: generous, only so that a server that never exits fails the test instead of hanging it


def stored(data: Path) -> tuple[set[str], str]:
    """The archival passages' contents and the human block's value in ``data``."""
    memory = open_memory(load_settings(data_dir=data, embedding_model="hashing"), start_embedder=False)
    agent = memory.ensure_agent("default").id
    passages, _ = memory.archive.list_passages(agent, limit=200)
    return {p.content for p in passages}, memory.block(agent, "human").value


def rest_of_output(proc: subprocess.Popen[bytes]) -> list[dict[str, Any]]:
    """The messages a stdio server writes until it exits. Its stdin stays open, as a host keeps it: the server has to
    stop because of the signal, not because its input ended."""
    assert proc.stdout is not None
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.extend(proc.stdout.readlines()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(EXIT_WAIT)
    proc.wait(timeout=1)  # TimeoutExpired: the server did not exit
    return [json.loads(line) for line in out if line.strip()]


def rpc(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_stdio_finishes_what_is_in_flight_and_exits(tmp_path: Path, signum: int) -> None:
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [PYTHON, "-m", "tiermem", "serve", "--data-dir", str(data)],
        cwd=ROOT,
        env=server_env(tmp_path),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "stderr.log").open("w"),
    )
    assert proc.stdout is not None
    rpc(
        proc,
        {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
    )
    assert json.loads(proc.stdout.readline())["id"] == 0
    rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    sent: dict[int, tuple[str, str]] = {}
    for i in range(1, 41):  # pipelined: when the signal comes, some are done, some running, some not read yet
        tool, args = (
            ("archival_memory_insert", {"content": f"fact number {i}"})
            if i % 2
            else ("memory_insert", {"label": "human", "new_string": f"line {i}"})
        )
        sent[i] = (tool, json.dumps(args))
        rpc(proc, {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": tool, "arguments": args}})
    answers = [json.loads(proc.stdout.readline()) for _ in range(5)]
    proc.send_signal(signum)  # the stdin pipe stays open, as a host keeps it
    answers += rest_of_output(proc)
    assert proc.returncode == 0, (tmp_path / "stderr.log").read_text()
    acked = [sent[a["id"]] for a in answers if "result" in a and not a["result"].get("isError")]
    assert len(acked) >= 5
    contents, human = stored(data)
    for tool, args in acked:
        value = json.loads(args)
        if tool == "archival_memory_insert":
            assert value["content"] in contents
        else:
            assert value["new_string"] in human.split("\n")


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["http", "sse"])
async def test_network_transports_finish_what_is_in_flight_and_exit(tmp_path: Path, transport: str) -> None:
    data, port = tmp_path / "data", free_port()
    proc = subprocess.Popen(
        [PYTHON, "-m", "tiermem", "serve", "--transport", transport, "--port", str(port), "--data-dir", str(data)],
        cwd=ROOT,
        env=server_env(tmp_path, TIERMEM_HTTP_TOKEN=HTTP_TOKEN),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}/mcp" if transport == "http" else f"http://127.0.0.1:{port}/sse"
    acked: list[str] = []
    try:
        wait_for_port(port, proc)

        async def writer(n: int) -> None:
            try:
                target = http_target(url) if transport == "http" else sse_client(url, headers=AUTH)
                async with Client(target, cache=None) as client:
                    for i in range(1000):
                        result = await client.call_tool("archival_memory_insert", {"content": f"writer {n} fact {i}"})
                        if result.is_error:
                            return
                        acked.append(f"writer {n} fact {i}")
            except Exception:  # noqa: BLE001 - the server going away mid-call is expected; only answers count
                return

        async with anyio.create_task_group() as tg:
            for n in range(3):
                tg.start_soon(writer, n)
            with anyio.fail_after(EXIT_WAIT):
                while len(acked) < 6:
                    await anyio.sleep(0.02)
            proc.send_signal(signal.SIGINT)
            with anyio.fail_after(EXIT_WAIT):
                while proc.poll() is None:
                    await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
    finally:
        if proc.poll() is None:
            proc.kill()
        stderr = proc.stderr.read().decode() if proc.stderr else ""
    assert proc.returncode == 0, stderr
    assert "stopped" in stderr
    contents, _ = stored(data)
    assert set(acked) <= contents


def test_the_in_flight_request_is_answered_before_the_exit(tmp_path: Path) -> None:
    """A call that is running when the signal comes still gets its answer (and is stored); later calls are refused."""
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [PYTHON, "-m", "tiermem", "serve", "--data-dir", str(data)],
        cwd=ROOT,
        env=server_env(tmp_path),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    rpc(
        proc,
        {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
    )
    proc.stdout.readline()
    rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    # A long text (chunked and embedded: seconds of work, after the store and the model open) is in flight.
    long_text = " ".join(f"sentence {i} of a long document written while stopping." for i in range(1600))[:99_000]
    rpc(
        proc,
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "archival_memory_insert", "arguments": {"content": long_text}},
        },
    )
    anyio.run(anyio.sleep, 0.3)
    proc.send_signal(signal.SIGINT)
    anyio.run(anyio.sleep, 0.2)
    # A call sent after the signal races the in-flight one: if that is still running the server reads the call and
    # refuses it; if it already finished, the server may have exited (a closed pipe) or stopped reading. Either way
    # the late call must never be carried out.
    try:
        rpc(
            proc,
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "archival_memory_insert", "arguments": {"content": "sent after the signal"}},
            },
        )
    except BrokenPipeError:
        pass
    answers = {a["id"]: a for a in rest_of_output(proc)}
    assert proc.returncode == 0
    assert "result" in answers[1] and not answers[1]["result"].get("isError"), answers[1]
    if 2 in answers:
        assert "shutting down" in answers[2]["error"]["message"], answers[2]
    passages = stored(data)[0]
    assert "sent after the signal" not in passages
    assert "".join(sorted(passages)).count("written while stopping") >= 1500  # every chunk of it


def test_once_stopping_a_new_request_is_refused_and_one_in_flight_finishes() -> None:
    """The doors close at the first signal: a request already counted finishes and is waited for; a new one is
    refused with the reason (the race-free half of the in-flight test above)."""
    shutdown = Shutdown(drain_seconds=5)
    shutdown.enter()  # in flight before the signal
    shutdown.stopping.set()
    with pytest.raises(ShuttingDownError, match="shutting down"):
        shutdown.enter()
    assert not shutdown.wait_idle(0.05)  # still busy with the first
    shutdown.leave()
    assert shutdown.wait_idle(0.05)


def test_once_stopping_a_notification_is_dropped_quietly_and_a_request_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Ctrl-C just after `initialize`: the host's `notifications/initialized` arrives while stopping. There is no one
    to answer a notification: it is dropped (no handler run, no error, no traceback logged); a request still gets
    the reason as its error. The context stands in for the SDK's (its request_id and method are all that is read)."""
    from types import SimpleNamespace

    from mcp.shared.exceptions import MCPError

    shutdown = Shutdown(drain_seconds=5)
    middleware = shutdown.middleware()
    ran: list[str] = []

    async def handler(ctx: Any) -> None:
        ran.append(ctx.method)

    shutdown.stopping.set()
    with caplog.at_level("INFO"):
        assert (
            anyio.run(middleware, SimpleNamespace(request_id=None, method="notifications/initialized"), handler) is None
        )
    assert ran == [] and not [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")]
    with pytest.raises(MCPError, match="shutting down"):
        anyio.run(middleware, SimpleNamespace(request_id=2, method="tools/call"), handler)
    assert ran == [] and shutdown.wait_idle(0.05)


def test_a_hook_in_flight_when_the_host_closes_stdin_is_finished(tmp_path: Path) -> None:
    """A host that ends its session closes the server's stdin, with no signal. A hook request under way then (a
    prompt is even logged after its answer) was cut off by the exit: the prompt the host was told is taken was lost.
    The end of input waits for the hooks in flight, as a signal does. The request here is held in flight by the
    protocol's confirmation (``"confirm": true``), which the hook sends only once the server is stopping."""
    import socket
    import time

    from tiermem.base import rendezvous

    from .test_hooks import prompt, started_server, stored_turns

    data = tmp_path / "data"
    log = tmp_path / "server.log"
    server = started_server(data, server_env(tmp_path), log)
    (path,) = [p for p in rendezvous.runtime_dir().glob("*.sock") if str(server.pid) in p.name]
    request = {
        "v": 1,
        "key": rendezvous.memory_key(data, "default"),
        "event": "UserPromptSubmit",
        "input": prompt("s1", "How old is Ziggy the zebra?", "p1"),
        "ack": True,
        "confirm": True,
    }
    with socket.socket(socket.AF_UNIX) as hook:
        hook.connect(str(path))
        hook.sendall(json.dumps(request).encode() + b"\n")
        answers = hook.makefile("rb")
        assert json.loads(answers.readline()) == {"ack": True}  # taken: in flight until confirmed
        assert server.stdin is not None
        server.stdin.close()  # the session ends
        deadline = time.monotonic() + EXIT_WAIT  # until the server waits for the request, or has exited without it
        while "request(s) in flight, then stopping" not in log.read_text() and server.poll() is None:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        try:
            hook.sendall(json.dumps(rendezvous.GO).encode() + b"\n")
            answer = answers.readline()
        except OSError:
            answer = b""  # the server is gone
    assert server.wait(EXIT_WAIT) == 0, log.read_text()
    assert json.loads(answer or b"{}").get("ok") is True, log.read_text()
    assert stored_turns(data, "s1") == [("user", "How old is Ziggy the zebra?")]


SECOND_SIGNAL = """
import os, signal, sys, threading, time
from pathlib import Path
from tiermem.process.shutdown import Shutdown

marker = Path(sys.argv[1])
shutdown = Shutdown(drain_seconds=30)
shutdown.install()
held = threading.Event()


def slow_on_the_drain_thread() -> None:
    if threading.current_thread() is not threading.main_thread():
        held.set()
        time.sleep(30)


shutdown.on_stop(slow_on_the_drain_thread)
shutdown.on_stop(marker.touch)  # a hook socket's removal
shutdown.enter()  # one request in flight: the first signal drains on its thread
os.kill(os.getpid(), signal.SIGINT)
held.wait(10)
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(30)
"""


def test_a_second_signal_closes_the_listeners_the_drain_had_not_closed_yet(tmp_path: Path) -> None:
    """Claude Code sends SIGTERM 0.1 s after SIGINT: on a loaded machine the drain's thread may not have removed the
    hook socket by then, and the second signal ends the process at once; it closes the listeners first."""
    marker = tmp_path / "closed"
    done = subprocess.run(
        [PYTHON, "-c", SECOND_SIGNAL, str(marker)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=server_env(tmp_path),
    )
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert marker.exists(), done.stderr
