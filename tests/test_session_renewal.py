"""Renewing the LanceDB session: LanceDB's index cache keeps entries of superseded table
versions, which only a new session drops. Renewal must not cost a write or a search its correctness, including
calls under way on the old connection while it happens."""

from __future__ import annotations

import threading
from pathlib import Path

from tiermem.base.config import load_settings
from tiermem.domain.factory import open_memory
from tiermem.domain.memory import Memory
from tiermem.store import Store


def _open(tmp_path: Path, **kw: int) -> tuple[Memory, Store, str]:
    memory = open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="hashing", **kw))
    assert memory.archive is not None
    return memory, memory.archive.store, memory.ensure_agent("default").id


def test_renewal_drops_the_superseded_cache_entries_and_keeps_every_row_findable(tmp_path: Path) -> None:
    memory, store, agent = _open(tmp_path, optimize_every=0)
    archive = memory.archive
    assert archive is not None
    for i in range(120):
        archive.log_messages(agent, [{"role": "user", "content": f"turn {i} about the orchard"}])
        archive.conversation_search(agent, f"orchard {i}")
    full = store.conn.cache_bytes()
    store.conn.renew_session()
    assert store.conn.renewals == 1
    emptied = store.conn.cache_bytes()
    assert emptied < full / 4, (full, emptied)  # every entry of the old session is gone with it
    # the next write and the next search, on the new connection, see everything written on the old one
    (last,) = archive.log_messages(agent, [{"role": "user", "content": "turn 120 about the quince"}])
    hits = archive.conversation_search(agent, "quince", limit=5)
    assert [h.id for h in hits.hits][:1] == [last.id]
    assert len(store.rows.all_rows("messages")) == 121


def test_writes_and_searches_under_way_during_renewals_lose_nothing(tmp_path: Path) -> None:
    memory, store, agent = _open(tmp_path, optimize_every=0)
    archive = memory.archive
    assert archive is not None
    errors: list[BaseException] = []
    logged: dict[int, list[str]] = {n: [] for n in range(3)}
    stop = threading.Event()

    def writer(n: int) -> None:
        try:
            for i in range(40):
                (msg,) = archive.log_messages(agent, [{"role": "user", "content": f"writer{n} line{i} plum{n}x{i}"}])
                logged[n].append(msg.id)
                # a logged turn is searchable by the next call, whichever session either runs on
                found = archive.conversation_search(agent, f"plum{n}x{i}", limit=3)
                assert msg.id in [h.id for h in found.hits], (n, i)
        except BaseException as exc:  # collected: the main thread fails the test with it
            errors.append(exc)

    def renewer() -> None:
        try:
            while not stop.is_set():
                store.conn.renew_session()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    churn = threading.Thread(target=renewer)
    churn.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    churn.join()
    assert not errors, errors[0]
    assert store.conn.renewals >= 3  # renewals happened while the writers ran
    stored = {r["id"] for r in store.rows.all_rows("messages")}
    assert all(set(ids) <= stored for ids in logged.values())
    assert len(stored) == 120


def test_background_optimize_renews_after_the_configured_writes(tmp_path: Path) -> None:
    memory, store, agent = _open(tmp_path, optimize_every=0, session_renew_writes=50)
    archive = memory.archive
    assert archive is not None
    for i in range(30):
        archive.log_messages(agent, [{"role": "user", "content": f"early {i}"}])
    assert store.indexes.optimize().get("session") is None  # 30 writes: not due yet
    for i in range(30):
        archive.log_messages(agent, [{"role": "user", "content": f"late {i}"}])
    assert store.indexes.optimize()["session"] == "renewed"
    assert store.conn.renewals == 1
    assert store.indexes.optimize().get("session") is None  # the count starts again
    never, never_store, never_agent = _open(tmp_path / "never", optimize_every=0, session_renew_writes=0)
    assert never.archive is not None
    for i in range(60):
        never.archive.log_messages(never_agent, [{"role": "user", "content": f"turn {i}"}])
    assert never_store.indexes.optimize().get("session") is None and never_store.conn.renewals == 0
