"""glibc heap settings for long-running servers: fewer malloc arenas, and memory handed back after upkeep.

LanceDB's native threads allocate from glibc's per-thread arenas (by default up to 8 per core). Under a
steady write load, freed memory stays scattered over those arenas and resident memory creeps up: measured
with LanceDB alone (caches capped, compaction every 200 writes), 8,000 single-row writes grew 231 -> 417 MB
with the default arenas and 226 -> 301 MB with two (``python -m bench load``). Nothing here is
imported by anything heavy; on other C libraries (musl, macOS, Windows) every function is a no-op.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import threading
import time

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD, M_ARENA_MAX = -3, -8  # mallopt parameter numbers in glibc's malloc.h
MAX_MMAP_THRESHOLD = 32 << 20  # glibc's upper bound on 64-bit (HEAP_MAX_SIZE / 2)

_libc: ctypes.CDLL | None = None
_looked = False


def _glibc() -> ctypes.CDLL | None:
    global _libc, _looked
    if not _looked:
        _looked = True
        if sys.platform.startswith("linux") and _is_glibc():
            try:
                # glibc's soname, loaded already: ``ctypes.util.find_library`` would run ``ldconfig -p`` in a
                # subprocess to find it (milliseconds of a server's start, before it answers ``initialize``)
                libc = ctypes.CDLL("libc.so.6")
                if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim"):
                    _libc = libc
            except OSError as exc:
                log.debug("no glibc malloc controls: %s", exc)
    return _libc


def _is_glibc() -> bool:
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError):  # a C library that does not know the name (musl)
        return False


def limit_arenas(count: int) -> bool:
    """Cap glibc's malloc arenas at ``count`` (0 leaves the default). Call before storage threads start."""
    libc = _glibc()
    if libc is None or count <= 0:
        return False
    return bool(libc.mallopt(M_ARENA_MAX, count))


def fix_mmap_threshold(nbytes: int) -> bool:
    """Serve allocations of ``nbytes`` or more from their own mappings, always (0 leaves glibc's default).

    glibc starts at 128 KiB but raises the threshold to the size of every mapped block that is freed (up to
    32 MiB), so after LanceDB's first large read buffers come and go, blocks of up to several MiB are carved
    from the heap instead, where freed ones leave holes that small long-lived allocations pin. Setting it
    explicitly turns that adjustment off, and a freed large block goes straight back to the system. Measured
    with LanceDB alone, 2,000 one-row writes with a full-text search after each and a compaction every 200:
    anonymous memory +23 MB with glibc's default, +14 MB with the threshold fixed at 128 KiB (or 32 KiB);
    ``python -m bench load``. Call before storage threads start.
    """
    libc = _glibc()
    if libc is None or nbytes <= 0:
        return False
    if nbytes > MAX_MMAP_THRESHOLD:
        raise ValueError(
            f"the mmap threshold is at most {MAX_MMAP_THRESHOLD >> 10} KiB in glibc, got {nbytes >> 10} KiB"
        )
    return bool(libc.mallopt(M_MMAP_THRESHOLD, nbytes))


def trim() -> bool:
    """Hand free heap memory back to the system (glibc ``malloc_trim(0)``); True if any was released."""
    libc = _glibc()
    return bool(libc.malloc_trim(0)) if libc is not None else False


def _resident_bytes() -> int:
    """This process's resident set (``/proc/self/statm``; one small read), 0 where there is no procfs."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


class HeapKeeper:
    """Hands freed heap memory back to the system when resident memory has grown since the last trim.

    A daemon thread wakes every ``interval`` seconds and reads the resident set; when it is ``grow_bytes``
    above what it was right after the last trim, it calls ``malloc_trim(0)``. So a burst of calls (searches
    and writes leave tens of MB of freed buffers in glibc's arenas) is trimmed within ``interval`` of its
    end, a steady load at most once per ``interval``, and an idle server is never touched. Started by the
    serving commands; nothing runs at import.
    """

    def __init__(self, interval: float, grow_bytes: int = 4 << 20) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval}")
        self.interval = interval
        self.grow_bytes = grow_bytes
        self.trims = 0  # how many times it trimmed (for tests and logs)
        self._floor = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """Start the thread; False (and nothing started) where glibc's malloc_trim is not available."""
        if _glibc() is None or _resident_bytes() == 0:
            return False
        if self._thread is None:
            self._floor = _resident_bytes()
            self._thread = threading.Thread(target=self._run, name="tiermem-heap-keeper", daemon=True)
            self._thread.start()
        return True

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def check(self) -> bool:
        """One wake-up: trim if resident memory grew by ``grow_bytes`` since the last trim; True if it trimmed."""
        resident = _resident_bytes()
        if resident - self._floor < self.grow_bytes:
            self._floor = min(self._floor, resident)  # memory freed on its own lowers the mark
            return False
        started = time.perf_counter()
        trim()
        self.trims += 1
        self._floor = _resident_bytes()
        log.debug(
            "malloc_trim: resident %d -> %d MB in %.1f ms",
            resident >> 20,
            self._floor >> 20,
            1000 * (time.perf_counter() - started),
        )
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.check()
