"""A failed read of the data directory reaches the caller (and the model) as a StoreReadError that says what
to do, never as LanceDB's generic error: real tables, removed or damaged under a running store."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tiermem.base.config import Settings
from tiermem.base.errors import StoreReadError
from tiermem.store import Filter, Store

from .conftest import serve_in_process, text_of

DIM = 8


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(str(tmp_path / "data"), embedding_model="hashing", embedding_dim=DIM)
    row = {
        "id": "p1",
        "agent_id": "a",
        "group_id": "p1",
        "chunk": 0,
        "content": "tea",
        "tags": ["x"],
        "text": "tea",
        "created_us": 0,
        "vector": [0.1] * DIM,
    }
    s.rows.add_rows("passages", [row])
    assert s.rows.count("passages") == 1 and s.search.vector_search(
        "passages", [0.1] * DIM, None, 5
    )  # read once while healthy
    return s


READS: dict[str, Callable[[Store], Any]] = {
    "count": lambda s: s.rows.count("passages"),
    "vector_search": lambda s: s.search.vector_search("passages", [0.1] * DIM, Filter(agent_id="a"), 5),
    "text_search": lambda s: s.search.text_search("passages", "tea", None, 5),
    "select": lambda s: s.rows.select("passages", None, limit=5),
    "distinct_tags": lambda s: s.rows.distinct_tags("a"),
    "messages": lambda s: s.rows.messages(Filter(agent_id="a", conversation_id="default")),
    "unembedded_marks": lambda s: s.rows.unembedded_marks("passages"),  # a cached small table (Connection.snapshot)
    "meta": lambda s: s.conn.meta(),
}


@pytest.mark.parametrize("name", list(READS))
def test_a_removed_table_is_a_store_read_error(store: Store, name: str) -> None:
    for table in ("passages", "messages", "agents", "meta"):
        shutil.rmtree(Path(store.uri) / f"{table}.lance")
    with pytest.raises(StoreReadError, match=r"^Part of the data directory .* is missing \(while reading ") as caught:
        READS[name](store)
    text = str(caught.value)
    assert "Nothing was changed" in text and "tiermem doctor" in text
    assert ".rs:" not in text  # Lance's Rust source location is not the reader's business
    assert isinstance(caught.value.__cause__, RuntimeError)  # the library's error is kept as the cause


def test_a_damaged_version_file_is_a_store_read_error(store: Store) -> None:
    versions = Path(store.uri) / "passages.lance" / "_versions"
    for f in versions.iterdir():
        f.write_bytes(b"not a lance manifest")
    with pytest.raises(StoreReadError, match="data directory") as caught:
        store.rows.count("passages")
    assert "Nothing was changed" in str(caught.value)


@pytest.mark.anyio
async def test_a_failed_read_reaches_the_model_as_a_tool_error_saying_what_to_do(settings: Settings) -> None:
    async with Client(serve_in_process(settings), cache=None) as c:
        r = await c.call_tool("archival_memory_insert", {"content": "Ada likes tea"})
        assert not r.is_error, text_of(r)
        shutil.rmtree(Path(settings.store_uri()) / "passages.lance")
        r = await c.call_tool("archival_memory_search", {"query": "tea"})
        assert r.is_error
        text = text_of(r)
        assert "Part of the data directory" in text and "is missing" in text and "tiermem doctor" in text


def test_an_exit_waits_for_the_background_upkeep(tmp_path: Path) -> None:
    """A short command whose writes started an upkeep exits after it, not while it is inside LanceDB (a daemon thread
    there during finalisation aborts the process): the upkeep's last step happens before the process is gone."""
    import subprocess
    import sys

    marker = tmp_path / "upkeep-finished"
    code = (
        "import time\nfrom pathlib import Path\nfrom tiermem.store import Store\n"
        f"s = Store({str(tmp_path / 'db')!r}, embedding_model='hashing-4', embedding_dim=4, optimize_every=1)\n"
        "def upkeep():\n"
        "    time.sleep(1.0)\n"
        "    s.indexes.optimize_in_background()\n"
        f"    Path({str(marker)!r}).write_text('done')\n"
        "s.conn.upkeep = upkeep\n"
        "s.conn.wrote(1)\n"  # the process ends right after starting it
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert marker.read_text() == "done"


CONFLICT = (
    "lance error: Retryable commit conflict for version 34: This Rewrite transaction was preempted by concurrent "
    "transaction Update at version 34. Please retry., /root/.cargo/registry/src/index.crates.io-1/lance-13.0.0/src/io/"
    "commit/conflict_resolver.rs:1288:34"
)


def test_an_optimize_that_loses_commit_conflicts_says_so_quietly_and_plainly(caplog: pytest.LogCaptureFixture) -> None:
    """A compaction that loses a commit conflict (a restore's own writes landed first) is tried again: DEBUG; put off
    once the tries run out: INFO in a background upkeep, WARNING for `tiermem optimize`; never Lance's Rust path.
    Another failure is a WARNING."""
    from tiermem.store.indexes import OPTIMIZE_TRIES, _log_failed_optimize

    caplog.set_level("DEBUG", logger="tiermem.store.indexes")
    for attempt in range(OPTIMIZE_TRIES):
        _log_failed_optimize("passages", attempt, RuntimeError(CONFLICT), background=True)
    _log_failed_optimize("passages", OPTIMIZE_TRIES - 1, RuntimeError(CONFLICT), background=False)
    _log_failed_optimize("passages", 0, OSError("No space left on device (os error 28)"), background=True)
    got = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in got] == ["DEBUG", "DEBUG", "INFO", "WARNING", "WARNING"], got
    assert got[2][1] == (
        "optimize passages put off: other commits to it won 3 tries in a row (nothing is lost); the next optimize or "
        "upkeep compacts it"
    )
    assert "No space left on device" in got[4][1]
    assert not any(".cargo" in message or ".rs:" in message for _, message in got), got
