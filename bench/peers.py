"""Side by side with the reference MCP memory server (@modelcontextprotocol/server-memory, Node, stdio).

    (cd bench/node && npm install)  # once: installs the pinned peer into bench/node/node_modules
    python -m bench peers

Same machine, same run, interleaved: spawn -> initialize for tiermem, a bare one-tool MCPServer and the
reference server; then write-then-read round trips of the equivalent operations: its
`add_observations` + `open_nodes` against our `core_memory_append` + reading `memory://blocks/human`.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from .coldstart import BARE, TIERMEM
from .common import ROOT, bench_env, save, spawn_to_initialize, stats

NODE_SERVER = (
    Path(__file__).with_name("node") / "node_modules" / "@modelcontextprotocol" / "server-memory" / "dist" / "index.js"
)


def node_cmd() -> list[str]:
    if not NODE_SERVER.exists():
        raise SystemExit(f"{NODE_SERVER} is missing: run `npm install` in {NODE_SERVER.parents[3]} first.")
    return ["node", str(NODE_SERVER)]


async def node_roundtrips(n: int, env: dict[str, str]) -> list[float]:
    params = StdioServerParameters(command=node_cmd()[0], args=node_cmd()[1:], env=env, cwd=str(ROOT))
    async with Client(params, cache=None, mode="legacy") as c:
        await c.call_tool(
            "create_entities", {"entities": [{"name": "user", "entityType": "person", "observations": []}]}
        )
        out = []
        for i in range(n):
            t = time.perf_counter()
            r = await c.call_tool(
                "add_observations", {"observations": [{"entityName": "user", "contents": [f"fact {i}"]}]}
            )
            assert not r.is_error, r.content
            r = await c.call_tool("open_nodes", {"names": ["user"]})
            assert f"fact {i}" in r.content[0].text
            out.append(time.perf_counter() - t)
        return out


async def tiermem_roundtrips(n: int, env: dict[str, str]) -> list[float]:
    params = StdioServerParameters(command=TIERMEM[0], args=TIERMEM[1:], env=env, cwd=str(ROOT))
    async with Client(params, cache=None, mode="legacy") as c:
        await c.call_tool("memory_rethink", {"label": "human", "new_memory": ""})
        out = []
        for i in range(n):
            if i % 100 == 0:
                await c.call_tool("memory_rethink", {"label": "human", "new_memory": ""})  # stay under the limit
            t = time.perf_counter()
            r = await c.call_tool("core_memory_append", {"label": "human", "content": f"fact {i}"})
            assert not r.is_error, r.content
            block = await c.read_resource("memory://blocks/human")
            assert f"fact {i}" in block.contents[0].text
            out.append(time.perf_counter() - t)
        return out


def run(rounds: int = 10, n: int = 200) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="tiermem-peers-"))
    env = bench_env(tmp / "tiermem", TIERMEM_TOOLS="all")  # core_memory_append is one setting away from the default
    node_env = {**env, "MEMORY_FILE_PATH": str(tmp / "memory.jsonl")}
    spawn_to_initialize(TIERMEM, env)  # first start creates the store
    init: dict[str, list[float]] = {"tiermem": [], "bare_mcpserver": [], "server-memory (node)": []}
    for _ in range(rounds):
        init["server-memory (node)"].append(spawn_to_initialize(node_cmd(), node_env))
        init["bare_mcpserver"].append(spawn_to_initialize(BARE, env))
        init["tiermem"].append(spawn_to_initialize(TIERMEM, env))
    rt = {
        "server-memory (node): add_observations + open_nodes": anyio.run(node_roundtrips, n, node_env),
        "tiermem: core_memory_append + read memory://blocks/human": anyio.run(tiermem_roundtrips, n, env),
    }
    result: dict[str, Any] = {
        "initialize": {k: stats(v) for k, v in init.items()},
        "write_then_read": {k: stats(v[10:]) for k, v in rt.items()},
        "node": os.popen("node --version").read().strip(),
    }
    t, b, nd = (result["initialize"][k]["p50_ms"] for k in ("tiermem", "bare_mcpserver", "server-memory (node)"))
    result["ratios_p50"] = {"tiermem/bare_mcpserver": round(t / b, 3), "tiermem/server-memory": round(t / nd, 3)}
    wtr = result["write_then_read"]
    node = wtr["server-memory (node): add_observations + open_nodes"]["p50_ms"]
    ours = wtr["tiermem: core_memory_append + read memory://blocks/human"]["p50_ms"]
    result["ratios_p50"]["write_then_read tiermem/server-memory"] = round(ours / node, 3)
    return result


def main() -> None:
    result = run()
    save("peers", result)
    print(f"same machine, same run (node {result['node']})")
    print(f"  {'spawn -> initialize':60s} {'p50 ms':>8s} {'p95 ms':>8s}")
    for k, v in result["initialize"].items():
        print(f"  {k:60s} {v['p50_ms']:8.1f} {v['p95_ms']:8.1f}")
    print(f"  {'write then read (one round trip each)':60s}")
    for k, v in result["write_then_read"].items():
        print(f"  {k:60s} {v['p50_ms']:8.2f} {v['p95_ms']:8.2f}")
    print(f"  ratios (p50): {result['ratios_p50']}")


if __name__ == "__main__" and len(sys.argv) > 1:
    main()
