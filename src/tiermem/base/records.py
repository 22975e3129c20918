"""Plain frozen values passed between layers. No I/O, no validation against storage."""

from __future__ import annotations

import re
import unicodedata
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from .errors import ValidationError

Role = Literal["user", "assistant", "tool", "system"]
ROLES: tuple[Role, ...] = ("user", "assistant", "tool", "system")

_NAMESPACE = uuid.UUID("5b0f7a52-3c1e-4f5e-9a59-7e2d3c2f7d11")
_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


# -- ids and times ------------------------------------------------------------------


def now() -> datetime:
    return datetime.now(UTC)


def to_us(dt: datetime) -> int:
    """``dt`` (naive: UTC) in microseconds since the epoch, exactly (through no float: a float's rounding moves some
    times a microsecond, and a commit time read back must be the one written)."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return (dt - EPOCH) // _MICROSECOND


def from_us(us: int) -> datetime:
    """The UTC time ``us`` microseconds after the epoch, exactly: ``to_us``'s inverse."""
    return EPOCH + timedelta(microseconds=int(us))  # int: a row may hold a numpy integer


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


def stable_id(prefix: str, *parts: str) -> str:
    """A deterministic id, so concurrent first starts create one row, not two."""
    return f"{prefix}-{uuid.uuid5(_NAMESPACE, chr(0).join(parts))}"


def check_id(value: str, what: str = "id") -> str:
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise ValidationError(f"Invalid {what} {str(value)[:80]!r}: ids come from tool results, e.g. 'passage-…'.")
    return value


# -- records ----------------------------------------------------------------------


@dataclass(frozen=True)
class Agent:
    id: str
    name: str
    system: str
    created_at: datetime
    updated_at: datetime
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Block:
    id: str
    label: str
    value: str
    limit: int
    description: str
    read_only: bool
    version: int
    updated_at: datetime
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BlockVersion:
    block_id: str
    version: int
    label: str
    value: str
    limit: int
    description: str
    read_only: bool
    operation: str
    actor: str
    created_at: datetime


@dataclass(frozen=True)
class Message:
    id: str
    agent_id: str
    conversation_id: str
    seq: int
    role: Role
    content: str
    created_at: datetime
    # Agent-loop payload (tool calls, tool results, ...) as JSON text; "" for plain turns.
    payload: str = ""
    project: str | None = None  # where a hook captured it (a repository root or directory); None: shared


@dataclass(frozen=True)
class ContextWindow:
    """Agent-loop state of one conversation: the in-context window is the system prompt, the
    summary message (if any), then every message with ``seq >= start_seq``."""

    agent_id: str
    conversation_id: str
    start_seq: int = 0
    summary_id: str = ""
    turns: int = 0
    sleeptime_seq: int = 0


@dataclass(frozen=True)
class StoredResult:
    """What an idempotent tool call returned, kept under its key (agent, tool, the caller's key) so that a retry
    with the same key gets the same result; ``args_sha256`` tells a retry from a new call reusing the key."""

    key: str
    agent_id: str
    tool: str
    args_sha256: str
    result: str
    created_at: datetime

    @property
    def pending(self) -> bool:
        """A claim, not a result: a call with this key is writing now (``domain/idempotency.py``)."""
        return self.result.startswith(CLAIM_MARK)


# A claim's ``result`` starts with this (no tool result starts with a NUL), then names its owner (idempotency.py).
CLAIM_MARK = "\x00tiermem/claim "


@dataclass(frozen=True)
class Passage:
    id: str
    agent_id: str
    content: str
    tags: tuple[str, ...]
    created_at: datetime
    # Chunks of one insert share a group id; a single-chunk insert has group_id == id.
    group_id: str = ""
    chunk: int = 0
    project: str | None = None  # the project it belongs to; None: shared by every project


@dataclass(frozen=True)
class Found:
    """A row one search leg found, as the store returns it: what the ranker reads of every candidate, what a
    result shows (a message's role and conversation, a passage's tags), a message's ``seq`` (the order turns were
    logged in: the ranker's neighbour features; None for passages), and the leg's own score: ``cosine``
    (1 - cosine distance) from the vector leg, ``bm25`` from the full-text leg."""

    id: str
    content: str
    created_us: int
    role: str | None = None
    conversation_id: str | None = None
    tags: tuple[str, ...] = ()
    cosine: float | None = None
    bm25: float | None = None
    seq: int | None = None
    plumbing: bool = (
        False  # a message of the agent loop's own plumbing, decided when it was written (``store.query.is_plumbing``)
    )


@dataclass(frozen=True)
class Hit:
    """One search result: its relevance (the calibrated probability, in [0, 1], that it is what the query looks
    for; comparable across queries), the ranker's score (comparable within one search only) and its rank in
    each leg."""

    id: str
    content: str
    created_at: datetime
    score: float
    vector_rank: int | None
    fts_rank: int | None
    role: str | None = None
    tags: tuple[str, ...] = ()
    conversation_id: str | None = None
    relevance: float = 0.0
    linked_to: str | None = None  # a linked memory shown after its hit: that hit's id (``domain.links``)


_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """``text`` with each lone surrogate (an undecodable byte of a host's input, or a ``\\udXXX`` escape without its
    pair) replaced by U+FFFD, as a file's undecodable bytes are (``file_parse``): the text is stored and searched with
    the rest instead of failing on one character."""
    return _SURROGATE.sub("\ufffd", text)


MAX_ROW_CHARS = 10_000_000  # the longest text one stored row holds: what an import stores, what the agent loop writes
# A row's keyword text (its ``text`` column) ends with a line of its Chinese, Japanese and Korean bigrams that starts
# with this (``domain/search/cjk.py`` writes it); the row's own text is what comes before (a store filter on a row's
# text reads that part: ``store/query.py``).
KEYWORD_LINE = "\n\u241f "


def check_text(value: Any, name: str, max_chars: int, advice: str | None = None) -> str:
    """``value`` if it is storable text: a string, at most ``max_chars``, no NUL, valid Unicode. ``advice``: what
    a longer text is told after "<name> has N characters; " (a tool argument's limit and the way round it when none)."""
    if not isinstance(value, str):
        raise ValidationError(f"{name} must be text.")
    if len(value) > max_chars:
        raise ValidationError(
            f"{name} has {len(value)} characters; "
            + (
                advice
                or f"the most one argument may carry is {max_chars} (max_content_chars). Send less text, or split it "
                "into several calls."
            )
        )
    if "\x00" in value:
        raise ValidationError(f"{name} contains a NUL character; remove it.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError(f"{name} is not valid Unicode text (lone surrogate at position {exc.start}).") from exc
    return value


def is_blank(text: str) -> bool:
    """Whether ``text`` shows nothing: it holds only whitespace and invisible format characters (Unicode category Cf:
    zero-width space and joiners, the byte-order mark, direction marks). Such a text is empty wherever an empty one
    is refused; a format character beside visible ones (the joiner inside an emoji sequence) is text like any."""
    return all(c.isspace() or unicodedata.category(c) == "Cf" for c in text)


# -- folders and files (Letta's sources and files) ----------------------------------

FileStatus = Literal["pending", "parsing", "embedding", "completed", "error"]


@dataclass(frozen=True)
class Folder:
    """A folder of files (Letta calls it a source): attached to agents, shared like a block."""

    id: str
    name: str
    description: str = ""
    instructions: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: datetime = field(default_factory=now)
    updated_at: datetime = field(default_factory=now)


@dataclass(frozen=True)
class StoredFile:
    """A file of a folder: its name within the folder, what it was uploaded as, the parsed text's hash and size,
    and how far its processing got (``completed`` only once its chunks are stored)."""

    id: str
    folder_id: str
    name: str
    original_name: str
    file_type: str
    size: int
    sha256: str
    status: FileStatus
    error: str = ""
    chunks: int = 0
    source_path: str = ""  # where a synced or uploaded file came from on disk ("" when not from disk)
    created_at: datetime = field(default_factory=now)
    updated_at: datetime = field(default_factory=now)
