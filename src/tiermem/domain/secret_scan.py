"""Running the detectors over a text: ``find`` (exact, merged spans, each named by its most specific kind) and
``redact``. Each detector is skipped when the text holds none of its needles or its probe misses; the per-line ones
(assignment patterns: slow over long prose) run on the lines holding a needle only. A span is trimmed of the quotes
and punctuation some patterns take, and checked: its detector's check, the text before and after it, a variable's
name outside quotes, a name about a secret, AWS's documentation's example keys. Text holding invisible characters,
or a vendor's token in pieces (``secret_joins``), is scanned without them too. Nothing is imported or compiled until
the first call (``detectors``, cached). ``find`` is pure: the findings of the texts scanned lately are remembered
by each text's digest, never the text (an import checks a document, stores it, and checks it as stored: one scan)."""

from __future__ import annotations

import functools
import hashlib
import json
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

from . import secret_formats as formats
from . import secret_joins as joins
from . import secret_numbers as numbers
from . import secret_said as said
from .secret_detector import Detector
from .secret_plugins import plugin_detectors
from .secret_values import looks_random, names_a_secret, quoted


@dataclass(frozen=True)
class Finding:
    kind: str  # what a person calls it: "AWS access key", "password in a URL"
    start: int  # the secret's span in the text: text[start:end]
    end: int

    def where(self, text: str) -> str:
        """Line and characters of the span in ``text`` (1-based), e.g. "line 3, characters 8-47"."""
        line = text.count("\n", 0, self.start) + 1
        column = self.start - (text.rfind("\n", 0, self.start) + 1) + 1
        return f"line {line}, characters {column}-{column + self.end - self.start - 1}"


@dataclass(frozen=True)
class Redacted:
    text: str  # the text with each finding replaced by its marker
    findings: list[Finding]  # spans in the original text


def marker(kind: str) -> str:
    return f"[redacted: {kind}]"


# The generic assignment's value is one of three alternatives (double-quoted, single-quoted, bare)
_VALUE_GROUPS = (1, 2, 3)


# -- running them ----------------------------------------------------------------------------------------------------


@functools.cache
def detectors() -> tuple[Detector, ...]:
    """Every detector, ours first (a tie on a span is named by the more specific kind); built on first use. The
    order is the rank: ours as they were written in one table, detect-secrets' plugins last."""
    return tuple(
        formats.keys()
        + said.passwords()
        + formats.numbers_and_hashes()
        + said.labelled()
        + formats.given()
        + plugin_detectors()
    )


def prepare() -> None:
    """Build the detectors now (their imports take ~0.1 s once): a server does it in the background at start."""
    detectors()


# AWS's documentation's example keys (``AKIAIOSFODNN7EXAMPLE``, ``wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY``, and
# their like): published, so no credential, whichever detector takes them (a real key ends so by no chance)
_AWS_EXAMPLE = re.compile(r"(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{9}EXAMPLE|[A-Za-z0-9/+]{30}EXAMPLEKEY")


def _spans(text: str, d: Detector, json_text: bool) -> Iterator[tuple[int, int]]:
    for m in d.pattern.finditer(text):
        if d.group == "value":
            group = next((g for g in _VALUE_GROUPS if m.group(g) is not None), 0)
        else:
            group = d.group if isinstance(d.group, int) and m.group(d.group) is not None else 0
        start, end = m.span(group)
        if json_text and not d.lines:
            end = _line_end(text, start, end)
        start, end = _trim(text, start, end, json_text)
        if end - start < d.min_chars:
            continue
        value = text[start:end]
        if d.check is not None and not d.check(value):
            continue
        if d.before is not None and not d.before(_before(text, start)):
            continue
        if d.around is not None and not d.around(_before(text, start), _after(text, end)):
            continue
        if d.names and names_a_secret(value) and not quoted(text, start, end):
            continue
        if d.name_group and _names_no_secret(text, *m.span(d.name_group)) and not looks_random(value):
            continue
        if _AWS_EXAMPLE.fullmatch(text, start, end):
            continue
        yield start, end


def _before(text: str, start: int) -> str:
    """The text before ``start`` on its line, up to ``numbers.BEFORE`` characters (looked for within them only: a
    long line's matches each read as much)."""
    window = max(0, start - numbers.BEFORE)
    newline = text.rfind("\n", window, start)
    return text[newline + 1 if newline >= 0 else window : start]


def _after(text: str, end: int) -> str:
    """The text after ``end``, up to ``numbers.AFTER`` characters (its line and what follows it)."""
    return text[end : end + numbers.AFTER]


# The last word of a name that holds something about a secret, not the secret: ``api_key_source``, ``password_url``,
# ``secretName`` (detect-secrets' keyword patterns take any name starting with the word: ``password_secure``); a
# random-looking value given to it is a secret all the same (``secret_env = "Xk9vQ2mPz7a"``)
_ABOUT_A_SECRET = frozenset(
    ("source", "name", "names", "id", "ids", "url", "uri", "path", "file", "env", "var", "field", "header", "type")
    + ("length", "len", "policy", "prompt", "label", "hint", "required", "enabled", "format", "version", "count")
    + ("size", "limit", "expiry", "expires", "provider", "manager", "mode", "strength", "min", "max", "setting")
    + ("settings", "description", "help", "placeholder", "error", "message", "regex", "pattern")
)


def _names_no_secret(text: str, start: int, end: int) -> bool:
    """Whether the name around the keyword ``text[start:end]`` (the run of word characters holding it) ends with a
    word saying it holds something about a secret (``_ABOUT_A_SECRET``)."""
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_"):
        start -= 1
    while end < len(text) and (text[end].isalnum() or text[end] == "_"):
        end += 1
    parts = re.findall(r"[A-Z]{2,}(?![a-z])|[A-Z]?[a-z]+|\d+", text[start:end])
    return len(parts) > 1 and parts[-1].lower() in _ABOUT_A_SECRET


def _trim(text: str, start: int, end: int, json_text: bool) -> tuple[int, int]:
    """A span without the delimiters, quotes and whitespace some patterns include around the secret, and inside the
    backticks of a code span (`` `Xk9vQ2mPz7a` ``); a shell's command substitution (`` `cat ~/.pw` ``, spaces inside)
    is taken whole, to its closing backtick on the line, for the checks to see a reference (``_PLACEHOLDER``)."""
    while start < end and text[start] in " \t\r\n=:\"'":
        start += 1
    while end > start and text[end - 1] in " \t\r\n\"'":
        end -= 1
    if text.startswith("AccountKey=", start):  # detect-secrets' Azure pattern includes the name
        start += len("AccountKey=")
    if 0 < start < end and text[start - 1] == "`" != text[start]:
        start -= 1  # a value in backticks (detect-secrets' patterns take a backtick for a quote): read as one
    if start < end and text[start] == "`":
        line_end = text.find("\n", start)
        close = text.find("`", start + 1, len(text) if line_end < 0 else line_end)
        inside = text[start + 1 : close] if close > start else ""
        if close < 0 or any(ch.isspace() for ch in inside) or "$(" in inside:
            return start, max(end, close + 1)  # a command, or a lone backtick: the checks decide
        if close + 1 >= end:
            return start + 1, min(end, close)  # a code span: its inside (a shorter match ends inside it)
    return start, _closed(text, start, end, json_text)


_ESCAPED_BREAK = re.compile(r"(?<!\\)(?:\\\\)*\\[nrt]")  # JSON's "\n", "\r", "\t" (not an escaped backslash's "n")


def _line_end(text: str, start: int, end: int) -> int:
    """The end of a span that stops at an escaped line break or tab inside it, in JSON text (a document read whole,
    ``_json_text``): a value on one line of a string ends where the line does (``api_key=api_key)\\n\\n    # Set
    up``). In other text a backslash and an "n" are two characters of a value (``DB_PASSWORD=Zq8\\nvN3m``)."""
    if "\\" not in text[start:end]:
        return end
    m = _ESCAPED_BREAK.search(text, start, end)
    return end if m is None else m.end() - 2


_OPENERS = {")": "(", "]": "[", "}": "{"}


def _closed(text: str, start: int, end: int, json_text: bool) -> int:
    """The end of the span ``text[start:end]`` without the punctuation after a bare value that closes what came before
    it: a call's ``)`` (``Client(api_key=VALUE)``), a ``]`` or ``}`` opened on its line before it (each closer taken
    off closes one of them), and a code span's closing backtick (``--pass VALUE` ``: a shell's word holds no lone
    backtick). The value and its line are counted once (a count per closer taken off was quadratic on a run of them);
    the line is read back no further than the value is long and 1,000 characters more."""
    last = text[end - 1] if end > start else ""
    if last != "`" and last not in _OPENERS:
        return end
    value = Counter(ch for ch in text[start:end] if ch in "`()[]{}")
    line_start = max(text.rfind("\n", 0, start) + 1, start - (end - start) - 1000)
    escaped = text.rfind("\\n", line_start, start) if json_text else -1  # from its last escaped line break
    if escaped >= 0:
        line_start = escaped + 2
    line = Counter(ch for ch in text[line_start:start] if ch in "()[]{}")
    while end > start:
        last = text[end - 1]
        opener = _OPENERS.get(last)
        if last == "`" and value["`"] % 2:
            value["`"] -= 1
        elif opener is not None and value[last] > value[opener] and line[opener] > line[last]:
            value[last] -= 1
            line[opener] -= 1
        else:
            break
        end -= 1
    return end


# Every word the per-line detectors' needles contain one of: the lines holding none are skipped by all of them
_LINE_WORDS = re.compile(r"key|pass|pw|auth|secret|token|contrase|credential|dsn|softlayer|cloudant")


def _candidate_lines(text: str, lowered: str) -> list[tuple[int, str, str]]:
    """(offset, line, lowered line) of each line holding one of ``_LINE_WORDS``, found in one pass."""
    out: list[tuple[int, str, str]] = []
    end = -1
    for m in _LINE_WORDS.finditer(lowered):
        if m.start() <= end:
            continue  # still on the line just taken
        start = text.rfind("\n", 0, m.start()) + 1
        end = text.find("\n", m.start())
        end = len(text) if end < 0 else end
        out.append((start, text[start:end], lowered[start:end]))
    return out


@functools.cache
def _needle_pattern(needles: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(n) for n in sorted(needles, key=len, reverse=True)))


def _line_spans(
    lines: list[tuple[int, str, str]],
    d: Detector,
    chosen: dict[tuple[str, ...], list[tuple[int, str]]],
    json_text: bool,
) -> Iterator[tuple[int, int]]:
    """``d`` run on each candidate line holding one of its needles (detect-secrets' assignment patterns assume one
    line, and are slow over long prose); ``chosen`` keeps the lines of each set of needles (detectors share them)."""
    if d.needles not in chosen:
        pattern = _needle_pattern(d.needles)
        chosen[d.needles] = [(offset, line) for offset, line, lowered in lines if pattern.search(lowered)]
    for offset, line in chosen[d.needles]:
        for start, stop in _spans(line, d, json_text):
            yield offset + start, offset + stop


# Characters that show as nothing: inside a key they hide it from every pattern ("sk-ant-\u200bapi03-...")
_INVISIBLE = "\u00ad\u200b\u200c\u200d\u2060\u2061\u2062\u2063\u2064\ufeff"
VISIBLE = str.maketrans("", "", _INVISIBLE)


# ``find`` is pure: the findings of texts scanned lately are remembered (an import checks a document, then stores
# it, then checks what it stores: the same text scanned three times), by the text's digest, never the text, so no
# credential a text held stays in memory through it; at most ``_MEMO_TEXTS``, each up to ``_MEMO_LONGEST`` characters
_MEMO_TEXTS = 4096
_MEMO_LONGEST = 1_000_000
_memo: OrderedDict[bytes, tuple[Finding, ...]] = OrderedDict()
_memo_lock = threading.Lock()


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def find(text: str) -> list[Finding]:
    """The credentials in ``text``, in order, as exact non-overlapping spans (``_find``), remembered for the texts
    scanned lately (``_memo``)."""
    if len(text) < 8:
        return []  # too short to hold one (``_raw``)
    if len(text) > _MEMO_LONGEST:
        return _find(text)
    key = _digest(text)
    with _memo_lock:
        known = _memo.get(key)
        if known is not None:
            _memo.move_to_end(key)
            return list(known)
    found = _find(text)
    with _memo_lock:
        _memo[key] = tuple(found)
        while len(_memo) > _MEMO_TEXTS:
            _memo.popitem(last=False)
    return found


def forget() -> None:
    """Forget the findings ``find`` remembers: its next scan of each text is a scan (``bench secrets`` times those)."""
    with _memo_lock:
        _memo.clear()


def _find(text: str) -> list[Finding]:
    """The credentials in ``text``, in order, as exact non-overlapping spans; overlapping findings are merged into
    one span named by its most specific kind. Text holding invisible characters is also scanned without them, and
    text holding a vendor's token in pieces without the breaks inside it (``secret_joins``: a finding across a break
    only inside the token), each finding placed back on the original text (its span takes the invisible characters,
    or the break, inside it)."""
    json_text = _json_text(text)
    raw = _raw(text, json_text)
    if not text.isascii() and any(ch in text for ch in _INVISIBLE):  # a str search each: cheaper than a regex
        raw += _without(text, [i for i, ch in enumerate(text) if ch not in _INVISIBLE], json_text)
    gaps, tokens = joins.pieces(text)
    if gaps:  # a finding without the breaks is one when it takes one, inside a joined token (not the next setting)
        kept = joins.kept(text, gaps)
        raw += [
            f
            for f in _without(text, kept, json_text)
            if joins.joined(kept, f[0], f[1]) and joins.within(tokens, f[0], f[1])
        ]
    if not raw:
        return []
    raw.sort()
    merged: list[tuple[int, int, int, str]] = []
    for start, end, rank, kind in raw:
        if merged and start < merged[-1][1]:
            s, e, r, k = merged[-1]
            best_rank, best_kind = min((r, k), (rank, kind))
            merged[-1] = (s, max(e, end), best_rank, best_kind)
        else:
            merged.append((start, end, rank, kind))
    return [Finding(kind, start, end) for start, end, _, kind in merged]


def _without(text: str, kept: list[int], json_text: bool) -> list[tuple[int, int, int, str]]:
    """The findings in the text of ``text``'s characters at ``kept``, placed back on ``text``."""
    shown = "".join(text[i] for i in kept)
    return [(kept[start], kept[end - 1] + 1, rank, kind) for start, end, rank, kind in _raw(shown, json_text)]


def _json_text(text: str) -> bool:
    """Whether ``text`` is a JSON document's text (a payload, metadata, a document ``redact_document`` reads whole,
    its strings' line breaks written as they are or not), whose ``\\n`` is an escaped line break (``_line_end``):
    only there; checked only when it holds a backslash."""
    if "\\" not in text or text.lstrip()[:1] not in ("{", "[", '"'):
        return False
    try:
        json.loads(text, strict=False)  # strict=False: a string's line breaks written as they are (``_spanned``)
    except (ValueError, RecursionError):  # not JSON, or nested too deep to read: text
        return False
    return True


def _raw(text: str, json_text: bool) -> list[tuple[int, int, int, str]]:
    """Every detector's spans in ``text``, unmerged: (start, end, rank (a lower one names the kind), kind)."""
    if len(text) < 8:
        return []
    lowered = text.lower()  # the same length but for a few characters (İ): those texts are lowered one by one
    if len(lowered) != len(text):
        lowered = "".join(ch.lower() if len(ch.lower()) == 1 else ch for ch in text)
    lines: list[tuple[int, str, str]] | None = None
    chosen: dict[tuple[str, ...], list[tuple[int, str]]] = {}
    held: dict[str, bool] = {}  # needle -> in the text (detectors share needles: each is looked for once)

    def holds(needle: str) -> bool:
        if needle not in held:
            held[needle] = needle in lowered
        return held[needle]

    raw: list[tuple[int, int, int, str]] = []
    for rank, d in enumerate(detectors()):
        if d.per_line:
            lines = _candidate_lines(text, lowered) if lines is None else lines
            spans = _line_spans(lines, d, chosen, json_text)
        elif d.needles and not any(map(holds, d.needles)):
            continue
        elif d.probe is not None and d.probe.search(text) is None:
            continue
        else:
            spans = _spans(text, d, json_text)
        for start, end in spans:
            raw.append((start, end, rank if d.specific else rank + 10_000, d.kind))
    return raw


def redact(text: str) -> Redacted:
    """``text`` with each credential replaced by ``[redacted: KIND]``."""
    found = find(text)
    if not found:
        return Redacted(text, [])
    parts: list[str] = []
    at = 0
    for f in found:
        parts += [text[at : f.start], marker(f.kind)]
        at = f.end
    parts.append(text[at:])
    return Redacted("".join(parts), found)
