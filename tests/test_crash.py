"""kill -9 during a backup restore and during a MemFS import (a local directory and object storage), and between
an edit's history segment and its commit on the object-storage core.

Each import test kills the real ``tiermem`` process once its first rows are committed, then checks what the design
promises: nothing half-imported is visible, a re-run completes the import without writing anything twice,
every block's history chain is whole, and ``tiermem doctor`` is healthy (or names the fix).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tiermem.base.config import BlockSpec
from tiermem.domain import blocks as b
from tiermem.domain.factory import open_memory
from tiermem.domain.memory import Memory

from .conftest import PYTHON, ROOT
from .test_object_storage import s3_endpoint, s3_target  # noqa: F401 (the module-scoped moto server fixture)
from .test_reliability import Target, assert_doctor_healthy, local_target

RESTORE_BATCH = 500  # a backup restore merges this many rows per commit (interop/backup.py)


def rows(m: Memory, table: str, agent_id: str | None = None) -> list[dict[str, Any]]:
    """Every stored row of ``table`` (of one agent): the one place these tests read rows directly."""
    holder: Any = m.archive.store.rows if table in ("messages", "passages") else m.core
    return [r for r in holder.all_rows(table) if agent_id is None or r.get("agent_id") == agent_id]


def kill_when(proc: subprocess.Popen[bytes], ready: Callable[[], bool]) -> None:
    """SIGKILL ``proc`` as soon as ``ready()``; fails if it finished first (the input is too small)."""
    deadline = time.monotonic() + 300
    while not ready() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.kill()
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL, "the import finished before the kill; grow the input"


def start(target: Target, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [PYTHON, "-m", "tiermem", *args, *target.where],
        cwd=ROOT,
        env=target.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def raw_chains(m: Memory, block_ids: set[str]) -> dict[str, list[dict[str, Any]]]:
    """Each block's stored history rows by version, read without the repair a history read does."""
    chains: dict[str, list[dict[str, Any]]] = {i: [] for i in block_ids}
    for r in rows(m, "block_history"):
        if r["block_id"] in chains:
            chains[r["block_id"]].append(r)
    return {i: sorted(c, key=lambda r: int(r["version"])) for i, c in chains.items()}


def assert_chains_whole(m: Memory, agent_id: str) -> None:
    """Every attached block has history rows 1..version, each once, the last one its value."""
    blocks = m.blocks(agent_id)
    chains = raw_chains(m, {blk.id for blk in blocks})
    for blk in blocks:
        chain = chains[blk.id]
        assert [int(r["version"]) for r in chain] == list(range(1, blk.version + 1)), (blk.label, chain)
        assert chain[-1]["value"] == blk.value, blk.label


# ---------------------------------------------------------------------------
# tiermem import backup.jsonl
# ---------------------------------------------------------------------------


MESSAGES, PASSAGES = 2500, 500


@pytest.fixture(scope="module")
def big_backup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[dict[str, Any]]]]:
    """A real ``tiermem export --format jsonl`` of an agent whose blocks have history, grown to ``MESSAGES``
    messages and ``PASSAGES`` passages by copying its one message and one passage row (vectors left out, as
    an export does by default: the restore embeds them)."""
    tmp_path = tmp_path_factory.mktemp("backup")
    src = local_target(tmp_path)
    m = open_memory(src.settings(), start_embedder=False)
    agent = m.ensure_agent("big").id
    for i in range(5):
        m.edit(agent, "human", b.Append(f"fact {i}"))
    m.create_block(agent, BlockSpec(label="notes", value="first note", description="notes"))
    m.edit(agent, "notes", b.Rethink("second note"))
    m.archive.log_messages(agent, [{"role": "user", "content": "seed"}])
    m.archive.insert(agent, "seed", ["bulk"])
    path = tmp_path / "backup.jsonl"
    done = src.cli("export", "--format", "jsonl", "-o", str(path))
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    by_type: dict[str, list[dict[str, Any]]] = {}
    for rec in records[1:-1]:  # the header and the trailer (its counts, written again below) aside
        by_type.setdefault(rec["type"], []).append(rec["row"])
    msg, psg = by_type["messages"][0], by_type["passages"][0]
    by_type["messages"] = [
        {
            **msg,
            "id": f"message-{i}",
            "seq": msg["seq"] + i,
            "role": "user" if i % 2 else "assistant",
            "content": f"message {i} " + "words " * 20,
            "text": f"message {i} " + "words " * 20,
        }
        for i in range(MESSAGES)
    ]
    by_type["passages"] = [
        {
            **psg,
            "id": f"passage-{i}",
            "group_id": f"passage-{i}",
            "content": f"passage {i} " + "words " * 10,
            "text": f"passage {i} " + "words " * 10,
        }
        for i in range(PASSAGES)
    ]
    order = ["agents", "blocks", "block_history", "attachments", "messages", "passages"]
    end = {"type": "tiermem-backup-end", "rows": {t: len(by_type.get(t, [])) for t in order}}  # the counts, last
    path.write_text(
        "\n".join(
            json.dumps(r)
            for r in [records[0], *({"type": t, "row": row} for t in order for row in by_type.get(t, [])), end]
        )
        + "\n",
        encoding="utf-8",
    )
    return path, by_type


def kill_during_backup_restore(target: Target, backup: tuple[Path, dict[str, list[dict[str, Any]]]]) -> None:
    path, source = backup
    messages, passages = len(source["messages"]), len(source["passages"])
    # The watch reads the newest version at every count (object_read_staleness_ms 0): with the default 250 ms it saw
    # the first batch late, and the kill could land after the last one.
    fresh = target.settings().model_copy(update={"object_read_staleness_ms": 0})
    watch = open_memory(fresh, start_embedder=False)
    watch.ensure_agent("default")  # a store in use: the restore adds an agent beside it
    proc = start(target, "import", str(path))
    kill_when(proc, lambda: watch.archive.store.rows.count("messages") > 0)

    m = open_memory(target.settings(), start_embedder=False)
    assert [a.name for a in m.list_agents()] == ["default"]  # the agent row is restored last: nothing is visible
    partial = {t: len(rows(m, t)) for t in ("messages", "passages")}
    assert 0 < partial["messages"] and partial["messages"] + partial["passages"] < messages + passages
    assert partial["messages"] % RESTORE_BATCH == 0 and partial["passages"] % RESTORE_BATCH == 0  # whole batches
    doctor = target.cli("doctor")
    assert doctor.returncode == 1 and "stray rows" in doctor.stdout and "tiermem import FILE` again" in doctor.stdout, (
        doctor.stdout + doctor.stderr
    )

    started = time.monotonic()
    again = target.cli("import", str(path), "--json")
    rerun = time.monotonic() - started
    assert again.returncode == 0, again.stderr
    inserted = json.loads(again.stdout)["inserted"]
    assert inserted["messages"] == messages - partial["messages"]  # only what was missing
    assert inserted["passages"] == passages - partial["passages"]
    assert inserted["agents"] == 1
    m = open_memory(target.settings(), start_embedder=False)
    assert sorted(a.name for a in m.list_agents()) == ["big", "default"]
    big = m.get_agent("big").id
    for table, n in (("messages", messages), ("passages", passages)):
        stored = rows(m, table)
        assert len(stored) == len({r["id"] for r in stored}) == n  # each once, none left over
        assert {r["id"] for r in stored} == {r["id"] for r in source[table]}
        assert all(r["agent_id"] == big and r["vector"] is not None for r in stored)
    restored = {r["id"] for r in source["blocks"]}
    history = [r for r in rows(m, "block_history") if r["block_id"] in restored]
    assert sorted((r["key"], r["value"]) for r in history) == sorted(
        (r["key"], r["value"]) for r in source["block_history"]
    )
    assert {blk.label: blk.value for blk in m.blocks(big)} == {r["label"]: r["value"] for r in source["blocks"]}
    assert_chains_whole(m, big)
    assert m.block(big, "human").value.endswith("fact 4") and m.history(big, "notes", 10)[0].value == "second note"
    assert_doctor_healthy(target)
    print(
        f"backup restore killed with {partial} of {messages} messages + {passages} passages written (agent "
        f"invisible); re-run inserted {inserted['messages']} + {inserted['passages']} in {rerun:.1f}s, 0 duplicates"
    )


def test_kill_during_backup_restore(tmp_path: Path, big_backup: tuple[Path, dict[str, list[dict[str, Any]]]]) -> None:
    kill_during_backup_restore(local_target(tmp_path), big_backup)


def test_s3_kill_during_backup_restore(
    tmp_path: Path,
    s3_endpoint: str,  # noqa: F811
    big_backup: tuple[Path, dict[str, list[dict[str, Any]]]],
) -> None:
    kill_during_backup_restore(s3_target(tmp_path, s3_endpoint, "kill-restore"), big_backup)


# ---------------------------------------------------------------------------
# tiermem import DIR --format memfs
# ---------------------------------------------------------------------------


def memfs_dir(root: Path, files: int) -> dict[str, tuple[str, int]]:
    """A MemFS directory of ``files`` block files (plus one pinned one); label -> (value, limit)."""
    want: dict[str, tuple[str, int]] = {"system/profile": ("Name: Ada\nLikes tea", 2000)}
    for i in range(files):
        want[f"notes/n{i:03d}"] = (f"note {i}\n" + "line of text\n" * 5 + "end", 3000 + i)
    for label, (value, limit) in want.items():
        path = root / f"{label}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"---\ndescription: about {label}\nlimit: {limit}\n---\n{value}\n", encoding="utf-8")
    return want


def kill_during_memfs_import(target: Target, tmp_path: Path, files: int) -> None:
    """kill -9 ``tiermem import DIR --format memfs`` after its first block: the visible blocks are whole files
    with their history (one block per commit), and a re-run creates only the rest."""
    root = tmp_path / "memfs"
    want = memfs_dir(root, files)
    args = ["import", str(root), "--format", "memfs", "--agent", "mem"]
    watch = open_memory(target.settings(), start_embedder=False)
    watch.ensure_agent("default")

    def landed() -> int:
        agent = next((a for a in watch.list_agents() if a.name == "mem"), None)
        return 0 if agent is None else sum(1 for blk in watch.blocks(agent.id) if blk.label in want)

    kill_when(start(target, *args), lambda: landed() > 0)

    m = open_memory(target.settings(), start_embedder=False)
    agent = m.get_agent("mem").id
    seen = {blk.label: blk for blk in m.blocks(agent) if blk.label in want}
    assert 0 < len(seen) < len(want)
    for label, blk in seen.items():  # each visible block is its whole file
        assert (blk.value, blk.limit, blk.description) == (*want[label], f"about {label}")
    assert_chains_whole(m, agent)
    assert_doctor_healthy(target)  # a half-done MemFS import is whole blocks: nothing to fix

    started = time.monotonic()
    again = target.cli(*args, "--json")
    rerun = time.monotonic() - started
    assert again.returncode == 0, again.stdout + again.stderr
    report = json.loads(again.stdout)
    assert sorted(report["blocks_created"]) == sorted(set(want) - set(seen))
    assert sorted(report["blocks_unchanged"]) == sorted(seen) and report["blocks_updated"] == []
    m = open_memory(target.settings(), start_embedder=False)
    blocks = m.blocks(agent)
    labels = [blk.label for blk in blocks]
    assert len(labels) == len(set(labels))  # no label twice
    assert {blk.label: (blk.value, blk.limit) for blk in blocks if blk.label in want} == want
    for blk in blocks:
        if blk.label in seen:
            assert blk.id == seen[blk.label].id and blk.version == seen[blk.label].version  # not written again
    assert_chains_whole(m, agent)
    print(
        f"memfs import killed after {len(seen)} of {len(want)} files; re-run created the other "
        f"{len(want) - len(seen)} in {rerun:.1f}s, 0 duplicates"
    )


def test_kill_during_memfs_import(tmp_path: Path) -> None:
    kill_during_memfs_import(local_target(tmp_path), tmp_path, files=80)


def test_s3_kill_during_memfs_import(tmp_path: Path, s3_endpoint: str) -> None:  # noqa: F811
    kill_during_memfs_import(s3_target(tmp_path, s3_endpoint, "kill-memfs"), tmp_path, files=25)


# ---------------------------------------------------------------------------
# The object-storage core: kill -9 between an edit's history segment and its commit
# ---------------------------------------------------------------------------

# kill -9 at one precise point: the edit sealed its block's older history into a segment (written), and its one
# commit, the conditional PUT of the block's head, has not been sent. The child replaces that PUT on its own
# instance (a crash-injection point in a child process; nothing in the test process is patched), so everything
# before it is the real edit path.
KILL_BEFORE_COMMIT = """
import os, signal
from tiermem.domain import blocks as b
from tiermem.base.config import load_settings
from tiermem.domain.factory import open_memory
m = open_memory({settings}, start_embedder=False)
assert m.core.name == "object" and m.core.atomic
agent = m.ensure_agent("default").id
m.core.bucket.replace = lambda path, data, etag: os.kill(os.getpid(), signal.SIGKILL)
m.edit(agent, "human", b.Append({line!r}))
print("survived")
"""


def edit_killed_before_commit(target: Target, line: str) -> None:
    child = subprocess.run(
        [PYTHON, "-c", KILL_BEFORE_COMMIT.format(settings=target.settings_code(), line=line)],
        cwd=ROOT,
        env=target.env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stdout + child.stderr


def test_s3_kill_between_history_segment_and_commit(tmp_path: Path, s3_endpoint: str) -> None:  # noqa: F811
    from tiermem.core.object_history import SEAL_BYTES, listed_segments

    target = s3_target(tmp_path, s3_endpoint, "kill-commit")
    m = open_memory(target.settings(), start_embedder=False)
    agent = m.ensure_agent("default").id
    m.update_block(agent, "human", limit=200_000)
    m.edit(agent, "human", b.Append("acked"))
    m.edit(agent, "human", b.Append("big " + "x" * SEAL_BYTES))  # the next edit seals the history so far
    block = m.block(agent, "human")
    assert not listed_segments(m.core.bucket, block.id)

    edit_killed_before_commit(target, "killed before its commit")
    m = open_memory(target.settings(), start_embedder=False)  # a restart
    assert m.block(agent, "human") == block  # nothing of the killed edit is visible
    assert [int(r["version"]) for r in rows(m, "block_history") if r["block_id"] == block.id] == list(
        range(1, block.version + 1)
    )
    assert len(listed_segments(m.core.bucket, block.id)) == 1  # the segment it wrote, not used by any head yet
    assert_doctor_healthy(target)

    m.edit(agent, "human", b.Append("after"))  # seals the same versions: the same segment, used now
    assert len(listed_segments(m.core.bucket, block.id)) == 1
    value = m.block(agent, "human").value
    assert value == block.value + "\nafter" and "killed before its commit" not in value
    hist = m.history(agent, "human", 100)
    assert [v.version for v in hist] == list(range(block.version + 1, 0, -1)) and hist[0].value == value
    assert hist[1].value == block.value and hist[2].value.endswith("\nacked")
    assert m.core.tidy() == {"segments merged": 0, "orphan segments deleted": 0, "idempotency records moved": 0}
    assert_doctor_healthy(target)
