"""Two-way sync between a MemFS directory and one agent's blocks (``tiermem sync DIR``).

``DIR/.tiermem-sync.json`` records, per label, the file's sha256 and the block's id and version
at the last sync. A sync compares both sides with that record:

- only the file changed: the file becomes a new block version (actor "human");
- only the block changed (an edit made through a host): the file is rewritten;
- a new file creates a block, a new block writes a file; a file deleted since the last sync
  detaches its block (history kept), a block detached since removes its file;
- both changed (and differ): a conflict. Nothing is overwritten: the file and the block stay as
  they are and the conflict is reported until ``--prefer file`` or ``--prefer store`` settles it.

Every file is parsed before anything is written. If DIR is a git repository, a sync that
changed any file is committed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..errors import ValidationError
from .memfs import (
    FileBlock,
    apply_file,
    block_files,
    parse_file,
    path_of,
    read_file,
    render_file,
    write_file,
)

if TYPE_CHECKING:
    from ..memory import Memory
    from ..records import Block

STATE = ".tiermem-sync.json"
Prefer = Literal["file", "store"]


@dataclass
class SyncReport:
    to_store: list[str] = field(default_factory=list)
    to_files: list[str] = field(default_factory=list)
    detached: list[str] = field(default_factory=list)
    files_removed: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    commit: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"to_store": self.to_store, "to_files": self.to_files, "detached": self.detached,
                "files_removed": self.files_removed, "conflicts": self.conflicts, "commit": self.commit}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _load_state(root: Path, agent_id: str) -> dict[str, dict[str, Any]]:
    path = root / STATE
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValidationError(f"{path} is unreadable ({exc}); delete it to start over (the next sync then treats "
                              "files and blocks that differ as conflicts).") from exc
    if not isinstance(data, dict) or not isinstance(data.get("blocks"), dict):
        raise ValidationError(f"{path} is not a tiermem sync record; delete it to start over.")
    if data.get("agent_id") not in (None, agent_id):
        raise ValidationError(f"{root} is synced with another agent ({data.get('agent')!r}); sync it with that agent "
                              "or use another directory.")
    blocks: dict[str, dict[str, Any]] = data["blocks"]
    return blocks


def sync_memfs(memory: Memory, agent_name: str, root: Path, *, prefer: Prefer | None = None) -> dict[str, Any]:
    """Bring ``root`` and the agent's blocks up to date with each other; see the module docstring."""
    if prefer not in (None, "file", "store"):
        raise ValidationError(f"prefer must be 'file' or 'store', got {prefer!r}.")
    if root.exists() and not root.is_dir():
        raise ValidationError(f"{root} is a file; give the MemFS directory to sync.")
    agent = memory.ensure_agent(agent_name)
    root.mkdir(parents=True, exist_ok=True)
    state = _load_state(root, agent.id)
    texts = {rel: read_file(root, rel) for rel in block_files(root)}
    parsed: dict[str, tuple[FileBlock, str]] = {}
    for rel, text in texts.items():  # every file is checked before anything is written
        plan = parse_file(rel, text)
        if plan.spec.label in parsed:
            raise ValidationError(f"{rel} and {parsed[plan.spec.label][0].path} name the same block; remove one.")
        parsed[plan.spec.label] = (plan, _sha(text))
    blocks = {b.label: b for b in memory.blocks(agent.id)}
    report = SyncReport()
    new_state: dict[str, dict[str, Any]] = {}
    for label in sorted(set(parsed) | set(blocks) | set(state)):
        entry = _sync_one(memory, agent.id, root, label, parsed.get(label), blocks.get(label), state.get(label),
                          prefer, report)
        if entry is not None:
            new_state[label] = entry
    (root / STATE).write_text(json.dumps({"agent": agent.name, "agent_id": agent.id, "blocks": new_state},
                                         indent=1, sort_keys=True) + "\n", encoding="utf-8")
    report.commit = _git_commit(root, report)
    return {"format": "memfs", "agent": agent.name, "directory": str(root), **report.as_dict()}


def watch_memfs(
    memory: Memory, agent_name: str, root: Path, *, interval: float, prefer: Prefer | None = None,
    on_report: Callable[[dict[str, Any]], None], keep_going: Callable[[], bool] = lambda: True,
) -> None:
    """Sync every ``interval`` seconds while ``keep_going()``; each sync's report goes to ``on_report``."""
    if not interval > 0:
        raise ValidationError(f"--watch takes a number of seconds greater than 0, got {interval!r}.")
    while True:
        on_report(sync_memfs(memory, agent_name, root, prefer=prefer))
        if not keep_going():
            return
        time.sleep(interval)


def _sync_one(
    memory: Memory, agent_id: str, root: Path, label: str, file: tuple[FileBlock, str] | None, block: Block | None,
    seen: dict[str, Any] | None, prefer: Prefer | None, report: SyncReport,
) -> dict[str, Any] | None:
    """Sync one label; returns its new sync record (None: forget it)."""
    file_changed = file is not None and (seen is None or file[1] != seen.get("sha"))
    block_changed = block is not None and (
        seen is None or block.version != seen.get("version") or block.id != seen.get("block_id"))

    def to_store() -> dict[str, Any]:
        assert file is not None
        apply_file(memory, agent_id, file[0], actor="human")
        report.to_store.append(label)
        now = memory.block(agent_id, label)
        return {"sha": file[1], "block_id": now.id, "version": now.version}

    def to_file(b: Block) -> dict[str, Any]:
        text = render_file(b)
        write_file(root, path_of(label), text)
        report.to_files.append(label)
        return {"sha": _sha(text), "block_id": b.id, "version": b.version}

    def remove_file() -> None:
        (root / path_of(label)).unlink()
        report.files_removed.append(label)

    def detach() -> None:
        memory.delete_block(agent_id, label, actor="human")
        report.detached.append(label)

    if file is not None and block is not None:
        if not file_changed and not block_changed:
            return seen
        if file_changed and block_changed and not _same(file[0], block):
            if prefer == "file":
                return to_store()
            if prefer == "store":
                return to_file(block)
            report.conflicts.append(f"{label}: the file and the block both changed since the last sync")
            return seen
        if file_changed:
            return to_store()
        if block_changed:
            return to_file(block)
        return {"sha": file[1], "block_id": block.id, "version": block.version}
    if file is not None:  # no block
        if seen is None or prefer == "file":
            return to_store()
        if not file_changed or prefer == "store":
            remove_file()
            return None
        report.conflicts.append(f"{label}: the block was removed but the file was edited since the last sync")
        return seen
    if block is not None:  # no file
        if seen is None or prefer == "store":
            return to_file(block)
        if not block_changed or prefer == "file":
            detach()
            return None
        report.conflicts.append(f"{label}: the file was deleted but the block was edited since the last sync")
        return seen
    return None  # gone on both sides


def _same(plan: FileBlock, block: Block) -> bool:
    from ..blocks import is_pinned

    s = plan.spec
    return (s.value, s.description, s.limit, s.read_only, plan.pinned) == (
        block.value, block.description, block.limit, block.read_only, is_pinned(block))


def _git_commit(root: Path, report: SyncReport) -> str:
    """Commit the sync if ``root`` is a git work tree and files changed; the new commit's id, else ""."""
    if not (root / ".git").exists():
        return ""
    git = shutil.which("git")
    if git is None:
        raise ValidationError(f"{root} is a git repository but git is not on PATH; install git or remove {root}/.git.")
    base = [git, "-C", str(root)]
    who = subprocess.run([*base, "config", "user.email"], capture_output=True, text=True, check=False)
    ident = [] if who.stdout.strip() else ["-c", "user.name=tiermem", "-c", "user.email=tiermem@localhost"]
    try:
        subprocess.run([*base, "add", "-A"], capture_output=True, text=True, check=True)
        staged = subprocess.run([*base, "diff", "--cached", "--quiet"], capture_output=True, check=False)
        if staged.returncode == 0:
            return ""
        changed = report.to_store + report.to_files + report.detached + report.files_removed
        message = f"tiermem sync: {len(changed)} block(s)" + (f" ({', '.join(changed[:8])})" if changed else "")
        subprocess.run([git, *ident, "-C", str(root), "commit", "-q", "-m", message], capture_output=True, text=True,
                       check=True)
        head = subprocess.run([*base, "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    except subprocess.CalledProcessError as exc:
        raise ValidationError(f"git in {root} failed: {(exc.stderr or exc.stdout or '').strip()}. "
                              "The files and blocks are synced; commit by hand.") from exc
    return head.stdout.strip()
