"""Python's cyclic garbage collector held off while a server starts, then its start frozen out of later collections.

Before ``tiermem serve`` answers ``initialize`` it creates some 130,000 objects (the MCP SDK's and pydantic's classes
and schemas, tiermem's modules, the settings); the cyclic collector walks them again and again meanwhile, 10-15% of
the start's CPU (measured with ``python -m bench coldstart``). The CLI calls
``hold()`` first thing for ``serve``; the server calls ``release()`` once the client has its handshake's answer
(``runtime.Runtime.mark_answered``), and a network server before it listens. ``release`` moves every object alive at
that moment to the permanent generation (``gc.freeze``: modules, classes and schemas live as long as the process,
so later collections need not walk them) and turns the collector back on. The few hundred objects that became
cyclic garbage during the start stay allocated (measured: under 1,000 objects). If nothing releases it, the hold
ends by itself after ``deadline`` seconds (a client that never finishes its handshake, say).

Standard library only (``threading`` only once a hold starts: the CLI imports this module on its hooks' fast path
too); nothing happens at import.
"""

from __future__ import annotations

import _thread
import gc
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import threading

DEADLINE = 10.0  # seconds: the longest the collector stays off

_lock = _thread.allocate_lock()
_timer: threading.Timer | None = None


def hold(deadline: float = DEADLINE) -> bool:
    """Turn the cyclic collector off until ``release()`` (or ``deadline`` s from now); False when it was already off
    (someone else turned it off: it is theirs to turn on, and ``release`` leaves it alone)."""
    import threading

    global _timer
    with _lock:
        if _timer is not None or not gc.isenabled():
            return False
        gc.disable()
        _timer = threading.Timer(deadline, release)
        _timer.name = "tiermem-gc-hold"
        _timer.daemon = True
        _timer.start()
        return True


def held() -> bool:
    """True while a ``hold`` is in force."""
    return _timer is not None


def release() -> bool:
    """End the hold: freeze what is alive now out of later collections, and turn the collector back on. True if a
    hold ended; without one it does nothing (so every caller may call it)."""
    global _timer
    if _timer is None:  # the common case, on every request: no lock needed to see it
        return False
    with _lock:
        timer, _timer = _timer, None
        if timer is None:
            return False
        timer.cancel()  # (from the timer's own thread too: it has fired, so this does nothing)
        gc.freeze()
        gc.enable()
        return True
