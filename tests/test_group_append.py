"""``GroupAppend``: one process's appends to a table go one commit at a time, each carrying the rows of every call
that waited meanwhile; a failure reaches exactly the callers whose rows failed."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tiermem.base.errors import StoreBusyError, StoreWriteError
from tiermem.store import Store
from tiermem.store.appends import GroupAppend


def test_calls_arriving_during_a_commit_go_together_in_the_next() -> None:
    batches: list[list[str]] = []
    first_started, release = threading.Event(), threading.Event()

    def commit(rows: list[dict[str, Any]]) -> None:
        if not batches:
            first_started.set()
            release.wait(10)
        batches.append([r["id"] for r in rows])

    group = GroupAppend(commit)
    first = threading.Thread(target=group.append, args=([{"id": "a"}],))
    first.start()
    assert first_started.wait(10)
    others = [threading.Thread(target=group.append, args=([{"id": f"b{i}"}, {"id": f"c{i}"}],)) for i in range(5)]
    for t in others:
        t.start()
    while len(group._queue) < 5:  # all five wait behind the first commit
        time.sleep(0.01)
    release.set()
    for t in [first, *others]:
        t.join(10)
    assert batches[0] == ["a"]
    assert len(batches) == 2 and sorted(batches[1]) == sorted(f"{x}{i}" for i in range(5) for x in "bc")


def queue_behind_a_commit(
    group: GroupAppend,
    first_started: threading.Event,
    release: threading.Event,
    first: threading.Thread,
    later: list[threading.Thread],
) -> None:
    """Run ``first`` until its commit has started (and waits for ``release``), start ``later``, wait until they all
    queue behind that commit, release it, and wait for every thread."""
    first.start()
    assert first_started.wait(10)
    for t in later:
        t.start()
    while len(group._queue) < len(later):
        time.sleep(0.01)
    release.set()
    for t in [first, *later]:
        t.join(10)


def test_a_failed_group_is_committed_caller_by_caller_so_only_the_bad_rows_fail() -> None:
    committed: list[str] = []
    first_started, release = threading.Event(), threading.Event()

    def commit(rows: list[dict[str, Any]]) -> None:
        if not committed and not first_started.is_set():
            first_started.set()
            release.wait(10)
        if any(r["id"] == "bad" for r in rows):
            raise StoreWriteError("Writing rows failed: a bad row")
        committed.extend(r["id"] for r in rows)

    group = GroupAppend(commit)
    outcome: dict[str, str] = {}

    def call(name: str, rows: list[dict[str, Any]]) -> None:
        try:
            group.append(rows)
            outcome[name] = "ok"
        except StoreWriteError as exc:
            outcome[name] = str(exc)

    queue_behind_a_commit(
        group,
        first_started,
        release,
        threading.Thread(target=call, args=("first", [{"id": "x"}])),
        [
            threading.Thread(target=call, args=(n, rows))
            for n, rows in (("good", [{"id": "g1"}, {"id": "g2"}]), ("bad", [{"id": "bad"}]), ("fine", [{"id": "f"}]))
        ],
    )
    assert outcome == {"first": "ok", "good": "ok", "bad": "Writing rows failed: a bad row", "fine": "ok"}
    assert sorted(committed) == ["f", "g1", "g2", "x"]
    assert not group._busy and group._queue == []  # the turn was given back


def test_other_writers_outlasting_the_retries_fail_the_whole_group_at_once() -> None:
    calls = 0

    def commit(rows: list[dict[str, Any]]) -> None:
        nonlocal calls
        calls += 1
        raise StoreBusyError("other writers kept committing")

    group = GroupAppend(commit)
    with pytest.raises(StoreBusyError):
        group.append([{"id": "a"}])
    assert calls == 1  # not tried again caller by caller: they would only meet the same writers
    with pytest.raises(StoreBusyError):
        group.append([{"id": "b"}])  # the turn was given back after the failure


def test_threads_appending_to_one_table_make_fewer_commits_than_calls(tmp_path: Path) -> None:
    """Real LanceDB: 8 threads of one process appending to the messages table at once; every row stored once, in
    fewer table versions than calls (calls that waited were committed together)."""
    store = Store(str(tmp_path / "db"), embedding_model="hashing-384", embedding_dim=384, optimize_every=0)
    before = store.conn.version("messages")
    start = threading.Barrier(8)

    def row(t: int, i: int) -> dict[str, Any]:
        return {
            "id": f"m{t}-{i}",
            "agent_id": "agent",
            "conversation_id": "default",
            "seq": i,
            "role": "user",
            "content": f"turn {t}-{i}",
            "payload": "",
            "text": f"turn {t}-{i}",
            "created_us": i,
            "vector": [0.5] * 384,
        }

    def write(t: int) -> None:
        start.wait()
        for i in range(10):
            store.rows.add_rows("messages", [row(t, i)])

    threads = [threading.Thread(target=write, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [r["id"] for r in store.rows.all_rows("messages")]
    assert sorted(ids) == sorted(f"m{t}-{i}" for t in range(8) for i in range(10))
    assert store.conn.version("messages") - before < 80


def test_a_commit_interrupted_mid_way_counts_for_no_caller_of_its_group() -> None:
    """An interrupt (not an error) inside the commit of a group reaches every caller of it: none returns as stored."""
    first_started, release = threading.Event(), threading.Event()
    calls = 0

    def commit(rows: list[dict[str, Any]]) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            first_started.set()
            release.wait(10)
            return
        raise KeyboardInterrupt

    group = GroupAppend(commit)
    outcome: dict[str, str] = {}

    def call(name: str) -> None:
        try:
            group.append([{"id": name}])
            outcome[name] = "stored"
        except KeyboardInterrupt:
            outcome[name] = "interrupted"

    queue_behind_a_commit(
        group,
        first_started,
        release,
        threading.Thread(target=call, args=("first",)),
        [threading.Thread(target=call, args=(n,)) for n in ("a", "b")],
    )
    assert outcome == {"first": "stored", "a": "interrupted", "b": "interrupted"}
    assert not group._busy
