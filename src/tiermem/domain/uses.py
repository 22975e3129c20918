"""Use: a search hit, an opened memory (a block through ``memory_open``, a file through ``open_files``) and an
auto-recalled memory each count as one use of it; memories are hot, warm or cold by their uses.

**Temperature.** A memory's *use score* is its uses decayed exponentially: each use adds 1, and the sum halves every
``half_life_days`` (``use_half_life_days``, 14 by default). A score of at least ``hot`` (``use_hot_score``, 2.5: three
uses within the last three days, or a steady use every ten days or more often) is hot; at least ``warm``
(``use_warm_score``, 0.5: one use within the last half-life) warm; below that, or never used, cold. The half-life is
applied as uses are recorded: a changed half-life counts from then on (older heat decays at the new rate).

**Off the hot path.** A use is noted in this process's accumulator (a dict, under a lock: no I/O on the request
path); a background thread flushes the batch every ``flush_seconds`` (``use_flush_seconds``), and ``close`` (a
server's stop, the end of a CLI command, interpreter exit) flushes what is left. The batch merges into the records
with one additive upsert (``core/uses.py``), so processes sharing a data directory lose no count. A search never
writes the rows it read: the records are a separate file. A flush that fails keeps its batch for the next one.
Reads (``uses``, ``records``) see the records merged with this process's batch not yet flushed.

**No record outlives its memory.** Forgetting a memory deletes its record, from this process's batch and from the
file; but another process may forget a memory this one counted and has not flushed yet. So a flush, once its batch
is written, asks which of its memories still exist (``exists``: one read per kind, given by ``Memory``) and deletes
the records of the others. The order closes the race: a memory forgotten before that read is seen gone and its
record deleted here; one forgotten after it lost its rows after the record was written, and its forgetting (rows
first, then the record) deletes the record. What reads the records (``use_stats``) counts only memories that
exist, whatever the file holds.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from ..base.errors import TiermemError
from ..base.records import now, to_us
from ..core.uses import DAY_US, Use, UseStore, in_group, merged, passage_of

log = logging.getLogger(__name__)

Temperature = Literal["hot", "warm", "cold"]
TEMPERATURES: tuple[Temperature, ...] = ("hot", "warm", "cold")
MAX_PENDING = 100_000  # memories in one unflushed batch: past it a use flushes at once (bounded memory)


@dataclass(frozen=True)
class Rules:
    """How uses become a temperature (the settings ``use_half_life_days``, ``use_hot_score``, ``use_warm_score``)."""

    half_life_days: float = 14.0
    hot: float = 2.5
    warm: float = 0.5

    @property
    def half_life_us(self) -> float:
        return self.half_life_days * DAY_US

    def score(self, use: Use | None, at_us: int) -> float:
        """The use score at ``at_us``: the record's heat decayed from its last use (0 for no record)."""
        if use is None:
            return 0.0
        return float(use.heat * 0.5 ** (max(0, at_us - use.last_us) / self.half_life_us))

    def temperature(self, use: Use | None, at_us: int) -> Temperature:
        score = self.score(use, at_us)
        return "hot" if score >= self.hot else "warm" if score >= self.warm else "cold"


class UseCounter:
    """This process's uses not yet flushed, over the shared records (``store``)."""

    def __init__(
        self,
        store: UseStore,
        rules: Rules | None = None,
        *,
        flush_seconds: float = 30.0,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.store = store
        self.rules = rules or Rules()
        self.flush_seconds = flush_seconds
        self.clock = clock or _now_us
        self._pending: dict[tuple[str, str], Use] = {}  # (agent_id, id) -> this process's uses not yet written
        self._lock = threading.Lock()
        self._flushing = threading.Lock()  # one flush at a time: a batch is taken, written, or put back
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # which of these memories (id -> kind) still exist; None: all (no memory to ask, as in tests of the counter)
        self.exists: Callable[[Mapping[str, str]], Collection[str]] | None = None

    def note(self, kind: str, agent_id: str, ids: Iterable[str]) -> None:
        """Count one use of each of ``ids`` (a memory of ``kind`` used by ``agent_id``) now; in memory only. A
        passage's chunks count for the passage (its insert: ``passage_of``), once however many a result shows."""
        if kind == "passage":
            ids = (passage_of(i) for i in ids)
        used = list(dict.fromkeys(ids))  # a memory shown twice in one result is used once
        if not used:
            return
        at = self.clock()
        with self._lock:
            for memory_id in used:
                use = Use(memory_id, kind, agent_id, 1, at, 1.0)
                known = self._pending.get((agent_id, memory_id))
                self._pending[agent_id, memory_id] = (
                    use if known is None else merged(known, use, self.rules.half_life_us)
                )
            full = len(self._pending) >= MAX_PENDING
            if self._thread is None and not self._stop.is_set() and self.flush_seconds > 0:
                self._thread = threading.Thread(target=self._run, name="tiermem-uses", daemon=True)
                self._thread.start()
                atexit.register(self.close)
        if full or self._stop.is_set():  # past the bound, or after ``close`` (a server stopping): written now
            self.flush()

    def flush(self) -> int:
        """Write the batch to the records; returns the memories written (0 when the write failed: kept for later)."""
        with self._flushing:
            with self._lock:
                batch, self._pending = self._pending, {}
            if not batch:
                return 0
            try:
                self.store.add(list(batch.values()))
            except TiermemError as exc:
                log.warning("could not record %d memories' uses (kept for the next flush): %s", len(batch), exc)
                with self._lock:
                    for key, use in batch.items():
                        known = self._pending.get(key)
                        self._pending[key] = use if known is None else merged(use, known, self.rules.half_life_us)
                return 0
            return len(batch) - self._drop_forgotten(batch)

    def _drop_forgotten(self, batch: Mapping[tuple[str, str], Use]) -> int:
        """Delete the records just written of memories that no longer exist (forgotten by another process since
        they were counted); returns how many of the batch's records that was. Called under ``_flushing``, after the write (see the module's doc)."""
        if self.exists is None or not self.store.shared:  # records of this process only: its forgetting suffices
            return 0
        try:
            alive = self.exists({use.id: use.kind for use in batch.values()})
            gone = [use.id for use in batch.values() if use.id not in alive]
            if gone:
                self.store.forget(gone)  # every agent's record of a forgotten memory
            return len(gone)  # the batch's records not kept
        except TiermemError as exc:  # the records stay; what reads them counts only memories that exist
            log.warning("could not check that %d used memories still exist: %s", len(batch), exc)
            return 0

    def _run(self) -> None:
        while not self._stop.wait(self.flush_seconds):
            try:
                self.flush()
            except Exception:  # noqa: BLE001 - the counter thread must outlive one bad flush
                log.exception("flushing use counters failed")

    def close(self) -> None:
        """Flush what is left and stop the flushing thread (idempotent)."""
        self._stop.set()
        try:
            self.flush()
        except Exception:  # noqa: BLE001 - at exit: say so, never raise
            log.exception("flushing use counters at exit failed")
        atexit.unregister(self.close)

    def records(self, ids: Collection[str] | None = None, *, agent_id: str | None = None) -> dict[str, Use]:
        """The uses of ``ids`` (None: of every memory) by ``agent_id`` (None: by all agents, merged per memory), with
        this process's batch merged. Not while a flush is writing: its batch is then in neither place (taken from
        the batch, not yet in the records)."""
        with self._flushing:
            try:
                stored = self.store.read(ids, agent_id=agent_id)
            except TiermemError as exc:  # the temperature is a view: what reads it still answers
                log.warning("could not read the use counters: %s", exc)
                stored = []
            with self._lock:
                pending = [
                    u
                    for u in self._pending.values()
                    if (ids is None or u.id in ids) and (agent_id is None or u.agent_id == agent_id)
                ]
        found: dict[str, Use] = {}
        for use in [*stored, *pending]:
            known = found.get(use.id)
            found[use.id] = use if known is None else merged(known, use, self.rules.half_life_us)
        return found

    def by_agent(self) -> list[Use]:
        """Every record, one per agent and memory (not merged across agents, unlike ``records``), this process's
        batch merged in: what a backup holds. A read that fails raises (a backup must not leave the uses out)."""
        with self._flushing:
            stored = self.store.read()
            with self._lock:
                pending = list(self._pending.values())
        found: dict[tuple[str, str], Use] = {}
        for use in [*stored, *pending]:
            key = (use.agent_id, use.id)
            known = found.get(key)
            found[key] = use if known is None else merged(known, use, self.rules.half_life_us)
        return list(found.values())

    def restore(self, uses: Sequence[Use]) -> int:
        """Write a backup's records where the (agent, memory) has none, or an earlier one (``UseStore.restore``)."""
        with self._flushing:
            return self.store.restore(uses)

    def temperatures(
        self, ids: Collection[str], at_us: int | None = None, *, agent_id: str | None = None
    ) -> dict[str, tuple[Temperature, float]]:
        """Each id's temperature and use score now (or at ``at_us``), by ``agent_id``'s uses (None: all agents')."""
        at = self.clock() if at_us is None else at_us
        found = self.records(ids, agent_id=agent_id)
        return {
            i: (self.rules.temperature(found.get(i), at), round(self.rules.score(found.get(i), at), 3)) for i in ids
        }

    def forget(self, ids: Collection[str], *, groups: Collection[str] = ()) -> int:
        """Remove the records of ``ids`` and of every chunk of the passage inserts ``groups``, batch and file."""
        with self._flushing:  # a batch being written cannot bring a forgotten record back
            with self._lock:
                for key in [k for k in self._pending if k[1] in ids or any(in_group(k[1], g) for g in groups)]:
                    del self._pending[key]
            return self.store.forget(ids, groups=groups)

    def forget_agent(self, agent_id: str) -> int:
        """Remove the agent's records (its uses of memories it shared stay others' too: theirs are kept)."""
        with self._flushing:
            with self._lock:
                for key in [k for k in self._pending if k[0] == agent_id]:
                    del self._pending[key]
            return self.store.forget_agent(agent_id)


def _now_us() -> int:
    return to_us(now())
