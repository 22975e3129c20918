"""A directory on disk as a folder's files: ``tiermem folders upload`` and ``tiermem folders sync [--watch]``.

``walk`` lists what a directory gives a folder: paths relative to it, joined with ``/``; ``.gitignore`` files honoured
(the root's and nested ones, git's rules through ``pathspec``; a deeper file's pattern wins over a shallower one's),
hidden files and directories (a name starting with ``.``: ``.git/``, ``.env``, ``.gitignore`` itself) never read. Symbolic links are never followed out of the directory: a link pointing outside is
reported (skipped, with where it points); a link to a directory is not followed; a link to a file inside is read
once (skipped when its target is listed under its own name, else listed under the link's name). Files binary by
their extension, files over ``file_max_bytes`` and anything not a regular file are reported with the reason, never
read.

``sync_folder`` makes a folder equal a directory: new and changed files uploaded (changed: another content hash),
files gone from disk deleted (only files that came from this directory by their source path, or that a previous
sync put there: a file uploaded by other means stays). What a sync saw is kept in the folder's metadata
(``tiermem_sync``: the directory and ``{path: [size, mtime_ns, sha256]}``), so the next sync reads only the files
whose size or time changed. ``watch`` polls the directory (standard library only) and syncs whenever it changed.

Why this module is long: it is the whole of reading a directory into a folder: the safe walk (ignore rules, links,
binary and oversized files), the upload, the sync and its watch share the listing and the report, and nothing else
uses them.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shlex
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pathspec

from ..base.errors import NotFoundError, TiermemError, ValidationError
from ..domain.file_views import BINARY_EXTENSIONS, extension_of
from ..domain.filesystem import Uploaded

if TYPE_CHECKING:
    from ..base.records import StoredFile
    from ..domain.file_embedding import Embedded
    from ..domain.memory import Memory

SYNC_KEY = "tiermem_sync"  # the folder's metadata: {"directory": ..., "files": {path: [size, mtime_ns, sha256]}}
EMBED_INLINE_MAX = 50  # more files than this are stored without vectors (the backfill embeds them): ingest stays fast
WATCH_SECONDS = 0.5
RACY_NS = 50_000_000  # a file changed this close to its listing is hashed again next time (same size, same time)
VANISHED = "vanished during sync: it was listed, then gone before it was read"
Progress = Callable[[int, int], None]  # (files done, files in all)


@dataclass(frozen=True)
class DiskFile:
    """A file a directory gives a folder: its name there (``a/b.md``), where to read it, and its stat."""

    name: str
    path: Path
    size: int
    mtime_ns: int
    inode: int = 0


@dataclass
class Listing:
    """What ``walk`` found: the files to upload, what it would not take (with why), and how much .gitignore hid."""

    root: Path
    files: list[DiskFile] = field(default_factory=list)
    skipped: list[Uploaded] = field(default_factory=list)
    ignored: int = 0

    def signature(self) -> tuple[Any, ...]:
        return (
            tuple((f.name, f.size, f.mtime_ns, f.inode) for f in self.files),
            tuple((s.name, s.reason) for s in self.skipped),
        )


@dataclass
class SyncReport:
    """What an upload or a sync did: one result per file looked at, the files deleted, the files read from disk."""

    folder: str
    directory: str = ""
    results: list[Uploaded] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    ignored: int = 0
    read: int = 0
    created: bool = False
    named: frozenset[str] = frozenset()  # files the user named one by one (not found walking a directory)

    def outcome(self, name: str) -> str:
        return next((r.outcome for r in self.results if r.name == name), "")

    def counts(self) -> dict[str, int]:
        keys = ("added", "updated", "unchanged", "error", "skipped")
        return {k: sum(r.outcome == k for r in self.results) for k in keys} | {"deleted": len(self.deleted)}

    def problems(self) -> list[Uploaded]:
        """The files not stored (an error, skipped) and those stored with a note on their text (bytes replaced)."""
        return [r for r in self.results if r.outcome in ("error", "skipped") or r.reason]

    @property
    def failed(self) -> bool:
        """A file could not be stored (an error), a file the user named was not uploaded (skipped: too big, binary,
        a bad name), or the folder's file limit left files out. Files a directory walk skipped by rule (ignored,
        binary by extension, too big, links out of it) are reported, not failures."""
        return any(
            r.outcome == "error" or (r.outcome == "skipped" and (r.full or r.name in self.named)) for r in self.results
        )

    def summary(self) -> str:
        c = self.counts()
        text = f"folder {self.folder}: " + ", ".join(f"{n} {k}" for k, n in c.items() if n or k != "deleted")
        return text + (f" ({self.ignored} hidden or ignored by .gitignore)" if self.ignored else "")

    def as_dict(self) -> dict[str, Any]:
        return {
            "folder": self.folder,
            "directory": self.directory,
            "created": self.created,
            **self.counts(),
            "ignored": self.ignored,
            "read": self.read,
            "deleted_files": self.deleted,
            "files": [
                {"name": r.name, "outcome": r.outcome, **({"reason": r.reason} if r.reason else {})}
                for r in self.results
            ],
        }


# -- listing a directory ---------------------------------------------------------------------------


def _ignore_spec(path: Path) -> pathspec.GitIgnoreSpec | None:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return pathspec.GitIgnoreSpec.from_lines(lines)


def _ignored(specs: Sequence[tuple[str, pathspec.GitIgnoreSpec]], rel: str, is_dir: bool) -> bool:
    """Whether git would ignore ``rel``: the deepest .gitignore with a pattern for it decides (its last one)."""
    for base, spec in reversed(specs):
        sub = rel[len(base) :] + ("/" if is_dir else "")
        result = spec.check_file(sub)
        if result.include is not None:
            return bool(result.include)
    return False


def _loops(path: str) -> bool:
    """Whether following the symbolic link ``path`` runs in a loop (``ELOOP``), rather than to nothing."""
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def check_size(name: str, size: int, max_bytes: int) -> str:
    """Why a file of ``size`` bytes is not taken ("" when it is)."""
    if size > max_bytes:
        return (
            f"{size:,} bytes, over the limit of {max_bytes:,} bytes for one file (setting file_max_bytes, "
            "environment TIERMEM_FILE_MAX_BYTES); not uploaded: split it, or raise the limit"
        )
    return ""


def binary_reason(name: str) -> str:
    ext = extension_of(name)
    return (
        f"binary by its extension ({ext}); not uploaded (folders keep text, Markdown, code, HTML, PDF, DOCX)"
        if ext in BINARY_EXTENSIONS
        else ""
    )


def walk(directory: Path, *, max_bytes: int) -> Listing:
    """List what ``directory`` gives a folder (see the module's docstring), sorted by name."""
    root = Path(os.path.realpath(directory))
    if not root.is_dir():
        raise NotFoundError(f"{directory} is not a directory; give the directory to upload or sync.")
    listing = Listing(root=root)
    links: list[tuple[str, Path, str]] = []  # (name, its target, the target's name inside the directory)

    def visit(path: Path, rel: str, specs: list[tuple[str, pathspec.GitIgnoreSpec]]) -> None:
        ignore = path / ".gitignore"
        spec = _ignore_spec(ignore) if ignore.is_file() and not ignore.is_symlink() else None
        if spec is not None:
            specs = [*specs, (rel, spec)]
        try:
            entries = sorted(os.scandir(path), key=lambda e: e.name)
        except OSError as exc:
            listing.skipped.append(
                Uploaded(rel.rstrip("/") or ".", "skipped", f"directory could not be read ({exc.strerror or exc})")
            )
            return
        for entry in entries:
            name = rel + entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:  # gone since the listing
                continue
            is_dir = stat.S_ISDIR(st.st_mode)
            if entry.name.startswith("."):  # hidden: .git/, .gitignore, .env, editors' swap files (counted)
                listing.ignored += 1
                continue
            if _ignored(specs, name, is_dir or (stat.S_ISLNK(st.st_mode) and os.path.isdir(entry.path))):
                listing.ignored += 1
                continue
            if stat.S_ISLNK(st.st_mode):
                target = Path(os.path.realpath(entry.path))
                if target != root and root not in target.parents:
                    listing.skipped.append(
                        Uploaded(
                            name,
                            "skipped",
                            f"symbolic link to {target}, outside {root}; links are not followed out of the directory",
                        )
                    )
                elif target.is_dir():
                    listing.skipped.append(
                        Uploaded(
                            name,
                            "skipped",
                            "symbolic link to a directory; not followed (upload or sync that directory itself)",
                        )
                    )
                elif target.is_file():
                    links.append((name, target, target.relative_to(root).as_posix()))
                elif _loops(entry.path):
                    listing.skipped.append(
                        Uploaded(name, "skipped", "symbolic link in a loop (its links lead back to themselves)")
                    )
                else:
                    listing.skipped.append(Uploaded(name, "skipped", "symbolic link to nothing (a broken link)"))
            elif is_dir:
                visit(Path(entry.path), name + "/", specs)
            elif not stat.S_ISREG(st.st_mode):
                listing.skipped.append(Uploaded(name, "skipped", "not a regular file (a device, socket or pipe)"))
            else:
                take(name, Path(entry.path), st)

    def take(name: str, path: Path, st: os.stat_result) -> None:
        reason = binary_reason(name) or check_size(name, st.st_size, max_bytes)
        if reason:
            listing.skipped.append(Uploaded(name, "skipped", reason))
        else:
            listing.files.append(DiskFile(name, path, st.st_size, st.st_mtime_ns, st.st_ino))

    visit(root, "", [])
    listed = {f.name for f in listing.files}
    for name, target, target_name in links:  # a linked file is read once
        if target_name in listed:
            listing.skipped.append(
                Uploaded(name, "skipped", f"symbolic link to {target_name}, which is uploaded under its own name")
            )
            continue
        try:
            take(name, target, target.stat())
        except OSError:
            listing.skipped.append(Uploaded(name, "skipped", VANISHED))
    listing.files.sort(key=lambda f: f.name)
    listing.skipped.sort(key=lambda s: s.name)
    return listing


def file_listing(path: Path, *, max_bytes: int) -> Listing:
    """One file named on the command line, as a listing of its own (its name: the file's name)."""
    listing = Listing(root=path.parent)
    try:
        st = path.stat()
    except OSError as exc:
        raise NotFoundError(f"{path}: {exc.strerror or exc}; give an existing file or directory.") from exc
    if not stat.S_ISREG(st.st_mode):
        listing.skipped.append(Uploaded(path.name, "skipped", "not a regular file (a device, socket or pipe)"))
        return listing
    reason = binary_reason(path.name) or check_size(path.name, st.st_size, max_bytes)
    if reason:
        listing.skipped.append(Uploaded(path.name, "skipped", reason))
    else:
        listing.files.append(DiskFile(path.name, path.resolve(), st.st_size, st.st_mtime_ns, st.st_ino))
    return listing


# -- storing ---------------------------------------------------------------------------------------


@dataclass
class _Ingest:
    """One pass over a listing's files: the reads, the results, the sync record."""

    stored: dict[str, StoredFile]
    cached: dict[str, list[Any]]
    listed_at: int
    total: int
    max_bytes: int
    progress: Progress | None
    results: list[Uploaded] = field(default_factory=list)
    record: dict[str, list[Any]] = field(default_factory=dict)
    stats: dict[str, DiskFile] = field(default_factory=dict)
    read: int = 0
    done: int = 0

    def tick(self, result: Uploaded) -> None:
        self.results.append(result)
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total)

    def keep(self, f: DiskFile, digest: str) -> None:
        racy = f.mtime_ns + RACY_NS >= self.listed_at  # changed as it was listed: hash it again next time
        self.record[f.name] = [-1 if racy else f.size, f.mtime_ns, digest]

    def items(self, files: Sequence[DiskFile]) -> Iterator[tuple[str, bytes, str]]:
        """The files to upload, read one at a time; unchanged ones (by stat, then by hash) are settled here."""
        for f in files:
            old = self.stored.get(f.name)
            cached = self.cached.get(f.name)
            if (
                cached is not None
                and old is not None
                and cached[:3] == [f.size, f.mtime_ns, old.sha256]
                and old.status in ("completed", "error")
            ):
                self.record[f.name] = cached
                self.tick(Uploaded(f.name, "unchanged", file=old))
                continue
            try:
                with open(f.path, "rb") as fh:
                    data = fh.read(self.max_bytes + 1)  # a file that grew since the listing is not read whole
            except FileNotFoundError:
                self.tick(Uploaded(f.name, "skipped", VANISHED))
                continue
            except OSError as exc:
                self.tick(Uploaded(f.name, "skipped", f"could not be read ({exc.strerror or exc})"))
                continue
            self.read += 1
            if len(data) > self.max_bytes:
                try:
                    size = os.path.getsize(f.path)
                except OSError:
                    size = len(data)
                self.tick(Uploaded(f.name, "skipped", check_size(f.name, size, self.max_bytes)))
                continue
            digest = hashlib.sha256(data).hexdigest()
            if old is not None and old.sha256 == digest and old.status == "completed":
                self.keep(f, digest)
                self.tick(Uploaded(f.name, "unchanged", file=old))
                continue
            self.stats[f.name] = f
            yield f.name, data, str(f.path)

    def uploaded(self, done: Uploaded) -> None:
        f = self.stats.get(done.name)
        if f is not None and done.file is not None and done.outcome != "skipped":
            self.keep(f, done.file.sha256)
        self.tick(done)


def _ingest(
    memory: Memory,
    folder: str,
    listing: Listing,
    *,
    cached: dict[str, list[Any]],
    embed: bool | None,
    progress: Progress | None,
    listed_at: int,
    keep_others: bool = False,
    embedded: Embedded | None = None,
) -> _Ingest:
    stored = {f.name: f for f in memory.files.files(folder)}
    todo = [
        f
        for f in listing.files
        if not (
            f.name in cached and f.name in stored and cached[f.name][:3] == [f.size, f.mtime_ns, stored[f.name].sha256]
        )
    ]
    run = _Ingest(
        stored=stored,
        cached=cached,
        listed_at=listed_at,
        total=len(listing.files),
        max_bytes=memory.files.file_max_bytes,
        progress=progress,
    )
    inline = len(todo) <= EMBED_INLINE_MAX if embed is None else embed
    memory.files.upload_many(
        folder,
        run.items(listing.files),
        open_in_agents=True,
        embed=inline,
        progress=run.uploaded,
        keep_others=keep_others,
        embedded=embedded,
    )  # new files open in the agents the folder is attached to, as Letta's upload
    return run


def upload_paths(
    memory: Memory,
    folder: str,
    paths: Sequence[Path],
    *,
    embed: bool | None = None,
    progress: Progress | None = None,
    embedded: Embedded | None = None,
) -> SyncReport:
    """Upload files and directories (walked; names relative to the directory given) into an existing folder.
    ``progress``: told the files done; ``embedded``: how far each file's chunks are embedded."""
    found = memory.files.folder(folder)  # a missing folder is refused before anything is read
    max_bytes = memory.files.file_max_bytes
    merged = Listing(root=Path("."))
    taken: dict[str, list[Path]] = {}  # name -> the files given it
    named: set[str] = set()
    for path in paths:
        listing = walk(path, max_bytes=max_bytes) if path.is_dir() else file_listing(path, max_bytes=max_bytes)
        if not path.is_dir():  # (a name holding a credential is reported redacted)
            given = {f.name for f in listing.files} | {s.name for s in listing.skipped}
            named |= given | {memory.files.shown_name(n) for n in given}
        merged.ignored += listing.ignored
        merged.skipped += listing.skipped
        for f in listing.files:
            before = taken.setdefault(f.name, [])
            if before and os.path.realpath(f.path) in {os.path.realpath(p) for p in before}:
                continue  # the same file given twice (a file and a directory holding it): uploaded once
            before.append(f.path)
            merged.files.append(f)  # another file of a name given before: kept beside it as NAME_(n).EXT (_placed)
    run = _ingest(
        memory,
        found.id,
        merged,
        cached={},
        embed=embed,
        progress=progress,
        listed_at=time.time_ns(),
        keep_others=True,
        embedded=embedded,
    )  # (by id: a name an older tiermem left to two folders is refused)
    return SyncReport(
        folder=found.name,
        directory=memory.files.shown_name(", ".join(map(str, paths))),
        results=_by_name(run.results, merged.skipped),
        ignored=merged.ignored,
        read=run.read,
        named=frozenset(named),
    )


def sync_folder(
    memory: Memory,
    folder_name: str,
    directory: Path,
    *,
    embed: bool | None = None,
    progress: Progress | None = None,
    listing: Listing | None = None,
    embedded: Embedded | None = None,
) -> SyncReport:
    """Make the folder equal the directory (see the module's docstring); ``listing``: a walk already taken."""
    folder = memory.files.folder(folder_name)
    listed_at = time.time_ns()
    if listing is None:
        listing = walk(directory, max_bytes=memory.files.file_max_bytes)
    root = listing.root
    found = folder.metadata.get(SYNC_KEY)
    previous: dict[str, Any] = found if isinstance(found, dict) else {}
    before: dict[str, list[Any]] = previous.get("files") or {}
    cached = before if previous.get("directory") == str(root) else {}
    run = _ingest(
        memory,
        folder.id,
        listing,
        cached=cached,
        embed=embed,
        progress=progress,
        listed_at=listed_at,
        embedded=embedded,
    )
    present = {r.name for r in run.results if r.reason != VANISHED}
    inside = str(root) + os.sep
    gone = sorted(
        f.name
        for f in memory.files.files(folder.id)
        if f.name not in present and (f.name in before or f.source_path.startswith(inside))
    )
    if gone:
        memory.files.delete_files(folder.id, gone)
    record = {"directory": str(root), "files": dict(sorted(run.record.items()))}
    if record != previous:
        memory.files.set_folder_metadata(folder.id, SYNC_KEY, record)
    return SyncReport(
        folder=folder.name,
        directory=memory.files.shown_name(str(root)),
        results=_by_name(run.results, listing.skipped),
        deleted=gone,
        ignored=listing.ignored,
        read=run.read,
    )


def _by_name(*parts: Sequence[Uploaded]) -> list[Uploaded]:
    return sorted((r for part in parts for r in part), key=lambda r: r.name)


def synced_directory(memory: Memory, folder_name: str) -> str:
    """The directory the folder was last synced with ("" when never)."""
    record = memory.files.folder(folder_name).metadata.get(SYNC_KEY)
    return str(record.get("directory") or "") if isinstance(record, dict) else ""


def watch(
    memory: Memory,
    folder_name: str,
    directory: Path,
    *,
    interval: float = WATCH_SECONDS,
    on_report: Callable[[SyncReport], None],
    embed: bool | None = None,
    keep_going: Callable[[], bool] = lambda: True,
    on_error: Callable[[TiermemError], None] | None = None,
    wait: Callable[[float], object] = time.sleep,
) -> None:
    """Sync at once, then whenever the directory changed (a file's size, time or inode, a file added or gone),
    looking every ``interval`` seconds while ``keep_going()``. A failed round goes to ``on_error`` (when given;
    else it is raised) and the watch goes on: the same error again (the directory removed, for minutes) is not
    passed on again, and the first round that succeeds after an error syncs and reports (the directory is back).
    The folder deleted meanwhile (``tiermem folders delete``, also deleted and made again under its name) ends the
    watch with ``NotFoundError`` saying so: there is nothing left to sync into."""
    if not interval > 0:
        raise ValidationError(f"--interval takes a number of seconds greater than 0, got {interval!r}.")
    max_bytes = memory.files.file_max_bytes
    folder_id = memory.files.folder(folder_name).id
    last: tuple[Any, ...] | None = None
    said = ""  # the error the last round passed on ("": it succeeded)
    while True:
        try:
            listing = walk(directory, max_bytes=max_bytes)
            now = listing.signature()
            if now != last:
                last = now  # taken before the pass: a change made while it runs is seen next round
                on_report(sync_folder(memory, folder_id, directory, embed=embed, listing=listing))
            said = ""
        except TiermemError as exc:
            _check_still_there(memory, folder_id, folder_name, directory, exc)
            if on_error is None:
                raise
            if str(exc) != said:
                on_error(exc)
            said, last = str(exc), None
        _check_still_there(memory, folder_id, folder_name, directory)
        if not keep_going():
            return
        wait(interval)


def _check_still_there(
    memory: Memory, folder_id: str, name: str, directory: Path, cause: BaseException | None = None
) -> None:
    """Raise ``NotFoundError`` when the folder a watch syncs (by its id) was deleted."""
    if memory.files.rows.folder(folder_id) is None:
        again = f"tiermem folders sync {shlex.quote(name)} {shlex.quote(str(directory))} --watch"
        raise NotFoundError(
            f"Folder {name!r} was deleted while this watch synced it, so the watch stopped. To sync {directory} "
            f"into a folder again, run `{again}` (it makes the folder anew)."
        ) from cause
