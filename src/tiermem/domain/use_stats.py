"""What is hot and what is cold in one agent's memory (``tiermem stats``, the inspector's summary): per kind
(archival passages, recall messages, blocks, files) how many memories are hot, warm and cold, and the hottest and
the coldest of them, each with a short preview. The temperature is ``uses.Rules``'; a memory never used is cold.
Only memories that exist are counted or shown: a record whose memory is gone (forgotten by another process while
this one held its use unflushed, see ``uses.py``) is left out. An archival passage is one insert, however many chunks
it was cut into (as the timeline counts it): it is counted and listed once, by its first chunk's id, and the uses of
any of its chunks are its uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..base.records import from_us, to_us
from ..core.uses import KINDS, Use, merged
from ..store import Filter
from .uses import TEMPERATURES, Temperature

if TYPE_CHECKING:
    from .memory import Memory

PREVIEW = 80  # characters of a memory shown beside its uses


@dataclass(frozen=True)
class Used:
    id: str
    kind: str
    temperature: Temperature
    score: float
    count: int
    last_used: datetime | None
    preview: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "temperature": self.temperature,
            "score": round(self.score, 3),
            "uses": self.count,
            "last_used": self.last_used.isoformat(timespec="seconds") if self.last_used else None,
            "preview": self.preview,
        }


@dataclass(frozen=True)
class UseStats:
    at: datetime
    half_life_days: float
    thresholds: tuple[float, float]  # (hot, warm)
    counts: dict[str, dict[str, int]]  # kind -> {hot, warm, cold, total}
    hottest: list[Used]
    coldest: list[Used]

    def as_dict(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat(timespec="seconds"),
            "half_life_days": self.half_life_days,
            "hot_score": self.thresholds[0],
            "warm_score": self.thresholds[1],
            "counts": self.counts,
            "hottest": [u.as_dict() for u in self.hottest],
            "coldest": [u.as_dict() for u in self.coldest],
        }


def use_stats(memory: Memory, agent_id: str, *, top: int = 5, at: datetime | None = None) -> UseStats:
    """The agent's memories by temperature at ``at`` (now), with the ``top`` hottest and coldest."""
    uses = memory.uses
    rules = uses.rules
    at_us = to_us(at) if at is not None else uses.clock()
    blocks = {b.id: b.label for b in memory.blocks(agent_id)}
    files = {v.file_id: v.name for v in memory.files.state(agent_id).files}
    passages = _Passages.of(memory, agent_id)
    records = _of_existing(memory, agent_id, uses.records(agent_id=agent_id), {**blocks, **files}, passages)
    messages, _chunks, _tags = memory.archive.counts(agent_id)
    totals = {"passage": len(passages.created), "message": messages, "block": len(blocks), "file": len(files)}
    counts: dict[str, dict[str, int]] = {k: {t: 0 for t in TEMPERATURES} | {"total": totals[k]} for k in KINDS}
    scored = sorted(((rules.score(u, at_us), u) for u in records.values()), key=lambda p: (-p[0], p[1].id))
    for _score, use in scored:
        temperature = rules.temperature(use, at_us)
        if use.kind in counts and temperature != "cold":
            counts[use.kind][temperature] += 1
    for kind in KINDS:  # the rest of each kind is cold: used long ago, or never
        c = counts[kind]
        c["cold"] = max(0, c["total"] - c["hot"] - c["warm"])
    hottest = [p for p in scored if p[0] >= rules.warm][:top]
    hot_ids = {u.id for _, u in hottest}
    never = passages.never_used(records, top)  # the coldest of all: archival passages never used, oldest first
    coldest = [p for p in reversed(scored) if p[1].id not in hot_ids][: max(0, top - len(never))]
    unused = [Use(i, "passage", agent_id, 0, 0, 0.0) for i in never]
    texts = _previews(memory, agent_id, [u for _, u in hottest + coldest] + unused, {**blocks, **files})
    return UseStats(
        at=from_us(at_us),
        half_life_days=rules.half_life_days,
        thresholds=(rules.hot, rules.warm),
        counts=counts,
        hottest=[_used(u, s, rules.temperature(u, at_us), texts) for s, u in hottest],
        coldest=[Used(i, "passage", "cold", 0.0, 0, None, texts.get(i, "")) for i in never]
        + [_used(u, s, rules.temperature(u, at_us), texts) for s, u in coldest],
    )


@dataclass(frozen=True)
class _Passages:
    """The agent's archival passages, one per insert: each chunk's passage (its insert's first chunk id), and when
    each passage was stored. One read of three columns (the timeline reads the same)."""

    passage_of: dict[str, str]  # chunk id -> the id of the passage it is part of (its own for the first chunk)
    created: dict[str, int]  # passage id -> when it was stored (microseconds)

    @classmethod
    def of(cls, memory: Memory, agent_id: str) -> _Passages:
        passage_of: dict[str, str] = {}
        created: dict[str, int] = {}
        for r in memory.archive.rows.columns_of("passages", agent_id, ["id", "group_id", "created_us"]):
            group = str(r.get("group_id") or r["id"])
            passage_of[str(r["id"])] = group
            created[group] = min(created.get(group, int(r["created_us"])), int(r["created_us"]))
        return cls(passage_of, created)

    def never_used(self, records: dict[str, Use], most: int) -> list[str]:
        """Up to ``most`` passages no chunk of which was used, oldest first."""
        unused = (p for p in self.created if p not in records)
        return sorted(unused, key=lambda p: (self.created[p], p))[: max(0, most)]


def _of_existing(
    memory: Memory, agent_id: str, records: dict[str, Use], named: dict[str, str], passages: _Passages
) -> dict[str, Use]:
    """The records whose memory is the agent's and exists: its messages (one read), its passages (each chunk's uses
    merged into its passage's, ``passages``), its blocks and files (``named``)."""
    alive = {i for i, u in records.items() if u.kind in ("block", "file") and i in named}
    rows = {i: u.kind for i, u in records.items() if u.kind == "message"}
    if rows:
        alive |= memory.existing(rows, agent_id=agent_id)
    out = {i: u for i, u in records.items() if i in alive}
    for use in records.values():
        passage = passages.passage_of.get(use.id) if use.kind == "passage" else None
        if passage is not None:
            mine = Use(passage, use.kind, use.agent_id, use.count, use.last_us, use.heat)
            known = out.get(passage)
            out[passage] = mine if known is None else merged(known, mine, memory.uses.rules.half_life_us)
    return out


def _used(use: Use, score: float, temperature: Temperature, texts: dict[str, str]) -> Used:
    return Used(use.id, use.kind, temperature, score, use.count, from_us(use.last_us), texts.get(use.id, ""))


def _previews(memory: Memory, agent_id: str, shown: list[Use], names: dict[str, str]) -> dict[str, str]:
    """Each memory's first characters (a block's label, a file's name); a forgotten one has none."""
    out = {u.id: names[u.id] for u in shown if u.id in names}
    for kind, table in (("passage", "passages"), ("message", "messages")):
        ids = tuple(u.id for u in shown if u.kind == kind)
        if ids:
            for row in memory.archive.rows.rows_where(table, Filter(agent_id=agent_id, ids=ids)):
                out[row["id"]] = _short(row["content"])
    return out


def _short(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW else flat[: PREVIEW - 1] + "…"
