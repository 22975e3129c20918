"""The table copies of ``tiermem reembed`` (``X__reembed``): swapped in place of their table (``finish_swap``), and
what an interrupted reembed left of them settled when the store is opened (``settle_copies``).

A reembed marks the store (meta ``reembedding``: the model it switches to) before it writes any copy. A copy found
while the store is marked belongs to that reembed: a process other than ``tiermem reembed`` leaves it alone (the
reembed may be writing it) and refuses the store (``ReembedUnfinishedError``); ``tiermem reembed`` run again settles
it. A copy found while the store is not marked was left by a reembed of tiermem 0.1.0, which recorded nothing while
it ran: the model of its vectors is unknown, and it may already have swapped other tables, so the store is marked
``UNRECORDED`` (refused until a reembed rebuilds every table with one model) before the copy is settled. The mark is
read before the tables are listed and again after: a reembed that ends meanwhile drops its last copy and then clears
its mark, so a copy listed with no mark read after it may be that reembed's; a mark read either time means a reembed
was under way while the copies were listed, and they are its.

Settling a copy: while its table opens, the copy is dropped (unfinished, or a swap not begun: the table holds every
row, and the reembed that must follow rebuilds its vectors); while its table does not open (a swap interrupted after
it dropped the table), the copy holds the rows and is swapped in. A copy is only read in full before its table is
dropped (``finish_swap``), so a copy that does not open never stands for a dropped table."""

from __future__ import annotations

import logging
from typing import Any

from ..base.errors import ReembedUnfinishedError, StoreError
from .boundary import library
from .schemas import REEMBED_SUFFIX, REEMBEDDING, SEARCHABLE, table_names

log = logging.getLogger(__name__)

# The mark of a store an older tiermem's interrupted reembed left (it recorded neither the mark nor its model).
UNRECORDED = "a model not recorded (a `tiermem reembed` of tiermem 0.1.0 was interrupted)"


def finish_swap(db: Any, uri: str, table: str) -> None:
    """Put the re-embedded copy of ``table`` in its place (``Reembed``; also when a crash interrupted a swap)."""
    tmp = f"{table}{REEMBED_SUFFIX}"
    unfinished = (
        f"Putting the re-embedded copy in place is unfinished (the copy is kept as {tmp}): run `tiermem reembed` "
        "again (with the same --embedding-model) to finish it."
    )
    with library(uri, f"the re-embedded {table} table", writing=True, unfinished=unfinished):
        copy = db.open_table(tmp).to_arrow()
        if table in table_names(db):
            db.drop_table(table)
        db.create_table(table, data=copy, schema=copy.schema)
        db.drop_table(tmp)


def unfinished_reembed(uri: str, meta: dict[str, str]) -> ReembedUnfinishedError:
    """The refusal of a store whose ``meta`` holds the mark of a reembed under way or interrupted."""
    marked = meta.get(REEMBEDDING, "")
    if marked == UNRECORDED:
        old = f"{meta.get('embedding_model')} (dim {meta.get('embedding_dim')})"
        return ReembedUnfinishedError(
            f"A `tiermem reembed` run by tiermem 0.1.0 on {uri} was interrupted, and that version did not record the "
            "model it was switching to: some tables may hold vectors of that model while the store records the old "
            "one, and a search would rank with the wrong one (the table copy it left was removed, or put in place "
            "where its table was gone). Run "
            "`tiermem reembed --embedding-model MODEL` with the model you were switching to (or with the one the "
            f"store records, {old}, to keep it): it rebuilds every vector with that one model.",
            recorded=False,
        )
    return ReembedUnfinishedError(
        f"A `tiermem reembed` to {marked} is rebuilding the vectors of {uri}, or was interrupted doing so: its "
        "tables may hold vectors of two models, and a search would rank with the wrong one. Wait for it to finish; "
        "if none is running, run `tiermem reembed` again (with the same --embedding-model) to finish it."
    )


def _opens(db: Any, name: str) -> bool:
    """Whether the table ``name`` opens: it was committed at least once (a table whose creation was cut short is a
    folder LanceDB lists but cannot open)."""
    try:
        db.open_table(name)
    except (OSError, RuntimeError, ValueError) as exc:
        log.debug("table %s does not open: %s", name, exc)
        return False
    return True


def _meta(db: Any, uri: str) -> dict[str, str]:
    """The meta table's keys and values as they are now (none without a meta table)."""
    if "meta" not in set(table_names(db)):
        return {}
    with library(uri, "the meta table"):
        return {r["key"]: r["value"] for r in db.open_table("meta").to_arrow().to_pylist()}


def settle_copies(db: Any, uri: str, *, reembedding: bool) -> None:
    """Settle the copies ``db`` holds (see the module's docstring); the caller holds the store's creation lock.
    ``reembedding``: the caller is ``tiermem reembed`` (any other caller refuses a marked store:
    ``ReembedUnfinishedError``, the copies left as they are)."""
    before = _meta(db, uri)  # a mark read before the listing: a reembed under way while its copies are listed
    existing = set(table_names(db))
    copies = [name for name in SEARCHABLE if f"{name}{REEMBED_SUFFIX}" in existing]
    if not copies:
        return
    has_meta = "meta" in existing
    meta = _meta(db, uri)
    marked = meta.get(REEMBEDDING) or ""
    if marked and not reembedding:
        raise unfinished_reembed(uri, meta)
    if not marked and before.get(REEMBEDDING):  # a reembed ended while the copies were listed: they were its
        log.debug("%s: a reembed finished while its table copies were listed; nothing to settle", uri)
        return
    if not marked and has_meta:
        with library(uri, "the mark of an interrupted reembed", writing=True):
            db.open_table("meta").merge_insert("key").when_matched_update_all().when_not_matched_insert_all().execute(
                [{"key": REEMBEDDING, "value": UNRECORDED}]
            )
        log.warning(
            "%s: an interrupted `tiermem reembed` of tiermem 0.1.0 left table copies: marked for a new one", uri
        )
    for name in copies:
        tmp = f"{name}{REEMBED_SUFFIX}"
        if _opens(db, name):
            with library(uri, f"the unfinished re-embedded copy {tmp}", writing=True):
                db.drop_table(tmp)
            log.info("%s: dropped the unfinished re-embedded copy %s (%s is whole)", uri, tmp, name)
        elif _opens(db, tmp):
            finish_swap(db, uri, name)
            log.info("%s: swapped in the re-embedded copy of %s (the table itself was gone)", uri, name)
        else:
            raise StoreError(
                f"Neither the {name} table of {uri} nor its re-embedded copy {tmp} opens: an interrupted "
                "`tiermem reembed` left both unreadable. Both were left as they are: restore the data directory from a "
                "backup, or report this with a listing of its db folder."
            )
