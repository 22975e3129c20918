"""The object-storage core state on moto's S3 server (loopback): requests per edit, lost races, replicas in one
process (two ``ObjectCore`` over one prefix, as two replicas have), history upkeep, migration from LanceDB tables.

Request counts are the core's own (``Bucket.requests``: every call is one request); bench/objstore.py counts them
on the server side too.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from tiermem.base.config import BlockSpec, load_settings
from tiermem.base.errors import StoreError
from tiermem.core.bucket import Bucket
from tiermem.core.delta import diff
from tiermem.core.history import Chain, Entry
from tiermem.core.object_history import SEAL_BYTES, listed_bases, listed_segments
from tiermem.core.object_layout import INLINE_CHARS, checksum, checksum_after, dumps, head_path, old_request_path
from tiermem.core.objects import ObjectCore
from tiermem.core.protocol import CORE_TABLES
from tiermem.domain import blocks as b
from tiermem.domain.factory import open_memory
from tiermem.domain.memory import Memory
from tiermem.store import Store

from .conftest import legacy_core, memory_over, store_result, stored_result
from .test_object_storage import BUCKET, s3_endpoint  # noqa: F401 (the module-scoped moto server fixture)

OPTIONS = {"aws_access_key_id": "test", "aws_secret_access_key": "test", "region": "us-east-1", "allow_http": "true"}


def prefix_uri(name: str) -> str:
    return f"s3://{BUCKET}/{name}-{uuid.uuid4().hex[:8]}"


def core_at(uri: str, endpoint: str, **kw: float) -> ObjectCore:
    return ObjectCore.open(Bucket(uri, {**OPTIONS, "aws_endpoint": endpoint}), **kw)  # type: ignore[arg-type]


def memory_at(tmp_path: Path, core: ObjectCore, limit: int = 100_000) -> Memory:
    store = Store(str(tmp_path / f"db-{uuid.uuid4().hex[:6]}"), embedding_model="hashing-384", embedding_dim=384)
    return memory_over(store, core=core, default_blocks=[BlockSpec(label="human", value="", limit=limit)])


def test_an_edit_costs_the_same_few_requests_however_many_came_before(tmp_path: Path, s3_endpoint: str) -> None:
    core = core_at(prefix_uri("requests"), s3_endpoint)
    m = memory_at(tmp_path, core)
    agent = m.ensure_agent("default").id

    def one_edit(i: int) -> dict[str, int]:
        core.bucket.requests.clear()
        m.edit(agent, "human", b.Append(f"fact {i} " + "x" * 60))
        return dict(core.bucket.requests)

    first = one_edit(0)
    for i in range(1, 400):  # ~28 KB of value, its history sealed into segments on the way
        m.edit(agent, "human", b.Append(f"fact {i} " + "x" * 60))
    assert listed_segments(core.bucket, m.block(agent, "human").id)
    later = one_edit(400)
    assert first == later == {"GET": 2, "PUT": 1}  # the agent's list and the block (conditional GETs), one PUT


def test_a_lost_race_commits_nothing_and_replicas_see_each_others_edits(tmp_path: Path, s3_endpoint: str) -> None:  # noqa: F811
    uri = prefix_uri("race")
    one, two = core_at(uri, s3_endpoint), core_at(uri, s3_endpoint)
    m1, m2 = memory_at(tmp_path, one), memory_at(tmp_path, two)
    agent = m1.ensure_agent("default").id
    seen_by_two = m2.block(agent, "human")
    m1.edit(agent, "human", b.Append("from one"))
    stale = replace(seen_by_two, value="stale", version=seen_by_two.version + 1)
    two.bucket.requests.clear()
    assert two.commit_edit(seen_by_two, stale, m1.history(agent, "human", 1)[0]) is None
    assert two.bucket.requests["PUT"] == 1  # the one conditional PUT, refused: nothing else was written
    assert m2.block(agent, "human").value == "\nfrom one"  # the other replica reads the committed edit
    m2.edit(agent, "human", b.Append("from two"))  # and edits on top of it after re-reading
    assert [v.value for v in m1.history(agent, "human", 3)] == ["\nfrom one\nfrom two", "\nfrom one", ""]


def test_concurrent_writers_on_two_replicas_lose_and_double_nothing(tmp_path: Path, s3_endpoint: str) -> None:  # noqa: F811
    uri = prefix_uri("threads")
    memories = [memory_at(tmp_path, core_at(uri, s3_endpoint)) for _ in range(2)]
    agent = memories[0].ensure_agent("default").id
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for i in range(25):
                memories[w % 2].edit(agent, "human", b.Append(f"w{w}-{i}"))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    lines = [x for x in memories[1].block(agent, "human").value.split("\n") if x]
    assert sorted(lines) == sorted(f"w{w}-{i}" for w in range(6) for i in range(25))
    hist = memories[0].history(agent, "human", 1000)
    assert [v.version for v in hist] == list(range(151, 0, -1))
    for newer, older in zip(hist, hist[1:]):
        assert newer.value.startswith(older.value + "\n")


def test_history_costs_about_the_change_and_reads_back_exactly(tmp_path: Path, s3_endpoint: str) -> None:  # noqa: F811
    core = core_at(prefix_uri("bytes"), s3_endpoint)
    m = memory_at(tmp_path, core, limit=1_000_000)
    agent = m.ensure_agent("default").id
    m.edit(agent, "human", b.Rethink("start"))
    line = "Ada prefers green tea in the morning."
    values = [m.block(agent, "human").value]
    for i in range(300):
        values.append(m.edit(agent, "human", b.Append(f"{i}: {line}")).value)
    block = m.block(agent, "human")
    stored = sum(i.size for i in core.bucket.list(f"core/history/{block.id}/"))
    head = core.bucket.get(f"core/blocks/{block.id}.json")
    assert head is not None
    tail = len(head.data) - len(block.value.encode())  # the head's entries beside its value
    per_edit = (stored + tail) / 300
    change = len(f"\n0: {line}") + 2
    assert per_edit <= 2 * change + 200, per_edit  # the target; whole values would be ~5.7 KB per edit
    hist = m.history(agent, "human", 1000)
    assert [v.value for v in reversed(hist)] == ["", *values]  # version 1 is the block's empty first value
    assert m.revert(agent, "human", 2).value == "start"
    assert m.core.history_version(block.id, 150) is not None
    assert m.core.history_version(block.id, 150).value == values[148]  # type: ignore[union-attr]


def test_two_replicas_tidying_at_once_lose_nothing(tmp_path: Path, s3_endpoint: str) -> None:  # noqa: F811
    uri = prefix_uri("tidy")
    writer = core_at(uri, s3_endpoint)
    one, two = core_at(uri, s3_endpoint, grace_seconds=0), core_at(uri, s3_endpoint, grace_seconds=0)  # nobody edits
    m = memory_at(tmp_path, writer, limit=1_000_000)
    agent = m.ensure_agent("default").id
    for i in range(60):  # ~60 KB of history: several sealed segments
        m.edit(agent, "human", b.Append(f"{i} " + "y" * (SEAL_BYTES // 16)))
    block = m.block(agent, "human")
    before = [(v.version, v.value) for v in m.history(agent, "human", 1000)]
    pieces = len(listed_segments(one.bucket, block.id))
    assert pieces >= 3
    results: list[dict[str, int]] = []
    threads = [threading.Thread(target=lambda c=c: results.append(c.tidy_block(block.id))) for c in (one, two)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    one.tidy_block(block.id)  # whatever a racing pass left (a merge the other could not see yet)
    assert len(listed_segments(one.bucket, block.id)) == 1 < pieces  # merged into one object
    assert sum(r["segments merged"] for r in results) >= 1
    for reader in (m, memory_at(tmp_path, one), memory_at(tmp_path, two)):
        assert [(v.version, v.value) for v in reader.history(agent, "human", 1000)] == before
    m.edit(agent, "human", b.Append("after"))
    assert m.history(agent, "human", 1)[0].value == block.value + "\nafter"


def test_labels_renamed_on_one_replica_are_found_on_the_other(tmp_path: Path, s3_endpoint: str) -> None:  # noqa: F811
    uri = prefix_uri("labels")
    one, two = core_at(uri, s3_endpoint), core_at(uri, s3_endpoint)
    m1, m2 = memory_at(tmp_path, one), memory_at(tmp_path, two)
    agent = m1.ensure_agent("default").id
    other = m1.create_agent("other", blocks=[])
    shared = m1.block(agent, "human")
    m1.attach(other.id, shared.id)
    assert sorted(two.agents_of_block(shared.id)) == sorted([agent, other.id])
    assert m2.block(agent, "human").id == shared.id  # the label as m2 knows it
    m1.update_block(agent, "human", new_label="person")
    assert m2.block(agent, "person").id == shared.id and m2.block(other.id, "person").id == shared.id
    with pytest.raises(Exception, match="No memory block with label 'human'"):
        m2.block(agent, "human")
    m2.delete_block(other.id, "person")  # detach from one agent only
    assert two.agents_of_block(shared.id) == [agent] and one.attached_block_ids(other.id) == []
    token = one.change_token()
    assert one.change_token() == token
    agents, lists = one.change_token(agents_only=True), one.bucket.requests["LIST"]
    m2.edit(agent, "person", b.Append("changed on two"))
    assert one.change_token() != token
    # the agents' token (what the tools-only watch polls: whether a folder is attached) is one listing
    assert one.change_token(agents_only=True) == agents and one.bucket.requests["LIST"] == lists + 3 + 1
    m2.set_agent_metadata(agent, {"note": "changed on two"})
    assert one.change_token(agents_only=True) != agents


@pytest.mark.anyio
async def test_a_client_that_subscribes_to_nothing_hears_another_replicas_folder_within_tools_watch_seconds(
    tmp_path: Path,
    s3_endpoint: str,  # noqa: F811
) -> None:
    """On object storage a client that only listed the tools (most hosts) is told the file tools came when another
    replica attaches the agent's first folder, at the next of the server's checks, every ``tools_watch_seconds``
    (they were every 15 s whatever the settings said)."""
    import anyio
    from mcp.client import Client

    from .conftest import serve_in_process

    settings = load_settings(
        uri=prefix_uri("tools-watch"),
        storage_options={**OPTIONS, "aws_endpoint": s3_endpoint},
        embedding_model="hashing",
        tools=["default"],
        tools_watch_seconds=0.5,
    )
    other = open_memory(settings)  # another replica
    agent = other.ensure_agent("default").id
    other.files.create_folder("docs")
    received: list[str] = []

    async def handler(message: object) -> None:
        method = getattr(getattr(message, "root", message), "method", None)
        if method:
            received.append(method)

    async with Client(serve_in_process(settings), cache=None, mode="legacy", message_handler=handler) as c:
        assert "open_files" not in {t.name for t in (await c.list_tools()).tools}
        await c.call_tool("memory_open", {"label": "human"})  # the memory is open
        await anyio.sleep(1.5)  # the watch has looked once
        await anyio.to_thread.run_sync(other.files.attach, agent, "docs")
        with anyio.fail_after(10):  # a bounded wait for the next check, not a timed assert on speed
            while "notifications/tools/list_changed" not in received:
                await anyio.sleep(0.05)
        assert "open_files" in {t.name for t in (await c.list_tools()).tools}


def test_the_watch_refuses_a_period_past_a_day_and_never_spins_on_a_failing_poll(tmp_path: Path) -> None:
    """`tools_watch_seconds = 1e10` was taken: the watch's wait overflowed, so every tick failed at once (with a
    misleading warning) and, with `watch_seconds = 0`, its thread spun (7,085 ticks a second). A period past a day is
    refused by name; a poll that fails at once still waits before the next (``FAILED_POLL_MIN_SECONDS``)."""
    import time

    from tiermem.base.errors import ConfigError
    from tiermem.server.notifier import Notifier
    from tiermem.server.runtime import MemoryHandle

    for name in ("tools_watch_seconds", "watch_seconds"):
        with pytest.raises(ConfigError, match=rf"{name} \(--[a-z-]+\): Input should be less than or equal to 86400"):
            load_settings(data_dir=tmp_path, **{name: 1e10})
        assert getattr(load_settings(data_dir=tmp_path, **{name: 86400}), name) == 86400
    store = Store(str(tmp_path / "db"), embedding_model="hashing-384", embedding_dim=384)
    memory = memory_over(store, core=ObjectCore.open(Bucket("memory://spin")))
    agent = memory.ensure_agent("ada").id
    handle = MemoryHandle(lambda: (memory, agent), agent="ada")
    handle.get()
    notifier = Notifier(handle, watch_seconds=0, tools_watch_seconds=1e10)  # past the bound: each poll fails at once
    ticks, started = 0, time.perf_counter()
    while time.perf_counter() - started < 1.0:
        assert notifier._watch_tools()
        ticks += 1
    assert notifier._failure is not None and ticks <= 5, ticks


def test_lancedb_core_tables_on_s3_move_into_objects(
    tmp_path: Path,
    s3_endpoint: str,  # noqa: F811
    capfd: pytest.CaptureFixture[str],
) -> None:
    uri = prefix_uri("legacy")
    options = {**OPTIONS, "aws_endpoint": s3_endpoint}
    store = Store(uri, embedding_model="hashing-384", embedding_dim=384, storage_options=options)
    agent = legacy_core(
        store,
        {"human": ["Name: Ada", "Name: Ada\nLikes tea", "Name: Ada\nLikes green tea"], "persona": ["I help."]},
        requests={("core_memory_append", "k1"): "done"},
    )
    settings = load_settings(uri=uri, embedding_model="hashing", storage_options=options)
    m = open_memory(settings, start_embedder=False)
    assert m.core.name == "object" and "moved core state from LanceDB" in capfd.readouterr().err
    assert m.block(agent, "human").value == "Name: Ada\nLikes green tea"
    assert [v.value for v in m.history(agent, "human", 10)] == [
        "Name: Ada\nLikes green tea",
        "Name: Ada\nLikes tea",
        "Name: Ada",
    ]
    assert stored_result(m, agent, "core_memory_append", "k1") == "done"
    m.edit(agent, "human", b.Append("Plays go"))
    assert [v.version for v in m.history(agent, "human", 10)] == [4, 3, 2, 1]
    again = open_memory(settings, start_embedder=False, lazy=True)  # the lazy path, without LanceDB
    assert "moved core state" not in capfd.readouterr().err
    assert again.block(agent, "human").value.endswith("Plays go")
    assert all(store.rows.count(t) == 0 for t in CORE_TABLES)  # emptied once the objects were whole


def test_deleting_an_agent_removes_its_core_state_and_keeps_shared_blocks(tmp_path: Path, s3_endpoint: str) -> None:  # noqa: F811
    core = core_at(prefix_uri("delete"), s3_endpoint)
    m = memory_at(tmp_path, core)
    keep = m.ensure_agent("default").id
    gone = m.create_agent("gone", blocks=[BlockSpec(label="own", value="mine", limit=100_000)])
    shared = m.block(keep, "human")
    m.attach(gone.id, shared.id)
    own = m.block(gone.id, "own")
    for i in range(40):
        m.edit(gone.id, "own", b.Append(f"{i} " + "z" * 600))  # history sealed into segments
    store_result(m, gone.id, "core_memory_append", "k1", "abc", "done")
    from tiermem.base.records import ContextWindow

    m.set_context_window(ContextWindow(agent_id=gone.id, conversation_id="c1", start_seq=3))
    assert listed_segments(core.bucket, own.id)
    for _ in range(2):  # safe to run again
        core.delete_agent(gone.id)
    assert [a.name for a in m.list_agents()] == ["default"]
    assert core.get_block(own.id) is None and not listed_segments(core.bucket, own.id)
    assert core.bucket.list(f"core/values/{own.id}/") == []  # its bases (a value over INLINE_CHARS) too
    assert m.block(keep, "human").id == shared.id and core.agents_of_block(shared.id) == [keep]
    assert (
        core.bucket.list(f"core/requests/{gone.id}/") == [] and core.bucket.list(f"core/conversations/{gone.id}/") == []
    )
    assert stored_result(m, gone.id, "core_memory_append", "k1") is None


def test_a_long_block_is_stored_as_a_base_and_its_changes_and_read_exactly(tmp_path: Path, s3_endpoint: str) -> None:  # noqa: F811
    """A value over INLINE_CHARS: each edit writes a head of about its change plus the tail, not the whole value;
    a replica whose copy is one edit old, one whose copy is older than the base and one with no copy all read the
    exact value and history; upkeep deletes bases no head names; a damaged base is refused, not served."""
    uri = prefix_uri("long")
    core, other, late = (core_at(uri, s3_endpoint, grace_seconds=0.0) for _ in range(3))
    m, m2, m3 = (memory_at(tmp_path, c, limit=10_000_000) for c in (core, other, late))
    agent = m.ensure_agent("default").id
    block_id = m.block(agent, "human").id
    values = [m.block(agent, "human").value]
    for i in range(400):  # ~80 KB, its history sealed many times on the way
        values.append(m.edit(agent, "human", b.Append(f"line {i} " + "y" * 190)).value)
    assert m3.block(agent, "human").value == values[-1]  # the late replica's copy: version 401
    for i in range(200):  # the two replicas take turns: each holds the version before the other's edit
        writer = m if i % 2 else m2
        values.append(writer.edit(agent, "human", b.Append(f"turn {i}")).value)
        assert (m2 if i % 2 else m).block(agent, "human").value == values[-1]
    for i in range(200):
        values.append(m.edit(agent, "human", b.Append(f"more {i} " + "z" * 100)).value)
    assert len(values[-1]) > 5 * INLINE_CHARS
    head = core.bucket.get(head_path(block_id))
    assert head is not None and len(head.data) < 2 * SEAL_BYTES + 4096 < len(values[-1])  # the value is not in it
    assert m3.block(agent, "human").value == values[-1]  # its copy is older than the base now
    fresh = memory_at(tmp_path, core_at(uri, s3_endpoint), limit=10_000_000)
    assert fresh.block(agent, "human").value == values[-1]  # no copy at all: from the base
    history = {v.version: v.value for v in fresh.history(agent, "human", limit=len(values))}
    assert [history[n + 1] for n in range(len(values))] == values
    fresh.revert(agent, "human", 300)
    assert m2.block(agent, "human").value == values[299]
    assert len(listed_bases(core.bucket, block_id)) > 1
    core.tidy_block(block_id)
    assert len(listed_bases(core.bucket, block_id)) == 1  # only the one the head names
    (base,) = listed_bases(core.bucket, block_id)
    core.bucket.put(base.path, b"not the value")
    with pytest.raises(StoreError, match="damaged"):
        memory_at(tmp_path, core_at(uri, s3_endpoint), limit=10_000_000).block(agent, "human")


def test_idempotency_records_of_the_old_layout_are_moved_found_and_deleted(tmp_path: Path, s3_endpoint: str) -> None:  # noqa: F811
    """Versions before requests/<agent>/ kept a record at requests/<sha256 of key>.json: after an upgrade a retried
    request must still find its record (not be applied twice), and deleting the agent must remove it."""
    uri = prefix_uri("oldrequests")
    m = memory_at(tmp_path, core_at(uri, s3_endpoint))
    agent = m.ensure_agent("default").id
    bucket = m.core.bucket  # type: ignore[attr-defined]

    def old_record(key: str, result: str) -> str:
        full = f"{agent}\x1fcore_memory_append\x1f{key}"
        row = {
            "key": full,
            "agent_id": agent,
            "tool": "core_memory_append",
            "args_sha256": "abc",
            "result": result,
            "created_us": 1,
        }
        bucket.put(old_request_path(full), dumps(row))
        return old_request_path(full)

    # the store as the older version left it: a marker without "requests", records at the top of requests/
    bucket.put("core/format.json", dumps({"format": 1, "created_us": 1}))
    old_record("k1", "first answer")
    upgraded = memory_at(tmp_path, core_at(uri, s3_endpoint))
    assert stored_result(upgraded, agent, "core_memory_append", "k1") == "first answer"
    assert [i.path for i in bucket.list_here("core/requests/")] == []  # moved under the agent's folder
    assert len(bucket.list(f"core/requests/{agent}/")) == 1
    # a miss now costs one GET: the top of requests/ was emptied on open, so the old place is not asked
    counted = upgraded.core.bucket.requests  # type: ignore[attr-defined]
    before = Counter(counted)
    assert stored_result(upgraded, agent, "core_memory_append", "k9") is None
    assert Counter(counted) - before == Counter({"GET": 1})
    # a replica not yet upgraded writes one more the old way: found once the next look sees it (at most
    # old_requests_seconds later; 0 here), and deleted with the agent
    straggler = old_record("k2", "second answer")
    looking = memory_at(tmp_path, core_at(uri, s3_endpoint, old_requests_seconds=0.0))
    assert stored_result(looking, agent, "core_memory_append", "k2") == "second answer"
    looking.core.delete_agent(agent)
    assert bucket.get(straggler) is None and bucket.list("core/requests/") == []


def test_a_missed_idempotency_record_costs_one_get_on_a_store_without_old_records(
    tmp_path: Path, s3_endpoint: str
) -> None:  # noqa: F811
    """A store opened with the current layout looks once (one listing) for records of the old layout, then a
    miss is one GET, however many follow (before: a second GET at the old place on every miss)."""
    uri = prefix_uri("onelook")
    memory_at(tmp_path, core_at(uri, s3_endpoint)).ensure_agent("default")
    reopened = memory_at(tmp_path, core_at(uri, s3_endpoint))  # marker already current: nothing moved on open
    agent = reopened.ensure_agent("default").id
    bucket = reopened.core.bucket  # type: ignore[attr-defined]
    before = Counter(bucket.requests)
    for i in range(5):
        assert stored_result(reopened, agent, "core_memory_append", f"miss{i}") is None
    assert Counter(bucket.requests) - before == Counter({"GET": 5, "LIST": 1})


def test_an_appends_checksum_continues_the_old_one_and_other_edits_need_the_whole_value() -> None:
    def entry(old: str, new: str) -> Entry:
        return Entry("b", 2, "op", "me", 0, Chain(1), delta=diff(old, new))

    old = "first line\nsecond ünïcode line"
    appended = [entry(old, old + "\nthird"), entry(old + "\nthird", old + "\nthird\nfourth €")]
    assert checksum_after(checksum(old), appended, len(old)) == checksum(old + "\nthird\nfourth €")
    assert checksum_after(checksum(old), [entry(old, "x" + old)], len(old)) is None  # not an append
    assert checksum_after(None, appended, len(old)) is None  # the old checksum is not known
