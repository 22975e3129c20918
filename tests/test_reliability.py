"""Many hosts, crashes and sick disks never cost a memory: real processes, bounded in time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from mcp import Client

from tiermem.base.config import Settings, load_settings
from tiermem.base.errors import StoreError
from tiermem.core.migrate import open_core
from tiermem.domain import blocks as b
from tiermem.domain.factory import open_memory
from tiermem.domain.memory import Memory
from tiermem.store import Filter, Store

from .cli_inproc import run_cli
from .conftest import PYTHON, ROOT, memory_over, text_of
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
                    r = await c.call_tool(
                        "conversation_log", {"messages": [{"role": "user", "content": f"msg{w}x{i}"}]}
                    )
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
    assert (
        m.archive.store.rows.count("passages") == WORKERS * INSERTS
        and m.archive.store.rows.count("messages") == WORKERS * LOGS
    )
    writes = WORKERS * (APPENDS + INSERTS + LOGS)
    print(f"torture: {WORKERS} servers, {writes} writes in {elapsed:.1f}s ({writes / elapsed:.1f} writes/s), 0 lost")


@dataclass
class Target:
    """Where the store lives (a local directory, or a bucket named by a config file) and how to reach it."""

    where: list[str]  # the command-line flags naming the store
    env: dict[str, str]
    data: Path | None = None
    config: Path | None = None

    def settings(self) -> Settings:
        if self.config is not None:
            return load_settings(self.config)
        return load_settings(data_dir=self.data, embedding_model="hashing")

    def settings_code(self) -> str:
        """The same settings, as Python for a child process."""
        if self.config is not None:
            return f"load_settings(__import__('pathlib').Path({str(self.config)!r}))"
        return f"load_settings(data_dir={str(self.data)!r}, embedding_model='hashing')"

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``tiermem ARGS`` on this store, in this process (``run_cli``): the doctor and the re-runs that check what
        a killed process left; the processes killed are real ones."""
        return run_cli(*args, *self.where, env=self.env)


def local_target(tmp_path: Path) -> Target:
    data = tmp_path / "data"
    return Target(["--data-dir", str(data)], server_env(tmp_path), data=data)


def assert_doctor_healthy(target: Target) -> None:
    doctor = target.cli("doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr


def descendants(pid: int) -> list[int]:
    """The processes under ``pid`` (children, their children, ...), read from Linux's /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])  # the name in parentheses may hold spaces
        except (OSError, IndexError, ValueError):  # gone meanwhile
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_during_block_edits(target: Target, acks: int) -> Memory:
    """kill -9 a server mid-edit: every acknowledged append survives, history is whole after reopening."""
    driver = textwrap.dedent(f"""
        import anyio, sys
        from mcp import Client, StdioServerParameters
        async def main():
            p = StdioServerParameters(command={PYTHON!r}, args=["-m", "tiermem", "serve", *{target.where!r}],
                                      env={target.env!r}, cwd={str(ROOT)!r})
            async with Client(p, cache=None, read_timeout_seconds=120) as c:
                i = 0
                while True:
                    r = await c.call_tool("core_memory_append", {{"label": "human", "content": f"n{{i}}"}})
                    assert not r.is_error
                    print(f"ack n{{i}}", flush=True)
                    i += 1
        anyio.run(main)
    """)
    proc = subprocess.Popen(
        [PYTHON, "-c", driver],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
        start_new_session=True,
    )
    acked = []
    assert proc.stdout is not None
    deadline = time.monotonic() + 180
    while len(acked) < acks and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("ack "):
            acked.append(line.split()[1])
    server = descendants(proc.pid)  # the SDK starts a stdio server in a session of its own: killpg misses it
    assert server, "the driver's server process was not found"
    for pid in server:
        os.kill(pid, signal.SIGKILL)  # the server, mid-edit
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    acked += [line.split()[1] for line in proc.stdout.read().splitlines() if line.startswith("ack ")]  # printed, unread
    assert len(acked) >= acks
    m = open_memory(target.settings(), start_embedder=False)
    agent = m.ensure_agent("default").id
    lines = check_chain(m, agent, "human")
    assert lines[: len(acked)] == acked and len(lines) - len(acked) <= 1  # at most the unacknowledged one
    print(
        f"edits killed after {len(acked)} acknowledged appends: {len(acked)} present, "
        f"{len(lines) - len(acked)} unacknowledged one landed, history chain whole"
    )
    assert_doctor_healthy(target)
    return m


def test_kill_during_block_edits(tmp_path: Path) -> None:
    target = local_target(tmp_path)
    m = kill_during_block_edits(target, acks=25)
    assert m.core.name == "sqlite" and (tmp_path / "data" / "core.sqlite3").exists()


def kill_during_bulk_insert(target: Target, batches: int) -> None:
    writer = textwrap.dedent(f"""
        from tiermem.base.config import Settings, load_settings
        from tiermem.domain.factory import open_memory
        m = open_memory({target.settings_code()})
        agent = m.ensure_agent("default").id
        m.archive.embedder.wait(10)
        batch = 0
        while True:
            m.archive.insert_many(agent, [(f"bulk b{{batch}} item{{i}} " + "text " * 40, ["bulk"]) for i in range(50)], batch=50)
            print(f"ack {{batch}}", flush=True)
            batch += 1
    """)
    proc = subprocess.Popen(
        [PYTHON, "-c", writer], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT, env=target.env
    )
    assert proc.stdout is not None
    acked = -1
    while acked < batches - 1:
        line = proc.stdout.readline()
        assert line, "the writer died before it was killed"
        if line.startswith("ack "):
            acked = int(line.split()[1])
    proc.kill()
    proc.wait(timeout=10)
    m = open_memory(target.settings())
    rows = m.archive.store.rows.all_rows("passages")
    batches_seen = {r["content"].split()[1] for r in rows}
    for n in range(acked + 1):
        assert sum(1 for r in rows if r["content"].split()[1] == f"b{n}") == 50  # every acknowledged batch, whole
    assert all(sum(1 for r in rows if r["content"].split()[1] == bb) == 50 for bb in batches_seen)  # no half batch
    assert all(r["vector"] is not None for r in rows)
    print(
        f"bulk insert killed after {acked + 1} acknowledged batches of 50: {len(batches_seen)} whole batches stored, "
        "0 half batches"
    )
    assert_doctor_healthy(target)


def test_kill_during_bulk_insert(tmp_path: Path) -> None:
    kill_during_bulk_insert(local_target(tmp_path), batches=9)


def big_agent_file(path: Path, messages: int, passages: int) -> Path:
    """A Letta agent file (the public ``loop.af``) grown to ``messages`` messages and ``passages`` passages."""
    data = json.loads((ROOT / "tests" / "fixtures" / "agent-file" / "loop.af").read_text(encoding="utf-8"))
    agent = data["agents"][0]
    first = agent["messages"][0]
    agent["messages"] = [
        {
            **first,
            "id": f"message-{i}",
            "role": "user" if i % 2 == 0 else "assistant",
            "tool_calls": [],
            "tool_returns": [],
            "content": [{"type": "text", "text": f"message {i} about topic{i % 97} " + "words " * 20}],
        }
        for i in range(messages)
    ]
    agent["in_context_message_ids"] = [m["id"] for m in agent["messages"][-10:]]
    data["tiermem"] = {
        "format": 1,
        "agents": {},
        "passages": {
            agent["id"]: [
                {"content": f"passage {i} fact{i} " + "words " * 10, "tags": ["bulk"]} for i in range(passages)
            ]
        },
    }
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def kill_during_import(target: Target, tmp_path: Path, messages: int, passages: int, stage: str) -> None:
    """kill -9 ``tiermem import`` mid-file, once ``stage`` (messages or passages) has a committed batch: nothing is
    visible, doctor names the fix, a re-run completes it once."""
    af = big_agent_file(tmp_path / "big.af", messages, passages)
    # The store exists before the import starts; the watch reads the newest version at every count (on object
    # storage the default 250 ms staleness would see the first batch late, and the kill could land after the last)
    fresh = target.settings().model_copy(update={"object_read_staleness_ms": 0})
    watch = open_memory(fresh, start_embedder=False)
    watch.ensure_agent("default")
    proc = subprocess.Popen(
        [PYTHON, "-m", "tiermem", "import", str(af), *target.where],
        cwd=ROOT,
        env=target.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 300
    while watch.archive.store.rows.count(stage) == 0 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.kill()  # SIGKILL, once the stage's first batch is committed
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL, "the import finished before the kill; grow the file"
    m = open_memory(target.settings(), start_embedder=False)
    assert [a.name for a in m.list_agents()] == ["default"]  # the half-written agent is not visible
    partial = m.archive.store.rows.count("messages") + m.archive.store.rows.count("passages")
    assert 0 < partial < messages + passages
    doctor = target.cli("doctor")
    assert doctor.returncode == 1 and "stray rows" in doctor.stdout and "tiermem import FILE` again" in doctor.stdout, (
        doctor.stdout + doctor.stderr
    )

    started = time.monotonic()
    again = target.cli("import", str(af), "--json")
    assert again.returncode == 0, again.stderr
    rerun = time.monotonic() - started
    assert json.loads(again.stdout)["imported"] == ["Loop"]
    m = open_memory(target.settings(), start_embedder=False)
    agent = m.get_agent("Loop").id
    rows = m.archive.store.rows.select("messages", Filter(agent_id=agent), limit=10**9)
    assert len(rows) == len({r["id"] for r in rows}) == messages  # each message once
    assert sorted(int(r["content"].split()[1]) for r in rows) == list(range(messages))
    texts = [r["content"] for r in m.archive.store.rows.select("passages", Filter(agent_id=agent), limit=10**9)]
    assert len(texts) == len(set(texts)) == passages
    assert (
        m.archive.store.rows.count("messages") == messages and m.archive.store.rows.count("passages") == passages
    )  # no leftovers
    print(
        f"import killed in its {stage} with {partial} of {messages + passages} rows written (agent invisible); "
        f"re-run imported {messages} messages + {passages} passages in {rerun:.1f}s, 0 duplicates"
    )
    assert_doctor_healthy(target)
    third = target.cli("import", str(af), "--json")  # and once more: nothing is written twice
    assert third.returncode == 0 and json.loads(third.stdout)["imported"] == [], third.stdout + third.stderr
    assert m.archive.store.rows.count("messages") == messages


def test_kill_during_import(tmp_path: Path) -> None:
    # Messages (two batches of 256) all land before the passages; eight batches of passages leave the kill its time.
    # Each message costs the import its credential scan, twice (most of its time): no more of them than that.
    kill_during_import(local_target(tmp_path), tmp_path, messages=300, passages=2000, stage="passages")


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    return (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
        ).returncode
        == 0
    )


def _on(disk: Path, backend: str, **kw: object) -> Memory:
    store = Store(str(disk / "db"), embedding_model="hashing-384", embedding_dim=384, optimize_every=0)
    return memory_over(store, core=open_core(store, backend, disk), **kw)


@pytest.mark.parametrize("backend", ["sqlite"])
def test_full_and_read_only_disk(tmp_path: Path, backend: str) -> None:
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "4m"):
        pytest.skip("needs permission to mount a small tmpfs (root) to simulate a full and a read-only disk")
    try:
        m = _on(disk, backend, default_blocks=load_settings().default_blocks)
        agent = m.ensure_agent("default").id
        m.edit(agent, "human", b.Rethink("Name: Ada"))

        def big_row(i: int) -> dict[str, object]:
            return {
                "id": f"p{i}",
                "agent_id": agent,
                "group_id": f"p{i}",
                "chunk": 0,
                "content": uuid.uuid4().hex * 60,
                "tags": [],
                "text": "x",
                "created_us": 0,
                "vector": None,
            }

        full = None
        for i in range(10_000):
            before = m.archive.store.rows.count("passages")
            try:
                m.archive.store.rows.add_rows("passages", [big_row(i)])
            except StoreError as exc:
                full = exc
                break
        assert full is not None and "is full" in str(full) and "nothing was written. Free some space" in str(full)
        assert m.archive.store.rows.count("passages") == before  # the failed write left nothing behind
        stored = before
        reopened = _on(disk, backend)
        assert (
            reopened.block(agent, "human").value == "Name: Ada"
            and reopened.archive.store.rows.count("passages") == stored
        )
        m.core.close()
        reopened.core.close()  # an open SQLite file keeps the mount busy
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        ro = _on(disk, backend)
        assert ro.block(agent, "human").value == "Name: Ada"  # still readable, not corrupted
        assert ro.archive.store.rows.count("passages") == stored
        with pytest.raises(StoreError, match="is read-only .* Make it writable"):
            ro.edit(agent, "human", b.Append("Likes tea"))
        assert ro.block(agent, "human").value == "Name: Ada"
        assert json.dumps([v.value for v in ro.history(agent, "human", 10)]) == json.dumps(["Name: Ada", ""])
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def test_kill_during_memory_graph_import(tmp_path: Path) -> None:
    """A memory.jsonl graph lands batch by batch (each whole); a re-run after kill -9 adds only what is missing."""
    target = local_target(tmp_path)
    graph = tmp_path / "memory.jsonl"
    n = 1500
    graph.write_text(
        "".join(
            json.dumps(
                {
                    "type": "entity",
                    "name": f"e{i}",
                    "entityType": "thing",
                    "observations": [f"observation {i} " + "words " * 10],
                }
            )
            + "\n"
            for i in range(n)
        ),
        encoding="utf-8",
    )
    watch = open_memory(target.settings(), start_embedder=False)
    watch.ensure_agent("default")
    proc = subprocess.Popen(
        [PYTHON, "-m", "tiermem", "import", str(graph), *target.where],
        cwd=ROOT,
        env=target.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while watch.archive.store.rows.count("passages") == 0 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.kill()
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL, "the import finished before the kill; grow the file"
    partial = watch.archive.store.rows.count("passages")
    assert 0 < partial < n and partial % 256 == 0  # whole batches only
    again = target.cli("import", str(graph), "--json")
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert (report["passages"], report["already_present"]) == (n - partial, partial)
    texts = [r["content"] for r in watch.archive.store.rows.all_rows("passages")]
    assert len(texts) == len(set(texts)) == n
    assert_doctor_healthy(target)
