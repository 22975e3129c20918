"""The agent loop's own overhead per step: wall time of a turn minus the time spent in the model call.

The model is the scripted loopback server of the tests (`tests/fake_anthropic.py`), reached through the
real `anthropic` client; the loop runs in process over a real store with the real embedding model (every
message is embedded as it is written to recall). Two scenarios: a reply-only turn (1 step) and a turn that
edits memory and then replies (2 steps: the tool call runs through `MCPServer.call_tool`).

    python -m bench agent_loop [--turns N] [--model default|hashing]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from .common import ROOT, machine, save, stats

sys.path.insert(0, str(ROOT))
from tests import fake_anthropic as fa  # the scripted server lives with the tests


class Timed:
    """A provider wrapper that records how long each model call took."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.durations: list[float] = []

    async def complete(self, request: Any) -> Any:
        start = time.perf_counter()
        try:
            return await self.inner.complete(request)
        finally:
            self.durations.append(time.perf_counter() - start)


async def run(turns: int, model: str) -> dict[str, Any]:
    from tiermem.agent.service import anthropic_provider, make_loop
    from tiermem.base.config import load_settings
    from tiermem.domain.factory import open_memory
    from tiermem.server.app import MemoryHandle, build_server

    os.environ["ANTHROPIC_API_KEY"] = "sk-bench"
    result: dict[str, Any] = {}
    with fa.FakeAnthropic() as fake:
        data = Path(tempfile.mkdtemp(prefix="tiermem-bench-loop-"))
        settings = load_settings(
            data_dir=data,
            embedding_model=model,
            agent_loop=True,
            llm_provider="anthropic",
            anthropic_base_url=fake.url,
            model="claude-fake-1",
        )
        memory = open_memory(settings)
        assert memory.archive is not None
        memory.archive.embedder.wait(300)
        agent = memory.ensure_agent(settings.agent)
        server = build_server(MemoryHandle(lambda: (memory, agent.id)), settings)
        loop = make_loop(memory, agent.id, server, settings)
        provider = Timed(anthropic_provider(settings))
        scenarios = {
            "reply only (1 step)": lambda i: [fa.text(f"Reply {i}.")],
            "edit + reply (2 steps)": lambda i: [
                fa.tool("memory_insert", {"label": "human", "new_str": f"Fact {i}."}),
                fa.text(f"Noted fact {i}."),
            ],
        }
        for name, script in scenarios.items():
            overhead: list[float] = []
            llm: list[float] = []
            for i in range(turns + 3):
                if i % 20 == 0:
                    memory.edit(agent.id, "human", _reset())  # keep the block under its limit
                fake.add(*script(i))
                before = len(provider.durations)
                start = time.perf_counter()
                turn = await loop.turn(f"Message {i}: tell me something about topic {i}.", provider)
                wall = time.perf_counter() - start
                calls = provider.durations[before:]
                assert turn.stop_reason == "end_turn", turn.error
                if i >= 3:  # warm-up
                    overhead.append((wall - sum(calls)) / len(calls))
                    llm.extend(calls)
            result[name] = {"overhead_per_step": stats(overhead), "model_call": stats(llm)}
        shutil.rmtree(data, ignore_errors=True)
    return result


def _reset() -> Any:
    from tiermem.domain.blocks import Rethink

    return Rethink("", operation="reset", check_line_numbers=False)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench agent_loop")
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--model", default="default", help="embedding model: default (MiniLM int8) or hashing")
    args, _ = parser.parse_known_args(argv if argv is not None else sys.argv[1:])
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per model call otherwise
    result = anyio.run(run, args.turns, args.model)
    load = os.getloadavg()
    save(
        "agent_loop",
        {"embedding_model": args.model, "turns": args.turns, "loadavg": load, "machine": machine(), **result},
    )
    print(
        f"agent loop overhead per step (ms; time outside the model call), {args.turns} turns, "
        f"embedding model {args.model}, load {load[0]:.2f}"
    )
    print(f"  {'scenario':26s} {'p50':>8s} {'p95':>8s} {'p99':>8s}   model call p50 (loopback)")
    for name, r in result.items():
        o, m = r["overhead_per_step"], r["model_call"]
        print(f"  {name:26s} {o['p50_ms']:8.2f} {o['p95_ms']:8.2f} {o['p99_ms']:8.2f}   {m['p50_ms']:8.2f}")


if __name__ == "__main__":
    main()
