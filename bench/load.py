"""Resident memory of one HTTP server under 8 concurrent clients (issue #13's growth defect).

    python -m bench load [--seconds 100] [--port 8797]

Starts `tiermem serve --transport http` on loopback with a fresh data dir and `tools = all`; 8 clients
(the official MCP client, streamable HTTP) each reconnect every 25 calls and cycle core_memory_append,
archival_memory_search, conversation_log and conversation_search. Every 10 s it prints the server's RSS
(/proc/PID/status) and the call counts; at the end p50/p99 of all calls. Loopback only, bounded in time.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

import anyio
from mcp import Client

from .common import rss_mb


OPS = ("append", "search", "log", "recall")


async def call(c: Client, op: str, n: int, i: int) -> None:
    if op == "append":
        await c.call_tool("core_memory_append", {"label": "human", "content": f"x{n}-{i}"[:20]})
    elif op == "search":
        await c.call_tool("archival_memory_search", {"query": f"fact {i} about things"})
    elif op == "log":
        await c.call_tool("conversation_log", {"messages": [{"role": "user", "content": f"hello {n} {i}"}]})
    elif op == "recall":
        await c.call_tool("conversation_search", {"query": f"hello {i}"})
    else:  # "list": the protocol alone, no storage
        await c.list_tools()


async def client(url: str, n: int, stop: float, stats: dict[str, Any], ops: list[str], per: int) -> None:
    i = 0
    while time.time() < stop:
        async with Client(url, cache=None) as c:
            for _ in range(per):
                if time.time() >= stop:
                    break
                i += 1
                t = time.perf_counter()
                try:
                    await call(c, ops[i % len(ops)], n, i)
                    stats["ok"] += 1
                except Exception as exc:  # counted and shown: a load run reports errors, it does not stop on them
                    stats["err"] += 1
                    stats["last"] = repr(exc)[:200]
                stats["lat"].append(time.perf_counter() - t)


async def run(seconds: int, port: int, ops: list[str], per: int, wrap: str | None) -> None:
    data = tempfile.mkdtemp(prefix="tiermem-load-")
    env = dict(os.environ, TIERMEM_DATA_DIR=data, TIERMEM_TOOLS="all")
    entry = [wrap] if wrap else ["-m", "tiermem"]
    print(f"data dir {data} (server log: server.log there); ops {ops}, {per} calls per session", flush=True)
    server = subprocess.Popen([sys.executable, *entry, "serve", "--transport", "http", "--port", str(port)],
                              env=env, stderr=open(os.path.join(data, "server.log"), "w"))
    try:
        for _ in range(150):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.2)
        stats: dict[str, Any] = {"ok": 0, "err": 0, "lat": []}
        stop = time.time() + seconds
        start = time.time()
        async with anyio.create_task_group() as tg:
            for n in range(8):
                tg.start_soon(client, f"http://127.0.0.1:{port}/mcp", n, stop, stats, ops, per)
            while time.time() < stop:
                await anyio.sleep(10)
                print(f"t={time.time() - start:5.0f}s rss={rss_mb(server.pid):.0f} MB ok={stats['ok']} err={stats['err']} "
                      f"load={os.getloadavg()[0]:.1f} {stats.get('last', '')}", flush=True)
        lat = sorted(stats["lat"]) or [0.0]
        print(f"calls {stats['ok']} errors {stats['err']} p50 {1000 * lat[len(lat) // 2]:.1f} ms "
              f"p99 {1000 * lat[int(len(lat) * 0.99)]:.1f} ms")
    finally:
        server.terminate()
        server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench load")
    parser.add_argument("--seconds", type=int, default=100)
    parser.add_argument("--port", type=int, default=8797)
    parser.add_argument("--ops", default=",".join(OPS),
                        help="comma-separated calls each client cycles through: append, search, log, recall, list")
    parser.add_argument("--per-session", type=int, default=25, help="calls per client session before it reconnects")
    parser.add_argument("--wrap", help="a Python script to run instead of `-m tiermem` (same arguments), e.g. to trace")
    args, _ = parser.parse_known_args(sys.argv[1:])
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    unknown = [o for o in ops if o not in (*OPS, "list")]
    if unknown or not ops:
        parser.error(f"unknown --ops {unknown}; use some of {', '.join((*OPS, 'list'))}")
    anyio.run(run, args.seconds, args.port, ops, args.per_session, args.wrap)
