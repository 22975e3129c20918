"""The recall and archival store: LanceDB tables, Arrow schemas, typed filters, optimistic concurrency, index upkeep.

The only package that imports ``lancedb`` and ``pyarrow``. It knows nothing about edit semantics; it stores rows
and returns records (``Message``, ``Passage``) and what a search leg found (``Found``), never a raw LanceDB row of a
search. ``Store`` (store.py) is composed of parts that share one ``Connection``:

- ``loading``: how ``lancedb`` is imported (its unused REST client built and loaded on first use)
- ``boundary``: every call into the library runs inside ``library``/``reads``/``writes`` (errors translated)
- ``query``: ``Filter``, the typed query callers pass, and ``compile_filter``, the only code that writes filter text
- ``schemas``: Arrow schemas, the schema version, migrations
- ``connection``: ``Connection``, the open database, its table handles, meta table, snapshots and write counter
- ``tables``: ``Rows``, messages and passages (rows, vectors, marks of rows without vectors); ``appends``:
  ``GroupAppend``, one process's appends to a table committed together
- ``search``: ``Search``, the vector and full-text legs; ``indexes``: ``Indexes``, upkeep and compaction;
  ``reembed``: ``Reembed``, the swap; ``swaps``: a copy swapped in, and what an interrupted reembed left settled
"""

from __future__ import annotations

from .boundary import LIBRARY_ERRORS, Retry, commit_with_retries, library, reads, writes
from .connection import DEFAULT_INDEX_CACHE, DEFAULT_METADATA_CACHE
from .query import Filter
from .reembed import alone as reembed_alone
from .schemas import (
    DERIVED,
    KEYWORD_CONTEXT,
    KEYWORD_CONTEXT_UNMARKED,
    KEYWORD_TEXT,
    KEYWORD_TEXT_VERSION,
    MESSAGE_COLUMNS,
    RESULT_COLUMNS,
    SCHEMA_VERSION,
    SEARCHABLE,
    TEXTS_LOCK,
    TURNS_CHANGED,
)
from .search import VECTOR_EF, VECTOR_NPROBES, VECTOR_REFINE
from .store import Store
from .tables import message_from_row, passage_from_row

__all__ = [
    "DEFAULT_INDEX_CACHE",
    "DEFAULT_METADATA_CACHE",
    "DERIVED",
    "KEYWORD_CONTEXT",
    "KEYWORD_CONTEXT_UNMARKED",
    "KEYWORD_TEXT",
    "KEYWORD_TEXT_VERSION",
    "LIBRARY_ERRORS",
    "MESSAGE_COLUMNS",
    "RESULT_COLUMNS",
    "SCHEMA_VERSION",
    "SEARCHABLE",
    "TEXTS_LOCK",
    "TURNS_CHANGED",
    "VECTOR_EF",
    "VECTOR_NPROBES",
    "VECTOR_REFINE",
    "Filter",
    "Retry",
    "reembed_alone",
    "Store",
    "commit_with_retries",
    "library",
    "message_from_row",
    "passage_from_row",
    "reads",
    "writes",
]
