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
    """Whether the text ``chunk_text`` cut into ``chunks`` (in order) holds ``text``, its whitespace compared as
    single spaces (a cut drops the whitespace at a chunk's ends). The text is made again from its chunks
    (``_segments``): consecutive chunks share a run of words or slices (their overlap, taken once: ``_join`` decides
    it from the chunker's rule) or none (a slice cut: a word or a slice longer than the overlap ended the chunk
    before). At a slice cut the text had a space there or none (a cut between words, or inside one word), which is not
    stored: both are looked at (``_held``). Where the chunks do not tell their overlap apart (a run the text repeats:
    more than one join fits), no match across them is looked for: a text made up across a join the chunker did not
    make is never held. One chunk alone holds nothing across chunks."""
    wanted = " ".join(text.split())
    parts = [p for p in (" ".join(c.split()) for c in chunks) if p]
    if not wanted or len(parts) < 2:
        return False
    return any(_held(segments, wanted) for segments in _segments(parts))


def _segments(parts: Sequence[str]) -> list[list[str]]:
    """The text of ``parts`` (normalized chunks) made again: runs of text split where the overlap is undecided (no
    match is looked for across that), each a list of its segments: texts whose joins (slice cuts) are a space or
    nothing."""
    runs: list[list[str]] = []
    segment, segments = [parts[0]], []
    for before, after in zip(parts, parts[1:]):
        shared = _join(before, after)
        if shared is None or shared == 0:
            segments.append("".join(segment))
            segment = [after]
            if shared is None:
                runs.append(segments)
                segments = []
        else:
            segment.append(after[shared:])
    segments.append("".join(segment))
    runs.append(segments)
    return runs


_SLICE_OVERLAP = 8  # characters: an overlap starting or ending inside a word (slices of a long word) is no shorter


def _join(before: str, after: str) -> int | None:
    """How ``after`` follows ``before`` (consecutive normalized chunks): the length of their overlap (the start of
    ``after`` that ``before`` ends with), 0 for a slice cut (no overlap), None when the chunks do not tell.

    The chunker's rule (``chunk_text``): the next chunk starts with the most words (or slices) that end the chunk
    before and hold at most ``CHUNK_OVERLAP`` pieces, always leaving that chunk's first word; none when its last one
    alone holds more. A word (with the whitespace after it) is at most its UTF-8 bytes + 2 pieces (``_most_pieces``:
    WordPiece makes at most a piece a character, byte-level BPE a piece a byte, and a space or a word's start
    marker may be one more), so a run shared by chance that is too short to be all of the overlap (the word before it
    would have fitted too) is not one; nor is a run starting or ending inside a word that is shorter than
    ``_SLICE_OVERLAP`` (only slices of a word over the model's window are cut inside it, and they are longer). The
    one overlap left is the join; with none left, a slice cut, when the last word of ``before`` may hold more than
    ``CHUNK_OVERLAP`` pieces (or ``before`` is one word)."""
    found: list[int] = []
    for k in _borders(before, after):
        if _may_share(before, after, k):
            found.append(k)
            if len(found) > 1:
                return None
    if found:
        return found[0]
    space = before.rfind(" ")
    return 0 if space < 0 or _most_pieces(before[space + 1 :]) > CHUNK_OVERLAP else None


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


def _may_share(before: str, after: str, k: int) -> bool:
    """Whether ``after[:k]`` (which ``before`` ends with) may be the overlap ``chunk_text`` kept (``_join``)."""
    at = len(before) - k
    inside = before[at - 1] != " " or (k < len(after) and after[k] != " ")
    if inside and k < _SLICE_OVERLAP:
        return False
    end = at - 1 if before[at - 1] == " " else at  # the end of the word (or slice) before the overlap
    space = before.rfind(" ", 0, end)
    if space < 0:  # that word may be the chunk's first, which the overlap always leaves out
        return True
    return _most_pieces(before[at:]) + _most_pieces(before[space + 1 : end]) > CHUNK_OVERLAP


def _most_pieces(words: str) -> int:
    """At most how many pieces a tokenizer makes of ``words`` (single spaces between them)."""
    return sum(len(w.encode("utf-8")) + 2 for w in words.split(" "))


def _held(segments: Sequence[str], wanted: str) -> bool:
    """Whether ``segments`` joined each by a space or nothing (the joins of slice cuts) hold ``wanted`` (normalized):
    each segment with ``in``; across joins, a Knuth-Morris-Pratt matcher that follows both joins at once, over the
    text within ``len(wanted)`` characters of a join only."""
    if any(wanted in s for s in segments):
        return True
    if len(segments) == 1:
        return False
    text = "".join(segments)
    joins = list(accumulate(len(s) for s in segments[:-1]))
    fail = _failure(wanted)
    spans: list[list[int]] = []
    for at in joins:
        lo, hi = max(0, at - len(wanted)), min(len(text), at + len(wanted))
        if spans and lo <= spans[-1][1]:
            spans[-1][1] = hi
        else:
            spans.append([lo, hi])
    cuts = set(joins)
    for lo, hi in spans:
        states = {0}
        for i in range(lo, hi):
            if i in cuts:
                states |= {_step(wanted, fail, q, " ") for q in states}
            states = {_step(wanted, fail, q, text[i]) for q in states} | {0}
            if len(wanted) in states:
                return True
    return False


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
