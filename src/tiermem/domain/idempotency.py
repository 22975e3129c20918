"""Idempotency keys as claims, so that a write is stored once even when two processes get its key at once (a retry
after a timeout landing on another replica, a hook fired at two servers).

A call with a key first claims it: one atomic write of a pending record under the key (``CoreStore.claim_request``:
a SQLite transaction, a conditional PUT on object storage), naming its owner (machine, process id, a nonce). Only
the call whose claim is stored writes; it then records its result in the claim's place (``finish``), or drops the
claim when it failed (``release``: a retry may write). Any other call with the key meanwhile waits, trying again
every ``Claim.poll`` seconds, for the first call's result (``WAIT_SECONDS`` at most: then it is told to retry).

A claim whose owner died mid-write must not hold its key forever: a claim is stale, and the next call with its key
takes it over (a conditional write: of two takers one wins), when its owner was a process of this machine that is
gone (or this process, which no longer holds it: a restarted server with the same process id), or when it is older
than ``STALE_CLAIM_SECONDS`` (an owner on another machine). Whether such a dead owner's write landed is unknown: the
taker writes again, the one case where a write may be stored twice (a process killed mid-write, or one whose write
was stored but whose result could not be recorded: ``finish`` then keeps holding the claim, so this process waits for
it to go stale as every other does, and says the write was stored).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..base.errors import KeyUnrecordedError, StoreBusyError, ValidationError, without_nothing_written
from ..base.records import CLAIM_MARK, StoredResult, now
from .memory import request_key

if TYPE_CHECKING:
    from .memory import Memory

log = logging.getLogger(__name__)

WAIT_SECONDS = 30.0  # how long a call waits for another call's claim of its key before it is told to retry
STALE_CLAIM_SECONDS = 300.0  # a claim this old is taken over whoever holds it (an owner on another machine died)
FINISH_PAUSES = (0.1, 0.5)  # a failed record of a write's result is tried again after each of these (seconds)

_held: set[str] = set()  # the nonces of the claims this process holds now
_held_guard = threading.Lock()


@dataclass(frozen=True)
class Claim:
    """One try at an idempotency key: exactly one of ``result`` (the first call's: return it, write nothing),
    ``mine`` (this call holds the key: write, then ``finish`` or ``release``) and ``holder`` (another call holds
    it, writing now: wait ``poll`` seconds and try again) is set."""

    result: str | None = None
    mine: StoredResult | None = None
    holder: StoredResult | None = None
    poll: float = 0.05


def claim(memory: Memory, agent_id: str, tool: str, key: str, args_sha256: str) -> Claim:
    """Claim ``key`` for a ``tool`` call with these arguments (one try). The same key with other arguments is
    refused (``ValidationError``): it names another request."""
    nonce = uuid.uuid4().hex
    owner = {"host": _machine(), "pid": os.getpid(), "nonce": nonce}
    mine = StoredResult(
        key=request_key(agent_id, tool, key),
        agent_id=agent_id,
        tool=tool,
        args_sha256=args_sha256,
        result=CLAIM_MARK + json.dumps(owner),
        created_at=now(),
    )
    poll = 0.05 if memory.core.watch_cheap else 0.5  # a try costs a transaction, or a GET on object storage
    replacing: StoredResult | None = None
    for _ in range(3):
        with _held_guard:  # held before it is stored: a stale-claim check of this process never sees it unheld
            _held.add(nonce)
        try:
            stored = memory.core.claim_request(mine, replacing)
        except BaseException:
            _drop_held(nonce)
            raise
        if stored is None:
            return Claim(mine=mine, poll=poll)
        _drop_held(nonce)
        if stored.args_sha256 != args_sha256:
            raise ValidationError(
                f"idempotency_key {key!r} was already used for {'an' if tool[:1] in 'aeiou' else 'a'} {tool} call "
                "with different arguments; use a new key for a new request."
            )
        if not stored.pending:
            return Claim(result=stored.result, poll=poll)
        why = _stale(stored)
        if why is None:
            return Claim(holder=stored, poll=poll)
        log.warning("idempotency_key %r of a %s call: taking over its claim (%s)", key, tool, why)
        replacing = stored
    return Claim(holder=stored, poll=poll)


def finish(memory: Memory, agent_id: str, mine: StoredResult, result: str) -> None:
    """Keep ``result`` under the key in place of the claim ``mine``, so a retry with it gets the same answer.

    The write is stored already, so a failed record is tried again (after each of ``FINISH_PAUSES``). When it still
    fails, the claim stays held by this process: a retry with the key, here as in any other process, waits for it
    and is taken over only once it is stale (``STALE_CLAIM_SECONDS``); ``KeyUnrecordedError`` says the write was
    stored but a retry may store it again (never that nothing was written)."""
    done = replace(mine, result=result, created_at=now())
    for pause in (*FINISH_PAUSES, None):
        try:
            memory.core.put_request(done, mine)
        except Exception as exc:
            if pause is not None:
                log.warning("%s: could not record its result (%s); trying again", _named(mine), exc)
                time.sleep(pause)
                continue
            raise KeyUnrecordedError(
                f"The {mine.tool} call was stored, but recording its result under idempotency_key "
                f"{_user_key(mine)!r} failed ({without_nothing_written(exc) or type(exc).__name__}). A "
                f"retry with this key is told the call is still being written for {STALE_CLAIM_SECONDS:g} s after "
                "it started, then stores it again: check whether it is there instead of retrying it."
            ) from exc
        _drop_held(_owner(mine).get("nonce"))
        return


def release(memory: Memory, agent_id: str, mine: StoredResult) -> None:
    """Drop the claim ``mine`` (its call failed and wrote nothing): a retry with the key may write. A failure to drop
    it is logged (to stderr), not raised: the caller's own error (or error result) is what its client must hear. The
    claim then stays until the next call with the key takes it over: at once in this process (which no longer holds
    it), in others once it is stale."""
    try:
        memory.core.drop_request(mine)
    except Exception:
        log.warning(
            "%s: could not drop its claim after the call failed; a retry in another process waits until it is "
            "stale (%g s)",
            _named(mine),
            STALE_CLAIM_SECONDS,
            exc_info=True,
        )
    finally:
        _drop_held(_owner(mine).get("nonce"))


def busy(key: str, holder: StoredResult) -> StoreBusyError:
    """The error of a call that waited ``WAIT_SECONDS`` for another call's claim of its key. The holder's machine and
    process id go to the log (stderr), for whoever runs the servers, not to the client."""
    owner = _owner(holder)
    age = (now() - holder.created_at).total_seconds()
    log.warning(
        "%s: still held by process %s on %s after a wait of %g s",
        _named(holder),
        owner.get("pid", "?"),
        owner.get("host", "?"),
        WAIT_SECONDS,
    )
    return StoreBusyError(
        f"idempotency_key {key!r}: a {holder.tool} call with this key is still being written (by another tiermem "
        f"process, for {age:.0f} s); this call wrote nothing. Retry with the same key in a moment to get its result."
    )


def claim_waiting(memory: Memory, agent_id: str, tool: str, key: str, args_sha256: str) -> Claim:
    """``claim``, waiting (in this thread) while another call holds the key: a ``Claim`` with ``result`` or
    ``mine``; ``busy`` raised after ``WAIT_SECONDS``."""
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        got = claim(memory, agent_id, tool, key, args_sha256)
        if got.holder is None:
            return got
        if time.monotonic() >= deadline:
            raise busy(key, got.holder)
        time.sleep(got.poll)


def _stale(record: StoredResult) -> str | None:
    """Why the claim ``record`` is stale (its owner is gone, or it is too old), or None while it holds."""
    age = (now() - record.created_at).total_seconds()
    if age > STALE_CLAIM_SECONDS:
        return f"claimed {age:.0f} s ago, more than {STALE_CLAIM_SECONDS:g} s"
    owner = _owner(record)
    if not owner:
        return "its claim names no owner"
    if owner.get("host") != _machine():
        return None
    pid = owner.get("pid")
    if pid == os.getpid():
        with _held_guard:
            return None if owner.get("nonce") in _held else "its claim was made by an earlier process of this id"
    if not isinstance(pid, int) or not _alive(pid):
        return f"its owner, process {pid} of this machine, is gone"
    return None


def _user_key(record: StoredResult) -> str:
    """The idempotency key as its caller gave it (``request_key`` puts the agent and tool before it)."""
    return record.key.rsplit("\x1f", 1)[-1]


def _named(record: StoredResult) -> str:
    return f"idempotency_key {_user_key(record)!r} of a {record.tool} call"


def _owner(record: StoredResult) -> dict[str, Any]:
    try:
        owner = json.loads(record.result[len(CLAIM_MARK) :])
    except ValueError:
        return {}
    return owner if isinstance(owner, dict) else {}


def _drop_held(nonce: object) -> None:
    with _held_guard:
        _held.discard(str(nonce))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


@functools.cache
def _machine() -> str:
    """This machine as a claim names it: the host name, the process-id namespace (containers on one host may share
    the name, not their process ids) and the kernel's boot id (two hosts, or two boots of one, never share it; two
    hosts may share the rest: a cloned image's host name, the root namespace's number, which is the same everywhere).
    A host without ``/proc`` is named by its host name alone."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.readline().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{namespace}/{boot}"
