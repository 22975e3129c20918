"""Recall memory (the conversation log) and archival memory (long-term passages).

Both are searched the same way: filters first (agent, roles/tags, dates), then a vector
ranking and a full-text ranking over the filtered rows; the two legs' candidates are ordered by
the linear ranker of ranking.py (leg ranks, BM25, cosine, and a few properties of the text).
Until the embedding model has loaded, searches are full-text only and say so; rows stored
meanwhile get their vectors in the background as soon as the model is ready.
"""

from __future__ import annotations

import itertools
import logging
from concurrent.futures import ThreadPoolExecutor
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time as dtime
from typing import TYPE_CHECKING, Any, Literal

from .errors import EmbeddingError, ModelNotReadyError, NotFoundError, ValidationError
from .ranking import DEFAULT_RANKER, Candidate, Ranker, merge
from .records import ROLES, Hit, Message, Passage, check_text
from .store import Store, check_id, from_us, message_from_row, new_id, now, passage_from_row, sql_list, sql_str, to_us

if TYPE_CHECKING:
    from .embeddings import BackgroundEmbedder

log = logging.getLogger(__name__)

_TAG = re.compile(r"^[^\x00-\x1f]{1,64}$")
_DATE_ONLY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_seq = itertools.count()


@dataclass
class SearchResult:
    hits: list[Hit]
    mode: Literal["hybrid", "fts"]
    truncated: bool = False
    notes: list[str] = field(default_factory=list)


def parse_bound(value: str | None, name: str, *, end: bool) -> datetime | None:
    """ISO 8601 or YYYY-MM-DD; a date-only end bound means the end of that day (inclusive)."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValidationError(f"Invalid {name} format: {value}. Use ISO 8601 format (YYYY-MM-DD or YYYY-MM-DDTHH:MM)")
    text = value.strip()
    try:
        if _DATE_ONLY.fullmatch(text):
            day = date.fromisoformat(text)
            return datetime.combine(day, dtime.max if end else dtime.min, tzinfo=UTC)
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValidationError(
            f"Invalid {name} format: {value}. Use ISO 8601 format (YYYY-MM-DD or YYYY-MM-DDTHH:MM)"
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _range_clause(start: datetime | None, end: datetime | None, names: tuple[str, str]) -> list[str]:
    if start and end and start > end:
        raise ValidationError(
            f"{names[0]} ({start.isoformat()}) is after {names[1]} ({end.isoformat()}); swap them or widen the range."
        )
    out = []
    if start:
        out.append(f"created_us >= {to_us(start)}")
    if end:
        out.append(f"created_us <= {to_us(end)}")
    return out


def _check_count(value: int, name: str, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise ValidationError(f"{name} must be a whole number from 1 to {most}, got {value!r}.")
    return value


def time_ago(then: datetime, reference: datetime | None = None) -> str:
    seconds = max(0, int(((reference or now()) - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


def shape_message(content: str, created_at: datetime, previous: str = "") -> str:
    """The keyword-indexed text of a message: its date, its content and the turn before it.

    The vector is made from the content alone. The date lets "when" questions match, the previous
    turn gives a reply the context it answers: on the LoCoMo dev split (BENCHMARKS.md) the keyword leg
    alone scores R@5 0.613 with this text against 0.525 over the content alone.
    """
    return f"{created_at:%d %B %Y}. {content} {previous}".strip()


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="tiermem-search")
        return _pool


class Archive:
    def __init__(
        self,
        store: Store,
        embedder: BackgroundEmbedder,
        *,
        token_budget: int = 4000,
        max_content_chars: int = 100_000,
        ranker: Ranker | None = None,
        message_ranker: Ranker | None = None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.token_budget = token_budget
        self.max_content_chars = max_content_chars
        self.ranker = ranker or DEFAULT_RANKER
        self.message_ranker = message_ranker or DEFAULT_RANKER
        self._last_turn: dict[tuple[str, str], str] = {}  # (agent, conversation) -> content of its latest turn
        self._backfill_lock = threading.Lock()
        self._backfill_running = False
        self._counts: tuple[tuple[str, int, int], tuple[int, int, list[str]]] | None = None
        self._no_missing: dict[str, int] = {}  # table -> version known to have every vector

    # -- counts ------------------------------------------------------------

    def counts(self, agent_id: str) -> tuple[int, int, list[str]]:
        """(messages, passages, tags) of an agent; recomputed only when either table changed."""
        key = (agent_id, self.store.version("messages"), self.store.version("passages"))
        if self._counts is not None and self._counts[0] == key:
            return self._counts[1]
        where = f"agent_id = {sql_str(agent_id)}"
        value = (self.store.count("messages", where), self.store.count("passages", where), self.store.distinct_tags(agent_id))
        self._counts = (key, value)
        return value

    # -- writing -----------------------------------------------------------

    def log_messages(
        self, agent_id: str, messages: Sequence[dict[str, Any]], *, max_chars: int | None = None
    ) -> list[Message]:
        """Record conversation turns (role, content, optional timestamp / conversation_id / payload)."""
        if not messages:
            raise ValidationError("messages is empty: send at least one {role, content}.")
        rows = []
        for n, m in enumerate(messages):
            if not isinstance(m, dict):
                raise ValidationError(f"messages[{n}] must be an object with role and content.")
            role = m.get("role")
            if role not in ROLES:
                raise ValidationError(f"messages[{n}].role is {role!r}; use one of {', '.join(ROLES)}.")
            content = check_text(m.get("content"), f"messages[{n}].content", max_chars or self.max_content_chars)
            created = parse_bound(m.get("timestamp"), f"messages[{n}].timestamp", end=False) or now()
            conversation = m.get("conversation_id") or "default"
            self._text(conversation, f"messages[{n}].conversation_id")
            previous = self._previous_turn(agent_id, conversation)
            self._last_turn[(agent_id, conversation)] = content
            rows.append(
                {
                    # id and seq are only set by importers (the tool's schema has neither)
                    "id": m.get("id") or new_id("message"),
                    "agent_id": agent_id,
                    "conversation_id": conversation,
                    "seq": int(m["seq"]) if m.get("seq") is not None else time.time_ns() + next(_seq) % 1000,
                    "role": role,
                    "content": content,
                    "payload": m.get("payload") or "",
                    "text": shape_message(content, created, previous),
                    "created_us": to_us(created),
                    "vector": None,
                }
            )
        self._embed_rows(rows)
        self.store.add_rows("messages", rows)
        return [message_from_row(r) for r in rows]

    def _previous_turn(self, agent_id: str, conversation: str) -> str:
        key = (agent_id, conversation)
        if key not in self._last_turn:  # first turn this process sees: the newest stored one, if any
            where = f"agent_id = {sql_str(agent_id)} AND conversation_id = {sql_str(conversation)}"
            newest = self.store.newest("messages", where)
            self._last_turn[key] = newest["content"] if newest else ""
        return self._last_turn[key]

    def insert(self, agent_id: str, content: str, tags: Sequence[str] | None = None) -> list[str]:
        """Store a passage (chunked if longer than the model's window); returns the new ids."""
        content = self._text(content, "content")
        if not content.strip():
            raise ValidationError("content is empty: send the fact or text to remember.")
        rows = self._passage_rows(agent_id, content, tags)
        self._embed_rows(rows)
        self.store.add_rows("passages", rows)
        return [r["id"] for r in rows]

    def insert_many(
        self,
        agent_id: str,
        items: Sequence[tuple[str, Sequence[str]]],
        batch: int = 256,
        *,
        created: Sequence[datetime | None] | None = None,
        max_chars: int | None = None,
    ) -> int:
        """Bulk insert (content, tags) pairs with batched embedding (optionally keeping their timestamps); returns rows written."""
        written = 0
        for start in range(0, len(items), batch):
            stamps = list(created[start : start + batch]) if created is not None else [None] * len(items[start : start + batch])
            rows = [row for (content, tags), when in zip(items[start : start + batch], stamps, strict=True)
                    for row in self._passage_rows(agent_id, check_text(content, "content", max_chars or self.max_content_chars),
                                                  tags, created=when)]
            self._embed_rows(rows)
            self.store.add_rows("passages", rows)
            written += len(rows)
        return written

    def _passage_rows(
        self, agent_id: str, content: str, tags: Sequence[str] | None, *, created: datetime | None = None
    ) -> list[dict[str, Any]]:
        """One row per chunk; the first chunk's id is the group id, so it names the whole insert."""
        clean_tags = list(self._tags(tags))
        group = new_id("passage")
        created_us = to_us(created or now())
        return [
            {"id": group if i == 0 else f"{group}.{i}", "agent_id": agent_id, "group_id": group, "chunk": i,
             "content": chunk, "tags": clean_tags, "text": chunk, "created_us": created_us, "vector": None}
            for i, chunk in enumerate(self.embedder.chunk(content))
        ]

    def delete(self, agent_id: str, passage_id: str) -> int:
        """Delete a passage; the id of a chunked insert's first chunk deletes all its chunks."""
        check_id(passage_id, "passage id")
        where = f"agent_id = {sql_str(agent_id)} AND (id = {sql_str(passage_id)} OR group_id = {sql_str(passage_id)})"
        removed = self.store.delete("passages", where)
        if not removed:
            raise NotFoundError(
                f"No archival passage with id {passage_id!r}. Ids come from archival_memory_search or archival_memory_list."
            )
        return removed

    def list(self, agent_id: str, *, offset: int = 0, limit: int = 20, tags: Sequence[str] | None = None) -> tuple[list[Passage], int]:
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValidationError(f"offset must be a whole number >= 0, got {offset!r}.")
        _check_count(limit, "limit", 200)
        where = self._passage_where(agent_id, tags, "any", None, None)
        total = self.store.count("passages", where)
        rows = self.store.select("passages", where, limit=limit, offset=offset)
        return [passage_from_row(r) for r in rows], total

    # -- searching ---------------------------------------------------------

    def search(
        self,
        agent_id: str,
        query: str,
        *,
        tags: Sequence[str] | None = None,
        tag_match_mode: str = "any",
        top_k: int = 5,
        start_datetime: str | None = None,
        end_datetime: str | None = None,
    ) -> SearchResult:
        _check_count(top_k, "top_k", 100)
        start = parse_bound(start_datetime, "start_datetime", end=False)
        end = parse_bound(end_datetime, "end_datetime", end=True)
        where = self._passage_where(agent_id, tags, tag_match_mode, start, end)
        result = self._hybrid("passages", query, where, top_k, self.ranker)
        return result

    def conversation_search(
        self,
        agent_id: str,
        query: str,
        *,
        roles: Sequence[str] | None = None,
        limit: int = 5,
        start_date: str | None = None,
        end_date: str | None = None,
        conversation_id: str | None = None,
    ) -> SearchResult:
        _check_count(limit, "limit", 100)
        start = parse_bound(start_date, "start_date", end=False)
        end = parse_bound(end_date, "end_date", end=True)
        clauses = [f"agent_id = {sql_str(agent_id)}", *_range_clause(start, end, ("start_date", "end_date"))]
        if roles:
            if isinstance(roles, str) or not all(isinstance(r, str) for r in roles):
                raise ValidationError("roles must be a list, e.g. [\"user\", \"assistant\"].")
            bad = [r for r in roles if r not in ROLES]
            if bad:
                raise ValidationError(f"Unknown role(s) {bad}; use any of {', '.join(ROLES)}.")
            clauses.append(f"role IN ({', '.join(sql_str(r) for r in roles)})")
        if conversation_id:
            clauses.append(f"conversation_id = {sql_str(conversation_id)}")
        return self._hybrid("messages", query, " AND ".join(clauses), limit, self.message_ranker)

    def _passage_where(
        self, agent_id: str, tags: Sequence[str] | None, mode: str, start: datetime | None, end: datetime | None
    ) -> str:
        clauses = [f"agent_id = {sql_str(agent_id)}", *_range_clause(start, end, ("start_datetime", "end_datetime"))]
        if mode not in ("any", "all"):
            raise ValidationError(f"tag_match_mode must be 'any' or 'all', got {mode!r}.")
        if tags:
            clean = self._tags(tags)
            fn = "array_has_any" if mode == "any" else "array_has_all"
            clauses.append(f"{fn}(tags, {sql_list(clean)})")
        return " AND ".join(clauses)

    def _hybrid(self, table: str, query: str, where: str, limit: int, ranker: Ranker) -> SearchResult:
        query = self._text(query, "query")
        if not query.strip():
            raise ValidationError("query is empty: say what to look for.")
        candidates, mode, notes = self._candidates(table, query, where, max(limit * 4, 40))
        ranked = ranker.rank(query, candidates)[:limit]
        hits = [self._hit(table, c, score) for c, score in ranked]
        hits, truncated = self._budget(hits)
        if truncated:
            notes.append(
                f"Results were cut to fit the {self.token_budget}-token budget; narrow the query or lower the limit."
            )
        return SearchResult(hits=hits, mode=mode, truncated=truncated, notes=notes)

    def _candidates(
        self, table: str, query: str, where: str, pool: int
    ) -> tuple[list[Candidate], Literal["hybrid", "fts"], list[str]]:
        """Both legs' top ``pool`` rows under ``where``, merged into one candidate per row."""
        notes: list[str] = []
        vector_rows: list[dict[str, Any]] = []
        mode: Literal["hybrid", "fts"] = "hybrid"
        # The keyword leg runs beside query embedding + the vector leg (LanceDB releases the GIL).
        fts_future = _executor().submit(self.store.text_search, table, query, where, pool)
        try:
            vec = self.embedder.embed([query])[0]
            vector_rows = self.store.vector_search(table, vec, where, pool)
        except ModelNotReadyError:
            mode = "fts"
            notes.append("The embedding model is still loading: these results come from keyword (full-text) search only.")
        fts_rows = fts_future.result()
        missing = self._unembedded(table, where) if mode == "hybrid" else 0
        if missing:
            notes.append(f"{missing} recent item(s) are not embedded yet; they can be found by keywords only.")
        return merge(vector_rows, fts_rows), mode, notes

    def candidates(self, table: Literal["messages", "passages"], agent_id: str, query: str, *,
                   limit: int = 10) -> list[Candidate]:
        """The candidates a search of ``limit`` results ranks, unfiltered but for the agent (for fitting and
        inspecting rankers: ``bench locomo``)."""
        where = f"agent_id = {sql_str(agent_id)}"
        return self._candidates(table, self._text(query, "query"), where, max(limit * 4, 40))[0]

    def _unembedded(self, table: str, where: str) -> int:
        """Rows of ``where`` without vectors; counted only while some may exist (any process)."""
        version = self.store.version(table)
        known = self._no_missing.get(table)
        if known is not None and known == version:
            return 0
        missing = self.store.count(table, f"({where}) AND vector IS NULL")
        if missing == 0 and self.store.count(table, "vector IS NULL") == 0:
            self._no_missing[table] = version
        return missing

    def _hit(self, table: str, c: Candidate, score: float) -> Hit:
        r = c.row
        return Hit(
            id=c.id,
            content=c.content,
            created_at=from_us(r["created_us"]),
            score=score,
            vector_rank=c.vector_rank,
            fts_rank=c.fts_rank,
            role=r.get("role") if table == "messages" else None,
            tags=tuple(r.get("tags") or ()) if table == "passages" else (),
            conversation_id=r.get("conversation_id") if table == "messages" else None,
        )

    def _budget(self, hits: list[Hit]) -> tuple[list[Hit], bool]:
        from .tokens import fit_to_budget

        kept, truncated = fit_to_budget([h.content for h in hits], self.token_budget)
        return hits[: len(kept)], truncated

    # -- vectors -------------------------------------------------------------

    def _embed_rows(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        try:
            vectors = self.embedder.embed([r["content"] for r in rows])
        except ModelNotReadyError:
            self.start_backfill()
            return
        for r, v in zip(rows, vectors, strict=True):
            r["vector"] = [float(x) for x in v]

    def start_backfill(self) -> None:
        """Embed rows stored while the model was loading, as soon as it is ready (background)."""
        with self._backfill_lock:
            if self._backfill_running:
                return
            self._backfill_running = True
        threading.Thread(target=self._backfill, name="tiermem-backfill", daemon=True).start()

    def _backfill(self) -> None:
        try:
            self.embedder.wait(None)
            self.backfill_now()
        except EmbeddingError as exc:
            log.error("could not embed stored rows: %s", exc)
        finally:
            with self._backfill_lock:
                self._backfill_running = False

    def backfill_now(self, batch: int = 128) -> int:
        done = 0
        for table in ("messages", "passages"):
            while True:
                rows = self.store.rows_without_vectors(table, limit=batch)
                if not rows:
                    break
                vectors = self.embedder.embed([r["content"] for r in rows])
                self.store.set_vectors(table, {r["id"]: [float(x) for x in v] for r, v in zip(rows, vectors, strict=True)})
                done += len(rows)
        return done

    # -- validation --------------------------------------------------------

    def _text(self, value: Any, name: str) -> str:
        return check_text(value, name, self.max_content_chars)

    def _tags(self, tags: Sequence[str] | None) -> tuple[str, ...]:
        if tags is None:
            return ()
        if isinstance(tags, str) or not all(isinstance(t, str) for t in tags):
            raise ValidationError('tags must be a list of strings, e.g. ["project", "preferences"].')
        if len(tags) > 32:
            raise ValidationError(f"At most 32 tags per passage; got {len(tags)}.")
        for t in tags:
            if not _TAG.fullmatch(t):
                raise ValidationError(f"Invalid tag {t[:80]!r}: tags are 1-64 characters without control characters.")
        return tuple(dict.fromkeys(tags))
