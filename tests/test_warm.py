"""A server prepares its agent's recall search in the background (``Memory.warm``): the sitting index is built once the
archive is open, so the first ``conversation_search`` or auto-recall hook does not pay for it; a search arriving
meanwhile waits for that build (never reads a half-built index); an exit never waits on an archive still opening."""

from __future__ import annotations

import json
import logging
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tiermem.base.background import Opening
from tiermem.base.config import Settings, load_settings
from tiermem.domain.archive import Archive
from tiermem.domain.factory import open_memory
from tiermem.domain.memory import Memory
from tiermem.store import Store

from .conftest import memory_over
from .test_transports import stdio_server

T0 = datetime(2023, 5, 1, 10, tzinfo=UTC)
TOPICS = (
    "violin lessons and a recital",
    "the pride parade downtown",
    "adopting a grey cat",
    "a hiking trip",
    "baking sourdough bread",
    "a job interview at the bank",
)
QUERIES = ("How did the recital go?", "What was the parade like?", "What is the cat called?")


def log_sittings(memory: Memory, agent: str, sittings: int, turns: int = 10) -> None:
    """``sittings`` sittings of ``turns`` turns each (a minute apart; sittings a day apart), in two conversations."""
    rows = [
        {
            "role": "user" if t % 2 else "assistant",
            "conversation_id": f"c{s % 2}",
            "content": f"Turn {t} about {TOPICS[s % len(TOPICS)]}, sitting {s}.",
            "timestamp": (T0 + timedelta(days=s, minutes=t)).isoformat(),
        }
        for s in range(sittings)
        for t in range(turns)
    ]
    for i in range(0, len(rows), 500):
        memory.archive.log_messages(agent, rows[i : i + 500])


def builds(caplog: pytest.LogCaptureFixture, agent: str) -> list[logging.LogRecord]:
    """The builds of ``agent``'s sitting index logged meanwhile (only its own: a server an earlier test started in
    this process may still warm its agent, and its log lands in the same capture)."""
    return [r for r in caplog.records if r.getMessage().startswith(f"built the sittings of agent {agent} ")]


def answers(memory: Memory, agent: str, query: str) -> list[tuple[str, float]]:
    return [(h.id, round(h.relevance, 9)) for h in memory.archive.conversation_search(agent, query, limit=10).hits]


def test_a_warmed_index_is_the_one_the_first_search_uses(memory: Memory, caplog: pytest.LogCaptureFixture) -> None:
    agent = memory.ensure_agent("warm").id
    log_sittings(memory, agent, 12)
    fresh = memory_over(memory.archive.store, core=memory.core)  # as the next process on this store
    with caplog.at_level(logging.DEBUG, logger="tiermem.domain"):
        fresh.warm(agent)
        fresh.settle(60)  # waits for the warm
        assert answers(fresh, agent, QUERIES[0])
    built = builds(caplog, agent)
    assert [r.threadName for r in built] == ["tiermem-warm"]  # the search found the index built
    ready = [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"sitting index of agent {agent} ")]
    assert ready == [f"sitting index of agent {agent} ready: 120 turns in 12 sittings ({ready[0].split('(')[1]}"]


def test_searches_arriving_while_the_index_is_built_get_the_whole_of_it(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    # no background upkeep (it would retrain the vector index between the searches and the expected answers)
    store = Store(settings.store_uri(), embedding_model="hashing-384", embedding_dim=384, optimize_every=0)
    memory = memory_over(store)
    agent = memory.ensure_agent("busy").id
    log_sittings(memory, agent, 300)  # 3,000 turns: a build takes a while (~0.1 s)
    expected = {q: answers(memory_over(store, core=memory.core), agent, q) for q in QUERIES}
    fresh = memory_over(store, core=memory.core)
    got: dict[int, list[tuple[str, float]]] = {}
    start = threading.Barrier(9)

    def search(n: int) -> None:
        start.wait()
        got[n] = answers(fresh, agent, QUERIES[n % 3])

    def warm() -> None:
        start.wait()
        fresh.archive.warm_sittings(agent)

    with caplog.at_level(logging.DEBUG, logger="tiermem.domain.search.sittings"):
        fresh.warm(agent)  # the server's background warm, and three more at once, and six searches
        threads = [threading.Thread(target=warm) for _ in range(3)] + [
            threading.Thread(target=search, args=(n,)) for n in range(6)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        fresh.settle(60)
    assert {n: got[n] for n in range(6)} == {n: expected[QUERIES[n % 3]] for n in range(6)}
    assert (
        len(builds(caplog, agent)) == 1
    )  # built once, by the warm or by the first search; everyone else waited for it


def test_settling_while_the_archive_still_opens_neither_waits_for_it_nor_reads_after(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    agent = memory.ensure_agent("late").id
    log_sittings(memory, agent, 2)
    gate = threading.Event()

    def slow_archive() -> Archive:
        gate.wait(60)
        return memory.archive

    opening = Opening(slow_archive, thread_name="test-slow-archive")
    late = Memory(opening, core=memory.core)
    opening.start()
    before = set(threading.enumerate())  # (other tests' servers may still wait for an archive nobody started)
    with caplog.at_level(logging.DEBUG, logger="tiermem.domain"):
        late.warm(agent)
        late.settle(0.3)  # the archive is not open: the process may exit, the warm must not start reading later
        gate.set()
        assert opening.get() is memory.archive
        late.warm(agent)  # after settle: nothing starts
        late.settle(5)
    assert builds(caplog, agent) == [] and not [r for r in caplog.records if f"agent {agent} ready" in r.getMessage()]
    assert not [t for t in set(threading.enumerate()) - before if t.name == "tiermem-warm" and t.is_alive()]


def test_a_stdio_server_warms_its_agent_and_exits_cleanly(tmp_path: Path) -> None:
    """The real server over a store with turns: its log says the agent's sitting index is ready before any search,
    and closing stdin then ends it with status 0 and no traceback."""
    settings = load_settings(data_dir=tmp_path / "data", embedding_model="hashing")
    stored = open_memory(settings)
    agent = stored.ensure_agent("default").id
    log_sittings(stored, agent, 20)
    stored.settle(10)
    proc = stdio_server(tmp_path)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            }
        )
        + "\n"
    )
    proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["id"] == 1
    seen: list[str] = []
    ready = threading.Event()

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:  # the memory opens after the handshake; the warm follows the archive
            seen.append(line)
            if "sitting index of agent" in line:
                ready.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    ready.wait(120)
    proc.stdin.close()
    status = proc.wait(timeout=120)
    reader.join(30)
    stderr = "".join(seen)
    assert f"sitting index of agent {agent} ready: 200 turns in 20 sittings" in stderr, stderr
    assert status == 0 and "Traceback" not in stderr, stderr


def _thread_cpu_seconds(thread: threading.Thread) -> float:
    """CPU time a live thread of this process has used (Linux: /proc/self/task/<tid>/schedstat, nanoseconds)."""
    return int(Path(f"/proc/self/task/{thread.native_id}/schedstat").read_text().split()[0]) / 1e9


def test_a_warm_waits_quietly_for_an_archive_not_yet_started(memory: Memory, caplog: pytest.LogCaptureFixture) -> None:
    """A server's archive starts opening only once its client has the handshake's answer
    (``open_memory(archive_now=False)``): the warm, started when the core opened, sleeps until then instead of
    spinning (a spinning thread would compete with the ``initialize`` answer), then builds the index once it opens."""
    agent = memory.ensure_agent("later").id
    log_sittings(memory, agent, 2)
    opening = Opening(lambda: memory.archive, thread_name="test-later-archive")
    later = Memory(opening, core=memory.core)
    before = set(threading.enumerate())  # (other tests' servers may still wait for an archive nobody started)
    with caplog.at_level(logging.DEBUG, logger="tiermem.domain"):
        later.warm(agent)
        (warm,) = [t for t in set(threading.enumerate()) - before if t.name == "tiermem-warm"]
        threading.Event().wait(2.0)  # the archive not started: the warm has nothing to do meanwhile
        idle_cpu = _thread_cpu_seconds(warm)
        assert not opening.started and warm.is_alive()
        later.open_archive()
        warm.join(60)
        later.settle(10)
    assert idle_cpu < 0.1, idle_cpu  # a few wake-ups, not two seconds of polling
    assert [r.threadName for r in builds(caplog, agent)] == ["tiermem-warm"]  # and it built the index once it could
