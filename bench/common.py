"""Shared helpers: timing statistics, machine description, result files."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results.json"
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
}


def stats(samples_s: list[float]) -> dict[str, float]:
    ms = sorted(x * 1000 for x in samples_s)

    def pct(p: float) -> float:
        return ms[min(len(ms) - 1, int(round(p / 100 * (len(ms) - 1))))]

    return {
        "n": len(ms),
        "p50_ms": round(pct(50), 3),
        "p95_ms": round(pct(95), 3),
        "p99_ms": round(pct(99), 3),
        "mean_ms": round(statistics.fmean(ms), 3),
        "stdev_ms": round(statistics.pstdev(ms), 3),
    }


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }


def bench_env(data_dir: Path | None = None, **extra: str) -> dict[str, str]:
    # PYTHONDONTWRITEBYTECODE is dropped: an installed tiermem has its bytecode compiled (pip does it), so a
    # measured start must not compile every changed module again (the first, unmeasured start writes it).
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERMEM_") and k != "PYTHONDONTWRITEBYTECODE"}
    tmp = Path(tempfile.mkdtemp(prefix="tiermem-bench-"))
    env.update(XDG_CONFIG_HOME=str(tmp / "cfg"), TIERMEM_DATA_DIR=str(data_dir or tmp / "data"))
    env.update(extra)
    return env


def spawn_to_initialize(cmd: list[str], env: dict[str, str]) -> float:
    """Seconds from spawning ``cmd`` to reading its initialize response on stdout."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=ROOT
    )
    assert proc.stdin and proc.stdout
    proc.stdin.write((json.dumps(INIT) + "\n").encode())
    proc.stdin.flush()
    line = proc.stdout.readline()
    elapsed = time.perf_counter() - start
    proc.kill()
    proc.wait()
    if not line.startswith(b"{"):
        raise RuntimeError(f"{cmd} did not answer initialize")
    return elapsed


@asynccontextmanager
async def http_session(url: str, token: str, verify: Any = True) -> AsyncIterator[Any]:
    """An MCP client session over streamable HTTP to ``url`` that sends the bearer ``token`` (a served tiermem
    always wants one: README 'Security'); long timeouts, since a loaded store can be slow. ``verify``: the TLS
    trust (an ``ssl.SSLContext`` for a proxy's self-signed certificate)."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(
        headers={"authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(120, read=300), verify=verify
    )
    async with http, Client(streamable_http_client(url, http_client=http), cache=None, read_timeout_seconds=120) as c:
        yield c


def stop_processes(procs: list[subprocess.Popen[Any]], grace: float = 30.0) -> None:
    """Ask each of ``procs`` to stop (SIGTERM), in order, and kill any that has not within ``grace`` seconds."""
    for p in procs:
        p.terminate()
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def save(name: str, result: dict[str, Any]) -> None:
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    data[name] = {"result": result, "machine": machine(), "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    RESULTS.write_text(json.dumps(data, indent=2))


def status_mb(key: str, pid: int | str = "self") -> float:
    """A memory line of a process's /proc status (``VmRSS``, ``VmHWM``, ...) in MB; NaN where there is no /proc."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def rss_mb(pid: int | str = "self") -> float:
    """Resident memory of a process (default: this one) in MB, from /proc; NaN where there is no /proc."""
    return status_mb("VmRSS", pid)


def memory_split(pid: int | str = "self") -> dict[str, float]:
    """A process's memory in MB from /proc: RSS, PSS and USS (smaps_rollup: shared library pages split among the
    processes mapping them, or left out), and RSS split into anonymous memory and file pages (mostly library code)."""
    out: dict[str, float] = {}
    keys = {"Rss": "rss", "Pss": "pss", "Private_Clean": "uss", "Private_Dirty": "uss", "Anonymous": "anon"}
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
            name, value = line.split(":", 1)
            if name in keys:
                out[keys[name]] = out.get(keys[name], 0.0) + int(value.split()[0]) / 1024
    except OSError:
        return {}
    out["file"] = out.get("rss", 0.0) - out.get("anon", 0.0)
    return {k: round(v, 1) for k, v in out.items()}


def server_pid(data_dir: Path | str) -> int | None:
    """The `tiermem serve` process started with ``--data-dir data_dir`` (found by its command line)."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"serve" in cmd and str(data_dir).encode() in cmd:
                return int(proc.name)
    return None
