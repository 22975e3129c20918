"""Cold start over stdio: spawn -> initialize response, and spawn -> first successful tool result.

tiermem vs a bare one-tool MCPServer (the SDK's floor), interleaved in the same run (the order
alternates each round, so neither side always goes first). Goals: initialize <= 1.15x
the bare server's p50, first tool result <= 1.5x (a block tool, ``memory_insert``: it needs only the core
state). Also measured, with no goal: spawn -> the first ``archival_memory_search`` result, which waits
for the store and the embedding model. ``PYTHONPATH`` chooses which tiermem is measured.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

from .common import ROOT, bench_env, save, spawn_to_initialize, stats

TIERMEM = [sys.executable, "-m", "tiermem", "serve"]
BARE = [sys.executable, str(Path(__file__).with_name("bare_server.py"))]
GOALS = {"initialize": 1.15, "first_tool_call": 1.5}


async def first_tool_call(cmd: list[str], env: dict[str, str], tool: str, args: dict[str, object]) -> float:
    start = time.perf_counter()
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=env, cwd=str(ROOT))
    async with Client(params, cache=None, mode="legacy") as client:
        result = await client.call_tool(tool, args)
        assert not result.is_error, result
        return time.perf_counter() - start


def _loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return ""


def run(rounds: int = 15, tool_rounds: int = 10) -> dict[str, object]:
    env = bench_env(TIERMEM_EMBEDDING_MODEL="default")
    spawn_to_initialize(TIERMEM, env)  # first start creates the data dir and agent: not a cold start of the process
    anyio.run(first_tool_call, TIERMEM, env, "memory_open", {"label": "human"})
    load_before = _loadavg()
    tier, bare = [], []
    for i in range(rounds):
        pair = [(BARE, bare), (TIERMEM, tier)]
        for cmd, out in pair if i % 2 == 0 else pair[::-1]:
            out.append(spawn_to_initialize(cmd, env))
    tier_tool, bare_tool, tier_search = [], [], []
    for i in range(tool_rounds):
        bare_run = lambda: bare_tool.append(anyio.run(first_tool_call, BARE, env, "echo", {"text": "x"}))  # noqa: E731
        tier_run = lambda: tier_tool.append(  # noqa: E731
            anyio.run(first_tool_call, TIERMEM, env, "memory_insert", {"label": "human", "new_string": f"n{i}"})
        )
        search_run = lambda: tier_search.append(  # noqa: E731
            anyio.run(first_tool_call, TIERMEM, env, "archival_memory_search", {"query": "rain"})
        )
        for step in (bare_run, tier_run, search_run) if i % 2 == 0 else (search_run, tier_run, bare_run):
            step()
    result: dict[str, object] = {
        "tiermem_src": os.environ.get("PYTHONPATH", "(installed)"),
        "loadavg_before": load_before,
        "loadavg_after": _loadavg(),
        "initialize": {"tiermem": stats(tier), "bare_mcpserver": stats(bare)},
        "first_tool_call": {"tiermem": stats(tier_tool), "bare_mcpserver": stats(bare_tool)},
        "first_search_call": {"tiermem": stats(tier_search), "bare_mcpserver": stats(bare_tool)},
    }
    for phase in (*GOALS, "first_search_call"):
        pair = result[phase]
        assert isinstance(pair, dict)
        result[f"{phase}_ratio_p50"] = round(pair["tiermem"]["p50_ms"] / pair["bare_mcpserver"]["p50_ms"], 3)
    return result


def main() -> None:
    result = run()
    save("coldstart", result)
    print(
        f"tiermem from {result['tiermem_src']}; "
        f"loadavg before: {result['loadavg_before']}, after: {result['loadavg_after']}"
    )
    print("cold start over stdio (ms)                    p50      p95    n")
    for phase, label in (
        ("initialize", "spawn -> initialize "),
        ("first_tool_call", "spawn -> first tool "),
        ("first_search_call", "spawn -> 1st search "),
    ):
        pair = result[phase]
        assert isinstance(pair, dict)
        for name in ("tiermem", "bare_mcpserver"):
            s = pair[name]
            print(f"  {label} {name:15s} {s['p50_ms']:8.1f} {s['p95_ms']:8.1f} {s['n']:4d}")
    for phase, goal in GOALS.items():
        ratio = result[f"{phase}_ratio_p50"]
        assert isinstance(ratio, float)
        verdict = "met" if ratio <= goal else "NOT met"
        print(f"  {phase} p50 ratio tiermem/bare: {ratio:.3f} (goal <= {goal}: {verdict})")
    print(
        f"  first_search_call p50 ratio tiermem/bare (first archival_memory_search vs the bare server's first tool; "
        f"no goal): {result['first_search_call_ratio_p50']:.3f}"
    )
