"""Change notifications across processes: how soon a subscriber hears of another process's edit, and whether it ever
misses one.

    python -m bench notify [--edits 100] [--max-delay 3]

Three `tiermem serve` processes on one local data directory: A serves streamable HTTP (a 2026-07-28 client
listens on `memory://blocks/human`, and the memory inspector's live view long-polls `/ui/api/changes`), B serves
stdio (a legacy client subscribes with `resources/subscribe`), C serves stdio and edits. Each trial subscribes
afresh, waits a random 0..max-delay seconds, edits through C, and times each subscriber from C's reply (the edit
is committed) to the notification; a subscriber that hears nothing within 10 s counts as a miss. Between
trials every subscription ends, so each trial starts from an idle watch.
"""

from __future__ import annotations

import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from .common import ROOT, bench_env, save, stats

HUMAN = "memory://blocks/human"
TOKEN = "bench-notify-" + "x" * 32
MISS_AFTER = 10.0


def _arg(name: str, default: float) -> float:
    argv = sys.argv
    return float(argv[argv.index(name) + 1]) if name in argv else default


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _run(edits: int, max_delay: float, data: Path) -> dict[str, Any]:
    env = bench_env(data, TIERMEM_EMBEDDING_MODEL="hashing", TIERMEM_HTTP_TOKEN=TOKEN)
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "tiermem", "serve", "--transport", "http", "--port", str(port)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    stdio = StdioServerParameters(command=sys.executable, args=["-m", "tiermem", "serve"], env=env, cwd=str(ROOT))
    heard: dict[str, float] = {}

    async def on_message(message: Any) -> None:
        root = getattr(message, "root", message)
        if getattr(root, "method", None) == "notifications/resources/updated" and str(root.params.uri) == HUMAN:
            heard.setdefault("stdio", time.perf_counter())

    latencies: dict[str, list[float]] = {"http_listen": [], "stdio_subscribe": [], "inspector": []}
    missed = {k: 0 for k in latencies}
    try:
        headers = {"authorization": f"Bearer {TOKEN}"}
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if (await http.get(f"http://127.0.0.1:{port}/ui/api/agents")).status_code == 200:
                        break
                except httpx2.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit("the HTTP server did not start")
                await anyio.sleep(0.1)
            async with (
                Client(stdio, cache=None) as editor,
                Client(stdio, cache=None, mode="legacy", message_handler=on_message) as legacy,
                Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http), cache=None) as modern,
            ):
                await editor.call_tool("core_memory_append", {"label": "human", "content": "warm"})
                rng = random.Random(30)
                for n in range(edits):
                    heard.clear()
                    sig = (await http.get(f"http://127.0.0.1:{port}/ui/api/agent", params={"agent": "default"})).json()
                    await legacy.subscribe_resource(HUMAN)  # type: ignore[deprecated]
                    async with modern.listen(resource_subscriptions=[HUMAN]) as sub, anyio.create_task_group() as tg:

                        async def listen() -> None:
                            async for event in sub:
                                if getattr(event, "uri", "") == HUMAN:
                                    heard.setdefault("http", time.perf_counter())
                                    return

                        async def inspector() -> None:
                            r = await http.get(
                                f"http://127.0.0.1:{port}/ui/api/changes",
                                timeout=60,
                                params={"agent": "default", "since": sig["signature"], "wait": "20"},
                            )
                            if r.json().get("changed"):
                                heard.setdefault("inspector", time.perf_counter())

                        tg.start_soon(listen)
                        tg.start_soon(inspector)
                        await anyio.sleep(rng.uniform(0, max_delay))
                        r = await editor.call_tool("core_memory_append", {"label": "human", "content": f"edit {n}"})
                        assert not r.is_error, r.content
                        committed = time.perf_counter()
                        with anyio.move_on_after(MISS_AFTER):
                            while len(heard) < 3:
                                await anyio.sleep(0.005)
                        tg.cancel_scope.cancel()
                    for key, name in (
                        ("http", "http_listen"),
                        ("stdio", "stdio_subscribe"),
                        ("inspector", "inspector"),
                    ):
                        if key in heard:
                            latencies[name].append(max(0.0, heard[key] - committed))
                        else:
                            missed[name] += 1
                    await legacy.unsubscribe_resource(HUMAN)  # type: ignore[deprecated]
                    await anyio.sleep(0.2)  # every subscription has ended: the next trial starts from an idle watch
    finally:
        server.terminate()
        server.wait(timeout=30)
    return {
        "edits": edits,
        "max_delay_s": max_delay,
        "missed": missed,
        "latency_after_commit": {k: stats(v) for k, v in latencies.items() if v},
    }


def main() -> None:
    import warnings

    warnings.filterwarnings(
        "ignore", message="resources/(un)?subscribe is removed"
    )  # the legacy flow is measured on purpose
    edits = int(_arg("--edits", 100))
    max_delay = _arg("--max-delay", 3.0)
    with tempfile.TemporaryDirectory(prefix="tiermem-bench-notify-") as tmp:
        result = anyio.run(_run, edits, max_delay, Path(tmp) / "data")
    for name, s in result["latency_after_commit"].items():
        print(
            f"{name:16s} missed {result['missed'][name]:3d}/{edits}  p50 {s['p50_ms']:7.1f} ms  "
            f"p95 {s['p95_ms']:7.1f} ms  p99 {s['p99_ms']:7.1f} ms  (n={s['n']})"
        )
    save("notify", result)
