"""Full backup and restore as JSON lines: every agent, block (with its whole history), attachment,
conversation state, message and passage, folder, file (with its text) and file chunk, with ids and timestamps;
vectors optional (file chunks' as passages'). Each agent's view of its folders travels in its metadata, and the
links made on purpose between two of an agent's messages or passages as ``link`` records, after the rows
(``links_io``), then each agent's uses of its memories as ``use`` records (``core/uses.py``: how often and how
recently each was used, what makes it hot or cold), only those of memories the backup holds. The last line is the
trailer: how many records of each kind the backup holds, so a backup cut short is refused, not restored in part (a
backup of format 3 or older has none: restored with a note saying so; one of format 4 or older holds no uses: its
memories are restored cold, with a note saying so). From format 6 the use records are followed by the forget record's
keys (digests, never text: ``domain/forget_record.py``), added to the target's record by a restore.

Restore validates every line first, then checks the backup against the store (``backup_plan``: an agent both hold,
changed differently, is refused before anything is written, or replaced with ``--replace``; an untouched agent,
such as the ``default`` agent a first command makes, or an earlier state of the backup's (an older backup of the
same store restored here), is replaced; one the store took further since is kept as it is, nothing of it written,
or with ``--replace`` replaced: a rollback), then inserts only rows whose key is not stored
yet, agents last, then the use records whose agent and memory have none here, or an earlier one (``core.uses.later``;
a replaced agent's were deleted with it): restoring twice, or after an interruption, writes nothing twice. Rows restored without vectors (or
from another embedding model) are embedded before the restore returns.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from dataclasses import replace as replaced
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..base.errors import ValidationError
from ..core.rows import as_read, mistyped, rows_of
from ..core.uses import Use
from ..domain import filesystem, forget_record, forget_restore
from . import backup_plan
from .backup_uses import backup_uses, check_uses, use_of, use_row
from .links_io import exported_links, read_links, restore_links
from .progress import Progress

if TYPE_CHECKING:
    from ..domain.memory import Memory

# 2: folders, files and file_chunks too (a format 1 backup has none: it restores as before); 3: manual links too;
# 4: the trailer (``END``), the count of each kind of record, last: a backup without it, or whose counts differ, is
# incomplete and refused; 5: the use records (``USE``), after the links; 6: the forget record's keys (``FORGOTTEN``)
FORMAT = 6
USE = "use"  # a use record: {"type": USE, "row": {id, kind, agent_id, count, last_us, heat}} (``core.uses.Use``)
USES_SINCE = 5  # the first format with use records
FORGOTTEN = "forgotten"  # a key of the forget record: {"type": FORGOTTEN, "row": digest} (never text), after the uses
FORGOTTEN_SINCE = 6  # the first format with them
LINK = "link"  # the record of a link made on purpose: {"a": id, "b": id, "note": text}, after every row
END = "tiermem-backup-end"  # the last record: {"type": END, "rows": {table or "links": how many records}}
# Fields a row of an older format may lack (added since, without a format of their own), and the value such a row
# gets: ``project`` came with schema 2, while backups were of format 2 (no project: shared by every project).
ADDED_FIELDS: dict[str, dict[str, Any]] = {"messages": {"project": None}, "passages": {"project": None}}
ADDED_BEFORE = 3  # formats below this one may lack the ADDED_FIELDS
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
            rows = [as_read(table, r) for r in memory.core.all_rows(table)]  # as the store reads them
        for r in rows:
            out.write(json.dumps({"type": table, "row": r}, ensure_ascii=False) + "\n")
        counts[table] = len(rows)
    links = [x for x in exported_links(memory, {i: i for i in owners}) if owners[x["a"]] == owners[x["b"]]]
    for link in links:
        out.write(json.dumps({"type": LINK, "row": link}, ensure_ascii=False) + "\n")
    counts["links"] = len(links)
    uses = backup_uses(memory)
    for use in uses:
        out.write(json.dumps({"type": USE, "row": use_row(use)}, ensure_ascii=False) + "\n")
    counts["uses"] = len(uses)
    forgotten = sorted(memory.core.forgotten_keys())  # digests only: a restore elsewhere leaves out what they name
    for digest in forgotten:
        out.write(json.dumps({"type": FORGOTTEN, "row": digest}) + "\n")
    counts[FORGOTTEN] = len(forgotten)
    out.write(json.dumps({"type": END, "rows": counts}) + "\n")
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
                    except RecursionError:
                        raise ValidationError(
                            f"{path}:{n} nests JSON arrays or objects too deeply to read; no tiermem backup does, so "
                            "the backup is damaged. Nothing was written."
                        ) from None
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


@dataclass
class Backup:
    """A backup file read whole and checked: its header, its rows by table, its links (unchecked until every row is
    read: ``import_backup``), its use records (none before format 5), and notes for the user."""

    header: dict[str, Any]
    rows: dict[str, list[dict[str, Any]]]
    links: list[Any]
    notes: list[str]
    uses: list[Use]
    forgotten: set[str] = field(default_factory=set)  # the forget record's keys where it was made (format 6 on)


def read_backup(memory: Memory, path: Path) -> Backup:
    """Every record of the backup at ``path``, checked against this tiermem's rows (fields added since an older
    format filled in) and against its trailer; a ``ValidationError`` naming the first problem otherwise."""
    archive = memory.archive
    header: dict[str, Any] | None = None
    version = 0
    rows: dict[str, list[dict[str, Any]]] = {t: [] for t in TABLES}
    link_rows: list[Any] = []
    uses: list[Use] = []
    forgotten: set[str] = set()
    end: tuple[int, Any] | None = None  # (line, its counts)
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
            version = _format_of(path, item.get("format"))
            header = item
            continue
        if end is not None:
            raise ValidationError(
                f"{path}:{n}: a record after the backup's last line (line {end[0]}, its row counts); the backup is "
                "damaged. Nothing was written."
            )
        table = item.get("type") if isinstance(item, dict) else None
        row = item.get("row") if isinstance(item, dict) else None
        if table == END and version >= 4:
            end = (n, item.get("rows"))
            continue
        if table == LINK:
            link_rows.append(row)  # checked below, once every row is read
            continue
        if table == USE and version >= USES_SINCE:
            uses.append(use_of(path, n, row))  # its agent and memory checked once every row is read
            continue
        if table == FORGOTTEN and version >= FORGOTTEN_SINCE:
            if not forget_record.is_key(row):
                raise ValidationError(
                    f"{path}:{n}: a forget record key that is not one (a 64-character digest, optionally '@' and a "
                    "time); the backup is damaged."
                )
            forgotten.add(str(row))
            continue
        if table not in TABLES or not isinstance(row, dict):
            raise ValidationError(f"{path}:{n}: unknown record {table!r}; the backup is damaged.")
        if version < ADDED_BEFORE:
            row = {**ADDED_FIELDS.get(table, {}), **row}
        missing = fields[table] - set(row) - {"vector"}
        if missing or not set(row) <= fields[table]:
            raise ValidationError(
                f"{path}:{n}: a {table} row with fields {sorted(row)} does not match this tiermem's "
                f"schema (missing {sorted(missing)})."
            )
        _check_types(path, n, table, row)
        rows[table].append(row)
    if header is None:
        raise ValidationError(f"{path} is empty.")
    notes: list[str] = []
    if version < 4:
        notes.append(
            f"the backup is of format {version} (an older tiermem's), which does not record how many rows it holds: "
            "whether it is complete cannot be checked"
        )
    else:
        found = {**{t: len(v) for t, v in rows.items()}, "links": len(link_rows), "uses": len(uses)}
        _check_complete(path, end, {**found, FORGOTTEN: len(forgotten)} if version >= FORGOTTEN_SINCE else found)
    if version < USES_SINCE:
        notes.append(
            f"the backup is of format {version}, which holds no use counts: its memories are restored as never used "
            "(cold in `tiermem stats`)"
        )
    check_uses(path, uses, rows)
    _check_blocks(path, rows)
    return Backup(header, rows, link_rows, notes, uses, forgotten)


def _check_types(path: Path, n: int, table: str, row: dict[str, Any]) -> None:
    """A core row's typed fields (``core.rows.mistyped``: versions, limits, counts, times, read_only) hold values of
    their type: checked with every line, before anything is written."""
    wrong = mistyped(table, row)
    if wrong is not None:
        field, kind = wrong
        key = row.get(TABLES[table])
        raise ValidationError(
            f"{path}:{n}: the {table} row {key!r} holds {field} = {row[field]!r}, not {kind}: the backup was "
            "changed after it was written, or is damaged. Nothing was written; restore an unchanged copy, or export "
            "again."
        )


def _check_blocks(path: Path, rows: dict[str, list[dict[str, Any]]]) -> None:
    """Each block's value is its history's current version's (when the backup holds that version): tiermem writes
    both in one commit, so a difference is a backup changed after it was written."""
    history = {(str(r["block_id"]), int(r["version"])): r for r in rows["block_history"]}
    for block in rows["blocks"]:
        version = history.get((str(block["id"]), int(block["version"])))
        if version is not None and version["value"] != block["value"]:
            raise ValidationError(
                f"{path}: block {block['label']!r} ({block['id']}) holds another value than its history's version "
                f"{block['version']}, which tiermem writes with it: the backup was changed after it was written, or "
                "is damaged. Nothing was written; restore an unchanged copy, or export again."
            )


def _format_of(path: Path, value: object) -> int:
    """The header's backup format: a whole number from 1 to ``FORMAT``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError(
            f"{path}: the backup header's format is {value!r}, not a format number (1 to {FORMAT}); the backup is "
            "damaged (its first line). Nothing was written."
        )
    if value > FORMAT:
        raise ValidationError(f"{path} was written by a newer tiermem (backup format {value}); upgrade tiermem.")
    return value


def _check_complete(path: Path, end: tuple[int, Any] | None, found: dict[str, int]) -> None:
    """The trailer is there, and says as many records of each kind as were read."""
    if end is None:
        raise ValidationError(
            f"{path} ends before its last line (the row counts every backup of format {FORMAT} ends with): it was cut "
            "short (a partial copy or an interrupted export). Nothing was written; restore a complete copy, or export "
            "again."
        )
    line, counts = end
    if not isinstance(counts, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in counts.items()
    ):
        raise ValidationError(
            f"{path}:{line}: the row counts are malformed; the backup is damaged. Nothing was written."
        )
    differ = {k: (int(counts.get(k, 0)), found.get(k, 0)) for k in set(counts) | set(found)}
    wrong = sorted((k, said, got) for k, (said, got) in differ.items() if said != got)
    if wrong:
        shown = ", ".join(f"{k}: {got} of {said}" for k, said, got in wrong)
        raise ValidationError(
            f"{path} does not hold the rows its last line counts ({shown}): it is incomplete or was changed. Nothing "
            "was written; restore a complete copy, or export again."
        )


def import_backup(
    memory: Memory,
    path: Path,
    notes: list[str] | None = None,
    *,
    replace: bool = False,
    include_forgotten: bool = False,
) -> dict[str, int]:
    """Restore a backup (``export --format jsonl``) as it was saved; with ``notes``, a note when it holds credentials
    (a restore keeps what was saved: ``tiermem doctor --secrets --redact --yes`` removes them), or when it is of an
    older format whose completeness cannot be checked. An agent the store holds too is replaced when untouched (or
    with ``replace``), and refused when changed differently (``backup_plan``). What was forgotten here is left out
    (``forget_record``), unless ``include_forgotten``: then restored, and taken out of the forget record."""
    archive = memory.archive
    backup = whole = read_backup(memory, path)
    record = memory.core.forgotten_keys()
    carried = set() if include_forgotten else backup.forgotten - record  # forgotten where the backup was made
    record = record | carried
    systems = forget_restore.systems_here(memory, record)  # as a forget left them (before any agent is replaced)
    prompts: list[str] = []  # the note naming the agents given the default system prompt (``forget_record``)
    if not include_forgotten:  # the backup as if it had been made after the forgets
        left = forget_record.left_out(backup.rows, record, systems, memory.default_system)
        prompts = forget_record.prompts_note(left)
        forget_restore.retext(left)
        backup = replaced(backup, rows=left.rows, **forget_record.of_the_rest(left, backup.links, backup.uses))
    rows = backup.rows
    if notes is not None:
        notes += backup.notes + _credentials_note(memory, rows)
    owners = {str(r["id"]): str(r["agent_id"]) for t in ("messages", "passages") for r in rows[t]}
    links: dict[str, list[tuple[str, str, str]]] = {}  # agent -> its links
    for a, b, note in read_links(backup.links, f"{path}", owners):
        if owners[a] != owners[b]:
            raise ValidationError(f"{path}: the link {a} - {b} joins two agents' memories; the backup is damaged.")
        links.setdefault(owners[a], []).append((a, b, note))
    pairs = [(a, b) for found in links.values() for a, b, _note in found]
    plan = backup_plan.agents_to_replace(memory, rows, path=path, replace=replace, links=pairs)
    cleared, kept = plan.replaced, plan.kept
    if notes is not None:
        notes += backup_plan.replaced_note(cleared) + backup_plan.kept_note(memory, rows, kept)
        notes += backup_plan.merged_note(rows, plan.merged) + backup_plan.restored_note(memory, rows, plan.earlier)
    rows = _without(rows, kept)  # nothing of an agent kept as it is: no row it lacks comes back
    # what is left out (of every agent: a kept one's too), or restored (not a kept agent's: nothing of it is written)
    forgotten = forget_record.left_out(_without(whole.rows, kept) if include_forgotten else whole.rows, record)
    if notes is not None:
        notes += forget_record.note(forgotten, included=include_forgotten) + prompts
    links = {a: found for a, found in links.items() if a not in kept}
    uses = [u for u in backup.uses if u.agent_id not in kept]
    name, dim = backup.header.get("embedding_model"), backup.header.get("embedding_dim")
    model = (name, dim) if isinstance(name, str) and isinstance(dim, int) else None  # None: keep no vector
    inserted: dict[str, int] = {}
    if carried:  # after every check, before any write: an older backup restored here later leaves it out too
        memory.core.record_forgotten(carried)
    for agent in cleared:  # after every check; an interrupted restore finds each untouched, or gone, again
        memory.delete_agent(agent.id, purge=False)
    unpurged = memory.purge_core() if cleared else ""  # once for all of them: each purge rewrites the whole file
    if notes is not None and unpurged:
        notes.append(
            "the replaced agents were deleted, but the core state's files are not purged of their old values yet "
            f"(run `tiermem optimize`): {unpurged}"
        )
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
                    done += memory.core.merge_rows(table, key, rows_of(table, batch), fill_gaps=include_forgotten)
                progress.advance(len(batch))
            inserted[table] = done
    finally:
        progress.close()
    renamed = filesystem.restored_names(memory.files, rows["folders"])
    if notes is not None and renamed:
        notes.append(
            "this data directory has its own folder of a name the backup's has (kept as it is): "
            + ", ".join(f"the backup's {old!r} was restored as {new!r}" for old, new in renamed.values())
        )
    if include_forgotten and (restored := forget_record.restored_keys(_without(whole.rows, kept), record)):
        memory.core.unrecord_forgotten(restored)  # only what was restored, recorded when this restore began
    late = memory.core.forgotten_keys() - record  # recorded by a forget running meanwhile: forgotten again
    said = forget_restore.forgotten_meanwhile(memory, whole.rows, late) if late else []
    if notes is not None:
        notes += said
    inserted["uses"] = memory.uses.restore(uses)  # after the rows; the later record wins (``UseStore.restore``)
    if any(archive.vectors.missing().values()):
        inserted["embedded"] = archive.vectors.catch_up(None)
    return inserted


def _without(rows: dict[str, list[dict[str, Any]]], agents: list[str]) -> dict[str, list[dict[str, Any]]]:
    """``rows`` without those of ``agents`` (``backup_plan.keys_of``: their messages, passages, conversation states,
    attachments, and the blocks attached to them with their history)."""
    if not agents:
        return rows
    keys: dict[str, set[str]] = {}
    for agent_id in agents:
        for table, found in backup_plan.keys_of(rows, agent_id).items():
            keys.setdefault(table, set()).update(found)
    keys["agents"] = set(agents)
    return {t: [r for r in found if str(r[TABLES[t]]) not in keys.get(t, set())] for t, found in rows.items()}


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
