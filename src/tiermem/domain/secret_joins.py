"""A token pasted in pieces: a vendor's key wrapped at a terminal's or an editor's width, or split by a space
("sk-ant-api03-Hq7L...\\n4Nc7..."), is one credential. ``pieces`` finds the line breaks and spaces inside such a token
after its vendor's prefix, and the token's span; ``secrets.find`` scans the text without them too, and places what
its detectors find inside such a token across a break back on the text (its span takes the break).

Breaks are inside a token of a fixed length (``_LENGTHS``: a GitHub token has 36 characters after ``ghp_``) when the
pieces after it make it exactly that long ("ghp_abc123 GitHub2 Actions3 ..." is prose). For a format of no fixed
length a piece is the key's when it looks random: no name made of words ("s3BucketName", "iPhone15Pro",
``_worded``), letters and digits or a capital inside it, and either the rest of its line (a wrapped key fills its
lines) or ``_RANDOM_PIECE`` characters of upper and lower case letters and digits. Never a bare prefix in prose
("xoxb- tokens"), nor a piece a name is given to ("Auth0Domain=...", "  s3BucketName: reports": the next setting):
a word after a key ("ghp_... thanks", "xoxb-... 2024") is the sentence's, and so is a short name after a space
("sk-proj-... v2Beta", "... MySQL8": ``_named``). Each pattern takes each step one way only
(possessive runs, disjoint classes), and a prefix inside a token's run already read is not read again: a run of
prefixes ("xoxb-xoxb-...") is read once, not once for each of its prefixes.
"""

from __future__ import annotations

import bisect
import re

# a vendor's distinctive prefix and how many characters follow it in a whole token (0: no fixed length)
_LENGTHS = {
    "sk-ant-api03-": 95,
    "sk-ant-admin01-": 95,
    "sk-proj-": 0,
    "sk-svcacct-": 0,
    "sk-admin-": 0,
    "ghp_": 36,
    "gho_": 36,
    "ghu_": 36,
    "ghs_": 36,
    "ghr_": 36,
    "github_pat_": 82,
    "glpat-": 20,
    "AIza": 35,
    "GOCSPX-": 28,
    "hf_": 34,
    "npm_": 36,
    "AKIA": 16,
    "ASIA": 16,
    "sk_live_": 0,
    "rk_live_": 0,
    "sk_test_": 0,
    "rk_test_": 0,
    "xoxb-": 0,
    "xoxp-": 0,
    "xoxa-": 0,
    "xoxe-": 0,
    "xapp-": 0,
}
_PREFIX = re.compile(
    r"(?<![A-Za-z0-9])(" + "|".join(re.escape(p) for p in sorted(_LENGTHS, key=len, reverse=True)) + r")"
)
_TOKEN = r"[A-Za-z0-9_\-]"
_BODY = re.compile(_TOKEN + r"*+")
# a line break with the indentation around it, written as it is or escaped as a JSON or a code string writes it (a
# literal "\\n" or "\\r\\n": a key pasted into a string as it wrapped), or a space or two
_BREAK = re.compile(r"[ \t]*+(?:\r?\n|(?:\\r)?\\n)[ \t]*+|[ \t]{1,2}+(?=" + _TOKEN + r")")
# what ends a line after a piece: the piece is the rest of its line (a wrapped key fills each line it is on); after an
# escaped break, an escaped one or the string's closing quote too
_LINE_END = re.compile(r"[ \t]*+(?:\r?\n|\Z)")
_ESCAPED_LINE_END = re.compile(r"[ \t]*+(?:\r?\n|(?:\\r)?\\n|[\"']|\Z)")
# a name given a value after a piece ("Auth0Domain=acme", "  s3BucketName: reports"): the next line is a new setting
_NAMED = re.compile(r"[ \t]*+[:=]")
# a piece of a key of no fixed length in the middle of a line: this long, upper and lower case letters and digits
_RANDOM_PIECE = 12
# ... or shorter, from this long, when its characters change between capitals, lower-case letters and digits at
# least every other character (three times at least), a lower-case letter among them: "tU9vW1x" ("base64", "GPT4o",
# "x86_64", "iPhone15", "A1B2C3" do not)
_SHORT_PIECE = 6
_CLASS_SWITCHES = 3
_MAX_PIECES = 8  # a key of 200 characters wrapped at 30 columns
# the parts of a word written in camel case ("s3BucketName": s, 3, Bucket, Name; "GPT4Turbo": GPT, 4, Turbo)
_PART = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_WORD_PART_LENGTH = 2.5  # characters a part on average, at least, in a word's name (about 2 in a random string)
_LONG = 16  # a piece this long is a name only with no lone lower-case letter among its parts ("S2" "a" "B" "x9")
_ACRONYM = 5  # capitals in a row a name has at most ("GPT", "HTTP", "JSON")
# consonants in a row no word of a name has ("lengths": 5; "Ihsrdxqqg", a random string's: 8)
_UNSPOKEN = re.compile(r"[bcdfghjklmnpqrstvwxz]{6}", re.IGNORECASE)
# a word of a version's or a product's name (``_named``) has a vowel, and no four other letters in a row
_VOWEL = re.compile(r"[aeiouy]", re.IGNORECASE)
_NO_VOWEL_RUN = re.compile(r"[^aeiouy]{4}", re.IGNORECASE)


def _worded(piece: str) -> bool:
    """A piece shaped as a name made of words ("s3BucketName", "Auth0Domain", "iPhone15Pro", "GPT4Turbo"): parts of
    ``_WORD_PART_LENGTH`` characters or more on average, at most one lone lower-case letter among them (none from
    ``_LONG`` characters on), no long run of capitals and no part no one could say (``_UNSPOKEN``). A random
    string's parts are shorter (a capital, a lone lower-case letter, a digit), so it is rarely taken for one (1 in 50
    of 16 characters, 1 in 150 of 24; one whose long part has six consonants in a row is not)."""
    parts = _PART.findall(piece)
    if not parts or any(_UNSPOKEN.search(p) for p in parts if not p.isupper()):
        return False
    lone = sum(1 for p in parts if p[-1].islower() and sum(c.islower() for c in p) < 2)
    return (
        len(piece) / len(parts) >= _WORD_PART_LENGTH
        and lone <= (1 if len(piece) < _LONG else 0)
        and not any(p.isupper() and len(p) > _ACRONYM for p in parts)
    )


def _token_like(piece: str) -> bool:
    """A piece of a key: letters and digits, or a capital inside it ("then", "Thanks", "OK" are words)."""
    letters = any(c.isalpha() for c in piece)
    return (letters and any(c.isdigit() for c in piece)) or (
        any(c.isupper() for c in piece[1:]) and any(c.islower() for c in piece)
    )


def _named(piece: str) -> bool:
    """A short piece shaped as a version's or a product's name ("v2Beta", "MySQL8", "Python3", "macOS14"): letters
    and digits under ``_RANDOM_PIECE`` characters, three parts at most (``_PART``), one run of digits, at the end or
    after a version's "v" first, and four letters or more in parts a person could say: an acronym ("SQL", "OS") or a
    word of two letters or more with a vowel and no four other letters in a row ("Beta", "My", "Alpha"). After a
    space it is the sentence's word, not a key's tail. A random tail rarely has that shape (about 1 in 70 of 5 or 6
    characters, 1 in 300 of 8): "Lom2Ef", "3XhSgmv", "g7pnkof", "NDjEut" (no digit) are a key's."""
    if len(piece) >= _RANDOM_PIECE or not piece.isalnum():
        return False
    parts = _PART.findall(piece)
    digits = [i for i, part in enumerate(parts) if part.isdigit()]
    if len(parts) > 3 or len(digits) != 1:
        return False
    if digits[0] == 1 and parts[0] in ("v", "V"):
        letters = parts[2:]  # "v2Beta"
    elif digits[0] == len(parts) - 1:
        letters = parts[:-1]  # "MySQL8"
    else:
        return False
    return sum(map(len, letters)) >= 4 and all(
        (part.isupper() and len(part) <= _ACRONYM) or (_VOWEL.search(part) and not _NO_VOWEL_RUN.search(part))
        for part in letters
    )


def _random(piece: str, *, line_end: bool) -> bool:
    """A piece of a key of no fixed length: no name made of words (``_worded``), and the rest of its line with
    letters and digits or a capital inside (a wrapped key's tail, "dD5x"), or else ``_RANDOM_PIECE`` characters or
    more of upper and lower case letters and digits, or ``_SHORT_PIECE`` or more changing between them at least every
    other character (a key split by a space in a sentence)."""
    if _worded(piece) or not _token_like(piece):
        return False
    if line_end:
        return True
    if len(piece) >= _RANDOM_PIECE:
        return any(c.isdigit() for c in piece) and any(c.isupper() for c in piece) and any(c.islower() for c in piece)
    return (
        len(piece) >= _SHORT_PIECE
        and any(c.islower() for c in piece)  # "B07XJ8C8F5", "A1B2C3": a product's code, a model's
        and _switches(piece) >= max(_CLASS_SWITCHES, (len(piece) - 1) / 2)
    )


def _switches(piece: str) -> int:
    """How often a piece's letters and digits change between capitals, lower-case letters and digits ("tU9vW1x": 6,
    "base64": 1, "x86_64": 1: a dash or an underscore is none of them)."""
    classes = [c.isdigit() + 2 * c.isupper() for c in piece if c.isalnum()]
    return sum(a != b for a, b in zip(classes, classes[1:], strict=False))


def _pieces(text: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The breaks inside vendors' tokens in ``text`` and the spans of the tokens holding them, each in order."""
    gaps: list[tuple[int, int]] = []
    tokens: list[tuple[int, int]] = []
    if not any(prefix in text for prefix in _LENGTHS):
        return gaps, tokens
    read_to = 0  # the end of the last token's run read: a prefix inside it ("xoxb-xoxb-...") is that token's
    for m in _PREFIX.finditer(text):
        if m.start() < read_to:
            continue
        full = _LENGTHS[m.group(1)]
        at = m.end()
        body = _BODY.match(text, at)
        length, at = (body.end() - at, body.end()) if body else (0, at)
        read_to = at
        found: list[tuple[int, int]] = []
        for _ in range(_MAX_PIECES):
            gap = _BREAK.match(text, at)
            if gap is None or gap.end() == gap.start():
                break
            between = text[gap.start() : gap.end()]
            escaped = "\\" in between  # a literal "\\n" (a JSON or a code string's line break)
            bare = length == 0  # a prefix named in prose ("xoxb- Sales2024Q3 channel") but for a key wrapped after it
            if bare and "\n" not in between:
                break
            piece = _BODY.match(text, gap.end())
            if piece is None or piece.end() == gap.end() or _PREFIX.match(text, gap.end()):
                break  # nothing after the break, or another token
            if _NAMED.match(text, piece.end()):
                break  # a setting's name ("Auth0Domain=...", "s3BucketName: reports"): the next line's own
            size = piece.end() - gap.end()
            if full:
                if length + size > full:  # longer than the format: a word after the key, or the pieces were prose
                    found = found if not _token_like(piece.group()) else []  # "ghp_abc123 GitHub2 Actions3 ... X64"
                    break
                if not (_token_like(piece.group()) or length + size == full):  # "...\nthanks"; "...\nXQAA" ends it
                    break
            elif not _random(
                piece.group(),
                line_end=not bare
                and (_ESCAPED_LINE_END if escaped else _LINE_END).match(text, piece.end()) is not None,
            ) or (not escaped and "\n" not in between and _named(piece.group())):
                break  # after a space, a name ("v2Beta", "MySQL8") is the sentence's, at its line's end too
            found.append((gap.start(), gap.end()))
            length += size
            at = piece.end()
            if full and length == full:
                break
        if found:
            gaps += found
            tokens.append((m.start(), at))
    return gaps, tokens


def pieces(text: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The spans of the line breaks and spaces inside vendors' tokens in ``text``, and of the tokens holding them
    (their prefix to their last piece's end), each in order (text holding no vendor's prefix, most text, is passed
    by a str search for each: cheaper than the pattern's scan)."""
    return _pieces(text)


def breaks(text: str) -> list[tuple[int, int]]:
    """The spans of the line breaks and spaces inside a vendor's token in ``text``, in order."""
    return _pieces(text)[0]


def kept(text: str, gaps: list[tuple[int, int]]) -> list[int]:
    """The positions of ``text``'s characters but for ``gaps``, the breaks inside vendors' tokens (``pieces``)."""
    dropped = {i for start, end in gaps for i in range(start, end)}
    return [i for i in range(len(text)) if i not in dropped]


def joined(kept: list[int], start: int, end: int) -> bool:
    """Whether the span ``start:end`` of the text takes a break inside it (a position ``kept`` leaves out)."""
    return bisect.bisect_left(kept, end) - bisect.bisect_left(kept, start) < end - start


def within(spans: list[tuple[int, int]], start: int, end: int) -> bool:
    """Whether the span ``start:end`` lies inside one of ``spans`` (the joined tokens, in order)."""
    at = bisect.bisect_right([s for s, _ in spans], start) - 1
    return at >= 0 and end <= spans[at][1]
