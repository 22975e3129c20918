"""Vectors of recall and archival rows: embedded before a row is stored when the model is ready in time, else
filled in later by the backfill (this process's, once its model loads, or the next process that has one).
A part of ``Archive`` (``archive.vectors``) over the same store and embedder, kept apart from searching and listing."""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from ..base.errors import EmbeddingError, ModelNotReadyError
from ..store import SEARCHABLE, Filter

if TYPE_CHECKING:
    from ..embedding.embedders import BackgroundEmbedder
    from ..store import Store

log = logging.getLogger(__name__)


class Vectors:
    """The vectors of one store's recall and archival rows, made by one embedder (waiting up to ``wait_seconds``
    for it to load), and the one background backfill of this process."""

    def __init__(self, store: Store, embedder: BackgroundEmbedder, wait_seconds: float) -> None:
        self.store = store
        self.embedder = embedder
        self.wait_seconds = wait_seconds
        self._backfill_lock = threading.Lock()
        self._backfill_thread: threading.Thread | None = None
        self._embedding_rows = threading.Lock()  # one batch of stored rows embedded at a time (backfill or search)
        self._closing = threading.Event()

    @property
    def model(self) -> tuple[str, int]:
        """(name, dimension) of the model the store's vectors were made with (a backup records it)."""
        return self.store.conn.embedding_model, self.store.conn.embedding_dim

    def embedding(self) -> AbstractContextManager[object]:
        """Held while this process stores rows it embeds next, or embeds them (``Connection.embedding``): `tiermem
        doctor` meanwhile says they are under way."""
        return self.store.conn.embedding()

    def missing(self) -> dict[str, int]:
        """Rows stored without a vector, per table (a full count: it reads every row's vector column)."""
        return {table: self.store.rows.count(table, Filter(missing_vector=True)) for table in SEARCHABLE}

    def embed_rows(self, rows: list[dict[str, Any]]) -> None:
        """Vectors before the rows are stored, waiting up to ``wait_seconds`` for the model.

        If the model is not ready in time the rows are stored without vectors (the store marks them) and
        embedded by a background backfill once it is; if it cannot load, by a later process that has it.
        """
        if not rows:
            return
        try:
            vectors = self.embedder.embed_blocking([r["content"] for r in rows], self.wait_seconds)
        except ModelNotReadyError:
            log.warning("storing %d row(s) without vectors: the embedding model is still loading", len(rows))
            self.start_backfill()
            return
        except EmbeddingError as exc:
            log.error("storing %d row(s) without vectors (found by keywords until embedded): %s", len(rows), exc)
            return
        for r, v in zip(rows, vectors, strict=True):
            r["vector"] = [float(x) for x in v]

    def query_vector(self, query: str, notes: list[str]) -> list[float] | None:
        """The query's vector, waiting up to ``wait_seconds`` for the model; None (with a note) if it cannot be had."""
        try:
            return self.embedder.embed_blocking([query], self.wait_seconds)[0]
        except ModelNotReadyError:
            notes.append(
                f"Keyword-only results (search_mode fts): the embedding model did not finish loading within "
                f"{self.wait_seconds:g} s, so this search could not match by meaning. Retry shortly for hybrid search."
            )
        except EmbeddingError as exc:
            notes.append(
                f"Keyword-only results (search_mode fts): the embedding model is unavailable, so this search could not "
                f"match by meaning. Cause: {exc} Run `tiermem doctor` for the fix."
            )
        return None

    def write_note(self) -> str | None:
        """What a write result should tell the model when rows could not be embedded before storing."""
        if self.embedder.error is not None:
            return (
                "Stored without a vector: the embedding model is unavailable, so this is found by keyword search "
                f"only until that is fixed (run `tiermem doctor`). Cause: {self.embedder.error}"
            )
        if not self.embedder.ready:
            return (
                "Stored; the embedding model is still loading, so its vector is added as soon as the model is "
                "ready (it is found by keywords until then)."
            )
        return None

    def start_backfill(self) -> None:
        """Embed rows stored without vectors as soon as the model is ready (background thread).

        The thread is finished, not abandoned, when the process exits (see ``_finish_at_exit``): a daemon
        thread still writing to LanceDB during interpreter shutdown aborts the process.
        """
        with self._backfill_lock:
            if self._closing.is_set() or (self._backfill_thread is not None and self._backfill_thread.is_alive()):
                return
            if self._backfill_thread is None:
                atexit.register(self._finish_at_exit)
            self._backfill_thread = threading.Thread(target=self._backfill, name="tiermem-backfill", daemon=True)
            self._backfill_thread.start()

    def _backfill(self) -> None:
        """Wait for the model, then embed the rows stored without vectors. The embedding lock is taken once the model
        is ready: held while waiting, a model that never loads would have `tiermem doctor` say for ever that another
        process is embedding the rows."""
        try:
            while not self.embedder.wait(0.25):
                if self._closing.is_set():
                    return
            with self.embedding():  # `tiermem doctor` sees the rows are being embedded
                self.backfill_now()
        except EmbeddingError as exc:
            log.error("could not embed stored rows (a process with a working model will): %s", exc)
        except Exception:  # a storage failure here must not go unseen; the rows stay marked for the next process
            log.exception("embedding stored rows failed")

    def _finish_at_exit(self) -> None:
        """At exit: let a pending backfill finish (up to ``wait_seconds``), then stop it between batches. A backfill
        that already ended may have read the table before the rows that started it were committed (they are stored
        after ``embed_rows`` returns): rows still announced are embedded here, when the model is loaded."""
        thread = self._backfill_thread
        if thread is None:
            return
        if thread.is_alive():
            thread.join(self.wait_seconds)
            self._closing.set()
            thread.join(60)
            return
        try:
            if self.embedder.ready and any(self.store.rows.unembedded_marks(t) for t in SEARCHABLE):
                self.backfill_now()
        except Exception as exc:  # never fail the exit; the rows stay marked for the next process
            log.warning("rows stored without vectors stay unembedded at exit: %s", exc)

    def catch_up(
        self, timeout: float | None, *, announced_only: bool = False, progress: Callable[[int, int], None] | None = None
    ) -> int:
        """Wait up to ``timeout`` s for the model, then embed every row stored without a vector (any process's).

        For short-lived commands that have the model anyway. Looks at the tables themselves, so it also finds
        rows a crash left unannounced, unless ``announced_only`` (then nothing is read unless a mark exists).
        ``progress`` hears ``(rows embedded, rows to embed)`` after each batch (``backfill_now``).
        Returns the rows embedded (0 if the model is unavailable; the reason is logged).
        """
        if announced_only and not any(self.store.rows.unembedded_marks(t) for t in SEARCHABLE):
            return 0
        try:
            with self.embedding():  # `tiermem doctor` sees the rows are being embedded
                if not self.embedder.wait(timeout):
                    return 0
                return self.backfill_now(progress=progress)
        except EmbeddingError as exc:
            log.error("rows without vectors stay unembedded: %s", exc)
            return 0

    def backfill_now(self, batch: int = 128, progress: Callable[[int, int], None] | None = None) -> int:
        """Embed every row stored without a vector; returns how many (the model must be loaded). ``progress`` hears
        ``(rows embedded, rows to embed)`` after each batch: the total is counted first (the rows without a vector of
        each table), and grows when another process stores more meanwhile."""
        done = 0
        todo = self.missing() if progress is not None else {}
        total = sum(todo.values())
        for table in SEARCHABLE:

            def told(n: int) -> None:
                nonlocal total
                assert progress is not None
                total = max(total, done + n)
                progress(done + n, total)

            done += self.embed_missing(
                table, None, limit=None, batch=batch, progress=told if progress is not None else None
            )
        return done

    def embed_missing(
        self,
        table: str,
        where: Filter | None,
        *,
        limit: int | None,
        batch: int = 128,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Embed rows of ``table`` (matching ``where``) stored without vectors, up to ``limit``; clears the marks when none are left.
        ``progress`` hears the rows embedded so far after each batch.

        Batches are taken one at a time under a lock, so a search never waits for more than the batch a
        background backfill is writing, and no row is embedded twice by this process.
        """
        done = 0
        while limit is None or done < limit:
            if self._closing.is_set() and threading.current_thread() is self._backfill_thread:
                return done
            with self._embedding_rows:
                size = batch if limit is None else min(batch, limit - done)
                rows = self.store.rows.rows_without_vectors(table, limit=size, where=where)
                if not rows:
                    break
                vectors = self.embedder.embed([r["content"] for r in rows])
                self.store.rows.set_vectors(
                    table, {r["id"]: [float(x) for x in v] for r, v in zip(rows, vectors, strict=True)}
                )
            done += len(rows)
            if progress is not None:
                progress(done)
        if where is None and (limit is None or done < limit):
            self.store.rows.settle_unembedded(table)
        return done
