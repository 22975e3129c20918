"""``GroupAppend``: the appends to one table from the threads of one process, committed together.

Every LanceDB commit races the other writers of its table for the next version; on object storage a loser reloads
and backs off (Lance's own retries, growing waits), and under load the calls of one server pile up on the same table
and lose to each other as much as to other replicas. Here one caller at a time commits: whoever comes while a commit
is under way waits, and the next commit takes the rows of every caller waiting by then in one append (a group
commit). One process then makes one commit at a time per table, carrying as many calls as arrived meanwhile.

A caller may hold a lease (``base.fences``): its checks go with its rows, and the committing caller runs each
waiting caller's right before the commit, under none of its own (``fences.outside``), so a caller whose lease lapsed
gets ``LeaseLapsedError`` and its rows are left out, and no caller's rows are refused for another's lease.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..base import fences
from ..base.errors import LeaseLapsedError, StoreBusyError

RowList = list[dict[str, Any]]


class _Waiting:
    """One caller's rows, and what became of them."""

    def __init__(self, rows: RowList) -> None:
        self.rows = rows
        self.checks = fences.current()  # the caller's leases, checked right before the commit
        self.wake = threading.Event()
        self.lead = False  # woken to commit for everyone waiting, not because its rows are stored
        self.error: BaseException | None = None


class GroupAppend:
    """Appends to one table through ``commit(rows)`` (one LanceDB append with its retries), grouped: see the module.
    ``what``: where the rows go, for a caller whose lease lapsed (``rows of messages to s3://...``)."""

    def __init__(self, commit: Callable[[RowList], None], what: str = "row(s)") -> None:
        self._commit, self._what = commit, what
        self._lock = threading.Lock()
        self._queue: list[_Waiting] = []
        self._busy = False  # a caller is committing (or about to)

    def append(self, rows: RowList) -> None:
        """Store ``rows`` (returns once they are committed, with or after others'); raises what their commit raised."""
        me = _Waiting(rows)
        with self._lock:
            self._queue.append(me)
            me.lead = not self._busy
            self._busy = True
        if not me.lead:
            me.wake.wait()
        if me.lead:
            self._commit_waiting()
        if me.error is not None:
            raise me.error

    def _commit_waiting(self) -> None:
        """Commit the rows of everyone waiting (this caller included), tell them, hand the turn to the next."""
        with self._lock:
            batch, self._queue = self._queue, []
        try:
            held = [w for w in batch if self._still_held(w)]
            if held:
                with fences.outside():
                    self._commit_batch(held)
        except BaseException as exc:  # interrupted mid-commit: no caller of the batch may take its rows as stored
            for w in batch:
                if w.error is None:
                    w.error = exc
        finally:
            with self._lock:
                if self._queue:
                    self._queue[0].lead = True
                    self._queue[0].wake.set()
                else:
                    self._busy = False
            for w in batch:
                w.lead = False
                w.wake.set()

    def _still_held(self, w: _Waiting) -> bool:
        """Whether the caller's leases still hold (else its rows are left out, its error ``LeaseLapsedError``)."""
        try:
            fences.check(f"{len(w.rows)} {self._what}", w.checks)
        except LeaseLapsedError as exc:
            w.error = exc
            return False
        return True

    def _commit_batch(self, batch: list[_Waiting]) -> None:
        """One append of every caller's rows; if it fails for another reason than other writers (a row one caller got
        wrong), each caller's rows are committed on their own, so one caller's bad rows fail only that caller."""
        try:
            self._commit([r for w in batch for r in w.rows])
            return
        except Exception as exc:  # handed to the callers, who raise it
            if len(batch) == 1 or isinstance(exc, StoreBusyError):
                for w in batch:
                    w.error = exc
                return
        for w in batch:
            try:
                self._commit(w.rows)
            except Exception as exc:  # this caller's own failure
                w.error = exc
