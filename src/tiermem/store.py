"""LanceDB tables, Arrow schemas, safe filters, optimistic concurrency and index upkeep.

The only module that imports ``lancedb`` and ``pyarrow``. It knows nothing about edit
semantics; it stores and returns records. Every user-supplied string that reaches a
``where`` clause goes through :func:`sql_str` (quoted) or :func:`check_id` (validated).

The store never assumes a local path: ``uri`` may be a directory or an object-store URI
(``s3://bucket/prefix``) with ``storage_options``.
"""

from __future__ import annotations

import functools
import json
import logging
import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import lancedb
import pyarrow as pa

from .errors import (
    NotFoundError,
    SchemaError,
    StoreError,
    StoreReadError,
    StoreWriteError,
    TiermemError,
    ValidationError,
)
from .records import Agent, Block, BlockVersion, Message, Passage

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])

SCHEMA_VERSION = 1
_NAMESPACE = uuid.UUID("5b0f7a52-3c1e-4f5e-9a59-7e2d3c2f7d11")
_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


# ---------------------------------------------------------------------------
# Values and filters
# ---------------------------------------------------------------------------


def now() -> datetime:
    return datetime.now(UTC)


def to_us(dt: datetime) -> int:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1_000_000)


def from_us(us: int) -> datetime:
    return datetime.fromtimestamp(us / 1_000_000, tz=UTC)


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


def stable_id(prefix: str, *parts: str) -> str:
    """A deterministic id, so concurrent first starts create one row, not two."""
    return f"{prefix}-{uuid.uuid5(_NAMESPACE, chr(0).join(parts))}"


def sql_str(value: str) -> str:
    """Quote ``value`` as a SQL string literal; it can never end the literal early."""
    if not isinstance(value, str):
        raise ValidationError(f"Expected text, got {type(value).__name__}.")
    if "\x00" in value:
        raise ValidationError("Text used as a filter contains a NUL byte; remove it.")
    return "'" + value.replace("'", "''") + "'"


def sql_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(sql_str(v) for v in values) + "]"


def check_id(value: str, what: str = "id") -> str:
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise ValidationError(f"Invalid {what} {str(value)[:80]!r}: ids come from tool results, e.g. 'passage-…'.")
    return value


# ---------------------------------------------------------------------------
# The library boundary: every call into LanceDB / Arrow is inside ``library`` (reads, via ``reads``)
# or ``writes``, so what reaches a caller (and a model) is a StoreError subclass that says what to do.
# ---------------------------------------------------------------------------

# Lance and Arrow raise RuntimeError ("lance error: ..."), OSError (ArrowIOError) or ValueError (ArrowInvalid).
LIBRARY_ERRORS = (RuntimeError, OSError, ValueError)
_SOURCE_LOCATION = re.compile(r",? /\S+\.rs:\d+:\d+")  # the Rust source line Lance appends to its messages


def _first_line(exc: BaseException) -> str:
    text = _SOURCE_LOCATION.sub("", str(exc)).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _write_error(uri: str, what: str, exc: BaseException) -> StoreWriteError:
    text = str(exc)
    if "os error 28" in text or "No space left" in text:
        return StoreWriteError(f"The disk holding the data directory {uri} is full (while writing {what}); nothing was "
                               "written. Free some space and try again.")
    if "os error 30" in text or "Read-only file system" in text or "os error 13" in text or "Permission denied" in text:
        return StoreWriteError(f"The data directory {uri} is read-only (while writing {what}); nothing was written. "
                               "Make it writable, or choose another with --data-dir.")
    return StoreWriteError(f"Writing {what} to the data directory {uri} failed: {_first_line(exc)}. Nothing was written.")


def _read_error(uri: str, what: str, exc: BaseException) -> StoreReadError:
    text = str(exc)
    if "os error 13" in text or "Permission denied" in text:
        return StoreReadError(f"The data directory {uri} cannot be read (permission denied, while reading {what}); "
                              "nothing was changed. Give this user read access, or choose another with --data-dir.")
    if "Not found" in text or "os error 2" in text or "No such file" in text:
        return StoreReadError(f"Part of the data directory {uri} is missing (while reading {what}): {_first_line(exc)}. "
                              "Nothing was changed. Check `tiermem doctor`, and restore the directory from a copy or a "
                              "backup (`tiermem import backup.jsonl`) if files were removed.")
    return StoreReadError(f"Reading {what} from the data directory {uri} failed: {_first_line(exc)}. Nothing was "
                          "changed. If it persists the data may be damaged: check `tiermem doctor`.")


@contextmanager
def library(uri: str, what: str, *, writing: bool = False) -> Iterator[None]:
    """The boundary: a library error inside becomes a ``StoreReadError`` (``StoreWriteError`` when ``writing``)
    naming ``what`` was read or written. ``writes`` adds retries on commit conflicts for idempotent writes.

    Errors of ours (already translated by an inner boundary, or raised on purpose) pass unchanged.
    """
    try:
        yield
    except TiermemError:
        raise
    except LIBRARY_ERRORS as exc:
        raise (_write_error if writing else _read_error)(uri, what, exc) from exc


def reads(what: str) -> Callable[[F], F]:
    """Run a read method of ``Store`` inside the ``library`` boundary."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: Store, *args: Any, **kwargs: Any) -> Any:
            with library(self.uri, what):
                return fn(self, *args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


_CONFLICT_MARKERS = ("commit conflict", "too many concurrent")
_CONFLICT_ATTEMPTS = 30


def writes(what: str) -> Callable[[F], F]:
    """Make a write safe to call under contention and clear when it fails.

    Lance commits are atomic: a commit that loses to other writers changes nothing, so a commit
    conflict that Lance's own retries did not absorb is retried here (a conditional update re-checks
    its condition). Other storage failures become one clear ``StoreError``.
    """

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: Store, *args: Any, **kwargs: Any) -> Any:
            for attempt in range(_CONFLICT_ATTEMPTS):
                try:
                    return fn(self, *args, **kwargs)
                except TiermemError:
                    raise
                except LIBRARY_ERRORS as exc:
                    conflict = any(m in str(exc).lower() for m in _CONFLICT_MARKERS)
                    if not conflict or attempt == _CONFLICT_ATTEMPTS - 1:
                        raise _write_error(self.uri, what, exc) from exc
                    log.info("%s: commit conflict with another writer, retrying (%d)", what, attempt + 1)
                    time.sleep(random.uniform(0, 0.005) * (attempt + 1))
            raise AssertionError("unreachable")

        return wrapper  # type: ignore[return-value]

    return decorate


# ---------------------------------------------------------------------------
# Schemas
# ---------------------------------------------------------------------------


def _schemas(dim: int) -> dict[str, pa.Schema]:
    vector = pa.list_(pa.float32(), dim)
    return {
        "meta": pa.schema([("key", pa.string()), ("value", pa.string())]),
        "agents": pa.schema(
            [
                ("id", pa.string()),
                ("name", pa.string()),
                ("system", pa.string()),
                ("metadata", pa.string()),
                ("created_us", pa.int64()),
                ("updated_us", pa.int64()),
            ]
        ),
        "blocks": pa.schema(
            [
                ("id", pa.string()),
                ("label", pa.string()),
                ("value", pa.string()),
                ("limit", pa.int64()),
                ("description", pa.string()),
                ("read_only", pa.bool_()),
                ("metadata", pa.string()),
                ("version", pa.int64()),
                ("updated_us", pa.int64()),
            ]
        ),
        "attachments": pa.schema(
            [("key", pa.string()), ("agent_id", pa.string()), ("block_id", pa.string()), ("created_us", pa.int64())]
        ),
        "block_history": pa.schema(
            [
                ("key", pa.string()),
                ("block_id", pa.string()),
                ("version", pa.int64()),
                ("label", pa.string()),
                ("value", pa.string()),
                ("limit", pa.int64()),
                ("description", pa.string()),
                ("read_only", pa.bool_()),
                ("operation", pa.string()),
                ("actor", pa.string()),
                ("created_us", pa.int64()),
            ]
        ),
        "requests": pa.schema(
            [
                ("key", pa.string()),
                ("agent_id", pa.string()),
                ("tool", pa.string()),
                ("args_sha256", pa.string()),
                ("result", pa.string()),
                ("created_us", pa.int64()),
            ]
        ),
        # Agent-loop state per (agent, conversation): where the in-context window starts, the
        # summary that stands for what was evicted, turns taken, and the sleep-time agent's mark.
        "conversations": pa.schema(
            [
                ("key", pa.string()),
                ("agent_id", pa.string()),
                ("conversation_id", pa.string()),
                ("start_seq", pa.int64()),
                ("summary_id", pa.string()),
                ("turns", pa.int64()),
                ("sleeptime_seq", pa.int64()),
                ("updated_us", pa.int64()),
            ]
        ),
        "messages": pa.schema(
            [
                ("id", pa.string()),
                ("agent_id", pa.string()),
                ("conversation_id", pa.string()),
                ("seq", pa.int64()),
                ("role", pa.string()),
                ("content", pa.string()),
                ("payload", pa.string()),
                ("text", pa.string()),
                ("created_us", pa.int64()),
                pa.field("vector", vector, nullable=True),
            ]
        ),
        "passages": pa.schema(
            [
                ("id", pa.string()),
                ("agent_id", pa.string()),
                ("group_id", pa.string()),
                ("chunk", pa.int64()),
                ("content", pa.string()),
                ("tags", pa.list_(pa.string())),
                ("text", pa.string()),
                ("created_us", pa.int64()),
                pa.field("vector", vector, nullable=True),
            ]
        ),
    }


SEARCHABLE = ("messages", "passages")
_RESULT_COLUMNS = {
    "messages": ("id", "agent_id", "conversation_id", "seq", "role", "content", "created_us"),
    "passages": ("id", "agent_id", "group_id", "chunk", "content", "tags", "created_us"),
}
_MESSAGE_COLUMNS = ("id", "agent_id", "conversation_id", "seq", "role", "content", "payload", "created_us")
VECTOR_NPROBES, VECTOR_EF, VECTOR_REFINE = 32, 128, 2
_REEMBED = "__reembed"
_UNEMBEDDED = "unembedded:"


def _names(db: Any) -> list[str]:
    result = db.list_tables()
    return list(getattr(result, "tables", result))


# ---------------------------------------------------------------------------
# Row <-> record
# ---------------------------------------------------------------------------


def _agent(r: dict[str, Any]) -> Agent:
    return Agent(
        id=r["id"],
        name=r["name"],
        system=r["system"],
        created_at=from_us(r["created_us"]),
        updated_at=from_us(r["updated_us"]),
        metadata=json.loads(r["metadata"] or "{}"),
    )


def _agent_row(a: Agent) -> dict[str, Any]:
    return {
        "id": a.id,
        "name": a.name,
        "system": a.system,
        "metadata": json.dumps(a.metadata, sort_keys=True),
        "created_us": to_us(a.created_at),
        "updated_us": to_us(a.updated_at),
    }


def _block(r: dict[str, Any]) -> Block:
    return Block(
        id=r["id"],
        label=r["label"],
        value=r["value"],
        limit=r["limit"],
        description=r["description"],
        read_only=r["read_only"],
        version=r["version"],
        updated_at=from_us(r["updated_us"]),
        metadata=json.loads(r["metadata"] or "{}"),
    )


def _block_row(b: Block) -> dict[str, Any]:
    return {
        "id": b.id,
        "label": b.label,
        "value": b.value,
        "limit": b.limit,
        "description": b.description,
        "read_only": b.read_only,
        "metadata": json.dumps(b.metadata, sort_keys=True),
        "version": b.version,
        "updated_us": to_us(b.updated_at),
    }


def _version(r: dict[str, Any]) -> BlockVersion:
    return BlockVersion(
        block_id=r["block_id"],
        version=r["version"],
        label=r["label"],
        value=r["value"],
        limit=r["limit"],
        description=r["description"],
        read_only=r["read_only"],
        operation=r["operation"],
        actor=r["actor"],
        created_at=from_us(r["created_us"]),
    )


def _version_row(v: BlockVersion) -> dict[str, Any]:
    return {
        "key": f"{v.block_id}:{v.version}",
        "block_id": v.block_id,
        "version": v.version,
        "label": v.label,
        "value": v.value,
        "limit": v.limit,
        "description": v.description,
        "read_only": v.read_only,
        "operation": v.operation,
        "actor": v.actor,
        "created_us": to_us(v.created_at),
    }


def message_from_row(r: dict[str, Any]) -> Message:
    return Message(
        id=r["id"],
        agent_id=r["agent_id"],
        conversation_id=r["conversation_id"],
        seq=r["seq"],
        role=r["role"],
        content=r["content"],
        created_at=from_us(r["created_us"]),
        payload=r["payload"],
    )


def passage_from_row(r: dict[str, Any]) -> Passage:
    return Passage(
        id=r["id"],
        agent_id=r["agent_id"],
        content=r["content"],
        tags=tuple(r["tags"] or ()),
        created_at=from_us(r["created_us"]),
        group_id=r["group_id"],
        chunk=r["chunk"],
    )


def _first_by(rows: Iterable[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """Drop duplicate rows (same key) that a concurrent first start may have written."""
    seen: set[Any] = set()
    out = []
    for r in rows:
        if r[key] not in seen:
            seen.add(r[key])
            out.append(r)
    return out


# ---------------------------------------------------------------------------
# The store
# ---------------------------------------------------------------------------


DEFAULT_METADATA_CACHE, DEFAULT_INDEX_CACHE = 32 << 20, 512 << 20


def _connect(uri: str, storage_options: dict[str, str] | None, metadata_cache: int, index_cache: int) -> Any:
    """A connection whose caches are bounded. LanceDB's own defaults are GiBs, and its metadata cache keeps
    a manifest per table version: with a version per write, a long-running server grew ~100-200 KB per
    write without levelling off (issue #13; bench/load.py). Every read checks out the newest version, so
    other processes' writes are seen."""
    session = lancedb.Session(index_cache_size_bytes=index_cache, metadata_cache_size_bytes=metadata_cache)
    return lancedb.connect(uri, read_consistency_interval=timedelta(0), storage_options=storage_options, session=session)


class Store:
    """All tables of one data directory (or object-store prefix)."""

    def __init__(
        self,
        uri: str,
        *,
        embedding_model: str,
        embedding_dim: int,
        storage_options: dict[str, str] | None = None,
        optimize_every: int = 200,
        vector_index_min_rows: int = 20_000,
        metadata_cache_bytes: int = DEFAULT_METADATA_CACHE,
        index_cache_bytes: int = DEFAULT_INDEX_CACHE,
    ) -> None:
        self.uri = uri
        self.vector_index_min_rows = vector_index_min_rows
        self.embedding_model = embedding_model
        self.embedding_dim = embedding_dim
        self.optimize_every = optimize_every
        self._writes = 0
        self._lock = threading.Lock()
        self._snapshots: dict[str, tuple[int, list[dict[str, Any]]]] = {}
        self._fts_ready: set[str] = set()
        self._optimizing = threading.Lock()
        self._writer = new_id("writer")  # names this process's marks of rows stored without vectors
        try:
            self._db = _connect(uri, storage_options, metadata_cache_bytes, index_cache_bytes)
            self._tables = self._open_tables()
        except (SchemaError, StoreError):
            raise
        except (OSError, RuntimeError, ValueError) as exc:
            raise StoreError(
                f"Could not open the data directory {uri!r}: {exc}. Check that it exists, is writable, "
                "and is not a file; or choose another with --data-dir / TIERMEM_DATA_DIR."
            ) from exc
        self._check_meta()
        self._ensure_search_indexes()

    @classmethod
    def for_reembed(cls, uri: str, *, storage_options: dict[str, str] | None = None) -> Store:
        """Open a store whatever embedding model it records (for ``tiermem reembed``)."""
        with library(uri, "the meta table"):
            db = _connect(uri, storage_options, DEFAULT_METADATA_CACHE, DEFAULT_INDEX_CACHE)
            meta_rows = db.open_table("meta").to_arrow().to_pylist() if "meta" in _names(db) else []
        meta = {r["key"]: r["value"] for r in meta_rows}
        return cls(
            uri,
            embedding_model=meta.get("embedding_model", ""),
            embedding_dim=int(meta.get("embedding_dim", "384")),
            storage_options=storage_options,
        )

    # -- opening ------------------------------------------------------------

    def _open_tables(self) -> dict[str, Any]:
        schemas = _schemas(self.embedding_dim)
        existing = set(self._table_names())
        for name in SEARCHABLE:
            if f"{name}{_REEMBED}" in existing:  # a reembed was interrupted after writing its copy
                self._finish_swap(name)
                existing = set(self._table_names())
        return {name: self._open_or_create(name, schema, name in existing) for name, schema in schemas.items()}

    def _open_or_create(self, name: str, schema: Any, listed: bool) -> Any:
        """Open a table, creating it if missing. Several processes may create a new store at once: a table
        another process is creating can be listed before its first version is committed ("not found"), or
        be created between our listing and our create; either is retried for up to ~5 s."""
        for attempt in range(40):
            try:
                if listed:
                    return self._db.open_table(name)
                return self._db.create_table(name, schema=schema, exist_ok=True)
            except (OSError, RuntimeError, ValueError) as exc:
                if attempt == 39:
                    raise
                log.debug("table %s is being created by another process (%s); retrying", name, exc)
                time.sleep(min(0.25, 0.01 * (attempt + 1)))
                listed = name in set(self._table_names()) and attempt % 2 == 0  # alternate open and create
        raise AssertionError("unreachable")

    def _table_names(self) -> list[str]:
        return _names(self._db)

    def _ensure_search_indexes(self) -> None:
        """Build the full-text indexes when the store opens, so that searching (a read-only tool) never writes.

        Several processes may open a new store at once; one that loses the race leaves it to the other, and
        ``text_search`` builds a missing index only in that case.
        """
        for table in SEARCHABLE:
            try:
                self.ensure_fts(table)
            except StoreError as exc:
                log.warning("full-text index of %s not built at open (another process may be building it): %s",
                            table, exc)

    def _check_meta(self) -> None:
        meta = self.meta()
        wanted = {
            "schema_version": str(SCHEMA_VERSION),
            "embedding_model": self.embedding_model,
            "embedding_dim": str(self.embedding_dim),
        }
        if not meta:
            rows = [{"key": k, "value": v} for k, v in wanted.items()]
            rows.append({"key": "created_at", "value": now().isoformat()})
            self._tables["meta"].merge_insert("key").when_not_matched_insert_all().execute(rows)
            meta = self.meta()
        version = int(meta.get("schema_version", "0"))
        if version > SCHEMA_VERSION:
            raise SchemaError(
                f"The data directory {self.uri!r} was written by a newer tiermem (schema version {version}; "
                f"this one reads version {SCHEMA_VERSION}). Upgrade tiermem, or use another --data-dir."
            )
        if version < SCHEMA_VERSION:
            self._migrate(version)
        if meta.get("embedding_model") != self.embedding_model or meta.get("embedding_dim") != str(self.embedding_dim):
            raise SchemaError(
                f"The data directory {self.uri!r} holds vectors of embedding model "
                f"{meta.get('embedding_model')!r} (dim {meta.get('embedding_dim')}), but this server is configured for "
                f"{self.embedding_model!r} (dim {self.embedding_dim}). Configure the same model "
                "(embedding_model / TIERMEM_EMBEDDING_MODEL), or run `tiermem reembed` to rebuild all vectors with the new one."
            )

    def _migrate(self, version: int) -> None:
        # No released schema before version 1: anything else is not ours to read.
        raise SchemaError(
            f"The data directory {self.uri!r} has schema version {version}, which this tiermem cannot migrate. "
            "Export it with the tiermem that wrote it, or use another --data-dir."
        )

    @reads("settings")
    def meta(self) -> dict[str, str]:
        return {r["key"]: r["value"] for r in self._tables["meta"].to_arrow().to_pylist()}

    @writes("settings")
    def set_meta(self, key: str, value: str) -> None:
        t = self._tables["meta"]
        t.merge_insert("key").when_matched_update_all().when_not_matched_insert_all().execute([{"key": key, "value": value}])

    # -- small helpers -----------------------------------------------------

    def _rows(self, table: str, where: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        with library(self.uri, f"the {table} table"):
            q = self._tables[table].search()
            if where:
                q = q.where(where)
            rows: list[dict[str, Any]] = q.limit(limit).to_list()  # limit None: every matching row
        return rows

    def _snapshot(self, table: str) -> list[dict[str, Any]]:
        """Every row of a small table, re-read only when its version moved (any process's write)."""
        t = self._tables[table]
        with library(self.uri, f"the {table} table"):
            version = int(t.version)  # checks out the latest version: sees other processes' writes
            cached = self._snapshots.get(table)
            if cached is not None and cached[0] == version:
                return cached[1]
            rows: list[dict[str, Any]] = t.to_arrow().to_pylist()
        self._snapshots[table] = (version, rows)
        return rows

    def _wrote(self, n: int = 1) -> None:
        with self._lock:
            self._writes += n
            due = self.optimize_every > 0 and self._writes >= self.optimize_every
            if due:
                self._writes = 0
        if due:
            threading.Thread(target=self.optimize, kwargs={"background": True}, name="tiermem-optimize", daemon=True).start()

    # -- agents --------------------------------------------------------------

    @reads("agents")
    def list_agents(self) -> list[Agent]:
        rows = _first_by(self._snapshot("agents"), "id")
        return sorted((_agent(r) for r in rows), key=lambda a: a.name)

    @reads("agents")
    def find_agent(self, name: str) -> Agent | None:
        rows = [r for r in self._snapshot("agents") if r["name"] == name]
        return _agent(rows[0]) if rows else None

    @reads("agents")
    def get_agent(self, agent_id: str) -> Agent:
        rows = [r for r in self._snapshot("agents") if r["id"] == agent_id]
        if not rows:
            raise NotFoundError(f"No agent with id {agent_id!r}. List agents with `tiermem agents list`.")
        return _agent(rows[0])

    @writes("an agent")
    def insert_agent(self, agent: Agent) -> None:
        self._tables["agents"].merge_insert("id").when_not_matched_insert_all().execute([_agent_row(agent)])
        self._wrote()

    @writes("an agent")
    def update_agent(self, agent: Agent) -> None:
        row = _agent_row(agent)
        del row["id"]
        self._tables["agents"].update(where=f"id = {sql_str(agent.id)}", values=row)
        self._wrote()

    # -- conversations (agent-loop state) -----------------------------------------

    @reads("conversation state")
    def get_conversation(self, agent_id: str, conversation_id: str) -> dict[str, Any] | None:
        key = f"{agent_id}:{conversation_id}"
        rows = [r for r in self._snapshot("conversations") if r["key"] == key]
        return rows[0] if rows else None

    @writes("conversation state")
    def put_conversation(self, row: dict[str, Any]) -> None:
        row = {**row, "key": f"{row['agent_id']}:{row['conversation_id']}", "updated_us": to_us(now())}
        t = self._tables["conversations"]
        t.merge_insert("key").when_matched_update_all().when_not_matched_insert_all().execute([row])
        self._wrote()

    @reads("messages")
    def messages_since(self, agent_id: str, conversation_id: str, start_seq: int) -> list[Message]:
        """Messages of one conversation with ``seq >= start_seq``, oldest first."""
        where = (
            f"agent_id = {sql_str(agent_id)} AND conversation_id = {sql_str(conversation_id)} "
            f"AND seq >= {int(start_seq)}"
        )
        rows = self._tables["messages"].search().where(where).select(list(_MESSAGE_COLUMNS)).limit(None).to_list()
        rows.sort(key=lambda r: r["seq"])
        return [message_from_row(r) for r in rows]

    @reads("messages")
    def agent_messages(self, agent_id: str) -> list[Message]:
        """Every message of one agent, by conversation then order (for export and backup)."""
        rows = self._tables["messages"].search().where(f"agent_id = {sql_str(agent_id)}").select(
            list(_MESSAGE_COLUMNS)).limit(None).to_list()
        rows.sort(key=lambda r: (r["conversation_id"] != "default", r["conversation_id"], r["seq"]))
        return [message_from_row(r) for r in rows]

    @writes("restored rows")
    def merge_rows(self, table: str, key: str, rows: Sequence[dict[str, Any]]) -> int:
        """Insert the rows whose ``key`` is not stored yet (restores and imports are re-runnable); returns rows inserted."""
        if not rows:
            return 0
        result = self._tables[table].merge_insert(key).when_not_matched_insert_all().execute(list(rows))
        self._wrote()
        if table in SEARCHABLE and any(r.get("vector") is None for r in rows):
            self.mark_unembedded(table)
        return int(result.num_inserted_rows)

    @reads("a table's schema")
    def schema_fields(self, table: str) -> list[str]:
        return [f.name for f in self._tables[table].schema]

    @reads("a message")
    def message(self, message_id: str) -> Message | None:
        rows = self._tables["messages"].search().where(f"id = {sql_str(message_id)}").select(
            list(_MESSAGE_COLUMNS)).limit(1).to_list()
        return message_from_row(rows[0]) if rows else None


    # -- blocks --------------------------------------------------------------

    @reads("blocks")
    def get_block(self, block_id: str) -> Block | None:
        rows = [r for r in self._snapshot("blocks") if r["id"] == block_id]
        return _block(rows[0]) if rows else None

    @reads("blocks")
    def get_blocks(self, block_ids: Sequence[str]) -> list[Block]:
        wanted = set(block_ids)
        rows = _first_by((r for r in self._snapshot("blocks") if r["id"] in wanted), "id")
        return [_block(r) for r in rows]


    @reads("block attachments")
    def attached_block_ids(self, agent_id: str) -> list[str]:
        rows = [r for r in self._snapshot("attachments") if r["agent_id"] == agent_id]
        rows.sort(key=lambda r: (r["created_us"], r["block_id"]))
        return [r["block_id"] for r in _first_by(rows, "block_id")]

    @reads("block attachments")
    def agents_of_block(self, block_id: str) -> list[str]:
        rows = [r for r in self._snapshot("attachments") if r["block_id"] == block_id]
        return [r["agent_id"] for r in _first_by(rows, "agent_id")]

    @writes("a block")
    def insert_block(self, block: Block, first: BlockVersion) -> None:
        """Create a block and its first history row (idempotent for a stable id)."""
        result = self._tables["blocks"].merge_insert("id").when_not_matched_insert_all().execute([_block_row(block)])
        if result.num_inserted_rows:
            self.append_history(first)
        self._wrote()

    @writes("a block edit")
    def cas_block(self, block: Block, expected_version: int) -> bool:
        """Write ``block`` only if the stored version is still ``expected_version``.

        A conditional update: when another process commits first, Lance re-checks the
        condition against its commit, so exactly one writer of each version wins.
        """
        row = _block_row(block)
        del row["id"]
        cached = self._snapshots.get("blocks")
        result = self._tables["blocks"].update(
            where=f"id = {sql_str(block.id)} AND version = {int(expected_version)}", values=row
        )
        self._wrote()
        if result.rows_updated and cached is not None and int(result.version) == cached[0] + 1:
            # Nobody else committed in between: the snapshot plus our row is exactly the new version.
            rows = [({**r, **row} if r["id"] == block.id else r) for r in cached[1]]
            self._snapshots["blocks"] = (int(result.version), rows)
        return bool(result.rows_updated)

    @writes("block history")
    def append_history(self, version: BlockVersion) -> None:
        """Append one history row; only the writer that won a version's CAS writes its row."""
        self._tables["block_history"].add([_version_row(version)])
        self._wrote()

    @writes("block history")
    def recover_history(self, version: BlockVersion) -> None:
        """Insert a history row unless that version already has one (gap repair)."""
        self._tables["block_history"].merge_insert("key").when_not_matched_insert_all().execute([_version_row(version)])
        self._wrote()

    @reads("block history")
    def history(self, block_id: str, limit: int | None = None) -> list[BlockVersion]:
        rows = self._rows("block_history", f"block_id = {sql_str(block_id)}")
        rows.sort(key=lambda r: r["operation"] == "recovered")  # a writer's own row wins over a recovered copy
        rows = _first_by(rows, "key")
        rows.sort(key=lambda r: r["version"], reverse=True)
        if limit is not None:
            rows = rows[:limit]
        return [_version(r) for r in rows]

    @reads("block history")
    def history_version(self, block_id: str, version: int) -> BlockVersion | None:
        rows = self._rows("block_history", f"key = {sql_str(f'{block_id}:{int(version)}')}", limit=1)
        return _version(rows[0]) if rows else None

    @writes("a block attachment")
    def attach(self, agent_id: str, block_id: str) -> None:
        row = {"key": f"{agent_id}:{block_id}", "agent_id": agent_id, "block_id": block_id, "created_us": to_us(now())}
        self._tables["attachments"].merge_insert("key").when_not_matched_insert_all().execute([row])
        self._wrote()

    @writes("a block attachment")
    def detach(self, agent_id: str, block_id: str) -> None:
        self._tables["attachments"].delete(f"key = {sql_str(f'{agent_id}:{block_id}')}")
        self._wrote()

    # -- idempotent requests ---------------------------------------------------

    @reads("an idempotency record")
    def get_request(self, key: str) -> dict[str, Any] | None:
        rows = self._rows("requests", f"key = {sql_str(key)}", limit=1)
        return rows[0] if rows else None

    @writes("an idempotency record")
    def put_request(self, row: dict[str, Any]) -> None:
        self._tables["requests"].merge_insert("key").when_not_matched_insert_all().execute([row])
        self._wrote()

    # -- messages and passages ------------------------------------------------

    @writes("rows")
    def add_rows(self, table: str, rows: Sequence[dict[str, Any]]) -> None:
        if rows:
            self._tables[table].add(list(rows))
            self._wrote(len(rows))
            if table in SEARCHABLE and any(r.get("vector") is None for r in rows):
                self.mark_unembedded(table)

    @writes("vectors")
    def set_vectors(self, table: str, vectors: dict[str, list[float]]) -> None:
        """Fill in vectors of rows stored before the model was ready."""
        if not vectors:
            return
        t = self._tables[table]
        ids = ", ".join(sql_str(i) for i in vectors)
        rows = t.search().where(f"id IN ({ids})").limit(len(vectors) * 2).to_list()
        for r in rows:
            r.pop("_distance", None)
            r["vector"] = vectors[r["id"]]
        if rows:
            t.merge_insert("id").when_matched_update_all().execute(rows)
            self._wrote(len(rows))

    @reads("rows without vectors")
    def rows_without_vectors(self, table: str, limit: int = 256, where: str | None = None) -> list[dict[str, Any]]:
        return self._rows(table, f"({where}) AND vector IS NULL" if where else "vector IS NULL", limit=limit)

    # Rows stored without vectors are announced in ``meta`` (key "unembedded:<table>:<writer>"), written
    # right after the rows, so a search in any process learns of them from the small meta table instead
    # of counting ``vector IS NULL`` over the whole table (a scan of every vector). The marks are cleared
    # by whoever sees the table without such rows, and only the marks read before that count: a mark is
    # written after its rows, so rows whose mark was read are in the count. Rows a crash left unmarked
    # are found by the full count each process makes when it opens the store (``factory.open_memory``).

    @reads("settings")
    def unembedded_marks(self, table: str) -> dict[str, str]:
        """The marks announcing rows without vectors in ``table`` (cheap: meta is re-read only when it changed)."""
        prefix = f"{_UNEMBEDDED}{table}:"
        return {r["key"]: r["value"] for r in self._snapshot("meta") if str(r["key"]).startswith(prefix)}

    def mark_unembedded(self, table: str) -> None:
        """Announce that ``table`` holds rows without vectors (after writing them)."""
        try:
            self.set_meta(f"{_UNEMBEDDED}{table}:{self._writer}", str(time.time_ns()))
        except StoreError as exc:  # the rows are stored; the next process to open the store counts them
            log.warning("could not record rows without vectors in %s: %s", table, exc)

    @reads("rows without vectors")
    def settle_unembedded(self, table: str) -> int:
        """Rows of ``table`` without vectors; when there are none, clear the marks read before counting."""
        marks = self.unembedded_marks(table)
        missing = self.count(table, "vector IS NULL")
        if missing == 0 and marks:
            self._clear_marks(marks)
        return missing

    @writes("settings")
    def _clear_marks(self, marks: dict[str, str]) -> None:
        where = " OR ".join(f"(key = {sql_str(k)} AND value = {sql_str(v)})" for k, v in marks.items())
        self._tables["meta"].delete(where)

    @reads("a table version")
    def version(self, table: str) -> int:
        return int(self._tables[table].version)

    @reads("tags")
    def distinct_tags(self, agent_id: str) -> list[str]:
        import pyarrow.compute as pc

        data = self._tables["passages"].search().where(f"agent_id = {sql_str(agent_id)}").select(["tags"]).limit(None).to_arrow()
        if data.num_rows == 0:
            return []
        flat = pc.list_flatten(data.column("tags").combine_chunks())
        return sorted(str(t) for t in pc.unique(flat).to_pylist() if t is not None)

    @reads("the latest row")
    def newest(self, table: str, where: str) -> dict[str, Any] | None:
        """The latest row matching ``where`` (by time, then sequence)."""
        data = self._tables[table].search().where(where).select(["content", "created_us", "seq"]).limit(None).to_list()
        return max(data, key=lambda r: (r["created_us"], r["seq"]), default=None)

    @reads("row counts")
    def count(self, table: str, where: str | None = None) -> int:
        t = self._tables[table]
        return int(t.count_rows(where) if where else t.count_rows())

    @reads("rows")
    def select(
        self, table: str, where: str | None, *, limit: int, offset: int = 0
    ) -> list[dict[str, Any]]:
        """Rows oldest first (by time, then id), one page.

        A page smaller than the matching rows reads only the sort keys of every row, then the page's rows
        (the inspector pages through 10k passages without reading every row and its vector).
        """
        q = self._tables[table].search()
        keys = (q.where(where) if where else q).select(["id", "created_us"]).limit(None).to_list()
        keys.sort(key=lambda r: (r["created_us"], r["id"]))
        page = [r["id"] for r in keys[offset : offset + limit]]
        if not page:
            return []
        if len(page) == len(keys):
            rows = self._rows(table, where)
        else:
            ids = f"id IN ({', '.join(sql_str(i) for i in page)})"
            rows = self._rows(table, f"({where}) AND {ids}" if where else ids)
        rows.sort(key=lambda r: (r["created_us"], r["id"]))
        return rows[:limit] if len(page) == len(keys) else rows

    @writes("a deletion")
    def delete(self, table: str, where: str) -> int:
        t = self._tables[table]
        before = t.count_rows(where)
        if before:
            t.delete(where)
            self._wrote()
        return int(before)

    @reads("vector search results")
    def vector_search(self, table: str, vector: Sequence[float], where: str | None, limit: int) -> list[dict[str, Any]]:
        q = self._tables[table].search(list(vector), vector_column_name="vector").distance_type("cosine")
        # Never ship vectors back (converting them costs more than the search); naming the score column
        # keeps Lance from warning on every query.
        q = q.select([*_RESULT_COLUMNS[table], "_distance"])
        # ANN knobs (ignored while the table has no vector index): measured in bench/scale.py.
        q = q.nprobes(VECTOR_NPROBES).ef(VECTOR_EF).refine_factor(VECTOR_REFINE)
        if where:
            q = q.where(where, prefilter=True)
        rows: list[dict[str, Any]] = q.limit(limit).to_list()
        return rows

    @reads("full-text search results")
    def text_search(self, table: str, query: str, where: str | None, limit: int) -> list[dict[str, Any]]:
        if not self._has_fts(table):  # built when the store opened; only a lost race at open leaves it missing
            self.ensure_fts(table)
        q = self._tables[table].search(query, query_type="fts", fts_columns="text").select([*_RESULT_COLUMNS[table], "_score"])
        if where:
            q = q.where(where, prefilter=True)
        rows: list[dict[str, Any]] = q.limit(limit).to_list()
        return rows

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
        """Build an IVF-HNSW-SQ index once ``table`` is large; below that, exact search is fast enough.

        Returns True if an index exists afterwards. Rows added later are searched exactly until
        ``optimize`` folds them into the index.
        """
        from lancedb.index import IvfHnswSq

        t = self._tables[table]
        if any(i.columns == ["vector"] for i in t.list_indices()):
            return True
        if self.vector_index_min_rows <= 0 or self.count(table, "vector IS NOT NULL") < self.vector_index_min_rows:
            return False
        started = time.perf_counter()
        try:
            t.create_index("vector", config=IvfHnswSq(distance_type="cosine"), replace=False)
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
            entry = {"rows": int(t.count_rows()), "missing_vectors": self.count(name, "vector IS NULL")}
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
        finally:
            self._optimizing.release()
        from .memtrim import trim

        trim()  # compaction's buffers are freed now: hand the pages back instead of keeping them resident
        return report

    @reads("table versions")
    def table_versions(self) -> dict[str, int]:
        return {name: int(t.version) for name, t in self._tables.items()}

    # -- re-embedding ---------------------------------------------------------

    @reads("rows")
    def all_rows(self, table: str) -> list[dict[str, Any]]:
        rows = self._rows(table)
        for r in rows:
            r.pop("_distance", None)
        return rows

    def replace_vectors(self, table: str, rows: list[dict[str, Any]], model: str, dim: int) -> None:
        """Write ``rows`` (with new vectors) as ``table``; a crash midway is finished on next open."""
        schema = _schemas(dim)[table]
        tmp = f"{table}{_REEMBED}"
        with library(self.uri, f"the re-embedded {table} table", writing=True):
            data = pa.Table.from_pylist(rows, schema=schema)
            self._db.create_table(tmp, data=data, schema=schema, mode="overwrite")
            self._finish_swap(table)
            self._tables[table] = self._db.open_table(table)

    def _finish_swap(self, table: str) -> None:
        tmp = f"{table}{_REEMBED}"
        with library(self.uri, f"the re-embedded {table} table", writing=True):
            copy = self._db.open_table(tmp).to_arrow()
            if table in self._table_names():
                self._db.drop_table(table)
            self._db.create_table(table, data=copy, schema=copy.schema)
            self._db.drop_table(tmp)

    def finish_reembed(self, model: str, dim: int) -> None:
        self.set_meta("embedding_model", model)
        self.set_meta("embedding_dim", str(dim))
        for table in SEARCHABLE:
            self.settle_unembedded(table)
        self.embedding_model, self.embedding_dim = model, dim
