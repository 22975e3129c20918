"""A mixed load on object storage: block edits, recall and archival writes and reads, side by side.

    python -m bench objmix [--seconds 180] [--clients 8] [--replicas 2] [--blocks 4] [--window 30]

The same setting as ``python -m bench objstore`` (one moto S3 server on loopback that counts requests and takes
writes one at a time, ``--replicas`` `tiermem serve --transport http` on one prefix with their default upkeep,
``--clients`` MCP clients over streamable HTTP, client n on replica n mod R and on block n mod B), but each client
cycles through seven calls: ``core_memory_append`` to its block, ``memory_replace`` of its own line there
(``r<n>=<i>`` by ``r<n>=<i+1>``), ``core_memory_view`` (every block rendered, with the archival counts),
``archival_memory_insert``, ``archival_memory_search``, ``conversation_log`` and ``conversation_search``. The
recall and archival writes are LanceDB commits on the bucket, whose superseded versions the replicas' upkeep
keeps only ``version_retention_seconds`` (10 s by default on object storage), run every ``optimize_every_commits``
commits (20): the run shows whether that keeps those calls flat.

Per ``--window`` seconds: calls/s and p99 by kind, errors, the bucket's objects (all, and by kind: LanceDB's
version manifests, data, index, transaction and deletion files, core state objects) and CPU ms per call by process.
At the end: first vs last window per kind, every distinct error in full (its kind and text, how often, when first),
every replaced line as last acknowledged, every acknowledged append present once. Embeddings are the hashing embedder (no model): the figures
are the storage's, not the model's. The store lives in moto's memory; the work directory is removed at the end, but
the replicas' stderr logs (and moto's) are moved to a ``tiermem-objmix-logs-*`` directory under the temp dir, whose
path is printed, whenever a call failed or the run did not finish (always with ``--keep-logs``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from .common import http_session
from .objstore import BUCKET, TOKEN, Lister, options, pct, serving, start_moto, windows

KINDS = ("append", "replace", "view", "insert", "search", "log", "recall")
# The bucket's objects by kind: LanceDB's version manifests, data files, index files, transaction and deletion
# files, and the core state's objects (block heads, history, agents).
OBJECT_KINDS = ("versions", "data", "indices", "transactions", "deletions", "core", "other")


def kind_of(path: str) -> str:
    for kind, part in (
        ("versions", "/_versions/"),
        ("data", "/data/"),
        ("indices", "/_indices/"),
        ("transactions", "/_transactions/"),
        ("deletions", "/_deletions/"),
        ("core", "/core/"),
    ):
        if part in path:
            return kind
    return "other"


async def one(c: Client, kind: str, n: int, i: int, label: str) -> str | None:
    """Make one call of ``kind``; None when it succeeded, else the tool error's full text."""
    if kind == "append":
        r = await c.call_tool("core_memory_append", {"label": label, "content": f"c{n}-{i}"})
    elif kind == "replace":
        r = await c.call_tool(
            "memory_replace", {"label": label, "old_string": f"r{n}={i - 1}", "new_string": f"r{n}={i}"}
        )
    elif kind == "view":
        r = await c.call_tool("core_memory_view", {})
    elif kind == "insert":
        r = await c.call_tool("archival_memory_insert", {"content": f"fact {n}-{i}: client {n} noted item {i}"})
    elif kind == "search":
        r = await c.call_tool("archival_memory_search", {"query": f"client {n} noted item {i - 7}"})
    elif kind == "log":
        r = await c.call_tool("conversation_log", {"messages": [{"role": "user", "content": f"hello {n} {i}"}]})
    else:
        r = await c.call_tool("conversation_search", {"query": f"hello {n} {i - 7}"})
    if not r.is_error:
        return None
    return " ".join(getattr(x, "text", repr(x)) for x in r.content) or "(a tool error without text)"


def report_errors(errors: list[tuple[float, str, str]], start: float) -> None:
    """Every distinct error (kind and full text): how often, and when it first happened (seconds into the run)."""
    seen: dict[tuple[str, str], list[float]] = {}
    for at, kind, text in errors:
        seen.setdefault((kind, text), []).append(at - start)
    for (kind, text), times in sorted(seen.items(), key=lambda kv: kv[1][0]):
        print(f"error x{len(times)} ({kind}, first at {times[0]:.1f} s): {text}", flush=True)


async def drive(
    endpoint: str,
    ports: list[int],
    clients: int,
    blocks: int,
    seconds: int,
    window: int,
    store: Any,
    pids: dict[str, list[int | None]],
) -> int:

    samples: list[tuple[float, str, float, bool]] = []  # (finished at, kind, latency, ok)
    appended: dict[str, list[str]] = {f"load{b}": [] for b in range(blocks)}
    replaced: dict[str, dict[int, int]] = {f"load{b}": {} for b in range(blocks)}
    errors: list[tuple[float, str, str]] = []  # (when, kind, full text)
    start = time.time()
    stop = start + seconds

    async def client(n: int) -> None:
        label = f"load{n % blocks}"
        async with http_session(f"http://127.0.0.1:{ports[n % len(ports)]}/mcp", TOKEN) as c:
            r = await c.call_tool("core_memory_append", {"label": label, "content": f"r{n}=0"})
            assert not r.is_error, r.content
            replaced[label][n] = 0
            i, k = 1, 0
            while time.time() < stop:
                kind = KINDS[k % len(KINDS)]
                t = time.perf_counter()
                try:
                    problem = await one(c, kind, n, i, label)
                except Exception as exc:  # counted and shown: a load run reports errors, it does not stop on them
                    problem = f"client exception: {exc!r}"
                ok = problem is None
                if problem is not None:
                    errors.append((time.time(), kind, problem))
                samples.append((time.time(), kind, time.perf_counter() - t, ok))
                if ok and kind == "append":
                    appended[label].append(f"c{n}-{i}")
                if ok and kind == "replace":
                    replaced[label][n] = i
                if kind == "replace" and not ok:
                    return  # its line is no longer where it was: this client stops (counted as an error)
                k += 1
                if k % len(KINDS) == 0:
                    i += 1

    rows: list[dict[str, Any]] = []
    async with anyio.create_task_group() as tg:
        for n in range(clients):
            tg.start_soon(client, n)
        async for win in windows(samples, start, stop, window, endpoint, store, pids):
            done, lo, hi, w, req, listed, per_call = (
                win.done,
                win.lo,
                win.hi,
                win.index,
                win.requests,
                win.listed,
                win.cpu_ms,
            )
            kinds = Counter(kind_of(x["path"]) for x in listed)
            rate = {kind: sum(1 for s in done if s[1] == kind and s[3]) / window for kind in KINDS}
            p99 = {kind: pct([s[2] for s in done if s[1] == kind], 99) for kind in KINDS}
            rows.append({"rate": rate, "p99": p99, "all": len(done) / window})
            print(
                f"window {w:2d} ({int(lo - start):4d}-{int(hi - start):4d} s): {len(done) / window:6.2f} calls/s "
                f"("
                + ", ".join(f"{k} {rate[k]:.1f}" for k in KINDS)
                + "), p99 ms ("
                + ", ".join(f"{k} {p99[k]:.0f}" for k in KINDS)
                + f"), errors {sum(not s[3] for s in done)}, "
                f"requests/call {req / max(1, len(done)):.2f}, bucket objects {len(listed)} ("
                + ", ".join(f"{k} {kinds[k]}" for k in OBJECT_KINDS if kinds[k])
                + "); CPU ms/call "
                + ", ".join(f"{k} {v:.1f}" for k, v in per_call.items()),
                flush=True,
            )
    full = rows[:-1] if len(rows) > 1 and seconds % window else rows
    ok = [s for s in samples if s[3]]
    print(
        f"calls {len(ok)} in {seconds} s ({len(ok) / seconds:.2f}/s), errors {len(samples) - len(ok)}; last window / first: all "
        f"{full[-1]['all'] / full[0]['all']:.2f}, "
        + ", ".join(
            f"{k} {full[-1]['rate'][k] / full[0]['rate'][k]:.2f}" if full[0]["rate"][k] else f"{k} -" for k in KINDS
        )
        + "; p99 max "
        + ", ".join(f"{k} {max(r['p99'][k] for r in full):.0f} ms" for k in KINDS),
        flush=True,
    )
    report_errors(errors, start)
    check(endpoint, appended, replaced)
    return len(errors)


def check(endpoint: str, appended: dict[str, list[str]], replaced: dict[str, dict[int, int]]) -> None:
    from tiermem.core.bucket import Bucket
    from tiermem.core.objects import ObjectCore

    core = ObjectCore(Bucket(f"s3://{BUCKET}/mix", options(endpoint)))
    agent = core.find_agent("default")
    assert agent is not None
    for label, lines in appended.items():
        block = core.find_block(agent.id, label)
        assert block is not None
        stored = Counter(x for x in block.value.split("\n") if x)
        lost = [x for x in lines if x not in stored]
        doubled = [x for x, k in stored.items() if k > 1]
        wrong = [n for n, i in replaced[label].items() if stored[f"r{n}={i}"] != 1]
        print(
            f"{label}: {len(lines)} appends acknowledged, lost {len(lost)}, doubled {len(doubled)}; "
            f"{len(replaced[label])} replaced lines, {len(wrong)} not as last acknowledged; version {block.version}, "
            f"{len(block.value)} characters",
            flush=True,
        )


def run(
    work: Path,
    endpoint: str,
    moto_pid: int,
    port: int,
    replicas: int,
    clients: int,
    blocks: int,
    seconds: int,
    window: int,
) -> int:
    """The load; returns how many calls failed."""
    with serving(
        work, endpoint, port, replicas, prefix="mix", tools='["all"]', blocks=blocks, description="bench objmix"
    ) as procs:
        print(
            f"mixed load: {clients} clients over {replicas} replica(s), {blocks} block(s), {seconds} s, windows of "
            f"{window} s; each client cycles {', '.join(KINDS)}; replica logs {work}/server<r>.log",
            flush=True,
        )
        pids: dict[str, list[int | None]] = {"moto": [moto_pid], "replicas": [p.pid for p in procs], "clients": [None]}
        failed: int = anyio.run(
            drive,
            endpoint,
            [port + r for r in range(replicas)],
            clients,
            blocks,
            seconds,
            window,
            Lister(endpoint),
            pids,
        )
        return failed


def keep_logs(work: Path) -> Path:
    """Move the replicas' and moto's logs out of the work directory (which is removed) into a directory of their
    own under the temp dir; returns it."""
    kept = Path(tempfile.mkdtemp(prefix="tiermem-objmix-logs-"))
    for log in sorted(work.glob("*.log")):
        shutil.move(str(log), kept / log.name)
    return kept


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench objmix")
    parser.add_argument("--seconds", type=int, default=180)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--window", type=int, default=30)
    parser.add_argument("--port", type=int, default=8961, help="the first replica's port; moto takes port + 50")
    parser.add_argument(
        "--keep-logs", action="store_true", help="keep the replicas' and moto's logs even when no call failed"
    )
    args, _ = parser.parse_known_args(sys.argv[1:])
    if not 1 <= args.replicas <= 8 or not 1 <= args.clients <= 64 or args.blocks < 1 or args.window < 5:
        parser.error("--replicas 1-8, --clients 1-64, --blocks >= 1, --window >= 5")
    work = Path(tempfile.mkdtemp(prefix="tiermem-objmix-"))
    moto = None
    failed: int | None = None  # None: the run itself did not finish
    try:
        moto, endpoint = start_moto(work, args.port + 50)
        failed = run(
            work, endpoint, moto.pid, args.port, args.replicas, args.clients, args.blocks, args.seconds, args.window
        )
    finally:
        if moto is not None:
            moto.terminate()
            moto.wait(30)
        if failed is None or failed or args.keep_logs:
            why = (
                "the run did not finish" if failed is None else f"{failed} call(s) failed" if failed else "--keep-logs"
            )
            print(
                f"logs kept in {keep_logs(work)} ({why}): server<r>.log is replica r's stderr, moto.log moto's",
                flush=True,
            )
        shutil.rmtree(work, ignore_errors=True)
        print(f"removed {work} (moto's bucket was in its memory)", flush=True)
