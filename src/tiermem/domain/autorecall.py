"""Memory that works on its own: the turns a host's hooks report go to recall memory, and each prompt gets the
memories relevant to it.

``log_turn`` appends one user prompt or assistant reply to recall memory under the host's session id (the
conversation), once: the idempotency key is the session, the turn and a digest of the text, so a hook that fires
again writes nothing. ``recall`` searches archival and recall memory with the prompt, through the same ranked search
the tools use, leaves out the prompt's own session and the prompt itself, and keeps the hits whose calibrated
relevance (``Hit.relevance``, in [0, 1], comparable across queries) reaches the threshold: a prompt unrelated to
anything stored gets nothing.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from ..base.records import now, to_us

if TYPE_CHECKING:
    from .memory import Memory

HOOK_TOOL = "hook"  # the idempotency keys of hook turns are stored under this tool name
QUERY_CHARS = 2000  # the start of a long prompt is the query (a search reads at most ~256 tokens of it anyway)
CANDIDATES = 8  # hits asked of each search before the threshold


@dataclass(frozen=True)
class RecallSettings:
    threshold: float  # relevance in [0, 1] a hit needs to be added to a prompt
    limit: int  # most memories added to one prompt
    max_chars: int  # most characters of memories added to one prompt


Source = Literal["archival", "recall"]


@dataclass(frozen=True)
class Recalled:
    id: str  # the passage's or message's id
    source: Source
    content: str
    created_at: datetime
    relevance: float
    role: str | None = None


def log_turn(memory: Memory, agent_id: str, *, session: str, turn: str, role: Literal["user", "assistant"],
             content: str, at: datetime | None = None) -> bool:
    """Append one turn to recall memory (conversation = ``session``, time ``at``: when the hook reported it), once;
    False when it was already logged."""
    text = content if len(content) <= memory.max_content_chars else _cut(content, memory.max_content_chars)
    digest = hashlib.sha256(text.encode()).hexdigest()
    key = f"{session}:{turn}:{role}:{digest[:16]}"
    with _lock(key):  # a hook fired twice at once writes once
        if memory.stored_result(agent_id, HOOK_TOOL, key, digest) is not None:
            return False
        when = at or now()
        logged = memory.archive.log_messages(agent_id, [{
            "role": role, "content": text, "conversation_id": session, "timestamp": when.isoformat(),
            "seq": to_us(when) * 1000}])  # ordered by when the hook reported it, not by when it was written
        memory.store_result(agent_id, HOOK_TOOL, key, digest, logged[0].id)
    return True


_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


@contextmanager
def _lock(key: str) -> Iterator[None]:
    with _locks_guard:
        lock = _locks.setdefault(key, threading.Lock())
    try:
        with lock:
            yield
    finally:
        with _locks_guard:
            if not lock.locked():
                _locks.pop(key, None)


def recall(memory: Memory, agent_id: str, prompt: str, *, session: str, settings: RecallSettings) -> list[Recalled]:
    """The memories relevant to ``prompt`` (archival passages and past turns of other sessions), best first."""
    query = prompt.strip()[:QUERY_CHARS]
    if not query:
        return []
    archive = memory.archive
    passages = archive.search(agent_id, query, top_k=CANDIDATES).hits
    turns = archive.conversation_search(agent_id, query, limit=CANDIDATES, exclude_conversation=session).hits
    archival: Source = "archival"
    past: Source = "recall"
    found = [
        Recalled(id=h.id, source=source, content=h.content, created_at=h.created_at, relevance=h.relevance,
                 role=h.role)
        for h, source in [(h, archival) for h in passages] + [(h, past) for h in turns]
        if h.relevance >= settings.threshold and h.content.strip() != prompt.strip() and h.conversation_id != session
    ]
    found.sort(key=lambda r: -r.relevance)
    return found[: settings.limit]


def render(recalled: list[Recalled], max_chars: int) -> str:
    """The context added to the prompt ("" for none): one line per memory, whole memories only, within ``max_chars``."""
    if not recalled:
        return ""
    head = "Memories from tiermem that may be relevant to this prompt (found automatically; use them if they help):"
    lines = [head]
    left = 0
    for r in recalled:
        where = "archival memory" if r.source == "archival" else f"past conversation, {r.role}"
        line = f"- [{where}, {r.created_at:%Y-%m-%d}, relevance {r.relevance:.2f}] {' '.join(r.content.split())}"
        if len("\n".join([*lines, line])) > max_chars:
            left += 1
            continue
        lines.append(line)
    if left:
        lines.append(f"({left} more not shown: search for them with archival_memory_search or conversation_search.)")
    return "\n".join(lines) if len(lines) > 1 + bool(left) else ""


def _cut(text: str, most: int) -> str:
    note = f"\n[... {{}} more characters not logged]"
    keep = most - len(note.format(len(text)))
    return text[:keep] + note.format(len(text) - keep)
