"""glibc heap settings for long-running servers: fewer malloc arenas, and memory handed back after upkeep.

LanceDB's native threads allocate from glibc's per-thread arenas (by default up to 8 per core). Under a
steady write load, freed memory stays scattered over those arenas and resident memory creeps up: measured
with LanceDB alone (caches capped, compaction every 200 writes), 8,000 single-row writes grew 231 -> 417 MB
with the default arenas and 226 -> 301 MB with two (BENCHMARKS.md, "Under HTTP load"). Nothing here is
imported by anything heavy; on other C libraries (musl, macOS, Windows) every function is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

log = logging.getLogger(__name__)

M_ARENA_MAX = -8  # mallopt parameter number in glibc's malloc.h

_libc: ctypes.CDLL | None = None
_looked = False


def _glibc() -> ctypes.CDLL | None:
    global _libc, _looked
    if not _looked:
        _looked = True
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim"):
                    _libc = libc
            except OSError as exc:
                log.debug("no glibc malloc controls: %s", exc)
    return _libc


def limit_arenas(count: int) -> bool:
    """Cap glibc's malloc arenas at ``count`` (0 leaves the default). Call before storage threads start."""
    libc = _glibc()
    if libc is None or count <= 0:
        return False
    return bool(libc.mallopt(M_ARENA_MAX, count))


def trim() -> bool:
    """Hand free heap memory back to the system (glibc ``malloc_trim(0)``); True if any was released."""
    libc = _glibc()
    return bool(libc.malloc_trim(0)) if libc is not None else False
