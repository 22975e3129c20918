"""Full backup and restore as JSON lines: every agent, block (with its whole history), attachment,
conversation state, message and passage, folder, file (with its text) and file chunk, with ids and timestamps;
vectors optional (file chunks' as passages'). Each agent's view of its folders travels in its metadata, and the
links made on purpose between two of an agent's messages or passages as ``link`` records, last (``links_io``).

Restore validates every line first, then inserts only rows whose key is not stored yet, agents
last: restoring twice, or after an interruption, writes nothing twice. Rows restored without
vectors (or from another embedding model) are embedded before the restore returns.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..base.errors import ValidationError
from ..core.rows import rows_of
from ..domain import filesystem
from .links_io import exported_links, read_links, restore_links
from .progress import Progress

if TYPE_CHECKING:
    from ..domain.memory import Memory

# 2: folders, files and file_chunks too (a format 1 backup has none: it restores as before); 3: manual links too
FORMAT = 3
LINK = "link"  # the record of a link made on purpose: {"a": id, "b": id, "note": text}, after every row
# table -> unique key; restored in this order (agents last: once an agent is visible, all of it is there; a file
# before its folder). ``file_chunks`` are written (vectors as passages') and checked, but a restore cuts a file's
# chunks again from its text and embeds them: the files table is written only through ``archive.files``.
TABLES = {
    "blocks": "id",
    "block_history": "key",
    "attachments": "key",
    "messages": "id",
    "passages": "id",
    "file_chunks": "id",
    "files": "id",
    "folders": "id",
    "conversations": "key",
    "agents": "id",
}
HEADER = "tiermem-backup"
ARCHIVE_TABLES = (
    "messages",
    "passages",
    "file_chunks",
)  # searchable rows kept by the archive (LanceDB), vectors optional
FOLDER_TABLES = filesystem.BACKUP_TABLES  # folders and files (LanceDB, whole rows); the rest by the core store


def export_backup(memory: Memory, out: TextIO, *, vectors: bool = False) -> dict[str, int]:
    model, dim = memory.archive.vectors.model
    out.write(json.dumps({"type": HEADER, "format": FORMAT, "embedding_model": model, "embedding_dim": dim}) + "\n")
    counts: dict[str, int] = {}
    owners: dict[str, str] = {}  # message or passage id -> its agent
    for table in ["agents", *[t for t in TABLES if t != "agents"]]:
        rows: list[Any]
        if table in ARCHIVE_TABLES:
            rows = memory.archive.rows.backup_rows(table, vectors=vectors)
            if table in ("messages", "passages"):
                owners.update((str(r["id"]), str(r["agent_id"])) for r in rows)
        elif table in FOLDER_TABLES:
            rows = filesystem.backup_rows(memory.files, table)
        else:
            rows = memory.core.all_rows(table)
        for r in rows:
            out.write(json.dumps({"type": table, "row": r}, ensure_ascii=False) + "\n")
        counts[table] = len(rows)
    links = [x for x in exported_links(memory, {i: i for i in owners}) if owners[x["a"]] == owners[x["b"]]]
    for link in links:
        out.write(json.dumps({"type": LINK, "row": link}, ensure_ascii=False) + "\n")
    counts["links"] = len(links)
    return counts


def _lines(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        with path.open(encoding="utf-8") as f:
            for n, line in enumerate(f, start=1):
                if line.strip():
                    try:
                        yield n, json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise ValidationError(f"{path}:{n} is not JSON ({exc}); the backup is damaged.") from exc
    except OSError as exc:
        raise ValidationError(f"Cannot read {path}: {exc}.") from exc


def first_record_type(path: Path) -> str | None:
    """The ``type`` of a JSON-lines file's first record (None: not JSON lines), to tell formats apart."""
    try:
        with path.open(encoding="utf-8") as f:
            first = json.loads(f.readline() or "null")
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, RecursionError):  # RecursionError: nested too deep
        return None
    return str(first.get("type")) if isinstance(first, dict) else None


def is_backup(path: Path) -> bool:
    return first_record_type(path) == HEADER


def import_backup(memory: Memory, path: Path, notes: list[str] | None = None) -> dict[str, int]:
    """Restore a backup (``export --format jsonl``) as it was saved; with ``notes``, a note when it holds credentials
    (a restore keeps what was saved: ``tiermem doctor --secrets --redact --yes`` removes them)."""
    archive = memory.archive
    header: dict[str, Any] | None = None
    rows: dict[str, list[dict[str, Any]]] = {t: [] for t in TABLES}
    link_rows: list[Any] = []
    fields = {
        t: set(
            archive.rows.fields(t)
            if t in ARCHIVE_TABLES
            else filesystem.backup_fields(t)
            if t in FOLDER_TABLES
            else memory.core.schema_fields(t)
        )
        for t in TABLES
    }
    for n, item in _lines(path):
        if header is None:
            if not isinstance(item, dict) or item.get("type") != HEADER:
                raise ValidationError(f"{path} is not a tiermem backup (its first line is not the backup header).")
            if int(item.get("format", 0)) > FORMAT:
                raise ValidationError(
                    f"{path} was written by a newer tiermem (backup format {item['format']}); upgrade tiermem."
                )
            header = item
            continue
        table = item.get("type") if isinstance(item, dict) else None
        row = item.get("row") if isinstance(item, dict) else None
        if table == LINK:
            link_rows.append(row)  # checked below, once every row is read
            continue
        if table not in TABLES or not isinstance(row, dict):
            raise ValidationError(f"{path}:{n}: unknown record {table!r}; the backup is damaged.")
        missing = fields[table] - set(row) - {"vector"}
        if missing or not set(row) <= fields[table]:
            raise ValidationError(
                f"{path}:{n}: a {table} row with fields {sorted(row)} does not match this tiermem's "
                f"schema (missing {sorted(missing)})."
            )
        rows[table].append(row)
    if header is None:
        raise ValidationError(f"{path} is empty.")
    if notes is not None:
        notes += _credentials_note(memory, rows)
    owners = {str(r["id"]): str(r["agent_id"]) for t in ("messages", "passages") for r in rows[t]}
    links: dict[str, list[tuple[str, str, str]]] = {}  # agent -> its links
    for a, b, note in read_links(link_rows, f"{path}", owners):
        if owners[a] != owners[b]:
            raise ValidationError(f"{path}: the link {a} - {b} joins two agents' memories; the backup is damaged.")
        links.setdefault(owners[a], []).append((a, b, note))
    name, dim = header.get("embedding_model"), header.get("embedding_dim")
    model = (name, dim) if isinstance(name, str) and isinstance(dim, int) else None  # None: keep no vector
    inserted: dict[str, int] = {}
    progress = Progress("restoring", sum(len(v) for v in rows.values()))
    try:
        for table, key in TABLES.items():
            if table == "agents":  # the links between rows restored now or before (ids kept), before any agent shows
                inserted["links"] = sum(
                    restore_links(memory, agent, pairs, {x: x for a, b, _ in pairs for x in (a, b)})
                    for agent, pairs in links.items()
                )
            if table == "file_chunks":
                progress.advance(len(rows[table]))
                continue  # a restored file's chunks are cut again from its text (filesystem.restore_rows): skipped
            done = 0
            for start in range(0, len(rows[table]), 500):
                batch = rows[table][start : start + 500]
                if table in ARCHIVE_TABLES:
                    done += archive.rows.restore_rows(table, key, batch, model=model)
                elif table in FOLDER_TABLES:
                    done += filesystem.restore_rows(memory.files, table, batch)
                else:
                    done += memory.core.merge_rows(table, key, rows_of(table, batch))
                progress.advance(len(batch))
            inserted[table] = done
    finally:
        progress.close()
    if any(archive.vectors.missing().values()):
        inserted["embedded"] = archive.vectors.catch_up(None)
    return inserted


def _credentials_note(memory: Memory, rows: dict[str, list[dict[str, Any]]]) -> list[str]:
    """A note naming how many rows of each table hold a credential (``Memory.credentials_in``; none when the store
    does not scan), and how to remove them."""
    held = {
        table: n
        for table, found in rows.items()
        if (n := sum(1 for r in found if any(isinstance(v, str) and memory.credentials_in(v) for v in r.values())))
    }
    if not held:
        return []
    where = ", ".join(f"{table}: {n}" for table, n in held.items())
    return [
        f"the backup holds credentials in {sum(held.values())} row(s) ({where}), restored as they were saved; remove "
        "them with `tiermem doctor --secrets --redact --yes`"
    ]
