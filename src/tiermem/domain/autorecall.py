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


class _KeyLock:
    """One key's lock and how many callers hold it or wait for it."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0


_locks: dict[str, _KeyLock] = {}  # key -> its lock while a caller holds or waits for it; empty when idle
_locks_guard = threading.Lock()


@contextmanager
def _lock(key: str) -> Iterator[None]:
    """Callers with the same ``key`` run one at a time. The key's lock stays in ``_locks`` while any caller holds it
    or waits for it (counted under the guard), so a caller that comes meanwhile waits on the same lock; the last one
    out removes it."""
    with _locks_guard:
        entry = _locks.get(key)
        if entry is None:
            entry = _locks[key] = _KeyLock()
        entry.users += 1
    try:
        with entry.lock:
            yield
    finally:
        with _locks_guard:
            entry.users -= 1
            if entry.users == 0:
                del _locks[key]


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


HEAD = "Memories from tiermem that may be relevant to this prompt (found automatically; use them if they help):"
MIN_CUT = 40  # fewest characters of a memory worth showing cut


def render(recalled: list[Recalled], max_chars: int) -> str:
    """The context added to the prompt ("" for none): a head line, then one line per memory, best first, all within
    ``max_chars`` (the note on memories not shown included). Memories are shown in order: one that does not fit
    whole is shown cut to the room left (marked as cut, with its id and length) when at least ``MIN_CUT`` of its
    characters fit, and it and the ones after it are counted in the note otherwise; a worse memory is never shown in
    place of a better one. ``max_chars`` of 500 or more (the config's floor) always shows the best memory."""
    if not recalled:
        return ""
    lines = [HEAD]
    used = len(HEAD)
    left = 0
    for i, r in enumerate(recalled):
        after = len(recalled) - i - 1  # memories after this one: the note counts them if they do not fit
        reserve = len(_note(after)) + 1 if after else 0
        line = _line(r)
        if used + 1 + len(line) + reserve <= max_chars:
            lines.append(line)
            used += 1 + len(line)
            continue
        cut = _cut_line(r, max_chars - used - 1 - reserve)
        if cut is None:
            left = after + 1
        else:
            lines.append(cut)
            left = after
        break
    if len(lines) == 1:
        return ""  # not even the best memory fits (max_chars below the config's floor)
    if left:
        lines.append(_note(left))
    return "\n".join(lines)


def _where(r: Recalled) -> str:
    return "archival memory" if r.source == "archival" else f"past conversation, {r.role}"


def _line(r: Recalled) -> str:
    return f"- [{_where(r)}, {r.created_at:%Y-%m-%d}, relevance {r.relevance:.2f}] {' '.join(r.content.split())}"


def _cut_line(r: Recalled, room: int) -> str | None:
    """``r`` cut to fit ``room`` characters, marked as cut, with its id and the tool that finds it whole; None when
    fewer than ``MIN_CUT`` of its characters would fit."""
    text = " ".join(r.content.split())
    search = "archival_memory_search" if r.source == "archival" else "conversation_search"
    mark = (f"- [{_where(r)}, {r.created_at:%Y-%m-%d}, relevance {r.relevance:.2f}, CUT: the first {{}} of "
            f"{len(text)} characters; id {r.id}; {search} finds it whole] {{}}…")
    avail = room - len(mark.format("", ""))  # for the kept text and its count
    keep = avail - len(str(avail))
    if keep < MIN_CUT:
        return None
    return mark.format(keep, text[:keep])


def _note(left: int) -> str:
    return f"({left} more not shown: search for them with archival_memory_search or conversation_search.)"


def _cut(text: str, most: int) -> str:
    note = f"\n[... {{}} more characters not logged]"
    keep = most - len(note.format(len(text)))
    return text[:keep] + note.format(len(text) - keep)
