"""One turn at a time per agent and conversation among this machine's processes (a local store).

``AgentLoop.turn`` holds an asyncio lock per conversation, which keeps one process's turns apart; two processes on
one data directory (two ``tiermem chat``, a chat beside a server) also take a lock file per agent and conversation,
``<store directory>/.tiermem-turns/<hash>.lock``, which holds the note of the process that has it. It is tried
without waiting and again every ``POLL`` seconds (the event loop is never blocked, so a waiting turn can be
cancelled), and given up after ``wait`` seconds with a ``ConflictError`` naming the holder; nothing is sent or
logged then. A process that dies lets go of it. Object storage has no such lock (docs/agent-loop.md).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator
from contextlib import ExitStack, asynccontextmanager
from pathlib import Path

import anyio

from ..base.errors import ConflictError, StoreError
from ..base.files import locked_unless_held
from ..base.records import now

POLL = 0.2  # seconds between two tries of a lock another process holds


def lock_path(directory: Path, agent_id: str, conversation_id: str) -> Path:
    """The lock file of one agent's conversation (a conversation id is any text: its digest names the file)."""
    digest = hashlib.sha256(f"{agent_id}\0{conversation_id}".encode()).hexdigest()[:32]
    return directory / f"{digest}.lock"


@asynccontextmanager
async def turn_lock(directory: Path | None, agent_id: str, conversation_id: str, wait: float) -> AsyncIterator[None]:
    """Held for one turn; ``directory`` None (object storage, a loop without a data directory): nothing to hold."""
    if directory is None:
        yield
        return
    path = lock_path(directory, agent_id, conversation_id)
    note = f"pid {os.getpid()}, turn started {now().isoformat(timespec='seconds')}"
    held = ExitStack()

    def take() -> str | None:
        path.parent.mkdir(parents=True, exist_ok=True)
        return held.enter_context(locked_unless_held(path, note))

    deadline = anyio.current_time() + wait
    while True:
        try:
            holder = await anyio.to_thread.run_sync(take)
        except OSError as exc:
            held.close()
            raise StoreError(
                f"Could not open the lock file {path}: {exc}. Check that the data directory is writable."
            ) from exc
        if holder is None:
            break
        held.close()  # not ours: let go of the file, try again
        if anyio.current_time() >= deadline:
            raise ConflictError(
                f"Another process ({holder}) is running a turn in conversation {conversation_id!r} of this agent, "
                f"and it did not finish within {wait:g} s. Nothing was sent or logged: send the message again when "
                "that turn has finished, or use another conversation."
            )
        await anyio.sleep(POLL)
    try:
        yield
    finally:
        held.close()  # truncating and unlocking a local file: quick, and done even when the turn was cancelled
