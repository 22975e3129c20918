"""``Reembed``: a searchable table rewritten with new vectors under a temporary name, then swapped in
(``swaps.finish_swap``); what a crash left of a copy is settled when ``tiermem reembed`` runs again
(``swaps.settle_copies``).

The store is marked (meta ``reembedding``) before the first table is rewritten and unmarked last, once the new model
is recorded: while it is marked, no other connection opens it and every write to a searchable table is refused
(``Connection.writing``), so no table ever holds vectors of two models unnoticed and no write lands in a table about
to be replaced. Rows committed between the read of a table and its swap (possible on object storage, where writers
cannot hold a shared lock) are merged in, embedded too (``replace_vectors``).

One reembed at a time: on a local store ``alone`` holds a lock file for the whole run (object storage: the
composition's lease, ``domain.maintenance``)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..base.errors import StoreBusyError, StoreError
from ..base.files import locked_unless_held
from ..base.records import now
from .boundary import library
from .connection import REMOTE_WRITABLE_TTL, Connection, is_remote
from .indexes import Indexes
from .schemas import REEMBED_RUN_LOCK_FILE, REEMBED_SUFFIX, REEMBEDDING, SEARCHABLE, table_schemas
from .swaps import finish_swap
from .tables import Rows

log = logging.getLogger(__name__)
Embed = Callable[[Sequence[str]], Sequence[Sequence[float]]]


def another_reembed(uri: str, holder: str) -> StoreBusyError:
    """The error of a ``tiermem reembed`` started while another (``holder``: who it is) runs on the store ``uri``."""
    return StoreBusyError(
        f"Another `tiermem reembed` is running on {uri} ({holder}): two at once would rewrite the same tables. "
        "Nothing was changed: wait for it to finish (its progress is on its stderr), then run this one again if "
        "you still want another model."
    )


@contextmanager
def alone(uri: str) -> Iterator[None]:
    """Held for a whole ``tiermem reembed`` of the local store ``uri``, from before it opens the store (opening
    settles the copies an interrupted one left, which must not race a running one) to its end: a lock file in the store's
    directory, taken without waiting (``StoreBusyError`` naming the holder's pid if another reembed has it; nothing
    changed). A reembed that dies lets go of it, so an interrupted one can be run again at once. Nothing for object
    storage, nor for a directory that does not exist (there is nothing to rewrite)."""
    directory = Path(uri.removeprefix("file://"))
    if is_remote(uri) or not directory.is_dir():
        yield
        return
    path = directory / REEMBED_RUN_LOCK_FILE
    with ExitStack() as held:
        try:
            holder = held.enter_context(
                locked_unless_held(path, f"pid {os.getpid()}, started {now().isoformat(timespec='seconds')}")
            )
        except OSError as exc:
            raise StoreError(
                f"Could not open the lock file {path}: {exc}. Check that the data directory is writable."
            ) from exc
        if holder is not None:
            raise another_reembed(uri, holder)
        yield


def embed_rows(
    rows: list[dict[str, Any]], embed: Embed, each_batch: Callable[[int], None] | None = None, batch: int = 128
) -> None:
    """Give each row of ``rows`` the vector ``embed`` makes of its content, ``batch`` rows a call; ``each_batch`` is
    told how many rows are done after each call (progress)."""
    for start in range(0, len(rows), batch):
        part = rows[start : start + batch]
        for r, v in zip(part, embed([r["content"] for r in part]), strict=True):
            r["vector"] = [float(x) for x in v]
        if each_batch is not None:
            each_batch(start + len(part))


class Reembed:
    """The re-embedding swap over one ``Connection`` (marks of rows without vectors settled through its ``Rows``, the
    swapped tables' search indexes built through its ``Indexes``)."""

    def __init__(self, conn: Connection, rows: Rows, indexes: Indexes) -> None:
        self.conn, self.rows, self.indexes = conn, rows, indexes

    def begin(self, model: str, dim: int) -> None:
        """Mark the store as being re-embedded with ``model`` (before any table is rewritten). On a local store the
        mark is written under the reembed lock held exclusively: every commit under way finishes first, and every
        later one sees the mark and is refused."""
        with self.conn.reembed_lock(shared=False):
            self.conn.set_meta(REEMBEDDING, f"{model} (dim {dim})")
            self.conn.touch_reembed_lock()  # every writer reads the meta table again at its next commit
        if self.conn.remote:  # writers there trust a passed check that long: let every such write see the mark
            time.sleep(REMOTE_WRITABLE_TTL)

    def replace_vectors(self, table: str, rows: list[dict[str, Any]], dim: int, embed: Embed) -> tuple[int, int]:
        """Write ``rows`` (read earlier, now with new vectors) as ``table``; a crash midway is settled by the next
        ``tiermem reembed``.
        The table is read again first: rows committed since ``rows`` were read (new or changed) are embedded
        (``embed``) and kept, rows deleted since are left out. Returns the rows the table now holds, each counted
        once, and how many of them were embedded that way."""
        schema = table_schemas(dim)[table]
        columns = [f.name for f in schema if f.name != "vector"]
        current = self.conn.rows(table, columns=columns, latest=True)
        read = {r["id"]: r for r in rows}
        todo = []
        for r in current:
            earlier = read.get(r["id"])
            if earlier is not None and earlier["content"] == r["content"]:
                r["vector"] = earlier["vector"]
            else:
                todo.append(r)
        embed_rows(todo, embed)
        tmp = f"{table}{REEMBED_SUFFIX}"
        unfinished = (
            "The re-embedding is unfinished: the store refuses writes until `tiermem reembed` is run again with the "
            "same --embedding-model, which finishes it."
        )
        with library(self.conn.uri, f"the re-embedded {table} table", writing=True, unfinished=unfinished):
            data = pa.Table.from_pylist(current, schema=schema)
            self.conn.db.create_table(tmp, data=data, schema=schema, mode="overwrite")
            finish_swap(self.conn.db, self.conn.uri, table)
            self.conn.tables[table] = self.conn.db.open_table(table)
        self.indexes.replaced(table)  # the copy has no index: a keyword search would find none of its rows
        return len(current), len(todo)

    def index_vectors(self, table: str) -> None:
        """Build the vector index of ``table`` once it holds enough rows (``Indexes.ensure_vector_index``), after
        ``finish_reembed``: a swapped table has none, and without it every vector search is an exact scan until the
        next upkeep. A build that fails is logged and left to that upkeep; the re-embedding itself is done."""
        try:
            if self.indexes.ensure_vector_index(table):
                log.info("the vector index of %s is built over the new vectors", table)
        except StoreError as exc:
            log.warning("could not build the vector index of %s (the next upkeep builds it): %s", table, exc)

    def finish_reembed(self, model: str, dim: int) -> None:
        """Record the new model once every searchable table was swapped, then clear the mark (last)."""
        self.conn.set_meta("embedding_model", model)
        self.conn.set_meta("embedding_dim", str(dim))
        self.conn.embedding_model, self.conn.embedding_dim = model, dim
        for table in SEARCHABLE:
            self.rows.settle_unembedded(table)
        self.conn.set_meta(REEMBEDDING, "")
        self.conn.touch_reembed_lock()  # writers that opened the store with the old model find the switch
