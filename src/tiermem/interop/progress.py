"""A progress line on stderr, only when stderr is a terminal (stdout stays clean for output)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


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
