"""LanceDB tables, Arrow schemas, safe filters, optimistic concurrency and index upkeep.

The only package that imports ``lancedb`` and ``pyarrow``. It knows nothing about edit semantics; it stores
and returns records. Its parts, by what each is for:

- ``loading``: how ``lancedb`` is imported (its unused REST client built and loaded on first use)
- ``boundary``: every call into the library runs inside ``library``/``reads``/``writes`` (errors translated)
- ``query``: ``Filter``, the typed query callers pass, and the only code that writes filter text
- ``schemas``: Arrow schemas, the schema version, migrations
- ``rows``: rows <-> records
- ``base``: the shared state and reads of one open store; ``connection``: ``Store``, opening and checking it
- ``core_tables``: agents, blocks, attachments, history, idempotency, conversation state
- ``tables``: messages and passages (rows, vectors, marks of rows without vectors)
- ``search``: the vector and full-text legs; ``indexes``: index upkeep and compaction; ``reembed``: the swap
"""

from __future__ import annotations

from .boundary import LIBRARY_ERRORS, library, reads, writes
from .connection import DEFAULT_INDEX_CACHE, DEFAULT_METADATA_CACHE, Store
from .query import Filter
from .rows import message_from_row, passage_from_row
from .schemas import MESSAGE_COLUMNS, RESULT_COLUMNS, SCHEMA_VERSION, SEARCHABLE
from .search import VECTOR_EF, VECTOR_NPROBES, VECTOR_REFINE

__all__ = [
    "DEFAULT_INDEX_CACHE", "DEFAULT_METADATA_CACHE", "LIBRARY_ERRORS", "MESSAGE_COLUMNS", "RESULT_COLUMNS",
    "SCHEMA_VERSION", "SEARCHABLE", "VECTOR_EF", "VECTOR_NPROBES", "VECTOR_REFINE", "Filter", "Store", "library",
    "message_from_row", "passage_from_row", "reads", "writes",
]
