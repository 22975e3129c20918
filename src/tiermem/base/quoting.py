"""Text a person marked private, and stored text quoted back to a model as data.

``<private>...</private>`` spans (any letter case, several, nested; an unclosed ``<private>`` runs to the end of the
person's own text: the end of the text, or the line where the blocks the host appended after it start, ``HOST_TAGS``:
Claude Code adds ``<system-reminder>`` and the like to what a prompt holds; only closed blocks with nothing but
whitespace after them count as the host's, anything else stays private) are what a person asked not to be remembered:
``drop_private`` puts ``PRIVATE_MARK`` in each one's place before a turn is logged, so the conversation still reads and
nothing of the span is kept; ``without_private`` removes them with no mark (the text a recall searches with).
``private_parts`` and ``with_private`` take a text shown without its spans (a file written from a block) and an edit of
it back to the text with them, the spans kept.

``neutral`` makes stored text safe to quote inside a frame of tags: ``&``, ``<`` and ``>`` become ``&amp;``, ``&lt;``
and ``&gt;``, so a stored ``</memory>`` or ``<system>`` is shown, never parsed, and cannot close the frame it is quoted
in. ``markup_name`` escapes a name shown as an attribute's value (a file's or folder's in ``<directories>``): only
``<``, ``>``, ``"`` and the bidirectional embeddings, overrides and isolates (as ``&#x202e;``), so a name can neither
close its tag nor reorder what a model reads, and an ordinary name (``Q&A``, a ZWNJ, an emoji's ZWJ) is as Letta
writes it; ``plain_name`` escapes only the reordering characters (a name in plain text); ``unescape_name`` reads
either back, so a name copied as shown finds its file. ``printable`` makes stored text safe to print to a terminal (the CLI's human-readable output: ``cli/terminal.py``,
``tiermem doctor``): every control character but tab and line feed (C0, DEL, C1) and every bidirectional control is
written as its escape (``\\x1b``, ``\\u202e``), so a stored escape sequence cannot clear the screen, retitle the
terminal or reorder what follows it; ``one_line`` also writes a line feed as ``\\n`` and a tab as ``\\t``, for a name
inside one line of a report. Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Callable

PRIVATE_MARK = "[private: not kept]"
_TAG = re.compile(r"<\s*(/?)\s*private\b[^<>]*>", re.IGNORECASE)
# The blocks a host appends to a person's text (Claude Code: reminders, a slash command's name and output, `!` shell
# input and output, the editor's selection): closed ones that start a line and run to the end of the text, with only
# whitespace between them, end an unclosed <private> span (the host's text is not the person's to hide, and its own
# spans are found in it as in any text); any other text after them keeps the span open (``_appended``).
HOST_TAGS = (
    "system-reminder",
    "user-prompt-submit-hook",
    "command-name",
    "command-message",
    "command-args",
    "local-command-stdout",
    "local-command-stderr",
    "bash-input",
    "bash-stdout",
    "bash-stderr",
    "ide_selection",
    "ide_opened_file",
    "ide_diagnostics",
)
_HOST_BLOCK = re.compile(r"^[ \t]*<(?:" + "|".join(HOST_TAGS) + r")\b[^<>]*>", re.IGNORECASE | re.MULTILINE)
_HOST_OPEN = re.compile(r"<(" + "|".join(HOST_TAGS) + r")\b[^<>]*>", re.IGNORECASE)
_HOST_CLOSE = {tag: re.compile(r"<\s*/\s*" + tag + r"\s*>", re.IGNORECASE) for tag in HOST_TAGS}
_SPACE = re.compile(r"\s*")


def _spans(text: str) -> list[tuple[int, int, bool]]:
    """The private spans of ``text`` as (start, end, True), tags included: outermost spans only (a nested span is
    inside its parent's); a closing tag with no span open is (start, end, False): the tag alone goes."""
    spans: list[tuple[int, int, bool]] = []
    depth, start = 0, 0
    for tag in _TAG.finditer(text):
        if not tag.group(1):  # <private>
            if depth == 0:
                start = tag.start()
            depth += 1
        elif depth:  # </private>
            depth -= 1
            if depth == 0:
                spans.append((start, tag.end(), True))
        else:  # a stray </private>
            spans.append((tag.start(), tag.end(), False))
    if depth:  # unclosed: the rest of the person's text is private, up to the blocks the host appended after it
        host = _appended(text, start + 1)
        if host is None:
            spans.append((start, len(text), True))
        else:  # the line break before the host's blocks stays; the spans in them are found afresh
            end = len(text[:host].rstrip("\r\n"))
            spans.append((start, max(end, start), True))
            spans += [(host + a, host + b, p) for a, b, p in _spans(text[host:])]
    return spans


def _appended(text: str, at: int) -> int | None:
    """Where the blocks a host appended to the person's text start, at ``at`` or after: a line starting with a host
    block (``HOST_TAGS``) from which the text to its end is closed host blocks and whitespace alone. None when there
    is no such line: a host tag followed by anything else (its closing tag missing, the person's text after it) may be
    the person's own, so the span it is in stays private (fail closed)."""
    while (host := _HOST_BLOCK.search(text, at)) is not None:
        failed = _host_tail_fails(text, host.start())
        if failed is None:
            return host.start()
        at = max(failed, host.start() + 1)  # a later start inside what failed would fail there too
    return None


def _host_tail_fails(text: str, at: int) -> int | None:
    """None when ``text[at:]`` is closed host blocks and whitespace alone; else where it stops being that."""
    while True:
        space = _SPACE.match(text, at)  # (it matches the empty text too)
        at = space.end() if space else at
        if at == len(text):
            return None
        opening = _HOST_OPEN.match(text, at)
        if opening is None:
            return at
        closing = _HOST_CLOSE[opening.group(1).lower()].search(text, opening.end())
        if closing is None:
            return opening.end()
        at = closing.end()


def drop_private(text: str, mark: str = PRIVATE_MARK) -> str:
    """``text`` with each private span replaced by ``mark`` (a stray closing tag removed); unchanged without any."""
    if "<" not in text or not _TAG.search(text):
        return text
    parts: list[str] = []
    at = 0
    for start, end, private in _spans(text):
        parts.append(text[at:start])
        if private:
            parts.append(mark)
        at = end
    parts.append(text[at:])
    return "".join(parts)


def without_private(text: str) -> str:
    """``text`` with every private span removed, leaving no mark (what a search for it may use)."""
    return drop_private(text, "")


def private_parts(text: str) -> list[str]:
    """What each ``PRIVATE_MARK`` of ``drop_private(text)`` stands for, in order: a private span (its tags included),
    or the mark itself where ``text`` already held one."""
    parts: list[str] = []
    at = 0
    spans = _spans(text) if has_private(text) else []
    for start, end, private in [*spans, (len(text), len(text), False)]:
        parts += [PRIVATE_MARK] * text.count(PRIVATE_MARK, at, start)
        if private:
            parts.append(text[start:end])
        at = end
    return parts


def with_private(shown: str, parts: list[str], fill: Callable[[str], str] = lambda piece: piece) -> str | None:
    """``shown`` (a text shown as ``drop_private`` gave it, edited since) with each ``PRIVATE_MARK`` put back as the
    part it stands for (``private_parts`` of the text it was shown from), in order; ``fill`` applied to the text
    between them (the edit's own). None when ``shown`` holds another number of marks than ``parts``: which mark is
    which cannot be told."""
    pieces = shown.split(PRIVATE_MARK)
    if len(pieces) != len(parts) + 1:
        return None
    return "".join(fill(piece) + part for piece, part in zip(pieces, [*parts, ""], strict=True))


def has_private(text: str) -> bool:
    return bool(_TAG.search(text))


def neutral(text: str) -> str:
    """``text`` with ``&``, ``<`` and ``>`` escaped: no markup in it can open or close a tag around it."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def attribute(value: str) -> str:
    """``value`` as the double-quoted value of an attribute: ``neutral``, with ``"`` escaped too."""
    return '"' + neutral(value).replace('"', "&quot;") + '"'


# The characters that reorder what follows them (bidirectional embeddings, overrides and isolates): a name holding
# one could show a model its text in another order. Marks (U+200E, U+200F), joiners and soft hyphens are ordinary
# parts of names (Persian's ZWNJ, an emoji's ZWJ) and are left as they are.
_REORDERING = "\u202a-\u202e\u2066-\u2069"
_MARKUP_NAME = re.compile(f'[<>"{_REORDERING}]|&(?=(?:lt|gt|quot|amp|#x[0-9a-fA-F]+|#[0-9]+);)')
_PLAIN_NAME = re.compile(f"[{_REORDERING}]|&(?=(?:lt|gt|quot|amp|#x[0-9a-fA-F]+|#[0-9]+);)")
_REFERENCE = re.compile(r"&(lt|gt|quot|amp|#x[0-9a-fA-F]+|#[0-9]+);")
_NAMED = {"lt": "<", "gt": ">", "quot": '"', "amp": "&"}


def _reference(match: re.Match[str]) -> str:
    c = match.group()
    named = {"<": "&lt;", ">": "&gt;", '"': "&quot;", "&": "&amp;"}
    return named.get(c) or f"&#x{ord(c):x};"


def markup_name(name: str) -> str:
    """A name as the double-quoted value of an attribute (``<file name="...">``): only what could break the markup
    or reorder what a model reads is escaped: ``<``, ``>`` and ``"`` as ``&lt;``, ``&gt;``, ``&quot;``; each
    bidirectional embedding, override or isolate as its numeric reference (``&#x202e;``); an ``&`` only where it
    starts what ``unescape_name`` would read as a reference (``&amp;lt;``), so ``unescape_name`` gives the name
    back. Any other name (``Q&A/R&D notes.md``, a Persian name with a ZWNJ, an emoji with a ZWJ) is as it is: as
    Letta writes it."""
    return _MARKUP_NAME.sub(_reference, name)


def plain_name(name: str) -> str:
    """A name in plain text shown to a model (``directories_summary``): as it is but for the characters that reorder
    what follows them (and an ``&`` that starts a reference), written as in ``markup_name``."""
    return _PLAIN_NAME.sub(_reference, name)


def unescape_name(text: str) -> str:
    """A name as ``markup_name`` or ``plain_name`` showed it, back as it is: the references they write
    (``&lt;``, ``&gt;``, ``&quot;``, ``&amp;``, ``&#x...;``, ``&#...;``) read back; nothing else changes."""
    if "&" not in text:
        return text

    def back(match: re.Match[str]) -> str:
        ref = match.group(1)
        if ref in _NAMED:
            return _NAMED[ref]
        code = int(ref[2:], 16) if ref[1] in "xX" else int(ref[1:])
        return chr(code) if code <= 0x10FFFF else match.group()

    return _REFERENCE.sub(back, text)


# C0 but tab and line feed, DEL, C1, and the bidirectional controls (marks, embeddings, overrides, isolates)
# (and lone surrogates: a file name on disk that is not UTF-8, as os.fsdecode reads it, which no terminal can print)
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with each control character but tab and line feed, each bidirectional control and each lone surrogate,
    written as its escape (``\\x1b``, ``\\u202e``, ``\\udce9``): what a terminal shows as text instead of obeying
    (or failing to encode)."""
    return _CONTROL.sub(_escaped, text)


def one_line(text: str) -> str:
    """``text`` as part of one line of a report: ``printable``, and each line feed written ``\\n`` too, so a name
    holding one (a file name may) cannot start a line that reads as another entry of the report; a tab as ``\\t``,
    which a terminal would show as a gap that reads as the report's own spacing."""
    return printable(text).replace("\n", "\\n").replace("\t", "\\t")
