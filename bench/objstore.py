"""Object storage under load: block edits on a moto S3 server on loopback, beside the raw floor.

    python -m bench objstore [--seconds 600] [--clients 8] [--replicas 2] [--blocks 1] [--window 30]
                             [--floor 200] [--sqlite-edits 2000] [--op append|replace]

One run, one moto server (``bench.moto_counting``: it counts every request it serves), in this order:

1. The floor: ``--floor`` raw conditional PUTs (``If-None-Match: *``, 1 KB, through obstore as tiermem sends its
   own), 60 LanceDB conditional updates (``update(where id AND version)``) of a one-row table on the bucket, and
   ``--floor`` appends by one client to one block through tiermem's core state in this process (``Memory.edit``):
   p50/p99 of each and the requests each one costs (moto's count), the edits' also for the first and last tenth
   (constant, not growing with the edits before).
2. The load: ``--replicas`` `tiermem serve --transport http` on the bucket, ``--clients`` MCP clients (streamable
   HTTP, client n on replica n mod R) appending ``core_memory_append`` to one block (``--blocks 1``) or each to
   its own (``--blocks N``, client n on block n mod N) for ``--seconds``. Per ``--window`` seconds: appends/s,
   p50, p99, errors, requests per append, the objects in the bucket and the block's size. At the end: first vs
   last window, every acknowledged append present once (0 lost, 0 doubled), history bytes per append against the
   appended bytes. With ``--op replace`` each client instead rewrites its own line (``memory_replace`` of
   ``c<n>=<i>`` by ``c<n>=<i+1>``), so the block stays the same size however long the run: a lost edit would
   make that client's next replace fail (counted as a tool error), and the block's version must equal the edits.
3. With ``--sqlite-edits N``: N appends to a block on the local SQLite core, the database's growth per append.

The store lives in moto's memory (loopback only) and the work directory under /tmp is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from .common import http_session, stop_processes
from .load import wait_port

BUCKET = "tiermem-objstore"
TOKEN = secrets.token_hex(16)  # the replicas' bearer token (TIERMEM_HTTP_TOKEN), made per run


def start_moto(work: Path, port: int) -> tuple[subprocess.Popen[bytes], str]:
    import boto3

    with open(work / "moto.log", "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.moto_counting", str(port)], stdout=subprocess.DEVNULL, stderr=log
        )
    wait_port(port, proc, "the moto S3 server")
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1"
    ).create_bucket(Bucket=BUCKET)
    return proc, endpoint


def counts(endpoint: str) -> Counter[str]:
    with urllib.request.urlopen(f"{endpoint}/__requests__", timeout=30) as r:  # loopback only
        return Counter(json.loads(r.read()))


def options(endpoint: str) -> dict[str, str]:
    return {
        "aws_endpoint": endpoint,
        "aws_access_key_id": "test",
        "aws_secret_access_key": "test",
        "region": "us-east-1",
        "allow_http": "true",
    }


class Lister:
    """Lists the bucket's objects under a prefix (what the load windows count)."""

    def __init__(self, endpoint: str) -> None:
        from obstore.store import from_url

        opts = options(endpoint)
        self.store = from_url(
            f"s3://{BUCKET}/",
            config={k: v for k, v in opts.items() if k != "allow_http"},
            client_options={"allow_http": True},
        )

    def list(self, prefix: str) -> list[Any]:
        from obstore import list as olist

        return [m for page in olist(self.store, prefix=prefix) for m in page]


@contextmanager
def serving(
    work: Path,
    endpoint: str,
    port: int,
    replicas: int,
    *,
    prefix: str,
    tools: str,
    blocks: int,
    description: str,
    before: Callable[[], None] | None = None,
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Blocks ``load0``.. (limit 10M) made on ``s3://BUCKET/<prefix>``, ``before()`` run, then ``replicas``
    `tiermem serve --transport http` on it (ports ``port``.., the per-run ``TOKEN``, ``tools`` as TOML); yields the
    replica processes and stops them at the end."""
    opts = options(endpoint)
    config = work / "s3.toml"
    config.write_text(
        f'uri = "s3://{BUCKET}/{prefix}"\nembedding_model = "hashing"\ntools = {tools}\n'
        "[storage_options]\n" + "".join(f'{k} = "{v}"\n' for k, v in opts.items()),
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERMEM_")}
    env.update(XDG_CONFIG_HOME=str(work / "cfg"), TIERMEM_DATA_DIR=str(work / "data"), TIERMEM_HTTP_TOKEN=TOKEN)
    for b in range(blocks):
        made = subprocess.run(
            [
                sys.executable,
                "-m",
                "tiermem",
                "blocks",
                "create",
                f"load{b}",
                "--limit",
                "10000000",
                "--description",
                description,
                "--config",
                str(config),
            ],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if made.returncode:
            raise SystemExit(f"could not create block load{b}: {made.stderr}")
    if before is not None:
        before()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for r in range(replicas):
            with open(work / f"server{r}.log", "w") as log:
                procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "tiermem",
                            "serve",
                            "--transport",
                            "http",
                            "--port",
                            str(port + r),
                            "--config",
                            str(config),
                        ],
                        env=env,
                        stderr=log,
                    )
                )
        for r, p in enumerate(procs):
            wait_port(port + r, p, f"replica {r}")
        yield procs
    finally:
        stop_processes(procs)


def pct(samples: list[float], p: float) -> float:
    s = sorted(samples)
    return 1000 * s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))] if s else float("nan")


def per_op(before: Counter[str], after: Counter[str], n: int) -> str:
    diff = {k: (after[k] - before[k]) / n for k in sorted(set(after) | set(before)) if after[k] != before[k]}
    return f"{sum(diff.values()):.2f} (" + ", ".join(f"{k} {v:.2f}" for k, v in diff.items()) + ")"


def floor(endpoint: str, n: int) -> float:
    """The raw floor and one client's edits, measured now; returns the raw PUT's p50 in ms."""
    import lancedb
    from obstore import put
    from obstore.store import from_url

    from tiermem.base.config import load_settings
    from tiermem.domain import blocks as rules
    from tiermem.domain.factory import open_memory

    opts = options(endpoint)
    raw = from_url(
        f"s3://{BUCKET}/floor/raw",
        config={k: v for k, v in opts.items() if k != "allow_http"},
        client_options={"allow_http": True},
    )
    lat = []
    before = counts(endpoint)
    for i in range(n):
        t = time.perf_counter()
        put(raw, f"o{i}", b"x" * 1024, mode="create")
        lat.append(time.perf_counter() - t)
    raw_p50 = pct(lat, 50)
    print(
        f"raw conditional PUT (If-None-Match: *, 1 KB) x{n}: p50 {raw_p50:.2f} ms, p99 {pct(lat, 99):.2f} ms, "
        f"requests each {per_op(before, counts(endpoint), n)}",
        flush=True,
    )
    body_sizes(raw, n)

    db = lancedb.connect(f"s3://{BUCKET}/floor/lance", storage_options=opts)
    table = db.create_table("t", data=[{"id": "b", "version": 0, "value": "x" * 100}])
    lat = []
    before = counts(endpoint)
    updates = 60
    for v in range(updates):
        t = time.perf_counter()
        table.update(where=f"id = 'b' AND version = {v}", values={"version": v + 1, "value": "y" * 100})
        lat.append(time.perf_counter() - t)
    print(
        f"LanceDB conditional update (one-row table) x{updates}: p50 {pct(lat, 50):.2f} ms, p99 {pct(lat, 99):.2f} ms,"
        f" requests each {per_op(before, counts(endpoint), updates)}",
        flush=True,
    )

    settings = load_settings(uri=f"s3://{BUCKET}/floor/tiermem", embedding_model="hashing", storage_options=opts)
    m = open_memory(settings, start_embedder=False)
    agent = m.ensure_agent("default").id
    m.edit(agent, "human", rules.Append("warm"))
    lat, tenths = [], []
    tenth = max(1, n // 10)
    for i in range(n):
        if i % tenth == 0:
            tenths.append(counts(endpoint))
        t = time.perf_counter()
        m.edit(agent, "human", rules.Append(f"a{i}"))
        lat.append(time.perf_counter() - t)
    end = counts(endpoint)
    first = per_op(tenths[0], tenths[1], tenth).split(" ")[0] if len(tenths) > 1 else "?"
    last = per_op(tenths[-1], end, n - tenth * (len(tenths) - 1)).split(" ")[0]
    p50 = pct(lat, 50)
    print(
        f"one client's append (Memory.edit, object core) x{n}: p50 {p50:.2f} ms ({p50 / raw_p50:.2f}x the raw PUT), "
        f"p99 {pct(lat, 99):.2f} ms, requests each {per_op(tenths[0], end, n)}; first tenth {first}, "
        f"last tenth {last}",
        flush=True,
    )
    return raw_p50


def cpu_seconds(pid: int | None) -> float:
    """CPU time (user + system) a process has used so far; this process's own for None. Linux (/proc); NaN
    where that cannot be read."""
    if pid is None:
        return time.process_time()
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


@dataclass
class Window:
    """One measuring window of a load run: the samples that finished in it, the storage requests moto counted, the
    bucket's listing at its end, and each process group's CPU ms per finished sample."""

    index: int
    lo: float
    hi: float
    done: list[Any]
    requests: int
    listed: list[Any]
    cpu_ms: dict[str, float]


async def windows(
    samples: list[Any],
    start: float,
    stop: float,
    window: int,
    endpoint: str,
    store: Any,
    pids: dict[str, list[int | None]],
) -> AsyncIterator[Window]:
    """Every ``window`` seconds from ``start`` until ``stop``: what finished meanwhile (``samples``: tuples whose
    first item is the time they finished), for ``objstore`` and ``objmix`` alike."""
    w = 0
    last_counts = counts(endpoint)
    last_cpu = {k: sum(cpu_seconds(p) for p in v) for k, v in pids.items()}
    while time.time() < stop:
        await anyio.sleep(max(0.0, min(start + (w + 1) * window, stop) - time.time()))
        lo, hi = start + w * window, start + (w + 1) * window
        done = [s for s in samples if lo <= s[0] < hi]
        now_counts = counts(endpoint)
        listed = await anyio.to_thread.run_sync(lambda: store.list(""))
        now_cpu = {k: sum(cpu_seconds(p) for p in v) for k, v in pids.items()}
        yield Window(
            w,
            lo,
            hi,
            done,
            sum(now_counts.values()) - sum(last_counts.values()),
            listed,
            {k: 1000 * (now_cpu[k] - last_cpu[k]) / max(1, len(done)) for k in pids},
        )
        last_counts, last_cpu = now_counts, now_cpu
        w += 1


def body_sizes(raw: Any, n: int) -> None:
    """The floor's own growth with the body: conditional PUTs (create, If-Match) and GETs of 1 KB and 330 KB
    (the size the load's block reaches in 10 minutes), interleaved so both see the same machine."""
    from obstore import get, put

    sizes = {"1 KB": 1024, "330 KB": 330 * 1024}
    lat: dict[str, dict[str, list[float]]] = {k: {"create": [], "if-match": [], "get": []} for k in sizes}
    etags = {k: put(raw, f"body-{k}", b"x" * v)["e_tag"] for k, v in sizes.items()}
    for i in range(n):
        for k, size in sizes.items():
            body = bytes([97 + i % 26]) * size
            t = time.perf_counter()
            put(raw, f"body-{k}-{i}", body, mode="create")
            lat[k]["create"].append(time.perf_counter() - t)
            t = time.perf_counter()
            etags[k] = put(raw, f"body-{k}", body, mode={"e_tag": etags[k]})["e_tag"]
            lat[k]["if-match"].append(time.perf_counter() - t)
            t = time.perf_counter()
            get(raw, f"body-{k}").bytes()
            lat[k]["get"].append(time.perf_counter() - t)
    print(
        "raw floor by body size x"
        + str(n)
        + ": "
        + "; ".join(
            f"{k}: create p50 {pct(v['create'], 50):.2f} ms, If-Match PUT p50 {pct(v['if-match'], 50):.2f} ms, "
            f"GET p50 {pct(v['get'], 50):.2f} ms"
            for k, v in lat.items()
        ),
        flush=True,
    )
    for kind in ("create", "if-match", "get"):
        small, big = pct(lat["1 KB"][kind], 50), pct(lat["330 KB"][kind], 50)
        print(f"  {kind}: 330 KB / 1 KB = {big / small:.2f}x (+{big - small:.2f} ms)", flush=True)


async def drive(
    endpoint: str,
    ports: list[int],
    clients: int,
    blocks: int,
    seconds: int,
    window: int,
    store: Any,
    op: str,
    pids: dict[str, list[int | None]],
) -> None:
    """``pids``: the processes whose CPU time per edit each window shows (None: this process, the clients)."""
    samples: list[tuple[float, float, bool]] = []  # (finished at, latency, ok)
    acked: dict[str, list[str]] = {f"load{b}": [] for b in range(blocks)}
    errors: list[str] = []
    start = time.time()
    stop = start + seconds

    async def client(n: int) -> None:
        label = f"load{n % blocks}"
        async with http_session(f"http://127.0.0.1:{ports[n % len(ports)]}/mcp", TOKEN) as c:
            i = 0
            if op == "replace":
                r = await c.call_tool("core_memory_append", {"label": label, "content": f"c{n}=0"})
                assert not r.is_error, r.content
                acked[label].append(f"c{n}=0")
            while time.time() < stop:
                content = f"c{n}-{i}" if op == "append" else f"c{n}={i + 1}"
                t = time.perf_counter()
                try:
                    if op == "append":
                        r = await c.call_tool("core_memory_append", {"label": label, "content": content})
                    else:
                        r = await c.call_tool(
                            "memory_replace", {"label": label, "old_string": f"c{n}={i}", "new_string": content}
                        )
                    ok = not r.is_error
                    if ok:
                        acked[label].append(content)
                    else:
                        errors.append(str(r.content)[:200])
                except Exception as exc:  # counted and shown: a load run reports errors, it does not stop on them
                    ok = False
                    errors.append(repr(exc)[:200])
                samples.append((time.time(), time.perf_counter() - t, ok))
                i += 1

    rows = []
    async with anyio.create_task_group() as tg:
        for n in range(clients):
            tg.start_soon(client, n)
        async for win in windows(samples, start, stop, window, endpoint, store, pids):
            done, lo, hi, w, req = win.done, win.lo, win.hi, win.index, win.requests
            lat = [s[1] for s in done]
            objects = len(win.listed)
            heads = [x["size"] for x in win.listed if "/core/blocks/" in x["path"]]
            rate = len(done) / window
            per_edit = win.cpu_ms
            rows.append((rate, pct(lat, 50), pct(lat, 99), per_edit))
            cpu = ", ".join(f"{k} {v:.1f}" for k, v in per_edit.items())
            print(
                f"window {w:2d} ({int(lo - start):4d}-{int(hi - start):4d} s): {rate:6.2f} edits/s, p50 "
                f"{pct(lat, 50):7.1f} ms, p99 {pct(lat, 99):7.1f} ms, errors {sum(not s[2] for s in done)}, "
                f"requests/edit {req / max(1, len(done)):.2f}, bucket objects {objects}, block object(s) "
                f"{max(heads, default=0) // 1024} KB; CPU ms/edit {cpu}",
                flush=True,
            )
    ok = [s for s in samples if s[2]]
    full = rows[:-1] if len(rows) > 1 and seconds % window else rows
    print(
        f"edits {len(ok)} in {seconds} s ({len(ok) / seconds:.2f}/s), errors {len(samples) - len(ok)}"
        f"{' (last: ' + errors[-1] + ')' if errors else ''}; last window / first {full[-1][0] / full[0][0]:.2f}, "
        f"p99 max {max(r[2] for r in full):.0f} ms, p50 first {full[0][1]:.0f} ms, last {full[-1][1]:.0f} ms",
        flush=True,
    )
    if pids:
        print(
            "CPU ms per edit, first window -> last: "
            + ", ".join(f"{k} {full[0][3][k]:.1f} -> {full[-1][3][k]:.1f}" for k in pids)
            + f"; all {sum(full[0][3].values()):.1f} -> {sum(full[-1][3].values()):.1f}",
            flush=True,
        )
    if op == "append":
        check(endpoint, acked)
    else:
        check_replaced(endpoint, acked, len(ok))


def check_replaced(endpoint: str, acked: dict[str, list[str]], edits: int) -> None:
    """Each client's line holds its last acknowledged number; the block's versions are exactly the edits made."""
    from tiermem.core.bucket import Bucket
    from tiermem.core.objects import ObjectCore

    core = ObjectCore(Bucket(f"s3://{BUCKET}/load", options(endpoint)))
    agent = core.find_agent("default")
    assert agent is not None
    for label, lines in acked.items():
        block = core.find_block(agent.id, label)
        assert block is not None
        last = {line.split("=")[0]: line for line in lines}
        stored = [x for x in block.value.split("\n") if x]
        wrong = sorted(set(last.values()) ^ set(stored))
        print(
            f"{label}: {len(stored)} lines, {len(wrong)} not as last acknowledged {wrong[:5]}; version "
            f"{block.version} for 1 + {len(lines)} acknowledged edits",
            flush=True,
        )


def check(endpoint: str, acked: dict[str, list[str]]) -> None:
    """Every acknowledged append present exactly once; history bytes per append."""
    from tiermem.core.bucket import Bucket
    from tiermem.core.object_history import GRACE_SECONDS, chain, listed_segments
    from tiermem.core.objects import ObjectCore

    core = ObjectCore(Bucket(f"s3://{BUCKET}/load", options(endpoint)))
    agent = core.find_agent("default")
    assert agent is not None
    appended = history = transient = 0
    for label, lines in acked.items():
        block = core.find_block(agent.id, label)
        assert block is not None
        stored = Counter(x for x in block.value.split("\n") if x)
        lost = [x for x in lines if x not in stored]
        doubled = [x for x, k in stored.items() if k > 1]
        print(
            f"{label}: {len(lines)} acknowledged, {len(stored)} stored, lost {len(lost)}, doubled {len(doubled)}, "
            f"version {block.version}{' lost: ' + str(lost[:5]) if lost else ''}"
            f"{' doubled: ' + str(doubled[:5]) if doubled else ''}",
            flush=True,
        )
        appended += sum(len(x) + 1 for x in lines)
        head = core.bucket.get(f"core/blocks/{block.id}.json")
        assert head is not None
        listed = listed_segments(core.bucket, block.id)
        kept = chain(listed, int(json.loads(head.data)["sealed"]))
        history += sum(s.size for s in kept)
        transient += sum(s.size for s in listed) - sum(s.size for s in kept)
        history += len(json.dumps(json.loads(head.data)["tail"], separators=(",", ":")).encode())
    n = sum(len(v) for v in acked.values())
    if n:
        print(
            f"history: {history} bytes for {n} appends of {appended / n:.1f} bytes on average: {history / n:.1f} "
            f"bytes per append (target <= 2 x {appended / n:.1f} + 200 = {2 * appended / n + 200:.0f}); besides, "
            f"{transient} bytes of segments a merge replaced, deleted once {GRACE_SECONDS:.0f} s old",
            flush=True,
        )


def fill(endpoint: str, blocks: int, chars: int) -> None:
    """Append lines like the load's own (``p-<i>``) to every block until it holds ``chars`` characters."""
    from tiermem.base.config import load_settings
    from tiermem.domain import blocks as rules
    from tiermem.domain.factory import open_memory

    settings = load_settings(uri=f"s3://{BUCKET}/load", embedding_model="hashing", storage_options=options(endpoint))
    m = open_memory(settings, start_embedder=False)
    agent = m.ensure_agent("default").id
    lines = [f"p-{i}" for i in range(chars // 7 + 1)]
    for b in range(blocks):
        i = 0
        while len(m.block(agent, f"load{b}").value) < chars:
            chunk = "\n".join(lines[i : i + 10_000])
            m.edit(agent, f"load{b}", rules.Append(chunk))
            i += 10_000
        print(f"load{b} filled to {len(m.block(agent, f'load{b}').value)} characters first", flush=True)


def load(
    work: Path,
    endpoint: str,
    port: int,
    replicas: int,
    clients: int,
    blocks: int,
    seconds: int,
    window: int,
    op: str,
    prefill: int = 0,
    moto_pid: int | None = None,
) -> None:
    with serving(
        work,
        endpoint,
        port,
        replicas,
        prefix="load",
        tools='["default", "classic"]',
        blocks=blocks,
        description="bench objstore appends",
        before=(lambda: fill(endpoint, blocks, prefill)) if prefill else None,
    ) as procs:
        print(
            f"load: {clients} clients over {replicas} replica(s), {blocks} block(s), {seconds} s, windows of "
            f"{window} s",
            flush=True,
        )
        pids: dict[str, list[int | None]] = {"moto": [moto_pid], "replicas": [p.pid for p in procs], "clients": [None]}
        anyio.run(
            drive,
            endpoint,
            [port + r for r in range(replicas)],
            clients,
            blocks,
            seconds,
            window,
            Lister(endpoint),
            op,
            pids if moto_pid is not None else {},
        )


def sqlite_growth(edits: int) -> None:
    """The local SQLite core: database bytes per append to one 10M-limit block."""
    from tiermem.base.config import BlockSpec, load_settings
    from tiermem.domain import blocks as rules
    from tiermem.domain.factory import open_memory

    work = Path(tempfile.mkdtemp(prefix="tiermem-objstore-sqlite-"))
    try:
        m = open_memory(load_settings(data_dir=work, embedding_model="hashing"), start_embedder=False)
        agent = m.ensure_agent("default").id
        m.create_block(agent, BlockSpec(label="big", value="", limit=10_000_000))

        def size() -> tuple[int, int]:
            """(the database file with the WAL checkpointed into it, the history table's pages)."""
            import sqlite3

            conn = sqlite3.connect(str(work / "core.sqlite3"))
            try:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                pages = conn.execute("SELECT sum(pgsize) FROM dbstat WHERE name = 'history'").fetchone()[0]
            finally:
                conn.close()
            return (work / "core.sqlite3").stat().st_size, int(pages or 0)

        m.edit(agent, "big", rules.Append("start"))
        (before, history_before), value_before = size(), len(m.block(agent, "big").value)
        appended = 0
        for i in range(edits):
            line = f"fact {i}: " + "x" * 40
            appended += len(line) + 1
            m.edit(agent, "big", rules.Append(line))
        after, history_after = size()
        value = len(m.block(agent, "big").value)
        whole = sum(value_before + appended * (k + 1) / edits for k in range(edits)) / edits
        mean = appended / edits
        print(
            f"sqlite core: {edits} appends of {mean:.0f} bytes to one block (value {value_before} -> {value} chars): "
            f"database +{after - before} bytes ({(after - before) / edits:.0f} per append, the value's own growth "
            f"included); history table +{history_after - history_before} bytes in pages: "
            f"{(history_after - history_before) / edits:.0f} bytes per append (target <= 2 x {mean:.0f} + 200 = "
            f"{2 * mean + 200:.0f}; whole-value history rows would add ~{whole:.0f})",
            flush=True,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench objstore")
    parser.add_argument("--seconds", type=int, default=600)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--blocks", type=int, default=1, help="1: every client appends to one block; N: to N blocks")
    parser.add_argument("--window", type=int, default=30)
    parser.add_argument("--floor", type=int, default=200, help="raw PUTs and single-client appends measured first")
    parser.add_argument("--port", type=int, default=8861, help="the first replica's port; moto takes port + 50")
    parser.add_argument("--sqlite-edits", type=int, default=0, help="also measure the SQLite core's growth per append")
    parser.add_argument(
        "--prefill",
        type=int,
        default=0,
        help="fill each block with this many characters of lines before the load (diagnostic)",
    )
    parser.add_argument(
        "--op",
        choices=("append", "replace"),
        default="append",
        help="append: the block grows; replace: each client rewrites its own line",
    )
    args, _ = parser.parse_known_args(sys.argv[1:])
    if not 1 <= args.replicas <= 8 or not 1 <= args.clients <= 64 or args.blocks < 1 or args.window < 5:
        parser.error("--replicas 1-8, --clients 1-64, --blocks >= 1, --window >= 5")
    work = Path(tempfile.mkdtemp(prefix="tiermem-objstore-"))
    moto = None
    try:
        moto, endpoint = start_moto(work, args.port + 50)
        floor(endpoint, args.floor)
        if args.seconds > 0:
            load(
                work,
                endpoint,
                args.port,
                args.replicas,
                args.clients,
                args.blocks,
                args.seconds,
                args.window,
                args.op,
                args.prefill,
                moto.pid,
            )
        if args.sqlite_edits:
            sqlite_growth(args.sqlite_edits)
    finally:
        if moto is not None:
            moto.terminate()
            moto.wait(30)
        shutil.rmtree(work, ignore_errors=True)
        print(f"removed {work} (moto's bucket was in its memory)", flush=True)
