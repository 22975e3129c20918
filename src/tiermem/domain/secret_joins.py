"""A token pasted in pieces: a vendor's key wrapped at a terminal's or an editor's width, or split by a space
("sk-ant-api03-Hq7L...\\n4Nc7..."), is one credential. ``breaks`` finds the line breaks and spaces inside such a token
after its vendor's prefix; ``secrets.find`` scans the text without them too, and places what it finds across one back
on the text (its span takes the break).

A break is inside a token when the token before it is shorter than its vendor's format (``_LENGTHS``: a GitHub token
has 36 characters after ``ghp_``) and the piece after it is a key's (letters and digits, or a capital inside it), or,
for a format of no fixed length, when the piece after it looks random (upper and lower case letters and digits,
``_RANDOM_PIECE`` characters or more): a word after a key ("ghp_... thanks", "xoxb-... 2024") is the sentence's. Each pattern reads a run once (possessive runs, disjoint classes).
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
# a line break with the indentation around it, or a space or two
_BREAK = re.compile(r"[ \t]*+\r?\n[ \t]*+|[ \t]{1,2}+(?=" + _TOKEN + r")")
_RANDOM_PIECE = 8
_MAX_PIECES = 8  # a key of 200 characters wrapped at 30 columns


def _random(piece: str) -> bool:
    """A piece of a key of no fixed length: ``_RANDOM_PIECE`` characters or more, upper and lower case and digits."""
    return (
        len(piece) >= _RANDOM_PIECE
        and any(c.isdigit() for c in piece)
        and any(c.isupper() for c in piece)
        and any(c.islower() for c in piece)
    )


def _token_like(piece: str) -> bool:
    """A piece of a key: letters and digits, or a capital inside it ("then", "Thanks", "OK" are words)."""
    letters = any(c.isalpha() for c in piece)
    return (letters and any(c.isdigit() for c in piece)) or (
        any(c.isupper() for c in piece[1:]) and any(c.islower() for c in piece)
    )


def breaks(text: str) -> list[tuple[int, int]]:
    """The spans of the line breaks and spaces inside a vendor's token in ``text``, in order (text holding no
    vendor's prefix, most text, is passed by a str search for each: cheaper than the pattern's scan)."""
    out: list[tuple[int, int]] = []
    if not any(prefix in text for prefix in _LENGTHS):
        return out
    for m in _PREFIX.finditer(text):
        full = _LENGTHS[m.group(1)]
        at = m.end()
        body = _BODY.match(text, at)
        length, at = (body.end() - at, body.end()) if body else (0, at)
        for _ in range(_MAX_PIECES):
            gap = _BREAK.match(text, at)
            if gap is None or gap.end() == gap.start():
                break
            piece = _BODY.match(text, gap.end())
            if piece is None or piece.end() == gap.end() or _PREFIX.match(text, gap.end()):
                break  # nothing after the break, or another token
            if not (length < full and _token_like(piece.group()) if full else _random(piece.group())):
                break
            out.append((gap.start(), gap.end()))
            length += piece.end() - gap.end()
            at = piece.end()
    return out


def kept(text: str) -> list[int] | None:
    """The positions of ``text``'s characters but for the breaks inside a vendor's token; None when it has none."""
    gaps = breaks(text)
    if not gaps:
        return None
    dropped = {i for start, end in gaps for i in range(start, end)}
    return [i for i in range(len(text)) if i not in dropped]


def joined(kept: list[int], start: int, end: int) -> bool:
    """Whether the span ``start:end`` of the text takes a break inside it (a position ``kept`` leaves out)."""
    return bisect.bisect_left(kept, end) - bisect.bisect_left(kept, start) < end - start
