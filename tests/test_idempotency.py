"""Idempotency keys across processes: a key is claimed in the core store before the write (``domain/idempotency.py``),
so two processes given one key at once (a retry landing on another replica) store the write once. Real servers, real
core stores (SQLite and object storage)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning

from tiermem.base.config import Settings
from tiermem.base.records import CLAIM_MARK, StoredResult, now
from tiermem.domain import autorecall, idempotency
from tiermem.domain.memory import Memory, request_key

from .conftest import serve_in_process, stored_result, text_of
from .test_cancelled_calls import held_commit

pytestmark = pytest.mark.filterwarnings("ignore", category=MCPDeprecationWarning)


def claim_of(agent_id: str, tool: str, key: str, owner: dict[str, object], age: float = 0.0) -> StoredResult:
    return StoredResult(
        key=request_key(agent_id, tool, key),
        agent_id=agent_id,
        tool=tool,
        args_sha256="0" * 64,
        result=CLAIM_MARK + json.dumps(owner),
        created_at=now() - timedelta(seconds=age),
    )


def gone_pid() -> int:
    """The id of a process of this machine that has ended."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.anyio
async def test_one_key_at_two_servers_at_once_writes_once(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Server B gets a key server A is still writing (its write committed, its result not yet recorded): B writes
    nothing, and tells the caller to retry; the retry gets A's result. The block has the line once."""
    monkeypatch.setattr(idempotency, "WAIT_SECONDS", 0.3)  # B's wait for A's claim ends while A is held
    a_server, b_server = serve_in_process(settings), serve_in_process(settings)
    args = {"label": "human", "content": "Keeps bees.", "idempotency_key": "k-replica"}
    async with Client(a_server, cache=None, mode="legacy") as a, Client(b_server, cache=None, mode="legacy") as b:
        await a.call_tool("memory_open", {"label": "human"})
        await b.call_tool("memory_open", {"label": "human"})
        with held_commit(a_server) as (committed, release):
            first: list[str] = []

            async def call_a() -> None:
                first.append(text_of(await a.call_tool("core_memory_append", args)))

            async with anyio.create_task_group() as tg:
                tg.start_soon(call_a)
                await anyio.to_thread.run_sync(committed.wait, 60)  # A's write is committed, A's thread held
                waited = await b.call_tool("core_memory_append", args)
                assert waited.is_error and "still being written" in text_of(waited), text_of(waited)
                release.set()
        retried = await b.call_tool("core_memory_append", args)
        assert not retried.is_error and text_of(retried) == first[0]
        view = text_of(await b.call_tool("memory_open", {"label": "human"}))
        assert view.count("Keeps bees.") == 1, view


def test_claims_are_atomic_records(memory: Memory) -> None:
    """The core's claim protocol: the first claim is stored, a second gets it; the result replaces the claim; a
    dropped claim frees the key; a stale claim is replaced only while it is still what is stored."""
    agent = memory.create_agent("a").id
    one = claim_of(agent, "memory_insert", "k", {"host": "h", "pid": 1, "nonce": "one"})
    two = claim_of(agent, "memory_insert", "k", {"host": "h", "pid": 2, "nonce": "two"})
    assert memory.core.claim_request(one) is None
    assert memory.core.claim_request(two) == one
    memory.core.put_request(replace(one, result="done"), one)
    assert memory.core.claim_request(two) == replace(one, result="done")
    memory.core.put_request(replace(two, result="second"), two)  # not its claim: the first result stands
    assert stored_result(memory, agent, "memory_insert", "k") == "done"

    other = claim_of(agent, "memory_insert", "k2", {"host": "h", "pid": 1, "nonce": "one"})
    taker = replace(other, result=other.result.replace("one", "taker"))
    assert memory.core.claim_request(other) is None
    assert stored_result(memory, agent, "memory_insert", "k2") is None  # a claim is no result
    assert memory.core.claim_request(taker, replacing=two) == other  # replacing what is not stored: refused
    assert memory.core.claim_request(taker, replacing=other) is None
    memory.core.drop_request(other)  # no longer its claim: nothing dropped
    assert memory.core.get_request(other.key) == taker
    memory.core.drop_request(taker)
    assert memory.core.get_request(other.key) is None


def test_a_claim_holds_while_its_owner_lives(memory: Memory) -> None:
    """A claim of a live process of this machine, or a recent one of another machine, makes a call wait."""
    agent = memory.create_agent("a").id
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        here = claim_of(agent, "memory_insert", "k", {"host": idempotency._machine(), "pid": sleeper.pid, "nonce": "n"})
        assert memory.core.claim_request(here) is None
        assert idempotency.claim(memory, agent, "memory_insert", "k", "0" * 64).holder == here
    finally:
        sleeper.kill()
        sleeper.wait()
    there = claim_of(agent, "memory_insert", "k2", {"host": "elsewhere/pid:[1]", "pid": 1, "nonce": "n"})
    assert memory.core.claim_request(there) is None
    assert idempotency.claim(memory, agent, "memory_insert", "k2", "0" * 64).holder == there
    with pytest.raises(Exception, match="different arguments"):
        idempotency.claim(memory, agent, "memory_insert", "k2", "1" * 64)


def test_a_stale_claim_is_taken_over(memory: Memory) -> None:
    """A claim whose owner died (a process of this machine that is gone; one of another machine older than the stale
    age) does not hold its key forever: the next call with the key takes it over and writes."""
    agent = memory.create_agent("a").id
    dead = claim_of(agent, "memory_insert", "k", {"host": idempotency._machine(), "pid": gone_pid(), "nonce": "n"})
    old = claim_of(
        agent,
        "memory_insert",
        "k2",
        {"host": "elsewhere/pid:[1]", "pid": 1, "nonce": "n"},
        age=1 + idempotency.STALE_CLAIM_SECONDS,
    )
    for stale in (dead, old):
        assert memory.core.claim_request(stale) is None
        key = stale.key.rsplit("\x1f", 1)[1]
        got = idempotency.claim(memory, agent, "memory_insert", key, "0" * 64)
        assert got.mine is not None and got.mine != stale
        idempotency.finish(memory, agent, got.mine, "written")
        assert stored_result(memory, agent, "memory_insert", key) == "written"


def test_a_hook_turn_whose_claim_died_is_logged(memory: Memory) -> None:
    """A hook's turn claimed by a server that died mid-write (its claim left behind) is logged by the next server the
    hook reaches, once; a further firing logs nothing."""
    agent = memory.create_agent("a").id
    kw = {"session": "s1", "turn": "t1", "role": "user", "content": "Where do the bees go in winter?"}
    digest = hashlib.sha256(str(kw["content"]).encode()).hexdigest()
    key = f"s1:t1:user:{digest[:16]}"
    dead = replace(
        claim_of(agent, autorecall.HOOK_TOOL, key, {"host": idempotency._machine(), "pid": gone_pid(), "nonce": "n"}),
        args_sha256=digest,
    )
    assert memory.core.claim_request(dead) is None
    assert autorecall.log_turn(memory, agent, **kw) is True  # type: ignore[arg-type]
    assert autorecall.log_turn(memory, agent, **kw) is False  # type: ignore[arg-type]
    logged = [x.content for x in memory.archive.rows.messages_of(agent) if x.conversation_id == "s1"]
    assert logged == [kw["content"]]


def failing_puts(memory: Memory, monkeypatch: pytest.MonkeyPatch, times: int) -> list[int]:
    """Make the core's next ``times`` records of a result fail as a locked or full disk does (the only way to make
    SQLite fail on cue between a write and its record); returns the count of tries, growing."""
    from tiermem.base.errors import StoreWriteError

    real = memory.core.put_request
    tries: list[int] = []

    def put_request(result: StoredResult, claim: StoredResult | None = None) -> None:
        tries.append(1)
        if len(tries) <= times:
            raise StoreWriteError("Writing the core state failed: database or disk is full. Nothing was written.")
        real(result, claim)

    monkeypatch.setattr(memory.core, "put_request", put_request)
    monkeypatch.setattr(idempotency, "FINISH_PAUSES", (0.0, 0.0))
    return tries


def hook_turn() -> dict[str, str]:
    return {"session": "s1", "turn": "t1", "role": "user", "content": "Where do the bees go in winter?"}


def logged_turns(memory: Memory, agent: str) -> list[str]:
    return [x.content for x in memory.archive.rows.messages_of(agent) if x.conversation_id == "s1"]


def test_a_result_whose_record_failed_once_is_recorded(memory: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The write is stored when its result's record fails: the record is tried again, so the call succeeds and a
    retry with its key writes nothing."""
    agent = memory.create_agent("a").id
    tries = failing_puts(memory, monkeypatch, times=1)
    assert autorecall.log_turn(memory, agent, **hook_turn()) is True  # type: ignore[arg-type]
    assert len(tries) == 2
    assert autorecall.log_turn(memory, agent, **hook_turn()) is False  # type: ignore[arg-type]
    assert logged_turns(memory, agent) == [hook_turn()["content"]]


def test_a_result_that_cannot_be_recorded_says_the_write_was_stored_and_holds_its_key(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record of a stored write's result keeps failing: the caller is told the write WAS stored (not "nothing
    was written"), and this process does not take over the claim it left at once (which would store the write a
    second time at the retry): a retry is told the call is still being written, as one in another process is."""
    from tiermem.base.errors import KeyUnrecordedError, StoreBusyError

    agent = memory.create_agent("a").id
    failing_puts(memory, monkeypatch, times=1 + len(idempotency.FINISH_PAUSES))
    with pytest.raises(KeyUnrecordedError) as failed:
        autorecall.log_turn(memory, agent, **hook_turn())  # type: ignore[arg-type]
    message = str(failed.value)
    assert "was stored" in message and "nothing was written" not in message.lower(), message
    monkeypatch.setattr(idempotency, "WAIT_SECONDS", 0.2)
    with pytest.raises(StoreBusyError, match="still being written"):
        autorecall.log_turn(memory, agent, **hook_turn())  # type: ignore[arg-type]
    assert logged_turns(memory, agent) == [hook_turn()["content"]]


def test_a_claim_that_cannot_be_dropped_leaves_the_writes_own_error(
    memory: Memory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A write fails, and so does dropping its claim: the caller hears the write's error, not the drop's (which is
    logged); a retry in this process may write at once (this process no longer holds the claim)."""
    from tiermem.base.errors import StoreWriteError

    agent = memory.create_agent("a").id
    got = idempotency.claim(memory, agent, "memory_insert", "k", "0" * 64)
    assert got.mine is not None

    def drop_request(claim: StoredResult) -> None:
        raise StoreWriteError("Writing the core state failed: the disk is read-only.")

    real_drop = memory.core.drop_request
    monkeypatch.setattr(memory.core, "drop_request", drop_request)
    with pytest.raises(ValueError, match="the write's own error"):
        try:
            raise ValueError("the write's own error")
        except ValueError:
            idempotency.release(memory, agent, got.mine)
            raise
    assert any("could not drop its claim" in r.getMessage() for r in caplog.records)
    monkeypatch.setattr(memory.core, "drop_request", real_drop)
    again = idempotency.claim(memory, agent, "memory_insert", "k", "0" * 64)
    assert again.mine is not None


def test_busy_names_no_host_or_process_to_the_client(memory: Memory, caplog: pytest.LogCaptureFixture) -> None:
    """A call that waited for another process's claim is told another tiermem process holds its key; which machine and
    process id go to the log, for whoever runs the servers."""
    agent = memory.create_agent("a").id
    holder = claim_of(agent, "memory_insert", "k", {"host": "replica-7/pid:[4026531836]/boot", "pid": 43117})
    text = str(idempotency.busy("k", holder))
    assert "another tiermem process" in text and "replica-7" not in text and "43117" not in text, text
    assert any("replica-7" in r.getMessage() and "43117" in r.getMessage() for r in caplog.records)


def test_the_machine_a_claim_names_includes_its_boot(memory: Memory) -> None:
    """Two hosts of one cloned image share the host name and the root process-id namespace's number: the boot id
    tells them apart, so neither takes the other's live claims for those of its own dead processes."""
    boot = Path("/proc/sys/kernel/random/boot_id")
    if not boot.exists():
        pytest.skip("no boot id on this system")
    assert boot.read_text().strip() in idempotency._machine().split("/")
