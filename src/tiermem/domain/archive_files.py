"""``FileRows`` (``archive.files``): folders, their files and the files' chunks in the store.

A file is written so that it never claims more than is stored: its row is committed first with the status
``embedding`` (its text and hash included), then its old chunks are deleted and the new ones appended, and only then
is the row committed ``completed`` with its chunk count. A crash in between leaves a file whose status says it was
not finished (``tiermem folders show`` lists it; a re-upload or sync finishes it), never a ready file without chunks.
A file that could not be parsed is stored with the status ``error``, its reason, no text and no chunks. Its chunks
are cut and embedded before the first commit, and the commits are made under the store's lock ``file-chunks``
(``Connection.exclusive``: a lock file for a local store, a lease on object storage): two processes storing one file
at once (two uploads of a directory, a manual upload beside ``folders sync --watch``) then leave one chunk set, not
one per writer, and the later one finds the file stored and says it is unchanged (``write_changed``).

Chunks are rows of ``file_chunks`` shaped like archival passages (``agent_id`` is the folder, ``group_id`` and the one
tag the file), so a file search is the archive's own hybrid search and ranking over them.

Why this module is long: folders, files and chunks are written together under one lock (a folder's name checked in
the same lock as its write, a file's row and chunks in the order above); split by noun, each part would take the
lock and re-read what the others just wrote.
"""

from __future__ import annotations

import json
import threading
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from ..base.errors import NotFoundError
from ..base.records import Folder, StoredFile, from_us, now, to_us
from ..store import Filter
from .file_embedding import Embedded, embed_files
from .file_views import GrepFile, JoinedLines, strategy_of, view_lines
from .search.cjk import keyword_text

if TYPE_CHECKING:
    from ..store import Store
    from .archive_vectors import Vectors

FILE_COLUMNS = (
    "id",
    "folder_id",
    "name",
    "original_name",
    "file_type",
    "size",
    "sha256",
    "status",
    "error",
    "chunks",
    "source_path",
    "created_us",
    "updated_us",
)
# A file's chunks are at most this many word pieces (the model's window if smaller): MiniLM was trained on 128, a
# 128-piece chunk embeds ~35% faster per piece than a 256-piece one on 2 cores, and names its passage more closely.
FILE_CHUNK_TOKENS = 128
LINE_CACHE_FILES = 20_000  # files whose view lines are kept in memory for grep (about their text's size)
GREP_VIEWS = 8  # agents whose attached files are kept as grep reads them (``FileRows.grep_view``)
CHUNKS_LOCK = "file-chunks"  # the store's lock held while files and their chunks are written or deleted (and while
# a folder's name is checked and the folder stored: ``put_named_folder``)
Written = Literal["added", "updated", "unchanged"]  # what ``FileRows.write_changed`` did with a file


def folder_from_row(r: dict[str, Any]) -> Folder:
    return Folder(
        id=r["id"],
        name=r["name"],
        description=r["description"] or "",
        instructions=r["instructions"] or "",
        metadata=json.loads(r["metadata"] or "{}"),
        created_at=from_us(r["created_us"]),
        updated_at=from_us(r["updated_us"]),
    )


def folder_row(f: Folder) -> dict[str, Any]:
    return {
        "id": f.id,
        "name": f.name,
        "description": f.description,
        "instructions": f.instructions,
        "metadata": json.dumps(f.metadata, sort_keys=True),
        "created_us": to_us(f.created_at),
        "updated_us": to_us(f.updated_at),
    }


def file_from_row(r: dict[str, Any]) -> StoredFile:
    return StoredFile(
        id=r["id"],
        folder_id=r["folder_id"],
        name=r["name"],
        original_name=r["original_name"],
        file_type=r["file_type"],
        size=int(r["size"]),
        sha256=r["sha256"],
        status=r["status"],
        error=r["error"] or "",
        chunks=int(r["chunks"] or 0),
        source_path=r["source_path"] or "",
        created_at=from_us(r["created_us"]),
        updated_at=from_us(r["updated_us"]),
    )


def file_row(f: StoredFile, text: str) -> dict[str, Any]:
    return {
        "id": f.id,
        "folder_id": f.folder_id,
        "name": f.name,
        "original_name": f.original_name,
        "file_type": f.file_type,
        "size": f.size,
        "sha256": f.sha256,
        "status": f.status,
        "error": f.error,
        "text": text,
        "chunks": f.chunks,
        "source_path": f.source_path,
        "created_us": to_us(f.created_at),
        "updated_us": to_us(f.updated_at),
    }


class FileRows:
    """Folders, files and file chunks over the archive's store (``archive.files``)."""

    def __init__(self, store: Store, vectors: Vectors) -> None:
        self.store = store
        self.vectors = vectors
        self._lines: OrderedDict[str, tuple[str, JoinedLines]] = OrderedDict()  # file id -> (sha256, view lines)
        self._lines_lock = threading.Lock()
        self._listing: tuple[int, list[StoredFile]] | None = None  # (files table version, every file)
        self._files: tuple[tuple[int, tuple[str, ...]], list[StoredFile]] | None = None  # the last ``files`` answer
        # agents' attached files as grep reads them: id(view) -> (the view, the ``files`` answer, the GrepFiles)
        self._grep_views: OrderedDict[int, tuple[object, list[StoredFile], list[GrepFile]]] = OrderedDict()
        self._dropped = 0  # how many times ``_forget`` dropped cached files: what was read before is not kept after

    # -- folders --------------------------------------------------------------

    def folders(self) -> list[Folder]:
        """Every folder, oldest first."""
        rows = self.store.conn.snapshot("folders")
        return sorted((folder_from_row(r) for r in rows), key=lambda f: (f.created_at, f.id))

    def folder(self, folder_id: str) -> Folder | None:
        return next((f for f in self.folders() if f.id == folder_id), None)

    def folder_named(self, name: str) -> Folder | None:
        return next((f for f in self.folders() if f.name == name), None)

    def put_folder(self, folder: Folder) -> None:
        self.store.rows.upsert_rows("folders", "id", [folder_row(folder)])

    def put_named_folder(self, folder: Folder) -> Folder | None:
        """Store ``folder`` (a new one, or one renamed) unless another folder holds its name, or has it as its id (a
        folder is reached by its id too): that folder is returned then, nothing written; None once stored. The name is
        checked and the folder written under the store's lock (``CHUNKS_LOCK``), so two processes creating or
        renaming to one name at once make one folder of it."""
        with self.store.conn.exclusive(CHUNKS_LOCK):
            other = self._name_holder(self._latest_folders(), folder)
            if other is not None:
                return other
            self.put_folder(folder)
        return None

    def change_folder(self, folder: Folder, changes: Mapping[str, str]) -> tuple[Folder, Folder | None]:
        """Apply ``changes`` (a folder's ``name``, ``description``, ``instructions``) to ``folder`` as it is stored
        now, under the store's lock (``CHUNKS_LOCK``), so that a rename or an edit racing another process's neither
        brings back a folder deleted meanwhile nor writes back the other fields as they were read before. Returns the
        folder as written, and None; or, when another folder holds the new name (``put_named_folder``), the folder
        unchanged and that one, nothing written. ``NotFoundError`` when the folder was deleted meanwhile."""
        with self.store.conn.exclusive(CHUNKS_LOCK):
            folders = self._latest_folders()
            current = next((f for f in folders if f.id == folder.id), None)
            if current is None:
                raise NotFoundError(
                    f"folder {folder.name!r} was deleted meanwhile (by another process): nothing "
                    "was changed; create it again with `tiermem folders create` if it is still wanted."
                )
            changed = replace(
                current,
                name=changes.get("name", current.name),
                description=changes.get("description", current.description),
                instructions=changes.get("instructions", current.instructions),
                updated_at=now(),
            )
            if "name" in changes and (other := self._name_holder(folders, changed)) is not None:
                return current, other
            self.put_folder(changed)
        return changed, None

    def _latest_folders(self) -> list[Folder]:
        """Every folder as stored now (not one read up to ``read_staleness`` ago), oldest first."""
        rows = self.store.conn.rows("folders", None, latest=True)
        return sorted((folder_from_row(r) for r in rows), key=lambda f: (f.created_at, f.id))

    @staticmethod
    def _name_holder(folders: Sequence[Folder], folder: Folder) -> Folder | None:
        """The other folder that holds ``folder``'s name, or has it as its id (a folder is reached by its id too)."""
        others = [f for f in folders if f.id != folder.id]
        other = next((f for f in others if f.name == folder.name), None)
        return other or next((f for f in others if f.id == folder.name), None)

    def delete_folder(self, folder_id: str) -> int:
        """Delete a folder with its files and their chunks (chunks first, the folder row last); returns the files."""
        with self.store.conn.exclusive(CHUNKS_LOCK):
            self._forget("file_chunks", Filter(agent_ids=(folder_id,)))
            self._forget("files", Filter(folder_ids=(folder_id,)))
            self._forget("folders", Filter(ids=(folder_id,)))
            self.store.rows.delete("file_chunks", Filter(agent_ids=(folder_id,)))
            files = self.store.rows.delete("files", Filter(folder_ids=(folder_id,)))
            self.store.rows.delete("folders", Filter(ids=(folder_id,)))
        return files

    # -- files ----------------------------------------------------------------

    def listing(self) -> list[StoredFile]:
        """Every file (without its text), re-read only when the files table moved (any process's write)."""
        version = self.store.conn.version("files")
        cached = self._listing
        if cached is not None and cached[0] == version:
            return cached[1]
        rows = self.store.conn.rows("files", None, columns=FILE_COLUMNS)
        found = sorted((file_from_row(r) for r in rows), key=lambda f: (f.folder_id, f.name))
        self._listing = (version, found)
        return found

    def holding(self, text: str, *, folder_ids: Sequence[str] | None) -> list[tuple[str, str]]:
        """(folder id, file name) of every stored file of ``folder_ids`` (None: of every folder) whose text holds
        ``text`` exactly (forgetting names them). The scope is required: a forget for one agent looks in the folders
        attached to it only (another's files must not answer it)."""
        scope = tuple(folder_ids) if folder_ids is not None else None
        rows = self.store.conn.rows("files", Filter(text_holds=text, folder_ids=scope), columns=("folder_id", "name"))
        return sorted((str(r["folder_id"]), str(r["name"])) for r in rows)

    def files(self, folder_ids: Sequence[str]) -> list[StoredFile]:
        """The files of these folders (without their text), by folder in the given order, then by name (the list is
        shared: never change it)."""
        listing = self.listing()
        key = (id(listing), tuple(folder_ids))
        known = self._files
        if known is not None and known[0] == key:
            return known[1]
        order = {fid: i for i, fid in enumerate(folder_ids)}
        found = sorted((f for f in listing if f.folder_id in order), key=lambda f: (order[f.folder_id], f.name))
        self._files = (key, found)
        return found

    def file(self, file_id: str) -> StoredFile | None:
        return next((f for f in self.listing() if f.id == file_id), None)

    def text(self, file_id: str) -> str:
        rows = self.store.conn.rows("files", Filter(ids=(file_id,)), limit=1, columns=("id", "text"))
        if not rows:
            raise NotFoundError(f"No file with id {file_id!r}; list a folder's files with `tiermem folders show NAME`.")
        return str(rows[0]["text"] or "")

    def texts(self, file_ids: Sequence[str]) -> dict[str, str]:
        if not file_ids:
            return {}
        rows = self.store.conn.rows("files", Filter(ids=tuple(file_ids)), columns=("id", "text"))
        return {r["id"]: str(r["text"] or "") for r in rows}

    def write(self, items: Sequence[tuple[StoredFile, str]], *, embed: bool = True) -> list[StoredFile]:
        """Store files with their parsed text: their rows (status ``embedding``), then their chunks, then the rows
        ``completed`` with their chunk counts; four commits for the whole batch. Each record's ``updated_at`` is
        kept as given (the time its content changed: the timeline's "modified"), whatever the processing took. ``embed`` False stores the chunks
        without vectors (found by keywords at once, by meaning once the backfill has embedded them), but for the
        chunks a file already had, which keep theirs (``_stored_vectors``)."""
        return [r for r, _ in self._write(items, embed=embed, keep_same=False)]

    def write_changed(
        self, items: Sequence[tuple[StoredFile, str]], *, embed: bool = True, progress: Embedded | None = None
    ) -> list[tuple[StoredFile, Written]]:
        """``write``, but a file stored with the same content hash and ``completed`` (by another process since the
        caller looked: two uploads of one directory at once) is left as it is: ``unchanged`` with its stored record.
        The others are ``added`` or ``updated`` as the table is when they are written. ``progress``: told how far
        each file's chunks are embedded (``file_embedding``)."""
        return self._write(items, embed=embed, keep_same=True, progress=progress)

    def _write(
        self,
        items: Sequence[tuple[StoredFile, str]],
        *,
        embed: bool,
        keep_same: bool,
        progress: Embedded | None = None,
    ) -> list[tuple[StoredFile, Written]]:
        """The chunks are cut and embedded first; the commits are made under the store's lock ``file-chunks``
        (``Connection.exclusive``), so that two processes replacing one file's chunks at once (its deletion, then
        its append) do not both append: one chunk set per file, whoever writes last."""
        if not items:
            return []
        ids = [r.id for r, _ in items]
        known = self._stored_vectors(ids)
        pieces = self.vectors.embedder.chunk_many([t if t.strip() else "" for _, t in items], FILE_CHUNK_TOKENS)
        chunk_rows = [self._chunk_rows(r, chunks) for (r, _), chunks in zip(items, pieces, strict=True)]
        for row in (row for rows in chunk_rows for row in rows):  # a chunk the file already had keeps its vector
            row["vector"] = known.get((row["group_id"], row["content"]))
        if embed:
            embed_files(
                self.vectors.embed_rows,
                [(r.name, rows) for (r, _), rows in zip(items, chunk_rows, strict=True)],
                progress,
            )
        with self.store.conn.exclusive(CHUNKS_LOCK):
            stored = {f.id: f for f in self._latest(ids)}
            out: list[tuple[StoredFile, Written] | None] = [None] * len(items)
            todo: list[tuple[int, StoredFile, str, list[dict[str, Any]]]] = []
            for i, ((r, t), rows) in enumerate(zip(items, chunk_rows, strict=True)):
                old = stored.get(r.id)
                if keep_same and old is not None and old.sha256 == r.sha256 and old.status == "completed":
                    out[i] = (old, "unchanged")
                else:
                    todo.append((i, r, t, rows))
            if todo:  # ``updated_at`` stays the caller's: when the content changed, not when its chunks were stored
                pending = [(replace(r, status="embedding", error="", chunks=0), t) for _, r, t, _ in todo]
                written = Filter(ids=tuple(r.id for r, _ in pending))
                self._forget("files", written)  # a replaced file's old text
                self._forget("file_chunks", Filter(group_ids=written.ids))
                self.store.rows.upsert_rows("files", "id", [file_row(r, t) for r, t in pending])
                self.store.rows.delete("file_chunks", Filter(group_ids=written.ids))
                self.store.rows.add_rows("file_chunks", [row for *_, rows in todo for row in rows])
                done = [
                    (replace(r, status="completed", chunks=len(rows)), t)
                    for (r, t), (*_, rows) in zip(pending, todo, strict=True)
                ]
                self.store.rows.upsert_rows("files", "id", [file_row(r, t) for r, t in done])
                for (i, r, _, _), (d, _) in zip(todo, done, strict=True):
                    out[i] = (d, "updated" if r.id in stored else "added")
        return [o for o in out if o is not None]

    def stored_twice(self) -> dict[str, int]:
        """Rows stored more than once under one id, per table (files, file_chunks): what two uploads of one file at
        once left before their commits took the lock (``tiermem doctor`` reports them, ``repair_twice`` mends)."""
        out = {}
        for table in ("files", "file_chunks"):
            extra = sum(n - 1 for n in self._id_counts(table).values() if n > 1)
            if extra:
                out[table] = extra
        return out

    def _id_counts(self, table: str) -> Counter[str]:
        """How many rows of ``table`` hold each id (the newest version)."""
        return Counter(str(r["id"]) for r in self.store.conn.rows(table, None, columns=("id",), latest=True))

    def repair_twice(self) -> dict[str, int]:
        """Mend what ``stored_twice`` finds: a file row stored twice is kept once (its newest), and every file with a
        chunk stored twice gets its chunks cut again from its text (``write``: one chunk set; the vectors of chunks
        whose text did not change are kept). Returns the extra rows there were, per table."""
        found = self.stored_twice()
        if not found:
            return {}
        with self.store.conn.exclusive(CHUNKS_LOCK):
            twice = tuple(sorted(i for i, n in self._id_counts("files").items() if n > 1))
            if twice:
                copies = self.store.conn.rows("files", Filter(ids=twice), latest=True)
                newest: dict[str, dict[str, Any]] = {}
                for r in sorted(copies, key=lambda r: int(r.get("updated_us") or 0)):
                    newest[str(r["id"])] = {k: v for k, v in r.items() if not k.startswith("_")}
                self._forget("files", Filter(ids=twice))
                self.store.rows.delete("files", Filter(ids=twice))
                self.store.rows.add_rows("files", list(newest.values()))
            chunks = self.store.conn.rows("file_chunks", None, columns=("id", "group_id"), latest=True)
            counts = Counter(str(r["id"]) for r in chunks)
            files = sorted({str(r["group_id"]) for r in chunks if counts[str(r["id"])] > 1})
        if files:  # written again as a sync would, under the lock of its own
            texts = self.texts(files)
            self.write([(f, texts.get(f.id, "")) for f in self._latest(files) if f.status == "completed"])
        return found

    def _latest(self, file_ids: Sequence[str]) -> list[StoredFile]:
        """These files as stored now (the table's newest version, not this process's listing)."""
        rows = self.store.conn.rows("files", Filter(ids=tuple(file_ids)), columns=FILE_COLUMNS, latest=True)
        return [file_from_row(r) for r in rows]

    def _stored_vectors(self, file_ids: Sequence[str]) -> dict[tuple[str, str], list[float]]:
        """(file id, chunk text) -> vector of the chunks these files have now, made by the store's model: a file
        stored again (a sync after an edit) keeps the vectors of the chunks whose text did not change, and only the
        others are embedded. A line added at the end of a 30 KB file then embeds one or two chunks, not ~240; an
        edit in the middle, the chunks whose windows it moved (windows end at a line or sentence end where they
        can, so those after an edit often fall into step again)."""
        dim = self.vectors.model[1]
        rows = self.store.conn.rows(
            "file_chunks", Filter(group_ids=tuple(file_ids)), columns=("group_id", "content", "vector")
        )
        return {
            (str(r["group_id"]), str(r["content"])): r["vector"]
            for r in rows
            if r["vector"] is not None and len(r["vector"]) == dim
        }

    def write_errors(self, items: Sequence[tuple[StoredFile, str]]) -> list[StoredFile]:
        """Store files that could not be processed: status ``error``, the reason, no text, no chunks."""
        if not items:
            return []
        failed = [replace(r, status="error", error=e, chunks=0) for r, e in items]
        with self.store.conn.exclusive(CHUNKS_LOCK):
            self._forget("files", Filter(ids=tuple(r.id for r in failed)))
            self._forget("file_chunks", Filter(group_ids=tuple(r.id for r in failed)))
            self.store.rows.upsert_rows("files", "id", [file_row(r, "") for r in failed])
            self.store.rows.delete("file_chunks", Filter(group_ids=tuple(r.id for r in failed)))
        return failed

    def delete(self, file_ids: Sequence[str]) -> int:
        """Delete files and their chunks (chunks first); returns the files deleted."""
        if not file_ids:
            return 0
        with self.store.conn.exclusive(CHUNKS_LOCK):
            self._forget("file_chunks", Filter(group_ids=tuple(file_ids)))
            self._forget("files", Filter(ids=tuple(file_ids)))
            self.store.rows.delete("file_chunks", Filter(group_ids=tuple(file_ids)))
            return self.store.rows.delete("files", Filter(ids=tuple(file_ids)))

    def _forget(self, table: str, where: Filter) -> None:
        """Mark the data fragments holding these rows: the next upkeep rewrites them without the rows and removes
        the older table versions, so a deleted or replaced file's text leaves the data directory's files too. The
        view lines this process keeps of those files (grep's cache) are dropped at once."""
        self.store.purge.mark(table, where)
        if table == "files":
            ids = set(where.ids or ())
            if where.folder_ids:
                ids |= {f.id for f in self.listing() if f.folder_id in where.folder_ids}
            with self._lines_lock:
                for file_id in ids:
                    self._lines.pop(file_id, None)
                self._grep_views.clear()
                self._dropped += 1

    def _chunk_rows(self, record: StoredFile, pieces: Sequence[str]) -> list[dict[str, Any]]:
        created = to_us(now())
        chunks = [c for c in pieces if c.strip()]
        return [
            {
                "id": f"{record.id}.{i}",
                "agent_id": record.folder_id,
                "group_id": record.id,
                "chunk": i,
                "content": chunk,
                "tags": [record.id],
                "text": keyword_text(chunk),
                "created_us": created,
                "vector": None,
            }
            for i, chunk in enumerate(chunks)
        ]

    # -- lines (grep and open) -------------------------------------------------

    def lines(self, files: Sequence[StoredFile]) -> dict[str, list[str]]:
        """Each file's view lines (Letta's line chunking)."""
        return {fid: joined.split() for fid, joined in self.joined(files).items()}

    def grep_view(self, view: object, stored: list[StoredFile]) -> list[GrepFile] | None:
        """The files grep reads for an agent whose file state is ``view`` (one object per stored value:
        ``Filesystem.seen``) and whose folders' files are ``stored`` (``files``' shared list, one per files-table
        version), if they were kept for both (``keep_grep_view``); None otherwise. A grep of 10,000 files then
        makes no 10,000 objects (nor looks up 10,000 cached texts) each call."""
        with self._lines_lock:
            known = self._grep_views.get(id(view))
            if known is None or known[0] is not view or known[1] is not stored:
                return None
            self._grep_views.move_to_end(id(view))
            return known[2]

    def keep_grep_view(
        self, view: object, stored: list[StoredFile], by_name: Mapping[str, StoredFile]
    ) -> list[GrepFile]:
        """``by_name`` (an agent's attached files by the names it uses, picked from ``stored`` for ``view``) as grep
        reads them, kept for ``grep_view`` (the last GREP_VIEWS agents; dropped when a file is deleted or
        replaced: ``_forget``)."""
        dropped = self._dropped
        joined = self.joined(list(by_name.values()))
        made = [GrepFile(name, joined[f.id], f.size) for name, f in by_name.items()]
        with self._lines_lock:
            if self._dropped == dropped:  # else a file was deleted or replaced meanwhile: used once, not kept
                self._grep_views[id(view)] = (view, stored, made)
            while len(self._grep_views) > GREP_VIEWS:
                self._grep_views.popitem(last=False)
        return made

    def joined(self, files: Sequence[StoredFile]) -> dict[str, JoinedLines]:
        """Each file's view lines as one string (what grep searches), cached by content hash (one object per file);
        texts read once, together, for the files not cached (and not kept if a file was deleted or replaced while
        they were read: what was read may be its old text)."""
        out: dict[str, JoinedLines] = {}
        missing: list[StoredFile] = []
        with self._lines_lock:
            dropped = self._dropped
            for f in files:
                known = self._lines.get(f.id)
                if known is not None and known[0] == f.sha256:
                    self._lines.move_to_end(f.id)
                    out[f.id] = known[1]
                else:
                    missing.append(f)
        if missing:
            texts = self.texts([f.id for f in missing])
            with self._lines_lock:
                keep = self._dropped == dropped  # a file deleted or replaced while these were read: not kept
                for f in missing:
                    joined = JoinedLines.of(view_lines(texts.get(f.id, ""), strategy_of(f.name, f.file_type)))
                    out[f.id] = joined
                    if keep:
                        self._lines[f.id] = (f.sha256, joined)
                while len(self._lines) > LINE_CACHE_FILES:
                    self._lines.popitem(last=False)
        return out
