"""Letta's filesystem for an agent: folders attached to it, the files it opens, greps and searches (``memory.files``).

Folders and files live in the store (``archive.files``, shared by every agent a folder is attached to). What one agent
sees of them is kept with the agent, as Letta keeps ``files_agents``: in the agent's metadata (key ``tiermem_files``,
JSON), one entry per attached folder and one per file (open or closed, the visible window, its lines, the last access),
and the agent's two limits (``max_files_open``, ``per_file_view_window_char_limit``). Core memory's ``<directories>``
section is rendered from that entry alone, so it reads no table (the instructions are answered before the store opens).
The files table is the truth of which files exist: every change to a folder brings the view of each agent it is
attached to up to date (``_sync_views``), and the file tools do the same before they run when the folder moved on.

Credentials are never stored (docs/security.md): an uploaded file's text is stored with each one replaced by
``[redacted: KIND]``, its outcome noting the kinds and counts; a file whose name holds one is skipped (its outcome
names it redacted, never the secret), and ``upload`` of one refuses it (``SecretError``).

Within a process the views of one agent are changed one at a time (a lock per agent). Two processes changing the same
agent's view at once: the later write wins (the view is re-derived from the files table, so a lost file entry comes
back at the next change, and an open window cut from a file's older version is cut again; a lost open window is
closed). A file another process is writing again (between its row's two commits) keeps the views of it (``_shown``).

Why this module is long: ``Filesystem`` is every operation on folders and on each agent's view of them (Letta's
``files_agents``), all under one lock per agent and one re-derivation of the views (``_sync_views``); the pure rules
and texts are ``file_views.py``, the tables ``archive_files.py``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import threading
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from ..base.errors import FileContentError, NotFoundError, TiermemError, ValidationError
from ..base.quoting import plain_name, unescape_name
from ..base.records import Agent, Folder, StoredFile, new_id, now, stable_id, to_us
from . import secrets
from .file_embedding import Embedded
from .file_parse import Parsed, parse_file
from .file_views import (
    DirectoryInfo,
    FileEntry,
    OpenRequest,
    check_file_name,
    check_folder_name,
    check_requests,
    file_defaults,
    file_type,
    folder_names,
    grep,
    numbered,
    open_summary,
    render_directories,
    render_window,
    semantic_text,
    strategy_of,
    truncate_visible,
    window_of,
)
from .file_windows import is_cut, kept, kept_chars

if TYPE_CHECKING:
    from ..core.protocol import CoreStore
    from .archive import Archive
    from .archive_files import Written

log = logging.getLogger(__name__)

STATE_KEY = "tiermem_files"
CLOSED_LISTED = 100  # closed files listed per folder in core memory; the rest are counted (huge folders)
SEMANTIC_CAP = 50  # Letta's MAX_TOTAL_MATCHES for semantic_search_files
DEFAULT_FILE_MAX_BYTES = 25 * 1024 * 1024
DEFAULT_FOLDER_MAX_FILES = 20_000
Outcome = Literal["added", "updated", "unchanged", "error", "skipped"]
WRITING = ("parsing", "embedding")  # a file's status between its row's first commit and its last


@dataclass
class FileView:
    """What one agent sees of one file (Letta's ``files_agents`` row)."""

    file_id: str
    folder_id: str
    name: str  # "<folder>/<file>", as the agent names it
    is_open: bool = False
    visible: str = ""  # the window's text, as rendered when opened (truncated when shown; stored bounded: file_windows)
    start_line: int | None = None  # 1-based, as Letta stores it (None: from the start)
    end_line: int | None = None
    accessed_us: int = 0
    sha256: str = ""  # the file's version the view is of (a changed file's open window is cut again)


@dataclass
class AgentFiles:
    """An agent's folders and file views, and its two limits (None: Letta's defaults)."""

    folders: list[dict[str, str]] = field(default_factory=list)  # id, name, description, instructions
    files: list[FileView] = field(default_factory=list)
    max_files_open: int | None = None
    char_limit: int | None = None

    @property
    def limits(self) -> tuple[int, int]:
        return self.limits_for(None)

    def limits_for(self, context_window: int | None) -> tuple[int, int]:
        """The agent's own limits, else Letta's defaults for the model's context window (None: unknown)."""
        default_open, default_chars = file_defaults(context_window)
        return (self.max_files_open or default_open, self.char_limit or default_chars)

    def folder_ids(self) -> list[str]:
        return [f["id"] for f in self.folders]

    def view(self, name: str) -> FileView | None:
        return next((v for v in self.files if v.name == name), None)

    def named(self, name: str) -> str:
        """The name of the view ``name`` stands for: itself when a view has it, else the name it is as shown in
        ``<directories>`` (``quoting.markup_name``: ``&quot;``, ``&lt;``, ``&#x202e;`` read back), so a name the
        model copies from what it was shown finds its file; else ``name`` unchanged (for the error naming it)."""
        if not isinstance(name, str) or "&" not in name or self.view(name) is not None:
            return name
        real = unescape_name(name)
        return real if self.view(real) is not None else name

    def to_json(self, fields: Sequence[str] = ()) -> str:
        """Compact JSON: a view is a list of ``fields`` (by default ``VIEW_FIELDS``; 10,000 files: ~1.5 MB, ~10 ms
        either way). An open window's text is kept bounded (``file_windows.kept``)."""
        fields = list(fields or VIEW_FIELDS)
        data = {
            "v": 2,
            "folders": self.folders,
            "fields": fields,
            "files": [
                [kept(v.visible, self.char_limit) if f == "visible" else getattr(v, f) for f in fields]
                for v in self.files
            ],
            "max_files_open": self.max_files_open,
            "per_file_view_window_char_limit": self.char_limit,
        }
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    def shown_json(self) -> str:
        """``to_json`` without the views' access times: what a client is shown (core memory, the file resources and
        their list) changes exactly when this does (a search's touch of an open file changes only its access time)."""
        return self.to_json([f for f in VIEW_FIELDS if f != "accessed_us"])

    @staticmethod
    def seen(agent: Agent) -> AgentFiles:
        """``of(agent)`` for reading only (never change it): parsed once per stored value (10,000 views: ~30 ms)."""
        raw = agent.metadata.get(STATE_KEY)
        return _parsed(raw) if raw else AgentFiles()

    @staticmethod
    def of(agent: Agent) -> AgentFiles:
        """The agent's view, parsed afresh (the caller may change it and save it)."""
        raw = agent.metadata.get(STATE_KEY)
        if not raw:
            return AgentFiles()
        try:
            data = json.loads(raw)
            return AgentFiles(
                folders=[dict(f) for f in data.get("folders") or []],
                files=_views(data),
                max_files_open=data.get("max_files_open"),
                char_limit=data.get("per_file_view_window_char_limit"),
            )
        except (ValueError, TypeError) as exc:  # a damaged entry is read as no files, never as a failure
            log.error(
                "agent %s: its files view could not be read (%s); showing no files until it is rewritten", agent.id, exc
            )
            return AgentFiles()


@functools.lru_cache(maxsize=16)
def _parsed(raw: str) -> AgentFiles:
    return AgentFiles.of(
        Agent(id="", name="", system="", created_at=now(), updated_at=now(), metadata={STATE_KEY: raw})
    )


VIEW_FIELDS = ["file_id", "folder_id", "name", "is_open", "visible", "start_line", "end_line", "accessed_us", "sha256"]


def _views(data: dict[str, Any]) -> list[FileView]:
    rows = data.get("files") or []
    if data.get("v", 1) == 1:  # one object per view
        return [FileView(**v) for v in rows]
    fields = data.get("fields") or VIEW_FIELDS
    if fields == VIEW_FIELDS:
        return [FileView(*row) for row in rows]
    return [FileView(**dict(zip(fields, row, strict=True))) for row in rows]


@dataclass(frozen=True)
class Uploaded:
    """What an upload did with one file (``reason``: why it was not stored, or a note on a stored one's text)."""

    name: str
    outcome: Outcome
    reason: str = ""
    file: StoredFile | None = None
    chars: int = 0
    full: bool = False  # skipped because the folder holds ``folder_max_files`` files: the folder is left incomplete


@dataclass(frozen=True)
class Attached:
    """What attaching a folder did: the folder, the files it opened (``<folder>/<file>``, upload order: none when the
    folder was attached already) and the other open files it closed to keep within the limit."""

    folder: Folder
    opened: list[str]
    closed: list[str]


def redaction_note(given: str, stored: str) -> str:
    """What the scrub of a file's text redacted (each kind with its count: "credentials redacted: AWS access key (1),
    each now [redacted: AWS access key]"), never the secrets; "" when ``stored`` is ``given``."""
    if stored == given:
        return ""
    counts = Counter(f.kind for f in secrets.find(given))
    if not counts:  # nothing this finder names (the scrub is the same finder): a change it made otherwise
        return ""
    kinds = ", ".join(f"{kind} ({n})" for kind, n in counts.items())
    marker = secrets.marker(next(iter(counts))) if len(counts) == 1 else "[redacted: KIND]"
    return f"credentials redacted: {kinds}, each now {marker}"


def named_credential(held: str) -> str:
    """Why a file whose name holds a credential (``held``: its kind and place) is skipped, and what to do."""
    return (
        f"its name holds {held}: credentials are never stored in memory, and a file's name is shown to every agent "
        "its folder is attached to; rename the file without it, then upload or sync again"
    )


def shared_name(name: str, folders: Sequence[Folder], files: Sequence[StoredFile]) -> str:
    """What is said of a name several folders hold (an older tiermem made them so): which they are, and how to reach
    each (its id) and end the clash."""
    counts = Counter(f.folder_id for f in files)
    each = "; ".join(f"{f.id} ({counts[f.id]} file(s), created {f.created_at:%Y-%m-%d %H:%M})" for f in folders)
    return (
        f"{len(folders)} folders are named {name!r} (an older tiermem let them share it): {each}. Name one by its id "
        f"instead (`tiermem folders show {folders[0].id}`), and delete the one too many by its id "
        "(`tiermem folders delete ID --yes`) after uploading or syncing what it holds that the other lacks."
    )


def taken_name(name: str, other: Folder | None = None) -> str:
    """Why a folder cannot be named ``name``: ``other`` holds that name, or (``other`` not holding it, or not given)
    it is another folder's id, which reaches that folder (the folder is not named: a caller may not see it)."""
    if other is not None and other.name == name:
        return f"A folder named {name!r} exists already; choose another name."
    return f"{name!r} is the id of another folder (a folder is reached by its id too); choose another name."


def display_name(folder: Folder | dict[str, str], file_name: str) -> str:
    name = folder.name if isinstance(folder, Folder) else folder["name"]
    return f"{name}/{file_name}"


def render_agent_directories(agent: Agent, context_window: int | None = None) -> str:
    """The agent's ``<directories>`` section (Letta's rendering; "" when no folder is attached): from the agent alone.
    ``context_window``: the model's, for Letta's default limits when the agent has none of its own."""
    state = AgentFiles.seen(agent)
    if not state.folders:
        return ""
    max_open, chars = state.limits_for(context_window)
    dirs = [
        DirectoryInfo(
            id=f["id"], name=f["name"], description=f.get("description") or "", instructions=f.get("instructions") or ""
        )
        for f in state.folders
    ]
    entries = [
        FileEntry(
            folder_id=v.folder_id,
            name=v.name,
            value=truncate_visible(v.visible, chars) if v.is_open and v.visible else "",
            limit=chars,
            read_only=True,
        )  # as Letta's file blocks: the model reads a file, it does not edit it
        for v in state.files
    ]
    return render_directories(max_open, dirs, entries, closed_cap=CLOSED_LISTED)


def directories_summary(agent: Agent) -> str:
    """One short paragraph in place of ``<directories>`` where it does not fit (a host's instructions budget)."""
    state = AgentFiles.of(agent)
    if not state.folders:
        return ""
    parts = []
    for f in state.folders:
        views = [v for v in state.files if v.folder_id == f["id"]]
        opened = [plain_name(v.name) for v in views if v.is_open and v.visible]  # an empty file shows closed (Letta)
        listed = f"; open: {', '.join(opened)}" if opened else ""
        parts.append(f"{plain_name(f['name'])} ({len(views)} files{listed})")
    return (
        "Folders attached: " + "; ".join(parts) + ". Their open files are not shown here: read them with "
        "open_files (or the resources memory://files/FOLDER/FILE); find text with grep_files and "
        "semantic_search_files."
    )


class Filesystem:
    """Folders, files and each agent's view of them (``memory.files``)."""

    def __init__(
        self,
        core: CoreStore,
        archive: Callable[[], Archive],
        changed: Callable[[str], None],
        *,
        file_max_bytes: int = DEFAULT_FILE_MAX_BYTES,
        folder_max_files: int = DEFAULT_FOLDER_MAX_FILES,
        scrub: Callable[[str], str] | None = None,
        refuse: Callable[..., None] | None = None,
        credentials: Callable[[str], str | None] | None = None,
        forget_uses: Callable[[Collection[str]], object] | None = None,
    ) -> None:
        self.core = core
        self._forget_uses = forget_uses  # deleted files' ids -> their use records deleted (``UseCounter.forget``)
        self._scrub = scrub  # a file's parsed text with its credentials redacted (``Memory.scrub``), before storing
        self._refuse = refuse  # (text, where, before=): SecretError for a new credential (``Memory.refuse_secrets``)
        self._credentials = credentials  # text -> the credentials it holds, described (``Memory.credentials_in``)
        self._archive = archive
        self._changed = changed  # agent id -> tell listeners its files changed
        self.file_max_bytes = file_max_bytes
        self.folder_max_files = folder_max_files
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    @property
    def rows(self) -> Any:
        return self._archive().files

    # -- folders ------------------------------------------------------------------

    def folders(self) -> list[Folder]:
        return list(self.rows.folders())

    def folder(self, name: str) -> Folder:
        """The folder whose id ``name`` is, or the folder named ``name`` (``find_folder``); ``NotFoundError`` naming
        the folders there are when there is none."""
        if not isinstance(name, str):
            raise ValidationError("A folder is named by text, e.g. 'docs'.")
        folders = self.folders()
        found = self.find_folder(name, folders)
        if found is None:
            known = ", ".join(repr(f.name) for f in folders) or "none yet"
            raise NotFoundError(
                f"No folder named {name!r}. Folders: {known}. Create one with `tiermem folders create {name}`."
            )
        return found

    def find_folder(self, name: str, among: Sequence[Folder]) -> Folder | None:
        """The folder of ``among`` whose id ``name`` is, else the one named ``name``, else None. An id goes first: it
        is one folder's, and the internal calls go by id (a name equal to another folder's id is refused since
        2026-12, ``put_named_folder``). A name is one folder's; one that an older tiermem left to several folders of
        ``among`` is refused (``ValidationError``), naming their ids (those of ``among`` only: a caller limited to
        some folders never learns of the others), by which each is reached."""
        by_id = next((f for f in among if f.id == name), None)
        if by_id is not None:
            return by_id
        named = [f for f in among if f.name == name]
        if len(named) > 1:
            raise ValidationError(shared_name(name, named, self.rows.files([f.id for f in named])))
        return named[0] if named else None

    def create_folder(
        self,
        name: str,
        *,
        description: str = "",
        instructions: str = "",
        metadata: dict[str, Any] | None = None,
        folder_id: str | None = None,
    ) -> Folder:
        folder, created = self.ensure_folder(
            name, description=description, instructions=instructions, metadata=metadata, folder_id=folder_id
        )
        if not created:
            raise ValidationError(
                f"A folder named {folder.name!r} exists already; choose another name or upload into it."
                if folder.name == name
                else taken_name(name)
            )
        return folder

    def ensure_folder(
        self,
        name: str,
        *,
        description: str = "",
        instructions: str = "",
        metadata: dict[str, Any] | None = None,
        folder_id: str | None = None,
    ) -> tuple[Folder, bool]:
        """The folder named ``name``, created (as ``create_folder`` does) when there is none; and whether it was. A
        name is one folder's (docs/FILES.md): two processes creating it at once make one folder, the other finds it."""
        try:  # by name (one that several folders hold is refused) or by id
            return self.folder(name), False
        except NotFoundError:
            pass
        name = check_folder_name(name)
        self._refuse_texts(("the folder's name", name, ""), ("the description", description, ""))
        self._refuse_texts(("the instructions", instructions, ""))
        folder = Folder(
            id=folder_id or new_id("folder"),
            name=name,
            description=description or "",
            instructions=instructions or "",
            metadata=dict(metadata or {}),
        )
        other = self.rows.put_named_folder(folder)
        return (other, False) if other is not None else (folder, True)

    def update_folder(
        self, name: str, *, description: str | None = None, instructions: str | None = None, new_name: str | None = None
    ) -> Folder:
        folder = self.folder(name)
        self._refuse_texts(("the new name", new_name, ""), ("the description", description, folder.description))
        self._refuse_texts(("the instructions", instructions, folder.instructions))
        if new_name == folder.name:
            new_name = None  # its own name: not a rename
        if new_name is not None:
            new_name = check_folder_name(new_name)
            other = self.rows.folder_named(new_name) or self.rows.folder(new_name)
            if other is not None and other.id != folder.id:
                raise ValidationError(taken_name(new_name, other))
        given = {"name": new_name, "description": description, "instructions": instructions}
        changes = {k: v for k, v in given.items() if v is not None}  # only these: the others as stored now
        changed: Folder
        holder: Folder | None
        changed, holder = self.rows.change_folder(folder, changes)
        if holder is not None:  # another process took the name meanwhile
            raise ValidationError(taken_name(str(new_name), holder))
        self._sync_views(changed.id)
        return changed

    def _refuse_texts(self, *fields: tuple[str, str | None, str]) -> None:
        """A folder's name, description and instructions are shown to every agent it is attached to: a credential in
        one that the text it replaces did not hold is refused (``SecretError``), nothing written."""
        for where, text, before in fields:
            if text and self._refuse is not None:
                self._refuse(text, where, before=before)

    def delete_folder(self, name: str) -> dict[str, Any]:
        """Detach the folder from every agent, then delete it with its files and their chunks."""
        folder = self.folder(name)
        agents = self.agents_of(folder.id)
        for agent_id in agents:
            self._detach(agent_id, folder)
        ids = [f.id for f in self.rows.files([folder.id])]
        files = self.rows.delete_folder(folder.id)
        self._forgotten(ids)
        self._purge_core()
        return {"folder": folder.name, "files": files, "detached_from": agents}

    def agents_of(self, folder_id: str) -> list[str]:
        return [a.id for a in self.core.list_agents() if folder_id in AgentFiles.seen(a).folder_ids()]

    # -- attaching --------------------------------------------------------------

    def attach(
        self, agent_id: str, name: str, *, max_files_open: int | None = None, char_limit: int | None = None
    ) -> Folder:
        return self.attach_folder(agent_id, name, max_files_open=max_files_open, char_limit=char_limit).folder

    def attach_folder(
        self, agent_id: str, name: str, *, max_files_open: int | None = None, char_limit: int | None = None
    ) -> Attached:
        """``attach``, with the names of the files it opened (upload order) and of the open files it closed (least
        recently used first). As Letta's
        ``attach_folder_to_agent`` (``insert_files_into_context_window``), a newly attached folder's first
        ``max_files_open`` files in upload order (oldest first) are opened, each from its start; files of other
        folders stay open only while there is room left, the most recently used kept. Attaching a folder that is
        attached already changes only the limits (Letta inserts its files again): it is how the limits are set."""
        folder = self.folder(name)
        _check_limits(max_files_open, char_limit)
        with self._lock(agent_id):
            state = self.state(agent_id)
            new = folder.id not in state.folder_ids()
            alike = next((f for f in state.folders if f["name"] == folder.name and f["id"] != folder.id), None)
            if new and alike is not None:  # (two folders an older tiermem named alike) its files' names would clash
                raise ValidationError(
                    f"This agent has another folder named {folder.name!r} attached ({alike['id']}): the files of "
                    "both would have the same names. Detach that one first (by its id), or delete one of the two."
                )
            if new:
                state.folders.append(_folder_info(folder))
            before = state.char_limit
            state.max_files_open = max_files_open or state.max_files_open
            state.char_limit = char_limit or state.char_limit
            self._widen(state, before)
            first: list[StoredFile] = []
            if new:
                ready = [f for f in self.rows.files([folder.id]) if f.status == "completed"]
                first = sorted(ready, key=lambda f: (f.created_at, f.id))[: state.limits[0]]
            closed = self._rebuild(state, opened=[f.id for f in first])
            self._save(agent_id, state)
        views = {v.file_id: v for v in state.files}
        opened = [views[f.id].name for f in first if f.id in views and views[f.id].is_open and views[f.id].visible]
        return Attached(folder, opened, closed)

    def detach(self, agent_id: str, name: str) -> Folder:
        folder = self.folder(name)
        if folder.id not in self.state(agent_id).folder_ids():
            raise NotFoundError(
                f"Folder {name!r} is not attached to this agent; attached: "
                f"{', '.join(repr(f['name']) for f in self.state(agent_id).folders) or 'none'}."
            )
        self._detach(agent_id, folder)
        return folder

    def _detach(self, agent_id: str, folder: Folder) -> None:
        with self._lock(agent_id):
            state = self.state(agent_id)
            state.folders = [f for f in state.folders if f["id"] != folder.id]
            state.files = [v for v in state.files if v.folder_id != folder.id]
            self._save(agent_id, state)

    def set_limits(self, agent_id: str, max_files_open: int | None, char_limit: int | None) -> AgentFiles:
        _check_limits(max_files_open, char_limit)
        with self._lock(agent_id):
            state = self.state(agent_id)
            before = state.char_limit
            state.max_files_open, state.char_limit = max_files_open, char_limit
            self._widen(state, before)
            self._close_beyond(state, state.limits[0])
            self._save(agent_id, state)
            return state

    def state(self, agent_id: str) -> AgentFiles:
        return AgentFiles.of(self.core.get_agent(agent_id))

    def seen(self, agent_id: str) -> AgentFiles:
        """The agent's view for reading only (cached per stored value; never change it)."""
        return AgentFiles.seen(self.core.get_agent(agent_id))

    def has_folders(self, agent_id: str) -> bool:
        return bool(self.seen(agent_id).folders)

    # -- files --------------------------------------------------------------------

    def files(self, name: str) -> list[StoredFile]:
        return list(self.rows.files([self.folder(name).id]))

    def upload(
        self,
        folder_name: str,
        file_name: str,
        data: bytes,
        *,
        source_path: str = "",
        open_in_agents: bool = False,
        embed: bool = True,
    ) -> Uploaded:
        """Parse ``data`` and store it as ``file_name`` in the folder (replacing a file of that name when its bytes
        changed). A file that cannot be parsed is stored with the status ``error`` and its reason; a bad name, or one
        holding a credential (``SecretError``), is refused (nothing stored)."""
        if isinstance(file_name, str):
            self._refuse_texts(("the file name", file_name, ""))  # before any message could quote the name
        check_file_name(file_name)
        return self.upload_many(
            folder_name, [(file_name, data, source_path)], open_in_agents=open_in_agents, embed=embed
        )[0]

    def upload_many(
        self,
        folder_name: str,
        items: Iterable[tuple[str, bytes, str]],
        *,
        open_in_agents: bool = False,
        embed: bool = True,
        batch: int = 64,
        progress: Callable[[Uploaded], None] | None = None,
        keep_others: bool = False,
        embedded: Embedded | None = None,
    ) -> list[Uploaded]:
        """Upload ``(file name, bytes, source path)`` items in batches (a few commits per batch); the views of the
        agents the folder is attached to are brought up to date once, at the end. Returns one outcome per item.
        ``open_in_agents``: the files added are opened in each of those agents, as Letta's upload inserts a file open
        (the least recently used open files beyond an agent's limit closed; the last added are the most recent).
        ``keep_others``: a file whose name is held by a file from another source path is stored as ``name_(n).ext``
        (Letta's upload: ``duplicate_handling=suffix``), its outcome saying so (``_placed``); else it replaces it (a
        sync: the folder mirrors one directory). ``embedded``: told how far each file's chunks are embedded
        (``file_embedding``; from the worker thread).

        A batch is stored (chunked and committed) by one worker thread while the next is parsed and scrubbed here:
        the commits wait on LanceDB and the chunking mostly on the tokenizer, neither holding the GIL, so the two
        overlap (``python -m bench files``). At most one batch is being stored at a time; outcomes are reported in
        the same order as storing batch by batch would; a batch that fails to store raises here before the next is
        stored."""
        folder = self.folder(folder_name)
        existing = {f.name: f for f in self.rows.files([folder.id])}
        out: list[Uploaded] = []
        good: list[tuple[StoredFile, str, int]] = []
        bad: list[tuple[StoredFile, str]] = []
        # the batch being stored: (its job, the files parsed, the files that could not be)
        storing: (
            tuple[
                Future[tuple[list[tuple[StoredFile, Written]], list[StoredFile]]],
                list[tuple[StoredFile, str, int]],
                list[tuple[StoredFile, str]],
            ]
            | None
        ) = None
        later: list[Uploaded] = []  # outcomes of items after the batch being stored: reported once it is
        notes: dict[str, str] = {}  # file id -> how its text was read, when the user should know (``Parsed.note``)

        def store(
            ok: list[tuple[StoredFile, str, int]], failed: list[tuple[StoredFile, str]]
        ) -> tuple[list[tuple[StoredFile, Written]], list[StoredFile]]:
            written = self.rows.write_changed([(r, t) for r, t, _ in ok], embed=embed, progress=embedded)
            return written, self.rows.write_errors(failed)

        def stored() -> None:
            """The outcomes of the batch being stored, once it is (its error raised)."""
            nonlocal storing
            if storing is None:
                return
            job, ok, failed = storing
            storing = None
            written, errors = job.result()
            for (r, _t, chars), (s, outcome) in zip(ok, written, strict=True):
                if outcome == "unchanged":
                    report(Uploaded(r.name, outcome, file=s))
                else:
                    report(Uploaded(r.name, outcome, notes.pop(r.id, ""), file=s, chars=chars))
            for (r, reason), s in zip(failed, errors, strict=True):
                report(Uploaded(r.name, "error", reason, s))
            for done in later:  # what was skipped or unchanged meanwhile comes after the batch, as the items did
                report(done)
            later.clear()

        def flush() -> None:
            nonlocal storing
            ok, failed = good[:], bad[:]
            good.clear()
            bad.clear()
            stored()
            if ok or failed:
                storing = (worker.submit(store, ok, failed), ok, failed)

        def note(done: Uploaded) -> None:
            if storing is not None:
                later.append(done)
            else:
                report(done)

        def report(done: Uploaded) -> None:
            out.append(done)
            if progress:
                progress(done)

        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tiermem-upload") as worker:
            try:
                for prepared in self._prepared(folder, items, existing, notes if keep_others else None):
                    if isinstance(prepared, Uploaded):
                        note(prepared)
                        continue
                    record, parsed = prepared
                    if isinstance(parsed, FileContentError):
                        bad.append((record, str(parsed)))
                    else:
                        text = self._scrub(parsed.text) if self._scrub is not None else parsed.text
                        told = "; ".join(
                            n for n in (notes.get(record.id, ""), parsed.note, redaction_note(parsed.text, text)) if n
                        )
                        if told:
                            notes[record.id] = told
                        good.append((replace(record, file_type=parsed.mime or record.file_type), text, len(text)))
                    if len(good) + len(bad) >= batch:
                        flush()
                flush()
                stored()
            except BaseException:
                if storing is not None and (error := storing[0].exception()) is not None:  # waits for it
                    log.error("a batch of %s was not stored either: %s", folder.name, error)
                raise
        # as Letta's upload, a new file is inserted open in every attached agent (the least recently used beyond
        # the limit closed); a changed file keeps each agent's view of it (an open window is cut again)
        opened = [u.file.id for u in out if open_in_agents and u.file is not None and u.outcome == "added"]
        self._sync_views(folder.id, opened=opened)
        return out

    def _prepared(
        self,
        folder: Folder,
        items: Iterable[tuple[str, bytes, str]],
        existing: dict[str, StoredFile],
        placed: dict[str, str] | None = None,
    ) -> Iterator[Uploaded | tuple[StoredFile, Parsed | FileContentError]]:
        """Each item as ``upload_many`` takes it: its outcome when it is not stored (a bad name, unchanged, over the
        folder's limit), else its record and its parsed text, or why it cannot be parsed. ``placed``: keep a file
        of another source path that holds an item's name (``_placed``), noting the name given by file id there."""
        count = len(existing)
        taken = set(existing)  # names stored, and given in this upload
        for file_name, data, source_path in items:
            held = self._credentials(file_name) if self._credentials and isinstance(file_name, str) else None
            if held is not None:  # named redacted, never echoed: a file's name is shown to every agent
                yield Uploaded(self.shown_name(file_name), "skipped", named_credential(held))
                continue
            try:
                file_name = check_file_name(file_name)
            except ValidationError as exc:
                yield Uploaded(str(file_name), "skipped", str(exc))
                continue
            digest = hashlib.sha256(data).hexdigest()
            told = ""
            if placed is not None:
                file_name, old, told = _placed(file_name, source_path, existing, taken)
            else:
                old = existing.get(file_name)
            taken.add(file_name)
            if old is not None and old.sha256 == digest and old.status == "completed":
                yield Uploaded(file_name, "unchanged", file=old)
                continue
            if old is None and count >= self.folder_max_files:
                yield Uploaded(
                    file_name,
                    "skipped",
                    f"Folder {folder.name!r} holds {count:,} files, its limit (folder_max_files, environment "
                    f"TIERMEM_FOLDER_MAX_FILES); {file_name!r} was not added. Delete files, raise the "
                    "limit or use another folder.",
                    full=True,
                )
                continue
            count += old is None
            file_id = old.id if old else stable_id("file", folder.id, file_name)
            if told and placed is not None:
                placed[file_id] = told
            record = StoredFile(
                id=file_id,
                folder_id=folder.id,
                name=file_name,
                original_name=file_name.rsplit("/", 1)[-1],
                file_type=file_type(file_name),
                size=len(data),
                sha256=digest,
                status="parsing",
                source_path=source_path,
                created_at=old.created_at if old else now(),
            )
            try:
                parsed: Parsed | FileContentError = parse_file(file_name, data, max_bytes=self.file_max_bytes)
            except FileContentError as exc:
                parsed = exc
            yield record, parsed

    def shown_name(self, file_name: str) -> str:
        """``file_name`` as a report may show it: each credential in it replaced by ``[redacted: KIND]``."""
        return self._scrub(file_name) if self._scrub is not None else file_name

    def replace_text(self, file_id: str, text: str) -> str:
        """Store ``text`` as a file's text (``tiermem doctor --secrets --redact``): its chunks are cut again, the old
        ones purged at the next upkeep, and the agents' open windows of it cut again; returns "<folder>/<file>"."""
        stored = self.rows.file(file_id)
        if stored is None:
            raise NotFoundError(f"No file with id {file_id!r}; list a folder's files with `tiermem folders show NAME`.")
        # a new version: views see it changed (their windows are cut again); the next sync of an unchanged source
        # file uploads it again, redacted again
        record = replace(stored, sha256=hashlib.sha256(text.encode()).hexdigest(), updated_at=now())
        self.rows.write([(record, text)])
        self._sync_views(stored.folder_id)
        folder = self.rows.folder(stored.folder_id)
        return f"{folder.name if folder else stored.folder_id}/{stored.name}"

    def import_file(self, folder_id: str, record: StoredFile, text: str) -> StoredFile:
        """Store a file whose text is already parsed (an agent file's), keeping its id; views are not touched."""
        return self.rows.write([(record, text)], embed=False)[0]  # type: ignore[no-any-return]

    def delete_files(self, folder_name: str, file_names: Sequence[str]) -> int:
        folder = self.folder(folder_name)
        existing = {f.name: f for f in self.rows.files([folder.id])}
        unknown = [n for n in file_names if n not in existing]
        if unknown:
            raise NotFoundError(
                f"Folder {folder.name!r} has no file {unknown[0]!r}; its files: {_listed(sorted(existing))}."
            )
        removed = self.rows.delete([existing[n].id for n in file_names])
        self._forgotten([existing[n].id for n in file_names])
        self._sync_views(folder.id)
        self._purge_core()  # an open window of a deleted file was in an agent's view: its old bytes go too
        return int(removed)

    def _forgotten(self, file_ids: Collection[str]) -> None:
        """A deleted file leaves no use record (``uses.py``: no record outlives its memory)."""
        if self._forget_uses is not None and file_ids:
            self._forget_uses(file_ids)

    def _purge_core(self) -> None:
        """Leave no old bytes of a view in the core state's files (SQLite: VACUUM and the WAL truncated)."""
        try:
            self.core.purge()
        except TiermemError as exc:  # the deletion stands; the next purge (upkeep, forget) clears the bytes
            log.warning("after deleting files, the core state could not be purged now: %s", exc)

    def text(self, folder_name: str, file_name: str) -> str:
        folder = self.folder(folder_name)
        found = next((f for f in self.rows.files([folder.id]) if f.name == file_name), None)
        if found is None:
            raise NotFoundError(f"Folder {folder.name!r} has no file {file_name!r}.")
        return str(self.rows.text(found.id))

    # -- keeping agents' views current -------------------------------------------------------

    def _sync_views(self, folder_id: str, *, opened: Sequence[str] = ()) -> None:
        for agent_id in self.agents_of(folder_id):
            with self._lock(agent_id):
                state = self.state(agent_id)
                self._rebuild(state, opened=opened)
                self._save(agent_id, state)

    def _rebuild(
        self, state: AgentFiles, *, opened: Sequence[str] = (), stored: Sequence[StoredFile] | None = None
    ) -> list[str]:
        """Bring ``state`` in line with the files table: folder infos, a view per file (new ones closed, or open
        when named in ``opened``: the later in it the more recent, only the last ``max_files_open`` of it rendered,
        as the others would be closed at once), open windows cut again from a changed file, views of removed files
        dropped, the least recently used open files beyond the limit closed (their names returned). A file being
        written again (``_shown``) keeps its view. ``stored``: the folders' files as read (else read now)."""
        recent = {file_id: i for i, file_id in enumerate(opened[-state.limits[0] :] if opened else ())}
        stamp = to_us(now())
        folders = {f.id: f for f in self.rows.folders()}
        state.folders = [_folder_info(folders[f["id"]]) for f in state.folders if f["id"] in folders]
        by_folder = {f["id"]: f for f in state.folders}
        if stored is None:
            stored = self.rows.files(state.folder_ids())
        shown = _shown(stored, state.files)
        files = [f for f in stored if f.id in shown and f.folder_id in by_folder]
        views = {v.file_id: v for v in state.files}
        out: list[FileView] = []
        for f in files:
            name = display_name(by_folder[f.folder_id], f.name)
            v = views.get(f.id) or FileView(file_id=f.id, folder_id=f.folder_id, name=name)
            v.name = name
            if v.is_open and v.sha256 and v.sha256 != f.sha256:
                v.visible, v.start_line, v.end_line = self._recut(f, name, v.start_line, v.end_line)
            v.sha256 = f.sha256  # the version the view is of: a changed file changes every view of it (notified)
            if f.id in recent:
                v.is_open, v.start_line, v.end_line, v.sha256 = True, None, None, f.sha256
                v.visible = self._window(f, name, None, None)
                v.accessed_us = stamp + recent[f.id]
            out.append(v)
        state.files = out
        return self._close_beyond(state, state.limits[0])

    def _window(self, f: StoredFile, name: str, start_line: int | None, end_line: int | None) -> str:
        lines = self.rows.lines([f])[f.id]
        start = start_line - 1 if start_line is not None else None
        return render_window(name, lines, strategy_of(f.name, f.file_type), start, end_line)

    def _recut(
        self, f: StoredFile, name: str, start_line: int | None, end_line: int | None
    ) -> tuple[str, int | None, int | None]:
        """An open window cut again from a changed file: its text and the (start_line, end_line) it now shows. A file
        that got shorter than the window's start shows its start, and the window's lines say so (what the next
        ``open_files`` reports as "previously ..."); so does a window whose lines cannot be shown (its end before its
        start: an agent file may say so)."""
        past = start_line is not None and start_line > len(self.rows.lines([f])[f.id])
        if past or (start_line is not None and end_line is not None and end_line < start_line):
            start_line, end_line = None, None
        return self._window(f, name, start_line, end_line), start_line, end_line

    def whole_window(self, view: FileView, char_limit: int | None) -> str:
        """An open view's window whole, as it was rendered when opened (an agent file exports it): as kept, or, when
        it was kept cut (``file_windows``: ``char_limit`` is the agent's limit it was kept under), rendered again from
        the version of the file it is of (``_is_version``). When it cannot be (the file changed or is gone, until the
        view is cut again from it; lines past the file's end, which an agent file may give), the kept cut with
        Letta's ``...[TRUNCATED]`` note, so no rendering or export shows a cut window as whole."""
        if not (view.is_open and is_cut(view.visible, char_limit)):
            return view.visible
        f = self.rows.file(view.file_id)
        if f is not None and self._is_version(f, view.sha256):
            try:
                return self._window(f, view.name, view.start_line, view.end_line)
            except ValidationError as exc:  # the view's lines are not the file's: shown cut, as kept
                log.warning("the open window of %s cannot be rendered again (%s); it is shown cut", view.name, exc)
        return truncate_visible(view.visible, kept_chars(char_limit))

    def _is_version(self, f: StoredFile, sha256: str) -> bool:
        """Whether ``f`` is the version of a file whose hash a view holds: the row's hash (of the bytes uploaded), or,
        for a completed file, its text's (an agent file's view of a shared folder's file: CRLF, a BOM, another
        encoding, a PDF make the two differ)."""
        if not sha256 or f.sha256 == sha256:
            return bool(sha256)
        if f.status != "completed":
            return False
        return hashlib.sha256(str(self.rows.text(f.id)).encode("utf-8")).hexdigest() == sha256

    def _widen(self, state: AgentFiles, before: int | None) -> None:
        """The open windows kept cut under the limit ``before`` rendered whole again, when the agent's limit now
        shows more of them than was kept."""
        if kept_chars(state.char_limit) > kept_chars(before):
            for v in state.files:
                if v.is_open and is_cut(v.visible, before):
                    v.visible = self.whole_window(v, before)

    @staticmethod
    def _close_beyond(state: AgentFiles, cap: int) -> list[str]:
        """Close the least recently used open files beyond ``cap``; returns their names, least recently used first.
        An open file with no text (an empty file) is not counted: Letta renders it closed and leaves it out of
        ``current_files_open``, so it takes no slot here either (Letta counts it against the limit, invisibly)."""
        shown = (v for v in state.files if v.is_open and v.visible)
        open_views = sorted(shown, key=lambda v: v.accessed_us, reverse=True)
        closed = []
        for v in reversed(open_views[cap:]):
            v.is_open, v.visible, v.start_line, v.end_line = False, "", None, None
            closed.append(v.name)
        return closed

    def _save(self, agent_id: str, state: AgentFiles, *, shown: bool = True) -> None:
        """Store the agent's view; its listeners are told unless nothing a client is shown changed (``shown``
        False: access times only)."""
        agent = self.core.get_agent(agent_id)
        metadata = dict(agent.metadata)
        if state.folders or state.max_files_open or state.char_limit:
            metadata[STATE_KEY] = state.to_json()
        else:
            metadata.pop(STATE_KEY, None)
        if metadata != agent.metadata:
            self.core.update_agent(replace(agent, metadata=metadata, updated_at=now()))
            if shown:
                self._changed(agent_id)

    def _lock(self, agent_id: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(agent_id, threading.Lock())

    # -- Letta's three tools ----------------------------------------------------------

    def _attached(self, agent_id: str) -> tuple[AgentFiles, dict[str, StoredFile]]:
        """The agent's view brought up to date, and its files by the names it uses (both for reading only)."""
        state, by_name, _ = self._attached_from(agent_id)
        return state, by_name

    def _attached_from(self, agent_id: str) -> tuple[AgentFiles, dict[str, StoredFile], list[StoredFile]]:
        """``_attached``, with the folders' files it picked them from (``FileRows.files``' shared list)."""
        state = self.seen(agent_id)
        if not state.folders:
            raise ValidationError(
                "No folder is attached to this agent, so it has no files. A person attaches one "
                "with `tiermem folders attach FOLDER --agent NAME`."
            )
        stored = self.rows.files(state.folder_ids())
        files = _shown(stored, state.files)
        if _behind(state, files):
            with self._lock(agent_id):
                state = self.state(agent_id)
                by_name, stored = self._current(state)
                self._save(agent_id, state)
            return state, by_name, stored
        return state, {v.name: files[v.file_id] for v in state.files}, stored

    def _current(self, state: AgentFiles) -> tuple[dict[str, StoredFile], list[StoredFile]]:
        """Bring ``state`` (the agent's, read under its lock) up to date when the files table moved on from it, and
        return its files by the names it uses, and the folders' files they were picked from: one reading of the
        table for both, so every file the view names is among them."""
        stored = self.rows.files(state.folder_ids())
        files = _shown(stored, state.files)
        if _behind(state, files):
            self._rebuild(state, stored=stored)
            files = _shown(stored, state.files)
        return {v.name: files[v.file_id] for v in state.files if v.file_id in files}, stored

    def open_files(self, agent_id: str, requests: Sequence[OpenRequest], close_all_others: bool = False) -> str:
        state, _ = self._attached(agent_id)
        max_open, _ = state.limits
        requests = [replace(r, file_name=state.named(r.file_name)) for r in requests]  # a name as shown is its file's
        check_requests(requests, max_open)
        with self._lock(agent_id):
            state = self.state(agent_id)
            by_name, _ = self._current(state)  # the names it checks and the names it lists are of one view
            names = [v.name for v in state.files]
            windows: list[tuple[FileView, str, int | None, int | None]] = []
            for req in requests:  # every request is checked (and its window cut) before anything changes
                view = state.view(req.file_name)
                if view is None or req.file_name not in by_name:
                    raise ValidationError(
                        f"{req.file_name} not attached - did you get the filename correct? "
                        f"Currently you have the following files attached: {names}"
                    )
                start, end = window_of(req)
                f = by_name[req.file_name]
                text = render_window(
                    req.file_name, self.rows.lines([f])[f.id], strategy_of(f.name, f.file_type), start, end
                )
                windows.append((view, text, start + 1 if start is not None else None, end))
            closed_others: list[str] = []
            if close_all_others:
                keep = {r.file_name for r in requests}
                for v in state.files:
                    if v.is_open and v.name not in keep:
                        v.is_open, v.visible, v.start_line, v.end_line = False, "", None, None
                        closed_others.append(v.name)
            previous: dict[str, tuple[int | None, int | None]] = {}
            stamp = to_us(now())
            for i, (view, text, start_line, end_line) in enumerate(windows):
                if view.is_open:
                    previous[view.name] = (view.start_line, view.end_line)
                view.is_open, view.visible, view.start_line, view.end_line = True, text, start_line, end_line
                view.sha256, view.accessed_us = by_name[view.name].sha256, stamp + i
            # closed once all are open, so the note names only files the call leaves closed (Letta closes after
            # each request and names a file it closed and then opened again: its net effect is the same)
            lru = self._close_beyond(state, max_open)
            self._save(agent_id, state)
        return str(open_summary(requests, previous, closed_others, lru))

    def grep_files(
        self,
        agent_id: str,
        pattern: str,
        include: str | None = None,
        context_lines: int | None = 1,
        offset: int | None = None,
    ) -> tuple[str, list[str]]:
        """Letta's ``grep_files`` answer, and the ids of the files with a match (each once: ``Memory`` counts them
        as used)."""
        state = self.seen(agent_id)
        files = self.rows.grep_view(state, self.rows.files(state.folder_ids())) if state.folders else None
        if files is None:  # not kept for this view and these files: made (and kept) now
            state, by_name, stored = self._attached_from(agent_id)
            files = self.rows.keep_grep_view(state, stored, by_name)
        if include:  # a file name copied as <directories> shows it (``quoting.markup_name``) filters as the name
            include = unescape_name(include)
        result = grep(files, pattern, include, context_lines, offset)
        self._touch(agent_id, result.matched_files, state)
        ids = {v.name: v.file_id for v in state.files}
        return str(result.text), [ids[name] for name in dict.fromkeys(result.matched_files) if name in ids]

    def semantic_search_files(self, agent_id: str, query: str, limit: int = 5) -> tuple[str, list[str]]:
        """Letta's ``semantic_search_files`` answer, and the ids of the files it shows a chunk of (each once)."""
        if not isinstance(query, str) or not query.strip():
            raise ValidationError("Empty search query provided")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValidationError(f"limit must be a whole number >= 1, got {limit!r}.")
        state, by_name = self._attached(agent_id)
        names = {f.id: name for name, f in by_name.items() if f.status == "completed"}
        archive = self._archive()
        asked = min(limit, SEMANTIC_CAP)
        found = archive.file_search(state.folder_ids(), query.strip(), limit=asked)
        # only chunks of files that are ready: an unfinished file (a crash mid-upload) is not searched
        shown = [h for h in found.hits if h.tags and h.tags[0] in names]
        hits = [(names[h.tags[0]], h.content) for h in shown]
        self._touch(agent_id, [n for n, _ in hits], state)
        text = str(semantic_text(query.strip(), hits))
        # beyond Letta: what the search says about itself (keyword-only, not embedded yet, cut to the budget)
        notes = [n for n in found.notes if n != archive.budget_note()]
        if found.truncated:
            notes.append(
                f"Only the best {len(found.hits)} passage(s) fit the {archive.token_budget:,}-token search budget, "
                f"so fewer than the limit of {asked} are shown; narrow the query to find other passages, or raise "
                "the search_token_budget setting (TIERMEM_SEARCH_TOKEN_BUDGET) to get more in one search."
            )
        if notes:
            text += "\n\n" + "\n".join(f"Note: {n}" for n in notes)
        return text, list(dict.fromkeys(h.tags[0] for h in shown))

    def attached_text(self, agent_id: str, name: str) -> str:
        state = self.seen(agent_id)
        view = state.view(state.named(name))
        if view is None:
            raise NotFoundError(
                f"{name} not attached - did you get the filename correct? Currently you have the "
                f"following files attached: {[v.name for v in state.files]}"
            )
        return str(self.rows.text(view.file_id))

    def _touch(self, agent_id: str, names: Sequence[str], state: AgentFiles | None = None) -> None:
        """Mark the open files among ``names`` as accessed (Letta's ``mark_access_bulk``): what least-recently-used
        closing reads. Letta stamps closed files too; their stamp is never read (opening stamps a file), so tiermem
        writes only when an open file was touched: a search of closed files writes nothing."""
        wanted = set(names)
        if not wanted or (state is not None and not any(v.is_open and v.name in wanted for v in state.files)):
            return
        with self._lock(agent_id):
            state = self.state(agent_id)
            stamp = to_us(now())
            touched = False
            for v in state.files:
                if v.is_open and v.name in wanted:
                    v.accessed_us, touched = stamp, True
            if touched:  # the access times only: no client is shown them, none is told
                self._save(agent_id, state, shown=False)

    # -- a folder's own metadata (``tiermem folders sync`` keeps its record there) -----------------------

    def set_folder_metadata(self, name: str, key: str, value: Any) -> Folder:
        """Set one key of the folder's metadata (``None`` removes it); the rest of the folder is kept as it is."""
        folder = self.folder(name)
        metadata = dict(folder.metadata)
        if value is None:
            metadata.pop(key, None)
        else:
            metadata[key] = value
        changed = replace(folder, metadata=metadata, updated_at=now())
        self.rows.put_folder(changed)
        return changed


def _placed(
    name: str, source: str, existing: dict[str, StoredFile], taken: Collection[str]
) -> tuple[str, StoredFile | None, str]:
    """Where an upload stores ``name`` from ``source`` (a path on disk): under its name when the folder has no file of
    it, or one from the same source, or one whose source is not known (an update, as before); else (or when the name
    was given to another file of this upload: ``taken``), as Letta's upload (``duplicate_handling=suffix``), under
    the first ``base_(n).ext`` not taken, or the one this source was given before. Returns the name, the file stored under it (None: a new one), and a note for a new suffixed one."""
    old = existing.get(name)
    given = old is None and bool(source) and name in taken  # given to another file of this upload (a suffixed one)
    if not given and (old is None or not source or not old.source_path or _same_source(old.source_path, source)):
        return name, old, ""
    other = "another file of this upload" if old is None else f"another file (from {old.source_path})"
    n = 1
    while True:
        candidate = numbered(name, n)
        held = existing.get(candidate)
        if held is not None and _same_source(held.source_path, source):
            return candidate, held, ""
        if held is None and candidate not in taken:
            return (
                candidate,
                None,
                f"the folder's {name} is {other}: this one is stored as {candidate} "
                "and both are kept (upload it again from the same path to update it)",
            )
        n += 1


def _same_source(a: str, b: str) -> bool:
    return a == b or os.path.realpath(a) == os.path.realpath(b)


def _shown(stored: Sequence[StoredFile], views: Sequence[FileView]) -> dict[str, StoredFile]:
    """The files of ``stored`` an agent whose views are ``views`` sees, by id: the completed ones, and one being
    written (another process's upload or sync between its row's two commits) that it already saw: its view stays
    (an open window shows the text of the row, which the first commit stores), never dropped nor closed for the
    moment the file is re-indexed. One a crash left unfinished is kept seen the same way until it is written again;
    one never seen is shown once it is completed."""
    seen = {v.file_id for v in views}
    return {f.id: f for f in stored if f.status == "completed" or (f.status in WRITING and f.id in seen)}


def _behind(state: AgentFiles, files: dict[str, StoredFile]) -> bool:
    """Whether ``state`` lags the files it is of (``_shown``): a file added or gone, or one changed since its view
    was made (another process's save of an older view came after the change's)."""
    return {v.file_id for v in state.files} != set(files) or any(
        files[v.file_id].sha256 != v.sha256 for v in state.files if v.file_id in files
    )


def _folder_info(folder: Folder) -> dict[str, str]:
    return {
        "id": folder.id,
        "name": folder.name,
        "description": folder.description,
        "instructions": folder.instructions,
    }


def _check_limits(max_files_open: int | None, char_limit: int | None) -> None:
    if max_files_open is not None and (isinstance(max_files_open, bool) or not 1 <= max_files_open <= 100):
        raise ValidationError(f"max_files_open must be 1-100, got {max_files_open!r}.")
    if char_limit is not None and (isinstance(char_limit, bool) or not 100 <= char_limit <= 1_000_000):
        raise ValidationError(f"per_file_view_window_char_limit must be 100-1,000,000 characters, got {char_limit!r}.")


def _listed(names: Sequence[str], most: int = 20) -> str:
    shown = ", ".join(repr(n) for n in names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "") if names else "none"


# -- agent files and backups (interop/agentfile.py, af_export.py, backup.py) ----------------------------------------

BACKUP_TABLES = ("folders", "files")  # whole rows of the store's folder tables (file_chunks travel as passages do)


def restored_view(
    folders: Sequence[Folder], views: Sequence[FileView], max_files_open: int | None, char_limit: int | None
) -> AgentFiles:
    """An agent's whole view as an agent file gives it (Letta's ``files_agents``, kept exactly: open or closed, the
    visible text verbatim, its lines, the last access), checked: the limits in range, every view in one of the
    ``folders``, no file twice. Store it as the agent's ``STATE_KEY`` metadata (``AgentFiles.to_json``)."""
    _check_limits(max_files_open, char_limit)
    ids = {f.id for f in folders}
    seen: set[str] = set()
    for v in views:
        if v.folder_id not in ids:
            raise ValidationError(f"The view of {v.name!r} names a folder the agent does not have attached.")
        if v.file_id in seen:
            raise ValidationError(f"The agent has two views of {v.name!r}; a file is seen once.")
        seen.add(v.file_id)
    return AgentFiles(
        folders=[_folder_info(f) for f in folders],
        files=[replace(v) for v in views],
        max_files_open=max_files_open,
        char_limit=char_limit,
    )


def check_limits(max_files_open: int | None, char_limit: int | None) -> None:
    """The two per-agent limits' ranges (``max_files_open`` 1-100, the window 100-1,000,000 characters)."""
    _check_limits(max_files_open, char_limit)


def backup_rows(files: Filesystem, table: str) -> list[dict[str, Any]]:
    """Every row of the ``folders`` or ``files`` table as stored (a file's text included), for a jsonl backup."""
    from .archive_files import file_row, folder_row

    if _backup_table(table) == "folders":
        return [folder_row(f) for f in files.rows.folders()]
    listing = list(files.rows.listing())
    texts = files.rows.texts([f.id for f in listing])
    return [file_row(f, texts.get(f.id, "")) for f in listing]


def backup_fields(table: str) -> list[str]:
    """The fields of a backed-up ``folders`` or ``files`` row."""
    from .archive_files import file_row, folder_row

    if _backup_table(table) == "folders":
        return list(folder_row(Folder(id="", name="")))
    return list(
        file_row(
            StoredFile(
                id="", folder_id="", name="", original_name="", file_type="", size=0, sha256="", status="completed"
            ),
            "",
        )
    )


def restore_rows(files: Filesystem, table: str, rows: Sequence[dict[str, Any]]) -> int:
    """Store the backed-up ``folders`` or ``files`` rows whose id is not stored yet (a restore is re-runnable); returns
    how many. A file is stored as an upload stores it, from its text: its chunks are cut again and embedded later
    (stored without vectors), its status is ``completed`` (or ``error`` with its reason), its times as backed up."""
    from .archive_files import file_from_row, folder_from_row

    if _backup_table(table) == "folders":
        known = {f.id for f in files.rows.folders()}
        fresh = [folder_from_row(r) for r in rows if r["id"] not in known]
        for folder in fresh:
            _put_restored_folder(files, folder)
        return len(fresh)
    known = {f.id for f in files.rows.listing()}
    todo = [(file_from_row(r), str(r.get("text") or "")) for r in rows if r["id"] not in known]
    good = [(f, t) for f, t in todo if f.status != "error"]
    for start in range(0, len(good), 64):
        files.rows.write(good[start : start + 64], embed=False)
    files.rows.write_errors([(f, f.error) for f, _ in todo if f.status == "error"])
    return len(todo)


def _put_restored_folder(files: Filesystem, folder: Folder) -> None:
    """Store a backed-up folder under its name, or, when another folder of this store holds that name, under the
    first free ``NAME_(n)`` (as an agent file's import does): two folders never share a name, and the store's own
    keeps it. Checked and written under the store's lock (``put_named_folder``)."""
    for name in folder_names(folder.name):
        if files.rows.put_named_folder(replace(folder, name=name)) is None:
            return
    raise ValidationError(f"No free name for the backup's folder {folder.name!r}; rename the store's own first.")


def restored_names(files: Filesystem, rows: Sequence[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """The backed-up ``folders`` rows stored under another name than the backup's (``_put_restored_folder``):
    folder id -> (the backup's name, the stored one). Each agent's view of such a folder is brought up to date (its
    restored metadata names the backup's)."""
    stored = {f.id: f.name for f in files.rows.folders()}
    renamed = {
        str(r["id"]): (str(r["name"]), stored[str(r["id"])])
        for r in rows
        if str(r["id"]) in stored and stored[str(r["id"])] != r["name"]
    }
    for folder_id in renamed:
        files._sync_views(folder_id)
    return renamed


def _backup_table(table: str) -> str:
    if table not in BACKUP_TABLES:
        raise ValidationError(f"{table!r} is not a table of folders; use one of {', '.join(BACKUP_TABLES)}.")
    return table
