"""MemFS directories (Letta Code's memory filesystem): one markdown file per block, both layouts.

A block labelled ``reference/Team-Notes`` is the file ``reference/Team-Notes.md``: frontmatter, then
the value (a file ends with one newline that is not part of the value). Frontmatter is read and
written the way Letta Code does (``memfs_format``): descriptions literally in layout v1, ``name`` and
``description`` as JSON strings in v2; every line of it is kept in the block's metadata
(``memfs_front``) and written back, so unknown keys survive. What is in the prompt follows the
layout: ``system/**`` (v1) or the root files (v2) are pinned, the rest detached. In a directory that
is not a Letta Code agent's, tiermem keeps the blocks pinned otherwise in a record beside the files
(``pinned_path``: ``.tiermem-pinned.json``, or in the git directory), never in their frontmatter, which
Letta Code's hook checks against its own keys; a ``pinned:`` key an older tiermem wrote is still read.

A file's ``limit:`` is the block's limit; a file without one keeps the block's limit (raised to fit
when the file's text is longer: Letta Code's tools drop the key and do not enforce limits). Files
tiermem cannot take (not UTF-8, NUL characters, an unclosed frontmatter, text over its own limit or
over what a block holds, a credential anywhere in it, a name that cannot be a label, a hidden name)
are reported and skipped, never the whole directory: every file is screened before anything is written
(``memfs_files.screen_file``, the screening Letta Code's memory tools apply to a file they find there too).

``export_memfs`` writes an agent's blocks into an empty directory; ``plan_memfs`` reads a directory;
``import_memfs`` applies it to an agent. Two-way sync lives in ``memfs_sync``.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.errors import ConflictError, TiermemError, ValidationError
from ..base.files import write_text_atomically
from ..domain import memfs_format as fmt
from ..domain.blocks import is_pinned
from ..domain.memfs_files import (  # the file <-> block rules, shared with Letta Code's memory tools
    DEFAULT_LIMIT,
    FRONT_KEY,
    LINK_WHY,
    MAX_FILE_CHARS,
    SUFFIX,
    FileBlock,
    FileStyle,
    Tree,
    linked,
    parse_file,
    read_file,
    render_file,
    same,
    same_front,
    screen_file,
    written_front,
)

if TYPE_CHECKING:
    from ..domain.memory import Memory
    from .memfs_git import Repo

PINNED_FILE = ".tiermem-pinned.json"  # outside a git repository: the blocks pinned otherwise than the layout says

__all__ = [
    "DEFAULT_LIMIT",
    "FRONT_KEY",
    "HIDDEN_WHY",
    "LINK_WHY",
    "MAX_FILE_CHARS",
    "SUFFIX",
    "FileBlock",
    "FileStyle",
    "Tree",
    "parse_file",
    "render_file",
    "same",
    "same_front",
    "MemfsReport",
    "apply_file",
    "block_files",
    "check_root",
    "hidden_lines",
    "export_memfs",
    "import_memfs",
    "is_memfs_dir",
    "link_lines",
    "linked",
    "make_root",
    "path_of",
    "pinned_path",
    "plan_memfs",
    "read_pinned",
    "read_file",
    "read_tree",
    "tree_of",
    "write_file",
    "write_pinned",
]


@dataclass
class MemfsReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "blocks_created": self.created,
            "blocks_updated": self.updated,
            "blocks_unchanged": self.unchanged,
            "skipped": self.skipped,
            "notes": self.notes,
        }


def path_of(label: str) -> str:
    return label + SUFFIX


def is_memfs_dir(root: Path) -> bool:
    """A MemFS directory has a ``system/`` folder, a ``MEMORY.md`` index or a markdown file with frontmatter."""
    if (root / "system").is_dir() or (root / fmt.INDEX).is_file():
        return True
    for path in root.glob("*.md"):
        if path.is_symlink():
            continue
        try:
            with path.open(encoding="utf-8") as f:
                if f.readline().rstrip("\r\n") == "---":
                    return True
        except (OSError, UnicodeDecodeError):
            continue
    return False


# ---------------------------------------------------------------------------
# A directory
# ---------------------------------------------------------------------------


HIDDEN_WHY = (
    "a hidden file (its name starts with '.'), which no block's label can name (no part of a label starts with '.'), "
    "so it is not memory; rename it without the leading '.' to have it in memory"
)


def block_files(root: Path, links: list[str] | None = None, hidden: list[str] | None = None) -> dict[str, Path]:
    """Relative path -> file, for every regular ``.md`` file outside hidden folders (``.git``, ``.obsidian``: a tool's,
    silently left out). Symbolic links (to files or folders) are never followed: each one that could hold block files
    goes to ``links`` (its path), when given; a hidden ``.md`` file (``notes/.plan.md``, which Letta Code's tools make
    as readily as any other) to ``hidden``."""
    found: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(root):  # does not descend into linked folders
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in [*dirnames, *filenames]:
            path = here / name
            if name.startswith(".") or not path.is_symlink():
                continue
            if name in dirnames or name.endswith(SUFFIX):
                if links is not None:
                    links.append(path.relative_to(root).as_posix())
        for name in sorted(filenames):
            path = here / name
            if not name.endswith(SUFFIX):
                continue
            if name.startswith("."):
                if hidden is not None:
                    hidden.append(path.relative_to(root).as_posix())
                continue
            try:
                if not stat.S_ISREG(path.lstat().st_mode):
                    continue
            except OSError:  # gone since the listing
                continue
            found[path.relative_to(root).as_posix()] = path
    return dict(sorted(found.items()))


def link_lines(links: list[str]) -> list[str]:
    """The report's lines for the links ``block_files`` found."""
    return [f"{rel}: {LINK_WHY} (skipped)" for rel in links]


def hidden_lines(hidden: list[str]) -> list[str]:
    """The report's lines for the hidden files ``block_files`` found."""
    return [f"{rel}: {HIDDEN_WHY} (skipped)" for rel in hidden]


def tree_of(
    paths: set[str] | frozenset[str],
    *,
    policy: str | None = None,
    agent_repo: bool = False,
    overrides: Mapping[str, bool] | None = None,
) -> Tree:
    return Tree(fmt.layout_of(paths, policy), agent_repo, frozenset(paths), frozenset((overrides or {}).items()))


def pinned_path(root: Path, repo: Repo | None) -> Path:
    """Where a directory's pinned overrides live (``Tree.overrides``): beside tiermem's sync record, in the git
    directory of a repository (``tiermem-pinned[-tag].json``), else ``DIR/.tiermem-pinned.json``."""
    if repo is None:
        return root / PINNED_FILE
    record = repo.state_file()
    return record.with_name(record.name.replace("tiermem-sync", "tiermem-pinned", 1))


def read_pinned(path: Path) -> dict[str, bool]:
    """The overrides kept at ``path`` (none when it does not exist)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ValidationError(
            f"{path} is unreadable ({exc}); delete it (blocks outside system/ are then read as detached)."
        ) from exc
    pinned = data.get("pinned") if isinstance(data, dict) else None
    if not isinstance(pinned, dict) or not all(isinstance(v, bool) for v in pinned.values()):
        raise ValidationError(f"{path} is not tiermem's record of pinned blocks; delete it.")
    return {str(k): v for k, v in pinned.items()}


def write_pinned(path: Path, overrides: Mapping[str, bool]) -> None:
    """Keep ``overrides`` at ``path`` (the file removed when there are none), if they changed."""
    if not overrides:
        path.unlink(missing_ok=True)
    elif read_pinned(path) != dict(overrides):
        text = json.dumps({"pinned": dict(sorted(overrides.items()))}, indent=1) + "\n"
        write_text_atomically(path, text)


def read_tree(
    root: Path, tree: Tree, memory: Memory | None = None
) -> tuple[dict[str, tuple[FileBlock, str]], list[str]]:
    """Every file tiermem can take, parsed (label -> (file, its text)), and a line for each one it cannot
    (``screen_file``: with ``memory``, a file its store would refuse is one it cannot take): it is skipped whole,
    before anything is written, so an import or a sync never stops half-way through a directory."""
    parsed: dict[str, tuple[FileBlock, str]] = {}
    skipped: list[str] = []
    for rel in sorted(tree.paths):
        found = screen_file(root, rel, tree, memory)
        if isinstance(found, str):
            skipped.append(found)
        else:
            parsed[found[0].label] = found
    return parsed, skipped


def plan_memfs(root: Path, memory: Memory | None = None) -> tuple[list[FileBlock], list[str]]:
    """Every block file in ``root`` tiermem can take, parsed, and what it skipped (``read_tree``: with ``memory``,
    files its store would refuse among them); nothing is written."""
    _, plans, skipped = _plan(root, memory)
    return plans, skipped


def _plan(root: Path, memory: Memory | None) -> tuple[Tree, list[FileBlock], list[str]]:
    """``plan_memfs``, with the directory's ``Tree`` (how its files read and write)."""
    if not root.is_dir():
        raise ValidationError(f"{root} is not a directory; give a MemFS memory directory (one .md file per block).")
    from .memfs_git import Repo

    repo = Repo.find(root)
    links: list[str] = []
    hidden: list[str] = []
    tree = tree_of(
        set(block_files(root, links, hidden)),
        policy=repo.policy if repo else None,
        agent_repo=bool(repo and repo.agent_repo),
        overrides=read_pinned(pinned_path(root, repo)),
    )
    parsed, skipped = read_tree(root, tree, memory)
    skipped = [*link_lines(links), *hidden_lines(hidden), *skipped]
    if not parsed:
        why = f" ({'; '.join(skipped)})" if skipped else ""
        raise ValidationError(f"{root} has no .md block files tiermem can read{why}. Nothing was written.")
    return tree, [p for p, _ in parsed.values()], skipped


def write_file(root: Path, rel: str, text: str) -> None:
    """Write ``text`` to ``root/rel`` through a temporary file renamed into place; never through or over a symbolic
    link (``ValidationError``, nothing written)."""
    link = linked(root, rel)
    if link is not None:
        raise ValidationError(f"{link} is a symbolic link; tiermem does not write {rel} through or over it.")
    target = root / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(target, text, newline="")


def check_root(root: Path) -> bool:
    """Whether the MemFS directory ``root`` exists; False: it does not, and its parent does (a sync or an export makes it).
    Raises ``ValidationError`` for a file, or for a directory whose parent is missing: a mistyped path is never
    made, parents and all."""
    if root.is_dir():
        return True
    if root.exists():
        raise ValidationError(f"{root} is a file; give a MemFS directory.")
    if not root.parent.is_dir():
        raise ValidationError(
            f"{root.parent} does not exist, so {root} cannot be made there. Check the path; to start a MemFS "
            f"directory there, make its parent first (mkdir -p {root.parent})."
        )
    return False


def make_root(root: Path) -> None:
    """``root`` as ``check_root`` allows it: made if missing (its parent is not)."""
    if not check_root(root):
        try:
            root.mkdir(exist_ok=True)
        except OSError as exc:
            raise ValidationError(f"Cannot make the MemFS directory {root}: {exc}.") from exc


def export_memfs(memory: Memory, name: str, root: Path) -> dict[str, Any]:
    """Write the agent's blocks into ``root`` (new, or without .md files), one file per block."""
    agent = memory.get_agent(name)
    if root.exists() and not root.is_dir():
        raise ValidationError(f"{root} is a file; give a directory for a MemFS export.")
    if root.is_dir() and block_files(root):
        raise ValidationError(
            f"{root} already holds .md files; export into a new or empty directory, or keep it current with "
            f"`tiermem sync {root} --agent {name}`."
        )
    blocks = memory.blocks(agent.id)
    tree = tree_of({path_of(b.label) for b in blocks})
    # refusals before any write; every file new: each gets a description, as Letta Code's tools need
    texts = {path_of(b.label): render_file(b, path_of(b.label), tree, new=True) for b in blocks}
    make_root(root)
    try:
        for rel, text in texts.items():
            write_file(root, rel, text)
        from .memfs_git import Repo

        write_pinned(pinned_path(root, Repo.find(root)), tree.overrides_for(blocks))
    except OSError as exc:
        raise ValidationError(f"Cannot write the MemFS directory {root}: {exc}.") from exc
    return {
        "format": "memfs",
        "agent": name,
        "blocks": len(blocks),
        "pinned": sum(1 for b in blocks if is_pinned(b)),
        "output": str(root),
    }


def apply_file(
    memory: Memory,
    agent_id: str,
    plan: FileBlock,
    tree: Tree,
    *,
    actor: str,
    operation: str = "memfs",
    notes: list[str] | None = None,
    expected_version: int | None = None,
) -> str:
    """Make the agent's block match the file (read as ``tree`` says): "created", "updated" or "unchanged". One write
    (one new version): its value, limit, description and frontmatter land together or not at all. With
    ``expected_version`` (a compare-and-set): only while the block is at that version, else ``ConflictError`` and
    nothing written.

    A block that keeps no frontmatter (made in tiermem) agrees with a file whose frontmatter is what tiermem writes
    for it (``written_front``: an export read back), so an untouched export imports as "unchanged"."""
    try:
        current = memory.block(agent_id, plan.label)
    except TiermemError:
        current = None
    expect = expected_version
    if current is None and expect is not None:
        raise ConflictError(f"Block {plan.label!r} was removed meanwhile; nothing was written.")
    if current is None:
        memory.create_block(agent_id, plan.spec(), actor=actor)
        return "created"
    limit = plan.limit if plan.limit is not None else max(current.limit, len(plan.value))
    if plan.limit is None and limit != current.limit and notes is not None:
        notes.append(
            f"{plan.label}: limit raised from {current.limit} to {limit} characters to fit {plan.path} "
            "(the file states no limit)"
        )
    kept = current.metadata.get(FRONT_KEY)
    new_front = not same_front(kept, plan.front) and not (
        kept is None and plan.front is not None and same_front(written_front(plan, limit, tree), plan.front)
    )
    if (current.value, current.limit, current.description, current.read_only, is_pinned(current)) == (
        plan.value,
        limit,
        plan.description,
        plan.read_only,
        plan.pinned,
    ) and not new_front:
        return "unchanged"
    memory.update_block(
        agent_id,
        plan.label,
        value=plan.value if plan.value != current.value else None,
        description=plan.description,
        read_only=plan.read_only,
        pinned=plan.pinned,
        limit=limit,
        # "" removes the key: the file has no frontmatter
        metadata={FRONT_KEY: plan.front if plan.front is not None else ""} if new_front else None,
        actor=actor,
        operation=operation,
        expected_version=expect,
    )
    return "updated"


def import_memfs(memory: Memory, agent_name: str, root: Path) -> dict[str, Any]:
    """Create or update the agent's blocks from a MemFS directory (blocks not in it are left alone); a new agent gets
    no default blocks, as with ``sync``."""
    tree, plans, skipped = _plan(root, memory)  # every file screened before the agent is made or anything written
    report = MemfsReport(skipped=skipped)
    if memory.core.find_agent(agent_name) is None:  # its memory is the directory: no default blocks beside it
        report.notes.append(f"created agent {agent_name!r} (no default blocks: its memory is {root})")
    agent_id = memory.ensure_agent(agent_name, blocks=()).id
    for plan in plans:
        outcome = apply_file(memory, agent_id, plan, tree, actor="human", notes=report.notes)
        {"created": report.created, "updated": report.updated, "unchanged": report.unchanged}[outcome].append(
            plan.label
        )
    others = sorted({b.label for b in memory.blocks(agent_id)} - {p.label for p in plans})
    if others:
        report.notes.append(f"blocks not in {root} were left as they are: {', '.join(others)}")
    return {"format": "memfs", "agent": agent_name, **report.as_dict()}
