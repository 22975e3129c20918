"""Letta Code's memory files (MemFS) as its 0.32 release reads and writes them: pure text in, values out.

A memory file is ``---``, frontmatter lines, ``---``, then the body. Letta Code reads frontmatter line
by line as ``key: value``, split at the first ``:``, trimmed, with no YAML unquoting
(``description: Family: names`` is the description ``Family: names``; quotes stay). Lines that start
with a space continue the key above (block scalars, ``description: |``). Layout v2 (a root ``MEMORY.md``
index) writes ``name`` and ``description`` as JSON strings and reads them back unquoted.

This module also holds the rules its pre-commit hook enforces (``hook_problems``), what its prompt
shows (``in_prompt``), how its ``memory`` tool turns a path into a label (``label_of_path``) and its
``memory_apply_patch`` format (``parse_codex_patch``, ``apply_hunks``). Nothing here touches disk.

Why this module is long: it is one foreign format's whole rulebook (frontmatter, layouts, the pre-commit hook's
rules, the memory tool's paths, the patch format), kept together so it can be checked against a Letta Code release
in one place.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Literal

from ..base.errors import EditError, ValidationError

Layout = Literal["v1", "v2"]
SUFFIX = ".md"
FRONT_KEY = "memfs_front"  # block metadata: the frontmatter lines of the file a block came from, as written
INDEX = "MEMORY.md"  # v2: a folder's index (no frontmatter); the root one marks the layout
PROMPT_DIR = "system/"  # v1: files under it are compiled into the prompt
CHECKED_DIRS = ("system/", "reference/")  # v1: the folders whose files the hook checks
V1_KEYS = ("description", "read_only", "limit")  # what the v1 hook allows in checked folders
V2_KEYS = ("name", "description")  # exactly these in every v2 memory file but the indexes
_BLOCK_SCALAR = re.compile(r"^([|>])([+-]?)$")


class FrontmatterError(ValidationError):
    """A memory file whose frontmatter Letta Code cannot read either (opened and never closed)."""


@dataclass(frozen=True)
class Front:
    """A file's frontmatter exactly as written: its lines between the ``---`` lines, kept for writing back.

    ``lines`` are as written (a CRLF file's keep their ``\r``); ``eol`` is the opening line's ending.
    ``raw`` is the exact text between the opening and the closing ``---`` (the opening line's ending, then
    every line with its own), so ``---\n---`` (``"\n"``), ``---\n\n---`` (``"\n\n"``) and CRLF files all
    come back byte for byte, and a file with frontmatter never has an empty ``raw``.
    """

    lines: tuple[str, ...] = ()
    present: bool = False
    eol: str = "\n"

    @classmethod
    def of(cls, raw: str | None) -> Front:
        """From the text kept by ``raw`` (None: the file had no frontmatter). An older tiermem kept the lines
        joined by ``\n`` (no leading line ending): read as such, except a record that both starts and ends with a
        line break (a frontmatter whose first and last lines were blank), which reads as this form: those two blank
        lines are dropped at the next write."""
        if raw is None:
            return cls()
        for eol in ("\r\n", "\n"):
            if raw.startswith(eol) and raw.endswith("\n"):
                inner = raw[len(eol) :]
                return cls(tuple(inner[:-1].split("\n")) if inner else (), True, eol)
        return cls(tuple(raw.split("\n")) if raw else (), True)

    @property
    def raw(self) -> str | None:
        return self.eol + "".join(line + "\n" for line in self.lines) if self.present else None

    @property
    def _plain(self) -> tuple[str, ...]:
        return tuple(line[:-1] if line.endswith("\r") else line for line in self.lines)

    def _entries(self) -> list[tuple[str, int, int]]:
        """(key, first line, end line) of every top-level ``key: value`` line with the lines that continue it."""
        out: list[tuple[str, int, int]] = []
        rows = self._plain
        i = 0
        while i < len(rows):
            line = rows[i]
            if not line.strip() or line[0] in " \t" or ":" not in line:
                i += 1
                continue
            scalar = _BLOCK_SCALAR.match(line.split(":", 1)[1].strip()) is not None
            j = i + 1
            while j < len(rows) and (rows[j][:1] in (" ", "\t") and rows[j].strip() or scalar and not rows[j].strip()):
                j += 1
            while j > i + 1 and not rows[j - 1].strip():  # blank lines after a scalar belong to nobody
                j -= 1
            out.append((line.split(":", 1)[0].strip(), i, j))
            i = j
        return out

    def keys(self) -> list[str]:
        return [key for key, _, _ in self._entries()]

    def get(self, key: str) -> str | None:
        """The value of ``key`` as Letta Code's prompt shows it: the text after the first ``:``, trimmed; a block
        scalar (``|`` or ``>``, with ``+``/``-``) folded from its indented lines. None when the key is absent."""
        rows = self._plain
        for name, start, end in self._entries():
            if name != key:
                continue
            value = rows[start].split(":", 1)[1].strip()
            scalar = _BLOCK_SCALAR.match(value)
            if scalar:
                return _block_scalar(list(rows[start + 1 : end]), scalar.group(1), scalar.group(2))
            return value
        return None

    def set(self, key: str, value: str | None, *, first: bool = False) -> Front:
        """``key: value`` in place of the key's lines (or appended, or first); None removes the key."""
        lines = list(self.lines)
        row = f"{key}: {value}" + ("\r" if self.eol == "\r\n" else "")
        for name, start, end in self._entries():
            if name == key:
                lines[start:end] = [] if value is None else [row]
                return Front(tuple(lines), True, self.eol)
        if value is None:
            return self
        return Front(((row,) + tuple(lines)) if first else (*lines, row), True, self.eol)


def _block_scalar(lines: list[str], style: str, chomp: str) -> str:
    """A YAML-style block scalar the way Letta Code's prompt compiler folds it."""
    indents = [len(x) - len(x.lstrip()) for x in lines if x.strip()]
    cut = min(indents) if indents else 0
    rows = [x[cut:] if x.strip() else "" for x in lines]
    if style == "|":
        text = "\n".join(rows)
    else:
        text, breaks = "", 0
        for row in rows:
            if not row:
                breaks += 1
                continue
            text += ("\n" * breaks if breaks else " ") if text else "\n" * breaks
            text += row
            breaks = 0
        text += "\n" * breaks
    if chomp == "+":
        return text + "\n"
    text = text.rstrip("\n")
    return text if chomp == "-" else text + "\n"


@dataclass(frozen=True)
class MemoryFile:
    """A memory file split into its frontmatter and its body (the text after the closing ``---`` line)."""

    front: Front = field(default_factory=Front)
    body: str = ""

    def text(self) -> str:
        if not self.front.present:
            return self.body
        closing = "---\r\n" if self.front.eol == "\r\n" else "---\n"
        return f"---{self.front.raw}{closing}{self.body}"


def split_file(text: str) -> MemoryFile:
    """Frontmatter and body. A file that does not start with a ``---`` line has no frontmatter; one whose
    frontmatter is never closed raises ``FrontmatterError`` (Letta Code's tools and hook refuse it too)."""
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.split("\n")
    if lines[0].rstrip("\r") != "---":
        return MemoryFile(Front(), text)
    eol = "\r\n" if lines[0] == "---\r" else "\n"
    for i in range(1, len(lines)):
        if lines[i].rstrip("\r") == "---":
            return MemoryFile(Front(tuple(lines[1:i]), True, eol), "\n".join(lines[i + 1 :]))
    raise FrontmatterError("its frontmatter starts with '---' but has no closing '---' line")


# ---------------------------------------------------------------------------
# Values as each layout writes them
# ---------------------------------------------------------------------------


def one_line(text: str) -> str:
    """A frontmatter value: Letta Code writes line breaks as spaces and trims."""
    return " ".join(text.replace("\r\n", "\n").split("\n")).strip()


def decode(value: str | None, layout: Layout) -> str | None:
    """A v2 value is a JSON (or single-quoted) string; v1 values are literal."""
    if value is None or layout == "v1":
        return value
    text = value.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        try:
            loaded = json.loads(text)
        except ValueError:
            return text[1:-1]
        return loaded if isinstance(loaded, str) else text
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    return text


def encode(value: str, layout: Layout) -> str:
    return json.dumps(one_line(value), ensure_ascii=False) if layout == "v2" else one_line(value)


def default_name(rel: str) -> str:
    """The v2 ``name`` Letta Code gives a new file: its file name's words, capitalised."""
    stem = rel.rsplit("/", 1)[-1]
    stem = stem[: -len(SUFFIX)] if stem.lower().endswith(SUFFIX) else stem
    words = [w for w in re.split(r"[-_]+", stem) if w]
    return " ".join(w[0].upper() + w[1:] for w in words) or "Memory"


# ---------------------------------------------------------------------------
# Layout rules
# ---------------------------------------------------------------------------


def is_index(rel: str) -> bool:
    return rel == INDEX or rel.endswith("/" + INDEX)


def layout_of(paths: set[str] | frozenset[str], policy: str | None = None) -> Layout:
    """v2 when the directory has a root ``MEMORY.md`` (and its hook allows the root layout), else v1."""
    return "v2" if INDEX in paths and policy != "legacy-only" else "v1"


def in_prompt(rel: str, layout: Layout) -> bool:
    """Whether Letta Code compiles the file into its prompt: ``system/**`` (v1), root files (v2)."""
    if not rel.endswith(SUFFIX):
        return False
    return "/" not in rel if layout == "v2" else rel.startswith(PROMPT_DIR)


def projected(rel: str, paths: set[str] | frozenset[str], layout: Layout) -> bool:
    """v2: a file is memory only when every folder above it has a ``MEMORY.md`` (``skills/`` never is)."""
    if layout == "v1":
        return True
    if rel.startswith("skills/"):
        return False
    parts = rel.split("/")[:-1]
    return all("/".join(parts[: i + 1]) + "/" + INDEX in paths for i in range(len(parts)))


def hook_checked(rel: str, paths: set[str] | frozenset[str], layout: Layout) -> bool:
    """Whether the pre-commit hook validates this file's frontmatter."""
    if layout == "v2":
        return rel.endswith(SUFFIX) and projected(rel, paths, layout)
    return rel.endswith(SUFFIX) and rel.startswith(CHECKED_DIRS)


def _git_quotes(rel: str) -> bool:
    """Whether git prints the path ``rel`` quoted (``core.quotePath``, on by default): a control character, a ``"``,
    a backslash, or any character outside ASCII."""
    return any(c in '"\\' or ord(c) < 0x20 or ord(c) >= 0x7F for c in rel)


def unreadable_path(rel: str, layout: Layout) -> str | None:
    """Why Letta Code's pre-commit hook cannot read the file ``rel`` at all, so it refuses every commit holding it
    ("Memory validation could not read Git contents"); None when it can. v1 takes the staged paths under
    ``system/`` and ``reference/`` as shell words: one git prints as it is and that holds a space is split in two,
    neither a file. v2 reads every root file by the name git prints: a quoted one names no file."""
    if not rel.endswith(SUFFIX):
        return None
    if layout == "v1" and rel.startswith(CHECKED_DIRS + tuple("memory/" + d for d in CHECKED_DIRS)):
        if " " in rel and not _git_quotes(rel):
            return (
                "Letta Code's pre-commit hook splits the paths under system/ and reference/ at spaces, so it cannot "
                "read this file and refuses every commit that adds or changes it; name it without a space (- or _ "
                "instead)"
            )
    elif layout == "v2" and "/" not in rel and _git_quotes(rel):
        return (
            "Letta Code's pre-commit hook reads each root file by the name git prints, which git quotes for this one "
            "(a character outside plain ASCII, a quote or a backslash), so it cannot read it and refuses every commit "
            "while it is there; name it in plain ASCII"
        )
    return None


def hook_problems(rel: str, text: str, previous: str | None, layout: Layout) -> list[str]:
    """What Letta Code's pre-commit hook would say about committing ``text`` at ``rel`` (previously ``previous``,
    None for a new file); [] when it would pass. Call it only for files ``hook_checked`` says it reads."""
    why = unreadable_path(rel, layout)
    if why is not None:
        return [f"{rel}: {why}"]
    if layout == "v2" and is_index(rel):
        return [f"{rel}: MEMORY.md must not have frontmatter"] if text.split("\n")[0] == "---" else []
    lines = text.split("\n")
    if lines[0] != "---":
        return [f"{rel}: missing frontmatter (must start with ---)"]
    if "---" not in lines[1:]:
        return [f"{rel}: frontmatter opened but never closed (missing closing ---)"]
    closing = lines.index("---", 1)
    old_read_only = _hook_value(previous, "read_only")
    if layout == "v1" and old_read_only == "true":
        return [f"{rel}: file is read_only and cannot be modified"]
    allowed = V2_KEYS if layout == "v2" else V1_KEYS
    problems: list[str] = []
    seen: set[str] = set()
    for line in lines[1:closing]:
        if not line or (layout == "v1" and line[0] in " \t"):
            continue
        key_part, sep, value = line.partition(":")
        key = key_part.strip() if layout == "v2" else key_part.replace(" ", "")
        value = (value if sep else line).strip(" ")
        if key not in allowed:
            problems.append(f"{rel}: unknown frontmatter key '{key}' (allowed: {' '.join(allowed)})")
            continue
        if layout == "v2" and key in seen:
            problems.append(f"{rel}: duplicate frontmatter key '{key}'")
        seen.add(key)
        if key == "read_only":
            if previous is None:
                problems.append(f"{rel}: 'read_only' is a protected field and cannot be set by the agent")
            elif value != old_read_only:
                problems.append(f"{rel}: 'read_only' is a protected field and cannot be changed by the agent")
        if (layout == "v2" or key == "description") and (not value or (layout == "v2" and value in ('""', "''"))):
            problems.append(f"{rel}: '{key}' must not be empty")
    for key in V2_KEYS if layout == "v2" else ("description",):
        if key not in seen:
            problems.append(f"{rel}: missing required field '{key}'")
    if layout == "v1" and old_read_only and not _hook_value(text, "read_only"):
        problems.append(f"{rel}: 'read_only' is a protected field and cannot be removed by the agent")
    return problems


def _hook_value(text: str | None, key: str) -> str:
    """The hook's reading of a key: every ``key:`` line's value, trimmed of spaces, joined ("" when absent)."""
    if text is None:
        return ""
    lines = text.split("\n")
    if "---" not in lines[1:]:
        return ""
    end = lines.index("---", 1)
    return "\n".join(x[len(key) + 1 :].strip(" ") for x in lines[1:end] if x.startswith(key + ":"))


# ---------------------------------------------------------------------------
# The memory tool's paths
# ---------------------------------------------------------------------------


def label_of_path(raw: object, field_name: str, *, tool: str = "memory", root: str | None = None) -> str:
    """The label a path names, as Letta Code's memory tools read it: relative (``system/contacts.md``), a leading
    ``memory/`` and the ``.md`` suffix dropped, empty segments dropped; absolute only inside ``root``."""
    if not isinstance(raw, str) or not raw.strip():
        raise EditError(f"{tool}: '{field_name}' must be a non-empty string")
    text = raw.strip().replace("\\", "/")
    if text.startswith(("~/", "$HOME/")):
        raise EditError(
            f"{tool}: '{field_name}' must be a memory-relative file path, not a home-relative filesystem path"
        )
    if text.startswith("/"):
        base = None if root is None else root.rstrip("/") + "/"
        if base is None or not text.startswith(base):
            raise EditError(f"{tool}: '{field_name}' must be a relative path like system/contacts.md")
        text = text[len(base) :]
    if text.startswith("memory/"):
        text = text[len("memory/") :]
    if text.endswith(SUFFIX):
        text = text[: -len(SUFFIX)]
    segments = [s for s in text.split("/") if s]
    if not segments:
        raise EditError(f"{tool}: '{field_name}' resolves to an empty memory label")
    if any(s in (".", "..") for s in segments):
        raise EditError(f"{tool}: '{field_name}' contains invalid path traversal segment")
    if any("\x00" in s for s in segments):
        raise EditError(f"{tool}: '{field_name}' contains invalid null bytes")
    return "/".join(segments)


def check_label_allowed(label: str, layout: Layout, tool: str = "memory") -> None:
    """Letta Code's memory tools refuse, in layout v2, the ``system/`` folder (core memory is the root files) and
    ``skills/`` (not memory); with its words."""
    if layout != "v2":
        return
    if label == "system" or label.startswith("system/"):
        raise EditError(f"{tool}: core memory uses root Markdown files, not system/")
    if label == "skills" or label.startswith("skills/"):
        raise EditError(f"{tool}: skills are managed by the skill/file tooling, not the memory tool")


# ---------------------------------------------------------------------------
# memory_apply_patch: the codex-style patch format
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PatchOp:
    kind: Literal["add", "update", "delete"]
    label: str  # the file it reads (update, delete) or creates (add)
    target: str  # where the result goes: ``label``, or the ``*** Move to:`` label
    lines: tuple[str, ...] = ()  # add: the file's lines
    hunks: tuple[tuple[str, ...], ...] = ()  # update: each hunk's ' ', '-', '+' lines


TOOL = "memory_apply_patch"


def parse_codex_patch(text: object, *, root: str | None = None) -> list[PatchOp]:
    """``*** Begin Patch`` ... ``*** End Patch`` with ``Add File`` (``+`` lines), ``Update File`` (optional
    ``Move to``, then ``@@`` hunks of `` ``, ``-``, ``+`` lines) and ``Delete File`` operations."""
    if not isinstance(text, str) or not text.strip():
        raise EditError(f"{TOOL}: 'input' must be a non-empty string")
    lines = re.split(r"\r?\n", text)
    if lines[0].strip() != "*** Begin Patch":
        raise EditError(f'{TOOL}: patch must start with "*** Begin Patch"')
    end = next((i for i, x in enumerate(lines) if x.strip() == "*** End Patch"), None)
    if end is None:
        raise EditError(f'{TOOL}: patch must end with "*** End Patch"')
    if any(x.strip() for x in lines[end + 1 :]):
        raise EditError(f"{TOOL}: unexpected content after *** End Patch")
    ops: list[PatchOp] = []
    i = 1
    while i < end:
        line = lines[i].strip()
        if not line:
            i += 1
            continue
        if line.startswith("*** Add File:"):
            raw = line[len("*** Add File:") :].strip()
            label = label_of_path(raw, "Add File path", tool=TOOL, root=root)
            i += 1
            body: list[str] = []
            while i < end and not lines[i].startswith("*** "):
                if not lines[i].startswith("+"):
                    raise EditError(f"{TOOL}: invalid Add File line at {i + 1}: expected '+' prefix")
                body.append(lines[i][1:])
                i += 1
            if not body:
                raise EditError(f"{TOOL}: Add File for {raw} must include at least one + line")
            ops.append(PatchOp("add", label, label, lines=tuple(body)))
        elif line.startswith("*** Update File:"):
            raw = line[len("*** Update File:") :].strip()
            label = label_of_path(raw, "Update File path", tool=TOOL, root=root)
            target = label
            i += 1
            if i < end and lines[i].startswith("*** Move to:"):
                target = label_of_path(lines[i][len("*** Move to:") :].strip(), "Move to path", tool=TOOL, root=root)
                i += 1
            hunks: list[tuple[str, ...]] = []
            while i < end and not lines[i].startswith("*** "):
                if not lines[i].startswith("@@"):
                    raise EditError(f"{TOOL}: invalid Update File body at {i + 1}: expected '@@' hunk header")
                i += 1
                hunk: list[str] = []
                while i < end and not lines[i].startswith(("@@", "*** ")):
                    row = lines[i]
                    if row and row[0] not in " +-":
                        raise EditError(f"{TOOL}: invalid hunk line at {i + 1}: expected one of ' ', '+', '-'")
                    hunk.append(row)
                    i += 1
                if i < end and lines[i] == "*** End of File":
                    i += 1
                hunks.append(tuple(hunk))
            if not hunks:
                raise EditError(f"{TOOL}: Update File for {raw} has no hunks")
            ops.append(PatchOp("update", label, target, hunks=tuple(hunks)))
        elif line.startswith("*** Delete File:"):
            label = label_of_path(line[len("*** Delete File:") :].strip(), "Delete File path", tool=TOOL, root=root)
            ops.append(PatchOp("delete", label, label))
            i += 1
        else:
            raise EditError(f"{TOOL}: unknown patch directive at line {i + 1}: {line}{_file_header_hint(line)}")
    if not ops:
        raise EditError(f"{TOOL}: no file operations found in patch")
    return ops


# The Letta server's multi-block headers, and the file header of Letta Code's patch that does the same
FILE_HEADERS = {
    "*** Add Block:": "*** Add File:",
    "*** Update Block:": "*** Update File:",
    "*** Delete Block:": "*** Delete File:",
}


def _file_header_hint(line: str) -> str:
    """What to write instead of one of the Letta server's block headers, which Letta Code's patch does not read either
    (it too calls them an unknown directive): the file header naming the block's file."""
    for block, file in FILE_HEADERS.items():
        if line.startswith(block):
            label = line[len(block) :].strip() or "<label>"
            return (
                f". Letta Code's memory_apply_patch names memory files, not blocks: write '{file} {label}.md' "
                f"instead (the file of block {label!r}). The patch changed nothing."
            )
    return ""


def apply_hunks(content: str, hunks: tuple[tuple[str, ...], ...], where: str) -> str:
    """Each hunk's old text (context and ``-`` lines) replaced by its new text (context and ``+`` lines), at the
    first place the old text occurs; a hunk whose old text ends a file without a final newline matches too."""
    for hunk in hunks:
        old = "".join(("" if row == "" else row[1:]) + "\n" for row in hunk if row == "" or row[0] in " -")
        new = "".join(("" if row == "" else row[1:]) + "\n" for row in hunk if row == "" or row[0] in " +")
        if not old:
            raise EditError(f"{TOOL}: failed to apply hunk to {where}: hunk has no anchor/context")
        at = content.find(old)
        if at != -1:
            content = content[:at] + new + content[at + len(old) :]
            continue
        at = content.find(old[:-1])
        if at == -1:
            preview = (
                content
                if len(content) <= 4000
                else content[:4000] + f"\n... <truncated {len(content) - 4000} chars> ..."
            )
            raise EditError(
                f"{TOOL}: failed to apply hunk to {where}: context not found\n\n"
                "The patch old/context lines did not match the current memory file exactly. Read the current memory "
                f"file and retry with exact context.\n\nFailed old/context chunk:\n{old}\nCurrent file content:\n{preview}"
            )
        content = content[:at] + (new[:-1] if new.endswith("\n") else new) + content[at + len(old) - 1 :]
    return content


# ---------------------------------------------------------------------------
# A version's reason (Letta Code's commit message), kept in tiermem's history as the operation
# ---------------------------------------------------------------------------


def reason_operation(tool: str, reason: str) -> str:
    """The history operation of an edit made with a reason: ``memory str_replace: <reason>``."""
    return f"{tool}: {one_line(reason)}"


def reason_of(operation: str) -> str | None:
    """The reason an edit was made with (see ``reason_operation``), or None."""
    head, sep, reason = operation.partition(": ")
    if sep and (head.startswith("memory ") or head == "memory_apply_patch") and reason.strip():
        return reason
    return None
