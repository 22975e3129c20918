"""The library boundary: every call into LanceDB / Arrow runs inside ``library`` (reads, also via ``reads``)
or ``writes``, so what reaches a caller (and a model) is a ``StoreError`` subclass that says what to do."""

from __future__ import annotations

import functools
import logging
import random
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from ..base.errors import StoreReadError, StoreWriteError, TiermemError

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])

# Lance and Arrow raise RuntimeError ("lance error: ..."), OSError (ArrowIOError) or ValueError (ArrowInvalid).
LIBRARY_ERRORS = (RuntimeError, OSError, ValueError)
_SOURCE_LOCATION = re.compile(r",? /\S+\.rs:\d+:\d+")  # the Rust source line Lance appends to its messages


def _first_line(exc: BaseException) -> str:
    text = _SOURCE_LOCATION.sub("", str(exc)).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _write_error(uri: str, what: str, exc: BaseException) -> StoreWriteError:
    text = str(exc)
    if "os error 28" in text or "No space left" in text:
        return StoreWriteError(f"The disk holding the data directory {uri} is full (while writing {what}); nothing was "
                               "written. Free some space and try again.")
    if "os error 30" in text or "Read-only file system" in text or "os error 13" in text or "Permission denied" in text:
        return StoreWriteError(f"The data directory {uri} is read-only (while writing {what}); nothing was written. "
                               "Make it writable, or choose another with --data-dir.")
    return StoreWriteError(f"Writing {what} to the data directory {uri} failed: {_first_line(exc)}. Nothing was written.")


def _read_error(uri: str, what: str, exc: BaseException) -> StoreReadError:
    text = str(exc)
    if "os error 13" in text or "Permission denied" in text:
        return StoreReadError(f"The data directory {uri} cannot be read (permission denied, while reading {what}); "
                              "nothing was changed. Give this user read access, or choose another with --data-dir.")
    if "Not found" in text or "os error 2" in text or "No such file" in text:
        return StoreReadError(f"Part of the data directory {uri} is missing (while reading {what}): {_first_line(exc)}. "
                              "Nothing was changed. Check `tiermem doctor`, and restore the directory from a copy or a "
                              "backup (`tiermem import backup.jsonl`) if files were removed.")
    return StoreReadError(f"Reading {what} from the data directory {uri} failed: {_first_line(exc)}. Nothing was "
                          "changed. If it persists the data may be damaged: check `tiermem doctor`.")


@contextmanager
def library(uri: str, what: str, *, writing: bool = False) -> Iterator[None]:
    """The boundary: a library error inside becomes a ``StoreReadError`` (``StoreWriteError`` when ``writing``)
    naming ``what`` was read or written. ``writes`` adds retries on commit conflicts for idempotent writes.

    Errors of ours (already translated by an inner boundary, or raised on purpose) pass unchanged.
    """
    try:
        yield
    except TiermemError:
        raise
    except LIBRARY_ERRORS as exc:
        raise (_write_error if writing else _read_error)(uri, what, exc) from exc


def uri_of(holder: Any) -> str:
    """Where a decorated method's object stores: its connection's ``uri`` (a part of ``Store`` holds the
    ``Connection`` as ``conn``; the ``Connection`` is its own)."""
    return str(getattr(holder, "conn", holder).uri)


def reads(what: str) -> Callable[[F], F]:
    """Run a read method of a part of ``Store`` (or of its ``Connection``) inside the ``library`` boundary."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            with library(uri_of(self), what):
                return fn(self, *args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


_CONFLICT_MARKERS = ("commit conflict", "too many concurrent")
_CONFLICT_ATTEMPTS = 30


def writes(what: str) -> Callable[[F], F]:
    """Make a write safe to call under contention and clear when it fails.

    Lance commits are atomic: a commit that loses to other writers changes nothing, so a commit
    conflict that Lance's own retries did not absorb is retried here (a conditional update re-checks
    its condition). Other storage failures become one clear ``StoreError``.
    """

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            for attempt in range(_CONFLICT_ATTEMPTS):
                try:
                    return fn(self, *args, **kwargs)
                except TiermemError:
                    raise
                except LIBRARY_ERRORS as exc:
                    conflict = any(m in str(exc).lower() for m in _CONFLICT_MARKERS)
                    if not conflict or attempt == _CONFLICT_ATTEMPTS - 1:
                        raise _write_error(uri_of(self), what, exc) from exc
                    log.info("%s: commit conflict with another writer, retrying (%d)", what, attempt + 1)
                    time.sleep(random.uniform(0, 0.005) * (attempt + 1))
            raise AssertionError("unreachable")

        return wrapper  # type: ignore[return-value]

    return decorate

