"""Use: search hits, opened blocks and files and auto-recalled memories counted off the request path, merged across
processes, hot/warm/cold, forgotten with the memory, and shown by `tiermem stats`."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from tiermem.base.config import Settings, load_settings
from tiermem.cli.main import main
from tiermem.core.uses import DAY_US, USES_FILE, SqliteUses, Use, merged
from tiermem.domain.factory import open_memory
from tiermem.domain.file_views import OpenRequest
from tiermem.domain.forgetting import Target, forget
from tiermem.domain.memory import Memory
from tiermem.domain.uses import Rules, UseCounter
from tiermem.process.hookserver import HookListener
from tiermem.server.runtime import MemoryHandle

FACTS = ["Ada drinks green tea every morning.", "Bob keeps three dogs.", "The office moved to Lyon in May."]


def _memory(settings: Settings) -> tuple[Memory, str, list[str]]:
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    ids = [memory.archival_insert(agent, fact, None).stored[0] for fact in FACTS]
    return memory, agent, ids


def _stored(settings: Settings) -> dict[str, Use]:
    """What the records file holds (what another process would read)."""
    store = SqliteUses(settings.resolved_data_dir() / USES_FILE, Rules().half_life_us)
    try:
        return {u.id: u for u in store.read()}
    finally:
        store.close()


def _search(memory: Memory, agent: str, query: str, top_k: int = 2) -> list[str]:
    result = memory.archival_search(
        agent, query, tags=None, tag_match_mode="any", top_k=top_k, start_datetime=None, end_datetime=None
    )
    return [h.id for h in result.hits]


def test_a_search_counts_each_hit_once_flushed_and_writes_nothing_on_its_path(settings: Settings) -> None:
    memory, agent, _ids = _memory(settings)
    conn = memory.archive.store.conn
    before = (conn.version("passages"), conn.version("messages"))
    hits = _search(memory, agent, "green tea")
    assert hits
    assert (conn.version("passages"), conn.version("messages")) == before  # reads stay reads
    assert not (settings.resolved_data_dir() / USES_FILE).exists()  # nothing written yet: counted in the process
    assert {i: u.count for i, u in memory.uses.records(hits).items()} == dict.fromkeys(hits, 1)  # seen at once here
    assert memory.uses.flush() == len(hits)
    stored = _stored(settings)
    assert {i: (u.count, u.kind, u.agent_id) for i, u in stored.items()} == {i: (1, "passage", agent) for i in hits}
    _search(memory, agent, "green tea")
    memory.uses.flush()
    assert _stored(settings)[hits[0]].count == 2
    assert (conn.version("passages"), conn.version("messages")) == before


def test_recall_hits_count_as_messages(settings: Settings) -> None:
    memory, agent, _ = _memory(settings)
    logged = memory.conversation_log(agent, [{"role": "user", "content": "I adopted a cat called Miso."}]).stored
    result = memory.conversation_search(agent, "cat Miso", roles=None, limit=3, start_date=None, end_date=None)
    assert logged[0].id in [h.id for h in result.hits]
    memory.uses.flush()
    assert _stored(settings)[logged[0].id].kind == "message"


def test_opening_a_block_or_a_file_counts(settings: Settings) -> None:
    memory, agent, _ = _memory(settings)
    block = memory.open_block(agent, "human")
    memory.files.create_folder("docs")
    memory.files.upload_many("docs", [("guide.md", b"# Guide\n\nStep one.\n", "")])
    memory.files.attach(agent, "docs")
    memory.open_files(agent, [OpenRequest("docs/guide.md")])
    file_id = memory.files.state(agent).files[0].file_id
    memory.uses.close()
    stored = _stored(settings)
    assert (stored[block.id].kind, stored[block.id].count) == ("block", 1)
    assert (stored[file_id].kind, stored[file_id].count) == ("file", 1)
    memory.block(agent, "human")  # reading a block for other reasons (rendering, edits) is no use
    memory.uses.flush()
    assert _stored(settings)[block.id].count == 1


def test_an_auto_recalled_memory_counts_once_a_prompt_and_only_when_shown(tmp_path: Path) -> None:
    """The hook server counts the memories a prompt was shown when it logs the prompt: those its room
    (``auto_recall_max_chars``) left out, counted only in the note, are not used; a hook fired again for the same
    prompt (the same ``prompt_id``) is answered again but logs nothing and counts nothing."""
    settings = load_settings(
        data_dir=tmp_path / "data",
        embedding_model="hashing",
        auto_recall_threshold=0.0,
        auto_recall_limit=5,
        auto_recall_max_chars=1200,
    )
    memory = open_memory(settings)
    agent = memory.ensure_agent(settings.agent).id
    ids = [
        memory.archival_insert(agent, f"My cat Felix number {i} likes " + "tuna and salmon " * 25, None).stored[0]
        for i in range(5)
    ]
    hl = HookListener(MemoryHandle(lambda: (memory, agent)), settings, [])
    request = {
        "key": hl.key,
        "event": "UserPromptSubmit",
        "input": {"session_id": "s1", "prompt_id": "q1", "prompt": "What does my cat Felix like?"},
    }
    contexts = []
    for _ in range(2):  # the hook fired twice for one prompt
        answer, then = hl.answer(request)
        assert then is not None
        then()
        contexts.append(answer["context"])
    assert contexts[0] == contexts[1] and "more not shown" in contexts[0]
    shown = {i for i in ids if f'id="{i}"' in contexts[0]}
    assert 0 < len(shown) < len(ids)
    memory.uses.close()
    stored = _stored(settings)
    assert set(stored) == shown and all(u.count == 1 for u in stored.values()), stored


def test_merging_is_exact_in_any_order() -> None:
    h = 10 * DAY_US
    a, b, c = (Use("m", "passage", "ag", 1, t * DAY_US, 1.0) for t in (0, 3, 20))
    left, right = merged(merged(a, b, h), c, h), merged(a, merged(c, b, h), h)
    assert left.count == right.count == 3 and left.last_us == right.last_us == 20 * DAY_US
    assert left.heat == pytest.approx(right.heat) == pytest.approx(1 + 0.5**2 + 0.5**1.7)


def test_two_processes_flushing_into_one_data_dir_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / USES_FILE
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from tiermem.core.uses import SqliteUses
        from tiermem.domain.uses import Rules, UseCounter
        counter = UseCounter(SqliteUses(Path({str(path)!r}), Rules().half_life_us), flush_seconds=0)
        for n in range(150):
            counter.note("passage", "agent", [f"m{{i}}" for i in range(10)])
            if n % 3 == 0:
                counter.flush()
        counter.close()
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", script]) for _ in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    store = SqliteUses(path, Rules().half_life_us)
    found = {u.id: u for u in store.read()}
    store.close()
    assert {i: u.count for i, u in found.items()} == {f"m{i}": 300 for i in range(10)}
    assert all(u.heat == pytest.approx(300, rel=1e-3) for u in found.values())  # uses seconds apart barely decay


def test_temperature_by_how_recently_and_how_often() -> None:
    rules = Rules(half_life_days=14, hot=2.5, warm=0.5)
    day = DAY_US
    now = 100 * day

    def used(*days_ago: float) -> Use:
        use: Use | None = None
        for d in sorted(days_ago, reverse=True):
            one = Use("m", "passage", "a", 1, int(now - d * day), 1.0)
            use = one if use is None else merged(use, one, rules.half_life_us)
        assert use is not None
        return use

    assert rules.temperature(None, now) == "cold"  # never used
    assert rules.temperature(used(0, 1, 2), now) == "hot"  # three uses within three days
    assert rules.temperature(used(0), now) == "warm"  # one use today
    assert rules.temperature(used(13), now) == "warm"  # one use within the half-life
    assert rules.temperature(used(30), now) == "cold"  # one use a month ago
    assert rules.temperature(used(40, 41, 42), now) == "cold"  # often, but long ago
    assert rules.temperature(used(*range(0, 100, 10)), now) == "hot"  # a steady use every ten days
    assert rules.score(used(14), now) == pytest.approx(0.5)


def test_forgetting_removes_the_use_record(settings: Settings) -> None:
    memory, agent, ids = _memory(settings)
    logged = memory.conversation_log(agent, [{"role": "user", "content": "My locker code is blue."}]).stored[0]
    memory.uses.note("passage", agent, ids)
    memory.uses.note("message", agent, [logged.id])
    memory.uses.flush()
    forget(memory, Target("passage", agent, ids[0]))
    forget(memory, Target("message", agent, logged.id))
    memory.archival_delete(agent, ids[1])
    assert set(_stored(settings)) == {ids[2]}
    memory.uses.note("passage", agent, [ids[2]])  # not flushed yet: dropped from the batch too
    forget(memory, Target("agent", agent))
    memory.uses.flush()
    assert _stored(settings) == {}


def test_deleting_files_or_their_folder_removes_their_use_records(settings: Settings) -> None:
    memory, agent, _ = _memory(settings)
    for folder in ("docs", "notes"):
        memory.files.create_folder(folder)
        memory.files.upload_many(folder, [("a.md", b"# A\n\nalpha\n", ""), ("b.md", b"# B\n\nbeta\n", "")])
        memory.files.attach(agent, folder)
    memory.open_files(agent, [OpenRequest(f"{f}/{n}") for f in ("docs", "notes") for n in ("a.md", "b.md")])
    memory.uses.flush()
    ids = {v.name: v.file_id for v in memory.files.state(agent).files}
    assert set(_stored(settings)) >= set(ids.values()) and len(ids) == 4, ids
    memory.files.delete_files("docs", ["a.md"])
    memory.files.delete_folder("notes")
    assert {i for i, u in _stored(settings).items() if u.kind == "file"} == {ids["docs/b.md"]}


def test_file_search_hits_count_each_file_once_a_call(settings: Settings) -> None:
    """grep_files and semantic_search_files count each file they find as one use, as a search hit and open_files do
    (a file matched on many lines or in many chunks: once a call); a file not found is not counted."""
    memory, agent, _ = _memory(settings)
    memory.files.create_folder("docs")
    yak = "The yak manual: yaks are hairy.\nA yak eats grass.\nYaks live high.\n"
    memory.files.upload_many("docs", [("yak.txt", yak.encode(), ""), ("owl.txt", b"Owls hunt at night.\n", "")])
    memory.files.attach(agent, "docs")
    ids = {v.name: v.file_id for v in memory.files.state(agent).files}
    assert "docs/yak.txt" in memory.grep_files(agent, "(?i)yak", None, 0, None)
    assert {i: u.count for i, u in memory.uses.records(ids.values()).items()} == {ids["docs/yak.txt"]: 1}
    assert "docs/yak.txt" in memory.semantic_search_files(agent, "yak hairy grass", 5)
    counts = {i: u.count for i, u in memory.uses.records(ids.values()).items()}
    assert counts[ids["docs/yak.txt"]] == 2 and counts.get(ids["docs/owl.txt"], 0) <= 1, counts
    memory.uses.close()


def test_a_flush_keeps_no_record_of_a_memory_another_process_forgot(settings: Settings) -> None:
    """The server counts a hit; the CLI (another process: another Memory here) forgets the passage before the server
    flushes. The flush must not write the forgotten memory's record back."""
    server, agent, ids = _memory(settings)
    server.uses.note("passage", agent, ids[:2])
    cli = open_memory(settings)
    forget(cli, Target("passage", agent, ids[0]))
    cli.uses.close()
    assert server.uses.flush() == 1
    assert set(_stored(settings)) == {ids[1]}


def test_stats_count_and_show_only_memories_that_exist(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    """A record whose memory is gone (written back by a process that raced the forgetting) is neither counted nor
    listed."""
    memory, agent, ids = _memory(settings)
    memory.uses.note("passage", agent, ids)
    memory.uses.close()
    store = SqliteUses(settings.resolved_data_dir() / USES_FILE, Rules().half_life_us)
    forget(memory, Target("passage", agent, ids[0]))
    at = _stored(settings)[ids[1]].last_us
    store.add([Use(ids[0], "passage", agent, 1, at, 1.0), Use("gone-message", "message", agent, 1, at, 1.0)])
    store.close()
    assert {ids[0], "gone-message"} <= set(_stored(settings))
    argv = ["--data-dir", str(settings.resolved_data_dir()), "--embedding-model", "hashing", "stats", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["counts"]["passage"] == {"hot": 0, "warm": 2, "cold": 0, "total": 2}
    assert out["counts"]["message"] == {"hot": 0, "warm": 0, "cold": 0, "total": 0}
    shown = {u["id"] for u in out["hottest"] + out["coldest"]}
    assert shown == set(ids[1:])


def test_stats_shows_temperatures_hottest_and_coldest(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    memory, agent, ids = _memory(settings)
    for _ in range(3):
        memory.uses.note("passage", agent, [ids[0]])
    memory.uses.note("passage", agent, [ids[1]])
    memory.uses.close()
    argv = ["--data-dir", str(settings.resolved_data_dir()), "--embedding-model", "hashing", "stats"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["counts"]["passage"] == {"hot": 1, "warm": 1, "cold": 1, "total": 3}
    assert [u["id"] for u in out["hottest"]] == [ids[0], ids[1]]
    assert out["hottest"][0]["uses"] == 3 and out["hottest"][0]["preview"] == FACTS[0]
    assert out["coldest"][0] == {**out["coldest"][0], "id": ids[2], "uses": 0, "temperature": "cold"}
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "passage" in text and "hottest:" in text and FACTS[2] in text


def test_a_failed_flush_keeps_its_batch(tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("")
    counter = UseCounter(SqliteUses(blocked / USES_FILE, Rules().half_life_us), flush_seconds=0)
    counter.note("passage", "a", ["m1"])
    assert counter.flush() == 0  # the file cannot be opened: logged, kept
    counter.store = SqliteUses(tmp_path / USES_FILE, Rules().half_life_us)
    assert counter.flush() == 1


def test_a_read_during_a_flush_sees_the_batch_being_written(tmp_path: Path) -> None:
    """The batch a flush has taken is in neither the batch nor the records until its write lands: a read then (the
    inspector's badges) waits for the write instead of showing the memory cold."""
    store = SqliteUses(tmp_path / USES_FILE, Rules().half_life_us)
    counter = UseCounter(store, flush_seconds=0)
    counter.note("passage", "a", ["m1"])
    writing, release = threading.Event(), threading.Event()
    add = store.add

    def slow_add(uses: list[Use]) -> None:
        writing.set()
        release.wait(10)
        add(uses)

    store.add = slow_add  # type: ignore[method-assign]
    flusher = threading.Thread(target=counter.flush)
    flusher.start()
    assert writing.wait(10)
    read: list[dict[str, Use]] = []
    reader = threading.Thread(target=lambda: read.append(counter.records(["m1"])))
    reader.start()
    reader.join(0.3)
    waited = not read  # it waits for the write under way
    release.set()
    flusher.join(10)
    reader.join(10)
    assert waited and read and read[0]["m1"].count == 1


def test_the_inspector_shows_each_passages_temperature_and_a_summary(settings: Settings) -> None:
    from tiermem.ui import api

    memory, agent, ids = _memory(settings)
    memory.uses.note("passage", agent, [ids[0]])
    listed = {p["id"]: p for p in api.passages(memory, "default")["passages"]}
    assert listed[ids[0]]["temperature"] == "warm" and listed[ids[0]]["use_score"] == pytest.approx(1.0, abs=1e-3)
    assert listed[ids[1]]["temperature"] == "cold" and listed[ids[1]]["use_score"] == 0
    summary = api.uses(memory, "default")
    assert summary["counts"]["passage"] == {"hot": 0, "warm": 1, "cold": 2, "total": 3}
    api.delete_passage(memory, "default", ids[0])  # deleting in the inspector forgets the use record too
    assert ids[0] not in memory.uses.records([ids[0]])


@pytest.mark.anyio
async def test_the_tools_count_and_a_stopping_server_writes_its_uses(settings: Settings) -> None:
    from mcp.client import Client

    from tiermem.cli.main import server_memory
    from tiermem.cli.serving import close_uses
    from tiermem.server.app import build_server
    from tiermem.server.runtime import MemoryHandle

    memory, _agent, ids = _memory(settings)
    memory.uses.close()
    handle = MemoryHandle(server_memory(settings))
    async with Client(build_server(handle, settings), cache=None) as c:
        opened = await c.call_tool("memory_open", {"label": "human"})
        found = await c.call_tool("archival_memory_search", {"query": "green tea", "top_k": 1})
        assert not opened.is_error and not found.is_error
    assert not (settings.resolved_data_dir() / USES_FILE).exists()  # counted in the server, not yet written
    close_uses(handle)  # what `tiermem serve` does when it stops
    stored = _stored(settings)
    assert sorted(u.kind for u in stored.values()) == ["block", "passage"] and ids[0] in stored


def test_a_shared_block_counts_each_agents_own_uses_and_deleting_one_keeps_the_others(settings: Settings) -> None:
    """A block attached to two agents: each agent's stats show its own opens, and deleting one agent leaves the
    other's record (the records were keyed by the block alone: every use went to the first user's record)."""
    from tiermem.base.config import BlockSpec
    from tiermem.domain.use_stats import use_stats

    memory = open_memory(settings)
    a, b = memory.ensure_agent("a").id, memory.ensure_agent("b").id
    block = memory.create_block(a, BlockSpec(label="project", value="shared project notes"))
    memory.attach(b, block.id)
    for _ in range(3):
        memory.open_block(b, "project")
    memory.uses.flush()
    for _ in range(5):
        memory.open_block(a, "project")  # a's first uses are in the batch, b's in the file: both views merge them

    def uses_of(agent: str) -> int:
        return {u.id: u.count for u in use_stats(memory, agent).hottest}.get(block.id, 0)

    assert (uses_of(a), uses_of(b)) == (5, 3)
    memory.uses.flush()
    assert sorted((u.agent_id, u.count) for u in memory.uses.store.read([block.id])) == sorted([(a, 5), (b, 3)])
    assert memory.uses.records([block.id])[block.id].count == 8  # without an agent: everyone's uses together
    memory.delete_agent(b)
    assert (uses_of(a), [u.agent_id for u in memory.uses.store.read([block.id])]) == (5, [a])


def test_forgetting_a_shared_memory_removes_every_agents_record(tmp_path: Path) -> None:
    counter = UseCounter(SqliteUses(tmp_path / USES_FILE, Rules().half_life_us), flush_seconds=0)
    counter.note("file", "a", ["f1", "f2"])
    counter.note("file", "b", ["f1"])
    counter.flush()
    counter.note("file", "b", ["f1"])  # still in the batch
    assert counter.forget(["f1"]) == 2
    assert [(u.agent_id, u.id) for u in counter.store.read()] == [("a", "f2")]
    counter.close()


def test_a_records_file_of_the_older_layout_is_upgraded_in_place(tmp_path: Path) -> None:
    """A file written before the records were per agent (one record per id) keeps its counts under the agent each
    names; afterwards a second agent's uses of the same memory get their own record."""
    import sqlite3

    path = tmp_path / USES_FILE
    old = sqlite3.connect(path)
    old.execute(
        "CREATE TABLE uses (id TEXT PRIMARY KEY, kind TEXT NOT NULL, agent_id TEXT NOT NULL, count INTEGER NOT NULL, "
        "last_us INTEGER NOT NULL, heat REAL NOT NULL)"
    )
    old.execute("CREATE INDEX uses_agent ON uses (agent_id)")
    old.execute("INSERT INTO uses VALUES ('blk', 'block', 'a', 4, 1000, 2.5), ('p1', 'passage', 'b', 1, 900, 1.0)")
    old.commit()
    old.close()
    store = SqliteUses(path, Rules().half_life_us)
    assert sorted((u.agent_id, u.id, u.count, u.heat) for u in store.read()) == [
        ("a", "blk", 4, 2.5),
        ("b", "p1", 1, 1.0),
    ]
    store.add([Use("blk", "block", "b", 2, 2000, 2.0), Use("blk", "block", "a", 1, 2000, 1.0)])
    assert sorted((u.agent_id, u.count) for u in store.read(["blk"])) == [("a", 5), ("b", 2)]
    store.close()
    again = SqliteUses(path, Rules().half_life_us)  # opened again: already upgraded, nothing changes
    assert len(again.read()) == 3 and sqlite3.connect(path).execute("PRAGMA user_version").fetchone() == (1,)
    again.close()


def test_a_records_file_of_a_newer_layout_is_refused_and_left_alone(tmp_path: Path) -> None:
    import sqlite3

    from tiermem.base.errors import StoreError

    path = tmp_path / USES_FILE
    newer = sqlite3.connect(path)
    newer.execute("PRAGMA user_version = 99")
    newer.close()
    store = SqliteUses(path, Rules().half_life_us)
    with pytest.raises(StoreError, match="newer tiermem"):
        store.add([Use("m", "passage", "a", 1, 1, 1.0)])
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone() == (99,)


def test_stats_count_and_list_a_chunked_passage_once(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    """A long insert cut into chunks is one passage in the stats, as in the timeline: counted once, listed by its
    first chunk's id, the uses of any of its chunks its uses (one per result, however many chunks it shows)."""
    from tiermem.ui import api

    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    long = "\n\n".join(f"Section {i}: " + " ".join(f"word{i}x{j} zebra{i}" for j in range(120)) for i in range(12))
    chunks = memory.archival_insert(agent, long, None).stored
    short = memory.archival_insert(agent, "a short fact about penguins", None).stored[0]
    assert len(chunks) > 3 and chunks[1] == f"{chunks[0]}.1"
    hits = _search(memory, agent, "zebra3 zebra7 zebra9", top_k=10)
    assert len(set(hits) & set(chunks)) > 1  # one search shows several chunks of the passage: one use of it
    memory.uses.close()
    store = SqliteUses(settings.resolved_data_dir() / USES_FILE, Rules().half_life_us)
    at = max(u.last_us for u in _stored(settings).values())
    store.add([Use(chunks[2], "passage", agent, 1, at, 1.0)])  # a chunk's record, as an older tiermem wrote them
    store.close()
    argv = ["--data-dir", str(settings.resolved_data_dir()), "--embedding-model", "hashing", "stats", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["counts"]["passage"] == {"hot": 0, "warm": 1, "cold": 1, "total": 2}
    assert [(u["id"], u["uses"]) for u in out["hottest"]] == [(chunks[0], 2)]
    assert out["hottest"][0]["preview"].startswith("Section 0:")
    assert [u["id"] for u in out["coldest"]] == [short]  # no chunk listed as a memory of its own
    listed = api.passages(memory, "default", limit=200)["passages"]
    assert {p["temperature"] for p in listed if p["id"] in chunks} == {"warm"}  # each chunk shows its passage's
    assert [p["temperature"] for p in listed if p["id"] == short] == ["cold"]
