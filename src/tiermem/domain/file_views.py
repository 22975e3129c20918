"""Letta's filesystem, the pure parts: file types, the views a model reads, grep, and the texts Letta answers with.

Folders hold files; an agent opens a few of them (a window of lines each) into its prompt, greps them and searches
them by meaning. Everything here takes values and returns text or raises ``ValidationError``; the storage and the
tools live elsewhere. The texts are Letta's, character for character (``files_tool_executor.py``,
``line_chunker.py``, ``memory.py``'s ``_render_directories_common``, ``utils.py``), so a model trained on Letta's
file tools reads what it expects. Where tiermem adds something (a grep time limit that raises instead of hanging,
the ``closed_cap`` summary of huge folders, the name rules) the docstring says so.

Grep runs on the third-party ``regex`` module (a dependency of tiktoken already) because it can stop a search after
a time limit (of CPU time: ``grep_deadline`` turns it into a wall-clock bound); the pattern is first compiled by the standard ``re`` so the syntax accepted and the error texts are
exactly Letta's.

Why this module is long: it reproduces Letta's file tools' rules and texts character for character (file types,
windows, grep, directories, names), kept in one place to be compared with Letta's sources; everything in it is pure.
"""

from __future__ import annotations

import json
import posixpath
import re
import time
import unicodedata
import warnings
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import regex

from ..base.errors import ValidationError
from ..base.quoting import markup_name
from . import grep_deadline
from .grep_deadline import Clock, Compiled
from .grep_index import Signature, requirement, signature

Strategy = Literal["code", "structured_data", "documentation", "line_based"]

# Letta's FileTypeRegistry (letta/services/file_processor/file_types.py), in its registration order:
# extension -> (mime type, simple text, chunking strategy). Only ``.pdf`` is not simple text.
FILE_TYPES: dict[str, tuple[str, bool, Strategy]] = {
    ".pdf": ("application/pdf", False, "line_based"),
    ".txt": ("text/plain", True, "line_based"),
    ".md": ("text/markdown", True, "documentation"),
    ".markdown": ("text/markdown", True, "documentation"),
    ".json": ("application/json", True, "structured_data"),
    ".jsonl": ("application/jsonl", True, "structured_data"),
    ".csv": ("text/csv", True, "structured_data"),
    ".py": ("text/x-python", True, "code"),
    ".js": ("text/javascript", True, "code"),
    ".ts": ("text/x-typescript", True, "code"),
    ".java": ("text/x-java-source", True, "code"),
    ".cpp": ("text/x-c++", True, "code"),
    ".cxx": ("text/x-c++", True, "code"),
    ".c": ("text/x-c", True, "code"),
    ".h": ("text/x-c", True, "code"),
    ".cs": ("text/x-csharp", True, "code"),
    ".php": ("text/x-php", True, "code"),
    ".rb": ("text/x-ruby", True, "code"),
    ".go": ("text/x-go", True, "code"),
    ".rs": ("text/x-rust", True, "code"),
    ".swift": ("text/x-swift", True, "code"),
    ".kt": ("text/x-kotlin", True, "code"),
    ".scala": ("text/x-scala", True, "code"),
    ".r": ("text/x-r", True, "code"),
    ".m": ("text/x-objective-c", True, "code"),
    ".html": ("text/html", True, "code"),
    ".htm": ("text/html", True, "code"),
    ".css": ("text/css", True, "structured_data"),
    ".scss": ("text/x-scss", True, "structured_data"),
    ".sass": ("text/x-sass", True, "structured_data"),
    ".less": ("text/x-less", True, "structured_data"),
    ".vue": ("text/x-vue", True, "code"),
    ".jsx": ("text/x-jsx", True, "code"),
    ".tsx": ("text/x-tsx", True, "code"),
    ".xml": ("application/xml", True, "structured_data"),
    ".yaml": ("text/x-yaml", True, "structured_data"),
    ".yml": ("text/x-yaml", True, "structured_data"),
    ".toml": ("application/toml", True, "structured_data"),
    ".ini": ("text/x-ini", True, "structured_data"),
    ".cfg": ("text/x-conf", True, "structured_data"),
    ".conf": ("text/x-conf", True, "structured_data"),
    ".sh": ("text/x-shellscript", True, "code"),
    ".bash": ("text/x-shellscript", True, "code"),
    ".ps1": ("text/x-powershell", True, "code"),
    ".bat": ("text/x-batch", True, "code"),
    ".cmd": ("text/x-batch", True, "code"),
    ".dockerfile": ("text/x-dockerfile", True, "code"),
    ".sql": ("text/x-sql", True, "code"),
}
# Letta's MIME aliases (register_mime_types / get_allowed_media_types / is_simple_text_mime_type).
MIME_ALIASES: dict[str, str] = {"text/x-markdown": ".md", "application/x-jsonlines": ".jsonl", "text/xml": ".xml"}
# Documents that file_parse converts to Markdown with MarkItDown (beyond Letta's registry: what markitdown reads).
# Not HTML: Letta registers .html/.htm as simple text and keeps the markup (MarkItDownParser decodes it as is).
DOCUMENT_TYPES: dict[str, str] = {
    ".pdf": "application/pdf",
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ".pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    ".epub": "application/epub+zip",
}
# Names that are binary by their extension (images, audio, video, archives, executables, old Office formats).
BINARY_EXTENSIONS = frozenset(
    ".png .jpg .jpeg .gif .bmp .webp .ico .tif .tiff .heic .psd .mp3 .wav .flac .ogg .m4a .aac .mp4 .mov .avi .mkv "
    ".webm .zip .gz .tgz .bz2 .xz .zst .7z .rar .tar .jar .war .exe .dll .so .dylib .bin .o .a .class .pyc .wasm "
    ".sqlite .db .doc .xls .ppt .odt .ods .odp .woff .woff2 .ttf .otf .eot .iso .dmg .parquet .lance .npy .onnx".split()
)
OCTET_STREAM = "application/octet-stream"

# Letta's constants (letta/constants.py and LettaFileToolExecutor).
DEFAULT_MAX_FILES_OPEN = 5
DEFAULT_CORE_MEMORY_SOURCE_CHAR_LIMIT = 50000
FILE_IS_TRUNCATED_WARNING = "# NOTE: This block is truncated, use functions to view the full content."
MAX_FILENAME_LENGTH = 255
MAX_FOLDER_NAME_LENGTH = 100
MAX_FILE_SIZE_BYTES = 50 * 1024 * 1024
MAX_TOTAL_CONTENT_SIZE = 200 * 1024 * 1024
MAX_REGEX_COMPLEXITY = 1000
GREP_PAGE_SIZE = 20
GREP_TIMEOUT_SECONDS = 30
GREP_CONTEXT_CHARS = 50_000  # tiermem's cap on a grep page's context (Letta has none: context_lines=10**6 is ~MBs)
GREP_LINE_CHARS = 2_000  # tiermem's cap on a line grep shows: longer ones are clipped (Letta shows a 1 MB line whole)
# tiermem's cap on grep's "Files with matches" list, out of GREP_CONTEXT_CHARS (the page's context gets the rest): Letta
# lists every file, so 1,000 matches in 1,000 files of long names made a list of ~370 KB
GREP_FILES_CHARS = GREP_CONTEXT_CHARS // 5
MAX_TOTAL_COLLECTED = 1000
SEMANTIC_LIMIT_CAP = 50  # Letta's MAX_TOTAL_MATCHES: semantic_search_files' limit is capped at this
PASSAGE_LINES = 20


def extension_of(name: str) -> str:
    """A name's extension in lower case, with its dot ("" when it has none)."""
    return posixpath.splitext(name)[1].lower()


def file_type(name: str) -> str:
    """The MIME type of a file by its name: Letta's registry, then the document formats MarkItDown reads,
    ``application/octet-stream`` for names that are binary by extension (images, archives, ...), else
    ``text/plain`` (an unknown extension or none at all: ``parse_file`` decides from the bytes whether it is text).
    The extension is compared in lower case."""
    ext = extension_of(name)
    if ext in FILE_TYPES:
        return FILE_TYPES[ext][0]
    if ext in DOCUMENT_TYPES:
        return DOCUMENT_TYPES[ext]
    if ext in BINARY_EXTENSIONS:
        return OCTET_STREAM
    return "text/plain"


def is_text_type(name: str) -> bool:
    """Whether a file of this name is read as text directly (no converter): Letta's simple-text types, any other
    ``text/*`` type (so unknown extensions too, and HTML, kept with its markup as Letta keeps it), and Letta's text
    aliases; not the documents MarkItDown converts (PDF, DOCX, PPTX, XLSX, EPUB)."""
    ext = extension_of(name)
    if ext in DOCUMENT_TYPES:
        return False
    if ext in FILE_TYPES:
        return FILE_TYPES[ext][1]
    mime = file_type(name)
    return mime.startswith("text/") or mime in MIME_ALIASES


def strategy_of(file_name: str, mime: str | None) -> Strategy:
    """The chunking strategy: by MIME type first (the first registered type with that MIME, as Letta), then by the
    name's extension, else ``line_based``. Unlike Letta, whose MIME lookup never fails (so its extension fallback
    never runs), an unregistered MIME falls through to the extension; and a ``.md`` file is ``text/markdown`` here
    (Letta's ``mimetypes`` registration makes it ``text/x-markdown`` and so, by accident, line based)."""
    if mime:
        for registered, _simple, strategy in FILE_TYPES.values():
            if registered == mime:
                return strategy
    ext = extension_of(file_name)
    if ext in FILE_TYPES:
        return FILE_TYPES[ext][2]
    return "line_based"


def chunk_type(strategy: Strategy) -> Literal["sentences", "lines"]:
    """What the numbered units of a view are called: ``sentences`` for documentation, else ``lines``."""
    return "sentences" if strategy == "documentation" else "lines"


_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_WHITESPACE = re.compile(r"\s+")


def view_lines(text: str, strategy: Strategy) -> list[str]:
    """The units a file is viewed and grepped in (Letta's ``LineChunker``): documentation is split into sentences
    (after ``.!?`` and whitespace, before a capital letter; each sentence's whitespace collapsed to one space); code
    keeps its indentation (lines right-stripped); everything else is stripped; empty units are dropped."""
    if not text:
        return []
    if strategy == "documentation":
        sentences = (_WHITESPACE.sub(" ", s.strip()) for s in _SENTENCE_SPLIT.split(text.strip()))
        return [s for s in sentences if s]
    if strategy == "code":
        return [line for line in (raw.rstrip() for raw in text.splitlines()) if line]
    return [line for line in (raw.strip() for raw in text.splitlines()) if line]


def render_window(file_name: str, lines: Sequence[str], strategy: Strategy, start: int | None, end: int | None) -> str:
    """The text of an open file (Letta's ``chunk_text(add_metadata=True, validate_range=True)`` joined by newlines):
    a ``[Viewing ...]`` header, then ``k: text`` lines numbered from 1. ``start`` is 0-based, ``end`` exclusive and
    clamped to the file. A file with no lines renders as "" without checking the range (Letta returns nothing for
    empty content; a whitespace-only file, which Letta would give a header, is treated the same)."""
    if not lines:
        return ""
    unit = chunk_type(strategy)
    total = len(lines)
    offset = 0
    shown: Sequence[str] = lines
    if start is not None or end is not None:
        if start is not None and end is not None and start >= end:
            raise ValidationError(f"Invalid range: start ({start}) must be less than end ({end})")
        if start is not None and start >= total:
            raise ValidationError(
                f"File {file_name} has only {total} {unit}, but requested offset {start + 1} is out of range"
            )
        if start is not None:
            start = max(0, start)
        if end is not None:
            end = min(end, total)
        shown = lines[start:end]
        offset = start if start is not None else 0
    out = [f"{i + offset + 1}: {line}" for i, line in enumerate(shown)]
    if start is not None and end is not None:
        header = f"[Viewing {unit} {start + 1} to {end} (out of {total} {unit})]"
    elif start is not None:
        header = f"[Viewing {unit} {start + 1} to end (out of {total} {unit})]"
    else:
        header = f"[Viewing file start (out of {total} {unit})]"
    return "\n".join([header, *out])


def truncate_visible(visible: str, limit: int) -> str:
    """An open file's visible text cut to its block's limit (Letta's ``truncate_file_visible_content``): past the
    limit, the text is cut so that it ends with ``...[TRUNCATED]`` and Letta's truncation note within the limit."""
    visible = visible or ""
    if len(visible) > limit:
        warning = f"...[TRUNCATED]\n{FILE_IS_TRUNCATED_WARNING}"
        visible = visible[: limit - len(warning)] + warning
    return visible


def file_defaults(context_window: int | None) -> tuple[int, int]:
    """(max_files_open, per_file_view_window_char_limit) for a model's context window, as Letta's
    ``calculate_file_defaults_based_on_context_window``; no window known: (5, 50000)."""
    if not context_window:
        return DEFAULT_MAX_FILES_OPEN, DEFAULT_CORE_MEMORY_SOURCE_CHAR_LIMIT
    if context_window <= 8_000:
        return 3, 5_000
    if context_window <= 32_000:
        return 5, 15_000
    if context_window <= 128_000:
        return 10, 25_000
    if context_window <= 200_000:
        return 10, 40_000
    return 15, 40_000


# ---------------------------------------------------------------------------------------------------------- open_files


@dataclass(frozen=True)
class OpenRequest:
    """One file of an ``open_files`` call: ``offset`` 0-based, ``length`` in lines (both optional)."""

    file_name: str
    offset: int | None = None
    length: int | None = None


def check_requests(requests: Sequence[OpenRequest], max_files_open: int) -> None:
    """Letta's checks of an ``open_files`` call, all before anything is opened (Letta checks each file's offset and
    length as it reaches it): not more files than may be open, at least one, offsets >= 0, lengths >= 1."""
    if len(requests) > max_files_open:
        raise ValidationError(
            f"Cannot open {len(requests)} files: exceeds configured maximum limit of {max_files_open} files"
        )
    if not requests:
        raise ValidationError("No file requests provided")
    for req in requests:
        if req.offset is not None and req.offset < 0:
            raise ValidationError(f"Offset for file {req.file_name} must be >= 0 (0-indexed), got {req.offset}")
        if req.length is not None and req.length < 1:
            raise ValidationError(f"Length for file {req.file_name} must be >= 1, got {req.length}")


def window_of(request: OpenRequest) -> tuple[int | None, int | None]:
    """(start, end) for ``render_window``: start 0-based, end exclusive, None when absent. As Letta, a length
    without an offset is ignored (the file opens from its start)."""
    start = request.offset
    end = start + request.length if start is not None and request.length is not None else None
    return start, end


def stored_range(request: OpenRequest) -> tuple[int | None, int | None]:
    """(start_line, end_line) as Letta stores an open file's window: 1-based and inclusive, None when absent; what
    ``open_summary`` reports as "previously lines a-b" the next time the file is opened."""
    start, end = window_of(request)
    return (start + 1 if start is not None else None), end


def _previous(name: str, previous_ranges: Mapping[str, tuple[int | None, int | None]]) -> str:
    if name not in previous_ranges:
        return ""
    old_start, old_end = previous_ranges[name]
    if old_start is not None and old_end is not None:
        return f" (previously lines {old_start}-{old_end})"
    if old_start is not None:
        return f" (previously lines {old_start}-end)"
    return " (previously full file)"


def open_summary(
    requests: Sequence[OpenRequest],
    previous_ranges: Mapping[str, tuple[int | None, int | None]],
    closed_by_close_all_others: Sequence[str],
    closed_lru: Sequence[str],
) -> str:
    """Letta's answer to ``open_files``. ``previous_ranges`` maps the names of files that were open already to their
    stored ``(start_line, end_line)``; the two lists name the files closed by ``close_all_others`` and by the open
    file limit (least recently used first)."""
    summaries = []
    for req in requests:
        previous = _previous(req.file_name, previous_ranges)
        if req.offset is not None and req.length is not None:
            summaries.append(f"{req.file_name} (lines {req.offset + 1}-{req.offset + req.length}){previous}")
        elif req.offset is not None:
            summaries.append(f"{req.file_name} (lines {req.offset + 1}-end){previous}")
        else:
            summaries.append(f"{req.file_name}{previous}")
    if len(requests) == 1:
        message = f"* Opened {summaries[0]}"
    else:
        message = f"* Opened {len(requests)} files: {', '.join(summaries)}"
    if closed_by_close_all_others:
        message += (
            f"\nNote: Closed {len(closed_by_close_all_others)} file(s) due to close_all_others=True: "
            f"{', '.join(closed_by_close_all_others)}"
        )
    if closed_lru:
        message += (
            f"\nNote: Closed {len(closed_lru)} least recently used file(s) due to open file limit: "
            f"{', '.join(closed_lru)}"
        )
    return message


# ---------------------------------------------------------------------------------------------------------------- grep


Searcher = Compiled  # a compiled pattern (a ``regex`` pattern, case-insensitive and multi-line)


def _validate_pattern(pattern: str) -> None:
    """Letta's ``_validate_regex_pattern``: the length limit, then the standard ``re``'s verdict and error text."""
    if len(pattern) > MAX_REGEX_COMPLEXITY:
        raise ValidationError(f"Pattern too complex: {len(pattern)} chars > {MAX_REGEX_COMPLEXITY} limit")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            re.compile(pattern, re.IGNORECASE | re.MULTILINE)
    except re.error as exc:
        raise ValidationError(f"Invalid regex pattern: {exc}") from exc


def _compile(pattern: str) -> Searcher:
    try:
        compiled: Searcher = regex.compile(pattern, regex.IGNORECASE | regex.MULTILINE)
    except regex.error as exc:  # accepted by re but not by regex: rare, same message shape
        raise ValidationError(f"Invalid regex pattern: {exc}") from exc
    return compiled


def compile_pattern(pattern: str) -> Searcher:
    """A grep pattern checked as Letta checks it (not blank, at most 1000 characters, valid for Python's ``re``)
    and compiled case-insensitive and multi-line. The pattern is used as given (``grep`` strips it first)."""
    if not pattern or not pattern.strip():
        raise ValidationError("Empty search pattern provided")
    _validate_pattern(pattern)
    return _compile(pattern)


def include_filter(include: str | None) -> Searcher | None:
    """The file name filter of ``grep_files(include=...)`` (None: no filter). As Letta: a glob (has ``*`` and none
    of ``^$()[]{}\\+``) becomes a regex (``.`` literal, ``*`` -> ``.*``, ``?`` -> ``.``, anchored at the end only);
    anything else is a regex; searched case-insensitively anywhere in the name."""
    if not include or not include.strip():
        return None
    include = include.strip()
    if "*" in include and not any(c in include for c in "^$()[]{}\\+"):
        converted = include.replace(".", r"\.").replace("*", ".*").replace("?", ".")
        if not converted.endswith("$"):
            converted += "$"
    else:
        converted = include
    _validate_pattern(converted)
    return _compile(converted)


class JoinedLines:
    """A file's view lines kept as one string joined by ``\\n`` (a cache holds one object per file, not one per
    line); grep searches the string and splits it only when the file may match."""

    __slots__ = ("_signature", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._signature: Signature | None = None  # made on first use

    def signature(self) -> Signature:
        """The text's trigram signature (``grep_index``), made on first use and kept with the text. Two threads may
        both make it: the same value, either kept."""
        made = self._signature
        if made is None:
            made = self._signature = signature(self.text)
        return made

    def split(self) -> list[str]:
        return self.text.split("\n") if self.text else []

    @staticmethod
    def of(lines: Sequence[str]) -> JoinedLines:
        return JoinedLines("\n".join(lines))


@dataclass(slots=True)
class GrepFile:
    """One attached file as grep sees it: its name, its ``view_lines`` (no line breaks inside) and its size in
    bytes (its text's UTF-8 length, for Letta's size limits). Not frozen: a grep makes one per attached file, and a
    frozen dataclass's construction costs three times as much (~420 ns against ~140)."""

    name: str
    lines: Sequence[str] | JoinedLines
    size_bytes: int


@dataclass(frozen=True)
class GrepResult:
    """Letta's grep answer and the files that had collected matches (first-seen order), to mark as accessed."""

    text: str
    matched_files: list[str]


_FLAG_GROUP = re.compile(r"\(\?([A-Za-z-]+)[):]")


def prefilter_is_sound(pattern: str) -> bool:
    """Whether one search of a whole file (its lines' stripped contents joined by ``\\n``) finding nothing proves that
    no line matches on its own, so the file can be skipped. A match inside one line is a match at the same place in
    the joined text, because every character it consumes is there too, and every zero-width test at the line's
    edges sees the same thing: ``^``/``$`` (multi-line) and ``\\b``/``\\B`` treat a ``\\n`` neighbour like the start or
    end of the string (``\\n`` is not a word character). What can break that, and turns the prefilter off:
    ``\\A``/``\\Z``/``\\z``/``\\G`` (the whole string's edges), negative lookarounds (``(?!``, ``(?<!``: a ``\\n``
    beyond the edge can make them fail), inline flag groups other than ``a i L m s u x`` or with ``-`` (turning
    multi-line off changes ``^``/``$``), and braces holding letters (``regex``'s fuzzy matching, ``\\N{...}``).
    The test is textual and conservative: an escaped look-alike (``\\\\A``) only costs the fast path. Matches the
    joined text finds across lines (``a\\sb`` over ``a\\nb``) only cost a per-line pass over that file."""
    if any(token in pattern for token in ("\\A", "\\Z", "\\z", "\\G", "(?!", "(?<!")):
        return False
    if regex.search(r"\{[^}]*[A-Za-z]", pattern):
        return False
    return all(set(m.group(1)) <= set("aiLmsux") for m in _FLAG_GROUP.finditer(pattern))


_PLAIN_ALTERNATIVES = re.compile(r"[^.^$*+?{}\[\]\\|()]+(?:\|[^.^$*+?{}\[\]\\|()]+)*")


def literal_alternatives(pattern: str) -> tuple[str, ...] | None:
    """The lower-cased alternatives of a pattern that is only ASCII literals joined by ``|`` (``error``,
    ``TODO|FIXME``), else None. On ASCII text, such a pattern matches (case-insensitively) exactly where one of them
    is a substring of the lower-cased text, which ``str`` finds much faster than a regex alternation."""
    if not pattern.isascii() or _PLAIN_ALTERNATIVES.fullmatch(pattern) is None:
        return None
    return tuple(alternative.lower() for alternative in pattern.split("|"))


def literal_lines(lowered: str, literals: Sequence[str]) -> list[tuple[int, int]]:
    """(index, offset of its start) of each line of ``lowered`` (lines joined by ``\\n``) holding one of
    ``literals``, in order: the text is searched for each literal, not split (newlines are counted to each hit)."""
    if any(not x or "\n" in x for x in literals):
        return [(i, at) for i, at, line in _split_lines(lowered) if any(x in line for x in literals)]
    found: dict[int, int] = {}
    for literal in literals:
        line, at = 0, 0
        pos = lowered.find(literal)
        while pos != -1:
            line += lowered.count("\n", at, pos)
            start = lowered.rfind("\n", 0, pos) + 1
            found[line] = start
            end = lowered.find("\n", pos)
            if end == -1:
                break
            line, at = line + 1, end + 1
            pos = lowered.find(literal, at)
    return sorted(found.items())


def _split_lines(text: str) -> Iterator[tuple[int, int, str]]:
    """(index, offset, line) of every line of ``text`` (lines joined by ``\\n``)."""
    at = 0
    for i, line in enumerate(text.split("\n")):
        yield i, at, line
        at += len(line) + 1


def _line_at(text: str, start: int) -> str:
    """The line of ``text`` (lines joined by ``\\n``) that starts at offset ``start``."""
    end = text.find("\n", start)
    return text[start:] if end == -1 else text[start:end]


def _window(text: str, index: int, start: int, context: int) -> list[tuple[int, str]]:
    """The lines ``index - context`` to ``index + context`` of ``text`` (lines joined by ``\\n``) that exist, read
    around the line at offset ``start``, not split out of the whole text."""
    before: list[tuple[int, str]] = []
    at = start
    for j in range(index - 1, max(-1, index - context - 1), -1):
        at = text.rfind("\n", 0, at - 1) + 1
        before.append((j, _line_at(text, at)))
    out = [*reversed(before), (index, _line_at(text, start))]
    at = start
    for j in range(index + 1, index + context + 1):
        at = text.find("\n", at) + 1
        if at == 0:  # no line after the last one
            break
        out.append((j, _line_at(text, at)))
    return out


_NEWLINE_FREE_ESCAPES = set("wdbBS.()[]{}*+?|^$\\/-:'\"#<>=!,&%@~`;_ ")


def never_spans_lines(pattern: str) -> bool:
    """Whether no match of ``pattern`` can contain a newline: then every match the joined text has lies inside one
    line, so the lines holding a match's start are the only lines a per-line search can match in (each is checked on
    its own again). Textual and conservative: no ``\\s``, ``\\n``, ``\\W``, ``\\D`` or other escapes that can
    match a newline, no negated class ``[^``, no ``(?s`` / ``(?x`` flags, no ``\\p{``."""
    if "[^" in pattern or "(?" in pattern:
        return False
    i = 0
    while i < len(pattern):
        if pattern[i] == "\\":
            if i + 1 >= len(pattern) or pattern[i + 1] not in _NEWLINE_FREE_ESCAPES:
                return False
            i += 2
            continue
        i += 1
    return True


def _candidate_lines(searcher: Searcher, joined: str, deadline: float, clock: Clock) -> list[tuple[int, int]]:
    """(index, offset of its start) of each line of ``joined`` (lines joined by ``\\n``) where a match of the joined
    text starts (newlines are counted to each match; the text is not split)."""
    found: list[tuple[int, int]] = []
    line, at = 0, 0
    for start in grep_deadline.match_starts(searcher, joined, deadline, clock):
        line += joined.count("\n", at, start)
        at = start
        if not found or found[-1][0] != line:
            found.append((line, joined.rfind("\n", 0, at) + 1))
    return found


def _needs_strip(pattern: str) -> bool:
    """Whether the joined text must be built from stripped lines: only anchors see the leading indentation that code
    lines keep (every other edge test sees a non-word character either way)."""
    bare = pattern.replace("[^", "")
    return "^" in bare or "$" in bare


def clip_line(line: str, column: int | None) -> str:
    """``line`` as grep shows it: whole when it holds at most ``GREP_LINE_CHARS`` characters, else that many of them
    around ``column`` (where the match starts, 0-based; None: a context line, kept from its start), each side cut
    replaced by a marker saying how many characters it left out (the first also where the match is), so 20 matches
    on a minified 1 MB line fit the page's cap."""
    if len(line) <= GREP_LINE_CHARS:
        return line
    at = 0 if column is None else min(max(0, column - GREP_LINE_CHARS // 2), len(line) - GREP_LINE_CHARS)
    end = at + GREP_LINE_CHARS
    head = (
        f"[... {at:,} characters cut; the match is at column {column + 1:,} ...]" if at and column is not None else ""
    )
    tail = f"[... {len(line) - end:,} more characters cut ...]" if end < len(line) else ""
    return head + line[at:end] + tail


def _timed_out(pattern: str, time_limit: float) -> ValidationError:
    return ValidationError(
        f"grep_files stopped at its {time_limit:g}-second time limit without finishing: the pattern '{pattern}' is too slow over "
        "the attached files (nested repetition such as (a+)+ backtracks without end). Nothing partial is shown. "
        "Use a simpler or more specific pattern (a literal word or phrase, fewer wildcards), or narrow the files "
        "with include."
    )


def grep(
    files: Sequence[GrepFile],
    pattern: str,
    include: str | None = None,
    context_lines: int | None = 1,
    offset: int | None = None,
    *,
    time_limit: float = GREP_TIMEOUT_SECONDS,
    clock: Clock = time.monotonic,
) -> GrepResult:
    """Letta's ``grep_files``: every line (its stripped content) of every file, in order, searched on its own for
    ``pattern`` (case-insensitive, multi-line), up to 1000 matches collected; a page of 20 shown from ``offset`` with
    ``context_lines`` lines of context each. Files over 50 MB are skipped, and once 200 MB have been read the rest is
    skipped (counted as one, as Letta). The whole call is bounded by ``time_limit`` seconds of the wall clock
    ``clock`` (``grep_deadline``: a search still running then is stopped); running out raises ``ValidationError``
    (Letta raises a bare timeout). A file whose joined text has no match is skipped without its
    per-line pass when ``prefilter_is_sound(pattern)``; for a pattern of plain ASCII literals over ASCII text that
    search is a substring test (``literal_alternatives``); before either, a file whose trigram signature lacks what
    every match needs is skipped unread (``grep_index``)."""
    if not pattern or not pattern.strip():
        raise ValidationError("Empty search pattern provided")
    pattern = pattern.strip()
    compiled = compile_pattern(pattern)
    include_regex = include_filter(include)
    if include_regex is not None and include is not None:
        include = include.strip()
    deadline = clock() + time_limit

    def search(searcher: Searcher, text: str) -> bool:
        try:
            return grep_deadline.search(searcher, text, deadline, clock)
        except TimeoutError as exc:
            raise _timed_out(pattern, time_limit) from exc

    if not files:
        return GrepResult("No files are currently attached to search", [])
    if include_regex is not None:
        original_count = len(files)
        files = [f for f in files if search(include_regex, f.name)]
        if not files:
            return GrepResult(f"No files match the filename pattern '{include}' (filtered {original_count} files)", [])
    if offset is not None and offset < 0:
        offset = 0  # as Letta: a negative offset is the first page
    if context_lines is not None and (isinstance(context_lines, bool) or context_lines < 0):
        raise ValidationError(
            f"context_lines must be a whole number >= 0 (0 shows each matching line alone), got {context_lines!r}."
        )
    context = context_lines or 0
    # the lines read around a match: more than the page's cap could show (each line takes 5+ characters) is not
    # read (the answer's note says so when it left lines out)
    reach = min(context, GREP_CONTEXT_CHARS // 10)
    # the collected matches the answer shows: only theirs are read with their context (a match off the page keeps
    # its line alone, so a wide context_lines builds 20 windows, not one per match collected)
    page_from = offset or 0
    on_page = range(page_from, page_from + GREP_PAGE_SIZE)
    probe = reach + 1 if reach < context else reach  # a line more: whether the reach left lines out (then noted)
    prefilter = prefilter_is_sound(pattern)
    strip = _needs_strip(pattern)
    literals = literal_alternatives(pattern)
    narrow = prefilter and never_spans_lines(pattern)  # only lines where a match of the whole file starts
    needs = requirement(pattern) if prefilter else None  # the trigrams a file must hold to match (``grep_index``)

    matches: list[tuple[str, int, list[str]]] = []
    reached: set[int] = set()  # the matches (positions in ``matches``) whose context the reach cut
    clipped: dict[int, int] = {}  # match (position in ``matches``) -> its nearest line cut to ``GREP_LINE_CHARS``
    matched: dict[str, None] = {}
    total_size = processed = skipped = 0
    for f in files:
        if f.size_bytes > MAX_FILE_SIZE_BYTES:
            skipped += 1
            continue
        total_size += f.size_bytes
        if total_size > MAX_TOTAL_CONTENT_SIZE:
            skipped += 1
            break
        processed += 1
        if needs is not None and isinstance(f.lines, JoinedLines) and not f.lines.signature().may_match(needs):
            continue
        kept = f.lines.text if isinstance(f.lines, JoinedLines) else None
        if prefilter and kept is not None and not strip:  # the file's lines are split only if it may match
            if not kept:
                continue
            joined = kept
            lines: Sequence[str] = ()
        else:
            lines = f.lines.split() if isinstance(f.lines, JoinedLines) else f.lines
            joined = ("\n".join(map(str.strip, lines)) if strip else "\n".join(lines)) if prefilter and lines else ""
        candidates: list[tuple[int, int]] | None = None  # (index, offset in ``joined``) of the lines to check
        if prefilter and joined:
            if literals is not None and joined.isascii():
                lowered = joined.lower()
                if not any(literal in lowered for literal in literals):
                    continue
                candidates = literal_lines(lowered, literals)
            elif not search(compiled, joined):
                continue
            elif narrow:
                try:
                    candidates = _candidate_lines(compiled, joined, deadline, clock)
                except TimeoutError as exc:
                    raise _timed_out(pattern, time_limit) from exc
        if not lines and kept and candidates is not None:  # read where they are: the file is not split
            text = kept
            checks: Iterable[tuple[int, str]] = ((i, _line_at(text, at)) for i, at in candidates)
            starts = dict(candidates)

            def window(index: int) -> list[tuple[int, str]]:
                return _window(text, index, starts[index], probe)

        else:
            if not lines and kept:
                lines = f.lines.split() if isinstance(f.lines, JoinedLines) else f.lines
            every = lines
            indexes = (i for i, _ in candidates) if candidates is not None else range(len(every))
            checks = ((i, every[i]) for i in indexes)

            def window(index: int) -> list[tuple[int, str]]:
                return [(j, every[j]) for j in range(max(0, index - probe), min(len(every), index + probe + 1))]

        for index, line in checks:
            if len(matches) >= MAX_TOTAL_COLLECTED:
                break
            stripped = line.strip()
            if search(compiled, stripped):
                matched[f.name] = None
                if len(matches) not in on_page:  # never shown: its line is not kept
                    matches.append((f.name, index + 1, []))
                    continue
                column = None
                if len(line) > GREP_LINE_CHARS:  # clipped around the match: where it starts in the line shown
                    try:
                        found = grep_deadline.match_starts(compiled, stripped, deadline, clock)
                    except TimeoutError as exc:
                        raise _timed_out(pattern, time_limit) from exc
                    column = len(line) - len(line.lstrip()) + (found[0] if found else 0)
                read = window(index)
                kept_lines = [(j, shown) for j, shown in read if abs(j - index) <= reach]
                if len(kept_lines) < len(read):
                    reached.add(len(matches))
                long = [abs(j - index) for j, shown in kept_lines if len(shown) > GREP_LINE_CHARS]
                if long:
                    clipped[len(matches)] = min(long)  # lines from the match: shown unless the page's cap cuts it
                around = [
                    f"> {j + 1}: {clip_line(shown, column)}" if j == index else f"  {j + 1}: {clip_line(shown, None)}"
                    for j, shown in kept_lines
                ]
                matches.append((f.name, index + 1, around))
        if len(matches) >= MAX_TOTAL_COLLECTED:
            break
    matched_files = list(matched)
    return GrepResult(
        _grep_text(
            pattern, include, context, offset, matches, len(matched_files), processed, skipped, reach, reached, clipped
        ),
        matched_files,
    )


def _cut_context(
    page: list[tuple[str, int, list[str]]], context_lines: int, reach: int | None, budget: int = GREP_CONTEXT_CHARS
) -> tuple[list[tuple[str, int, list[str]]], int | None]:
    """The page's matches with their context cut to the widest radius (lines each side of the match line) that keeps
    it within ``budget`` characters, and that radius (None: nothing cut). The match lines are always shown.
    ``reach``: the radius the search read, when it left out lines of some match of the page (a cut too)."""

    def cut(radius: int) -> list[tuple[str, int, list[str]]]:
        out = []
        for name, line_num, around in page:
            at = next(i for i, line in enumerate(around) if line.startswith(">"))
            out.append((name, line_num, around[max(0, at - radius) : at + radius + 1]))
        return out

    def size(matches: list[tuple[str, int, list[str]]]) -> int:
        return sum(len(line) + 1 for _, _, around in matches for line in around)

    if context_lines <= 0 or size(page) <= budget:
        return page, reach
    widest = max(len(around) for _, _, around in page)  # no window holds more than this radius can show
    low, high = 0, min(context_lines, widest)  # the widest radius that fits lies in [low, high)
    while low < high - 1:
        middle = (low + high) // 2
        low, high = (middle, high) if size(cut(middle)) <= budget else (low, middle)
    return cut(low), low


def grep_call(pattern: str, include: str | None, context_lines: int, offset: int) -> str:
    """The ``grep_files`` call for another page: every argument given repeated (the default context left out, as
    Letta's hint has it), strings as JSON strings, so it is a call the model can make as written."""
    args = [f"pattern={json.dumps(pattern, ensure_ascii=False)}"]
    if include is not None:
        args.append(f"include={json.dumps(include, ensure_ascii=False)}")
    if context_lines != 1:
        args.append(f"context_lines={context_lines}")
    return f"grep_files({', '.join(args)}, offset={offset})"


def _grep_text(
    pattern: str,
    include: str | None,
    context_lines: int,
    offset: int | None,
    matches: list[tuple[str, int, list[str]]],
    file_count: int,
    processed: int,
    skipped: int,
    reach: int,
    reached: Collection[int],
    clipped: Mapping[int, int],
) -> str:
    total = len(matches)
    if total == 0:
        summary = f"No matches found for pattern: '{pattern}'"
        if include:
            summary += f" in files matching '{include}'"
        if skipped > 0:
            summary += f" (searched {processed} files, skipped {skipped})"
        return summary
    start = offset if offset else 0
    end = start + GREP_PAGE_SIZE
    page = matches[start:end]
    hit_limit = total >= MAX_TOTAL_COLLECTED
    if start >= total:  # beyond Letta, which says "showing matches 1001-1000"
        last = (total - 1) // GREP_PAGE_SIZE * GREP_PAGE_SIZE
        return (
            f"Found {total}{'+' if hit_limit else ''} total matches across {file_count} files, but none at offset "
            f"{start}: offsets run from 0 to {total - 1}. To see the last page, call: "
            f"{grep_call(pattern, include, context_lines, last)}"
        )
    if hit_limit:
        summary = (
            f"Found {MAX_TOTAL_COLLECTED}+ total matches across {file_count} files (showing matches "
            f"{start + 1}-{min(end, total)} of {MAX_TOTAL_COLLECTED}+)"
        )
    else:
        summary = (
            f"Found {total} total matches across {file_count} files (showing matches "
            f"{start + 1}-{min(end, total)} of {total})"
        )
    if skipped > 0:
        summary += f"\nNote: Skipped {skipped} files due to size limits"
    out = [summary, "=" * 80]
    counts: dict[str, int] = {}
    for name, _line, _context in matches:
        counts[name] = counts.get(name, 0) + 1
    out.append("\nFiles with matches:")
    listed = _files_listed(counts, hit_limit, include)
    out += listed
    out.append("")
    cut_by_reach = any(i in reached for i in range(start, min(end, total)))
    budget = GREP_CONTEXT_CHARS - sum(len(line) + 1 for line in listed)  # the list and the context share the cap
    shown, radius = _cut_context(page, context_lines, reach if cut_by_reach else None, budget)
    for name, line_num, around in shown:
        out.append(f"\n=== {name}:{line_num} ===\n" + "\n".join(around))
    out.append("")
    if radius is not None:
        out.append(
            f"Note: context cut to {radius} line(s) around each match (context_lines={context_lines}) to keep the "
            f"matches shown and the list of files under {GREP_CONTEXT_CHARS:,} characters; open_files on a match's "
            "lines reads more of its context."
        )
    shown_radius = context_lines if radius is None else radius
    if any(i in clipped and clipped[i] <= shown_radius for i in range(start, min(end, total))):
        out.append(
            f"Note: lines longer than {GREP_LINE_CHARS:,} characters are shown in part ({GREP_LINE_CHARS:,} "
            "characters around the match on a match's line, the first ones on a line of context); each "
            "[... N characters cut ...] marks what was left out of the line."
        )
    if end < total:
        out.append(f"To see more matches, call: {grep_call(pattern, include, context_lines, end)}")
        if hit_limit:
            out.append(
                f"Note: Only the first {MAX_TOTAL_COLLECTED} matches were collected. There may be more "
                "matches beyond this limit."
            )
    elif hit_limit:
        out.append("Showing last page of collected matches. There may be more matches beyond the collection limit.")
    else:
        out.append("No more matches to show.")
    return "\n".join(out)


def _files_listed(counts: Mapping[str, int], hit_limit: bool, include: str | None) -> list[str]:
    """Letta's "Files with matches" lines (most matches first), as many as fit ``GREP_FILES_CHARS``; beyond Letta,
    which lists every file, a last line says how many were left out and how to narrow the search."""
    lines: list[str] = []
    size = 0
    ranked = sorted(counts.items(), key=lambda item: item[1], reverse=True)
    for n, (name, count) in enumerate(ranked):
        plus = "+" if hit_limit and count >= MAX_TOTAL_COLLECTED else ""
        line = f"  - {name}: {count}{plus} matches"
        if size + len(line) + 1 > GREP_FILES_CHARS:
            narrow = "a narrower include glob" if include else 'include (a glob such as include="docs/*.md")'
            lines.append(
                f"  ... and {len(ranked) - n} more files, not listed to keep this answer under "
                f"{GREP_CONTEXT_CHARS:,} characters: narrow the search with a more specific pattern or {narrow}"
            )
            break
        lines.append(line)
        size += len(line) + 1
    return lines


# ----------------------------------------------------------------------------------------------------- semantic search


def semantic_query(query: str) -> str:
    """A ``semantic_search_files`` query as Letta takes it: stripped, refused when blank."""
    if not query or not query.strip():
        raise ValidationError("Empty search query provided")
    return query.strip()


def semantic_text(query: str, hits: Sequence[tuple[str, str]]) -> str:
    """Letta's ``_search_files_native`` answer for ``hits`` ((file name, passage text), best first, already cut to
    ``min(limit, SEMANTIC_LIMIT_CAP)``): passages grouped by file in first-seen order and numbered, each passage's
    first 20 lines indented by two spaces. A hit without a file name is shown under "Unknown File"."""
    query = semantic_query(query)
    if not hits:
        return f"No semantic matches found for query: '{query}'"
    by_file: dict[str, list[str]] = {}
    for name, text in hits:
        by_file.setdefault(name or "Unknown File", []).append(text)
    results = []
    number = 0
    for name, passages in by_file.items():
        for text in passages:
            number += 1
            lines = text.strip().splitlines()
            shown = [f"  {line}" for line in lines[:PASSAGE_LINES]]
            if len(lines) > PASSAGE_LINES:
                shown.append(f"  ... [truncated {len(lines) - PASSAGE_LINES} more lines]")
            results.append(f"\n=== {name} (passage #{number}) ===\n" + "\n".join(shown))
    count = len(by_file)
    summary = f"Found {number} semantic matches in {count} file{'s' if count != 1 else ''} for query: '{query}'"
    return "\n".join([summary, "=" * len(summary), *results])


# --------------------------------------------------------------------------------------------------------- directories


@dataclass(frozen=True)
class DirectoryInfo:
    """A folder attached to the agent, as the prompt shows it."""

    id: str
    name: str
    description: str | None = None
    instructions: str | None = None


@dataclass(frozen=True)
class FileEntry:
    """A file of an attached folder, as the prompt shows it: ``value`` is its visible text ("" when closed) and
    ``limit`` its block's character limit. (Letta marks every file block read-only.)"""

    folder_id: str
    name: str
    value: str
    limit: int
    read_only: bool = False


def _render_file(out: list[str], entry: FileEntry) -> None:
    name = markup_name(entry.name or "file")  # beyond Letta: a name's markup and invisible characters escaped
    out.append(f'<file status="{"open" if entry.value else "closed"}" name="{name}">\n')
    out.append("<metadata>")
    if entry.read_only:
        out.append("\n- read_only=true")
    out.append(f"\n- chars_current={len(entry.value or '')}\n")
    out.append(f"- chars_limit={entry.limit}\n")
    out.append("</metadata>\n")
    if entry.value:
        out.append(f"<value>\n{entry.value}\n</value>\n")
    out.append("</file>\n")


def render_directories(
    max_files_open: int | None,
    folders: Sequence[DirectoryInfo],
    files: Sequence[FileEntry],
    *,
    closed_cap: int | None = None,
) -> str:
    """The ``<directories>`` section of the prompt, as Letta's ``_render_directories_common`` writes it (with the
    leading blank line). Beyond Letta: names are escaped (``quoting.markup_name``: an ordinary one is as Letta writes
    it), so a file named ``x</value></file>`` or holding a bidirectional override cannot change what the section
    says; with ``closed_cap``, a folder with more closed files than that lists only the
    first ``closed_cap`` of them and then one ``<more_files count="N">`` line, so a huge folder stays out of the
    prompt while the model still learns the files exist and how to reach them."""
    out = ["\n\n<directories>\n"]
    if max_files_open is not None:
        current_open = sum(1 for f in files if f.value)
        out.append(
            f"<file_limits>\n- current_files_open={current_open}\n- max_files_open={max_files_open}\n</file_limits>\n"
        )
    for folder in folders:
        out.append(f'<directory name="{markup_name(folder.name)}">\n')
        if folder.description:
            out.append(f"<description>{folder.description}</description>\n")
        if folder.instructions:
            out.append(f"<instructions>{folder.instructions}</instructions>\n")
        closed_shown = hidden = 0
        for entry in files:
            if entry.folder_id != folder.id:
                continue
            if not entry.value and closed_cap is not None:
                if closed_shown >= closed_cap:
                    hidden += 1
                    continue
                closed_shown += 1
            _render_file(out, entry)
        if hidden:
            out.append(
                f'<more_files count="{hidden}">{hidden} more closed file{"s" if hidden != 1 else ""} in this '
                "directory are not listed here; grep_files and semantic_search_files search them too, and "
                "open_files opens any of them by name.</more_files>\n"
            )
        out.append("</directory>\n")
    out.append("</directories>")
    return "".join(out)


# --------------------------------------------------------------------------------------------------------------- names


def _check_name(name: str, what: str, example: str) -> str:
    if not name or not name.strip():
        raise ValidationError(f"A {what} name cannot be empty; give it a name such as '{example}'.")
    if any("\ud800" <= c <= "\udfff" for c in name):  # a name on disk whose bytes are not UTF-8 (os.fsdecode's escapes)
        clean = "".join("?" if "\ud800" <= c <= "\udfff" else c for c in name)
        raise ValidationError(
            f"The {what} name {clean!r} is not valid UTF-8 (each '?' stands for a byte it cannot hold: the name was "
            f"written in another encoding); rename it in UTF-8, e.g. {clean.replace('?', '_')!r}."
        )
    bad = [c for c in name if unicodedata.category(c) in ("Cc", "Zl", "Zp")]
    if bad:
        clean = "".join(" " if unicodedata.category(c) in ("Cc", "Zl", "Zp") else c for c in name).strip()
        raise ValidationError(
            f"The {what} name {name!r} contains a control character ({bad[0]!r}); use printable "
            f"characters only, e.g. '{clean or example}'."
        )
    if name != name.strip():
        raise ValidationError(f"The {what} name {name!r} starts or ends with whitespace; use '{name.strip()}'.")
    if "\\" in name:
        raise ValidationError(
            f"The {what} name {name!r} contains a backslash; separate directories with '/', e.g. "
            f"'{name.replace(chr(92), '/')}'."
        )
    if name.startswith("/") or re.match(r"[A-Za-z]:/", name):
        relative = name.lstrip("/") if name.startswith("/") else name[3:]
        raise ValidationError(
            f"The {what} name {name!r} is an absolute path; use a name relative to its folder, "
            f"e.g. '{relative or example}'."
        )
    parts = name.split("/")
    if any(part in ("..", ".") for part in parts):
        plain = "/".join(p for p in parts if p not in ("..", ".", ""))
        raise ValidationError(
            f"The {what} name {name!r} has a '.' or '..' component; use a plain name inside the "
            f"folder, e.g. '{plain or example}'."
        )
    if any(part == "" for part in parts):
        raise ValidationError(
            f"The {what} name {name!r} has an empty path component (a doubled or trailing '/'); "
            f"use '{'/'.join(p for p in parts if p) or example}'."
        )
    return name


def check_file_name(name: str) -> str:
    """The one rule for a file name, whoever gives it (a user, an uploaded file, a model): not empty, no control or
    line-separator characters, no leading or trailing whitespace, no backslash, not absolute, no ``.``/``..`` or
    empty components, at most 255 characters (Letta's MAX_FILENAME_LENGTH). ``/`` may separate a relative path.
    Returns the name unchanged; raises ``ValidationError`` naming the bad name and what to use instead."""
    _check_name(name, "file", "notes.md")
    if len(name) > MAX_FILENAME_LENGTH:
        raise ValidationError(
            f"The file name {name[:40]!r}... is {len(name)} characters long; use at most {MAX_FILENAME_LENGTH}."
        )
    return name


def check_folder_name(name: str) -> str:
    """A folder name: the file name rules, no ``/`` or backslash at all, not ``.`` or ``..``, at most 100
    characters. Each refusal suggests a name a folder may have (the file name rules suggest paths)."""
    if isinstance(name, str) and ("/" in name or "\\" in name):
        raise ValidationError(
            f"The folder name {name!r} contains {chr(39) + '/' + chr(39) if '/' in name else 'a backslash'}; "
            f"folders do not nest, use e.g. '{_flat_name(name)}'."
        )
    if name in (".", ".."):
        raise ValidationError(f"{name!r} cannot name a folder; use a plain name, e.g. 'docs'.")
    _check_name(name, "folder", "docs")
    if len(name) > MAX_FOLDER_NAME_LENGTH:
        raise ValidationError(
            f"The folder name {name[:40]!r}... is {len(name)} characters long; use at most {MAX_FOLDER_NAME_LENGTH}."
        )
    return name


def _flat_name(name: str) -> str:
    """A folder name made of a path's parts joined by ``-``: without the characters no name may hold (control and
    line-separator characters, a byte that is not UTF-8), within ``MAX_FOLDER_NAME_LENGTH``, trimmed; ``docs`` when
    what is left is not a folder name either (the suggestion a refusal makes is one the rules accept)."""
    parts = (p.strip() for p in re.split(r"[/\\]+", name) if p.strip() not in ("", ".", ".."))
    bad = ("Cc", "Zl", "Zp", "Cs")  # Cs: a lone surrogate, os.fsdecode's stand-in for a byte not UTF-8
    flat = (
        "".join(c for c in "-".join(parts) if unicodedata.category(c) not in bad)[:MAX_FOLDER_NAME_LENGTH]
        .rstrip(" -")
        .strip()
    )
    try:
        return check_folder_name(flat)
    except ValidationError:
        return "docs"


def unique_name(name: str, taken: set[str]) -> str:
    """``name``, or Letta's duplicate form ``base_(n).ext`` with the smallest n >= 1 not in ``taken`` (Letta numbers
    by the count of files of that original name, which gives the same names when none were deleted). The base is
    shortened when needed so the result stays within 255 characters."""
    if name not in taken:
        return name
    n = 1
    while (candidate := numbered(name, n)) in taken:
        n += 1
    return candidate


def folder_names(name: str) -> Iterator[str]:
    """The names a folder is given, in order, while the one before is taken: its own, then ``NAME_(1)`` ...
    ``NAME_(9999)``, the name shortened when needed so each stays within ``MAX_FOLDER_NAME_LENGTH`` (an agent
    file's import and a restore name a folder whose name the store has this way)."""
    yield name
    for n in range(1, 10_000):
        suffix = f"_({n})"
        yield name[: MAX_FOLDER_NAME_LENGTH - len(suffix)] + suffix


def numbered(name: str, n: int) -> str:
    """Letta's ``n``-th duplicate form of a file name, ``base_(n).ext``, the base shortened when needed so the result
    stays within 255 characters."""
    base, ext = posixpath.splitext(name)
    suffix = f"_({n}){ext}"
    return base[: max(0, MAX_FILENAME_LENGTH - len(suffix))] + suffix
