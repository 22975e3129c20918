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
taker writes again, the one case where a write may be stored twice (a process killed mid-write).
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

from ..base.errors import StoreBusyError, ValidationError
from ..base.records import CLAIM_MARK, StoredResult, now
from .memory import request_key

if TYPE_CHECKING:
    from .memory import Memory

log = logging.getLogger(__name__)

WAIT_SECONDS = 30.0  # how long a call waits for another call's claim of its key before it is told to retry
STALE_CLAIM_SECONDS = 300.0  # a claim this old is taken over whoever holds it (an owner on another machine died)

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
    """Keep ``result`` under the key in place of the claim ``mine``, so a retry with it gets the same answer."""
    try:
        memory.core.put_request(replace(mine, result=result, created_at=now()), mine)
    finally:
        _drop_held(_owner(mine).get("nonce"))


def release(memory: Memory, agent_id: str, mine: StoredResult) -> None:
    """Drop the claim ``mine`` (its call failed and wrote nothing): a retry with the key may write."""
    try:
        memory.core.drop_request(mine)
    finally:
        _drop_held(_owner(mine).get("nonce"))


def busy(key: str, holder: StoredResult) -> StoreBusyError:
    """The error of a call that waited ``WAIT_SECONDS`` for another call's claim of its key."""
    owner = _owner(holder)
    age = (now() - holder.created_at).total_seconds()
    return StoreBusyError(
        f"idempotency_key {key!r}: a {holder.tool} call with this key is still being written (by process "
        f"{owner.get('pid', '?')} on {str(owner.get('host', '?')).split('/')[0]}, for {age:.0f} s); this call wrote "
        "nothing. Retry with the same key in a moment to get its result."
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
    """This machine as a claim names it: the host name and the process-id namespace (containers on one host share
    the name, not their process ids)."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return f"{socket.gethostname()}/{namespace}"
