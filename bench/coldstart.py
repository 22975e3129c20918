"""Cold start over stdio: spawn -> initialize response, and spawn -> first successful tool call.

tiermem vs a bare one-tool MCPServer (the SDK's floor), interleaved in the same run.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

from .common import ROOT, bench_env, save, spawn_to_initialize, stats

TIERMEM = [sys.executable, "-m", "tiermem", "serve"]
BARE = [sys.executable, str(Path(__file__).with_name("bare_server.py"))]


async def first_tool_call(cmd: list[str], env: dict[str, str], tool: str, args: dict[str, object]) -> float:
    start = time.perf_counter()
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=env, cwd=str(ROOT))
    async with Client(params, cache=None, mode="legacy") as client:
        result = await client.call_tool(tool, args)
        assert not result.is_error, result
        return time.perf_counter() - start


def run(rounds: int = 15) -> dict[str, object]:
    env = bench_env(TIERMEM_EMBEDDING_MODEL="default")
    spawn_to_initialize(TIERMEM, env)  # first start creates the data dir and agent: not a cold start of the process
    anyio.run(first_tool_call, TIERMEM, env, "core_memory_view", {})
    tier, bare = [], []
    for _ in range(rounds):
        bare.append(spawn_to_initialize(BARE, env))
        tier.append(spawn_to_initialize(TIERMEM, env))
    tier_tool, bare_tool = [], []
    for i in range(max(5, rounds // 3)):
        bare_tool.append(anyio.run(first_tool_call, BARE, env, "echo", {"text": "x"}))
        tier_tool.append(anyio.run(first_tool_call, TIERMEM, env, "memory_insert", {"label": "human", "new_string": f"n{i}"}))
    result = {
        "initialize": {"tiermem": stats(tier), "bare_mcpserver": stats(bare)},
        "first_tool_call": {"tiermem": stats(tier_tool), "bare_mcpserver": stats(bare_tool)},
    }
    ratio = result["initialize"]["tiermem"]["p50_ms"] / result["initialize"]["bare_mcpserver"]["p50_ms"]
    result["initialize_ratio_p50"] = round(ratio, 3)
    return result


def main() -> None:
    result = run()
    save("coldstart", result)
    init, tool = result["initialize"], result["first_tool_call"]
    print("cold start over stdio (ms)            p50      p95    n")
    for name in ("tiermem", "bare_mcpserver"):
        s = init[name]
        print(f"  spawn -> initialize  {name:15s} {s['p50_ms']:8.1f} {s['p95_ms']:8.1f} {s['n']:4d}")
    for name in ("tiermem", "bare_mcpserver"):
        s = tool[name]
        print(f"  spawn -> first tool  {name:15s} {s['p50_ms']:8.1f} {s['p95_ms']:8.1f} {s['n']:4d}")
    print(f"  initialize p50 ratio tiermem/bare: {result['initialize_ratio_p50']:.3f} (goal <= 1.15)")
