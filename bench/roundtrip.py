"""Tool round trips over stdio and streamable HTTP: p50/p95/p99 per tool, one warm server."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from .common import ROOT, bench_env, save, stats

N = 200


def _calls(i: int) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("core_memory_append", {"label": "scratch", "content": f"note {i}"}),
        ("memory_replace", {"label": "scratch", "old_string": f"note {i}", "new_string": f"fact {i}"}),
        ("memory_insert", {"label": "scratch", "new_string": f"line {i}", "insert_line": 0}),
        ("memory_rethink", {"label": "scratch2", "new_memory": f"version {i}"}),
        ("core_memory_view", {}),
        ("conversation_log", {"messages": [{"role": "user", "content": f"I visited city number {i} last week"}]}),
        ("conversation_search", {"query": f"which city did I visit {i}"}),
        ("archival_memory_insert", {"content": f"Project {i} ships on day {i % 28 + 1}", "tags": ["project"]}),
        ("archival_memory_search", {"query": f"when does project {i} ship"}),
    ]


async def drive(client: Client, n: int) -> dict[str, dict[str, float]]:
    await client.call_tool("memory", {"command": "create", "path": "/memories/scratch", "file_text": ""})
    await client.call_tool("memory", {"command": "create", "path": "/memories/scratch2", "file_text": ""})
    await client.call_tool("memory_rethink", {"label": "scratch", "new_memory": ""})
    samples: dict[str, list[float]] = {}
    for i in range(n):
        if i % 50 == 0:  # keep the scratch block under its limit
            await client.call_tool("memory_rethink", {"label": "scratch", "new_memory": ""})
        for tool, args in _calls(i):
            t = time.perf_counter()
            r = await client.call_tool(tool, args)
            samples.setdefault(tool, []).append(time.perf_counter() - t)
            assert not r.is_error, (tool, r.content)
    return {tool: stats(v[5:]) for tool, v in samples.items()}  # first few are warm-up


async def over_stdio(n: int) -> dict[str, dict[str, float]]:
    env = bench_env()
    params = StdioServerParameters(command=sys.executable, args=["-m", "tiermem", "serve", "--tools", "all"], env=env, cwd=str(ROOT))
    async with Client(params, cache=None) as client:
        await client.call_tool("archival_memory_search", {"query": "warm up the model"})
        return await drive(client, n)


async def over_http(n: int) -> dict[str, dict[str, float]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = bench_env()
    proc = subprocess.Popen([sys.executable, "-m", "tiermem", "serve", "--transport", "http", "--port", str(port), "--tools", "all"],
                            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        async with Client(f"http://127.0.0.1:{port}/mcp", cache=None) as client:
            await client.call_tool("archival_memory_search", {"query": "warm up the model"})
            return await drive(client, n)
    finally:
        proc.terminate()
        proc.wait()


async def edit_read_pairs(rounds: int = 5, per_round: int = 60) -> dict[str, dict[str, float]]:
    """An edit + a read (two calls) over stdio, per core backend, against two calls to a bare SDK server.

    The three servers stay warm and take turns in short rounds, so machine noise hits them alike.
    """
    bare = StdioServerParameters(command=sys.executable, args=[str(ROOT / "bench" / "bare_server.py")], env=bench_env(), cwd=str(ROOT))
    servers = {"bare SDK (echo x2)": bare}
    for backend in ("sqlite", "lancedb"):
        servers[f"tiermem core_backend={backend}"] = StdioServerParameters(
            command=sys.executable, args=["-m", "tiermem", "serve"], env=bench_env(TIERMEM_CORE_BACKEND=backend), cwd=str(ROOT))
    samples: dict[str, list[float]] = {name: [] for name in servers}
    async with Client(bare, cache=None) as c0, Client(servers["tiermem core_backend=sqlite"], cache=None) as c1, \
            Client(servers["tiermem core_backend=lancedb"], cache=None) as c2:
        clients = dict(zip(servers, (c0, c1, c2), strict=True))
        for c in (c1, c2):
            await c.call_tool("memory_rethink", {"label": "human", "new_memory": ""})
        for r in range(rounds):
            for name, c in clients.items():
                for i in range(per_round):
                    t = time.perf_counter()
                    if c is c0:
                        await c.call_tool("echo", {"text": f"note {r}.{i}"})
                        await c.call_tool("echo", {"text": "read"})
                    else:
                        if i == 0:
                            await c.call_tool("memory_rethink", {"label": "human", "new_memory": ""})
                            t = time.perf_counter()
                        await c.call_tool("core_memory_append", {"label": "human", "content": f"note {r}.{i}"})
                        await c.call_tool("core_memory_view", {})
                    if i >= 3:
                        samples[name].append(time.perf_counter() - t)
    return {name: stats(v) for name, v in samples.items()}


def main(n: int = N) -> None:
    pairs = anyio.run(edit_read_pairs)
    print("core_memory_append + core_memory_view over stdio (ms), interleaved rounds")
    floor = pairs["bare SDK (echo x2)"]["p50_ms"]
    for name, st in pairs.items():
        print(f"  {name:34s} p50 {st['p50_ms']:7.2f}  p95 {st['p95_ms']:7.2f}  p99 {st['p99_ms']:7.2f}  "
              f"({st['p50_ms'] / floor:.2f}x the bare SDK)")
    result = {"stdio": anyio.run(over_stdio, n), "http": anyio.run(over_http, n), "edit_read": pairs}
    save("roundtrip", result)
    print(f"tool round trips (ms), {n} calls each after warm-up")
    print(f"  {'tool':24s} {'stdio p50':>10s} {'p95':>8s} {'p99':>8s} {'http p50':>10s} {'p95':>8s} {'p99':>8s}")
    for tool in result["stdio"]:
        s, h = result["stdio"][tool], result["http"][tool]
        print(f"  {tool:24s} {s['p50_ms']:10.2f} {s['p95_ms']:8.2f} {s['p99_ms']:8.2f} {h['p50_ms']:10.2f} {h['p95_ms']:8.2f} {h['p99_ms']:8.2f}")
