"""Chunking shared by every embedder: overlapping windows cut between words, nothing dropped.

Pure text logic; the embedders supply how to count word pieces.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Sequence
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


def holds_across(chunks: Sequence[str], text: str) -> bool:
    """Whether the text ``chunk_text`` cut into ``chunks`` (in order) holds ``text`` across two chunks or more, its
    whitespace compared as single spaces (a cut drops the whitespace at a chunk's ends). Each chunk is a run of the
    text; consecutive ones share a run (their overlap: whole words, or slices of a word cut into slices) or none (the
    chunker kept no overlap: a word or a slice longer than it), and then the text had whitespace between them (a cut
    between words) or none (a cut inside a word). Which is not stored, so every join that fits the chunks is tried:
    each run the next chunk starts with and the chunk before ends with, or none, with a space or without. Matches
    within one chunk are not looked for here (the store's own filter finds them)."""
    wanted = " ".join(text.split())
    parts = [p for p in (" ".join(c.split()) for c in chunks) if p]
    if not wanted or len(parts) < 2:
        return False
    reached = _ends_with_start(parts[0], wanted)  # how much of ``wanted`` ends the chunks so far, each a way to
    for before, chunk in zip(parts, parts[1:]):  # have begun it in an earlier chunk and followed it up to here
        after: set[int] = set()
        for shared in _overlaps(before, chunk):
            rest = chunk[shared:]
            for done in reached:
                for glue in (" ", "") if shared == 0 else ("",):
                    left = wanted[done:]
                    if not left.startswith(glue) or len(left) == len(glue):
                        continue
                    left = left[len(glue) :]
                    if rest.startswith(left):
                        return True
                    if left.startswith(rest):
                        after.add(len(wanted) - len(left) + len(rest))
        reached = after | _ends_with_start(chunk, wanted)
    return False


def _ends_with_start(chunk: str, wanted: str) -> set[int]:
    """Each length (short of the whole) of a start of ``wanted`` that ``chunk`` ends with."""
    return set(_shared(chunk, wanted, len(wanted) - 1))


def _overlaps(before: str, after: str) -> list[int]:
    """0 and each length of a start of ``after`` that ``before`` ends with (a run consecutive chunks may share)."""
    return [0, *_shared(before, after, len(after))]


_KEY = 8  # characters: a start at least this long is looked for by its first ones (``str.find``), a shorter one as is


def _shared(a: str, b: str, most: int) -> list[int]:
    """Each length ``n`` (1 to ``most``) of a start of ``b`` that ``a`` ends with."""
    out = [n for n in range(1, min(_KEY, most + 1)) if a.endswith(b[:n])]
    if most >= _KEY:
        key = b[:_KEY]
        at = a.find(key, max(0, len(a) - most))
        while at >= 0:
            if b.startswith(a[at:]):
                out.append(len(a) - at)
            at = a.find(key, at + 1)
    return out


def estimate_tokens(text: str) -> int:
    """An upper bound on word pieces, used before a model's tokenizer is loaded.

    UTF-8 bytes + 2 special tokens: WordPiece never makes more pieces than characters and
    byte-level BPE never more than bytes, so this never under-counts (it over-counts ~4x on English).
    """
    return len(text.encode("utf-8")) + 2


def estimate_sizes(words: list[str]) -> list[int]:
    return [len(w.strip().encode("utf-8")) for w in words]
