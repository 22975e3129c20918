"""Core state: agents, blocks, attachments, block history, idempotency keys, conversation state.

``CoreStore`` (protocol.py) is the one interface ``Memory`` uses for them; ``Memory`` is handed one and never
builds one. Two implementations, siblings: ``SqliteCore`` (sqlite.py + sqlite_history.py; a local data directory:
one transaction per edit) and ``ObjectCore`` (objects.py over bucket.py, object_cache.py, object_layout.py,
object_history.py, object_requests.py, object_rows.py; object storage and ``memory://``: one object per block, conditional writes). They share the row
shapes (protocol.FIELDS), the row mappers (rows.py) and the history encoding (history.py, delta.py).
``migrate.open_core`` picks one, moving the core tables an older tiermem kept in LanceDB (read by lance.py) into it
on first open.
"""

from .protocol import CORE_TABLES, CoreStore

__all__ = ["CORE_TABLES", "CoreStore"]
