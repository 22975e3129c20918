"""Arrow schemas of every table, the schema version, and the migration of a store of an older version."""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa

from ..base.errors import SchemaError
from .query import Filter, compile_filter, is_plumbing

log = logging.getLogger(__name__)

# 1: the first released schema; 2: ``project`` (nullable) in messages and passages, where a row came from (a hook's
# repository root or directory; no project: shared by every project); 3: ``plumbing`` in messages, whether a row is
# the agent loop's own plumbing (``query.is_plumbing``), decided when it is written, so a search never reads payloads.
SCHEMA_VERSION = 3
# The meta key recording the keyword texts' form, and its value: 2, Chinese, Japanese and Korean words also written as
# bigrams (``domain/search/cjk.py``); 3, Thai, Lao, Burmese and Khmer words too. A new store is created with it; an
# older one gets it once ``tiermem optimize`` has written its rows' keyword texts anew (``AgentRows.regram``). A record
# only: ``doctor`` and ``optimize`` ask the store for rows of an older form whatever it says (an older tiermem may still
# write to the store). No migration: the rows are read as they are.
KEYWORD_TEXT, KEYWORD_TEXT_VERSION = "keyword_text", "3"
# The meta key set once no message's keyword text holds what a tool returned (an answer after a tool call holds the
# last thing said before the call: ``archive.context_of``; tiermem before schema 3 wrote the result there). A new store
# is created with it; an older one gets it once ``tiermem optimize`` has written those rows' keyword texts anew
# (``keyword_context.recontext``). A tiermem that writes such rows reads schema 2 at most, so refuses to open a store
# marked; one that opened it before its migration and still runs may write them: its rows come without ``plumbing``,
# and ``tiermem optimize``, deciding those (``settle_plumbing``), unmarks the store (so does a store given its columns
# again: ``missing_columns``).
KEYWORD_CONTEXT = "keyword_context"
# The meta key changed whenever the store is unmarked (``Connection.unsettle_keyword_contexts``): ``recontext`` marks
# the store only if it holds the value it read before its first read of the rows (under ``TEXTS_LOCK``), so rows a
# server's upkeep decided meanwhile (``Rows.settle_plumbing_round``) are looked at again by the next run.
KEYWORD_CONTEXT_UNMARKED = "keyword_context_unmarked"
# The meta key changed, under ``TEXTS_LOCK``, whenever a message is deleted or edited in place (a forget, a redaction:
# ``AgentRows.changing_turns``): ``recontext`` reads again the turns it checked in an earlier batch only if it changed
TURNS_CHANGED = "turns_changed"
# The lock held while keyword texts made from other rows are read and written (``AgentRows.rewriting_texts``), and
# while an upkeep decides rows an older tiermem wrote and unmarks the store (``Rows.settle_plumbing_round``)
TEXTS_LOCK = "keyword-texts"
PROJECT_TABLES = ("messages", "passages")  # the tables with a ``project`` column
# Columns of a table that the store decides from the row's others as it writes it (``query.with_plumbing``): no backup
# holds them, and a restored row is given them again
DERIVED = {"messages": ("plumbing",)}
PLUMBING_BATCH = 1000  # rows decided in one update by ``settle_plumbing``
# Rows an older tiermem wrote without ``plumbing`` that one background upkeep of a server decides at most (their
# payloads read: ``Rows.settle_plumbing_round``); the rest wait for the next upkeep, or ``tiermem optimize``
PLUMBING_ROUND = 2000


def table_schemas(dim: int) -> dict[str, pa.Schema]:
    tables = _table_schemas(dim)
    # A file's text in chunks, searched like passages: ``agent_id`` holds the folder's id, ``group_id`` the file's,
    # and ``tags`` the file's id alone (a hit names its file). No ``project``: a folder is shared as it is attached.
    tables["file_chunks"] = pa.schema([f for f in tables["passages"] if f.name != "project"])
    return tables


def _table_schemas(dim: int) -> dict[str, pa.Schema]:
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
                pa.field("project", pa.string(), nullable=True),
                pa.field("plumbing", pa.bool_(), nullable=True),
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
                pa.field("project", pa.string(), nullable=True),
            ]
        ),
        # Folders (Letta's sources) and their files: the parsed text of each file, its hash and processing status.
        "folders": pa.schema(
            [
                ("id", pa.string()),
                ("name", pa.string()),
                ("description", pa.string()),
                ("instructions", pa.string()),
                ("metadata", pa.string()),
                ("created_us", pa.int64()),
                ("updated_us", pa.int64()),
            ]
        ),
        "files": pa.schema(
            [
                ("id", pa.string()),
                ("folder_id", pa.string()),
                ("name", pa.string()),
                ("original_name", pa.string()),
                ("file_type", pa.string()),
                ("size", pa.int64()),
                ("sha256", pa.string()),
                ("status", pa.string()),
                ("error", pa.string()),
                ("text", pa.string()),
                ("chunks", pa.int64()),
                ("source_path", pa.string()),
                ("created_us", pa.int64()),
                ("updated_us", pa.int64()),
            ]
        ),
    }


SEARCHABLE = ("messages", "passages", "file_chunks")
RESULT_COLUMNS = {
    "messages": ("id", "agent_id", "conversation_id", "seq", "role", "content", "created_us"),
    "passages": ("id", "agent_id", "group_id", "chunk", "content", "tags", "created_us"),
    "file_chunks": ("id", "agent_id", "group_id", "chunk", "content", "tags", "created_us"),
}
MESSAGE_COLUMNS = ("id", "agent_id", "conversation_id", "seq", "role", "content", "payload", "created_us", "project")
REEMBED_SUFFIX = "__reembed"
# The meta key a ``tiermem reembed`` sets before it rewrites any table ("<model> (dim <n>)") and empties last, once the
# new model is recorded: while it is set the tables may hold vectors of two models (``Connection.check_writable``).
REEMBEDDING = "reembedding"
REEMBED_LOCK_FILE = ".tiermem-reembed.lock"  # a local store's writers hold it shared, a reembed's start exclusive
EMBEDDING_LOCK_FILE = ".tiermem-embedding.lock"  # held shared by each process embedding rows stored without vectors
REEMBED_RUN_LOCK_FILE = ".tiermem-reembed-run.lock"  # held by a local store's ``tiermem reembed`` from start to end
UNEMBEDDED_PREFIX = "unembedded:"


def table_names(db: Any) -> list[str]:
    result = db.list_tables()
    return list(getattr(result, "tables", result))


def migrate(uri: str, version: int, tables: dict[str, Any]) -> None:
    """Bring the ``tables`` of a store of schema ``version`` up to ``SCHEMA_VERSION`` (the caller holds the store's
    creation lock and its reembed lock, refuses a store a reembed marked, and records the new version in the meta
    table once this returns). Each step does only what is not done yet, so a migration cut short is finished by the
    next open, and so is a store recorded at version 3 that lacks a column (``missing_columns``: a tiermem before
    schema 3's `tiermem reembed` swapped in copies of its tables without it).

    1 -> 2: a nullable ``project`` column added to messages and passages (LanceDB ``add_columns``: a new column of
    nulls, no row rewritten).
    2 -> 3: ``plumbing`` added to messages (nulls), then decided (``settle_plumbing``). Rows an older tiermem writes
    after the migration (a server still running; one started after a migration cut short) come without it: they are
    left undecided (null, no plumbing to a search) until a server's next background upkeep
    (``Rows.settle_plumbing_round``, a bounded number a round), the next migration run or ``tiermem optimize`` decides
    them."""
    if version not in (1, 2, SCHEMA_VERSION):  # no released schema before version 1: not ours to read
        raise SchemaError(
            f"The data directory {uri!r} has schema version {version}, which this tiermem cannot migrate. "
            "Export it with the tiermem that wrote it, or use another --data-dir."
        )
    for name in PROJECT_TABLES:
        table = tables[name]
        if "project" not in table.schema.names:
            table.add_columns(pa.field("project", pa.string(), nullable=True))
            log.info("store %s: added the project column to %s (schema version 1 -> 2)", uri, name)
    messages = tables["messages"]
    if "plumbing" not in messages.schema.names:
        messages.add_columns(pa.field("plumbing", pa.bool_(), nullable=True))
        log.info("store %s: added the plumbing column to messages (schema version 2 -> 3)", uri)
    decided = settle_plumbing(messages)
    if decided:
        log.info("store %s: decided whether %d message(s) are the agent loop's plumbing", uri, decided)


def missing_columns(tables: dict[str, Any]) -> list[str]:
    """The columns of schema ``SCHEMA_VERSION`` the tables lack ("table.column"): none once migrated, unless a
    tiermem of an older schema replaced a table since (its `tiermem reembed`'s copies)."""
    wanted = [(name, "project") for name in PROJECT_TABLES] + [("messages", "plumbing")]
    # each table's schema read once: from the opened table's manifest, no request to object storage (measured on
    # moto S3: a store's open makes the same requests with this check as without it)
    names = {name: set(tables[name].schema.names) for name in {n for n, _ in wanted}}
    return [f"{name}.{column}" for name, column in wanted if column not in names[name]]


def settle_plumbing(messages: Any, limit: int | None = None) -> int:
    """Decide the ``plumbing`` column of the messages whose column is null (the rows of a store migrated to schema 3,
    and those an older tiermem wrote since), exactly as ``Rows`` writes it (``query.is_plumbing``); returns the rows
    decided. Cheap when there are none (a count of nulls). The rows that cannot be plumbing (``MAY_BE_PLUMBING``:
    their payload holds no plumbing tool's name, nor any escaped character) are set false in the store; the payloads
    of the others are read and each decided by ``is_plumbing``. Only rows still undecided are written (a row written
    meanwhile by this tiermem is decided already), and a row written after the read stays undecided for the next
    run. ``limit``: decide at most that many rows (a server's upkeep: the payloads of up to ``limit`` undecided rows
    read, each decided by ``is_plumbing``, nothing else written); the rest stay undecided for the next run."""
    if not messages.count_rows(compile_filter(Filter(undecided=True))):
        return 0
    if limit is not None:
        return _decide(messages, limit)
    decided = int(messages.count_rows(compile_filter(Filter(undecided=True, may_be_plumbing=False))))
    if decided:
        messages.update(where=compile_filter(Filter(undecided=True, may_be_plumbing=False)), values={"plumbing": False})
    return decided + _decide(messages, None)


def _decide(messages: Any, limit: int | None) -> int:
    """Decide the undecided messages (up to ``limit``), each from its role and payload (``is_plumbing``), written in
    batches of ``PLUMBING_BATCH`` ids; returns how many."""
    rows = (
        messages.search()
        .where(compile_filter(Filter(undecided=True)))
        .select(["id", "role", "payload"])
        .limit(limit)
        .to_batches()
    )
    verdicts: dict[bool, list[str]] = {True: [], False: []}
    for batch in rows:
        for i, role, payload in zip(*(batch.column(c).to_pylist() for c in ("id", "role", "payload")), strict=True):
            verdicts[is_plumbing(role, payload)].append(str(i))
    for verdict, ids in verdicts.items():
        for start in range(0, len(ids), PLUMBING_BATCH):
            where = compile_filter(Filter(undecided=True, ids=tuple(ids[start : start + PLUMBING_BATCH])))
            messages.update(where=where, values={"plumbing": verdict})
    return len(verdicts[True]) + len(verdicts[False])
