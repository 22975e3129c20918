"""``Memory``: the domain facade over the store.

Block edits are serialised per block inside a process (a lock per block id) and across
processes by optimistic concurrency: read the block, compute the edit with the pure rules in
``blocks.py``, write it only if the stored version is unchanged, else re-read and retry; an edit that would then
overwrite the other writer's (a whole value, a rename, a description) is refused instead (``ConflictError``). A
label is one block's per agent: the core checks it in the same step as it writes it (``CoreStore.create_block``).
Every committed change appends a history row; history is never rewritten.

Recall (conversation log) and archival memory live in ``archive.py``: every ``Memory`` has its
``Archive`` (built together by ``factory.open_memory``, or still opening in the background: see
``factory.open_memory(lazy=True)``), reached as ``Memory.archive``. Nothing outside
the domain layer reaches the store: ``Memory`` and ``Archive`` offer the operations callers need.

Why this module is long: ``Memory`` is the facade, one class whose parts (agents, block edits, attachments, history
repair) share the per-block locks, the change listeners and the history bookkeeping.
"""

from __future__ import annotations

import atexit
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, replace
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING, Any, Generic, Literal, TypedDict, TypeVar, Unpack
from zoneinfo import ZoneInfo

from ..base.background import Opening
from ..base.config import BlockSpec
from ..base.errors import (
    ConflictError,
    EditError,
    LabelTakenError,
    NotFoundError,
    SecretError,
    StoreError,
    TiermemError,
    ValidationError,
)
from ..base.names import name_in
from ..base.projects import named_project
from ..base.records import (
    Agent,
    Block,
    BlockVersion,
    ContextWindow,
    Hit,
    Message,
    Passage,
    check_text,
    is_blank,
    new_id,
    now,
    stable_id,
)
from ..core.protocol import CoreStore
from ..core.uses import KINDS as USE_KINDS
from ..core.uses import MemoryUses
from . import blocks as rules
from . import secrets
from .file_views import OpenRequest, truncate_visible
from .filesystem import (
    DEFAULT_FILE_MAX_BYTES,
    DEFAULT_FOLDER_MAX_FILES,
    AgentFiles,
    Filesystem,
    directories_summary,
    render_agent_directories,
)
from .links import Neighbourhood, check_note
from .periods import time_zone
from .uses import Rules, UseCounter

if TYPE_CHECKING:
    from .archive import Archive, SearchResult

log = logging.getLogger(__name__)
LOGGED_TEXT_FIELDS = ("content", "conversation_id", "project", "id", "payload")  # a logged turn's texts, all scanned

ChangeKind = Literal["block_updated", "blocks_changed", "files_changed", "agent_deleted"]
T = TypeVar("T")
ROLE_BLOCKS = {"human": "user", "persona": "assistant"}  # the block that names whoever speaks in a role
# An agent's IANA time zone (a Letta agent's ``timezone``): the search tools read dates that name no zone in it and
# show times in it; an agent without one is in UTC.
TIMEZONE_KEY = "timezone"

# Who is editing when a caller does not say: "agent" for tool calls; the sleep-time agent sets
# "sleeptime" for the duration of its run (copied into worker threads with the context).
current_actor: ContextVar[str] = ContextVar("tiermem_actor", default="agent")


@dataclass(frozen=True)
class Change:
    """What listeners (the MCP server) hear after a committed change."""

    kind: ChangeKind
    agent_ids: tuple[str, ...]
    label: str | None = None
    version: int | None = None  # a block_updated's new version
    block_id: str | None = None  # a block_updated's block; a blocks_changed's created (version 1) or detached one
    updated_at: datetime | None = None  # a block_updated's new version's commit time (with ``version``: which one)
    parent: tuple[int, datetime] | None = None  # a block_updated's: the version committed on top of, and its time


Listener = Callable[[Change], None]
# (agent id, passage id, the deletion itself) -> the rows it deleted: ``Memory.deletion_guard``
DeletionGuard = Callable[[str, str, Callable[[], int]], int]
WARM_EXIT_SECONDS = 15.0  # at interpreter exit, the longest a process waits for ``Memory.warm``'s read to finish
DEFAULT_AGENT = "default"  # the agent every command uses unless told otherwise; created on first use
DELETING_KEY = "tiermem_deleting"  # agent metadata: the agent's deletion started at this time (see delete_agent)


class BlockChanges(TypedDict, total=False):
    """What ``Memory.update_block`` may change of a block (a key left out, or None: left as it is)."""

    new_label: str | None
    value: str | None
    description: str | None
    limit: int | None
    read_only: bool | None
    pinned: bool | None
    metadata: dict[str, str] | None


@dataclass(frozen=True)
class Written(Generic[T]):
    """What a write stored, and what the model should be told about it (None: nothing; else, for example, that the
    rows are stored without vectors until the embedding model is ready)."""

    stored: T
    note: str | None


@dataclass(frozen=True)
class AgentDeletion:
    """What deleting an agent removes: blocks (labels) that go with their history, blocks that stay because other
    agents are attached to them, and counts."""

    name: str
    agent_id: str
    blocks: tuple[str, ...]
    shared_blocks_kept: tuple[str, ...]
    block_versions: int
    messages: int
    passages: int
    purge_unfinished: str = ""  # why the purge of the core's files after the deletion did not run ('': it did)

    def describe(self) -> str:
        lines = [
            f"agent {self.name} ({self.agent_id})",
            f"blocks: {', '.join(self.blocks) or 'none'} ({self.block_versions} version(s) of history)",
            f"messages: {self.messages}, archival passages: {self.passages}",
        ]
        if self.shared_blocks_kept:
            lines.append(f"kept (other agents share them, only detached): {', '.join(self.shared_blocks_kept)}")
        return "\n".join(lines)


_MAX_ATTEMPTS = 200
REDACTING_ACTORS = frozenset({"import", "doctor"})  # block writers whose credentials are redacted, not refused


class Memory:
    def __init__(
        self,
        archive: Archive | Opening[Archive],
        *,
        default_blocks: Sequence[BlockSpec] = (),
        default_system: str = "",
        max_content_chars: int = 100_000,
        core: CoreStore,
        file_max_bytes: int = DEFAULT_FILE_MAX_BYTES,
        folder_max_files: int = DEFAULT_FOLDER_MAX_FILES,
        secret_scan: bool = True,
        uses: UseCounter | None = None,
    ) -> None:
        self._archive = archive
        # search hits, opened blocks and files, auto-recalled memories, counted off the request path (uses.py)
        self.uses = uses if uses is not None else UseCounter(MemoryUses(Rules().half_life_us))
        self.uses.exists = self.existing  # a flush keeps no record of a memory forgotten meanwhile (uses.py)
        self.secret_scan = secret_scan  # credentials redacted from automatic input, refused in writes (secrets.py)
        self._named: Archive | None = None  # the archive whose searches read ``speaker_names``
        self.core: CoreStore = core
        self.default_blocks = tuple(default_blocks)
        self.default_system = default_system
        self.max_content_chars = max_content_chars
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._listeners: list[Listener] = []
        # set by the composition root (``interop.auto_memory_admin.guard_deletions``, for a local store): a deletion
        # of a passage asked for runs inside it, so what a file sync stored and a user deleted is not stored again
        self.deletion_guard: DeletionGuard | None = None
        self._token_guard = threading.Lock()
        # agents_only -> (when its read started: monotonic, the change token)
        self._tokens: dict[bool, tuple[float, object]] = {}
        self._warming: threading.Thread | None = None  # ``warm``'s thread
        self._settling = threading.Event()  # set by ``settle``: no warm starts reading after it
        # folders and files (Letta's filesystem): each agent's view of them is kept with the agent
        self.files = Filesystem(
            core,
            self._opened_archive,
            self._files_changed,
            file_max_bytes=file_max_bytes,
            folder_max_files=folder_max_files,
            scrub=self.scrub,
            refuse=self.refuse_secrets,
            credentials=self.credentials_in,
            forget_uses=self.uses.forget,
        )

    def _opened_archive(self) -> Archive:
        return self.archive

    def _files_changed(self, agent_id: str) -> None:
        self._emit(Change("files_changed", (agent_id,)))

    @property
    def archive(self) -> Archive:
        """Recall and archival memory; if they are still opening (a server's first seconds), waits for them.
        Its searches learn the names of the agent's roles from here (``speaker_names``)."""
        archive = self._archive
        opened = archive.get() if isinstance(archive, Opening) else archive
        if self._named is not opened:
            opened.speaker_names = self.speaker_names
            opened.check_agent = self.check_live  # no row is stored for an agent that is gone (deleted meanwhile)
            opened.check_before_write = self.core.watch_cheap  # object storage: after the write only (one request)
            self._named = opened
        return opened

    def speaker_names(self, agent_id: str) -> dict[str, str]:
        """``{role: name}`` for turns logged by role: the user's name from the ``human`` block, the agent's own
        from ``persona`` (``names.name_in``); roles whose block names nobody are left out."""
        found: dict[str, str] = {}
        for block in self.blocks(agent_id):
            role = ROLE_BLOCKS.get(block.label)
            if role is not None and role not in found:
                name = name_in(block.value)
                if name:
                    found[role] = name
        return found

    @property
    def archive_ready(self) -> bool:
        """False while the archive is still opening in the background."""
        return not isinstance(self._archive, Opening) or self._archive.ready

    def open_archive(self) -> None:
        """Start opening the archive in the background if it is still to open (``open_memory(archive_now=False)``);
        otherwise nothing. A caller that needs it before then starts it itself (``archive``)."""
        if isinstance(self._archive, Opening):
            self._archive.start()

    def settle(self, timeout: float) -> None:
        """Wait (up to ``timeout`` s each) for what still opens in the background: the archive, then the model.
        A server calls it before it exits: native code (lancedb, onnxruntime) still importing or loading in a
        daemon thread when the interpreter shuts down can abort the process."""
        archive = self._archive.settle(timeout) if isinstance(self._archive, Opening) else self._archive
        if archive is not None:
            archive.embedder.settle(timeout)
        self._finish_warming(timeout)

    def warm(self, agent_id: str) -> None:
        """Build in the background, once the archive is open, what the agent's first search would otherwise build
        (its sitting index: ``Archive.warm_sittings``). A server calls it when it knows its agent. Once: later calls,
        and calls after ``settle``, do nothing. The thread is finished, not abandoned, at exit (``settle``, else at
        interpreter exit): native code still reading in a daemon thread when the interpreter shuts down can abort it."""
        with self._locks_guard:
            if self._warming is not None or self._settling.is_set():
                return
            self._warming = threading.Thread(target=self._warm, args=(agent_id,), name="tiermem-warm", daemon=True)
        atexit.register(self._finish_warming, WARM_EXIT_SECONDS)
        self._warming.start()

    def _warm(self, agent_id: str) -> None:
        opening = self._archive
        while isinstance(opening, Opening) and opening.settle(0.25) is None:
            if opening.ready or self._settling.is_set():
                atexit.unregister(self._finish_warming)
                return  # the opening failed (it logged why, and every call that needs the archive says so), or exit
            if not opening.started:  # a server opens its archive once the handshake is answered: wait for that
                self._settling.wait(0.25)
        try:
            if not self._settling.is_set():
                self.archive.warm_sittings(agent_id)
            if self.secret_scan and not self._settling.is_set():
                secrets.prepare()  # the detector's imports, off the first prompt's path
        except TiermemError as exc:  # the first search builds it, and reports what fails then
            log.warning("could not prepare agent %s's recall search in the background: %s", agent_id, exc)
        except Exception:
            log.exception("could not prepare agent %s's recall search in the background: tiermem failed", agent_id)
        finally:
            atexit.unregister(self._finish_warming)  # done: nothing to wait for at exit

    def _finish_warming(self, timeout: float) -> None:
        """No warm starts reading from now on; one under way is waited for (up to ``timeout`` s)."""
        self._settling.set()
        thread = self._warming
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    # -- listeners -----------------------------------------------------------

    def subscribe(self, listener: Listener) -> None:
        """Tell ``listener`` of each committed change (once: one subscribed already is left as it is)."""
        if listener not in self._listeners:
            self._listeners.append(listener)

    def unsubscribe(self, listener: Listener) -> None:
        """Stop telling ``listener`` (one no longer subscribed is left alone)."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _emit(self, change: Change) -> None:
        for listener in list(self._listeners):
            listener(change)

    # -- agents --------------------------------------------------------------

    def list_agents(self) -> list[Agent]:
        return self.core.list_agents()

    def get_agent(self, name: str) -> Agent:
        agent = self.core.find_agent(name)
        if agent is None:
            names = ", ".join(a.name for a in self.core.list_agents()) or "none yet"
            raise NotFoundError(
                f"No agent named {name!r} (agents: {names}). Create it with `tiermem agents create {name}`."
            )
        return agent

    def check_live(self, agent_id: str) -> None:
        """NotFoundError unless the agent exists and is not being deleted: what every write of rows or blocks for an
        agent checks first (a server may still hold the id of an agent deleted meanwhile; its writes must not leave
        rows that a later agent of the same name, whose id is the same, would find). Cheap: the core's cached agent
        rows (SQLite: a dictionary look-up once ``PRAGMA data_version`` says the cache is current; object storage:
        one conditional GET of the agent's object)."""
        try:
            agent = self.core.get_agent(agent_id)
        except NotFoundError:
            raise _gone(agent_id, write=True) from None
        if DELETING_KEY in agent.metadata:
            raise NotFoundError(f"Agent {agent.name!r} is being deleted, so nothing was written.")

    def named_agent(self, name: str) -> Agent:
        """The agent a command works on: the built-in ``default`` agent is created on first use; any other name
        must exist (a mistyped ``--agent`` is refused with the names that do, never created)."""
        return self.ensure_agent(name) if name == DEFAULT_AGENT else self.get_agent(name)

    def ensure_agent(self, name: str, *, blocks: Sequence[BlockSpec] | None = None) -> Agent:
        """The agent named ``name``, created on first use with ``blocks`` (default: the default blocks); if another
        process created it meanwhile (under another id), that one."""
        agent = self.core.find_agent(name)
        if agent is not None:
            return agent
        try:
            return self.create_agent(name, stable=True, blocks=blocks)
        except ValidationError:
            agent = self.core.find_agent(name)
            if agent is None:
                raise
            return agent

    def create_agent(
        self,
        name: str,
        *,
        system: str | None = None,
        blocks: Sequence[BlockSpec] | None = None,
        stable: bool = False,
        metadata: dict[str, str] | None = None,
        agent_id: str | None = None,
        documents: frozenset[str] = frozenset(),
    ) -> Agent:
        """A new agent. ``documents``: the metadata keys whose values are JSON documents checked as a logged message's
        payload is (``refuse_in_document``), such as Letta's messages an agent file import keeps for export."""
        check_agent_name(name)
        plain = {k: v for k, v in (metadata or {}).items() if k not in documents}
        self._refuse_in_fields(("the agent's name", name), ("the system prompt", system), *_metadata_fields(plain))
        for key in documents & (metadata or {}).keys():
            self.refuse_in_document((metadata or {})[key], "a metadata value")
        if not stable and self.core.find_agent(name) is not None:
            raise ValidationError(f"An agent named {name!r} already exists; choose another name.")
        t = now()
        agent_id = agent_id or (stable_id("agent", name) if stable else new_id("agent"))
        agent = Agent(
            id=agent_id,
            name=name,
            system=self.default_system if system is None else system,
            created_at=t,
            updated_at=t,
            metadata=_check_metadata(metadata or {}),
        )
        specs = rules.check_new_blocks(self.default_blocks if blocks is None else blocks, secret_scan=self.secret_scan)
        # Blocks and attachments first, the agent row last: once another process can find the
        # agent, its blocks are there. Stable ids make a concurrent or interrupted first start
        # converge on the same rows.
        for spec in specs:
            block_id = stable_id("block", agent.id, spec.label) if stable else new_id("block")
            self._insert_block(block_id, spec, actor="system")
            self.core.attach(agent.id, block_id)
        try:
            self.core.insert_agent(agent)  # refused if another process created an agent of this name meanwhile
        except ValidationError:
            self.core.delete_agent(agent.id)  # the blocks made for it, which no agent can reach
            raise
        return self.core.get_agent(agent.id)

    def set_agent_metadata(self, agent_id: str, updates: dict[str, str], *, system: str | None = None) -> Agent:
        """Merge ``updates`` into the agent's metadata (a value of "" removes the key); optionally set its system prompt."""
        agent = self.core.get_agent(agent_id)
        merged = {**agent.metadata, **_check_metadata(updates)}
        merged = {k: v for k, v in merged.items() if v != ""}
        if system is not None:
            self._check_text("system", system)
        if system is not None:  # a credential the prompt held already is left to `doctor --secrets`
            self.refuse_secrets(system, "the system prompt", before=agent.system)
        self._refuse_in_fields(*_metadata_fields(updates))
        changed = replace(agent, metadata=merged, system=agent.system if system is None else system, updated_at=now())
        self.core.update_agent(changed)
        return self.core.get_agent(agent_id)

    # -- conversations (agent-loop state) ------------------------------------------

    def context_window(self, agent_id: str, conversation_id: str) -> ContextWindow:
        stored = self.core.get_conversation(agent_id, conversation_id)
        return stored if stored is not None else ContextWindow(agent_id=agent_id, conversation_id=conversation_id)

    def set_context_window(self, window: ContextWindow) -> None:
        self.core.put_conversation(window)

    def in_context_messages(self, window: ContextWindow) -> list[Message]:
        """The summary message (if any) followed by every message from ``start_seq`` on, oldest first."""
        messages = self.archive.rows.messages_since(window.agent_id, window.conversation_id, window.start_seq)
        if window.summary_id:
            summary = self.archive.rows.message(window.summary_id)
            if summary is not None:
                messages = [summary, *[m for m in messages if m.id != summary.id]]
        return messages

    # -- reading blocks ----------------------------------------------------------

    def blocks(self, agent_id: str) -> list[Block]:
        ids = self.core.attached_block_ids(agent_id)
        by_id = {b.id: b for b in self.core.get_blocks(ids)}
        return [by_id[i] for i in ids if i in by_id]

    def change_token(self, max_age: float = 0.0, *, agents_only: bool = False) -> object:
        """Differs from an earlier call's value when another process may have changed agents or blocks since
        (``CoreStore.change_token``); ``watch_cheap`` says how often it is worth asking. With ``max_age``, a token
        any caller of this memory read less than ``max_age`` seconds ago is returned again: the watches of a
        multi-user server's tenants, which share one memory, then share one poll of the object store (three
        listings) instead of one each; callers asking at once wait for one read. A token is read before what it
        stands for, so an older one delays a watch's look (by less than ``max_age``), never makes it miss a change.
        ``agents_only``: a token that need only move with the agents (whether a folder is attached: one listing)."""
        if max_age <= 0:
            return self.core.change_token(agents_only)
        with self._token_guard:
            held = self._tokens.get(agents_only)
            if held is not None and time.monotonic() - held[0] < max_age:
                return held[1]
            started = time.monotonic()
            token = self.core.change_token(agents_only)
            self._tokens[agents_only] = (started, token)
            return token

    @property
    def watch_cheap(self) -> bool:
        return self.core.watch_cheap

    def read_now(self, fn: Callable[[], T]) -> tuple[T] | None:
        """``(fn(),)`` when ``fn`` (reads of blocks and agents) can be answered from the core state's cache without
        waiting for I/O or a lock; None otherwise (then call it the normal way, in a worker thread)."""
        return self.core.read_cached(fn)

    def block(self, agent_id: str, label: str) -> Block:
        found = self.core.find_block(agent_id, rules.lookup_label(label))
        if found is not None:
            return found
        blocks = self.blocks(agent_id)
        if not blocks:  # no block at all: perhaps no agent either (deleted while a server still holds its id)
            try:
                self.core.get_agent(agent_id)
            except NotFoundError:
                raise _gone(agent_id, write=False) from None
        labels = ", ".join(repr(b.label) for b in blocks) or "none"
        raise NotFoundError(
            f"No memory block with label {rules.shown_label(label)}. Blocks that exist: {labels}. "
            "Use one of these labels, or create a block first."
        )

    def open_block(self, agent_id: str, label: str) -> Block:
        """A block opened for reading (``memory_open``): ``block``, counted as a use of it."""
        found = self.block(agent_id, label)
        self.uses.note("block", agent_id, [found.id])
        return found

    def render_core(
        self,
        agent_id: str,
        *,
        line_numbers: bool = False,
        with_metadata: bool = True,
        context_window: int | None = None,
        blocks: list[Block] | None = None,
    ) -> str:
        """Core memory as Letta renders it: the blocks (``blocks``, when the caller read them), the attached folders'
        ``<directories>`` (their default limits from ``context_window``, the model's, when known), then
        ``<memory_metadata>``."""
        text = rules.render_core_memory(self.blocks(agent_id) if blocks is None else blocks, line_numbers=line_numbers)
        text += self.directories(agent_id, context_window)
        if not with_metadata:
            return text
        recall, archival, tags = self.archive.counts(agent_id)
        meta = rules.render_memory_metadata(
            agent_id=agent_id, recompiled_at=now(), recall_count=recall, archival_count=archival, archival_tags=tags
        )
        return text + "\n\n" + meta

    # -- editing ----------------------------------------------------------------

    def edit(
        self,
        agent_id: str,
        label: str,
        edit: rules.Edit,
        *,
        actor: str | None = None,
        expected_version: int | None = None,
        seen: Mapping[str, tuple[int, datetime]] | None = None,
    ) -> Block:
        """Apply ``edit`` to the block ``label``; returns the committed block. Raises on refusal; with
        ``expected_version``, ``ConflictError`` (nothing written) when the block is at another version. ``seen``:
        the version of each block (by id) the model last saw and its commit time, when the caller knows it (a
        server's client: ``server/sightings.py``); a whole-value edit (``Rethink``) of a block at another version now
        is refused (``ConflictError``, nothing written): it was written from a value without the edits since; so is
        one of a block the model was not shown: it was written from no value at all."""
        actor = actor or current_actor.get()
        self._check_sizes(edit)
        block = self.block(agent_id, label)
        saw = seen.get(block.id) if seen is not None and isinstance(edit, rules.Rethink) else None
        if seen is not None and isinstance(edit, rules.Rethink) and saw is None:
            self._refusal_first(block, edit, actor)
            raise _unseen(block)
        return self._edit(block, edit, actor=actor, expected_version=expected_version, seen=saw)

    def _edit(
        self,
        block: Block,
        edit: rules.Edit,
        *,
        actor: str,
        expected_version: int | None = None,
        seen: tuple[int, datetime] | None = None,
    ) -> Block:
        """``edit`` applied to ``block`` as the caller read it: a whole-value edit (``Rethink``) over a value another
        writer changed since that read is refused (``_replaced_meanwhile``), however long ago the read was; with
        ``seen`` (the version the model wrote it from), over one changed since that version (``_unseen_change``),
        checked in the commit's own compare-and-set."""

        def change(current: Block) -> Block:
            _at_version(current, expected_version)
            if seen is not None and (current.version, current.updated_at) != seen:
                self._refusal_first(current, edit, actor)
                raise _unseen_change(current, seen[0])  # it would drop edits the model has not seen
            if isinstance(edit, rules.Rethink) and current.value not in (block.value, edit.new):
                raise _replaced_meanwhile(block, current)  # re-applying it would overwrite the other writer's edit
            return replace(
                current, value=rules.apply_edit(current, edit, enforce_read_only=actor not in ("human", "doctor"))
            )

        return self._commit(block, change, operation=edit.operation, actor=actor)

    def _refusal_first(self, block: Block, edit: rules.Edit, actor: str) -> None:
        """Raise what ``edit`` of ``block`` would be refused for whatever the model saw (a read-only block, the limit,
        a credential): a rethink refused as unseen is refused for that first, not again after the model's view."""
        value = rules.apply_edit(block, edit, enforce_read_only=actor not in ("human", "doctor"))
        self._without_secrets(replace(block, value=value), block, actor)

    def update_block(
        self,
        agent_id: str,
        label: str,
        *,
        actor: str = "human",
        operation: str = "update",
        expected_version: int | None = None,
        **changes: Unpack[BlockChanges],
    ) -> Block:
        """Change a block's label, description, limit, read-only flag, pinned state or metadata (a new version).
        With ``expected_version``: ``ConflictError`` (nothing written) when the block is at another version.
        Without it, another writer's change meanwhile to what this call sets (the label, the description) is a
        ``ConflictError`` too (nothing written); a change to anything else is kept and this one applied on top.
        A new label another block of one of the block's agents has: ``LabelTakenError``, nothing written.

        ``pinned=False`` detaches the block from the rendered core memory: it stays the agent's
        block, is listed by label and description, and is opened on demand. ``metadata`` is merged
        into the block's (a value of "" removes that key). ``value`` replaces the whole value in the same version,
        so a new value and the limit it needs land together or not at all; a value another writer changed since this
        call read the block is a ``ConflictError`` (nothing written), as with ``Rethink``.
        """
        block = self.block(agent_id, label)
        change, new_label = self._updating(block, changes, actor=actor, expected_version=expected_version)
        try:
            committed = self._commit(block, change, operation=operation, actor=actor)
        except LabelTakenError:  # another process gave the label to another block of an agent meanwhile
            raise rename_taken(str(new_label)) from None
        if new_label is not None or rules.is_pinned(committed) != rules.is_pinned(block):
            self._emit(Change("blocks_changed", tuple(self.core.agents_of_block(block.id))))
        return committed

    def label_taken(self, block_id: str, label: str, *, besides: str | None = None) -> bool:
        """Whether an agent the block is attached to (other than ``besides``) has a block labelled ``label``: what a
        rename of the block to ``label`` is refused for (``rename_taken``)."""
        agents = [a for a in self.core.agents_of_block(block_id) if a != besides]
        return any(b.label == label for agent in agents for b in self.blocks(agent))

    def check_update(self, block: Block, *, actor: str = "human", **changes: Unpack[BlockChanges]) -> None:
        """Refuse, writing nothing, what ``update_block`` would refuse over ``block`` as read (the label, the sizes,
        the limit, the metadata, a new credential in the value or the description): a plan that writes several
        blocks (Letta Code's ``memory_apply_patch``) checks each one before its first write."""
        change, _ = self._updating(block, changes, actor=actor)
        self._without_secrets(change(block), block, actor)

    def _updating(
        self, block: Block, changes: BlockChanges, *, actor: str, expected_version: int | None = None
    ) -> tuple[Callable[[Block], Block], str | None]:
        """``update_block``'s checks of its ``changes`` over ``block`` (as read), and the change it commits; with the
        block's new label when it is renamed (None: it keeps its label)."""
        new_label, value, description = changes.get("new_label"), changes.get("value"), changes.get("description")
        limit, read_only, pinned = changes.get("limit"), changes.get("read_only"), changes.get("pinned")
        metadata = changes.get("metadata")
        if value is not None:
            self._check_text("value", value)
        if new_label is not None:
            new_label = rules.validate_label(new_label)
            self._refuse_in_fields(("the new label", new_label))
        self._refuse_in_fields(*_metadata_fields(metadata))
        renamed = new_label is not None and new_label != block.label
        if renamed and self.label_taken(block.id, str(new_label)):
            raise rename_taken(str(new_label))
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0):
            raise ValidationError(f"limit must be a positive number of characters, got {limit!r}.")
        updates = _check_metadata(metadata or {})

        def change(current: Block) -> Block:
            _at_version(current, expected_version)
            if renamed and current.label not in (block.label, new_label):
                raise _renamed_meanwhile(block, current)
            if description is not None and current.description not in (block.description, description):
                raise _described_meanwhile(block, current)
            if value is not None and current.value not in (block.value, value):
                raise _replaced_meanwhile(block, current)  # writing it would overwrite the other writer's edit
            if actor != "human" and current.read_only:
                raise EditError(rules.READ_ONLY_ERROR)
            updated = replace(
                current,
                label=new_label if new_label is not None else current.label,
                value=value if value is not None else current.value,
                description=description if description is not None else current.description,
                limit=limit if limit is not None else current.limit,
                read_only=read_only if read_only is not None else current.read_only,
                metadata=_with_pinned({k: v for k, v in {**current.metadata, **updates}.items() if v != ""}, pinned),
            )
            rules.check_limit(updated.value, updated.limit)
            return updated

        return change, new_label if renamed else None

    def revert(self, agent_id: str, label: str, version: int, *, actor: str | None = None) -> Block:
        """Restore the value of ``version`` as a new version; history keeps everything (``revert_version``)."""
        return self.revert_version(agent_id, label, version, actor=actor)[0]

    def revert_version(
        self, agent_id: str, label: str, version: int, *, actor: str | None = None
    ) -> tuple[Block, bool]:
        """Restore the value of ``version`` as a new version, and whether one was written: a block that holds that
        value already is left as it is (no new version). Only the value: the label, description, limit and
        read-only setting stay as they are now."""
        actor = actor or current_actor.get()
        listed = {"tool": "memory_history", "command": f"tiermem blocks history {label}"}
        rules.whole_version(version, **listed)  # before the block is read
        block = self.block(agent_id, label)
        old = self.core.history_version(block.id, rules.version_number(block, version, **listed))
        if old is None:  # forgotten
            raise rules.no_version(block, version, **listed)
        edit = rules.Rethink(old.value, operation=f"revert:{version}", check_line_numbers=False)
        self._check_sizes(edit)
        done = self._edit(block, edit, actor=actor)  # as read above: another writer's edit since is kept, not reverted
        return done, done.version != block.version

    def history(self, agent_id: str, label: str, limit: int = 20) -> list[BlockVersion]:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValidationError(f"limit must be a whole number >= 1, got {limit!r}.")
        block = self.block(agent_id, label)
        # the block has at most block.version versions: a larger limit asks for all of them (and one past 2**63 - 1
        # is no number SQLite can take)
        return self.core.history(block.id, limit=min(limit, block.version))

    # -- creating, attaching, deleting ---------------------------------------

    def create_block(
        self, agent_id: str, spec: BlockSpec, *, actor: str | None = None, operation: str = "create"
    ) -> Block:
        actor = actor or current_actor.get()
        spec = self._check_spec(spec)
        self.check_live(agent_id)  # a block attached to a deleted agent's id would come back with its next agent
        if any(b.label == spec.label for b in self.blocks(agent_id)):
            raise _create_taken(spec.label)
        block_id = new_id("block")
        new, first = self._new_block(block_id, spec, actor=actor, operation=operation)
        try:
            self.core.create_block(agent_id, new, first)  # the label checked again, in the same step as the writes
        except LabelTakenError:  # another process created (or renamed a block to) this label meanwhile
            raise _create_taken(spec.label) from None
        self._emit(Change("blocks_changed", (agent_id,), new.label, new.version, new.id, new.updated_at))
        block = self.core.get_block(block_id)
        assert block is not None
        return block

    def import_block(self, agent_id: str, block_id: str, spec: BlockSpec) -> Block:
        """Create a block under a caller-chosen id (or find it) and attach it: re-running an import is harmless."""
        if self.core.get_block(block_id) is None:
            spec = self._check_spec(spec)
            self._insert_block(block_id, spec, actor="import")
        self.core.attach(agent_id, block_id)
        block = self.core.get_block(block_id)
        assert block is not None
        return block

    def check_block_spec(self, spec: BlockSpec) -> None:
        """Refuse, writing nothing, a block ``import_block`` would refuse (an import checks every block first)."""
        self._check_spec(spec)

    def check_new_block(self, agent_id: str, spec: BlockSpec, *, actor: str | None = None) -> None:
        """Refuse, writing nothing, a block ``create_block`` would refuse for its content (the label, the metadata,
        the sizes, the limit, the agent deleted, a credential in the value or the description): a plan that writes
        several blocks checks each one before its first write. A label taken meanwhile is ``create_block``'s own."""
        spec = self._check_spec(spec)
        self.check_live(agent_id)
        self._new_block("", spec, actor=actor or current_actor.get(), operation="create")

    def deletion_plan(self, agent_id: str) -> AgentDeletion:
        """What deleting the agent removes (shown before a deletion is confirmed)."""
        agent = self.core.get_agent(agent_id)
        gone: list[str] = []
        kept: list[str] = []
        versions = 0
        for b in self.blocks(agent_id):
            if set(self.core.agents_of_block(b.id)) - {agent_id}:
                kept.append(b.label)
            else:
                gone.append(b.label)
                versions += b.version
        messages, passages, _tags = self.archive.counts(agent_id)
        return AgentDeletion(agent.name, agent.id, tuple(gone), tuple(kept), versions, messages, passages)

    def delete_agent(self, agent_id: str, *, purge: bool = True) -> AgentDeletion:
        """Delete an agent with its blocks (a block another agent is attached to stays with that agent), their
        history, its messages, passages, conversation state and idempotency keys.

        Crash-safe: the agent is first marked as being deleted (``DELETING_KEY`` in its metadata, one commit); then
        its messages and passages go, then its core state with its row last. A deletion killed part way leaves the
        marked row, and the next opening of the store (``finish_deletions``: every command, the server, doctor)
        finishes it; every step can run twice. With ``purge`` the core state is purged at the end (``purge_core``),
        so what the agent's blocks held is gone from its files; a purge that fails then (a lock held too long, a
        read-only disk) leaves the deletion done and is reported in ``AgentDeletion.purge_unfinished``, not raised.
        A caller deleting several agents passes ``purge=False`` and purges once. Its rows in the store's tables are
        marked for the store's purge.
        """
        plan = self.deletion_plan(agent_id)
        self.set_agent_metadata(agent_id, {DELETING_KEY: now().isoformat()})
        self._finish_deletion(agent_id)
        return replace(plan, purge_unfinished=self.purge_core()) if purge else plan

    def purge_core(self) -> str:
        """Purge the core state's files (``CoreStore.purge``) after a deletion that is done: '' when it ran, else
        why not (logged as a warning; ``tiermem optimize`` purges what is left)."""
        try:
            self.core.purge()
        except StoreError as exc:
            log.warning("the core state's files are not purged yet (run `tiermem optimize`): %s", exc)
            return str(exc)
        return ""

    def pending_deletions(self) -> list[Agent]:
        """Agents whose deletion was started and not finished (a process killed part way)."""
        return [a for a in self.core.list_agents() if DELETING_KEY in a.metadata]

    def finish_deletions(self) -> list[str]:
        """Finish every deletion an earlier process started and did not finish; returns the agents' names."""
        done = []
        for agent in self.pending_deletions():
            self._finish_deletion(agent.id)
            done.append(agent.name)
        if done:
            self.purge_core()
        return done

    def _finish_deletion(self, agent_id: str) -> None:
        self.archive.rows.delete_agent_data(agent_id)
        self.archive.forget_turns(agent_id)  # this process's copies of its latest and just-logged turns go too
        self.uses.forget_agent(agent_id)
        self.core.delete_agent(agent_id)
        self._emit(Change("agent_deleted", (agent_id,)))  # a server serving it drops it (cli/oauth.py's tenants)

    def attach(self, agent_id: str, block_id: str) -> Block:
        """Share an existing block with another agent (one block, many agents)."""
        block = self.core.get_block(block_id)
        if block is None:
            raise NotFoundError(f"No block with id {block_id!r}. `tiermem blocks list --json` shows block ids.")
        taken = LabelTakenError(
            f"This agent already has a different block labelled {block.label!r}; rename one first.", label=block.label
        )
        if any(b.label == block.label and b.id != block.id for b in self.blocks(agent_id)):
            raise taken
        try:
            self.core.attach(agent_id, block_id, unique_label=True)
        except LabelTakenError:
            raise taken from None
        self._emit(Change("blocks_changed", (agent_id,)))
        return block

    def delete_block(
        self, agent_id: str, label: str, *, actor: str | None = None, operation: str | None = None
    ) -> Block:
        """Detach the block from this agent. Its history stays in the store. ``operation``: why, recorded as a last
        version of the block (its value unchanged) when no other agent has it, so the deletion is in its history
        with its message (a synced directory's commit takes it: ``memfs_format.reason_of``). The detach comes first:
        a process that dies between the two steps leaves the block deleted without its reason (the commit says only
        that it was detached), never an attached block whose last version says it was deleted."""
        actor = actor or current_actor.get()
        block = self.block(agent_id, label)
        if actor != "human" and block.read_only:
            raise EditError(rules.READ_ONLY_ERROR)
        alone = operation is not None and set(self.core.agents_of_block(block.id)) == {agent_id}
        self.core.detach(agent_id, block.id)
        try:
            if alone and operation is not None:
                block = self._commit(block, lambda current: current, operation=operation, actor=actor, record=True)
        except (StoreError, ConflictError) as exc:  # the block is deleted all the same: say so, not that it failed
            log.warning("block %r was deleted, but its reason could not be recorded in its history: %s", label, exc)
        self._emit(Change("blocks_changed", (agent_id,), block.label, block_id=block.id))
        return block

    # -- folders and files, as the tools ask for them (``memory.files``) -----------------

    def directories(self, agent_id: str, context_window: int | None = None) -> str:
        """The agent's ``<directories>`` section of core memory ("" with no folder attached); reads no table."""
        return render_agent_directories(self.core.get_agent(agent_id), context_window)

    def directory_texts(self, agent_id: str) -> tuple[str, str]:
        """``<directories>`` in full and as one short paragraph (for budgets it does not fit); ("", "") without folders."""
        agent = self.core.get_agent(agent_id)
        return render_agent_directories(agent), directories_summary(agent)

    def file_views(self, agent_id: str) -> list[tuple[str, int, bool]]:
        """(name, visible characters, open) of each file attached to the agent; reads no table. The characters are
        those ``<directories>`` shows the agent (its window cut to its per-file limit, ``truncate_visible``), not the
        view's stored cut (``file_windows.kept``, which may be longer)."""
        state = AgentFiles.seen(self.core.get_agent(agent_id))
        chars = state.limits[1]
        return [
            (v.name, len(truncate_visible(v.visible, chars)) if v.is_open and v.visible else 0, v.is_open)
            for v in state.files
        ]

    def file_text(self, agent_id: str, name: str) -> str:
        """The whole parsed text of an attached file, named as the agent names it ("<folder>/<file>")."""
        return self.files.attached_text(agent_id, name)

    def open_files(self, agent_id: str, requests: Sequence[OpenRequest], close_all_others: bool = False) -> str:
        """Letta's ``open_files``; each file opened counts as a use of it."""
        text = self.files.open_files(agent_id, requests, close_all_others)
        state = self.files.state(agent_id)
        opened = {state.named(r.file_name) for r in requests}
        self.uses.note("file", agent_id, [v.file_id for v in state.files if v.name in opened])
        return text

    def grep_files(
        self, agent_id: str, pattern: str, include: str | None, context_lines: int | None, offset: int | None
    ) -> str:
        """Letta's ``grep_files``; each file with a match counts as a use of it, once a call (as a search hit does)."""
        text, found = self.files.grep_files(agent_id, pattern, include, context_lines, offset)
        self.uses.note("file", agent_id, found)
        return text

    def semantic_search_files(self, agent_id: str, query: str, limit: int) -> str:
        """Letta's ``semantic_search_files``; each file it shows a chunk of counts as a use of it, once a call."""
        text, found = self.files.semantic_search_files(agent_id, query, limit)
        self.uses.note("file", agent_id, found)
        return text

    # -- recall and archival memory, as the tools ask for them -----------------------

    def core_memory(self, agent_id: str, *, line_numbers: bool = False) -> tuple[str, list[Block]]:
        """Core memory rendered as in Letta (with ``<memory_metadata>``) and the blocks it shows (read once: the text
        shows these very versions)."""
        blocks = self.blocks(agent_id)
        return self.render_core(agent_id, line_numbers=line_numbers, blocks=blocks), blocks

    def system_prompt(self, agent_id: str) -> str:
        """The agent's system prompt (or the default) followed by its rendered core memory."""
        agent = self.core.get_agent(agent_id)
        return (agent.system or self.default_system) + "\n\n" + self.render_core(agent_id)

    def conversation_log(self, agent_id: str, messages: Sequence[dict[str, Any]]) -> Written[list[Message]]:
        """Record conversation turns in recall memory (``Archive.log_messages``); refused, writing nothing, when one
        is empty (nothing to remember: it would only come back in unrelated searches) or holds a credential."""
        for n, m in enumerate(messages):
            if isinstance(m, dict) and isinstance(m.get("content"), str) and is_blank(m["content"]):
                raise ValidationError(
                    f"messages[{n}].content is empty: an empty turn holds nothing to remember, and nothing was "
                    "stored. Leave that turn out, or send its text."
                )
        for n, m in enumerate(messages):
            if isinstance(m, dict):
                self._refuse_in_fields(
                    *((f"messages[{n}].{k}", v) for k, v in m.items() if k in LOGGED_TEXT_FIELDS and isinstance(v, str))
                )
        # a project named by a local directory is its repository, as a hook's working directory is (named_project)
        messages = [
            {**m, "project": named_project(m["project"])}
            if isinstance(m, dict) and isinstance(m.get("project"), str)
            else m
            for m in messages
        ]
        return Written(self.archive.log_messages(agent_id, messages), self.archive.vectors.write_note())

    def conversation_search(
        self,
        agent_id: str,
        query: str,
        *,
        roles: Sequence[str] | None,
        limit: int,
        start_date: str | None,
        end_date: str | None,
        project: str | None = None,
    ) -> SearchResult:
        """Search recall memory (``Archive.conversation_search``); ``project``: only the turns captured in it (a
        directory of this machine names its repository, as a hook's working directory does: ``named_project``).
        Dates that name no zone are in the agent's time zone, and the hits' times are shown in it (``time_zone``)."""
        named = named_project(project)
        zone = self.time_zone(agent_id)
        result = self.archive.conversation_search(
            agent_id,
            query,
            roles=roles,
            limit=limit,
            start_date=start_date,
            end_date=end_date,
            projects=None if named is None else (named,),
            zone=zone,
        )
        self.uses.note("message", agent_id, [h.id for h in result.hits])  # each hit: one use (uses.py)
        return _in_zone(result, zone)

    def archival_insert(
        self, agent_id: str, content: str, tags: Sequence[str] | None, project: str | None = None
    ) -> Written[list[str]]:
        """Store a passage in archival memory, chunked (``Archive.insert``); the ids of its chunks. ``project``: the
        project it belongs to (None: shared by every project). Refused, writing nothing, when it holds a credential."""
        if isinstance(content, str):
            self.refuse_secrets(content, "content")
        self._refuse_in_fields(
            ("project", project), *((f"tags[{n}]", t) for n, t in enumerate(tags or ()) if isinstance(t, str))
        )
        return Written(
            self.archive.insert(agent_id, content, tags, project=named_project(project)),
            self.archive.vectors.write_note(),
        )

    def archival_search(
        self,
        agent_id: str,
        query: str,
        *,
        tags: Sequence[str] | None,
        tag_match_mode: str,
        top_k: int,
        start_datetime: str | None,
        end_datetime: str | None,
        project: str | None = None,
    ) -> SearchResult:
        """Search archival memory (``Archive.search``); ``project``: only the passages of that project. Bounds that
        name no zone are in the agent's time zone, and the hits' times are shown in it (``time_zone``)."""
        named = named_project(project)
        zone = self.time_zone(agent_id)
        result = self.archive.search(
            agent_id,
            query,
            tags=tags,
            tag_match_mode=tag_match_mode,
            top_k=top_k,
            start_datetime=start_datetime,
            end_datetime=end_datetime,
            projects=None if named is None else (named,),
            zone=zone,
        )
        self.uses.note("passage", agent_id, [h.id for h in result.hits])  # each hit: one use (uses.py)
        return _in_zone(result, zone)

    def time_zone(self, agent_id: str) -> ZoneInfo | None:
        """The agent's time zone (``TIMEZONE_KEY``); None: UTC."""
        return time_zone(self.core.get_agent(agent_id).metadata.get(TIMEZONE_KEY))

    def neighbourhood(self, agent_id: str, memory_id: str) -> Neighbourhood:
        """A memory and what it links to, one hop (``Archive.neighbourhood``), its times shown in the agent's time
        zone, as the search tools show them."""
        found = self.archive.neighbourhood(agent_id, memory_id)
        zone = self.time_zone(agent_id)
        if zone is None:
            return found
        return replace(
            found,
            center=_hit_in_zone(found.center, zone),
            links=[(link, _hit_in_zone(hit, zone)) for link, hit in found.links],
        )

    def link(self, agent_id: str, a: str, b: str, note: str = "") -> None:
        """Link two of the agent's memories (recall turns or archival passages) on purpose; each must be the agent's,
        and a note that is not short plain text (``links.check_note``) or holds a credential is refused, writing
        nothing."""
        check_note(note)
        self._both_mine(agent_id, a, b)
        self.refuse_secrets(note, "note")
        self.archive.links.add(agent_id, a, b, note)
        # Checked again after the write: a forget of either end that read the links before this one was written
        # removes its rows after the check above; one side or the other then removes the link (``ManualLinks``).
        for end in (a, b):
            try:
                self.archive.find_memory(agent_id, end, latest=True)
            except NotFoundError:
                self.archive.links.forget([end])  # this link (its note too), and any other of the memory gone
                raise

    def unlink(self, agent_id: str, a: str, b: str) -> bool:
        """Remove the link made on purpose between two of the agent's memories; False when there was none (a sitting
        link is derived from the rows and never removed)."""
        self._both_mine(agent_id, a, b)
        return self.archive.links.remove(a, b)

    def _both_mine(self, agent_id: str, a: str, b: str) -> None:
        """Both ends are the agent's turns or passages (``Archive.find_memory`` names the one that is not)."""
        for ref in (a, b):
            self.archive.find_memory(agent_id, ref)

    def archival_delete(self, agent_id: str, passage_id: str, *, guarded: bool = True) -> int:
        """Delete a passage, every chunk of it (``Archive.delete``), and its use record; how many rows went. A
        deletion asked for (``guarded``; not a sync's own replacing of what it stored) runs through
        ``deletion_guard`` when one is set."""

        def delete() -> int:
            removed = self.archive.delete(agent_id, passage_id)
            self.uses.forget((passage_id,), groups=(passage_id,))
            return removed

        guard = self.deletion_guard
        return guard(agent_id, passage_id, delete) if guarded and guard is not None else delete()

    def existing(self, kinds: Mapping[str, str], *, agent_id: str | None = None) -> set[str]:
        """Which of the memories ``kinds`` (id -> kind, ``core.uses.KINDS``) still exist: passages and messages in
        the archive (one read per kind; with ``agent_id``, that agent's only), blocks in the core state, files in the
        files table; another kind is kept."""
        by_kind: dict[str, list[str]] = {}
        for memory_id, kind in kinds.items():
            by_kind.setdefault(kind, []).append(memory_id)
        found = {i for kind, ids in by_kind.items() if kind not in USE_KINDS for i in ids}
        for kind, table in (("passage", "passages"), ("message", "messages")):
            if by_kind.get(kind):
                found |= self.archive.rows.existing(table, by_kind[kind], agent_id=agent_id)
        if by_kind.get("block"):
            found |= {b.id for b in self.core.get_blocks(by_kind["block"])}
        if by_kind.get("file"):
            files = {f.id for f in self.archive.files.listing()}
            found |= {i for i in by_kind["file"] if i in files}
        return found

    def archival_list(
        self, agent_id: str, *, offset: int, limit: int, tags: Sequence[str] | None
    ) -> tuple[list[Passage], int]:
        """One page of passages, oldest first, and how many there are (``Archive.list_passages``)."""
        return self.archive.list_passages(agent_id, offset=offset, limit=limit, tags=tags)

    # -- secrets: never stored (secrets.py) ----------------------------------------

    def scrub(self, text: str) -> str:
        """``text`` with each credential replaced by ``[redacted: KIND]`` (what enters memory on its own: hook turns,
        imports); unchanged when ``secret_scan`` is off."""
        return secrets.redact(text).text if self.secret_scan and text else text

    def scrub_json(self, payload: str) -> str:
        """``scrub`` of a JSON document stored as its text, such as a metadata value (``secrets.redact_json``
        ``as_text``: what the text holds as a whole too, so that storing it is not refused; text that is not JSON
        as text)."""
        return secrets.redact_json(payload, as_text=True) if self.secret_scan and payload else payload

    def credentials_in(self, text: str) -> str | None:
        """The credentials ``text`` holds, named by kind and place ("a GitHub token (line 2, characters 5-44)"), never
        the secrets themselves; None when it holds none or ``secret_scan`` is off."""
        if not self.secret_scan or not text:
            return None
        found = secrets.find(text)
        return secrets.describe(text, found) if found else None

    def refuse_secrets(self, text: str, where: str, *, before: str = "") -> None:
        """Raise ``SecretError`` (nothing written) when ``text`` holds a credential ``before`` did not hold."""
        if self.secret_scan:
            secrets.refuse(text, where, before=before)

    def refuse_in_document(self, text: str, where: str) -> None:
        """``refuse_secrets`` of a JSON document stored as its text, checked as a logged message's payload is
        (``secrets.redact_json``): a random-looking string of it (a tool call's id, a reasoning signature) is an id,
        not a credential; a credential inside a string, or told by its key, is refused, named by its path. Text that
        is not JSON is checked as text."""
        if not self.secret_scan:
            return
        found, in_text = secrets.find_in_json(text)
        if in_text:
            self.refuse_secrets(text, where)  # redacted as text: what find() finds in it
        if not found:
            return
        said = "; ".join(f"{kind} at {'.'.join(map(str, path)) or 'its top'}" for path, kind in found[:3])
        raise SecretError(
            f"Refused: {where} would store credentials ({said}). Nothing was written. Keep "
            "credentials out of memory: store a description or a reference instead, or remove the secret and send the "
            "rest again."
        )

    def _refuse_in_fields(self, *fields: tuple[str, str | None]) -> None:
        """``refuse_secrets`` over each named text (None: not given): labels, names, tags, projects, prompts and
        metadata are memory too, shown to models and listed by commands."""
        for where, text in fields:
            if text:
                self.refuse_secrets(text, where)

    def _without_secrets(self, block: Block, previous: Block | None, actor: str) -> Block:
        """The one check of every block value written (edits, reverts, updates, new and imported blocks): a new
        credential in its value or description is refused (``SecretError``), or redacted when the writer is an
        import or ``tiermem doctor``; one already in the previous version is left to ``doctor --secrets``."""
        if not self.secret_scan:
            return block
        before = previous or replace(block, value="", description="")
        if block.value == before.value and block.description == before.description:
            return block
        if actor in REDACTING_ACTORS:
            return replace(block, value=self.scrub(block.value), description=self.scrub(block.description))
        self.refuse_secrets(block.value, f"the value of block {block.label!r}", before=before.value)
        self.refuse_secrets(block.description, f"the description of block {block.label!r}", before=before.description)
        return block

    # -- internals ---------------------------------------------------------------

    def _insert_block(self, block_id: str, spec: BlockSpec, *, actor: str, operation: str = "create") -> None:
        self.core.insert_block(*self._new_block(block_id, spec, actor=actor, operation=operation))

    def _new_block(self, block_id: str, spec: BlockSpec, *, actor: str, operation: str) -> tuple[Block, BlockVersion]:
        """A new block of ``spec`` (version 1, its value checked for credentials) and its first history entry."""
        t = now()
        block = self._without_secrets(
            Block(
                id=block_id,
                label=spec.label,
                value=spec.value,
                limit=spec.limit,
                description=spec.description,
                read_only=spec.read_only,
                version=1,
                updated_at=t,
                metadata=dict(spec.metadata),
            ),
            None,
            actor,
        )
        return block, _version_of(block, operation, actor)

    def _lock(self, block_id: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(block_id, threading.Lock())

    def _commit(
        self, block: Block, change: Callable[[Block], Block], *, operation: str, actor: str, record: bool = False
    ) -> Block:
        """Apply ``change`` to ``block`` (just read) and compare-and-swap on its version; if another writer won,
        re-read and retry. Value, version and history entry are one commit. A change that changes nothing makes no
        version, unless ``record`` (a version that records ``operation`` alone)."""
        block_id = block.id
        with self._lock(block_id):
            current: Block | None = block
            for attempt in range(_MAX_ATTEMPTS):
                if current is None:
                    raise NotFoundError("The block was deleted while editing it; list blocks and try again.")
                updated = self._without_secrets(change(current), current, actor)
                if updated == current and not record:
                    return current  # nothing changed: no new version
                committed = replace(updated, version=current.version + 1, updated_at=now())
                agents = self.core.commit_edit(current, committed, _version_of(committed, operation, actor))
                if agents is not None:
                    c = committed
                    parent = (current.version, current.updated_at)
                    self._emit(Change("block_updated", agents, c.label, c.version, c.id, c.updated_at, parent))
                    return committed
                time.sleep(random.uniform(0, 0.004) * min(attempt + 1, 10))
                current = self.core.get_block(block_id)
        raise ConflictError(
            f"Block {block_id} is being edited by other writers and {_MAX_ATTEMPTS} attempts failed; nothing was written. Try again."
        )

    def _check_sizes(self, edit: rules.Edit) -> None:
        for name, value in edit.texts():  # named as the tool's arguments
            self._check_text(name, value)

    def _check_spec(self, spec: BlockSpec) -> BlockSpec:
        """A new block's label, texts and limit, checked before anything is written; the label normalised."""
        spec = _normalised(spec)
        self._refuse_in_fields(("the label", spec.label), *_metadata_fields(spec.metadata))
        self._check_text("value", spec.value)
        self._check_text("description", spec.description)
        rules.check_limit(spec.value, spec.limit)
        return spec

    def _check_text(self, name: str, value: str) -> None:
        check_text(value, name, self.max_content_chars)


def _at_version(block: Block, expected: int | None) -> Block:
    """``block``, if it is at version ``expected`` (any, when None); else ``ConflictError``: another writer was first."""
    if expected is not None and block.version != expected:
        raise ConflictError(
            f"Block {block.label!r} changed meanwhile (version {expected} -> {block.version}); nothing was written."
        )
    return block


def _gone(agent_id: str, *, write: bool) -> NotFoundError:
    """The refusal of a call for an agent that no longer exists (deleted while a server still holds its id): a
    ``write`` (a check before writing) wrote nothing; a look-up (a read's, or an edit's first step) neither read nor
    wrote anything. (A server names its agent: ``MemoryHandle.live_id``.)"""
    done = "so nothing was written" if write else "so nothing was read or written"
    return NotFoundError(
        f"No agent with id {agent_id!r}: it was deleted (or never existed), {done}. Make an agent of its name again "
        "(`tiermem agents create NAME`; a server serving that name then uses it), or restart the server."
    )


def _create_taken(label: str) -> LabelTakenError:
    return LabelTakenError(
        f"A block labelled {label!r} already exists; edit it with memory_replace or choose another label.",
        label=label,
        person=f"A block labelled {label!r} already exists; change its value with "
        f"`tiermem blocks set {label} VALUE` (or `tiermem blocks edit {label}`), or choose another label.",
    )


def rename_taken(label: str) -> LabelTakenError:
    return LabelTakenError(f"A block labelled {label!r} already exists; choose another label.", label=label)


def _renamed_meanwhile(read: Block, current: Block) -> ConflictError:
    """A rename of a block another writer renamed after this one read it: applying it would undo that rename."""
    return ConflictError(
        f"Block {read.label!r} was renamed to {current.label!r} by another writer meanwhile; nothing was written. "
        "Read the blocks again (core_memory_view) and rename it by the label it has now, if the rename is still "
        "wanted.",
        person=f"Block {read.label!r} was renamed to {current.label!r} by another writer meanwhile; nothing was "
        "written. `tiermem blocks list` shows the labels now; run the command again with the label it has now, if "
        "the rename is still wanted.",
    )


def _described_meanwhile(read: Block, current: Block) -> ConflictError:
    return ConflictError(
        f"The description of block {current.label!r} was changed by another writer meanwhile (to "
        f"{current.description[:80]!r}); nothing was written. Read the block again and set the description again "
        "if yours should replace that one.",
        person=f"The description of block {current.label!r} was changed by another writer meanwhile (to "
        f"{current.description[:80]!r}); nothing was written. `tiermem blocks show {current.label}` shows it; run "
        "the command again if yours should replace it.",
    )


def _replaced_meanwhile(read: Block, current: Block) -> ConflictError:
    """A whole-value edit (``memory_rethink``, a set, a revert) of a value another writer changed after this one read
    it: writing it would silently drop that change."""
    return ConflictError(
        f"Block {current.label!r} was changed by another writer while this edit was replacing its whole value "
        f"(version {read.version} -> {current.version}); nothing was written, so that change is kept. Read the block "
        "again (memory_open) and send the whole new value again, keeping that change if it should stay.",
        person=f"Block {current.label!r} was changed by another writer while this command was replacing its whole "
        f"value (version {read.version} -> {current.version}); nothing was written, so that change is kept. "
        f"`tiermem blocks show {current.label}` shows it now; run the command again if your value should replace it.",
    )


def _unseen_change(current: Block, seen: int) -> ConflictError:
    """A ``memory_rethink`` written from version ``seen`` of a block another writer (or another of the model's
    calls) changed since (or deleted and made again under its id): Letta's words for an edit not made, and what to
    do."""
    moved = f"version {seen} -> {current.version}" if seen != current.version else "deleted and made again"
    return ConflictError(
        f"No rewrite was performed: memory block with label `{current.label}` changed since you last viewed it "
        f"({moved}), and memory_rethink replaces the whole value, which would drop that "
        f"change. View the block again ({_viewers(current.label)}), then call memory_rethink with the whole new "
        "value, keeping that change if it should stay."
    )


def _unseen(block: Block) -> ConflictError:
    """A ``memory_rethink`` of a block this server has not shown the caller (not since it connected, nor on this
    server process: a replica behind a balancer knows only the views it served): what to do."""
    return ConflictError(
        f"No rewrite was performed: memory block with label `{block.label}` has not been shown to you whole by this "
        "server (a view served by another server process does not count), and memory_rethink replaces the whole "
        f"value, which would drop what it holds now. View the block first ({_viewers(block.label)}), then call "
        "memory_rethink with the whole new value, keeping what should stay."
    )


def _viewers(label: str) -> str:
    """The ways to view the block ``label`` whole, as a refused rethink names them."""
    return (
        f"with whichever you have: memory_open with label `{label}`, core_memory_view, the memory tool's view of "
        f"/memories/{label}, or the resource memory://blocks/{label}"
    )


def _metadata_fields(metadata: Mapping[str, str] | None) -> list[tuple[str, str | None]]:
    """An agent's or a block's metadata as named texts for ``Memory._refuse_in_fields``: each key and each value
    (named without echoing a key: a key may be the secret)."""
    return [
        (where, text)
        for k, v in (metadata or {}).items()
        for where, text in (("a metadata key", k), ("a metadata value", v if isinstance(v, str) else None))
    ]


def _with_pinned(metadata: dict[str, str], pinned: bool | None) -> dict[str, str]:
    if pinned is None:
        return metadata
    rest = {k: v for k, v in metadata.items() if k != rules.PINNED_KEY}
    return rest if pinned else {**rest, rules.PINNED_KEY: "false"}


def _normalised(spec: BlockSpec) -> BlockSpec:
    label = rules.validate_label(spec.label)
    return spec if label == spec.label else spec.model_copy(update={"label": label})


def request_key(agent_id: str, tool: str, key: str) -> str:
    if not isinstance(key, str) or not 1 <= len(key) <= 200 or any(ord(c) < 32 for c in key):
        raise ValidationError("idempotency_key must be 1-200 printable characters, e.g. a UUID.")
    return f"{agent_id}\x1f{tool}\x1f{key}"


def _version_of(block: Block, operation: str, actor: str) -> BlockVersion:
    return BlockVersion(
        block_id=block.id,
        version=block.version,
        label=block.label,
        value=block.value,
        limit=block.limit,
        description=block.description,
        read_only=block.read_only,
        operation=operation,
        actor=actor,
        created_at=block.updated_at,
    )


def _check_metadata(metadata: dict[str, str]) -> dict[str, str]:
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValidationError(f"Agent metadata must map text to text; {key!r} -> {value!r} is not.")
    return dict(metadata)


def check_agent_name(name: str) -> None:
    if not isinstance(name, str) or not (1 <= len(name) <= 64) or not all(c.isalnum() or c in "_-." for c in name):
        raise ValidationError(
            f"Invalid agent name {str(name)[:80]!r}: use 1-64 letters, digits, '_', '-' or '.' (for example 'work')."
        )


def _hit_in_zone(hit: Hit, zone: tzinfo) -> Hit:
    return replace(hit, created_at=hit.created_at.astimezone(zone))


def _in_zone(result: SearchResult, zone: tzinfo | None) -> SearchResult:
    """``result`` with its hits' times in ``zone`` (the same instants; what a tool shows), as it is without one."""
    if zone is None:
        return result
    return replace(result, hits=[replace(h, created_at=h.created_at.astimezone(zone)) for h in result.hits])
