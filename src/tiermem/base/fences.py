"""The leases the work under way holds, told to each commit it makes: ``holding`` (``core.lease``) names a check that
stays in force while a lease is held, and ``check`` (the store, right before each LanceDB commit) runs every check
in force there, so work whose lease ran out stops before its next commit (``LeaseLapsedError``) instead of writing
while another replica may hold the lease.

The checks in force are those of the calling context (a ``ContextVar``: one thread's, or one task's), so a commit
made for another caller (a group append's leader commits every waiting caller's rows: ``store/appends.py``) runs the
checks that caller had (``current``, then ``check(what, checks)``) and none of its own (``outside``). Standard
library only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

Check = Callable[[str], None]  # raises ``LeaseLapsedError`` naming what was about to be written, else nothing
_in_force: ContextVar[tuple[Check, ...]] = ContextVar("tiermem_lease_checks", default=())


@contextmanager
def holding(check: Check) -> Iterator[None]:
    """``check`` runs before every commit made inside (in this context), on top of those already in force."""
    token = _in_force.set((*_in_force.get(), check))
    try:
        yield
    finally:
        _in_force.reset(token)


@contextmanager
def outside() -> Iterator[None]:
    """No check in force inside: commits made for other callers, who ran their own checks (``current``)."""
    token = _in_force.set(())
    try:
        yield
    finally:
        _in_force.reset(token)


def current() -> tuple[Check, ...]:
    """The checks in force here, for a commit another thread makes for this caller."""
    return _in_force.get()


def check(what: str, checks: tuple[Check, ...] | None = None) -> None:
    """Right before a commit of ``what`` (``"rows to s3://..."``): raise if a lease the work holds ran out. ``checks``:
    those a caller had (``current``), else those in force here."""
    for c in _in_force.get() if checks is None else checks:
        c(what)
