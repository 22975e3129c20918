"""Search-paced upkeep (``Connection.searched``): every commit leaves a small fragment each search of its table reads
until the next compaction, so the background upkeep starts once the search time lost to this process's fragments
reaches what its last upkeep took, well before ``optimize_every`` rows (real LanceDB in a temp dir)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tiermem.store import Store
from tiermem.store.connection import FRAGMENT_LEG_MS, MIN_TAIL_COMMITS
from tiermem.store.query import Filter

from .conftest import memory_over


def turn(n: int, agent: str) -> dict[str, Any]:
    return {
        "id": f"m{n}",
        "agent_id": agent,
        "conversation_id": "default",
        "seq": n,
        "role": "user",
        "content": f"turn {n} about the river",
        "payload": "",
        "text": f"turn {n} about the river",
        "created_us": n,
        "vector": [0.5 + n / 1000] * 384,
    }


def store_at(tmp_path: Path, **options: Any) -> tuple[Store, list[dict[str, str]]]:
    """A store whose upkeep is its real background optimize, with the reports of the runs it made."""
    store = Store(str(tmp_path / "db"), embedding_model="hashing-384", embedding_dim=384, **options)
    runs: list[dict[str, str]] = []

    def upkeep() -> dict[str, str]:
        report = store.indexes.optimize_in_background()
        runs.append(report)
        return report

    store.conn.upkeep = upkeep
    return store, runs


def search(store: Store, agent: str) -> None:
    store.search.search_legs("messages", "river", [0.5] * 384, Filter(agent_id=agent), 10)


def test_searches_start_the_upkeep_once_the_time_lost_to_fragments_reaches_the_last_upkeeps(tmp_path: Path) -> None:
    store, runs = store_at(tmp_path)  # optimize_every 200: rows alone would not start it in this test
    memory_over(store)  # the full-text index exists, as in a server
    conn = store.conn
    for n in range(10):  # ten commits: ten one-row fragments
        store.rows.add_rows("messages", [turn(n, "a")])
    assert conn.tail == {"messages": 10}
    conn.upkeep_ms = 9 * 2 * FRAGMENT_LEG_MS * 10 + 0.01  # the last upkeep took as long as nine searches lose
    for _ in range(9):
        search(store, "a")
    assert conn.paced == 0 and not runs
    search(store, "a")  # the tenth search's loss makes the debt exceed it
    assert conn.paced == 1
    conn.finish_upkeep()
    assert len(runs) == 1 and "messages" in runs[0]
    assert conn.tail == {} and conn.lost_ms == 0.0
    assert store.indexes.index_health()["messages"]["fts_unindexed"] == 0  # the fragments were folded in
    assert conn.upkeep_ms > 0.01  # timed from the run that was made


def test_a_short_tail_or_no_upkeep_never_starts_one(tmp_path: Path) -> None:
    store, runs = store_at(tmp_path)
    memory_over(store)
    for n in range(MIN_TAIL_COMMITS - 1):
        store.rows.add_rows("messages", [turn(n, "a")])
    store.conn.upkeep_ms = 0.0
    for _ in range(20):
        search(store, "a")
    assert store.conn.paced == 0 and not runs  # too few fragments to be worth a compaction

    off, off_runs = store_at(tmp_path / "off", optimize_every=0)  # 0: no background upkeep at all
    memory_over(off)
    for n in range(MIN_TAIL_COMMITS + 5):
        off.rows.add_rows("messages", [turn(n, "a")])
    off.conn.upkeep_ms = 0.0
    for _ in range(20):
        search(off, "a")
    assert off.conn.paced == 0 and not off_runs


def test_a_skipped_upkeep_keeps_the_last_timing(tmp_path: Path) -> None:
    """A run skipped because another is under way took no time worth learning from: the next stays as far apart."""
    store, runs = store_at(tmp_path)
    memory_over(store)
    store.conn.upkeep_ms = 123.0
    with store.indexes._optimizing:  # an upkeep of this process is under way
        store.conn._run_upkeep(store.conn.upkeep)  # type: ignore[arg-type]
    assert runs == [{"skipped": "already optimizing in this process"}]
    assert store.conn.upkeep_ms == 123.0


def test_a_background_upkeep_that_fails_is_logged_not_raised_in_its_thread(tmp_path: Path, caplog: Any) -> None:
    """The upkeep runs in its own thread, where an error reaches no caller: a store error (a purge other writers kept
    from finishing) is one warning line and keeps the last timing; anything else is logged with its traceback."""
    import logging

    from tiermem.base.errors import PurgeUnfinishedError

    store, _ = store_at(tmp_path)
    memory_over(store)
    store.conn.upkeep_ms = 123.0

    def unfinished() -> object:
        raise PurgeUnfinishedError("Purging the forgotten rows of passages did not finish")

    def broken() -> object:
        raise ValueError("a defect")

    with caplog.at_level(logging.WARNING, logger="tiermem.store.connection"):
        store.conn._run_upkeep(unfinished)
        store.conn._run_upkeep(broken)
    purge, defect = caplog.records
    assert "did not finish; the next one tries again: Purging" in purge.getMessage() and purge.exc_info is None
    assert defect.exc_info is not None and defect.exc_info[0] is ValueError
    assert store.conn.upkeep_ms == 123.0
