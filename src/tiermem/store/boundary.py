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
from dataclasses import dataclass
from typing import Any, TypeVar

from ..base import fences
from ..base.errors import StoreBusyError, StoreError, StoreReadError, StoreWriteError, TiermemError
from ..base.object_errors import FAILURES, UNKNOWN_OUTCOME, explain, is_object_uri, outcome_unknown, store_code

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])

# Lance and Arrow raise RuntimeError ("lance error: ..."), OSError (ArrowIOError) or ValueError (ArrowInvalid).
LIBRARY_ERRORS = (RuntimeError, OSError, ValueError)
_SOURCE_LOCATION = re.compile(r",? /\S+\.rs:\d+:\d+")  # the Rust source line Lance appends to its messages


def first_line(exc: BaseException) -> str:
    """The first line of a library error, without the Rust source line Lance appends, obstore's "Debug source:" dump
    or a Rust debug dump (``IO { source: ... }``) after its words; at most 300 characters."""
    text = _SOURCE_LOCATION.sub("", str(exc)).split("\n\nDebug source:", 1)[0].strip()
    line = text.splitlines()[0].split(" { ", 1)[0] if text else ""
    return line[:300] if line else type(exc).__name__


def _object_store_error(
    uri: str, what: str, exc: BaseException, writing: bool, unfinished: str | None = None
) -> StoreError | None:
    """The error of an object store's recognised failure (a missing bucket, refused credentials, an endpoint that
    cannot be reached: ``object_errors.explain``), or None (not object storage, or not recognised)."""
    if not is_object_uri(uri):
        return None
    reason = explain(uri, str(exc))
    if reason is None:
        return None
    log.debug("%s %s at %s failed: %s", "writing" if writing else "reading", what, uri, exc)
    if writing:
        outcome = unfinished or (UNKNOWN_OUTCOME if outcome_unknown(str(exc)) else "Nothing was written.")
        return StoreWriteError(f"Writing {what} to {uri} failed: {reason}. {outcome}")
    return StoreReadError(f"Reading {what} from {uri} failed: {reason}. Nothing was changed.")


def _where(uri: str) -> str:
    return f"the object store {uri}" if is_object_uri(uri) else f"the data directory {uri}"


def _write_error(uri: str, what: str, exc: BaseException, unfinished: str | None = None) -> StoreError:
    """``unfinished``: what a write of several commits that failed midway left, and how it is finished (said instead
    of "nothing was written", which holds for a single commit only)."""
    recognised = _object_store_error(uri, what, exc, writing=True, unfinished=unfinished)
    if recognised is not None:
        return recognised
    text = str(exc)
    outcome = f". {unfinished}" if unfinished else "; nothing was written."
    if "os error 28" in text or "No space left" in text:
        return StoreWriteError(
            f"The disk holding the data directory {uri} is full (while writing {what}){outcome} Free some space "
            "and try again."
        )
    if "os error 30" in text or "Read-only file system" in text or "os error 13" in text or "Permission denied" in text:
        return StoreWriteError(
            f"The data directory {uri} is read-only (while writing {what}){outcome} Make it writable, or choose "
            "another with --data-dir."
        )
    return StoreWriteError(
        f"Writing {what} to {_where(uri)} failed: {first_line(exc)}. {unfinished or 'Nothing was written.'}"
    )


def _read_error(uri: str, what: str, exc: BaseException) -> StoreError:
    recognised = _object_store_error(uri, what, exc, writing=False)
    if recognised is not None:
        return recognised
    text = str(exc)
    if "os error 13" in text or "Permission denied" in text:
        return StoreReadError(
            f"The data directory {uri} cannot be read (permission denied, while reading {what}); "
            "nothing was changed. Give this user read access, or choose another with --data-dir."
        )
    if "Not found" in text or "os error 2" in text or "No such file" in text:
        return StoreReadError(
            f"Part of {_where(uri)} is missing (while reading {what}): {first_line(exc)}. "
            "Nothing was changed. Check `tiermem doctor`, and restore the directory from a copy or a "
            "backup (`tiermem import backup.jsonl`) if files were removed."
        )
    return StoreReadError(
        f"Reading {what} from {_where(uri)} failed: {first_line(exc)}. Nothing was "
        "changed. If it persists the data may be damaged: check `tiermem doctor`."
    )


@contextmanager
def library(uri: str, what: str, *, writing: bool = False, unfinished: str | None = None) -> Iterator[None]:
    """The boundary: a library error inside becomes a ``StoreReadError`` (``StoreWriteError`` when ``writing``)
    naming ``what`` was read or written. ``writes`` adds retries on commit conflicts for idempotent writes.

    A write error says "nothing was written", true of one commit; a block of several commits gives ``unfinished``
    instead: what a failure midway leaves, and how it is finished. Errors of ours (already translated by an inner
    boundary, or raised on purpose) pass unchanged. A write first checks the leases the work holds
    (``base.fences``: one that lapsed raises ``LeaseLapsedError``, nothing written).
    """
    if writing:
        fences.check(f"{what} to {uri}")
    try:
        yield
    except TiermemError:
        raise
    except LIBRARY_ERRORS as exc:
        if writing:
            raise _write_error(uri, what, exc, unfinished) from exc
        raise _read_error(uri, what, exc) from exc


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


# What Lance says when a commit lost to other writers (another replica, a concurrent call, an upkeep) and committed
# nothing: a plain or "Retryable" commit conflict, "Too many concurrent writers" once its own retries (about 30 s)
# ran out, an incompatible transaction (the write started from a version another commit superseded).
_CONFLICT_MARKERS = ("commit conflict", "too many concurrent", "incompatible transaction")


# A commit that took longer than the version retention can find a version it read (a manifest, a transaction file)
# removed by another replica's cleanup meanwhile: nothing was committed, and a new try starts from the newest version.
_CLEANED_UP = ("/_versions/", "/_transactions/", ".manifest", ".txn")


def is_conflict(exc: BaseException) -> bool:
    """True when ``exc`` is Lance's word that a commit lost to other writers (and so committed nothing), or that a
    version it started from was cleaned up under it. Never for the store's answer that the bucket is missing or
    the credentials are refused (a 404 of a version listing reads "not found" too)."""
    if store_code(str(exc)) in FAILURES:
        return False
    text = str(exc).lower()
    return any(m in text for m in _CONFLICT_MARKERS) or ("not found" in text and any(m in text for m in _CLEANED_UP))


@dataclass(frozen=True)
class Retry:
    """How a write that lost to other writers is tried again: up to ``attempts`` in all, within ``budget`` seconds
    from the first, waiting a random time up to ``first * 2**n`` (at most ``cap``) before try ``n + 1`` (full
    jitter, so two replicas that collided do not collide again at once). Each try may itself spend up to ~30 s in
    Lance's own commit retries."""

    attempts: int = 12
    budget: float = 60.0
    first: float = 0.05
    cap: float = 2.0

    def pause(self, attempt: int) -> float:
        """Seconds to wait after the failed try ``attempt`` (0-based)."""
        return random.uniform(0, min(self.cap, self.first * 2**attempt))


COMMIT_RETRY = Retry()
T = TypeVar("T")


def commit_with_retries(uri: str, what: str, attempt: Callable[[int], T], retry: Retry = COMMIT_RETRY) -> T:
    """Run ``attempt(n)`` (n = 0, 1, ...) until it returns, trying again while it fails on a commit conflict.

    ``attempt`` must be safe to run again after a conflict: a conditional write re-checks its condition, an upsert
    or a delete by key is the same whenever it runs, and an append checks, from its second try on, which of its rows
    are already stored (``n > 0``), so a retry never doubles a row. When the tries or the time run out the caller
    gets a ``StoreBusyError`` (nothing was written); any other library failure is a ``StoreWriteError`` at once.
    Each try first checks the leases the work holds (``base.fences``: one that lapsed raises ``LeaseLapsedError``).
    """
    started = time.monotonic()
    for n in range(retry.attempts):
        fences.check(f"{what} to {uri}")
        try:
            return attempt(n)
        except TiermemError:
            raise
        except LIBRARY_ERRORS as exc:
            if not is_conflict(exc):
                raise _write_error(uri, what, exc) from exc
            elapsed = time.monotonic() - started
            pause = retry.pause(n)
            if n == retry.attempts - 1 or elapsed + pause >= retry.budget:
                raise StoreBusyError(
                    f"Writing {what} to {uri} did not get through: other writers (another replica, another call or "
                    f"an upkeep) kept committing to the same table for {elapsed:.1f} s ({n + 1} tries; last: "
                    f"{first_line(exc)}). Nothing was written; the call is safe to repeat, preferably in a few "
                    "seconds."
                ) from exc
            log.info(
                "%s: commit conflict with another writer, trying again in %.2f s (try %d, %.1f s so far)",
                what,
                pause,
                n + 2,
                elapsed,
            )
            time.sleep(pause)
    raise AssertionError("unreachable")


def writes(what: str, retry: Retry = COMMIT_RETRY) -> Callable[[F], F]:
    """Make a write safe to call under contention and clear when it fails (``commit_with_retries``).

    Lance commits are atomic: a commit that loses to other writers changes nothing, so a commit conflict that
    Lance's own retries did not absorb is retried here by running the whole method again. Only for methods that may
    run twice: conditional updates, upserts and deletes by key (an append uses ``commit_with_retries`` itself).
    """

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            return commit_with_retries(uri_of(self), what, lambda _n: fn(self, *args, **kwargs), retry)

        return wrapper  # type: ignore[return-value]

    return decorate
