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


def rejoin(chunks: Sequence[str]) -> str:
    """The text ``chunk_text`` cut into ``chunks`` (in order), made again as near as it can be: a chunk starts with the
    words the one before it ended with (their overlap), taken once; chunks with no overlap are joined by a space (the
    whitespace a cut dropped is not kept, nor is a word cut into slices made whole)."""
    out = chunks[0] if chunks else ""
    for chunk in chunks[1:]:
        shared = _overlap(out, chunk)
        out = out + chunk[shared:] if shared else f"{out} {chunk}"
    return out


def _overlap(before: str, after: str) -> int:
    """The length of the longest run of whole words that ``before`` ends with and ``after`` starts with (0: none)."""
    for k in range(min(len(before), len(after)), 0, -1):
        if (
            (k == len(after) or after[k].isspace())
            and (k == len(before) or before[-k - 1].isspace())
            and before.endswith(after[:k])
        ):
            return k
    return 0


def estimate_tokens(text: str) -> int:
    """An upper bound on word pieces, used before a model's tokenizer is loaded.

    UTF-8 bytes + 2 special tokens: WordPiece never makes more pieces than characters and
    byte-level BPE never more than bytes, so this never under-counts (it over-counts ~4x on English).
    """
    return len(text.encode("utf-8")) + 2


def estimate_sizes(words: list[str]) -> list[int]:
    return [len(w.strip().encode("utf-8")) for w in words]
