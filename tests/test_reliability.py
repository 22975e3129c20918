"""Many hosts, crashes and sick disks never cost a memory: real processes, bounded in time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time
import uuid
from pathlib import Path

import anyio
import pytest
from mcp import Client

from tiermem import blocks as b
from tiermem.errors import StoreError
from tiermem.factory import open_memory
from tiermem.config import load_settings
from tiermem.core.migrate import open_core
from tiermem.memory import Memory
from tiermem.store import Store

from .conftest import PYTHON, ROOT, text_of
from .test_transports import server_env, stdio_params

WORKERS, APPENDS, INSERTS, LOGS = 8, 6, 3, 3


def check_chain(m: Memory, agent: str, label: str) -> list[str]:
    """History is one unbroken chain of appends; returns the appended lines."""
    hist = list(reversed(m.history(agent, label, 10_000)))
    assert [v.version for v in hist] == list(range(1, len(hist) + 1))
    for older, newer in zip(hist, hist[1:]):
        assert newer.value.startswith(older.value + "\n"), (older.version, newer.version)
    assert hist[-1].value == m.block(agent, label).value
    return [line for line in m.block(agent, label).value.split("\n") if line]


@pytest.mark.anyio
async def test_torture_eight_servers_one_data_dir(tmp_path: Path) -> None:
    shared = tmp_path / "data"
    started = time.monotonic()

    async def worker(w: int) -> None:
        params = stdio_params(tmp_path)
        params.args[params.args.index("--data-dir") + 1] = str(shared)
        async with Client(params, cache=None, read_timeout_seconds=120) as c:
            for i in range(APPENDS):
                r = await c.call_tool("core_memory_append", {"label": "human", "content": f"w{w}-a{i}"})
                assert not r.is_error, text_of(r)
                if i < INSERTS:
                    r = await c.call_tool("archival_memory_insert", {"content": f"fact token{w}x{i} from worker {w}"})
                    assert not r.is_error, text_of(r)
                if i < LOGS:
                    r = await c.call_tool("conversation_log", {"messages": [{"role": "user", "content": f"msg{w}x{i}"}]})
                    assert not r.is_error, text_of(r)

    async with anyio.create_task_group() as tg:
        for w in range(WORKERS):
            tg.start_soon(worker, w)
    elapsed = time.monotonic() - started
    m = open_memory(load_settings(data_dir=shared, embedding_model="hashing"))
    agent = m.ensure_agent("default").id
    assert len(m.list_agents()) == 1
    lines = check_chain(m, agent, "human")
    assert sorted(lines) == sorted(f"w{w}-a{i}" for w in range(WORKERS) for i in range(APPENDS))  # none lost or doubled
    m.archive.embedder.wait(10)
    for w in range(WORKERS):
        for i in range(INSERTS):
            hits = m.archive.search(agent, f"token{w}x{i}", top_k=1).hits
            assert hits and hits[0].content == f"fact token{w}x{i} from worker {w}"
    assert m.store.count("passages") == WORKERS * INSERTS and m.store.count("messages") == WORKERS * LOGS
    writes = WORKERS * (APPENDS + INSERTS + LOGS)
    print(f"torture: {WORKERS} servers, {writes} writes in {elapsed:.1f}s ({writes / elapsed:.1f} writes/s), 0 lost")


def test_kill_during_block_edits(tmp_path: Path) -> None:
    """kill -9 a server mid-edit: every acknowledged append survives, history is whole after reopening."""
    data = tmp_path / "data"
    driver = textwrap.dedent(f"""
        import anyio, sys
        from mcp import Client, StdioServerParameters
        async def main():
            p = StdioServerParameters(command={PYTHON!r}, args=["-m", "tiermem", "serve", "--data-dir", {str(data)!r}],
                                      env={server_env(tmp_path)!r}, cwd={str(ROOT)!r})
            async with Client(p, cache=None) as c:
                i = 0
                while True:
                    r = await c.call_tool("core_memory_append", {{"label": "human", "content": f"n{{i}}"}})
                    assert not r.is_error
                    print(f"ack n{{i}}", flush=True)
                    i += 1
        anyio.run(main)
    """)
    proc = subprocess.Popen([PYTHON, "-c", driver], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            cwd=ROOT, start_new_session=True)
    acked = []
    assert proc.stdout is not None
    deadline = time.monotonic() + 90
    while len(acked) < 25 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("ack "):
            acked.append(line.split()[1])
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and its server, mid-edit
    proc.wait(timeout=10)
    assert len(acked) >= 25
    m = open_memory(load_settings(data_dir=data, embedding_model="hashing"), start_embedder=False)
    assert m.core.name == "sqlite" and (data / "core.sqlite3").exists()
    agent = m.ensure_agent("default").id
    lines = check_chain(m, agent, "human")
    assert lines[: len(acked)] == acked and len(lines) - len(acked) <= 1  # at most the unacknowledged one
    doctor = subprocess.run([PYTHON, "-m", "tiermem", "doctor", "--data-dir", str(data)], capture_output=True, text=True,
                            cwd=ROOT, env=server_env(tmp_path), timeout=120)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr


def test_kill_during_bulk_insert(tmp_path: Path) -> None:
    data = tmp_path / "data"
    writer = textwrap.dedent(f"""
        from tiermem.config import load_settings
        from tiermem.factory import open_memory
        m = open_memory(load_settings(data_dir={str(data)!r}, embedding_model="hashing"))
        agent = m.ensure_agent("default").id
        m.archive.embedder.wait(10)
        batch = 0
        while True:
            m.archive.insert_many(agent, [(f"bulk b{{batch}} item{{i}} " + "text " * 40, ["bulk"]) for i in range(50)], batch=50)
            print(f"ack {{batch}}", flush=True)
            batch += 1
    """)
    proc = subprocess.Popen([PYTHON, "-c", writer], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
    assert proc.stdout is not None
    acked = -1
    while acked < 8:
        line = proc.stdout.readline()
        if line.startswith("ack "):
            acked = int(line.split()[1])
    proc.kill()
    proc.wait(timeout=10)
    m = open_memory(load_settings(data_dir=data, embedding_model="hashing"))
    rows = m.store.all_rows("passages")
    batches = {r["content"].split()[1] for r in rows}
    for n in range(acked + 1):
        assert sum(1 for r in rows if r["content"].split()[1] == f"b{n}") == 50  # every acknowledged batch, whole
    assert all(sum(1 for r in rows if r["content"].split()[1] == bb) == 50 for bb in batches)  # no half batch
    assert all(r["vector"] is not None for r in rows)


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True).returncode == 0


def _on(disk: Path, backend: str, **kw: object) -> Memory:
    store = Store(str(disk / "db"), embedding_model="hashing-384", embedding_dim=384, optimize_every=0)
    return Memory(store, core=open_core(store, backend, disk), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", ["sqlite", "lancedb"])
def test_full_and_read_only_disk(tmp_path: Path, backend: str) -> None:
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "4m"):
        pytest.skip("needs permission to mount a small tmpfs (root) to simulate a full and a read-only disk")
    try:
        m = _on(disk, backend, default_blocks=load_settings().default_blocks)
        agent = m.ensure_agent("default").id
        m.edit(agent, "human", b.Rethink("Name: Ada"))
        def big_row(i: int) -> dict[str, object]:
            return {"id": f"p{i}", "agent_id": agent, "group_id": f"p{i}", "chunk": 0,
                    "content": uuid.uuid4().hex * 60, "tags": [], "text": "x", "created_us": 0, "vector": None}

        full = None
        for i in range(10_000):
            before = m.store.count("passages")
            try:
                m.store.add_rows("passages", [big_row(i)])
            except StoreError as exc:
                full = exc
                break
        assert full is not None and "is full" in str(full) and "nothing was written. Free some space" in str(full)
        assert m.store.count("passages") == before  # the failed write left nothing behind
        stored = before
        reopened = _on(disk, backend)
        assert reopened.block(agent, "human").value == "Name: Ada" and reopened.store.count("passages") == stored
        m.core.close()
        reopened.core.close()  # an open SQLite file keeps the mount busy
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        ro = _on(disk, backend)
        assert ro.block(agent, "human").value == "Name: Ada"  # still readable, not corrupted
        assert ro.store.count("passages") == stored
        with pytest.raises(StoreError, match="is read-only .* Make it writable"):
            ro.edit(agent, "human", b.Append("Likes tea"))
        assert ro.block(agent, "human").value == "Name: Ada"
        assert json.dumps([v.value for v in ro.history(agent, "human", 10)]) == json.dumps(["Name: Ada", ""])
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
