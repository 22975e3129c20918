"""kill -9 during a backup restore and during a MemFS import or sync, on a local directory and on object storage.

Each test kills the real ``tiermem`` process once its first rows are committed, then checks what the design
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

from tiermem import blocks as b
from tiermem.config import BlockSpec
from tiermem.factory import open_memory
from tiermem.memory import Memory

from .conftest import PYTHON, ROOT
from .test_object_storage import s3_endpoint, s3_target  # noqa: F401 (the module-scoped moto server fixture)
from .test_reliability import Target, assert_doctor_healthy, local_target

RESTORE_BATCH = 500  # a backup restore merges this many rows per commit (interop/backup.py)


def rows(m: Memory, table: str, agent_id: str | None = None) -> list[dict[str, Any]]:
    """Every stored row of ``table`` (of one agent): the one place these tests read rows directly."""
    holder: Any = m.store if table in ("messages", "passages") else m.core
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
    return subprocess.Popen([PYTHON, "-m", "tiermem", *args, *target.where], cwd=ROOT, env=target.env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


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


def big_backup(tmp_path: Path, messages: int, passages: int) -> tuple[Path, dict[str, list[dict[str, Any]]]]:
    """A real ``tiermem export --format jsonl`` of an agent whose blocks have history, grown to ``messages``
    messages and ``passages`` passages by copying its one message and one passage row."""
    src = local_target(tmp_path / "source")
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
    for rec in records[1:]:
        by_type.setdefault(rec["type"], []).append(rec["row"])
    msg, psg = by_type["messages"][0], by_type["passages"][0]
    by_type["messages"] = [{**msg, "id": f"message-{i}", "seq": msg["seq"] + i, "role": "user" if i % 2 else "assistant",
                            "content": f"message {i} " + "words " * 20, "text": f"message {i} " + "words " * 20}
                           for i in range(messages)]
    by_type["passages"] = [{**psg, "id": f"passage-{i}", "group_id": f"passage-{i}",
                            "content": f"passage {i} " + "words " * 10, "text": f"passage {i} " + "words " * 10}
                           for i in range(passages)]
    order = ["agents", "blocks", "block_history", "attachments", "messages", "passages"]
    path.write_text("\n".join(json.dumps(r) for r in [records[0], *({"type": t, "row": row} for t in order
                                                                      for row in by_type.get(t, []))]) + "\n",
                    encoding="utf-8")
    return path, by_type


def kill_during_backup_restore(target: Target, tmp_path: Path, messages: int, passages: int) -> None:
    path, source = big_backup(tmp_path, messages, passages)
    watch = open_memory(target.settings(), start_embedder=False)
    watch.ensure_agent("default")  # a store in use: the restore adds an agent beside it
    proc = start(target, "import", str(path))
    kill_when(proc, lambda: watch.store.count("messages") > 0)

    m = open_memory(target.settings(), start_embedder=False)
    assert [a.name for a in m.list_agents()] == ["default"]  # the agent row is restored last: nothing is visible
    partial = {t: len(rows(m, t)) for t in ("messages", "passages")}
    assert 0 < partial["messages"] and partial["messages"] + partial["passages"] < messages + passages
    assert partial["messages"] % RESTORE_BATCH == 0 and partial["passages"] % RESTORE_BATCH == 0  # whole batches
    doctor = target.cli("doctor")
    assert doctor.returncode == 1 and "stray rows" in doctor.stdout and "tiermem import FILE` again" in doctor.stdout, (
        doctor.stdout + doctor.stderr)

    again = target.cli("import", str(path), "--json")
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
    assert sorted((r["key"], r["value"]) for r in history) == sorted((r["key"], r["value"]) for r in source["block_history"])
    assert {blk.label: blk.value for blk in m.blocks(big)} == {r["label"]: r["value"] for r in source["blocks"]}
    assert_chains_whole(m, big)
    assert m.block(big, "human").value.endswith("fact 4") and m.history(big, "notes", 10)[0].value == "second note"
    assert_doctor_healthy(target)
    third = target.cli("import", str(path), "--json")  # and once more: nothing is written twice
    assert third.returncode == 0, third.stderr
    assert not any(json.loads(third.stdout)["inserted"].values()), third.stdout
    print(f"backup restore killed with {partial} of {messages} messages + {passages} passages written (agent "
          f"invisible); re-run inserted {inserted['messages']} + {inserted['passages']}, 0 duplicates")


def test_kill_during_backup_restore(tmp_path: Path) -> None:
    kill_during_backup_restore(local_target(tmp_path), tmp_path, messages=3000, passages=1000)


def test_s3_kill_during_backup_restore(tmp_path: Path, s3_endpoint: str) -> None:  # noqa: F811
    kill_during_backup_restore(s3_target(tmp_path, s3_endpoint, "kill-restore"), tmp_path, messages=1500, passages=500)


# ---------------------------------------------------------------------------
# tiermem import DIR --format memfs, and tiermem sync DIR
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


def kill_during_memfs(target: Target, tmp_path: Path, files: int, command: str) -> None:
    """kill -9 ``tiermem import DIR --format memfs`` (or ``tiermem sync DIR``) after its first block: the
    visible blocks are whole files with their history, and a re-run creates only the rest."""
    root = tmp_path / "memfs"
    want = memfs_dir(root, files)
    args = ["import", str(root), "--format", "memfs"] if command == "import" else ["sync", str(root)]
    watch = open_memory(target.settings(), start_embedder=False)
    watch.ensure_agent("default")

    def landed() -> int:
        agent = next((a for a in watch.list_agents() if a.name == "mem"), None)
        return 0 if agent is None else sum(1 for blk in watch.blocks(agent.id) if blk.label in want)

    kill_when(start(target, *args, "--agent", "mem"), lambda: landed() > 0)

    m = open_memory(target.settings(), start_embedder=False)
    agent = m.get_agent("mem").id
    seen = {blk.label: blk for blk in m.blocks(agent) if blk.label in want}
    assert 0 < len(seen) < len(want)
    for label, blk in seen.items():  # each visible block is its whole file
        assert (blk.value, blk.limit, blk.description) == (*want[label], f"about {label}")
    assert_chains_whole(m, agent)
    assert_doctor_healthy(target)  # a half-done MemFS import is whole blocks: nothing to fix

    again = target.cli(*args, "--agent", "mem", "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    report = json.loads(again.stdout)
    if command == "import":
        assert sorted(report["blocks_created"]) == sorted(set(want) - set(seen))
        assert sorted(report["blocks_unchanged"]) == sorted(seen) and report["blocks_updated"] == []
    else:
        # files the killed sync wrote for the agent's other blocks are taken as they are, like every file
        assert report["conflicts"] == [] and set(want) <= set(report["to_store"]) <= set(want) | {"human", "persona"}
    m = open_memory(target.settings(), start_embedder=False)
    blocks = m.blocks(agent)
    labels = [blk.label for blk in blocks]
    assert len(labels) == len(set(labels))  # no label twice
    assert {blk.label: (blk.value, blk.limit) for blk in blocks if blk.label in want} == want
    for blk in blocks:
        if blk.label in seen:
            assert blk.id == seen[blk.label].id and blk.version == seen[blk.label].version  # not written again
    assert_chains_whole(m, agent)
    assert_doctor_healthy(target)
    third = target.cli(*args, "--agent", "mem", "--json")
    assert third.returncode == 0, third.stdout + third.stderr
    report = json.loads(third.stdout)
    if command == "import":
        assert report["blocks_created"] == [] and report["blocks_updated"] == []
    else:
        assert report["to_store"] == [] and report["to_files"] == [] and report["conflicts"] == []
    print(f"memfs {command} killed after {len(seen)} of {len(want)} files; re-run completed it, 0 duplicates")


@pytest.mark.parametrize("command", ["import", "sync"])
def test_kill_during_memfs(tmp_path: Path, command: str) -> None:
    kill_during_memfs(local_target(tmp_path), tmp_path, files=200, command=command)


def test_s3_kill_during_memfs_import(tmp_path: Path, s3_endpoint: str) -> None:  # noqa: F811
    kill_during_memfs(s3_target(tmp_path, s3_endpoint, "kill-memfs"), tmp_path, files=60, command="import")
