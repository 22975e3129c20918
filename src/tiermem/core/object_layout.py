"""Where the object-storage core state keeps what, and the objects' framing (a block's head, a history segment,
an agent's list of attached blocks). The fields of agents, blocks, idempotency records and conversation state
are those of their rows (rows.py: the mappers both core backends share), metadata as a JSON object.

Layout under ``<uri>/core/``:

- ``format.json``: written once when the core state is created here (or moved here); its presence says so.
- ``agents/<agent id>.json``: an ``Agent``.
- ``attached/<agent id>.json``: the agent's blocks in order (``Attached``), each with its label as last known,
  so an edit finds its block with one read (the block's own label is checked; a stale one is looked up anew).
- ``blocks/<block id>.json``: a ``Head``: the block, the agents it is attached to (a superset: checked against
  their ``attached``), and the newest history entries (``tail``); older entries are in sealed segments. A value of
  ``INLINE_CHARS`` or more is not in the head: the head names ``base``, the version whose whole value is stored at
  ``values/<block id>/<base>.txt`` (written once, never changed), and its tail holds every change since then, so
  an edit writes and reads about the size of its change plus the tail (up to ~16 KB), not the whole value; a
  reader rebuilds the value from its own copy of an earlier version, or from the base, and checks it against the
  length and CRC-32 the head records.
- ``values/<block id>/<version>.txt``: a block's whole value at that version (UTF-8), the base of later heads.
- ``history/<block id>/<first>-<last>.json``: a sealed ``Segment`` of history entries, never changed.
- ``requests/<agent id>/<sha256 of key>.json``, ``conversations/<agent id>/<sha256 of id>.json``: idempotency
  records and agent-loop conversation state, as the rows the other backends keep. (Versions before 2026-11-24 18:31
  kept requests at ``requests/<sha256 of key>.json``: ``old_request_path``; ``format.json``'s ``"requests": 2``
  says they have been moved; a miss looks there only while a listing shows any: object_requests.py.)
- ``leases/upkeep.json``: who runs the recall and archival store's background upkeep now, and until when
  (lease.py); not core state, kept here because every replica can write here conditionally.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..base.errors import StoreError
from ..base.records import Agent, Block
from .delta import Text, apply
from .history import Chain, Entry, from_json, to_json
from .rows import STORED_HINT, agent_from_row, agent_row, block_from_row, block_row, with_metadata

ROOT = "core"
FORMAT_PATH = f"{ROOT}/format.json"
FORMAT = 1
AGENTS, ATTACHED, BLOCKS, HISTORY = f"{ROOT}/agents/", f"{ROOT}/attached/", f"{ROOT}/blocks/", f"{ROOT}/history/"
REQUESTS, CONVERSATIONS = f"{ROOT}/requests/", f"{ROOT}/conversations/"
VALUES = f"{ROOT}/values/"
INLINE_CHARS = 16 * 1024  # a value this long or longer is kept as a base object plus the head's tail of changes


def agent_path(agent_id: str) -> str:
    return f"{AGENTS}{agent_id}.json"


def attached_path(agent_id: str) -> str:
    return f"{ATTACHED}{agent_id}.json"


def head_path(block_id: str) -> str:
    return f"{BLOCKS}{block_id}.json"


def segment_path(block_id: str, first: int, last: int) -> str:
    return f"{HISTORY}{block_id}/{first:012d}-{last:012d}.json"


def value_path(block_id: str, version: int) -> str:
    return f"{VALUES}{block_id}/{version:012d}.txt"


def value_version(path: str) -> int | None:
    """The version of a ``values/`` object's path; None for anything else."""
    name = path.rsplit("/", 1)[-1].removesuffix(".txt")
    return int(name) if name.isdigit() else None


def segment_range(path: str) -> tuple[int, int] | None:
    """(first, last) of a segment's path; None for anything else."""
    name = path.rsplit("/", 1)[-1].removesuffix(".json")
    first, sep, last = name.partition("-")
    return (int(first), int(last)) if sep and first.isdigit() and last.isdigit() else None


def request_path(key: str) -> str:
    """Under the agent's folder: ``Memory`` keys a request ``<agent id>\\x1f<tool>\\x1f<key>``."""
    agent = key.split("\x1f", 1)[0] if "\x1f" in key else "_"
    return f"{REQUESTS}{agent}/{hashlib.sha256(key.encode('utf-8')).hexdigest()}.json"


def old_request_path(key: str) -> str:
    """Where versions before requests were kept per agent stored a request's record."""
    return f"{REQUESTS}{hashlib.sha256(key.encode('utf-8')).hexdigest()}.json"


REQUESTS_LAYOUT = 2  # format.json's "requests": records are under their agent's folder


def conversation_path(agent_id: str, conversation_id: str) -> str:
    return f"{CONVERSATIONS}{agent_id}/{hashlib.sha256(conversation_id.encode('utf-8')).hexdigest()}.json"


def id_of(path: str) -> str:
    """The id in an ``agents/``, ``attached/`` or ``blocks/`` object's path."""
    return path.rsplit("/", 1)[-1].removesuffix(".json")


@dataclass(frozen=True)
class Link:
    """One attached block: its id, its label as last written here, when it was attached."""

    block_id: str
    label: str
    created_us: int


@dataclass(frozen=True)
class Attached:
    agent_id: str
    links: tuple[Link, ...] = ()

    def ids(self) -> list[str]:
        return [link.block_id for link in self.links]


@dataclass(frozen=True)
class Head:
    """A block as stored: the value, the agents it may be attached to, and its newest history entries.

    Versions ``1..sealed`` are in sealed segments, ``sealed + 1..block.version`` in ``tail``; ``chain`` is where
    the current version stands in its run of deltas (None: unknown, so the next edit stores a checkpoint). ``base``
    is the version whose whole value is stored at ``value_path`` (0: none); while it equals ``sealed`` and the value
    is long, the head is stored without the value (``by_reference``)."""

    block: Block
    agents: tuple[str, ...] = ()
    sealed: int = 0
    tail: tuple[Entry, ...] = ()
    chain: Chain | None = None
    tail_bytes: int = field(default=0, compare=False)
    base: int = 0
    value_crc: int | None = field(default=None, compare=False)  # ``checksum(block.value)`` when already known

    def by_reference(self) -> bool:
        """True if this head is stored without its value: the value is long, and the base plus the tail rebuild it."""
        return (
            self.base > 0
            and self.base == self.sealed
            and len(self.block.value) >= INLINE_CHARS
            and [e.version for e in self.tail] == list(range(self.sealed + 1, self.block.version + 1))
        )


Snapshots = Callable[[str, int], str]  # (block id, version) -> that version's whole value from ``value_path``


def checksum(value: str) -> int:
    return zlib.crc32(value.encode("utf-8"))


def checksum_after(crc: int | None, entries: Sequence[Entry], length: int) -> int | None:
    """The checksum after ``entries`` applied to a value of ``length`` characters whose checksum is ``crc``, when
    every entry is an append (it keeps the whole value before it): the CRC of the appended text continues the old
    one, so an append costs its own size, not the value's. None when that is not so (compute it whole)."""
    for e in entries:
        d = e.delta
        if crc is None or d is None or d.start != length or d.tail:
            return None
        crc = zlib.crc32(d.text.encode("utf-8"), crc)
        length += len(d.text)
    return crc


def dumps(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def loads(data: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise StoreError(f"The stored {what} is not valid JSON ({exc}); restore it from a backup.") from exc
    if not isinstance(value, dict):
        raise StoreError(f"The stored {what} is not a JSON object; restore it from a backup.")
    return value


def agent_json(a: Agent) -> bytes:
    return dumps(with_metadata(agent_row(a), a.metadata))


def agent_of(data: bytes) -> Agent:
    return agent_from_row(loads(data, "agent"), STORED_HINT)


def attached_json(a: Attached) -> bytes:
    return dumps({"agent_id": a.agent_id, "blocks": [[x.block_id, x.label, x.created_us] for x in a.links]})


def attached_of(data: bytes) -> Attached:
    r = loads(data, "list of attached blocks")
    try:
        return Attached(str(r["agent_id"]), tuple(Link(str(b), str(lab), int(t)) for b, lab, t in r["blocks"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"A stored list of attached blocks is malformed ({exc}); restore it from a backup.") from exc


def block_json(b: Block) -> dict[str, Any]:
    return with_metadata(block_row(b), b.metadata)


def head_json(h: Head) -> bytes:
    chain = [h.chain.base, h.chain.bytes, h.chain.steps] if h.chain is not None else None
    block = block_json(h.block)
    out: dict[str, Any] = {
        "format": FORMAT,
        "block": block,
        "agents": list(h.agents),
        "sealed": h.sealed,
        "chain": chain,
        "tail": [to_json(e) for e in h.tail],
    }
    if h.base:
        out["base"] = h.base
    if h.by_reference():
        del block["value"]
        crc = h.value_crc if h.value_crc is not None else checksum(h.block.value)
        out["value_chars"], out["value_crc"] = len(h.block.value), crc
    return dumps(out)


def head_of(data: bytes, snapshots: Snapshots | None = None, known: Callable[[str], Head | None] | None = None) -> Head:
    """The head stored as ``data``. One stored without its value (``Head.by_reference``) gets it rebuilt from
    ``known(block id)`` (an earlier head of the block this reader holds) if the tail reaches back to it, else
    from ``snapshots`` (its base); either way checked against the recorded length and CRC-32."""
    r = loads(data, "block")
    try:
        raw = r["block"]
        block_id = str(raw["id"])
        tail = tuple(from_json(block_id, e) for e in r.get("tail") or ())
        base, sealed = int(r.get("base", 0)), int(r.get("sealed", 0))
        crc: int | None = None
        if "value" not in raw:
            if snapshots is None:
                raise StoreError(f"Block {block_id} is stored without its value and this reader cannot fetch it.")
            crc = int(r["value_crc"])
            raw = {
                **raw,
                "value": _rebuild(
                    block_id,
                    base,
                    tail,
                    int(r["value_chars"]),
                    crc,
                    snapshots,
                    known(block_id) if known is not None else None,
                ),
            }
        block = block_from_row(raw, STORED_HINT)
        chain = r.get("chain")
        return Head(
            block=block,
            agents=tuple(str(a) for a in r.get("agents") or ()),
            sealed=sealed,
            tail=tail,
            chain=Chain(int(chain[0]), int(chain[1]), int(chain[2])) if chain else None,
            tail_bytes=sum(e.size() for e in tail),
            base=base,
            value_crc=crc,
        )
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise StoreError(f"A stored block is malformed ({exc}); restore it from a backup.") from exc


def _rebuild(
    block_id: str, base: int, tail: tuple[Entry, ...], chars: int, crc: int, snapshots: Snapshots, known: Head | None
) -> str:
    if known is not None and known.block.id == block_id and base <= known.block.version:
        newer = [e for e in tail if e.version > known.block.version]
        value = _replay(known.block.value, newer)
        if len(value) == chars:
            after = checksum_after(known.value_crc, newer, len(known.block.value))
            if (after if after is not None else checksum(value)) == crc:
                return value
    value = _replay(snapshots(block_id, base), list(tail))
    if len(value) != chars or checksum(value) != crc:
        raise StoreError(
            f"The stored value of block {block_id} does not match its checksum (base version {base} "
            "and the changes since): it is damaged. Restore it from a backup."
        )
    return value


def _replay(value: str, entries: list[Entry]) -> str:
    """``value`` with ``entries`` (the consecutive versions after it) applied."""
    if len(entries) <= 2:
        for e in entries:
            value = e.value if e.value is not None else apply(value, e.delta) if e.delta is not None else value
        return value
    text = Text(value)
    for e in entries:
        if e.value is not None:
            text = Text(e.value)
        elif e.delta is not None:
            text.apply(e.delta)
    return text.value()


def segment_json(block_id: str, entries: tuple[Entry, ...]) -> bytes:
    return dumps({"block_id": block_id, "entries": [to_json(e) for e in entries]})


def segment_of(block_id: str, data: bytes) -> list[Entry]:
    r = loads(data, f"history of block {block_id}")
    return [from_json(block_id, e) for e in r.get("entries") or ()]
