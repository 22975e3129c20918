"""How a block's history is stored: each version as the change from the version before, with whole values
(checkpoints) often enough that reading any version stays cheap. Shared by every core-state backend.

An edit's entry holds its ``Delta`` and only the fields (label, limit, description, read-only) that changed, so
it costs about the size of the change plus ~100 bytes. A checkpoint holds the whole value and every field. The
writer stores a checkpoint when the deltas since the last one would reach the value's size (so checkpoints cost
at most as much again as the deltas: history bytes stay within ~2x the changes), or after ``MAX_STEPS`` deltas
(so a replay applies a bounded number), or when it does not know the version before. ``replay`` turns a run of
entries that starts at a checkpoint back into exact ``BlockVersion`` records.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..base.errors import StoreError
from ..base.records import Block, BlockVersion, from_us, to_us
from .delta import Delta, Text, diff

MAX_STEPS = 10_000


@dataclass(frozen=True)
class Chain:
    """Where a version stands in its run of deltas: ``base`` is the checkpoint's version, ``bytes`` and ``steps``
    the deltas stored since it (this version's included; 0 for the checkpoint itself)."""

    base: int
    bytes: int = 0
    steps: int = 0


@dataclass(frozen=True)
class Entry:
    """One stored version. A checkpoint has ``value`` and every field; a delta entry has ``delta`` and, of the
    fields, only those that differ from the version before (None: unchanged)."""

    block_id: str
    version: int
    operation: str
    actor: str
    created_us: int
    chain: Chain
    value: str | None = None
    delta: Delta | None = None
    label: str | None = None
    limit: int | None = None
    description: str | None = None
    read_only: bool | None = None

    @property
    def checkpoint(self) -> bool:
        return self.value is not None

    def size(self) -> int:
        """Bytes the entry's content takes (its value or delta and the fields it stores), for accounting."""
        texts = (self.value, self.label, self.description, self.operation, self.actor)
        return sum(len(t.encode("utf-8")) for t in texts if t) + (self.delta.size() if self.delta else 0) + 40


def checkpoint(version: BlockVersion) -> Entry:
    return Entry(
        block_id=version.block_id,
        version=version.version,
        operation=version.operation,
        actor=version.actor,
        created_us=to_us(version.created_at),
        chain=Chain(base=version.version),
        value=version.value,
        label=version.label,
        limit=version.limit,
        description=version.description,
        read_only=version.read_only,
    )


def encode(previous: Block | BlockVersion | None, chain: Chain | None, version: BlockVersion) -> Entry:
    """The entry to store for ``version``: a delta from ``previous`` (the version just before, whose ``chain``
    is given), or a checkpoint when there is no previous version or the run of deltas is long enough."""
    if previous is None or chain is None or previous.version != version.version - 1:
        return checkpoint(version)
    delta = diff(previous.value, version.value)
    size = delta.size()
    if chain.bytes + size >= max(len(version.value), 1) or chain.steps + 1 > MAX_STEPS:
        return checkpoint(version)
    return Entry(
        block_id=version.block_id,
        version=version.version,
        operation=version.operation,
        actor=version.actor,
        created_us=to_us(version.created_at),
        chain=Chain(chain.base, chain.bytes + size, chain.steps + 1),
        delta=delta,
        label=version.label if version.label != previous.label else None,
        limit=version.limit if version.limit != previous.limit else None,
        description=version.description if version.description != previous.description else None,
        read_only=version.read_only if version.read_only != previous.read_only else None,
    )


def replay(entries: Iterable[Entry], wanted: range | None = None) -> Iterator[BlockVersion]:
    """The versions of ``entries`` (ascending, starting at a checkpoint, no gaps inside a run of deltas) whose
    number is in ``wanted`` (every one if None), oldest first. A damaged run raises ``StoreError``."""
    text: Text | None = None
    last: BlockVersion | None = None
    for e in entries:
        if e.value is not None:
            text = Text(e.value)
            fields = (e.label or "", e.limit or 0, e.description or "", bool(e.read_only))
        else:
            if text is None or last is None or last.version != e.version - 1 or e.delta is None:
                raise StoreError(
                    f"The history of block {e.block_id} lacks the version before {e.version} (a stored "
                    "change cannot be applied): the history is damaged. Restore it from a backup."
                )
            text.apply(e.delta)
            fields = (
                last.label if e.label is None else e.label,
                last.limit if e.limit is None else e.limit,
                last.description if e.description is None else e.description,
                last.read_only if e.read_only is None else e.read_only,
            )
        keep = wanted is None or e.version in wanted
        current = BlockVersion(
            block_id=e.block_id,
            version=e.version,
            label=fields[0],
            value=text.value() if keep else "",
            limit=fields[1],
            description=fields[2],
            read_only=fields[3],
            operation=e.operation,
            actor=e.actor,
            created_at=from_us(e.created_us),
        )
        last = current
        if keep:
            yield current


# -- the JSON form (object storage) -------------------------------------------------------------------------------


def to_json(e: Entry) -> dict[str, Any]:
    out: dict[str, Any] = {"v": e.version, "op": e.operation, "by": e.actor, "t": e.created_us, "base": e.chain.base}
    if e.value is not None:
        out["value"] = e.value
    if e.delta is not None:
        out["d"] = [e.delta.start, e.delta.tail, e.delta.text]
        out["chain"] = [e.chain.bytes, e.chain.steps]
    for key, val in (("label", e.label), ("limit", e.limit), ("desc", e.description), ("ro", e.read_only)):
        if val is not None:
            out[key] = val
    return out


def from_json(block_id: str, raw: Mapping[str, Any]) -> Entry:
    try:
        d = raw.get("d")
        chain = raw.get("chain") or [0, 0]
        return Entry(
            block_id=block_id,
            version=int(raw["v"]),
            operation=str(raw["op"]),
            actor=str(raw["by"]),
            created_us=int(raw["t"]),
            chain=Chain(int(raw["base"]), int(chain[0]), int(chain[1])),
            value=raw.get("value"),
            delta=Delta(int(d[0]), int(d[1]), str(d[2])) if d is not None else None,
            label=raw.get("label"),
            limit=raw.get("limit"),
            description=raw.get("desc"),
            read_only=raw.get("ro"),
        )
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise StoreError(
            f"A stored history entry of block {block_id} is malformed ({exc}): the history is damaged. "
            "Restore it from a backup."
        ) from exc


def rewrite(kept: Iterable[BlockVersion]) -> list[Entry]:
    """The entries that store exactly ``kept`` (versions of one block, ascending) and nothing else: what forgetting
    past values leaves. A version whose predecessor was forgotten becomes a checkpoint (no delta or checkpoint
    refers to a forgotten value); the rest are encoded afresh, as an edit would have stored them."""
    out: list[Entry] = []
    previous: BlockVersion | None = None
    for v in kept:
        entry = encode(previous, out[-1].chain if out else None, v)
        out.append(entry)
        previous = v
    return out
