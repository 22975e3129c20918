"""A memory file and its block, both ways: the one place that reads a MemFS file as a block and writes a block
as a file (the sync and export in ``interop.memfs``, Letta Code's memory tools in ``server.letta_memory_tool``).

A ``Tree`` says how a directory's files read and write: its layout (v1: ``system/**`` in the prompt; v2, a
root ``MEMORY.md``: the root files) and whether Letta Code's hook guards it. ``parse_file`` reads a file as
the block it describes, ``render_file`` writes a block as its file (the frontmatter it came with kept byte
for byte, only what changed rewritten), ``new_file`` is the file Letta Code's tools make for a new block
without frontmatter. The defaults (a new block's limit, the description Letta Code gives a file without one)
live here and nowhere else. ``directory_layout`` is how Letta Code's memory tool decides a directory's layout.
``screen_file`` is the one screening of a file in a directory (never read through a link, its name, its text, what
its block would hold against ``max_content_chars`` and credentials): the import and sync skip what it refuses, and
Letta Code's memory tools treat such a file as there (no block has it, but Letta Code finds it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..base.config import BlockSpec
from ..base.errors import TiermemError, ValidationError
from ..base.files import LinkedFileError, NotRegularFileError, read_text_nofollow
from ..base.records import Block, check_text
from . import memfs_format as fmt
from .blocks import PINNED_KEY, is_pinned, validate_label

SUFFIX = fmt.SUFFIX
FRONT_KEY = fmt.FRONT_KEY
MAX_FILE_CHARS = 10_000_000
DEFAULT_LIMIT = 5000  # a new block's limit, raised to fit a longer text (Letta Code's tools enforce no limit)
POLICY_FILE = "letta-memory-layout-policy"  # Letta Code writes it in the repository's git directory, beside its hooks


def fit_limit(value: str) -> int:
    """The limit of a block made from a file that states none: the default, or the text's length when longer."""
    return max(DEFAULT_LIMIT, len(value))


def default_description(label: str) -> str:
    """The description Letta Code's tools give a memory file that has none (its hook requires one)."""
    return f"Memory block {label}"


def pinned_meta(pinned: bool) -> dict[str, str]:
    """A new block's metadata for whether it is in the prompt."""
    return {} if pinned else {PINNED_KEY: "false"}


def directory_layout(root: Path) -> fmt.Layout:
    """A memory directory's layout as Letta Code's memory tool decides it: v2 when it has a root ``MEMORY.md`` and
    its repository's layout policy (``.git/letta-memory-layout-policy``, Letta Code's) does not forbid the root
    layout; else v1. Reads those two paths and nothing else."""
    try:
        policy = (root / ".git" / POLICY_FILE).read_text(encoding="utf-8").strip() or None
    except OSError:
        policy = None
    return fmt.layout_of({fmt.INDEX} if (root / fmt.INDEX).is_file() else set(), policy)


@dataclass(frozen=True)
class Tree:
    """What decides how a directory's files read and write: its layout and whether Letta Code's hook guards it."""

    layout: fmt.Layout = "v1"
    agent_repo: bool = False  # a Letta Code memory repository: its pre-commit hook judges every commit
    paths: frozenset[str] = frozenset()  # the .md files it holds (v2 index rules)
    # Outside an agent repository: the files whose block is pinned otherwise than the layout says (rel -> pinned),
    # kept beside the directory (``interop.memfs.pinned_path``), never in a file's frontmatter: Letta Code's hook
    # refuses keys it does not know.
    overrides: frozenset[tuple[str, bool]] = frozenset()

    def pinned(self, rel: str) -> bool:
        """Whether the block of ``rel`` is pinned: what the directory's overrides say, else the layout's rule."""
        if not self.agent_repo:
            for path, pinned in self.overrides:
                if path == rel:
                    return pinned
        return fmt.in_prompt(rel, self.layout)

    def overrides_for(self, blocks: list[Block]) -> dict[str, bool]:
        """The overrides that keep ``blocks`` pinned as they are in this directory (none in an agent repository)."""
        if self.agent_repo:
            return {}
        wanted = {b.label + SUFFIX: is_pinned(b) for b in blocks}
        return {rel: pinned for rel, pinned in sorted(wanted.items()) if pinned != fmt.in_prompt(rel, self.layout)}


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
    front: str | None  # the frontmatter as written (``memfs_format.Front.raw``); None: the file had none

    def spec(self) -> BlockSpec:
        """The block a new file creates."""
        meta = pinned_meta(self.pinned)
        if self.front is not None:
            meta[FRONT_KEY] = self.front
        return BlockSpec(
            label=self.label,
            value=self.value,
            description=self.description,
            limit=self.limit or fit_limit(self.value),
            read_only=self.read_only,
            metadata=meta,
        )


def parse_file(rel: str, text: str, tree: Tree) -> FileBlock:
    """The block a file describes; raises ``ValidationError`` naming the file and why tiermem cannot take it."""
    if not rel.endswith(SUFFIX):
        raise ValidationError(f"{rel}: MemFS block files end in {SUFFIX}.")
    try:
        label = validate_label(rel[: -len(SUFFIX)])
        advice = f"{MAX_FILE_CHARS} is the most a memory file may hold; split it into several files (one block each)."
        check_text(text, "the file", MAX_FILE_CHARS, advice)
        parts = fmt.split_file(text)
    except TiermemError as exc:
        raise ValidationError(f"{rel}: {exc}") from exc
    front, body = parts.front, parts.body.replace("\r\n", "\n")  # a CRLF file's value reads with LF line endings
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
            raise ValidationError(
                f"{rel}: the value has {len(value)} characters, more than its limit {limit}. "
                "Shorten it or raise `limit`."
            )
    pinned = tree.pinned(rel)
    override = front.get("pinned")  # an older tiermem's export wrote the override here
    if override is not None and not tree.agent_repo and rel not in dict(tree.overrides):
        if override.lower() not in ("true", "false"):
            raise ValidationError(f"{rel}: pinned must be true or false, got {override!r}.")
        pinned = override.lower() == "true"
    return FileBlock(
        rel, label, value, description, limit, (front.get("read_only") or "").lower() == "true", pinned, front.raw
    )


@dataclass(frozen=True)
class FileStyle:
    """How a file writes its lines: its line ending and whether it starts with a UTF-8 byte order mark."""

    eol: str = "\n"
    bom: bool = False

    @classmethod
    def of(cls, text: str) -> FileStyle:
        """The style of ``text`` (a file as read): its first line's ending, its BOM."""
        bom = text.startswith("\ufeff")
        first = text[1:] if bom else text
        end = first.find("\n")
        return cls("\r\n" if end > 0 and first[end - 1] == "\r" else "\n", bom)


def render_file(block: Block, rel: str, tree: Tree, style: FileStyle | None = None, *, new: bool = False) -> str:
    """The file for ``block`` at ``rel``: its kept frontmatter with what changed rewritten, then the value.

    ``new``: no file is there yet (an export, a new block's file in a sync): it gets a frontmatter with a description
    whatever the block has, Letta Code's default (``default_description``) when it has none, as in an agent
    repository, since Letta Code's tools refuse a file without one ("missing frontmatter"). A file rewritten outside
    an agent repository keeps the frontmatter it has, none included.

    ``style``: the line ending and BOM of the file this text replaces (``FileStyle.of`` its text), kept; without
    one, the kept frontmatter's line ending (LF when none), no BOM.

    Only keys the layout's hook allows are added: ``description`` (v1; with ``limit`` and ``read_only`` outside
    agent repositories), ``name`` and ``description`` (v2). In an agent repository ``read_only`` is never added,
    changed or removed. A ``MEMORY.md`` index of v2 has no frontmatter (a value that would read as one is refused:
    ``ValidationError``); elsewhere a value starting with a ``---`` line always gets one (``---`` / ``---`` when
    empty), so it reads back as the value. Whether the block is pinned is never
    written here (``Tree.overrides`` keeps it); outside agent repositories an older tiermem's ``pinned:`` key is
    dropped.
    """
    return _render(
        fmt.Front.of(block.metadata.get(FRONT_KEY)),
        block.label,
        block.description,
        block.value,
        block.limit,
        block.read_only,
        rel,
        tree,
        style,
        new,
    )


def new_file(label: str, value: str, rel: str, tree: Tree) -> str:
    """The file Letta Code's tools make for a new block given without frontmatter: its default description (and in
    v2 its default name), then the value."""
    return _render(fmt.Front(), label, default_description(label), value, fit_limit(value), False, rel, tree)


def _render(
    front: fmt.Front,
    label: str,
    description: str,
    value: str,
    limit: int,
    read_only: bool,
    rel: str,
    tree: Tree,
    style: FileStyle | None = None,
    new: bool = False,
) -> str:
    if style is None:
        style = FileStyle(front.eol if front.present else "\n")
    front = _with_eol(front, style.eol)
    body = value + "\n" if value else ""  # an empty value: nothing after the closing line (as Letta Code writes it)
    if tree.layout == "v2" and fmt.is_index(rel):
        if reads_as_front(body):
            raise ValidationError(
                f"{rel} cannot hold this text: an index has no frontmatter, and the text starts with a '---' line, "
                "which would be read back as one. Start it with another line (or indent the '---')."
            )
        return _styled(body, style)
    layout = tree.layout
    have = fmt.decode(front.get("description"), layout)
    if have != description or (new and not have):
        text = fmt.one_line(description)
        if not text and (tree.agent_repo or new):  # Letta Code's tools refuse a file without one: its own default
            text = default_description(label)
        front = front.set("description", fmt.encode(text, layout) if text else None, first=True)
    if layout == "v2" and front.get("name") is None:
        front = front.set("name", fmt.encode(fmt.default_name(rel), layout), first=True)
    if front.get("limit") is not None or (not tree.agent_repo and layout == "v1" and limit != fit_limit(value)):
        front = _put(front, "limit", str(limit))
    if not tree.agent_repo:
        had = front.get("read_only")
        front = _put(front, "read_only", "true" if read_only else ("false" if had is not None else None))
        front = _put(front, "pinned", None)
    if not front.present and not front.lines:
        if not reads_as_front(body):
            return _styled(body, style)
        front = fmt.Front((), True, style.eol)  # an empty frontmatter, so the value's own '---' lines stay the value's
    return _styled(fmt.MemoryFile(fmt.Front(front.lines, True, front.eol), body).text(), style)


def _with_eol(front: fmt.Front, eol: str) -> fmt.Front:
    """``front`` with every line ending in ``eol`` (its lines keep a CRLF file's ``\r``)."""
    plain = tuple(line[:-1] if line.endswith("\r") else line for line in front.lines)
    return fmt.Front(tuple(line + "\r" for line in plain) if eol == "\r\n" else plain, front.present, eol)


def _styled(text: str, style: FileStyle) -> str:
    """``text`` (frontmatter lines already in ``style``) with the body's line endings and the BOM of ``style``."""
    if style.eol == "\r\n":
        text = text.replace("\r\n", "\n").replace("\n", "\r\n")
    return ("\ufeff" if style.bom else "") + text


def reads_as_front(body: str) -> bool:
    """Whether a file made of ``body`` alone would be read as starting with a frontmatter (its first line ``---``)."""
    first = (body[1:] if body.startswith("\ufeff") else body).split("\n", 1)[0]
    return first.rstrip("\r") == "---"


def _put(front: fmt.Front, key: str, value: str | None) -> fmt.Front:
    """``key: value`` (None: no key), leaving the line as written when it already says that."""
    return front if front.get(key) == value else front.set(key, value)


def same(plan: FileBlock, block: Block) -> bool:
    """The file and the block say the same (a missing ``limit:`` agrees with any limit that fits)."""
    limit_ok = plan.limit == block.limit if plan.limit is not None else len(plan.value) <= block.limit
    return limit_ok and (plan.value, plan.description, plan.read_only, plan.pinned) == (
        block.value,
        block.description,
        block.read_only,
        is_pinned(block),
    )


def written_front(plan: FileBlock, limit: int, tree: Tree) -> str | None:
    """The frontmatter ``render_file`` writes into a new file for the block ``plan`` describes (with ``limit``) when
    the block keeps none of its own (``memfs_format.Front.raw``): a file whose frontmatter is this one says nothing
    its block's fields do not (an export read back), so the block need not keep it. None: no frontmatter (or none that
    text can have)."""
    try:
        fields = (plan.label, plan.description, plan.value, limit, plan.read_only, plan.path, tree)
        text = _render(fmt.Front(), *fields, new=True)
        return fmt.split_file(text).front.raw
    except ValidationError:
        return None


def same_front(a: str | None, b: str | None) -> bool:
    """Two kept frontmatters say the same lines (one of them may be an older tiermem's record)."""
    return fmt.Front.of(a) == fmt.Front.of(b)


# ---------------------------------------------------------------------------
# Screening a directory's file (the import, the sync, Letta Code's memory tools)
# ---------------------------------------------------------------------------

LINK_WHY = "a symbolic link: tiermem never follows links in a MemFS directory (their text may be outside it)"


class Screening(Protocol):
    """What a file is screened against (``domain.memory.Memory``): its store's limit and its credential scan."""

    max_content_chars: int

    def credentials_in(self, text: str) -> str | None: ...

    def scrub(self, text: str) -> str: ...


def linked(root: Path, rel: str) -> str | None:
    """The part of ``rel`` (a file under ``root``, or a folder on its way) that is a symbolic link, if any."""
    parts = rel.split("/")
    for i in range(1, len(parts) + 1):
        if (root / "/".join(parts[:i])).is_symlink():
            return "/".join(parts[:i])
    return None


def read_file(root: Path, rel: str) -> str:
    """The text of the regular file ``root/rel`` as it is (line endings kept), never read through a symbolic link on
    its way or at its end (``files.read_text_nofollow``); ``ValidationError`` naming the file and why otherwise."""
    if linked(root, rel) is not None:
        raise ValidationError(f"{rel}: {LINK_WHY}.")
    try:
        return read_text_nofollow(root / rel, newline="")
    except LinkedFileError:  # a link put in its place since the check
        raise ValidationError(f"{rel}: {LINK_WHY}.") from None
    except NotRegularFileError:
        raise ValidationError(f"{rel}: not a regular file.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValidationError(f"{rel}: cannot be read as UTF-8 text ({exc}).") from exc


def screen_file(root: Path, rel: str, tree: Tree, memory: Screening | None = None) -> tuple[FileBlock, str] | str:
    """The file ``root/rel`` parsed (with its text), or why tiermem cannot take it (a line ending "(skipped)"). With
    ``memory``, a file its store would refuse (``refusal``: a text over ``max_content_chars``, a credential) is one it
    cannot take, and so is one whose path (its block's label) holds a credential (named by its path redacted)."""
    held = memory.credentials_in(rel) if memory is not None else None
    if memory is not None and held is not None:  # its label would hold it: the file is named redacted, never echoed
        return (
            f"{memory.scrub(rel)}: its name holds {held}: credentials are never stored in memory, and the name is the "
            "block's label, shown wherever the block is; rename the file without it, then import or sync again "
            "(skipped)"
        )
    try:
        text = read_file(root, rel)
        plan = parse_file(rel, text, tree)
    except ValidationError as exc:
        return f"{exc} (skipped)"
    why = refusal(memory, plan) if memory is not None else None
    return (plan, text) if why is None else f"{why} (skipped)"


def refusal(memory: Screening, plan: FileBlock) -> str | None:
    """Why the file's block cannot be stored, naming the file, found before anything is written; None: it can. A text
    longer than a block holds (``max_content_chars``: the value, the description, the frontmatter the block keeps),
    then ``credentials``."""
    most = memory.max_content_chars
    for part, text in (("text", plan.value), ("description", plan.description), ("frontmatter", plan.front or "")):
        if len(text) > most:
            return (
                f"{plan.path}: its {part} has {len(text)} characters; a block holds at most {most} (the "
                "max_content_chars setting). Split the file into several files (one block each), or raise "
                "max_content_chars (tiermem config), then import or sync again"
            )
    held = credentials(memory, plan)
    return None if held is None else f"{plan.path} holds {held}"


def credentials(memory: Screening, plan: FileBlock) -> str | None:
    """What credentials the file's block would store (``Memory.credentials_in``) and what to do about it; None if
    none (or the store does not scan for them: ``secret_scan`` off). Its frontmatter counts too: the block keeps it
    (``FRONT_KEY``), unknown keys (``api_token:``) and all."""
    found = [
        f"{held} in its {part}"
        for part, text in (("text", plan.value), ("description", plan.description))
        if (held := memory.credentials_in(text)) is not None
    ]
    front = plan.front or ""
    in_front = memory.credentials_in(front)  # its lines numbered as the file's (the "---" line is line 1)
    if in_front is not None:
        rest = fmt.Front.of(plan.front).set("description", None).raw or ""
        if memory.credentials_in(rest) is not None or memory.credentials_in(plan.description) is None:
            found.append(f"{in_front} in its frontmatter")
    if not found:
        return None
    return (
        f"{' and '.join(found)}: credentials are never stored in memory; remove it from the file (keep a reference "
        "instead, such as the name of the environment variable that holds it), then import or sync again"
    )
