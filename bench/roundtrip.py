"""Tool round trips over stdio and streamable HTTP: p50/p95/p99 per tool, one warm server.

python -m bench roundtrip            # edit + read pairs (interleaved with a bare SDK server), then per tool
python -m bench roundtrip --pairs    # the edit + read pairs only
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from .common import ROOT, bench_env, save, stats

N = 200
BACKENDS = ("sqlite",)  # core state of a local data directory (object storage: bench objstore)


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
    env = bench_env(TIERMEM_TOOLS="all")
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "tiermem", "serve", "--tools", "all"], env=env, cwd=str(ROOT)
    )
    async with Client(params, cache=None) as client:
        await client.call_tool("archival_memory_search", {"query": "warm up the model"})
        return await drive(client, n)


async def over_http(n: int) -> dict[str, dict[str, float]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = bench_env(TIERMEM_TOOLS="all")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tiermem", "serve", "--transport", "http", "--port", str(port), "--tools", "all"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
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


BARE_PAIR = "bare SDK (echo x2)"
NODE_PAIR = "server-memory (node): add_observations + open_nodes"


async def edit_read_pairs(rounds: int = 5, per_round: int = 60) -> dict[str, dict[str, float]]:
    """An edit + a read (two calls) over stdio against two calls to a bare SDK server (the floor; goal <= 1.5x).

    tiermem (SQLite core, the default for a local data directory) does ``core_memory_append`` and then reads
    ``memory://blocks/human`` (the issue's measure) or calls ``core_memory_view`` (which also renders the
    archive's counts); the reference Node memory server, if installed (bench/node), does ``add_observations``
    + ``open_nodes``. All servers stay warm and take turns in short rounds, so machine noise hits them alike.
    """
    from .peers import NODE_SERVER, node_cmd

    bare = StdioServerParameters(
        command=sys.executable,
        args=[str(ROOT / "bench" / "bare_server.py")],
        env=bench_env(TIERMEM_TOOLS="all"),
        cwd=str(ROOT),
    )
    params = {BARE_PAIR: bare}
    for backend in BACKENDS:
        params[backend] = StdioServerParameters(
            command=sys.executable,
            args=["-m", "tiermem", "serve"],
            env=bench_env(TIERMEM_CORE_BACKEND=backend, TIERMEM_TOOLS="all"),
            cwd=str(ROOT),
        )
    if NODE_SERVER.exists():
        tmp = tempfile.mkdtemp(prefix="tiermem-bench-node-")
        params[NODE_PAIR] = StdioServerParameters(
            command=node_cmd()[0],
            args=node_cmd()[1:],
            env={**bench_env(TIERMEM_TOOLS="all"), "MEMORY_FILE_PATH": f"{tmp}/memory.jsonl"},
            cwd=str(ROOT),
        )
    else:
        print(f"(the Node reference server is not installed: `cd {NODE_SERVER.parents[3]} && npm install` to compare)")

    async def bare_pair(c: Client, tag: str) -> None:
        await c.call_tool("echo", {"text": tag})
        await c.call_tool("echo", {"text": "read"})

    async def node_pair(c: Client, tag: str) -> None:
        r = await c.call_tool("add_observations", {"observations": [{"entityName": "user", "contents": [tag]}]})
        assert not r.is_error, r.content
        r = await c.call_tool("open_nodes", {"names": ["user"]})
        assert tag in r.content[0].text

    async def resource_pair(c: Client, tag: str) -> None:
        r = await c.call_tool("core_memory_append", {"label": "human", "content": tag})
        assert not r.is_error, r.content
        block = await c.read_resource("memory://blocks/human")
        assert tag in block.contents[0].text

    async def view_pair(c: Client, tag: str) -> None:
        r = await c.call_tool("core_memory_append", {"label": "human", "content": tag})
        assert not r.is_error, r.content
        await c.call_tool("core_memory_view", {})

    async with AsyncExitStack() as stack:
        clients = {name: await stack.enter_async_context(Client(p, cache=None)) for name, p in params.items()}
        runs: dict[str, tuple[Client, Any]] = {BARE_PAIR: (clients[BARE_PAIR], bare_pair)}
        for backend in BACKENDS:
            runs[f"tiermem core_backend={backend}: append + read memory://blocks/human"] = (
                clients[backend],
                resource_pair,
            )
            runs[f"tiermem core_backend={backend}: append + core_memory_view"] = (clients[backend], view_pair)
        if NODE_PAIR in clients:
            await clients[NODE_PAIR].call_tool(
                "create_entities", {"entities": [{"name": "user", "entityType": "person", "observations": []}]}
            )
            runs[NODE_PAIR] = (clients[NODE_PAIR], node_pair)
        samples: dict[str, list[float]] = {name: [] for name in runs}
        for r in range(rounds):
            for name, (c, pair) in runs.items():
                if c is not clients[BARE_PAIR] and c is not clients.get(NODE_PAIR):
                    await c.call_tool("memory_rethink", {"label": "human", "new_memory": ""})  # stay under the limit
                for i in range(per_round):
                    t = time.perf_counter()
                    await pair(c, f"note {r}.{i}")
                    if i >= 3:
                        samples[name].append(time.perf_counter() - t)
    return {name: stats(v) for name, v in samples.items()}


def print_pairs(pairs: dict[str, dict[str, float]]) -> None:
    print(
        "an edit + a read over stdio (ms), interleaved rounds; goal: tiermem's append + block read "
        "p50 <= 1.5x the bare SDK's two calls"
    )
    floor = pairs[BARE_PAIR]["p50_ms"]
    node = pairs.get(NODE_PAIR, {}).get("p50_ms")
    for name, st in pairs.items():
        vs_node = f", {st['p50_ms'] / node:.2f}x node" if node else ""
        print(
            f"  {name:62s} p50 {st['p50_ms']:7.2f}  p95 {st['p95_ms']:7.2f}  p99 {st['p99_ms']:7.2f}  "
            f"({st['p50_ms'] / floor:.2f}x the bare SDK{vs_node})"
        )


def main(n: int = N) -> None:
    pairs = anyio.run(edit_read_pairs)
    print_pairs(pairs)
    if "--pairs" in sys.argv:
        save("roundtrip_pairs", {"edit_read": pairs})
        return
    result = {"stdio": anyio.run(over_stdio, n), "http": anyio.run(over_http, n), "edit_read": pairs}
    save("roundtrip", result)
    print(f"tool round trips (ms), {n} calls each after warm-up")
    print(f"  {'tool':24s} {'stdio p50':>10s} {'p95':>8s} {'p99':>8s} {'http p50':>10s} {'p95':>8s} {'p99':>8s}")
    for tool in result["stdio"]:
        s, h = result["stdio"][tool], result["http"][tool]
        print(
            f"  {tool:24s} {s['p50_ms']:10.2f} {s['p95_ms']:8.2f} {s['p99_ms']:8.2f} {h['p50_ms']:10.2f} {h['p95_ms']:8.2f} {h['p99_ms']:8.2f}"
        )
