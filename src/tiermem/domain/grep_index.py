"""Trigram signatures: the attached files a grep pattern cannot match, told without searching them.

``grep_files`` searches every attached file's text on every call: over 10,000 files (170 MB) that is hundreds of
milliseconds even for a word no file holds. A file's **signature** is a one-hash Bloom filter of the trigrams (three
consecutive bytes) of its lower-cased text, a quarter to half a byte per byte of text, made once per stored text
(``signature``; kept beside the text in the view cache, ``file_views.JoinedLines``). A pattern's **requirement**
is what every match must contain: for each of its top-level alternatives, the literal runs it cannot match without
(``requirement``). A file whose signature lacks a trigram of every alternative cannot hold a match and is skipped;
every other file is searched exactly as before, so the answer is the same, only found sooner.

Sound by construction, and conservative where it cannot be sure (no requirement: every file is searched):
- Case-insensitive matching lets four non-ASCII characters match ASCII letters (the Kelvin sign matches ``k``;
  ``FOLDS_TO_ASCII``, checked against the ``regex`` module by the tests): the text's trigrams are taken with those
  four written as their letters, then lower-cased (ASCII only) in UTF-8, where no other character has an ASCII byte.
- Only ASCII literals the pattern must match, in sequence, make a run: a character class, a repeat (even ``{1,}``),
  an anchor or a lookaround ends the run; a group's content counts on its own; an alternation at the top (or in a
  group that is the whole pattern) makes one requirement per branch, and a branch without a run of three
  characters means no requirement at all.
- The pattern is parsed by the standard ``re`` (which every grep pattern passes first: ``compile_pattern``), but
  searched by the ``regex`` module; patterns the two read differently are left without a requirement: POSIX
  classes (``[[:alpha:]]``) and whatever ``file_views.prefilter_is_sound`` refuses (fuzzy ``{e<=1}`` among them).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np  # imported where a signature or a requirement is made: the handshake never loads numpy

FOLDS_TO_ASCII = {0x130: "i", 0x131: "i", 0x17F: "s", 0x212A: "k"}  # İ ı ſ K (code point: the letter written)
BITS_PER_BYTE = 2  # filter bits per byte of text, before rounding up to a power of two (~5-8 per distinct trigram)
MIN_BITS_LOG2 = 6
_HASH = 0x9E3779B1  # Fibonacci hashing: the top bits of code * _HASH (mod 2**32) spread the trigram codes


class Signature:
    """The trigrams of one text, as a Bloom filter of ``2 ** log2`` bits (``bits``: little-endian bit order)."""

    __slots__ = ("bits", "log2")

    def __init__(self, bits: bytes, log2: int) -> None:
        self.bits, self.log2 = bits, log2

    def may_match(self, requirement: Requirement) -> bool:
        """False only when no alternative's trigrams are all in the text (then the pattern cannot match it)."""
        bits = self.bits
        for probes in requirement.probes(self.log2):
            for i, m in probes:
                if not bits[i] & m:
                    break
            else:
                return True
        return False


def _codes(data: np.ndarray) -> np.ndarray:
    """The trigram codes (three bytes as one 24-bit number) at every position of ``data`` (uint8)."""
    import numpy as np

    wide = data.astype(np.uint32)
    codes = wide[:-2] << 16
    codes |= wide[1:-1] << 8
    codes |= wide[2:]
    return codes


def _hashed(codes: np.ndarray) -> np.ndarray:
    """32-bit hashes of trigram codes (uint32, in place); a filter of ``2 ** k`` bits uses their top ``k`` bits."""
    import numpy as np

    codes *= np.uint32(_HASH)  # modulo 2 ** 32: uint32 arrays wrap
    return codes


def signature(text: str) -> Signature:
    """The signature of ``text`` (a file's view lines joined by ``\\n``)."""
    import numpy as np

    if text.isascii():
        raw = text.encode("ascii").lower()
    else:
        for point, letter in FOLDS_TO_ASCII.items():  # str.replace where present: str.translate is ~30x slower
            if chr(point) in text:
                text = text.replace(chr(point), letter)
        raw = text.encode("utf-8", "surrogatepass").lower()
    data = np.frombuffer(raw, dtype=np.uint8)
    log2 = max(MIN_BITS_LOG2, int(max(1, len(data) * BITS_PER_BYTE) - 1).bit_length())
    flags = np.zeros(1 << log2, dtype=bool)
    if len(data) >= 3:
        positions = _hashed(_codes(data))
        positions >>= np.uint32(32 - log2)
        flags[positions] = True
    return Signature(np.packbits(flags, bitorder="little").tobytes(), log2)


class Requirement:
    """For each alternative of a pattern, the hashes of the trigrams every match of it contains."""

    __slots__ = ("_by_log2", "hashes")

    def __init__(self, hashes: Sequence[Sequence[int]]) -> None:
        self.hashes = [sorted(set(h)) for h in hashes]
        self._by_log2: dict[int, list[list[tuple[int, int]]]] = {}

    def probes(self, log2: int) -> list[list[tuple[int, int]]]:
        """Per alternative, the (byte, mask) of each trigram's bit in a filter of ``2 ** log2`` bits."""
        known = self._by_log2.get(log2)
        if known is None:
            known = [[((h >> (32 - log2)) >> 3, 1 << ((h >> (32 - log2)) & 7)) for h in alt] for alt in self.hashes]
            self._by_log2[log2] = known
        return known


def requirement(pattern: str) -> Requirement | None:
    """What every match of ``pattern`` (valid for ``re``; searched case-insensitively) must contain, or None when
    that cannot be told (every file is then searched). Only for a pattern ``file_views.prefilter_is_sound`` accepts
    (``grep`` asks it first): what it refuses, fuzzy ``{e<=1}`` among them, ``re`` would read as literals."""
    if "[:" in pattern:
        return None
    try:
        parser = importlib.import_module("re._parser")  # the standard library's own (3.11+): compile_pattern ran it

        parsed = parser.parse(pattern, re.IGNORECASE | re.MULTILINE)
    except (re.error, ImportError, RecursionError):
        return None
    alternatives = _alternatives(list(parsed))
    if not alternatives:
        return None
    import numpy as np

    hashes = []
    for runs in alternatives:
        codes = [_codes(np.frombuffer(run.encode("ascii"), dtype=np.uint8)) for run in runs if len(run) >= 3]
        if not codes:
            return None  # this alternative needs no trigram: any file may match it
        hashes.append([int(h) for h in _hashed(np.concatenate(codes))])
    return Requirement(hashes)


def _alternatives(items: list[tuple[Any, Any]]) -> list[list[str]]:
    """The alternatives of a parsed sequence, each as the lower-cased literal runs a match of it contains."""
    c = importlib.import_module("re._constants")

    if len(items) == 1 and items[0][0] is c.BRANCH:
        branches = items[0][1][1]
        return [runs for branch in branches for runs in _alternatives(list(branch))]
    if len(items) == 1 and items[0][0] is c.SUBPATTERN:
        return _alternatives(list(items[0][1][-1]))
    runs: list[str] = []
    current: list[str] = []
    for op, arg in items:
        if op is c.LITERAL and isinstance(arg, int) and arg < 128:
            current.append(chr(arg).lower())
            continue
        runs.append("".join(current))
        current = []
        if op is c.SUBPATTERN:
            inner = _alternatives(list(arg[-1]))
            if len(inner) == 1:
                runs.extend(inner[0])
    runs.append("".join(current))
    return [[r for r in runs if r]]
