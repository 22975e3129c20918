"""Whole tables of the object-storage core state as rows (backups, restores, migration, doctor).

Rows have the shapes of ``protocol.FIELDS``, the same as the SQLite core's. Merging inserts only what is not
stored (objects are created with ``create``; lists and heads changed with conditional PUTs), so a restore or a
migration run twice, or by two replicas at once, writes everything once.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from ..base.errors import StoreError
from ..base.records import Block, BlockVersion
from . import object_history as segments
from .bucket import Bucket
from .history import Chain, Entry, encode
from .object_layout import (
    AGENTS,
    ATTACHED,
    BLOCKS,
    CONVERSATIONS,
    REQUESTS,
    Attached,
    Head,
    Link,
    agent_json,
    agent_of,
    agent_path,
    attached_json,
    attached_of,
    attached_path,
    conversation_path,
    head_json,
    head_of,
    head_path,
    loads,
    old_request_path,
    request_path,
    segment_json,
    segment_path,
)
from .protocol import FIELDS
from .rows import (
    CoreRow,
    agent_from_row,
    agent_row,
    attachment_row,
    block_from_row,
    block_row,
    rows_of,
    version_from_row,
    version_row,
)

T = TypeVar("T")
log = logging.getLogger(__name__)


def check_table(table: str) -> str:
    if table not in FIELDS:
        raise StoreError(f"{table!r} is not a core-state table; use one of {', '.join(FIELDS)}.")
    return table


def _head(bucket: Bucket, data: bytes) -> Head:
    return head_of(data, segments.bases(bucket))


def _objects(bucket: Bucket, prefix: str) -> list[bytes]:
    got = bucket.get_many([i.path for i in bucket.list(prefix)], {})
    return [s.data for s in got.values() if s is not None]


def all_rows(bucket: Bucket, table: str) -> list[CoreRow]:
    check_table(table)
    if table == "agents":
        return [agent_row(agent_of(d)) for d in _objects(bucket, AGENTS)]
    if table == "blocks":
        return [block_row(_head(bucket, d).block) for d in _objects(bucket, BLOCKS)]
    if table == "attachments":
        return [
            attachment_row(a.agent_id, x.block_id, x.created_us)
            for a in map(attached_of, _objects(bucket, ATTACHED))
            for x in a.links
        ]
    if table == "block_history":
        out: list[CoreRow] = []
        for head in (_head(bucket, d) for d in _objects(bucket, BLOCKS)):
            out.extend(version_row(v) for v in segments.versions(bucket, head, 1, head.block.version))
        return out
    return rows_of(
        table, [loads(d, table) for d in _objects(bucket, REQUESTS if table == "requests" else CONVERSATIONS)]
    )


def _cas(
    bucket: Bucket,
    path: str,
    parse: Callable[[bytes], T],
    change: Callable[[T | None], T | None],
    dump: Callable[[T], bytes],
) -> bool:
    """Apply ``change`` to the object at ``path`` with conditional PUTs until it sticks; True if it wrote."""
    for _ in range(100):
        stored = bucket.get(path)
        current = parse(stored.data) if stored is not None else None
        new = change(current)
        if new is None:
            return False
        ok = bucket.replace(path, dump(new), stored.etag) if stored is not None else bucket.create(path, dump(new))
        if ok is not None:
            return True
        time.sleep(0.002)
    raise StoreError(f"{path} is being changed by other writers; the restore stopped. Run it again.")


def merge_rows(bucket: Bucket, table: str, rows: Sequence[CoreRow]) -> int:
    """Store the rows whose key is not stored yet; returns how many were new."""
    check_table(table)
    rows_of_table: Sequence[Mapping[str, Any]] = rows  # the fields of FIELDS[table], read by name below
    try:
        if table == "agents":
            return sum(
                bucket.create(agent_path(str(r["id"])), agent_json(agent_from_row(r))) is not None
                for r in rows_of_table
            )
        if table == "blocks":
            return sum(_merge_block(bucket, block_from_row(r)) for r in rows_of_table)
        if table == "attachments":
            return _merge_attachments(bucket, rows_of_table)
        if table == "block_history":
            by_block: dict[str, list[BlockVersion]] = defaultdict(list)
            for r in rows_of_table:
                by_block[str(r["block_id"])].append(version_from_row(r))
            return sum(_merge_history(bucket, block_id, versions) for block_id, versions in by_block.items())
        if table == "requests":
            return sum(bucket.create(request_path(str(r["key"])), _row(r, table)) is not None for r in rows_of_table)
        return sum(
            bucket.create(conversation_path(str(r["agent_id"]), str(r["conversation_id"])), _row(r, table)) is not None
            for r in rows_of_table
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"A {table} row is malformed ({exc}); check the backup file.") from exc


def _row(r: Mapping[str, Any], table: str) -> bytes:
    return json.dumps({c: r.get(c) for c in FIELDS[table]}, ensure_ascii=False).encode("utf-8")


def _merge_block(bucket: Bucket, block: Block) -> bool:
    head = Head(block=block, sealed=min(segments.sealed_of(bucket, block.id), block.version))
    return bucket.create(head_path(block.id), head_json(head)) is not None


def _merge_attachments(bucket: Bucket, rows: Sequence[Mapping[str, Any]]) -> int:
    by_agent: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        by_agent[str(r["agent_id"])].append(r)
    added = 0
    for agent_id, links in by_agent.items():
        for r in sorted(links, key=lambda r: (int(r["created_us"]), str(r["block_id"]))):
            block_id = str(r["block_id"])
            _cas(
                bucket,
                head_path(block_id),
                lambda d: _head(bucket, d),
                lambda h: None if h is None or agent_id in h.agents else replace(h, agents=(*h.agents, agent_id)),
                head_json,
            )
            stored = bucket.get(head_path(block_id))
            label = _head(bucket, stored.data).block.label if stored is not None else ""
            link = Link(block_id, label, int(r["created_us"]))
            added += _cas(
                bucket,
                attached_path(agent_id),
                attached_of,
                lambda old: (
                    Attached(agent_id, (link,))
                    if old is None
                    else None
                    if block_id in old.ids()
                    else replace(old, links=(*old.links, link))
                ),
                attached_json,
            )
    return added


def _merge_history(bucket: Bucket, block_id: str, versions: list[BlockVersion]) -> int:
    stored = bucket.get(head_path(block_id))
    head = _head(bucket, stored.data) if stored is not None else None
    if head is not None:
        have = segments.stored_versions(bucket, head)
        below = head.tail[0].version if head.tail else head.block.version + 1
    else:
        have = {v for s in segments.listed_segments(bucket, block_id) for v in range(s.first, s.last + 1)}
        below = None
    sealed = head.sealed if head is not None else 0  # versions at or below it lacking: ``between``, not here
    new = sorted(
        (v for v in versions if v.version not in have and v.version > sealed and (below is None or v.version < below)),
        key=lambda v: v.version,
    )
    if not new:
        return 0
    entries: list[Entry] = []
    previous: BlockVersion | None = None
    chain: Chain | None = None
    for v in new:
        entry = encode(previous, chain, v)
        entries.append(entry)
        previous, chain = v, entry.chain
    first, last = new[0].version, new[-1].version
    if bucket.create(segment_path(block_id, first, last), segment_json(block_id, tuple(entries))) is None:
        return 0  # written by a concurrent restore of the same rows
    if head is not None:
        _cas(
            bucket,
            head_path(block_id),
            lambda d: _head(bucket, d),
            lambda h: (
                None
                if h is None or h.sealed >= last or (h.tail and h.tail[0].version <= last)
                else replace(h, sealed=last)
            ),
            head_json,
        )
    return len(new)


def between(bucket: Bucket, rows: Sequence[CoreRow]) -> dict[str, list[BlockVersion]]:
    """The history rows of blocks stored here whose version the block's sealed history lacks, below its newest
    sealed version (forgotten here): a segment cannot hold them (the head's chain never reads it); the caller
    stores the history afresh with them (``ObjectCore.restore_versions``)."""
    by_block: dict[str, list[BlockVersion]] = defaultdict(list)
    history: Sequence[Mapping[str, Any]] = rows  # block_history rows
    for r in history:
        by_block[str(r["block_id"])].append(version_from_row(r))
    out: dict[str, list[BlockVersion]] = {}
    for block_id, versions in by_block.items():
        stored = bucket.get(head_path(block_id))
        if stored is None:
            continue
        head = _head(bucket, stored.data)
        below = [v for v in versions if v.version <= head.sealed]
        if not below:
            continue
        # the entries themselves: a segment a forget wrote is named 1..current and holds the versions kept
        have = {e.version for e in segments.entries(bucket, head, 1, head.block.version)}
        lacking = [v for v in below if v.version not in have]
        if lacking:
            out[block_id] = lacking
    return out


def move_old_requests(bucket: Bucket) -> int:
    """Move idempotency records an older version kept at ``requests/<sha256 of key>.json`` to their agent's folder
    (created there, then deleted here: safe to repeat and to run on two replicas at once); returns how many."""
    moved = 0
    for item in bucket.list_here(REQUESTS):
        stored = bucket.get(item.path)
        if stored is None:
            continue  # moved by another replica meanwhile
        key = str(loads(stored.data, "idempotency record").get("key", ""))
        if not key or old_request_path(key) != item.path:
            log.warning("%s is not an idempotency record of this store; left as it is", item.path)
            continue
        bucket.create(request_path(key), stored.data)  # already there: moved before
        bucket.delete(item.path)
        moved += 1
    return moved
