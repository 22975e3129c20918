"""Chunking shared by every embedder: overlapping windows cut between words, nothing dropped.

Pure text logic; the embedders supply how to count word pieces.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable
from itertools import accumulate

CHUNK_OVERLAP = 32

WORDS = re.compile(r"\S+\s*")  # a word and the whitespace after it
_WORDS = WORDS
_SENTENCE_END = re.compile(r"""[.!?;:]["')\]]*$""")


def _split_long(word: str, size: int, budget: int, sizes: Callable[[list[str]], list[int]]) -> list[tuple[str, int]]:
    """Cut one word that alone exceeds ``budget`` into character slices that each fit."""
    if size <= budget or len(word.strip()) <= 1:
        return [(word, size)]
    step = max(1, len(word) * budget // (size * 2))  # aim at half the budget: tokenizers are not additive
    parts = [word[i : i + step] for i in range(0, len(word), step)]
    out: list[tuple[str, int]] = []
    for part, n in zip(parts, sizes(parts)):
        out.extend(_split_long(part, n, budget, sizes) if n > budget and len(part) < len(word) else [(part, n)])
    return out


def chunk_text(
    text: str,
    *,
    max_tokens: int,
    count: Callable[[str], int],
    sizes: Callable[[list[str]], list[int]],
    overhead: int = 0,
    overlap: int = CHUNK_OVERLAP,
    additive: bool = False,
) -> list[str]:
    """Split ``text`` into overlapping chunks whose ``count`` is at most ``max_tokens``.

    ``count`` is the exact count of a whole chunk (special tokens included); ``sizes`` gives the
    pieces of each word without special tokens and ``overhead`` the special tokens per chunk.
    ``additive``: a chunk's count is the sum of its words' sizes plus ``overhead`` (true of WordPiece: no piece spans
    whitespace), so ``count`` is never called. Chunks cut between words, preferring a sentence or line end in the
    second half of the window;
    consecutive chunks share about ``overlap`` pieces. Every word of ``text`` is in some chunk; a
    single word too long for the window is cut into slices (in order, in consecutive chunks).
    """
    raw = _WORDS.findall(text)
    raw_sizes = sizes(raw) if additive else []
    if (sum(raw_sizes) + overhead if additive else count(text)) <= max_tokens:
        return [text]
    budget = max(1, max_tokens - overhead)
    words: list[str] = []
    lengths: list[int] = []
    if additive and max(raw_sizes, default=0) <= budget:  # no word to cut (nearly always): taken as they are
        words, lengths = raw, raw_sizes
    else:
        for word, n in zip(raw, raw_sizes if additive else sizes(raw)):
            for part, m in _split_long(word, n, budget, sizes):
                words.append(part)
                lengths.append(m)
    reach = list(accumulate(lengths, initial=0))  # reach[i]: the pieces of words[:i]
    chunks: list[str] = []
    start = 0
    while start < len(words):
        # the most words from ``start`` whose pieces fit the budget (sizes are >= 0, so ``reach`` never falls)
        end = max(bisect_right(reach, reach[start] + budget, lo=start) - 1, start + 1)
        if end < len(words):  # prefer a sentence/line end in the second half of the window
            for cut in range(end, start + (end - start) // 2, -1):
                word = words[cut - 1]
                if _SENTENCE_END.search(word.rstrip()) or "\n" in word[len(word.rstrip()) :]:
                    end = cut
                    break
        piece = "".join(words[start:end]).strip()
        while not additive and end - start > 1 and count(piece) > max_tokens:  # sizes are not always additive
            end -= 1
            piece = "".join(words[start:end]).strip()
        chunks.append(piece)
        if end >= len(words):
            break
        back, kept = end, 0
        while back > start + 1 and kept + lengths[back - 1] <= overlap:
            back -= 1
            kept += lengths[back]
        start = back
    return chunks


def _borders(before: str, after: str) -> list[int]:
    """Each length ``k`` (0 < k < len(before)) of a start of ``after`` that ``before`` ends with, longest first. The
    longer ones are looked for where ``before``'s end holds ``after``'s first ``_KEY`` characters (``str.find``); a
    text repeating them more than ``_FINDS`` times there (a word or a line repeated) is read once through instead
    (``_borders_read``), so the time stays linear in the two."""
    most = min(len(before) - 1, len(after))
    found = [k for k in range(1, min(_KEY, most + 1)) if before.endswith(after[:k])]
    if most >= _KEY:
        key, finds = after[:_KEY], 0
        at = before.find(key, len(before) - most)
        while at >= 0:
            finds += 1
            if finds > _FINDS:
                return _borders_read(before, after)
            if after.startswith(before[at:]):
                found.append(len(before) - at)
            at = before.find(key, at + 1)
    return sorted(found, reverse=True)


_KEY = 8  # characters of ``after`` looked for in ``before`` by ``_borders``
_FINDS = 32  # places holding them past which ``_borders`` reads the text through


def _borders_read(before: str, after: str) -> list[int]:
    """``_borders`` by Knuth-Morris-Pratt over the end of ``before``: linear in the two, a step a character."""
    pattern = after[: len(before) - 1]
    if not pattern:
        return []
    fail = _failure(pattern)
    q = 0
    for ch in before[len(before) - len(pattern) :]:  # a run ``after`` starts with is no longer than ``pattern``
        if q == len(pattern):
            q = fail[q - 1]
        while q and pattern[q] != ch:
            q = fail[q - 1]
        if pattern[q] == ch:
            q += 1
    out = []
    while q:
        out.append(q)
        q = fail[q - 1]
    return out


def _failure(pattern: str) -> list[int]:
    """``fail[i]``: the length of the longest proper start of ``pattern[: i + 1]`` that it also ends with."""
    fail = [0] * len(pattern)
    q = 0
    for i in range(1, len(pattern)):
        while q and pattern[q] != pattern[i]:
            q = fail[q - 1]
        if pattern[q] == pattern[i]:
            q += 1
        fail[i] = q
    return fail


def _most_pieces(words: str) -> int:
    """At most how many pieces a tokenizer makes of ``words`` (single spaces between them)."""
    return sum(len(w.encode("utf-8")) + 2 for w in words.split(" "))


def _step(wanted: str, fail: list[int], q: int, ch: str) -> int:
    """The Knuth-Morris-Pratt state after ``ch`` from ``q`` (how much of ``wanted`` the text read so far ends with)."""
    if q == len(wanted):
        q = fail[q - 1]
    while q and wanted[q] != ch:
        q = fail[q - 1]
    return q + 1 if wanted[q] == ch else q


def estimate_tokens(text: str) -> int:
    """An upper bound on word pieces, used before a model's tokenizer is loaded.

    UTF-8 bytes + 2 special tokens: WordPiece never makes more pieces than characters and
    byte-level BPE never more than bytes, so this never under-counts (it over-counts ~4x on English).
    """
    return len(text.encode("utf-8")) + 2


def estimate_sizes(words: list[str]) -> list[int]:
    return [len(w.strip().encode("utf-8")) for w in words]
