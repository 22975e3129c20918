"""Core state: agents, blocks, attachments, block history, idempotency keys, conversation state.

``CoreStore`` (protocol.py) is the one interface ``Memory`` uses for them. Two implementations:
``SqliteCore`` (sqlite.py; the default for a local data directory: one transaction per edit) and
``LanceCore`` (lance.py; the LanceDB tables, for object-storage and ``memory://`` URIs, where a
local SQLite file cannot be shared). ``open_core`` picks one; migrate.py moves an existing
directory's LanceDB core tables into SQLite on first open.
"""

from .protocol import CORE_TABLES, CoreStore

__all__ = ["CORE_TABLES", "CoreStore"]
