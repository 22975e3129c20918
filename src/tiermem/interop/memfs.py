"""MemFS directories (Letta Code's memory filesystem): one markdown file per block.

A block labelled ``notes/projects`` is the file ``notes/projects.md``: YAML frontmatter
(``description``, ``limit``, ``read_only``, and ``pinned`` when it differs from the rule below)
then the value. Files under ``system/`` are pinned (rendered in core memory every turn); the
others are detached (listed by label and description, opened on demand). A file ends with one
newline that is not part of the value, so editors that add one change nothing.

``export_memfs`` writes an agent's blocks into an empty directory; ``plan_memfs`` reads a
directory back (everything is validated before anything is written); ``import_memfs`` applies
it to an agent. Two-way sync lives in ``memfs_sync``.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ..blocks import PINNED_KEY, Rethink, is_pinned, validate_label
from ..config import BlockSpec
from ..errors import TiermemError, ValidationError
from ..records import Block, check_text

if TYPE_CHECKING:
    from ..memory import Memory

SUFFIX = ".md"
PINNED_DIR = "system/"
MAX_FILE_CHARS = 10_000_000
DEFAULT_LIMIT = 5000


@dataclass(frozen=True)
class FileBlock:
    """One parsed file: the block it describes and whether it is pinned."""

    path: str  # relative, with '/'
    spec: BlockSpec
    pinned: bool


@dataclass
class MemfsReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"blocks_created": self.created, "blocks_updated": self.updated, "blocks_unchanged": self.unchanged,
                "notes": self.notes}


def default_pinned(label: str) -> bool:
    return label.startswith(PINNED_DIR)


def path_of(label: str) -> str:
    return label + SUFFIX


def is_memfs_dir(root: Path) -> bool:
    """A MemFS directory has a ``system/`` folder or a markdown file that starts with frontmatter."""
    if (root / "system").is_dir():
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


def render_file(block: Block) -> str:
    front: dict[str, Any] = {"description": block.description, "limit": block.limit, "read_only": block.read_only}
    if is_pinned(block) != default_pinned(block.label):
        front["pinned"] = is_pinned(block)
    head = yaml.safe_dump(front, sort_keys=False, allow_unicode=True, default_flow_style=False, width=10**6)
    return f"---\n{head}---\n{block.value}\n"


def parse_file(rel: str, text: str) -> FileBlock:
    """The block a file describes; raises ``ValidationError`` naming the file and the problem."""
    if not rel.endswith(SUFFIX):
        raise ValidationError(f"{rel}: MemFS block files end in {SUFFIX}.")
    try:
        label = validate_label(rel[: -len(SUFFIX)])
    except TiermemError as exc:
        raise ValidationError(f"{rel}: {exc} Rename the file.") from exc
    front: dict[str, Any] = {}
    body = text
    lines = text.split("\n")
    if lines and lines[0].rstrip("\r") == "---":
        end = next((i for i in range(1, len(lines)) if lines[i].rstrip("\r") == "---"), None)
        if end is None:
            raise ValidationError(f"{rel}: the frontmatter that starts with '---' has no closing '---' line.")
        try:
            loaded = yaml.safe_load("\n".join(lines[1:end]) + "\n") or {}
        except yaml.YAMLError as exc:
            raise ValidationError(f"{rel}: the frontmatter is not valid YAML ({exc}).") from exc
        if not isinstance(loaded, dict):
            raise ValidationError(f"{rel}: the frontmatter must be 'key: value' lines (description, limit, read_only).")
        front = loaded
        body = "\n".join(lines[end + 1 :])
    value = body[:-1] if body.endswith("\n") else body
    description = front.get("description")
    if description is None:
        description = ""
    if not isinstance(description, str):
        raise ValidationError(f"{rel}: description must be text.")
    limit = front.get("limit", max(DEFAULT_LIMIT, len(value)))
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise ValidationError(f"{rel}: limit must be a positive whole number of characters, got {limit!r}.")
    if len(value) > limit:
        raise ValidationError(
            f"{rel}: the value has {len(value)} characters, more than its limit {limit}. Shorten it or raise `limit`."
        )
    flags = {}
    for key in ("read_only", "pinned"):
        if key in front and not isinstance(front[key], bool):
            raise ValidationError(f"{rel}: {key} must be true or false, got {front[key]!r}.")
        flags[key] = front.get(key)
    for name, part in (("value", value), ("description", description)):
        check_text(part, f"{rel}: {name}", MAX_FILE_CHARS)
    pinned = default_pinned(label) if flags["pinned"] is None else bool(flags["pinned"])
    spec = BlockSpec(label=label, value=value, description=description, limit=limit, read_only=bool(flags["read_only"]),
                     metadata={} if pinned else {PINNED_KEY: "false"})
    return FileBlock(rel, spec, pinned)


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
        raise ValidationError(f"Cannot read {path} as UTF-8 text ({exc}); fix it or move it out of the directory.") from exc


def plan_memfs(root: Path) -> list[FileBlock]:
    """Every block file in ``root``, parsed and validated; nothing is written."""
    if not root.is_dir():
        raise ValidationError(f"{root} is not a directory; give a MemFS memory directory (one .md file per block).")
    plans = [parse_file(rel, read_file(root, rel)) for rel in block_files(root)]
    if not plans:
        raise ValidationError(f"{root} has no .md block files.")
    return plans


def write_file(root: Path, rel: str, text: str) -> None:
    """Write ``text`` to ``root/rel`` through a temporary file renamed into place."""
    target = root / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
    try:
        root.mkdir(parents=True, exist_ok=True)
        blocks = memory.blocks(agent.id)
        for b in blocks:
            write_file(root, path_of(b.label), render_file(b))
    except OSError as exc:
        raise ValidationError(f"Cannot write the MemFS directory {root}: {exc}.") from exc
    return {"format": "memfs", "agent": name, "blocks": len(blocks),
            "pinned": sum(1 for b in blocks if is_pinned(b)), "output": str(root)}


def apply_file(memory: Memory, agent_id: str, plan: FileBlock, *, actor: str) -> str:
    """Make the agent's block match the file: "created", "updated" or "unchanged"."""
    spec = plan.spec
    try:
        current = memory.block(agent_id, spec.label)
    except TiermemError:
        current = None
    if current is None:
        memory.create_block(agent_id, spec, actor=actor)
        return "created"
    changed = False
    if (current.description, current.limit, current.read_only, is_pinned(current)) != (
        spec.description, spec.limit, spec.read_only, plan.pinned
    ):
        # a larger limit first, so a longer value fits; a smaller one after the value shrank
        memory.update_block(agent_id, spec.label, description=spec.description, read_only=spec.read_only,
                            pinned=plan.pinned, limit=max(spec.limit, current.limit), actor=actor, operation="memfs")
        changed = True
    if current.value != spec.value:
        memory.edit(agent_id, spec.label, Rethink(spec.value, operation="memfs", check_line_numbers=False), actor=actor)
        changed = True
    if memory.block(agent_id, spec.label).limit != spec.limit:
        memory.update_block(agent_id, spec.label, limit=spec.limit, actor=actor, operation="memfs")
        changed = True
    return "updated" if changed else "unchanged"


def import_memfs(memory: Memory, agent_name: str, root: Path) -> dict[str, Any]:
    """Create or update the agent's blocks from a MemFS directory (blocks not in it are left alone)."""
    plans = plan_memfs(root)
    agent_id = memory.ensure_agent(agent_name).id
    report = MemfsReport()
    for plan in plans:
        outcome = apply_file(memory, agent_id, plan, actor="human")
        {"created": report.created, "updated": report.updated, "unchanged": report.unchanged}[outcome].append(
            plan.spec.label)
    others = sorted({b.label for b in memory.blocks(agent_id)} - {p.spec.label for p in plans})
    if others:
        report.notes.append(f"blocks not in {root} were left as they are: {', '.join(others)}")
    return {"format": "memfs", "agent": agent_name, **report.as_dict()}
