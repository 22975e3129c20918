"""MemFS directories (Letta Code's memory filesystem): one markdown file per block, both layouts.

A block labelled ``reference/Team-Notes`` is the file ``reference/Team-Notes.md``: frontmatter, then
the value (a file ends with one newline that is not part of the value). Frontmatter is read and
written the way Letta Code does (``memfs_format``): descriptions literally in layout v1, ``name`` and
``description`` as JSON strings in v2; every line of it is kept in the block's metadata
(``memfs_front``) and written back, so unknown keys survive. What is in the prompt follows the
layout: ``system/**`` (v1) or the root files (v2) are pinned, the rest detached. In a directory that
is not a Letta Code agent's, a ``pinned:`` key overrides that rule (tiermem's own exports write it).

A file's ``limit:`` is the block's limit; a file without one keeps the block's limit (raised to fit
when the file's text is longer: Letta Code's tools drop the key and do not enforce limits). Files
tiermem cannot take (not UTF-8, NUL characters, an unclosed frontmatter, text over its own limit,
a name that cannot be a label) are reported and skipped, never the whole directory.

``export_memfs`` writes an agent's blocks into an empty directory; ``plan_memfs`` reads a directory;
``import_memfs`` applies it to an agent. Two-way sync lives in ``memfs_sync``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..domain import memfs_format as fmt
from ..domain.blocks import PINNED_KEY, Rethink, is_pinned, validate_label
from ..base.config import BlockSpec
from ..base.errors import TiermemError, ValidationError
from ..base.files import write_text_atomically
from ..base.records import Block, check_text

if TYPE_CHECKING:
    from ..domain.memory import Memory

SUFFIX = fmt.SUFFIX
FRONT_KEY = fmt.FRONT_KEY  # block metadata: the file's frontmatter lines as written
MAX_FILE_CHARS = 10_000_000
DEFAULT_LIMIT = 5000


@dataclass(frozen=True)
class Tree:
    """What decides how a directory's files read and write: its layout and whether Letta Code's hook guards it."""

    layout: fmt.Layout = "v1"
    agent_repo: bool = False  # a Letta Code memory repository: its pre-commit hook judges every commit
    paths: frozenset[str] = frozenset()  # the .md files it holds (v2 index rules)

    def pinned(self, rel: str) -> bool:
        return fmt.in_prompt(rel, self.layout)


@dataclass(frozen=True)
class FileBlock:
    """One parsed file: the block it describes."""

    path: str  # relative, with '/'
    label: str
    value: str
    description: str
    limit: int | None  # None: the file states no limit (a block keeps its own)
    read_only: bool
    pinned: bool
    front: str | None  # the frontmatter lines as written; None: the file had none

    def spec(self) -> BlockSpec:
        """The block a new file creates."""
        meta = {} if self.pinned else {PINNED_KEY: "false"}
        if self.front is not None:
            meta[FRONT_KEY] = self.front
        return BlockSpec(label=self.label, value=self.value, description=self.description,
                         limit=self.limit or max(DEFAULT_LIMIT, len(self.value)), read_only=self.read_only, metadata=meta)


@dataclass
class MemfsReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"blocks_created": self.created, "blocks_updated": self.updated, "blocks_unchanged": self.unchanged,
                "skipped": self.skipped, "notes": self.notes}


def path_of(label: str) -> str:
    return label + SUFFIX


def is_memfs_dir(root: Path) -> bool:
    """A MemFS directory has a ``system/`` folder, a ``MEMORY.md`` index or a markdown file with frontmatter."""
    if (root / "system").is_dir() or (root / fmt.INDEX).is_file():
        return True
    for path in root.glob("*.md"):
        try:
            with path.open(encoding="utf-8") as f:
                if f.readline().rstrip("\r\n") == "---":
                    return True
        except (OSError, UnicodeDecodeError):
            continue
    return False


# ---------------------------------------------------------------------------
# One file
# ---------------------------------------------------------------------------


def parse_file(rel: str, text: str, tree: Tree) -> FileBlock:
    """The block a file describes; raises ``ValidationError`` naming the file and why tiermem cannot take it."""
    if not rel.endswith(SUFFIX):
        raise ValidationError(f"{rel}: MemFS block files end in {SUFFIX}.")
    try:
        label = validate_label(rel[: -len(SUFFIX)])
        check_text(text, rel, MAX_FILE_CHARS)
        parts = fmt.split_file(text)
    except TiermemError as exc:
        raise ValidationError(f"{rel}: {exc}") from exc
    front, body = parts.front, parts.body
    value = body[:-1] if body.endswith("\n") else body
    index = tree.layout == "v2" and fmt.is_index(rel)
    description = "" if index else fmt.decode(front.get("description"), tree.layout) or ""
    limit: int | None = None
    raw_limit = front.get("limit")
    if raw_limit is not None:
        if not raw_limit.isdigit() or int(raw_limit) <= 0:
            raise ValidationError(f"{rel}: limit must be a positive whole number of characters, got {raw_limit!r}.")
        limit = int(raw_limit)
        if len(value) > limit:
            raise ValidationError(f"{rel}: the value has {len(value)} characters, more than its limit {limit}. "
                                  "Shorten it or raise `limit`.")
    pinned = tree.pinned(rel)
    override = front.get("pinned")
    if override is not None and not tree.agent_repo:
        if override.lower() not in ("true", "false"):
            raise ValidationError(f"{rel}: pinned must be true or false, got {override!r}.")
        pinned = override.lower() == "true"
    return FileBlock(rel, label, value, description, limit, (front.get("read_only") or "").lower() == "true",
                     pinned, front.raw)


def render_file(block: Block, rel: str, tree: Tree) -> str:
    """The file for ``block`` at ``rel``: its kept frontmatter with what changed rewritten, then the value.

    Only keys the layout's hook allows are added: ``description`` (v1; with ``limit`` and ``read_only`` outside
    agent repositories), ``name`` and ``description`` (v2). In an agent repository ``read_only`` is never added,
    changed or removed. A ``MEMORY.md`` index of v2 has no frontmatter.
    """
    body = block.value + "\n"
    if tree.layout == "v2" and fmt.is_index(rel):
        return body
    front = fmt.Front.of(block.metadata.get(FRONT_KEY))
    layout = tree.layout
    if fmt.decode(front.get("description"), layout) != block.description:
        text = fmt.one_line(block.description)
        if not text and tree.agent_repo:  # Letta Code's tools refuse a file without one; its own words for a default
            text = f"Memory block {block.label}"
        front = front.set("description", fmt.encode(text, layout) if text else None, first=True)
    if layout == "v2" and front.get("name") is None:
        front = front.set("name", fmt.encode(fmt.default_name(rel), layout), first=True)
    if front.get("limit") is not None or (
        not tree.agent_repo and layout == "v1" and block.limit != max(DEFAULT_LIMIT, len(block.value))
    ):
        front = front.set("limit", str(block.limit))
    if not tree.agent_repo:
        had = front.get("read_only")
        front = front.set("read_only", "true" if block.read_only else ("false" if had is not None else None))
        want = is_pinned(block)
        front = front.set("pinned", None if want == tree.pinned(rel) else str(want).lower())
    if not front.present and not front.lines:
        return body
    return fmt.MemoryFile(fmt.Front(front.lines, True), body).text()


def same(plan: FileBlock, block: Block) -> bool:
    """The file and the block say the same (a missing ``limit:`` agrees with any limit that fits)."""
    limit_ok = plan.limit == block.limit if plan.limit is not None else len(plan.value) <= block.limit
    return limit_ok and (plan.value, plan.description, plan.read_only, plan.pinned) == (
        block.value, block.description, block.read_only, is_pinned(block))


# ---------------------------------------------------------------------------
# A directory
# ---------------------------------------------------------------------------


def block_files(root: Path) -> dict[str, Path]:
    """Relative path -> file, for every ``.md`` file outside hidden folders."""
    found: dict[str, Path] = {}
    for path in sorted(root.rglob("*" + SUFFIX)):
        rel = path.relative_to(root)
        if any(part.startswith(".") for part in rel.parts) or not path.is_file():
            continue
        found[rel.as_posix()] = path
    return found


def read_file(root: Path, rel: str) -> str:
    path = root / rel
    try:
        with path.open(encoding="utf-8", newline="") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValidationError(f"{rel}: cannot be read as UTF-8 text ({exc}).") from exc


def tree_of(paths: set[str] | frozenset[str], *, policy: str | None = None, agent_repo: bool = False) -> Tree:
    return Tree(fmt.layout_of(paths, policy), agent_repo, frozenset(paths))


def read_tree(root: Path, tree: Tree) -> tuple[dict[str, tuple[FileBlock, str]], list[str]]:
    """Every file tiermem can take, parsed (label -> (file, its text)), and a line for each one it cannot."""
    parsed: dict[str, tuple[FileBlock, str]] = {}
    skipped: list[str] = []
    for rel in sorted(tree.paths):
        try:
            text = read_file(root, rel)
            plan = parse_file(rel, text, tree)
        except ValidationError as exc:
            skipped.append(f"{exc} (skipped)")
            continue
        parsed[plan.label] = (plan, text)
    return parsed, skipped


def plan_memfs(root: Path) -> tuple[list[FileBlock], list[str]]:
    """Every block file in ``root`` tiermem can take, parsed, and what it skipped; nothing is written."""
    if not root.is_dir():
        raise ValidationError(f"{root} is not a directory; give a MemFS memory directory (one .md file per block).")
    from .memfs_git import Repo

    repo = Repo.find(root)
    tree = tree_of(set(block_files(root)), policy=repo.policy if repo else None,
                   agent_repo=bool(repo and repo.agent_repo))
    parsed, skipped = read_tree(root, tree)
    if not parsed:
        why = f" ({'; '.join(skipped)})" if skipped else ""
        raise ValidationError(f"{root} has no .md block files tiermem can read{why}.")
    return [p for p, _ in parsed.values()], skipped


def write_file(root: Path, rel: str, text: str) -> None:
    """Write ``text`` to ``root/rel`` through a temporary file renamed into place."""
    target = root / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(target, text, newline="")


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
    try:
        root.mkdir(parents=True, exist_ok=True)
        for b in blocks:
            write_file(root, path_of(b.label), render_file(b, path_of(b.label), tree))
    except OSError as exc:
        raise ValidationError(f"Cannot write the MemFS directory {root}: {exc}.") from exc
    return {"format": "memfs", "agent": name, "blocks": len(blocks),
            "pinned": sum(1 for b in blocks if is_pinned(b)), "output": str(root)}


def apply_file(memory: Memory, agent_id: str, plan: FileBlock, *, actor: str, operation: str = "memfs",
               notes: list[str] | None = None) -> str:
    """Make the agent's block match the file: "created", "updated" or "unchanged"."""
    try:
        current = memory.block(agent_id, plan.label)
    except TiermemError:
        current = None
    if current is None:
        memory.create_block(agent_id, plan.spec(), actor=actor)
        return "created"
    limit = plan.limit if plan.limit is not None else max(current.limit, len(plan.value))
    if plan.limit is None and limit != current.limit and notes is not None:
        notes.append(f"{plan.label}: limit raised from {current.limit} to {limit} characters to fit {plan.path} "
                     "(the file states no limit)")
    front = plan.front if plan.front is not None else ""
    changed = False
    if (current.description, current.read_only, is_pinned(current), current.metadata.get(FRONT_KEY, "")) != (
        plan.description, plan.read_only, plan.pinned, front
    ) or limit > current.limit:
        # a larger limit first, so a longer value fits; a smaller one after the value shrank
        memory.update_block(agent_id, plan.label, description=plan.description, read_only=plan.read_only,
                            pinned=plan.pinned, limit=max(limit, current.limit), metadata={FRONT_KEY: front},
                            actor=actor, operation=operation)
        changed = True
    if current.value != plan.value:
        memory.edit(agent_id, plan.label, Rethink(plan.value, operation=operation, check_line_numbers=False),
                    actor=actor)
        changed = True
    if memory.block(agent_id, plan.label).limit != limit:
        memory.update_block(agent_id, plan.label, limit=limit, actor=actor, operation=operation)
        changed = True
    return "updated" if changed else "unchanged"


def import_memfs(memory: Memory, agent_name: str, root: Path) -> dict[str, Any]:
    """Create or update the agent's blocks from a MemFS directory (blocks not in it are left alone)."""
    plans, skipped = plan_memfs(root)
    agent_id = memory.ensure_agent(agent_name).id
    report = MemfsReport(skipped=skipped)
    for plan in plans:
        outcome = apply_file(memory, agent_id, plan, actor="human", notes=report.notes)
        {"created": report.created, "updated": report.updated, "unchanged": report.unchanged}[outcome].append(
            plan.label)
    others = sorted({b.label for b in memory.blocks(agent_id)} - {p.label for p in plans})
    if others:
        report.notes.append(f"blocks not in {root} were left as they are: {', '.join(others)}")
    return {"format": "memfs", "agent": agent_name, **report.as_dict()}
