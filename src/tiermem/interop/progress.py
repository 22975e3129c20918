"""Progress on stderr (stdout stays clean for output): a line redrawn in place while stderr is a terminal
(``Progress``: files done), and lines that say how far a long upload's embedding is (``ChunkLines``: each file's
chunks; ``BackfillLines``: the rows stored without vectors and embedded afterwards, with the rate and the time
left)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from ..base.quoting import one_line


class Progress:
    def __init__(self, label: str, total: int, stream: TextIO | None = None) -> None:
        self.label = label
        self.total = max(total, 0)
        self.done = 0
        self._stream = stream or sys.stderr
        self._on = self._stream.isatty() and total > 0
        self._last = 0.0

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self._on and (time.monotonic() - self._last > 0.1 or self.done >= self.total):
            self._last = time.monotonic()
            width = 30
            filled = int(width * self.done / self.total) if self.total else width
            bar = "#" * filled + "-" * (width - filled)
            self._stream.write(f"\r{self.label} [{bar}] {self.done}/{self.total}")
            self._stream.flush()

    def close(self) -> None:
        if self._on:
            self._stream.write("\n")
            self._stream.flush()


class _Lines:
    """Lines on ``stream`` (stderr), a terminal or not, at most one every ``every`` seconds and none in the first
    ``every`` (``_next``): what ``ChunkLines`` and ``BackfillLines`` share."""

    def __init__(self, label: str, stream: TextIO | None, every: float, clock: Callable[[], float]) -> None:
        self.label = label
        self._stream = stream or sys.stderr
        self._every = every
        self._clock = clock
        self._start = clock()
        self._next = self._start + every

    def _write(self, line: str) -> None:
        back = "\r\x1b[K" if self._stream.isatty() else ""  # over a progress bar drawn in place
        self._stream.write(f"{back}{line}\n")
        self._stream.flush()


class ChunkLines(_Lines):
    """How far each file's chunks are embedded (``file_embedding.Embedded``), as lines on stderr, a terminal or not:
    none in the first ``every`` seconds (a quick upload says nothing), then at most one every ``every`` seconds,
    and a file whose progress was shown gets its last line too. Called from the upload's worker thread."""

    def __init__(
        self,
        label: str = "tiermem: embedding",
        stream: TextIO | None = None,
        every: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(label, stream, every, clock)
        self._shown: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, name: str, done: int, total: int) -> None:
        with self._lock:
            now = self._clock()
            if now < self._next and not (done >= total and name in self._shown):
                return
            self._next = now + self._every
            self._shown.add(name)
            self._write(f"{self.label} {one_line(name)}: {done:,} of {total:,} chunks")


class BackfillLines(_Lines):
    """How far embedding the rows stored without vectors is (``Vectors.backfill_now``'s ``progress``: rows embedded,
    rows to embed), as lines on stderr, a terminal or not, with the rate so far and an estimate of the time left:
    none in the first ``every`` seconds, then at most one every ``every`` seconds, and the last one once a line was
    shown."""

    def __init__(
        self,
        label: str = "tiermem: embedding stored rows",
        stream: TextIO | None = None,
        every: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(label, stream, every, clock)
        self._shown = False

    def __call__(self, done: int, total: int) -> None:
        now = self._clock()
        if now < self._next and not (done >= total and self._shown):
            return
        self._next = now + self._every
        self._shown = True
        line = f"{self.label}: {done:,} of {total:,}"
        if total:
            line += f" ({100 * done // total}%)"
        elapsed = now - self._start
        if elapsed > 0 and done > 0:
            rate = done / elapsed
            line += f", {rate:,.1f} rows/s"
            if done < total:
                line += f", about {duration((total - done) / rate)} left"
            else:
                line += f", done in {duration(elapsed)}"
        self._write(line)


def duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``1 h 16 min``: rounded up to what the reader plans with."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    minutes = -(-s // 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"
