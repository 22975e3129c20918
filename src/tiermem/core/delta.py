"""The change between two versions of a block's value, and applying many changes cheaply.

A ``Delta`` says: keep the first ``start`` characters and the last ``tail`` characters of the old value, and put
``text`` between them. ``diff`` finds the smallest such delta (the common prefix and suffix), so an append, an
insertion or one replacement costs about the size of the change. ``Text`` applies a run of deltas to a value
kept in chunks, so replaying thousands of small deltas on a large value copies a chunk per delta, not the value.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..base.errors import StoreError

_STEP = 4096  # characters compared per slice while looking for the first difference
CHUNK = 65536  # characters per chunk of a ``Text``


@dataclass(frozen=True)
class Delta:
    """``old[:start] + text + old[len(old) - tail:]`` is the new value."""

    start: int
    tail: int
    text: str

    def size(self) -> int:
        """Bytes this delta takes stored: its text in UTF-8 and its two numbers."""
        return len(self.text.encode("utf-8")) + len(str(self.start)) + len(str(self.tail)) + 8


def _prefix(a: str, b: str, limit: int) -> int:
    """Length of the common prefix of ``a`` and ``b``, at most ``limit``."""
    i = 0
    while i < limit:
        j = min(limit, i + _STEP)
        if a[i:j] == b[i:j]:
            i = j
            continue
        while i < j and a[i] == b[i]:
            i += 1
        return i
    return limit


def _suffix(a: str, b: str, limit: int) -> int:
    """Length of the common suffix of ``a`` and ``b``, at most ``limit``."""
    n = 0
    la, lb = len(a), len(b)
    while n < limit:
        m = min(limit, n + _STEP)
        if a[la - m : la - n] == b[lb - m : lb - n]:
            n = m
            continue
        while n < m and a[la - n - 1] == b[lb - n - 1]:
            n += 1
        return n
    return limit


def diff(old: str, new: str) -> Delta:
    """The smallest single-span delta turning ``old`` into ``new``."""
    if len(new) >= len(old) and new.startswith(old):  # an append: one comparison, no slices
        return Delta(len(old), 0, new[len(old) :])
    shorter = min(len(old), len(new))
    start = _prefix(old, new, shorter)
    tail = _suffix(old, new, shorter - start)
    return Delta(start, tail, new[start : len(new) - tail])


def apply(old: str, delta: Delta) -> str:
    """``delta`` applied to ``old``; ``StoreError`` if it does not fit (the history is damaged)."""
    _check(len(old), delta)
    return old[: delta.start] + delta.text + old[len(old) - delta.tail :]


def _check(length: int, delta: Delta) -> None:
    if delta.start < 0 or delta.tail < 0 or delta.start + delta.tail > length:
        raise StoreError(
            f"A stored block history entry does not fit the version before it (keep {delta.start} + "
            f"{delta.tail} of {length} characters): the history is damaged. Restore it from a backup."
        )


class Text:
    """A value being edited by a run of deltas, kept as chunks of about ``CHUNK`` characters.

    ``apply`` copies only the chunks a delta touches (and walks the chunk list), so a replay costs about the
    deltas' size plus a chunk each, not the whole value each time. ``value()`` joins the chunks."""

    def __init__(self, value: str) -> None:
        self._chunks = [value[i : i + CHUNK] for i in range(0, len(value), CHUNK)]
        self._length = len(value)

    def __len__(self) -> int:
        return self._length

    def value(self) -> str:
        return "".join(self._chunks)

    def apply(self, delta: Delta) -> None:
        _check(self._length, delta)
        start, end = delta.start, self._length - delta.tail  # [start, end) is replaced by the delta's text
        before: list[str] = []
        after: list[str] = []
        left = right = ""
        pos = 0
        for chunk in self._chunks:
            c_start, c_end = pos, pos + len(chunk)
            pos = c_end
            if c_end <= start:
                before.append(chunk)
            elif c_start >= end:
                after.append(chunk)
            else:  # overlaps the replaced span: keep what lies outside it
                if c_start < start:
                    left = chunk[: start - c_start]
                if c_end > end:
                    right = chunk[end - c_start :]
        middle = _rechunk(left + delta.text + right)
        self._chunks = [c for c in (*before, *middle, *after) if c]
        self._length = self._length - (end - start) + len(delta.text)


def _rechunk(text: str) -> list[str]:
    if len(text) <= 2 * CHUNK:
        return [text]
    return [text[i : i + CHUNK] for i in range(0, len(text), CHUNK)]
