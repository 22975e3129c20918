"""Resident memory: a stage-by-stage breakdown in a fresh process, and one stdio server after start +
50 archival inserts + 20 searches (target <= 300 MB).

    python -m bench footprint
    python -m bench footprint --data-dir DIR   # the server part on a copy of an existing store (e.g. a 100k-passage
                                               # store built by `python -m bench scale`): target <= 450 MB

The breakdown runs each stage in one fresh interpreter and prints VmRSS after it: the interpreter; the MCP
SDK and pydantic; tiermem's server module (no storage libraries yet); lancedb + pyarrow; the store opened;
onnxruntime + tokenizers + numpy imported (fastembed is not loaded for the packaged model); the embedding
model loaded (its one-time graph rewrite runs in a child process); 50 inserts; 20 searches; malloc_trim(0).
The server figure spawns `tiermem serve` (stdio) with a fresh data dir and drives it with the official client, and
splits its RSS into anonymous memory and file pages (shared library code), with PSS and USS.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap

import anyio
from mcp import Client, StdioServerParameters

from .common import memory_split, server_pid

STAGES = textwrap.dedent(
    """
    import ctypes, json, sys, time
    def rss():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) / 1024 for l in f if l.startswith("VmRSS"))
    out = [("python", rss())]
    import mcp, pydantic
    out.append(("+ mcp, pydantic", rss()))
    import tiermem.server.app
    out.append(("+ tiermem.server.app (no storage libraries)", rss()))
    import tiermem.store  # lancedb + pyarrow, as the server imports them (store/loading.py)
    out.append(("+ lancedb, pyarrow", rss()))
    from tiermem.base.config import load_settings
    from tiermem.domain.factory import open_memory
    memory = open_memory(load_settings(data_dir=sys.argv[1]), start_embedder=False)
    agent = memory.ensure_agent("default").id
    out.append(("store open (+ core state)", rss()))
    import numpy, onnxruntime, tokenizers
    out.append(("+ onnxruntime, tokenizers, numpy", rss()))
    memory.archive.embedder.start(); memory.archive.embedder.wait(120)
    out.append(("embedding model loaded", rss()))
    for i in range(50):
        memory.archive.insert(agent, f"Fact {i}: Ada moved to Lisbon in spring {2000 + i} and took up the cello.")
    out.append(("50 archival inserts", rss()))
    for i in range(10):
        memory.archive.search(agent, f"where did Ada move in {2000 + i}?")
        memory.archive.conversation_search(agent, f"cello {i}")
    out.append(("20 searches", rss()))
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    out.append(("malloc_trim(0)", rss()))
    import gc
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    out.append(("gc.collect() + malloc_trim(0)", rss()))
    print(json.dumps(out))
    """
)


def breakdown() -> list[tuple[str, float]]:
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run([sys.executable, "-c", STAGES, d], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(r.stderr[-2000:])
    return [tuple(x) for x in json.loads(r.stdout.strip().splitlines()[-1])]


async def server_rss(source: str | None = None) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        if source is not None:
            import shutil

            d = os.path.join(d, "copy")
            shutil.copytree(source, d)  # the inserts below must not change the original
        env = dict(os.environ, TIERMEM_TOOLS="all")
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "tiermem", "serve", "--data-dir", d], env=env
        )
        async with Client(params, cache=None) as c:
            for i in range(50):
                await c.call_tool(
                    "archival_memory_insert",
                    {"content": f"Fact {i}: Ada moved to Lisbon in spring {2000 + i} and took up the cello."},
                )
            for i in range(10):
                await c.call_tool("archival_memory_search", {"query": f"where did Ada move in {2000 + i}?"})
                await c.call_tool("conversation_search", {"query": f"cello {i}"})
            pid = server_pid(d)
            if pid is None:
                raise SystemExit("server process not found")
            return memory_split(pid)


def main() -> None:
    source = sys.argv[sys.argv.index("--data-dir") + 1] if "--data-dir" in sys.argv else None
    if source is None:
        stages = breakdown()
        previous = 0.0
        print(f"{'stage':44s} {'RSS MB':>8s} {'delta':>7s}")
        for name, mb in stages:
            print(f"{name:44s} {mb:8.0f} {mb - previous:+7.0f}")
            previous = mb
    split = anyio.run(server_rss, source)
    mb = split["rss"]
    goal = 300 if source is None else 450
    where = "a fresh data dir" if source is None else f"a copy of {source}"
    print(
        f"stdio server on {where} after start + 50 inserts + 20 searches: RSS {mb:.0f} MB (target <= {goal} MB: "
        f"{'met' if mb <= goal else 'not met'}); of it anonymous {split['anon']:.0f} MB, file pages (library code) "
        f"{split['file']:.0f} MB; PSS {split['pss']:.0f} MB, USS {split['uss']:.0f} MB (PSS and USS depend on what "
        "else maps the same libraries)"
    )
