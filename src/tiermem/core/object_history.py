"""Block history on object storage: the sealed segments behind a block's head, read back as exact versions.

A head keeps its newest entries in ``tail``; once they pass ``SEAL_BYTES`` the next edit writes them as one
segment (``create``: never overwritten) and commits a head whose ``sealed`` covers them. The segment is written
before the head, so a committed head never points past what is stored. A writer that loses the head's race may
leave a segment the winner did not seal (an orphan); its range always starts where a committed head's sealed
versions ended and ends before the chain's next segment does, so walking down from ``sealed`` (the segment
ending nearest below, the longest one of those) never takes it. Upkeep (``merge``) writes runs of adjacent small
segments as one, which the walk then prefers, so a block keeps about one object per ``MERGE_BYTES`` of history;
the pieces it replaced leave the chain. ``orphans`` lists segments off the chain once older than
``GRACE_SECONDS`` for deletion; a writer that took longer than ``WRITER_SECONDS`` between its segment and its
head gives up, and a reader whose segment vanished under it reads the listing again.

A long value's bases (``values/``, see object_layout) are written by the edit that seals, before its head, and
deleted by upkeep once no head names them and they are older than ``GRACE_SECONDS``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ..base.errors import StoreError
from ..base.records import BlockVersion
from .bucket import Bucket
from .history import Entry, replay
from .object_layout import (
    HISTORY,
    VALUES,
    Head,
    Snapshots,
    segment_json,
    segment_of,
    segment_path,
    segment_range,
    value_path,
    value_version,
)

SEAL_BYTES = 16 * 1024
MERGE_BYTES = 1 << 20
WRITER_SECONDS = 30.0  # an edit slower than this between its segment and its commit gives up (and retries)
GRACE_SECONDS = 4 * WRITER_SECONDS


@dataclass(frozen=True)
class Segment:
    path: str
    first: int
    last: int
    modified: datetime
    size: int


def listed_segments(bucket: Bucket, block_id: str) -> list[Segment]:
    out = []
    for item in bucket.list(f"{HISTORY}{block_id}/"):
        r = segment_range(item.path)
        if r is not None:
            out.append(Segment(item.path, r[0], r[1], item.modified, item.size))
    return out


def chain(segments: Sequence[Segment], sealed: int) -> list[Segment]:
    """The segments holding versions ``1..sealed``, newest first (gaps allowed: an imported history may have them)."""
    out: list[Segment] = []
    top = sealed
    while top > 0:
        below = [s for s in segments if s.last <= top and s.first <= s.last]
        if not below:
            break
        best = max(below, key=lambda s: (s.last, -s.first))
        out.append(best)
        top = best.first - 1
    return out


def orphans(segments: Sequence[Segment], sealed: int, grace: float = GRACE_SECONDS) -> list[Segment]:
    """Segments not on the chain below ``sealed`` and older than ``grace`` seconds (safe to delete)."""
    kept = {s.path for s in chain(segments, sealed)}
    cutoff = datetime.now(UTC) - timedelta(seconds=grace)
    return [s for s in segments if s.path not in kept and s.last <= sealed and s.modified < cutoff]


def seal(bucket: Bucket, head: Head) -> tuple[int, tuple[Entry, ...]] | None:
    """If ``head``'s tail is due, write it as a segment; the new (sealed, tail) for the next head, else None."""
    if head.tail_bytes < SEAL_BYTES or not head.tail:
        return None
    first, last = head.tail[0].version, head.tail[-1].version
    bucket.create(
        segment_path(head.block.id, first, last), segment_json(head.block.id, head.tail)
    )  # exists: same content
    return last, ()


def entries(bucket: Bucket, head: Head, low: int, high: int) -> list[Entry]:
    """The entries needed to rebuild versions ``low..high``: from the checkpoint ``low`` builds on, ascending.

    A segment that vanished between the listing and its read (merged, then deleted as an orphan) makes the walk
    start again from a new listing."""
    for _ in range(5):
        found = _walk(bucket, head, low, high)
        if found is not None:
            return found
    raise StoreError(f"The history of block {head.block.id} kept changing while it was read; try again.")


def _walk(bucket: Bucket, head: Head, low: int, high: int) -> list[Entry] | None:
    have: list[Entry] = list(head.tail)
    pending: list[Segment] | None = None

    def first() -> int:
        return have[0].version if have else head.sealed + 1

    def reach(version: int) -> bool:
        nonlocal pending, have
        while first() > version and head.sealed > 0:
            if pending is None:
                pending = chain(listed_segments(bucket, head.block.id), head.sealed)
            if not pending:
                return True
            seg = pending.pop(0)
            stored = bucket.get(seg.path)
            if stored is None:
                return False
            have = [*segment_of(head.block.id, stored.data), *have]
        return True

    if not reach(low):
        return None
    at = next((e for e in have if e.version >= low), None)
    if at is None:
        return []
    if not reach(at.chain.base):
        return None
    return [e for e in have if at.chain.base <= e.version <= high]


def versions(bucket: Bucket, head: Head, low: int, high: int) -> list[BlockVersion]:
    """Versions ``low..high`` that are stored, oldest first."""
    return list(replay(entries(bucket, head, low, high), range(low, high + 1)))


def merge(bucket: Bucket, head: Head) -> int:
    """Write runs of adjacent small segments of ``head``'s chain as one segment each (up to ``MERGE_BYTES``); the
    pieces leave the chain and ``orphans`` deletes them after the grace period. Returns how many were written."""
    pieces = chain(listed_segments(bucket, head.block.id), head.sealed)[::-1]  # oldest first
    runs: list[list[Segment]] = [[]]
    for seg in pieces:
        run = runs[-1]
        if run and (run[-1].last + 1 != seg.first or sum(s.size for s in run) + seg.size > MERGE_BYTES):
            runs.append(run := [])
        if seg.size < MERGE_BYTES:
            run.append(seg)
    written = 0
    for run in runs:
        if len(run) < 2:
            continue
        got = {p: stored for p, stored in bucket.get_many([s.path for s in run], {}).items() if stored is not None}
        if len(got) < len(run):
            continue  # changed meanwhile: the next upkeep looks again
        merged = [e for s in run for e in segment_of(head.block.id, got[s.path].data)]
        path = segment_path(head.block.id, run[0].first, run[-1].last)
        if bucket.create(path, segment_json(head.block.id, tuple(merged))) is not None:
            written += 1
    return written


def stored_versions(bucket: Bucket, head: Head) -> set[int]:
    """Every version number whose entry is stored (the tail and the chain's segments; for merging)."""
    found = {e.version for e in head.tail}
    for seg in chain(listed_segments(bucket, head.block.id), head.sealed):
        found.update(range(seg.first, seg.last + 1))
    return found


def read_base(bucket: Bucket, block_id: str, version: int) -> str:
    """The whole value of ``block_id`` at ``version`` from its base object."""
    stored = bucket.get(value_path(block_id, version))
    if stored is None:
        raise StoreError(
            f"The stored value of block {block_id} at version {version} is gone (the block changed "
            "while it was read, or the store lost it); try again."
        )
    try:
        return stored.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StoreError(
            f"The stored value of block {block_id} at version {version} is not UTF-8 ({exc}): it is "
            "damaged. Restore it from a backup."
        ) from exc


def bases(bucket: Bucket) -> Snapshots:
    """``read_base`` on ``bucket``, for ``object_layout.head_of``."""
    return lambda block_id, version: read_base(bucket, block_id, version)


def listed_bases(bucket: Bucket, block_id: str) -> list[Segment]:
    """The block's base objects (as segments of one version each)."""
    out = []
    for item in bucket.list(f"{VALUES}{block_id}/"):
        v = value_version(item.path)
        if v is not None:
            out.append(Segment(item.path, v, v, item.modified, item.size))
    return out


def stale_bases(listed: Sequence[Segment], base: int, grace: float = GRACE_SECONDS) -> list[Segment]:
    """Base objects other than ``base`` (the head's) and older than ``grace`` seconds (safe to delete)."""
    cutoff = datetime.now(UTC) - timedelta(seconds=grace)
    return [s for s in listed if s.first != base and s.modified < cutoff]


def sealed_of(bucket: Bucket, block_id: str) -> int:
    """The newest version held by a stored segment (a head created over an imported history starts there)."""
    return max((s.last for s in listed_segments(bucket, block_id)), default=0)
