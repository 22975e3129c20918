"""Another process's lock on the core-state database is waited for, never taken for a read-only disk."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from tiermem.base.errors import StoreError
from tiermem.base.records import Agent, now
from tiermem.core.sqlite import SqliteCore


def _hold_exclusive(path: Path, seconds: float, held: threading.Event) -> threading.Thread:
    """Another connection holding an EXCLUSIVE lock on ``path`` for ``seconds`` (readers and writers wait)."""

    def hold() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode = DELETE")  # rollback journal: EXCLUSIVE keeps readers out as well
        conn.execute("BEGIN EXCLUSIVE")
        held.set()
        threading.Event().wait(seconds)
        conn.execute("COMMIT")
        conn.close()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert held.wait(10)
    return thread


def test_a_lock_outlasting_the_timeout_is_a_clear_error_not_a_read_only_open(tmp_path: Path) -> None:
    path = tmp_path / "core.sqlite3"
    SqliteCore(path).close()
    held = threading.Event()
    thread = _hold_exclusive(path, 2.0, held)
    with pytest.raises(StoreError, match="locked"):
        SqliteCore(path, busy_timeout=0.3)
    thread.join()
    core = SqliteCore(path)  # the file is fine once the lock is gone: writable, nothing was changed
    core.insert_agent(Agent(id="agent-after", name="after", system="", created_at=now(), updated_at=now()))
    assert core.get_agent("agent-after").name == "after"
    core.close()


def test_a_lock_released_within_the_timeout_is_waited_for_and_the_store_is_writable(tmp_path: Path) -> None:
    path = tmp_path / "core.sqlite3"
    SqliteCore(path).close()
    held = threading.Event()
    thread = _hold_exclusive(path, 0.5, held)
    core = SqliteCore(path, busy_timeout=10)
    thread.join()
    # a read-only open would refuse this write
    core.insert_agent(Agent(id="agent-w", name="writable", system="", created_at=now(), updated_at=now()))
    assert core.get_agent("agent-w").name == "writable"
    core.close()
