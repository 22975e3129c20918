"""Index upkeep: the full-text and bitmap indexes, the vector index once a table is large, compaction, and
the per-index coverage ``doctor`` reports."""

from __future__ import annotations

import logging
import math
import time
from datetime import timedelta

from ..errors import StoreError, StoreWriteError
from .base import StoreBase
from .boundary import reads
from .query import Filter
from .schemas import SEARCHABLE

log = logging.getLogger(__name__)


def vector_partitions(rows: int) -> int:
    """IVF partitions for a vector index over ``rows`` vectors: ~sqrt(rows), so a probe reads ~sqrt(rows) rows."""
    return max(1, math.isqrt(rows))


class Indexes(StoreBase):
    # -- indexes -------------------------------------------------------------

    @reads("the search indexes")
    def _has_fts(self, table: str) -> bool:
        if table in self._fts_ready:
            return True
        found = any(i.index_type == "FTS" for i in self._tables[table].list_indices())
        if found:
            self._fts_ready.add(table)  # indexes are never dropped by tiermem
        return found

    @reads("the search indexes")
    def ensure_fts(self, table: str) -> None:
        from lancedb.index import FTS, Bitmap

        t = self._tables[table]
        if not any(i.columns == ["agent_id"] for i in t.list_indices()):
            try:  # the agent filter runs before every search: a bitmap makes it cheap at any size
                t.create_index("agent_id", config=Bitmap(), replace=False)
            except (RuntimeError, ValueError) as exc:
                log.warning("agent_id index of %s not built (another process may be building it): %s", table, exc)
        if not self._has_fts(table):
            try:
                t.create_index("text", config=FTS(with_position=False), replace=False)
            except (RuntimeError, ValueError) as exc:
                if not self._has_fts(table):  # another process may have built it meanwhile
                    raise StoreWriteError(f"Could not build the full-text index of {table}: {exc}") from exc

    @reads("the search indexes")
    def ensure_vector_index(self, table: str) -> bool:
        """Build an IVF-SQ vector index once ``table`` is large; below that, exact search is fast enough.

        Returns True if an index exists afterwards. The index is built once: rows added later are searched
        exactly until ``optimize`` appends them to it (LanceDB's incremental index update: new rows are
        assigned to the existing partitions, nothing is retrained). IVF-SQ with ~sqrt(rows) partitions
        builds in about a tenth of the time of LanceDB's default IVF-HNSW-SQ (66 s against ~600 s at 100k
        rows on the shared 2-core machine) at equal or better recall; stores whose index an earlier version
        built keep it (``VECTOR_EF`` serves those). Measured in bench/search_profile.py.
        """
        from lancedb.index import IvfSq

        t = self._tables[table]
        if any(i.columns == ["vector"] for i in t.list_indices()):
            return True
        if self.vector_index_min_rows <= 0 or t.count_rows() < self.vector_index_min_rows:
            return False  # cheap (table metadata) before the filtered count, which reads every row's vector
        rows = self.count(table, Filter(missing_vector=False))
        if rows < self.vector_index_min_rows:
            return False
        started = time.perf_counter()
        try:
            t.create_index("vector", config=IvfSq(distance_type="cosine", num_partitions=vector_partitions(rows)),
                           replace=False)
        except (RuntimeError, ValueError) as exc:
            if any(i.columns == ["vector"] for i in t.list_indices()):  # another process built it meanwhile
                return True
            raise StoreWriteError(f"Could not build the vector index of {table}: {exc}") from exc
        log.info("built the vector index of %s in %.1fs", table, time.perf_counter() - started)
        return True

    @reads("index statistics")
    def index_health(self) -> dict[str, dict[str, int]]:
        """Rows covered and not covered by each index, per searchable table."""
        out: dict[str, dict[str, int]] = {}
        for name in SEARCHABLE:
            t = self._tables[name]
            entry = {"rows": int(t.count_rows()), "missing_vectors": self.count(name, Filter(missing_vector=True))}
            for idx in t.list_indices():
                stats = t.index_stats(idx.name)
                if stats is not None:
                    kind = {"text": "fts", "vector": "vector"}.get(idx.columns[0], idx.columns[0])
                    entry[f"{kind}_indexed"] = int(stats.num_indexed_rows)
                    entry[f"{kind}_unindexed"] = int(stats.num_unindexed_rows)
            out[name] = entry
        return out

    def optimize(self, *, background: bool = False) -> dict[str, str]:
        """Compact small fragments and bring indexes up to date. Safe to call from any process.

        A background run is skipped while another run is under way; an explicit one waits for it.
        """
        if not self._optimizing.acquire(blocking=not background):
            return {"skipped": "already optimizing in this process"}
        report: dict[str, str] = {}
        try:
            for name in SEARCHABLE:
                if self.count(name):
                    self.ensure_fts(name)
                    self.ensure_vector_index(name)
            for name, t in self._tables.items():
                started = time.perf_counter()
                for attempt in range(3):
                    try:
                        t.optimize(cleanup_older_than=timedelta(minutes=10))
                        report[name] = f"ok in {time.perf_counter() - started:.2f}s"
                        break
                    except (RuntimeError, OSError) as exc:  # a concurrent writer won: try again later
                        report[name] = f"retry later: {exc}"
                        log.warning("optimize %s attempt %d failed: %s", name, attempt + 1, exc)
                        time.sleep(0.05 * (attempt + 1))
            try:  # the indexes just changed: drop the old session's caches with the versions they superseded
                if self.renew_session_if_due():
                    report["session"] = "renewed"
            except StoreError as exc:  # the old session stays; the next optimize tries again
                report["session"] = f"not renewed: {exc}"
                log.warning("could not renew the LanceDB session: %s", exc)
        finally:
            self._optimizing.release()
        from ..memtrim import trim

        trim()  # compaction's buffers are freed now: hand the pages back instead of keeping them resident
        return report
