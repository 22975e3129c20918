"""Resident memory and latency of HTTP servers under 8 concurrent clients.

    python -m bench load [--seconds 100] [--warmup 120] [--port 8797] [--replicas N] [--s3]

Starts `tiermem serve --transport http` on loopback with a fresh store and `tools = all` (with --replicas N,
N servers on the same store, on ports PORT..PORT+N-1; with --s3 the store is `s3://` on a moto S3 server started
on loopback, as in tests/test_object_storage.py). 8 clients (the official MCP client, streamable HTTP), client n
on replica n mod N, each reconnect every 25 calls and cycle core_memory_append (to a `load` block created with a
10M-character limit, so appends keep writing), archival_memory_search, conversation_log and conversation_search.
Every 10 s it prints each server's RSS (/proc/PID/status) and the call counts; at the end p50/p99 of all calls (and
per kind of call), how many successful appends the block lost or holds twice (read back through the server),
the errors (exceptions) and tool errors (results flagged is_error), and each replica's RSS before and after an
untimed warm-up (each kind of call once per replica: the model loads, the tables open), its peak and at the end, and for runs over 70 s the change from t=60 s and the band after it (goal: flat within 10%).
With --warmup W the clients run W seconds of the same load first and the figure is taken over the SECONDS after it
(the goal "flat within 10% over 10 minutes after warm-up": --warmup 120 --seconds 600 runs 12 minutes).
With --oauth the servers check JWT access tokens (an issuer on loopback: bench/oauth_issuer.py) and the clients use
the shared agent `default`; with --proxy the clients reach the replicas through HAProxy doing TLS (bench/proxy.py);
--clients N sets the number of clients (8). E.g. the deployment target: --s3 --replicas 2 --proxy --oauth
--clients 16 --seconds 300. With --stateless the servers keep no sessions (TIERMEM_HTTP_STATELESS=1) and HAProxy
balances plain round robin, no stick table (any request may go to any replica).
Loopback only, bounded in time.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from .common import http_session, rss_mb, stop_processes

OPS = ("append", "search", "log", "recall")
LOAD_BLOCK = "load"
TOKEN = secrets.token_hex(16)  # the servers' bearer token (TIERMEM_HTTP_TOKEN), made per run
OAUTH_ENV: dict[str, str] = {}  # --oauth: the servers check access tokens of bench/oauth_issuer.py (TOKEN is one)
QUERY = ""  # --oauth: "?agent=default", the clients' shared agent (its `load` block made before the run)
PROXY: dict[str, Any] = {}  # --proxy: "port" of HAProxy (TLS) in front of the replicas, then "url" and "verify"
CLIENTS = 8  # --clients
STATELESS = False  # --stateless: the servers keep no sessions (http_stateless), the proxy no stick table


async def call(c: Client, op: str, n: int, i: int) -> bool:
    """One call; False when the tool reported an error."""
    if op == "append":
        r = await c.call_tool("core_memory_append", {"label": LOAD_BLOCK, "content": f"x{n}-{i}"[:20]})
    elif op == "search":
        r = await c.call_tool("archival_memory_search", {"query": f"fact {i} about things"})
    elif op == "log":
        r = await c.call_tool("conversation_log", {"messages": [{"role": "user", "content": f"hello {n} {i}"}]})
    elif op == "recall":
        r = await c.call_tool("conversation_search", {"query": f"hello {i}"})
    else:  # "list": the protocol alone, no storage
        await c.list_tools()
        return True
    return not r.is_error


async def client(url: str, n: int, stop: float, stats: dict[str, Any], ops: list[str], per: int) -> None:
    i = 0
    while time.time() < stop:
        async with http_session(url, TOKEN, PROXY.get("verify", True)) as c:
            for _ in range(per):
                if time.time() >= stop:
                    break
                i += 1
                op = ops[i % len(ops)]
                t = time.perf_counter()
                try:
                    if await call(c, op, n, i):
                        stats["ok"] += 1
                        if op == "append":
                            stats["appended"].append(f"x{n}-{i}"[:20])
                    else:
                        stats["tool_err"] += 1
                except Exception as exc:  # counted and shown: a load run reports errors, it does not stop on them
                    stats["err"] += 1
                    stats["last"] = repr(exc)[:200]
                took = time.perf_counter() - t
                stats["lat"].append(took)
                stats["by_op"].setdefault(op, []).append(took)


def wait_port(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{what} did not listen on port {port} within 180 s")


def start_s3(work: Path, port: int) -> tuple[subprocess.Popen[bytes], Path]:
    """A moto S3 server on loopback with one bucket, and the config file naming it (the README's S3 settings)."""
    try:
        import boto3
    except ImportError as exc:
        raise SystemExit("--s3 needs moto[server] and boto3 (pip install -e '.[test]')") from exc
    with open(work / "moto.log", "w") as log:
        moto = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    wait_port(port, moto, "the moto S3 server")
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1"
    ).create_bucket(Bucket="tiermem-load")
    config = work / "s3.toml"
    config.write_text(
        'uri = "s3://tiermem-load/load"\n[storage_options]\n'
        f'aws_endpoint = "{endpoint}"\naws_access_key_id = "test"\naws_secret_access_key = "test"\n'
        'region = "us-east-1"\nallow_http = "true"\n',
        encoding="utf-8",
    )
    return moto, config


def start_servers(
    work: Path, port: int, wrap: str | None, replicas: int, s3: bool
) -> tuple[list[subprocess.Popen[bytes]], list[subprocess.Popen[bytes]]]:
    """(every process started, the tiermem servers among them), each server listening."""
    env = dict(os.environ, TIERMEM_DATA_DIR=str(work / "data"), TIERMEM_TOOLS="all", TIERMEM_HTTP_TOKEN=TOKEN)
    if OAUTH_ENV:
        env = {k: v for k, v in env.items() if k != "TIERMEM_HTTP_TOKEN"} | OAUTH_ENV
    if STATELESS:
        env["TIERMEM_HTTP_STATELESS"] = "1"
    if PROXY:
        env["TIERMEM_ALLOWED_HOSTS"] = f"127.0.0.1:{PROXY['port']}"  # the Host the proxy passes on
    entry = [wrap] if wrap else ["-m", "tiermem"]
    procs: list[subprocess.Popen[bytes]] = []
    where: list[str] = []
    if s3:
        moto, config = start_s3(work, port + replicas)
        procs.append(moto)
        where = ["--config", str(config)]
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "tiermem",
            "blocks",
            "create",
            LOAD_BLOCK,
            "--limit",
            "10000000",
            "--description",
            "bench load appends",
            *where,
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode:
        raise SystemExit(f"could not create the {LOAD_BLOCK} block: {made.stderr}")
    servers = []
    for r in range(replicas):
        with open(work / f"server{r}.log", "w") as log:
            servers.append(
                subprocess.Popen(
                    [sys.executable, *entry, "serve", "--transport", "http", "--port", str(port + r), *where],
                    env=env,
                    stderr=log,
                )
            )
    procs.extend(servers)
    for r, server in enumerate(servers):
        wait_port(port + r, server, f"replica {r}")
    return procs, servers


async def warm_up(url: str, ops: list[str]) -> None:
    """Each kind of call once, untimed: the model loads and every table opens before the clock starts."""
    async with http_session(url, TOKEN) as c:
        for i, op in enumerate(ops):
            await call(c, op, 99, i)


async def count_appends(url: str, appended: list[str]) -> None:
    """Read the `load` block once the clients stopped and print how many of the appends that succeeded are in it
    (lost: missing; doubled: there more than once). Each append is one line, unique per client and call."""
    from collections import Counter

    async with http_session(url, TOKEN, PROXY.get("verify", True)) as c:
        read = await c.read_resource(f"memory://blocks/{LOAD_BLOCK}")
    lines = Counter("".join(getattr(part, "text", "") for part in read.contents).split("\n"))
    lost = sum(1 for a in appended if lines[a] == 0)
    doubled = sum(1 for a in set(appended) if lines[a] > 1)
    print(f"appends that succeeded {len(appended)}: lost {lost}, doubled {doubled} (read back from the block)")


async def drive(
    seconds: int, port: int, ops: list[str], per: int, servers: list[subprocess.Popen[bytes]], warmup: int | None = None
) -> None:
    replicas = len(servers)
    cold = [rss_mb(s.pid) for s in servers]
    started = time.time()
    for r in range(replicas):
        await warm_up(f"http://127.0.0.1:{port + r}/mcp{QUERY}", ops)
    print(f"warm-up (each call once per replica) took {time.time() - started:.0f} s", flush=True)
    rss: list[list[float]] = [[rss_mb(s.pid)] for s in servers]
    stats: dict[str, Any] = {"ok": 0, "err": 0, "tool_err": 0, "lat": [], "by_op": {}, "appended": []}
    stop = time.time() + seconds + (warmup or 0)  # with --warmup, SECONDS are measured after the loaded warm-up
    start = time.time()
    async with anyio.create_task_group() as tg:
        for n in range(CLIENTS):
            url = PROXY.get("url") or f"http://127.0.0.1:{port + n % replicas}/mcp{QUERY}"
            tg.start_soon(client, url, n, stop, stats, ops, per)
        while time.time() < stop:
            await anyio.sleep(min(10, max(0.1, stop - time.time())))
            for r, s in enumerate(servers):
                rss[r].append(rss_mb(s.pid))
            shown = " ".join(f"{samples[-1]:.0f}" for samples in rss)
            print(
                f"t={time.time() - start:5.0f}s rss={shown} MB ok={stats['ok']} err={stats['err']} "
                f"tool_err={stats['tool_err']} load={os.getloadavg()[0]:.1f} {stats.get('last', '')}",
                flush=True,
            )
    await count_appends(PROXY.get("url") or f"http://127.0.0.1:{port}/mcp{QUERY}", stats["appended"])
    lat = sorted(stats["lat"]) or [0.0]
    calls = stats["ok"] + stats["tool_err"] + stats["err"]
    print(
        f"calls {calls} errors {stats['err']} tool errors {stats['tool_err']} p50 {1000 * lat[len(lat) // 2]:.1f} ms "
        f"p99 {1000 * lat[int(len(lat) * 0.99)]:.1f} ms"
    )
    for op, took in sorted(stats["by_op"].items()):
        took.sort()
        print(
            f"  {op}: {len(took)} calls, p50 {1000 * took[len(took) // 2]:.1f} ms, "
            f"p99 {1000 * took[int(len(took) * 0.99)]:.1f} ms"
        )
    for r, samples in enumerate(rss):
        print(
            f"replica {r}: RSS {cold[r]:.0f} MB before warm-up, {samples[0]:.0f} MB after it (t=0), "
            f"{max(samples):.0f} MB peak, {samples[-1]:.0f} MB at the end "
            f"({100 * (samples[-1] - samples[0]) / samples[0]:+.1f}% over the run)"
        )
        if warmup is not None:  # the load ran WARMUP s before the measured SECONDS (samples every 10 s)
            w = warmup // 10
            base, later = samples[w], samples[w + 1 :]
            if later:
                print(
                    f"replica {r}: after a loaded warm-up of {warmup} s ({base:.0f} MB at t={warmup} s), over the "
                    f"measured {seconds} s: end {later[-1]:.0f} MB ({100 * (later[-1] - base) / base:+.1f}%), band "
                    f"{min(later):.0f}-{max(later):.0f} MB ({100 * (min(later) - base) / base:+.1f}% to "
                    f"{100 * (max(later) - base) / base:+.1f}%); flat within 10%: "
                    f"{'yes' if max(abs(x - base) for x in later) <= 0.1 * base else 'no'}"
                )
        elif len(samples) > 7:  # the goal: flat within 10% after a 60 s warm-up (samples every 10 s)
            base, later = samples[6], samples[7:]
            print(
                f"replica {r}: from t=60 s ({base:.0f} MB): end {100 * (later[-1] - base) / base:+.1f}%, "
                f"band {min(later):.0f}-{max(later):.0f} MB ({100 * (min(later) - base) / base:+.1f}% to "
                f"{100 * (max(later) - base) / base:+.1f}%)"
            )


def run(
    seconds: int,
    port: int,
    ops: list[str],
    per: int,
    wrap: str | None,
    replicas: int,
    s3: bool,
    warmup: int | None = None,
    keep_data: bool = False,
) -> None:
    work = Path(tempfile.mkdtemp(prefix="tiermem-load-"))
    print(
        f"work dir {work} (server logs there); {replicas} replica(s) on {'moto S3' if s3 else 'a local data dir'}; "
        f"ops {ops}, {per} calls per session",
        flush=True,
    )
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs, servers = start_servers(work, port, wrap, replicas, s3)
        if PROXY:
            import ssl

            from .proxy import find, start_haproxy

            haproxy = find("haproxy")
            if haproxy is None:
                raise SystemExit("--proxy needs haproxy (Debian: apt-get install haproxy)")
            backends = [port + r for r in range(replicas)]
            proxy, cert = start_haproxy(haproxy, work, PROXY["port"], backends, sticky=not STATELESS)
            procs.append(proxy)
            wait_port(PROXY["port"], proxy, "haproxy")
            PROXY["url"] = f"https://127.0.0.1:{PROXY['port']}/mcp{QUERY}"
            PROXY["verify"] = ssl.create_default_context(cafile=str(cert))
        anyio.run(drive, seconds, port, ops, per, servers, warmup)
    finally:
        stop_processes(list(reversed(procs)))
        # the store can reach GBs in a long run (every append keeps a history row with the whole value); logs stay
        if not keep_data and (work / "data").exists():
            shutil.rmtree(work / "data")
            print(f"removed the store under {work} (--keep-data keeps it); the server logs stay there", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench load")
    parser.add_argument("--seconds", type=int, default=100)
    parser.add_argument("--port", type=int, default=8797, help="the first replica's port (the next ones follow)")
    parser.add_argument(
        "--ops",
        default=",".join(OPS),
        help="comma-separated calls each client cycles through: append, search, log, recall, list",
    )
    parser.add_argument("--per-session", type=int, default=25, help="calls per client session before it reconnects")
    parser.add_argument("--wrap", help="a Python script to run instead of `-m tiermem` (same arguments), e.g. to trace")
    parser.add_argument("--replicas", type=int, default=1, help="servers on the same store; clients spread over them")
    parser.add_argument(
        "--s3", action="store_true", help="the store on a moto S3 server on loopback (needs moto[server])"
    )
    parser.add_argument(
        "--warmup",
        type=int,
        help="seconds of the same load before the measured --seconds (a multiple "
        "of 10); the flat figure is then taken from its end: e.g. --warmup 120 --seconds 600",
    )
    parser.add_argument(
        "--keep-data",
        action="store_true",
        help="keep the servers' store when the run ends (it is "
        "removed by default; the server logs are kept either way)",
    )
    parser.add_argument(
        "--oauth",
        action="store_true",
        help="OAuth on: the servers check JWT access tokens of an issuer on loopback (bench/oauth_issuer.py); the "
        "clients use the shared agent `default` (oauth_shared_agents)",
    )
    parser.add_argument(
        "--proxy", action="store_true", help="the clients reach the replicas through HAProxy doing TLS (bench/proxy.py)"
    )
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients")
    parser.add_argument(
        "--stateless",
        action="store_true",
        help="the servers keep no sessions (TIERMEM_HTTP_STATELESS=1); with --proxy, plain round robin (no stick table)",
    )
    args, _ = parser.parse_known_args(sys.argv[1:])
    global CLIENTS, STATELESS
    CLIENTS, STATELESS = args.clients, args.stateless
    if args.proxy:
        PROXY["port"] = args.port + args.replicas + 2
    if args.oauth:
        global TOKEN, QUERY
        from .oauth_issuer import Issuer

        issuer = Issuer(args.port + args.replicas + 1)
        public = f"https://127.0.0.1:{PROXY['port']}" if args.proxy else f"http://127.0.0.1:{args.port}"
        TOKEN, QUERY = issuer.mint(public + "/mcp"), "?agent=default"
        OAUTH_ENV.update(
            TIERMEM_OAUTH_ISSUER=issuer.url,
            TIERMEM_PUBLIC_URL=public,
            TIERMEM_OAUTH_SHARED_AGENTS='{"default": ["bench"]}',
        )
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    unknown = [o for o in ops if o not in (*OPS, "list")]
    if unknown or not ops:
        parser.error(f"unknown --ops {unknown}; use some of {', '.join((*OPS, 'list'))}")
    if not 1 <= args.replicas <= 8:
        parser.error(f"--replicas takes 1 to 8, got {args.replicas}")
    if args.warmup is not None and (args.warmup < 0 or args.warmup % 10):
        parser.error(f"--warmup takes a multiple of 10 seconds (the samples are 10 s apart), got {args.warmup}")
    run(args.seconds, args.port, ops, args.per_session, args.wrap, args.replicas, args.s3, args.warmup, args.keep_data)
