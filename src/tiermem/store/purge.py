"""``Purge``: rows deleted so that no file of the store keeps them (forgetting).

A LanceDB deletion only marks rows deleted: their bytes stay in the fragment's data file, which compaction rewrites
only once a tenth of it is deleted, and every older table version keeps its files until a cleanup removes that
version; the full-text index keeps its tokens. So a deletion that must forget first marks the fragments holding the
rows (``mark``: meta rows ``forgotten:<table>:<fragment>``, written before the deletion, so a crash in between
purges for nothing rather than forgets nothing). The purge (``Indexes.purge_marked``, at the next upkeep or at once)
writes the other rows of each marked fragment again (``rewrite``: one ``merge_insert`` per fragment: the fragment
is then wholly deleted and leaves the table), builds the full-text index afresh, and removes every version but the
newest with the files only they used (``cleanup_older_than=0``); then ``clear`` drops the marks it handled.
"""

from __future__ import annotations

from typing import Any

from ..base.records import now
from .boundary import commit_with_retries, reads, writes
from .connection import Connection
from .query import Filter, compile_filter

PREFIX = "forgotten:"
KEY_COLUMNS = {"meta": "key"}  # the column a table's rows are written again by (the searchable tables': "id")


def mark_key(table: str, fragment: int) -> str:
    return f"{PREFIX}{table}:{fragment}"


class Purge:
    """Marks and rewrites over one ``Connection``."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    @reads("the rows to forget")
    def fragments(self, table: str, where: Filter | None) -> set[int]:
        """The data fragments holding the rows of ``where`` (None: every row of the table)."""
        q = self.conn.tables[table].search()
        text = compile_filter(where)
        if text:
            q = q.where(text)
        rows = q.select(["_rowaddr"]).limit(None).to_list()
        return {int(r["_rowaddr"]) >> 32 for r in rows}

    def forget_table(self, table: str) -> int:
        """Forget every row of ``table``: its fragments marked for the next purge, then their rows deleted (the
        core tables an older tiermem kept here, once their rows were moved out: nothing of them may stay in the
        store's files). Returns the rows deleted; the caller purges (``Indexes.purge_now``)."""
        found = self._mark(table, None)
        return self._delete_fragments(table, tuple(sorted(found))) if found else 0

    @writes("a deletion")
    def _delete_fragments(self, table: str, fragments: tuple[int, ...]) -> int:
        t = self.conn.tables[table]
        text = compile_filter(Filter(fragments=fragments))
        before = int(t.count_rows(text))
        if before:
            with self.conn.writing(table):
                t.delete(text)
            self.conn.wrote()
        return before

    def mark(self, table: str, where: Filter) -> int:
        """Mark the fragments holding the rows of ``where`` for the next purge (before those rows are deleted or
        rewritten); returns how many fragments."""
        return len(self._mark(table, where))

    def _mark(self, table: str, where: Filter | None) -> set[int]:
        """Mark the fragments holding the rows of ``where`` (None: every row); returns them."""
        found = self.fragments(table, where)
        if found:
            self._write_marks([{"key": mark_key(table, f), "value": now().isoformat()} for f in sorted(found)])
        return found

    @writes("the marks of rows to forget")
    def _write_marks(self, rows: list[dict[str, str]]) -> None:
        self.conn.tables["meta"].merge_insert("key").when_matched_update_all().when_not_matched_insert_all().execute(
            rows
        )

    def marked(self) -> dict[str, dict[str, str]]:
        """The marks waiting for a purge: table -> {meta key: value}."""
        out: dict[str, dict[str, str]] = {}
        for key, value in self.conn.meta().items():
            if key.startswith(PREFIX):
                table = key[len(PREFIX) :].rsplit(":", 1)[0]
                out.setdefault(table, {})[key] = value
        return out

    def pending(self) -> bool:
        return any(self.marked().values())

    def rewrite(self, table: str, marks: dict[str, str]) -> int:
        """Write the live rows of each marked fragment again (elsewhere), so the fragment is deleted whole; returns
        the rows rewritten. A fragment compaction already rewrote is gone (fragment ids are never reused)."""
        done = 0
        for key in marks:
            fragment = int(key.rsplit(":", 1)[1])
            done += self._rewrite_fragment(table, fragment)
        return done

    def _rewrite_fragment(self, table: str, fragment: int) -> int:
        t = self.conn.tables[table]
        key = KEY_COLUMNS.get(table, "id")
        where = compile_filter(Filter(fragments=(fragment,)))

        def attempt(n: int) -> int:
            if n:  # from the newest version, not the one a lost commit started from (``read_staleness``)
                t.checkout_latest()
            rows: list[dict[str, Any]] = t.search().where(where).limit(None).to_list()
            for r in rows:
                for column in ("_distance", "_rowaddr", "_rowid"):
                    r.pop(column, None)
            if rows:  # the same rows, written anew: a concurrent writer's change to one is a conflict, tried again
                with self.conn.writing(table):
                    t.merge_insert(key).when_matched_update_all().execute(rows)
            return len(rows)

        return commit_with_retries(self.conn.uri, f"the rows kept beside forgotten ones in {table}", attempt)

    @writes("the marks of forgotten rows")
    def clear(self, marks: dict[str, str]) -> None:
        """Drop the marks a purge handled (those written meanwhile, with another value, stay)."""
        if marks:
            self.conn.tables["meta"].delete(compile_filter(Filter(entries=tuple(marks.items()))))
