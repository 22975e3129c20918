"""How fast `tiermem serve` stops on SIGINT (`python -m bench shutdown`). Goal: within 2 s after the request in flight.

Per transport (stdio with its input kept open as a host keeps it, streamable HTTP, SSE), ``--rounds`` times:

- ``idle``: the store open after a write, nothing running; SIGINT -> the process has exited;
- ``in_flight`` (stdio): a long archival insert (chunked and embedded) is running when SIGINT comes; from its
  answer to the exit, and from the signal to the exit.

With Claude Code installed (``tests/install_hosts.py``): ``--sessions`` runs of ``claude -p`` against a fake model
API on loopback, reading Claude Code's debug log: the time from "Sending SIGINT" to the connection closing, and how
often Claude Code had to fall back to SIGTERM (it does so 0.1 s after SIGINT).
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio

from .common import ROOT, bench_env, machine, save, stats

LONG = " ".join(f"sentence {i} of a long document." for i in range(3000))[:60_000]


def _rpc(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()


def _call(i: int, content: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": i,
        "method": "tools/call",
        "params": {"name": "archival_memory_insert", "arguments": {"content": content}},
    }


def stdio_round(env: dict[str, str], in_flight: bool) -> dict[str, float]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tiermem", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    _rpc(
        proc,
        {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "1"},
            },
        },
    )
    proc.stdout.readline()
    _rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    _rpc(proc, _call(1, "warm up: open the store and the model"))
    proc.stdout.readline()
    if in_flight:
        _rpc(proc, _call(2, LONG))
        time.sleep(0.2)
    signalled = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    answered = None
    if in_flight:
        proc.stdout.readline()
        answered = time.perf_counter()
    proc.wait(timeout=120)
    exited = time.perf_counter()
    out = {"signal_to_exit": exited - signalled}
    if answered is not None:
        out["answer_to_exit"] = exited - answered
    return out


def network_round(env: dict[str, str], transport: str) -> float:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = "bench-shutdown-token-0123456789abcdef"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tiermem", "serve", "--transport", transport, "--port", str(port), "--token", token],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=ROOT,
    )

    async def use() -> None:
        import httpx2
        from mcp import Client
        from mcp.client.sse import sse_client
        from mcp.client.streamable_http import streamable_http_client

        url = f"http://127.0.0.1:{port}/{'mcp' if transport == 'http' else 'sse'}"
        for _ in range(600):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                await anyio.sleep(0.1)
        auth = {"authorization": f"Bearer {token}"}
        target = (
            streamable_http_client(url, http_client=httpx2.AsyncClient(headers=auth))
            if transport == "http"
            else sse_client(url, headers=auth)
        )
        async with Client(target, cache=None) as client:
            await client.call_tool("archival_memory_insert", {"content": "warm up"})

    anyio.run(use)
    signalled = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=120)
    return time.perf_counter() - signalled


def claude_code_sessions(n: int) -> dict[str, Any] | None:
    sys.path.insert(0, str(ROOT))
    from tests.claude_code import ClaudeCode, claude_code

    exe, why = claude_code()
    if exe is None:
        return {"skipped": why}
    closes, fallbacks = [], 0
    with tempfile.TemporaryDirectory() as tmp, ClaudeCode(exe, Path(tmp)) as cc:
        config = cc.mcp_config("--data-dir", str(Path(tmp) / "data"))
        for _ in range(n):
            result = cc.run("hello", "--mcp-config", str(config), "--strict-mcp-config", "--debug")
            log = (cc.home / ".claude" / "debug" / f"{result['session_id']}.txt").read_text()
            sent = _stamp(log, 'MCP server "tiermem": Sending SIGINT')
            closed = _stamp(log, "connection closed", after='MCP server "tiermem"')
            fallbacks += "SIGINT failed" in log
            if sent and closed:
                closes.append((closed - sent).total_seconds())
    return {"sessions": n, "sigterm_fallbacks": fallbacks, "sigint_to_closed": stats(closes) if closes else None}


def _stamp(log: str, marker: str, after: str = "") -> datetime | None:
    for line in log.splitlines():
        if marker in line and after in line:
            m = re.match(r"(\S+Z)", line)
            if m:
                return datetime.fromisoformat(m.group(1).replace("Z", "+00:00"))
    return None


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench shutdown")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sessions", type=int, default=10)
    args, _ = parser.parse_known_args(sys.argv[2:])
    env = bench_env()
    idle, flight_answer, flight_signal = [], [], []
    network: dict[str, list[float]] = {"http": [], "sse": []}
    for _ in range(args.rounds):
        idle.append(stdio_round(env, False)["signal_to_exit"])
        r = stdio_round(env, True)
        flight_answer.append(r["answer_to_exit"])
        flight_signal.append(r["signal_to_exit"])
        for transport in network:
            network[transport].append(network_round(env, transport))
    result: dict[str, Any] = {
        "machine": machine(),
        "stdio_idle_signal_to_exit": stats(idle),
        "stdio_in_flight_answer_to_exit": stats(flight_answer),
        "stdio_in_flight_signal_to_exit": stats(flight_signal),
        **{f"{t}_idle_signal_to_exit": stats(v) for t, v in network.items()},
        "claude_code": claude_code_sessions(args.sessions),
    }
    save("shutdown", result)
    print("SIGINT -> exit (ms)                          p50      max")
    for key, value in result.items():
        if isinstance(value, dict) and "p50_ms" in value:
            print(f"  {key:40s} {value['p50_ms']:8.1f} {max(value['p50_ms'], value['p99_ms']):8.1f}")
    print(f"  Claude Code: {json.dumps(result['claude_code'])}")
    worst = max(result[k]["p99_ms"] for k in result if k.endswith("_to_exit") and "signal" in k and "flight" not in k)
    print(
        f"  goal (exit within 2 s of the last answer): {'met' if worst <= 2000 and result['stdio_in_flight_answer_to_exit']['p99_ms'] <= 2000 else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
