"""Where the object-storage core state keeps what, and the objects' framing (a block's head, a history segment,
an agent's list of attached blocks). The fields of agents, blocks, idempotency records and conversation state
are those of their rows (rows.py: the mappers both core backends share), metadata as a JSON object.

Layout under ``<uri>/core/``:

- ``format.json``: written once when the core state is created here (or moved here); its presence says so.
- ``agents/<agent id>.json``: an ``Agent``.
- ``attached/<agent id>.json``: the agent's blocks in order (``Attached``), each with its label as last known,
  so an edit finds its block with one read (the block's own label is checked; a stale one is looked up anew).
- ``blocks/<block id>.json``: a ``Head``: the block, the agents it is attached to (a superset: checked against
  their ``attached``), and the newest history entries (``tail``); older entries are in sealed segments.
- ``history/<block id>/<first>-<last>.json``: a sealed ``Segment`` of history entries, never changed.
- ``requests/<agent id>/<sha256 of key>.json``, ``conversations/<agent id>/<sha256 of id>.json``: idempotency
  records and agent-loop conversation state, as the rows the other backends keep.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..base.errors import StoreError
from ..base.records import Agent, Block
from .history import Chain, Entry, from_json, to_json
from .rows import STORED_HINT, agent_from_row, agent_row, block_from_row, block_row, with_metadata

ROOT = "core"
FORMAT_PATH = f"{ROOT}/format.json"
FORMAT = 1
AGENTS, ATTACHED, BLOCKS, HISTORY = f"{ROOT}/agents/", f"{ROOT}/attached/", f"{ROOT}/blocks/", f"{ROOT}/history/"
REQUESTS, CONVERSATIONS = f"{ROOT}/requests/", f"{ROOT}/conversations/"


def agent_path(agent_id: str) -> str:
    return f"{AGENTS}{agent_id}.json"


def attached_path(agent_id: str) -> str:
    return f"{ATTACHED}{agent_id}.json"


def head_path(block_id: str) -> str:
    return f"{BLOCKS}{block_id}.json"


def segment_path(block_id: str, first: int, last: int) -> str:
    return f"{HISTORY}{block_id}/{first:012d}-{last:012d}.json"


def segment_range(path: str) -> tuple[int, int] | None:
    """(first, last) of a segment's path; None for anything else."""
    name = path.rsplit("/", 1)[-1].removesuffix(".json")
    first, sep, last = name.partition("-")
    return (int(first), int(last)) if sep and first.isdigit() and last.isdigit() else None


def request_path(key: str) -> str:
    """Under the agent's folder: ``Memory`` keys a request ``<agent id>\\x1f<tool>\\x1f<key>``."""
    agent = key.split("\x1f", 1)[0] if "\x1f" in key else "_"
    return f"{REQUESTS}{agent}/{hashlib.sha256(key.encode('utf-8')).hexdigest()}.json"


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
    the current version stands in its run of deltas (None: unknown, so the next edit stores a checkpoint)."""

    block: Block
    agents: tuple[str, ...] = ()
    sealed: int = 0
    tail: tuple[Entry, ...] = ()
    chain: Chain | None = None
    tail_bytes: int = field(default=0, compare=False)


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
    return dumps({"format": FORMAT, "block": block_json(h.block), "agents": list(h.agents), "sealed": h.sealed,
                  "chain": chain, "tail": [to_json(e) for e in h.tail]})


def head_of(data: bytes) -> Head:
    r = loads(data, "block")
    try:
        block = block_from_row(r["block"], STORED_HINT)
        tail = tuple(from_json(block.id, e) for e in r.get("tail") or ())
        chain = r.get("chain")
        return Head(block=block, agents=tuple(str(a) for a in r.get("agents") or ()), sealed=int(r.get("sealed", 0)),
                    tail=tail, chain=Chain(int(chain[0]), int(chain[1]), int(chain[2])) if chain else None,
                    tail_bytes=sum(e.size() for e in tail))
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise StoreError(f"A stored block is malformed ({exc}); restore it from a backup.") from exc


def segment_json(block_id: str, entries: tuple[Entry, ...]) -> bytes:
    return dumps({"block_id": block_id, "entries": [to_json(e) for e in entries]})


def segment_of(block_id: str, data: bytes) -> list[Entry]:
    r = loads(data, f"history of block {block_id}")
    return [from_json(block_id, e) for e in r.get("entries") or ()]
