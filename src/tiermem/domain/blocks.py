"""Pure Letta edit semantics for core memory blocks, and the core-memory renderer.

Every function here takes values and returns a new value or raises ``EditError`` /
``ValidationError``. Nothing here reads or writes storage. ``apply_edit`` is the one
place where a block's read-only flag and character limit are enforced.

Why this module is long: each edit's semantics (Letta's texts, checks and argument names, per tool) sits beside the
renderer whose line numbers the edits refuse; split, a guard would change in one module and the view it guards in
another.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from ..base.errors import EditError, LabelTakenError, NotFoundError, ValidationError
from ..base.records import Block
from . import secrets

if TYPE_CHECKING:
    from ..base.config import BlockSpec

READ_ONLY_ERROR = "Error This block is read-only and cannot be edited."
LINE_NUMBER_WARNING = (
    "# NOTE: Line numbers shown below (with arrows like '1→') are to help during editing. "
    "Do NOT include line number prefixes in your memory edit tool calls."
)
_LINE_NUMBER_PREFIX = re.compile(r"^[ \t]*\d+→[ \t]*", re.MULTILINE)
# the ``memory`` tool's view numbers its lines as ``cat -n`` does: the number right-aligned in 6 columns, then a tab
_VIEW_LINE_PREFIX = re.compile(r"^(?: {5}\d| {4}\d{2}| {3}\d{3}| {2}\d{4}| \d{5}|\d{6,})\t", re.MULTILINE)
# Unicode's Bidi_Control characters: the marks and the embedding, override and isolate controls (U+202E shows "abc"
# as "cba"); refused in labels, where they could make one label display as another
_BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
MAX_LABEL_CHARS = 1024
MAX_SEGMENT_BYTES = 250  # a file name is at most 255 bytes, and the label's last segment gets ".md"
MEMORY_PATH_PREFIX = "/memories/"
PINNED_KEY = "pinned"  # block metadata: "false" keeps a block out of the rendered core memory (detached)
LETTA_LABEL_KEY = "letta_label"  # block metadata: the label as an imported file spelled it, when it differed


def shown_label(label: object, most: int = 80) -> str:
    """A label as an error quotes it: each credential in it replaced by ``[redacted: KIND]`` (a refusal never
    echoes a secret), then cut to ``most`` characters, quoted."""
    text = label if isinstance(label, str) else str(label)
    text = secrets.redact(text).text
    return repr(text if len(text) <= most else text[:most] + "...")


def validate_label(label: str) -> str:
    """Return the normalised label, or raise ``ValidationError`` naming what is wrong.

    A label is a path of file names separated by ``/``, kept as written (Letta Code's MemFS: the
    file ``reference/Team-Notes.md`` is the block ``reference/Team-Notes``): capitals, dots, spaces
    and any other character a file name may hold are allowed. Refused is what cannot be one
    file name per segment: empty, ``.`` and ``..`` segments, hidden ones (``.x``: a synced directory
    skips them), control characters, ``\\``, segments over 250 bytes, labels over 1,024 characters;
    and bidirectional controls (U+202E and the like), which could make one label display as another.
    One leading ``/`` is accepted and removed (``/note_directory`` is ``note_directory``).
    """
    name = lookup_label(label)
    problem = _label_problem(name)
    if problem:
        raise ValidationError(
            f"Invalid block label {shown_label(label)}: {problem}. Labels are paths of file names separated by '/', "
            "for example 'project_notes' or 'system/human/family'."
        )
    return name


def _label_problem(name: str) -> str:
    if not name:
        return "it is empty"
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in name):
        return "it contains a control character"
    bidi = next((c for c in name if c in _BIDI_CONTROLS), None)
    if bidi is not None:
        return (
            f"it contains the bidirectional control character U+{ord(bidi):04X}, which can make a label display as "
            "another; write the label without it"
        )
    if "\\" in name:
        return "the character '\\' is not allowed (separate folders with '/')"
    if len(name) > MAX_LABEL_CHARS:
        return f"it has {len(name)} characters, at most {MAX_LABEL_CHARS} are allowed"
    for segment in name.split("/"):
        if not segment:
            return "it has an empty path segment ('//', or a '/' at the end)"
        if segment in (".", ".."):
            return "'.' and '..' segments are not allowed"
        if segment.startswith("."):
            return f"the segment {shown_label(segment, 20)} starts with '.' (a hidden file)"
        size = len(segment.encode("utf-8", "surrogatepass"))
        if size > MAX_SEGMENT_BYTES:
            return f"the segment {shown_label(segment, 20)} has {size} bytes, at most {MAX_SEGMENT_BYTES} are allowed"
    return ""


def lookup_label(label: object) -> str:
    """The label to look a block up by: a leading ``/`` is ignored, as when creating one. Not text:
    ``ValidationError`` (every check of a label starts here)."""
    if not isinstance(label, str):
        raise ValidationError(
            f"Invalid block label {shown_label(label)}: a label is text, for example 'project_notes'."
        )
    return label[1:] if label.startswith("/") else label


def version_number(block: Block, version: object, *, tool: str | None = None, command: str | None = None) -> int:
    """``version`` as a version of ``block``: a positive whole number no larger than its newest (a larger one,
    however large, is one it does not have: the store is never asked about it). Else ``ValidationError`` or
    ``no_version``'s ``NotFoundError``. ``tool``: the tool that lists the versions, named to a model; ``command``:
    the command that does, named to a person at the command line."""
    version = whole_version(version, tool=tool, command=command)
    if version > block.version:
        raise no_version(block, version, tool=tool, command=command)
    return version


def whole_version(version: object, *, tool: str | None = None, command: str | None = None) -> int:
    """``version`` if it is a positive whole number (of any block), else ``ValidationError`` (see
    ``version_number``)."""
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        listed = f" from {tool}" if tool else ""
        raise ValidationError(
            f"version must be a positive whole number{listed}, got {version!r}.",
            person=f"The version must be a positive whole number, got {version!r}; `{command}` lists them."
            if command
            else None,
        )
    return version


def no_version(block: Block, version: int, *, tool: str | None = None, command: str | None = None) -> NotFoundError:
    """``block`` has no version ``version`` (past its newest, or forgotten): what to tell (see ``version_number``)."""
    found = f"Block {block.label!r} has no version {version}; its versions are 1 to {block.version}."
    return NotFoundError(
        f"{found} See {tool} for the list." if tool else found,
        person=f"{found} `{command}` lists them." if command else None,
    )


def label_from_letta(label: str) -> str:
    """A label from a Letta file, normalised: leading ``/`` removed, empty segments (``a//b``) dropped.

    The caller keeps the original under ``LETTA_LABEL_KEY`` so an export can hand it back.
    """
    if not isinstance(label, str):
        return validate_label(label)
    if any(ord(c) < 32 for c in label):
        return validate_label(label)  # the error names the control character
    return validate_label("/".join(s for s in label.split("/") if s) or label)


def is_pinned(block: Block) -> bool:
    """Pinned blocks are rendered in core memory every turn; detached ones only listed by label."""
    return block.metadata.get(PINNED_KEY, "true") != "false"


def label_from_path(path: str) -> str:
    """Map the ``memory`` tool's ``/memories/<label>`` path to a label."""
    if not isinstance(path, str) or not path.startswith(MEMORY_PATH_PREFIX):
        raise ValidationError(
            f"Invalid path {path!r}: memory paths look like '/memories/<label>', for example '/memories/human'."
        )
    return validate_label(path[len(MEMORY_PATH_PREFIX) :])  # a '/' at the end is refused, as in any label


def reject_line_numbers(arg: str, text: str, *, banner: bool = True, view: bool = False) -> None:
    """Refuse edit arguments that carry display-only line numbers or the warning banner; ``view``: the ``memory``
    tool's view numbers (``"     3\t"``) too."""
    if _LINE_NUMBER_PREFIX.search(text) or (view and _VIEW_LINE_PREFIX.search(text)):
        raise EditError(
            f"{arg} contains a line number prefix, which is not allowed. Do not include line numbers "
            "when calling memory tools (line numbers are for display purposes only)."
        )
    if banner and LINE_NUMBER_WARNING in text:
        raise EditError(
            f"{arg} contains a line number warning, which is not allowed. Do not include line number "
            "information when calling memory tools (line numbers are for display purposes only)."
        )


PATCH_LINE_NUMBERS = (  # Letta's words (core_tool_executor.memory_apply_patch)
    "Patch contains a line number prefix, which is not allowed. Do not include line numbers (they are for display "
    "only)."
)
PATCH_BANNER = "Patch contains the line number warning banner, which is not allowed. Provide only the text to edit."


def reject_patch_line_numbers(patch: str) -> None:
    """``reject_line_numbers`` for ``memory_apply_patch``, in Letta's words for a patch: the patch as a whole (a
    context line ``" 1→ x"``, the banner), and each line's text after its ``' '``, ``'-'`` or ``'+'``: Letta's
    anchored rule alone never sees the number of ``"+1→ x"``, which would be stored as written."""
    if _LINE_NUMBER_PREFIX.search(patch):
        raise EditError(PATCH_LINE_NUMBERS)
    if LINE_NUMBER_WARNING in patch:
        raise EditError(PATCH_BANNER)
    if any(_LINE_NUMBER_PREFIX.search(line[1:]) for line in patch_lines(patch) if line[:1] in (" ", "-", "+")):
        raise EditError(PATCH_LINE_NUMBERS)


# ---------------------------------------------------------------------------
# Edits: each is a small frozen value; ``compute`` returns the new block value, ``texts`` names its texts by the
# arguments they came in as (for errors about them: size, NUL, line numbers).
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ArgNames:
    """How a tool names the arguments an edit's texts come from: ``StrReplace`` and ``Insert`` serve Letta's
    ``memory_replace`` / ``memory_insert`` and the ``memory`` tool's ``str_replace`` / ``insert``."""

    old: str = "old_string"
    new: str = "new_string"
    text: str = "new_string"  # the inserted text
    instead: str = "to add text, use memory_insert; to rewrite the whole block, use memory_rethink"
    view_numbers: bool = False  # also refuse the ``memory`` tool's view line numbers ("     3\t")


LETTA_ARGS = ArgNames()
MEMORY_TOOL_ARGS = ArgNames(
    old="old_str", new="new_str", text="insert_text", instead="to add text, use the insert command", view_numbers=True
)


@dataclass(frozen=True)
class Append:
    content: str
    operation: str = "core_memory_append"

    def texts(self) -> tuple[tuple[str, str], ...]:
        return (("content", self.content),)

    def compute(self, value: str, label: str) -> str:
        return f"{value}\n{self.content}"


@dataclass(frozen=True)
class ReplaceAll:
    """``core_memory_replace``: replace every occurrence; empty ``new`` deletes."""

    old: str
    new: str
    operation: str = "core_memory_replace"

    def texts(self) -> tuple[tuple[str, str], ...]:
        return (("old_content", self.old), ("new_content", self.new))

    def compute(self, value: str, label: str) -> str:
        if not self.old:
            raise EditError(
                "old_content is empty: core_memory_replace needs the exact text to replace. "
                "To add text, use core_memory_append; to rewrite the whole block, use memory_rethink."
            )
        if self.old not in value:
            raise EditError(f"Old content '{self.old}' not found in memory block '{label}'")
        return value.replace(self.old, self.new)


@dataclass(frozen=True)
class StrReplace:
    """``memory_replace``: ``old`` must occur exactly once, verbatim."""

    old: str
    new: str
    operation: str = "memory_replace"
    args: ArgNames = LETTA_ARGS

    def texts(self) -> tuple[tuple[str, str], ...]:
        return ((self.args.old, self.old), (self.args.new, self.new))

    def compute(self, value: str, label: str) -> str:
        old_arg = self.args.old
        reject_line_numbers(old_arg, self.old, view=self.args.view_numbers)
        reject_line_numbers(self.args.new, self.new, banner=False, view=self.args.view_numbers)
        if not self.old:
            raise EditError(
                f"No replacement was performed: {old_arg} is empty, and it must be the exact text to replace. "
                f"{self.args.instead[0].upper()}{self.args.instead[1:]}."
            )
        count = value.count(self.old)
        if count == 0:
            raise EditError(
                f"No replacement was performed, {old_arg} `{self.old}` did not appear verbatim in "
                f"memory block with label `{label}`."
            )
        if count > 1:
            lines = [i for i, line in enumerate(value.split("\n"), start=1) if self.old in line]
            if not lines:  # the match spans lines: report where each occurrence starts
                lines = _occurrence_lines(value, self.old)
            raise EditError(
                f"No replacement was performed. Multiple occurrences of {old_arg} `{self.old}` in "
                f"lines {lines}. Please ensure it is unique."
            )
        return value.replace(self.old, self.new, 1)


def _occurrence_lines(value: str, needle: str) -> list[int]:
    lines: list[int] = []
    start = value.find(needle)
    while start != -1:
        lines.append(value.count("\n", 0, start) + 1)
        start = value.find(needle, start + 1)
    return lines


@dataclass(frozen=True)
class Insert:
    """``memory_insert``: -1 appends, 0 inserts before the first line, k after line k."""

    text: str
    line: int = -1
    operation: str = "memory_insert"
    args: ArgNames = LETTA_ARGS

    def texts(self) -> tuple[tuple[str, str], ...]:
        return ((self.args.text, self.text),)

    def compute(self, value: str, label: str) -> str:
        reject_line_numbers(self.args.text, self.text, view=self.args.view_numbers)
        lines = value.split("\n")
        n = len(lines)
        if (
            isinstance(self.line, bool)
            or not isinstance(self.line, int)
            or (self.line != -1 and not 0 <= self.line <= n)
        ):
            raise EditError(
                f"Invalid `insert_line` parameter: {self.line}. It should be within the range of lines of "
                f"the memory block: [0, {n}], or -1 to append to the end of the memory block."
            )
        if value == "":
            return self.text  # an empty block has no line to keep: no leading blank line
        at = n if self.line == -1 else self.line
        return "\n".join(lines[:at] + self.text.split("\n") + lines[at:])


@dataclass(frozen=True)
class Rethink:
    """``memory_rethink`` (and human ``set``): replace the whole value."""

    new: str
    operation: str = "memory_rethink"
    check_line_numbers: bool = True

    def texts(self) -> tuple[tuple[str, str], ...]:
        return (("new_memory", self.new),)

    def compute(self, value: str, label: str) -> str:
        if self.check_line_numbers:
            reject_line_numbers("new_memory", self.new)
        return self.new


@dataclass(frozen=True)
class Patch:
    """``memory_apply_patch``: unified-diff style hunks applied in order."""

    patch: str
    operation: str = "memory_apply_patch"

    def texts(self) -> tuple[tuple[str, str], ...]:
        return (("patch", self.patch),)

    def compute(self, value: str, label: str) -> str:
        return apply_hunks(value, parse_patch(self.patch))


@dataclass(frozen=True)
class FirstReplace:
    """Letta Code's ``memory`` str_replace: the first occurrence of ``old`` becomes ``new``."""

    old: str
    new: str
    operation: str = "memory str_replace"

    def texts(self) -> tuple[tuple[str, str], ...]:
        return (("old_string", self.old), ("new_string", self.new))

    def compute(self, value: str, label: str) -> str:
        at = value.find(self.old) if self.old else -1
        if at == -1:
            raise EditError("memory str_replace: old_string was not found in the target memory block")
        return value[:at] + self.new + value[at + len(self.old) :]


@dataclass(frozen=True)
class LineInsert:
    """Letta Code's ``memory`` insert: the text becomes line ``line`` (1-based), clamped to the block's lines."""

    text: str
    line: int
    operation: str = "memory insert"

    def texts(self) -> tuple[tuple[str, str], ...]:
        return (("insert_text", self.text),)

    def compute(self, value: str, label: str) -> str:
        lines = value.split("\n") if value else []
        at = min(max(self.line - 1, 0), len(lines))
        return "\n".join(lines[:at] + self.text.split("\n") + lines[at:])


Edit = Append | ReplaceAll | StrReplace | Insert | Rethink | Patch | FirstReplace | LineInsert


PATCH_HEADERS = ("*** Add Block:", "*** Delete Block:", "*** Update Block:", "*** Move to:")  # Letta's, multi-block
PATCH_WRAPPERS = ("*** Begin Patch", "*** End Patch", "*** End of File")  # codex's framing lines: nothing to apply
NO_HUNKS = "No applicable hunks found in patch. Ensure lines start with ' ', '-', or '+'."


_LINE_END = re.compile(r"\r?\n")


def patch_lines(patch: str) -> list[str]:
    """A patch's lines, split at LF or CRLF: a client on Windows sends CRLF, which Letta's ``splitlines`` reads as
    line ends too, so no line keeps a carriage return the block's text does not have."""
    return _LINE_END.split(patch)


def parse_patch(patch: str) -> list[tuple[list[str], list[str]]]:
    """Parse one block's hunks (Letta's ``memory_apply_patch``): `` `` context, ``-`` delete, ``+`` add; ``@@`` lines
    separate hunks; a blank line inside a hunk is an empty context line."""
    if not isinstance(patch, str) or not patch.strip():
        raise EditError(
            "Failed to apply patch: the patch is empty. Send hunks of ' ' context, '-' delete and '+' add lines."
        )
    reject_patch_line_numbers(patch)
    return parse_hunks(patch_lines(patch))


def parse_hunks(rows: Sequence[str], *, none_ok: bool = False) -> list[tuple[list[str], list[str]]]:
    """Each hunk of ``rows`` as (expected lines, replacement lines). A hunk without expected lines (only ``+``
    lines) appends its lines to the end of the block, as Letta's does. Blank lines at either end of a hunk are
    ignored (a patch's last newline, a gap between hunks); ``--- ``/``+++ `` file headers before a hunk too.
    ``none_ok``: rows without a hunk give ``[]`` (a block a multi-block patch only renames), not ``NO_HUNKS``."""
    hunks: list[tuple[list[str], list[str]]] = []
    rows_of_hunk: list[str] = []

    def close() -> None:
        while rows_of_hunk and rows_of_hunk[-1] == "":
            rows_of_hunk.pop()
        if rows_of_hunk:
            hunks.append(_hunk(rows_of_hunk))
        rows_of_hunk.clear()

    for raw in rows:
        if raw.startswith("@@"):
            close()
        elif raw.startswith("*** "):
            _patch_header(raw)
        elif raw.startswith(("--- ", "+++ ")) and not rows_of_hunk:
            continue  # file headers of diff tools: not content
        elif raw == "":
            if rows_of_hunk:
                rows_of_hunk.append(raw)
        elif raw[0] in " -+":
            rows_of_hunk.append(raw)
        else:
            raise EditError(
                f"Failed to apply patch: line {raw!r} does not start with ' ', '-', '+' or '@@'. "
                "Prefix context lines with a space, removed lines with '-' and added lines with '+'."
            )
    close()
    if not hunks and not none_ok:
        raise EditError(NO_HUNKS)
    return hunks


def _patch_header(raw: str) -> None:
    """A ``*** `` line among one block's hunks: codex's framing lines are skipped; anything else is refused, so that
    no header is taken for content, and no block other than the one a header names is patched."""
    if raw.rstrip() in PATCH_WRAPPERS:
        return
    if raw.startswith(PATCH_HEADERS):  # the server sends such a patch to block_patch; a guard for direct callers
        raise EditError(
            f"Failed to apply patch: the header {shown_label(raw, 120)} starts an operation of a multi-block patch, "
            "and this patch is applied to one block only."
        )
    raise EditError(
        f"Failed to apply patch: {shown_label(raw, 120)} is not a header memory_apply_patch knows. Its headers are "
        "'*** Update Block: <label>' (then hunks), '*** Add Block: <label>' (then '+' lines) and "
        "'*** Move to: <new label>'; a context line starting with '***' needs a leading space."
    )


def _hunk(rows: Sequence[str]) -> tuple[list[str], list[str]]:
    expected: list[str] = []
    replacement: list[str] = []
    for raw in rows:
        kind, line = (raw[0], raw[1:]) if raw else (" ", "")
        if kind != "+":
            expected.append(line)
        if kind != "-":
            replacement.append(line)
    if expected == replacement:
        raise EditError("Failed to apply patch: a hunk changes nothing. Add '-' or '+' lines.")
    return expected, replacement


def apply_hunks(value: str, hunks: Sequence[tuple[list[str], list[str]]]) -> str:
    """``value`` with each hunk applied in turn, each to the result of the one before."""
    lines = value.split("\n")
    for expected, replacement in hunks:
        lines = _apply_hunk(lines, expected, replacement)
    return "\n".join(lines)


def _apply_hunk(lines: list[str], expected: list[str], replacement: list[str]) -> list[str]:
    if not expected:  # only '+' lines: appended (an empty block has no line to keep: no leading blank line)
        return list(replacement) if lines == [""] else lines + replacement
    k = len(expected)
    starts = [i for i in range(len(lines) - k + 1) if lines[i : i + k] == expected]
    if not starts:
        sample = "\n".join(expected[:4])  # Letta's: the hunk's first expected lines
        raise EditError(
            "Failed to apply patch: expected hunk context not found in the memory block. "
            f"Verify the target lines exist and try providing more context. Expected start:\n{sample}"
        )
    if len(starts) > 1:
        raise EditError(
            "Failed to apply patch: hunk context matched multiple places in the memory block. "
            f"It matches at lines {[s + 1 for s in starts]}; add more context lines so it is unique."
        )
    at = starts[0]
    return lines[:at] + replacement + lines[at + k :]


def apply_edit(block: Block, edit: Edit, *, enforce_read_only: bool = True) -> str:
    """Return the block's new value after ``edit``, or raise; the one place limits are enforced.

    ``enforce_read_only`` is False only for people (CLI), who may edit read-only blocks.
    """
    if enforce_read_only and block.read_only:
        raise EditError(READ_ONLY_ERROR)
    new_value = edit.compute(block.value, block.label)
    check_limit(new_value, block.limit)
    return new_value


def check_limit(value: str, limit: int) -> None:
    if len(value) > limit:
        raise EditError(f"Edit failed: Exceeds {limit} character limit (requested {len(value)})")


def check_new_blocks(specs: Sequence[BlockSpec], *, secret_scan: bool) -> tuple[BlockSpec, ...]:
    """The blocks a new agent starts with as they will be written, or the refusal of the first that cannot be,
    before anything is written: each label normalised (``validate_label``), each value within its block's limit
    (``check_limit``), no label twice, and with ``secret_scan`` no credential in a value or a description (as every
    block written is checked). ``Memory.create_agent`` checks its blocks with it, and the CLI the ``default_blocks``
    setting when it loads the settings, so a server does not start with blocks no agent can be made with."""
    out: list[BlockSpec] = []
    for spec in specs:
        label = validate_label(spec.label)
        if any(b.label == label for b in out):
            raise LabelTakenError(
                f"Two blocks are labelled {shown_label(label)}: each block of an agent needs a label of its own; "
                "rename or remove one.",
                label=label,
            )
        try:
            check_limit(spec.value, spec.limit)
        except EditError as exc:
            raise ValidationError(
                f"The value of block {shown_label(label)} has {len(spec.value):,} characters, more than its limit "
                f"({spec.limit:,}): shorten the value or raise the limit."
            ) from exc
        if secret_scan:
            secrets.refuse(spec.value, f"the value of block {shown_label(label)}")
            secrets.refuse(spec.description, f"the description of block {shown_label(label)}")
        out.append(spec if label == spec.label else spec.model_copy(update={"label": label}))
    return tuple(out)


# ---------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------


def render_block(block: Block, *, line_numbers: bool = False) -> str:
    parts = [f"<{block.label}>", "<description>", block.description, "</description>", "<metadata>"]
    if block.read_only:
        parts.append("- read_only=true")
    parts += [f"- chars_current={len(block.value)}", f"- chars_limit={block.limit}", "</metadata>"]
    if line_numbers:
        parts += ["<warning>", LINE_NUMBER_WARNING, "</warning>", "<value>"]
        parts += [f"{i}→ {line}" for i, line in enumerate(block.value.split("\n"), start=1)]
    else:
        parts += ["<value>", block.value]
    parts += ["</value>", f"</{block.label}>"]
    return "\n".join(parts)


def render_core_memory(blocks: Sequence[Block], *, line_numbers: bool = False) -> str:
    """Core memory in Letta's layout: ``<memory_blocks>`` with one element per pinned block.

    Detached blocks (metadata ``pinned=false``) follow as ``<memory_directory>``: a tree of their
    labels and descriptions, opened on demand with the ``memory_open`` tool.
    """
    pinned = [b for b in blocks if is_pinned(b)]
    body = "\n\n".join(render_block(b, line_numbers=line_numbers) for b in pinned)
    head = "<memory_blocks>\nThe following memory blocks are currently engaged in your core memory unit:\n\n"
    text = head + (body + "\n\n" if body else "") + "</memory_blocks>"
    detached = [b for b in blocks if not is_pinned(b)]
    if detached:
        text += "\n\n" + render_directory(detached)
    return text


def render_directory(blocks: Sequence[Block]) -> str:
    """Detached blocks as a tree of labels with descriptions and sizes (values are not shown)."""
    lines = [
        "<memory_directory>",
        "These memory blocks are stored but not shown above. Open one with memory_open(label) when it is relevant;",
        "every edit tool works on them by label.",
    ]
    shown: set[str] = set()
    for b in sorted(blocks, key=lambda b: b.label):
        parts = b.label.split("/")
        for depth in range(len(parts) - 1):
            folder = "/".join(parts[: depth + 1]) + "/"
            if folder not in shown:
                shown.add(folder)
                lines.append("  " * depth + f"- {parts[depth]}/")
        about = f": {' '.join(b.description.split())}" if b.description.strip() else ""
        flags = ", read_only" if b.read_only else ""
        lines.append("  " * (len(parts) - 1) + f"- {parts[-1]} ({b.label}; {len(b.value)} chars{flags}){about}")
    lines.append("</memory_directory>")
    return "\n".join(lines)


def render_memory_metadata(
    *, agent_id: str, recompiled_at: datetime, recall_count: int, archival_count: int, archival_tags: Sequence[str] = ()
) -> str:
    stamp = recompiled_at.strftime("%Y-%m-%d %I:%M:%S %p UTC%z")
    lines = [
        "<memory_metadata>",
        f"- AGENT_ID: {agent_id}",
        f"- System prompt last recompiled: {stamp}",
        f"- {recall_count} previous messages between you and the user are stored in recall memory",
        f"- {archival_count} total memories you created are stored in archival memory (use tools to access them)",
    ]
    if archival_tags:
        lines.append(f"- Archival memory tags: {', '.join(render_tag(t) for t in archival_tags)}")
    lines.append("</memory_metadata>")
    return "\n".join(lines)


_PLAIN_TAG = re.compile(r'[^,"\\<>]+')  # a tag listed as written: nothing in it reads as a separator, quote or markup


def render_tag(tag: str) -> str:
    """A tag as ``<memory_metadata>`` lists it (tiermem's own line, joined with ``", "``): as written when nothing in
    it can be misread; else as a JSON string with ``<``, ``>`` and invisible characters escaped (``\\u003c``), so
    that a tag ``a,b`` reads as one tag and a tag ``</memory_metadata>`` cannot end the section early."""
    if _PLAIN_TAG.fullmatch(tag) and tag.isprintable() and tag == tag.strip():
        return tag
    return '"' + "".join(_tag_char(c) for c in tag) + '"'


def _tag_char(c: str) -> str:
    if c in "<>":
        return f"\\u{ord(c):04x}"
    if c in '"\\' or not c.isprintable():
        return json.dumps(c)[1:-1]  # \", \\, \n, \u200b; a character beyond U+FFFF as its surrogate pair
    return c
