"""Two-way sync between a MemFS directory and one agent's blocks (``tiermem sync DIR``).

A sync record keeps, per label, the file's sha256 and the block's id and version at the last sync
(in a git repository inside its git directory, ``.git/tiermem-sync.json``; elsewhere
``DIR/.tiermem-sync.json``). A sync compares both sides with it:

- only the file changed: the file becomes a new block version (actor "human"; in git, the operation
  names the commit and its author);
- only the block changed (an edit made through a host): the file is rewritten;
- a new file creates a block, a new block writes a file; a file deleted since the last sync detaches
  its block (history kept), a block detached since removes its file; a file renamed (same text at a
  new path) renames its block;
- both changed (and differ): a conflict. Nothing is overwritten: the file and the block stay as they
  are and the conflict is reported until ``--prefer file`` or ``--prefer store`` settles it.

Files tiermem cannot take are reported and skipped; their blocks are left alone (``--prefer store`` does not write over
them either: what they hold would be lost; it says so). Default blocks
nobody edited are not written into the directory, and an agent the sync creates gets no default
blocks. In a git repository, the files the sync wrote or removed, and only those, are committed
(through the repository's hooks) with a message that says what changed and who changed it. A
commit a hook rejects (or that Letta Code's hook would reject: tiermem checks first) leaves nothing
staged, puts those files back as they were and reports which file and why; the block waits until it
changes again.

Why this module is long: ``_Sync`` is one three-way comparison (file, block, sync record) with its cases (edits,
creations, deletions, renames, conflicts) and its git commit, which share the state of one run.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..base.errors import ConflictError, TiermemError, ValidationError
from ..base.files import LinkedFileError, locked, read_text_nofollow, write_text_atomically
from ..domain import memfs_format as fmt
from .memfs import (
    FRONT_KEY,
    LINK_WHY,
    FileBlock,
    FileStyle,
    apply_file,
    block_files,
    hidden_lines,
    link_lines,
    linked,
    make_root,
    parse_file,
    path_of,
    pinned_path,
    read_pinned,
    read_tree,
    render_file,
    same,
    same_front,
    tree_of,
    write_file,
    write_pinned,
)
from .memfs_git import HookRejected, Repo

if TYPE_CHECKING:
    from ..base.records import Agent, Block
    from ..domain.memory import Memory

STATE = ".tiermem-sync.json"
Prefer = Literal["file", "store"]
Record = dict[str, Any]


@dataclass
class SyncReport:
    to_store: list[str] = field(default_factory=list)
    to_files: list[str] = field(default_factory=list)
    detached: list[str] = field(default_factory=list)
    files_removed: list[str] = field(default_factory=list)
    renamed: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    rejected: list[str] = field(
        default_factory=list
    )  # refused this time (by the hook, or tiermem's check of its rules)
    waiting: list[str] = field(default_factory=list)  # refused earlier, not retried until the block changes again
    notes: list[str] = field(default_factory=list)
    commit: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            k: getattr(self, k)
            for k in (
                "to_store",
                "to_files",
                "detached",
                "files_removed",
                "renamed",
                "conflicts",
                "skipped",
                "rejected",
                "waiting",
                "notes",
                "commit",
            )
        }


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def state_path(root: Path, repo: Repo | None) -> Path:
    return repo.state_file() if repo is not None else root / STATE


def read_state(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValidationError(
            f"{path} is unreadable ({exc}); delete it to start over (the next sync then treats "
            "files and blocks that differ as conflicts)."
        ) from exc
    if not isinstance(data, dict) or not isinstance(data.get("blocks"), dict):
        raise ValidationError(f"{path} is not a tiermem sync record; delete it to start over.")
    return data


def recorded_agent(root: Path) -> str | None:
    """The tiermem agent a directory was last synced with, if any."""
    repo = Repo.find(root) if root.is_dir() else None
    for path in dict.fromkeys((state_path(root, repo), root / STATE)):
        data = read_state(path)
        if data is not None and isinstance(data.get("agent"), str):
            return str(data["agent"])
    return None


def _write_state(path: Path, data: dict[str, Any]) -> None:
    write_text_atomically(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def sync_memfs(
    memory: Memory, agent_name: str, root: Path, *, prefer: Prefer | None = None, repo: Repo | None = None
) -> dict[str, Any]:
    """Bring ``root`` and the agent's blocks up to date with each other; see the module docstring."""
    if prefer not in (None, "file", "store"):
        raise ValidationError(f"prefer must be 'file' or 'store', got {prefer!r}.")
    make_root(root)
    repo = repo if repo is not None else Repo.find(root)
    path = state_path(root, repo)
    with locked(path.with_name(path.name + ".lock")):  # one sync of a directory at a time, across processes
        return _Sync(memory, agent_name, root, repo, path, prefer).run()


class _Sync:
    """One sync pass (under the directory's lock)."""

    def __init__(
        self, memory: Memory, agent_name: str, root: Path, repo: Repo | None, path: Path, prefer: Prefer | None
    ) -> None:
        self.memory, self.root, self.repo, self.path, self.prefer = memory, root, repo, path, prefer
        self.agent_name = agent_name
        self.report = SyncReport()
        self.writes: dict[str, tuple[str, str | None]] = {}  # rel -> (new text, text before; None: no file)
        self.removals: dict[str, str] = {}  # rel -> text before
        self.after_write: dict[str, tuple[str, Record]] = {}  # rel -> (label, record to keep once committed)
        self.extra_commit: list[str] = []  # more paths for the commit (an old record inside the repository)

    def run(self) -> dict[str, Any]:
        state = self._load_state()
        agent = self._agent(state)
        seen: dict[str, Record] = dict(state.get("blocks", {})) if state else {}
        links: list[str] = []
        hidden: list[str] = []
        files = block_files(self.root, links, hidden)
        agent_repo = bool(self.repo and self.repo.agent_repo)
        pinned = pinned_path(self.root, self.repo)
        self.tree = tree_of(
            set(files),
            policy=self.repo.policy if self.repo else None,
            agent_repo=agent_repo,
            overrides=None if agent_repo else read_pinned(pinned),
        )
        parsed, skipped = read_tree(self.root, self.tree, self.memory)
        self.report.skipped = [*link_lines(links), *hidden_lines(hidden), *skipped]
        unreadable = {rel[: -len(fmt.SUFFIX)] for rel in files} - set(parsed)
        blocks = {b.label: b for b in self.memory.blocks(agent.id)}
        # a file (or its folder) that is a symbolic link: never read, written or removed, its block left alone
        unreadable |= {x for x in {*blocks, *seen} if linked(self.root, path_of(x)) is not None}
        defaults = {s.label: s.value for s in self.memory.default_blocks}
        for label, b in list(
            blocks.items()
        ):  # a default block nobody edited: not memory worth a file (a file of that name replaces it)
            if label in defaults and b.version == 1 and b.value == defaults[label] and label not in seen:
                del blocks[label]
        self.agent = agent
        self.since = {x: int(r.get("version") or 0) for x, r in seen.items()}
        self.seen_ids = {x: r.get("block_id") for x, r in seen.items()}
        new_state: dict[str, Record] = {}
        handled = self._renames(parsed, blocks, seen, new_state)
        for label in sorted(set(parsed) | set(blocks) | set(seen)):
            if label in handled:
                continue
            if label in unreadable:  # a file tiermem cannot read now: leave both sides alone
                if label in seen:
                    new_state[label] = seen[label]
                self._held_back(blocks.get(label), seen.get(label))
                continue
            entry = self._one(label, parsed.get(label), blocks.get(label), seen.get(label))
            if entry is not None:
                new_state[label] = entry
        # the blocks pinned otherwise than the layout says: kept beside the files, never in them (none in an agent's
        # repository, where the layout alone decides)
        overrides = self.tree.overrides_for([b for b in self.memory.blocks(agent.id) if b.label in new_state])
        self.tree = replace(self.tree, overrides=frozenset(overrides.items()))  # the files written read so
        self._write_files(new_state)
        if not agent_repo:
            write_pinned(pinned, overrides)
        data = {"agent": agent.name, "agent_id": agent.id, "layout": self.tree.layout, "blocks": new_state}
        _write_state(self.path, data)
        return {
            "format": "memfs",
            "agent": agent.name,
            "directory": str(self.root),
            "layout": self.tree.layout,
            **self.report.as_dict(),
        }

    # -- the record and the agent ------------------------------------------------------

    def _load_state(self) -> dict[str, Any] | None:
        state = read_state(self.path)
        legacy = self.root / STATE
        if self.repo is not None and legacy.exists():  # an older tiermem kept its record in the directory
            if state is None:
                state = read_state(legacy)
                if state is not None:
                    _write_state(self.path, state)
            if self.repo.head_text(STATE) is not None:
                self.extra_commit.append(STATE)
                self.report.notes.append(f"{STATE} (tiermem's record) moved out of the repository into {self.path}")
            legacy.unlink()
        return state

    def _agent(self, state: dict[str, Any] | None) -> Agent:
        found = self.memory.core.find_agent(self.agent_name)
        if state is not None and state.get("agent_id") not in (None, found.id if found else None):
            old, old_id = state.get("agent"), state.get("agent_id")
            holder = self.memory.core.find_agent(old) if isinstance(old, str) else None
            reset = (
                f"to sync it with {self.agent_name!r} instead, delete {self.path} (tiermem's sync record; the next "
                "sync then reads every file and block afresh, reporting those that differ as conflicts)"
            )
            if holder is None or holder.id != old_id:
                raise ValidationError(
                    f"{self.root} was synced with agent {old!r} (id {old_id}), which is not in this store (deleted, "
                    "or in another data directory); "
                    f"{reset}. Nothing was changed."
                )
            raise ValidationError(
                f"{self.root} is synced with another agent ({old!r}); sync it with that agent, use another "
                f"directory, or {reset}. Nothing was changed."
            )
        if found is not None:
            return found
        self.report.notes.append(f"created agent {self.agent_name!r} (no default blocks: its memory is this directory)")
        return self.memory.ensure_agent(self.agent_name, blocks=())

    # -- one label ---------------------------------------------------------------------

    def _held_back(self, block: Block | None, seen: Record | None) -> None:
        """Report a block edited in tiermem whose file is skipped: its edit is not written until the file reads. With
        ``--prefer store``, any block whose file is skipped: that preference never overwrites a file it cannot read."""
        if block is None:
            return
        if self.prefer == "store" and linked(self.root, path_of(block.label)) is None:
            self.report.skipped.append(
                f"{path_of(block.label)}: --prefer store did not overwrite this file: tiermem cannot read it, and "
                f"what it holds would be lost. Fix the file and sync again, or delete it and run `tiermem sync "
                f"--prefer store` again to have the block (version {block.version}) written in its place"
            )
            return
        if seen is not None and [seen.get("block_id"), seen.get("version")] == _block_state(block):
            return
        self.report.skipped.append(
            f"{path_of(block.label)}: the block was edited in tiermem (version {block.version}) but its file is "
            "skipped, so the edit is not written; fix the file and sync again (a conflict, when both changed, is "
            "settled with --prefer file or --prefer store)"
        )

    def _one(
        self, label: str, file: tuple[FileBlock, str] | None, block: Block | None, seen: Record | None
    ) -> Record | None:
        sha = _sha(file[1]) if file is not None else None
        record, seen = seen, (seen if seen is not None and "sha" in seen else None)  # seen: the last state that landed
        file_changed = file is not None and (seen is None or sha != seen.get("sha"))
        block_changed = block is not None and (
            seen is None or block.version != seen.get("version") or block.id != seen.get("block_id")
        )
        file_as_left = file is None if seen is None else not file_changed  # as it was when a write was refused
        if record is not None and "rejected" in record and file_as_left:
            if record["rejected"].get("state") == _block_state(block):
                self.report.waiting.append(_line(path_of(label), record["rejected"].get("why", "")))
                return record
        if file is not None and block is not None:
            if not file_changed and not block_changed:
                return seen
            if file_changed and block_changed and not same(file[0], block):
                if self.prefer == "file":
                    return self._to_store(file)
                if self.prefer == "store":
                    return self._to_file(block, seen)
                self.report.conflicts.append(f"{label}: the file and the block both changed since the last sync")
                return seen
            if file_changed:
                return self._to_store(file, block, seen)
            return self._to_file(block, seen)
        if file is not None:  # no block
            if seen is None or self.prefer == "file":
                return self._to_store(file)
            if not file_changed or self.prefer == "store":
                self._remove_file(label, seen)
                return seen
            self.report.conflicts.append(f"{label}: the block was removed but the file was edited since the last sync")
            return seen
        if block is not None:  # no file
            if seen is None or self.prefer == "store":
                return self._to_file(block, seen)
            if not block_changed or self.prefer == "file":
                self.memory.delete_block(self.agent.id, label, actor="human")
                self.report.detached.append(label)
                return None
            self.report.conflicts.append(f"{label}: the file was deleted but the block was edited since the last sync")
            return seen
        return None  # gone on both sides

    def _to_store(self, file: tuple[FileBlock, str], block: Block | None = None, seen: Record | None = None) -> Record:
        """The file into its block; with ``block`` (as this pass read it), only while the block is still at that
        version: an edit made since is a conflict, never overwritten."""
        plan, text = file
        try:
            apply_file(
                self.memory,
                self.agent.id,
                plan,
                self.tree,
                actor="human",
                operation=self._file_operation(plan.path),
                notes=self.report.notes,
                expected_version=block.version if block is not None else None,
            )
        except ConflictError:
            self.report.conflicts.append(f"{plan.label}: the block was edited while the file's change was synced")
            return seen if seen is not None else {}
        self.report.to_store.append(plan.label)
        now = self.memory.block(self.agent.id, plan.label)
        return {"sha": _sha(text), "block_id": now.id, "version": now.version}

    def _file_operation(self, rel: str) -> str:
        """The history entry of a file's change: the commit that made it and its author, when committed."""
        last = self.repo.last_commit(rel) if self.repo is not None else None
        return f"memfs: {last[0]} (commit by {last[1]})" if last else f"memfs: {rel} edited"

    def _to_file(self, block: Block, seen: Record | None) -> Record:
        rel = path_of(block.label)
        try:
            before = _read_or_none(self.root, rel)
        except ValidationError:  # a link put in the file's place since the pass looked: left alone, as links are
            self.report.skipped.extend(link_lines([rel]))
            return seen if seen is not None else {}
        try:  # written in the line ending and BOM of the file it replaces
            style = FileStyle.of(before) if before is not None else None
            text = render_file(block, rel, self.tree, style, new=before is None)
        except ValidationError as exc:  # a text its file cannot hold: left unwritten until the block changes
            self.report.rejected.append(_line(rel, str(exc)))
            return {**(seen or {}), "rejected": {"state": _block_state(block), "why": str(exc)}}
        record = {"sha": _sha(text), "block_id": block.id, "version": block.version}
        if before == text:
            return record
        self.writes[rel] = (text, before)
        self.after_write[rel] = (block.label, record)
        self.report.to_files.append(block.label)
        if before is None and not fmt.projected(rel, self.tree.paths | {rel}, self.tree.layout):
            folder = rel.rsplit("/", 1)[0]
            self.report.notes.append(
                f"{rel} is outside Letta Code's memory (layout v2) until {folder}/MEMORY.md indexes its folder"
            )
        return {**(seen or {}), "pending": True}

    def _remove_file(self, label: str, seen: Record) -> None:
        rel = path_of(label)
        try:
            before = _read_or_none(self.root, rel)
        except ValidationError:  # a link put in the file's place since the pass looked: never removed, as links are
            self.report.skipped.extend(link_lines([rel]))
            return
        if before is not None:
            self.removals[rel] = before
        self.report.files_removed.append(label)

    def _renames(
        self,
        parsed: dict[str, tuple[FileBlock, str]],
        blocks: dict[str, Block],
        seen: dict[str, Record],
        new_state: dict[str, Record],
    ) -> set[str]:
        """A file moved (the same text at a new path, the old path gone, its block unchanged) renames its block;
        the labels handled."""
        gone = {
            seen[x].get("sha"): x
            for x in seen
            if x not in parsed
            and x in blocks
            and blocks[x].version == seen[x].get("version")
            and blocks[x].id == seen[x].get("block_id")
        }
        handled: set[str] = set()
        for label, (plan, text) in sorted(parsed.items()):
            old = gone.pop(_sha(text), None)
            if old is None or label in blocks or label in seen:
                continue
            self.memory.update_block(
                self.agent.id, old, new_label=label, actor="human", operation=f"memfs: renamed from {path_of(old)}"
            )
            apply_file(
                self.memory, self.agent.id, plan, self.tree, actor="human", operation=self._file_operation(plan.path)
            )
            now = self.memory.block(self.agent.id, label)
            new_state[label] = {"sha": _sha(text), "block_id": now.id, "version": now.version}
            handled |= {old, label}
            self.report.renamed.append(f"{old} -> {label}")
        return handled

    # -- the file side -----------------------------------------------------------------

    def _write_files(self, new_state: dict[str, Record]) -> None:
        """Check, commit and write what this pass changed on the file side; record what landed.

        In git, the commit comes first (from a private index: nothing in the work tree is touched until it has
        landed), then the files are written; what a hook rejects is never written at all.
        """
        for rel, why in self._precheck().items():
            self._reject(rel, why, new_state)
        written: list[bool] = []

        def write() -> None:
            for rel, (text, _) in self.writes.items():
                write_file(self.root, rel, text)
            for rel in self.removals:
                (self.root / rel).unlink(missing_ok=True)
            written.append(True)

        in_step: set[str] = set()
        if self.repo is not None and (self.writes or self.removals or self.extra_commit):
            in_step = self._commit(new_state, write)
        if not written:
            write()
        if self.repo is not None:
            self.repo.settle([r for r in [*self.writes, *self.removals, *self.extra_commit] if r not in in_step])
        for rel, (label, record) in self.after_write.items():
            if rel in self.writes:
                new_state[label] = self._settle(label, rel, record)
        for rel in self.removals:
            new_state.pop(rel[: -len(fmt.SUFFIX)], None)

    def _precheck(self) -> dict[str, str]:
        """Files Letta Code's hook would refuse (tiermem's own copy of its rules), left unwritten."""
        if self.repo is None or not self.tree.agent_repo:
            return {}
        paths = set(self.tree.paths) | set(self.writes)
        checked = [rel for rel in self.writes if fmt.hook_checked(rel, paths, self.tree.layout)]
        head = self.repo.head_texts(checked)
        refused: dict[str, str] = {}
        for rel in checked:
            problems = fmt.hook_problems(rel, self.writes[rel][0], head[rel], self.tree.layout)
            if problems:  # each names the file, as the hook says it; the report names it once
                refused[rel] = "; ".join(p.removeprefix(f"{rel}: ") for p in problems)
        return refused

    def _commit(self, new_state: dict[str, Record], write: Callable[[], None]) -> set[str]:
        """Commit the files whose text differs from HEAD's (``write`` writes the files, when the commit lands); a file
        a hook rejects is left out (and the rest committed again without it, once). The files whose place in the
        repository's index the commit brought in step."""
        assert self.repo is not None
        for attempt in range(2):
            head = self.repo.head_texts([*self.writes, *self.removals])  # one git process, however many files
            changes: dict[str, str | None] = {rel: text for rel, (text, _) in self.writes.items() if head[rel] != text}
            changes |= {rel: None for rel in self.removals if head[rel] is not None}
            changes |= {rel: None for rel in self.extra_commit}
            if not changes:
                return set()
            try:
                self.report.commit, indexed = self.repo.commit(changes, self._message(changes, head), write)
                return set(changes) if indexed else set()
            except HookRejected as exc:
                ours = [p for p in changes if p != STATE]
                named = [p for p in exc.problems if p in ours]
                blame = named if named and attempt == 0 and len(named) < len(ours) else ours
                for rel in blame:
                    self._reject(rel, "; ".join(exc.problems.get(rel, [])) or str(exc), new_state)
                if not self.writes and not self.removals:
                    self.extra_commit = []
                    return set()
        return set()

    def _reject(self, rel: str, why: str, new_state: dict[str, Record]) -> None:
        label = rel[: -len(fmt.SUFFIX)]
        self.writes.pop(rel, None)
        self.removals.pop(rel, None)
        self.after_write.pop(rel, None)
        for bucket in (self.report.to_files, self.report.files_removed):
            if label in bucket:
                bucket.remove(label)
        block = self._current(label)
        old = {k: v for k, v in new_state.get(label, {}).items() if k != "pending"}
        new_state[label] = {**old, "rejected": {"state": _block_state(block), "why": why}}
        self.report.rejected.append(_line(rel, why))

    def _settle(self, label: str, rel: str, record: Record) -> Record:
        """After a file was written: bring the block in line with what the file says (a description Letta Code
        needs, the layout's pinned rule), so both sides agree; the record of the final version."""
        text = self.writes[rel][0]
        try:
            plan = parse_file(rel, text, self.tree)
        except ValidationError:
            return record
        block = self._current(label)
        if block is None or block.id != record["block_id"] or block.version != record["version"]:
            # edited (or removed) since the file was rendered: the store is newer, the next pass writes the file again
            return record
        if not same(plan, block) or not same_front(block.metadata.get(FRONT_KEY), plan.front):
            try:  # only onto the version the file was rendered from (compare-and-set): never put older text back
                apply_file(
                    self.memory,
                    self.agent.id,
                    plan,
                    self.tree,
                    actor="human",
                    operation=f"memfs: written as {rel}",
                    expected_version=block.version,
                )
            except ConflictError:
                return record
            block = self.memory.block(self.agent.id, label)
        return {"sha": _sha(text), "block_id": block.id, "version": block.version}

    def _current(self, label: str) -> Block | None:
        try:
            return self.memory.block(self.agent.id, label)
        except TiermemError:
            return None

    def _message(self, changes: dict[str, str | None], head: dict[str, str | None]) -> str:
        """The commit message: what changed and who changed it; its subject the Letta-style reason when every file
        it changes was changed by edits that gave that one reason (one ``memory`` or ``memory_apply_patch`` call)."""
        lines: list[str] = []
        reasons: list[str] = []
        unexplained = 0  # changed files with no reason
        paths = list(changes)
        written_ids = {
            self.after_write[rel][1].get("block_id"): rel
            for rel, text in changes.items()
            if text is not None and rel in self.after_write
        }
        moved = {  # a block renamed in tiermem: its old file (removed) -> its new file (written)
            rel: written_ids[self.seen_ids.get(rel[: -len(fmt.SUFFIX)])]
            for rel, text in changes.items()
            if text is None and self.seen_ids.get(rel[: -len(fmt.SUFFIX)]) in written_ids
        }
        moved_from = {new: old for old, new in moved.items()}
        for rel, text in changes.items():
            if rel == STATE:
                lines.append(f"delete {STATE}: tiermem's sync record now lives in the git directory")
                unexplained += 1
                continue
            label = rel[: -len(fmt.SUFFIX)]
            if text is None:
                lines.append(
                    f"delete {rel}: " + (f"renamed to {moved[rel]}" if rel in moved else "block detached in tiermem")
                )
                if rel not in moved:  # a block deleted with a reason recorded it as its last version
                    said = self._deletion_reasons(label)
                    reasons += said
                    unexplained += not said
                continue
            verb = "create" if head.get(rel) is None else "update"
            record = self.after_write.get(rel, (label, {}))[1]
            old = moved_from.get(rel)  # a renamed block's versions since the last sync were recorded under its old name
            since = self.since.get(old[: -len(fmt.SUFFIX)] if old else label, 0)
            versions = [v for v in self.memory.history(self.agent.id, label, 20) if v.version > since]
            done = ", ".join(f"{v.operation} by {v.actor}" for v in reversed(versions)) or "edited"
            lines.append(f"{verb} {rel}: {done} (version {record.get('version', '?')})")
            said = [r for r in (fmt.reason_of(v.operation) for v in reversed(versions)) if r]
            reasons += said
            unexplained += not said
        if len(set(reasons)) == 1 and not unexplained:  # one reason for all of it (a rename moves one file: two paths)
            subject = reasons[0]
        elif len(paths) == 1:
            subject = f"tiermem: {lines[0].split(':', 1)[0]}"
        else:
            more = ", ..." if len(paths) > 4 else ""
            subject = f"tiermem: {len(paths)} memory files ({', '.join(paths[:4])}{more})"
        return "\n".join([subject, "", *lines, "", f"Synced by tiermem from its agent {self.agent.name!r}."])

    def _deletion_reasons(self, label: str) -> list[str]:
        """The reasons of the versions of the block whose file ``label`` was (no longer this agent's) since the last
        sync: a deletion made with a reason records it as the block's last version (``Memory.delete_block``)."""
        block_id = self.seen_ids.get(label)
        if not isinstance(block_id, str):
            return []
        since = self.since.get(label, 0)
        versions = [v for v in self.memory.core.history(block_id, 20) if v.version > since]
        return [r for r in (fmt.reason_of(v.operation) for v in reversed(versions)) if r]


def _line(rel: str, why: str) -> str:
    """A report line for a file: ``rel: why``, the file named once (a reason that starts with it stays as it is)."""
    return why if why.startswith((f"{rel}: ", f"{rel} ")) else f"{rel}: {why}"


def needs_attention(report: dict[str, Any]) -> bool:
    """Whether a sync left something a person must settle: a conflict, a file refused (``rejected``, ``waiting``) or
    skipped (a file tiermem cannot take, a block edit that waits for it). Symbolic links, which are never
    followed, are listed but do not count: they stay as they are by design."""
    skipped = [line for line in report["skipped"] if LINK_WHY not in line]
    return bool(report["conflicts"] or report["rejected"] or report["waiting"] or skipped)


def _block_state(block: Block | None) -> list[Any] | None:
    return None if block is None else [block.id, block.version]


def _read_or_none(root: Path, rel: str) -> str | None:
    """The text of the file ``root/rel`` as it is (line endings kept), None when there is none or it is no UTF-8 text;
    ``ValidationError`` for a symbolic link on its way or at its end: never read (it can point anywhere, such as
    ~/.ssh/id_rsa), as ``read_tree`` never reads one. A link is found before a sync acts on a label; this is for one
    put in place since."""
    if linked(root, rel) is not None:
        raise ValidationError(f"{rel}: {LINK_WHY}.")
    try:
        return read_text_nofollow(root / rel, newline="")
    except LinkedFileError:
        raise ValidationError(f"{rel}: {LINK_WHY}.") from None
    except (OSError, UnicodeDecodeError):
        return None


# ---------------------------------------------------------------------------
# Watching
# ---------------------------------------------------------------------------


def signature(memory: Memory, agent_name: str, root: Path) -> tuple[Any, ...]:
    """Cheap to take: what a sync would look at (the files' sizes and times, the blocks' versions)."""
    files: list[tuple[str, int, int, int]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            if name.endswith(fmt.SUFFIX) and not name.startswith("."):
                try:
                    st = os.stat(os.path.join(dirpath, name))
                except OSError:
                    continue
                files.append((os.path.join(dirpath, name), st.st_mtime_ns, st.st_size, st.st_ino))
    agent = memory.core.find_agent(agent_name)
    blocks = [] if agent is None else [(b.id, b.label, b.version) for b in memory.blocks(agent.id)]
    return tuple(sorted(files)), tuple(blocks)


def watch_memfs(
    memory: Memory,
    agent_name: str,
    root: Path,
    *,
    interval: float,
    prefer: Prefer | None = None,
    on_report: Callable[[dict[str, Any]], None],
    keep_going: Callable[[], bool] = lambda: True,
    on_error: Callable[[TiermemError], None] | None = None,
    wait: Callable[[float], object] = time.sleep,
) -> None:
    """Sync whenever either side changed, checking every ``interval`` seconds while ``keep_going()``; ``wait``
    sleeps between checks (a stop event's ``wait`` ends the sleep when the watch is stopped). ``keep_going()`` is
    asked after each sleep, so a watch stopped during one (or during a round) ends without another round.

    Each sync's report goes to ``on_report``; an error goes to ``on_error`` (when given; else it is raised)
    and the watch goes on. A round is skipped while another git command holds the repository's index.
    """
    if not interval > 0:
        raise ValidationError(f"--watch takes a number of seconds greater than 0, got {interval!r}.")
    make_root(root)
    repo = Repo.find(root)
    last: tuple[Any, ...] | None = None
    while True:
        now = signature(memory, agent_name, root)
        if now != last and not (repo is not None and repo.busy()):
            # taken before the pass: a change made while it runs is seen next round (a pass's own writes cost one
            # more pass that finds nothing to do)
            last = now
            try:
                on_report(sync_memfs(memory, agent_name, root, prefer=prefer, repo=repo))
            except TiermemError as exc:
                if on_error is None:
                    raise
                on_error(exc)
        wait(interval)
        if not keep_going():
            return
