"""``Opening``: something slow to open (the memory store, the archive), built once in a background thread.

Every caller waits for that one build, a bounded time, and gets a clear error if it failed. The server
opens its memory in two stages with it: the core state (blocks, agents; SQLite, stdlib only) answers
block tools at once, while the archive (LanceDB, the embedding model) keeps opening behind it
(``factory.open_memory(lazy=True)``; ``runtime.MemoryHandle``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from .errors import StoreError, TiermemError

log = logging.getLogger(__name__)
T = TypeVar("T")

OPEN_TIMEOUT = 120.0  # seconds a call waits for the store to open (a migration or a slow disk can take a while)


class Opening(Generic[T]):
    """Builds ``build()`` once, off the caller's thread; ``get`` waits for it (at most ``timeout`` seconds)."""

    def __init__(
        self,
        build: Callable[[], T],
        *,
        thread_name: str,
        timeout: float = OPEN_TIMEOUT,
        on_wait: Callable[[float | None], None] | None = None,
    ) -> None:
        self.timeout = timeout
        self.thread_name = thread_name
        # told when a caller has to wait (None) and when that wait ends with the value built (the seconds it took):
        # the server tells its client why a call is slow, and when it goes on
        self.on_wait = on_wait
        self._build_fn = build
        self._done = threading.Event()
        self._started = False
        self._guard = threading.Lock()
        self._value: T | None = None
        self._error: BaseException | None = None

    @property
    def started(self) -> bool:
        return self._started

    @property
    def ready(self) -> bool:
        """True once the build has finished (built or failed)."""
        return self._done.is_set()

    def start(self) -> None:
        """Start building in the background (once; later calls do nothing)."""
        with self._guard:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._build, name=self.thread_name, daemon=True).start()

    def _build(self) -> None:
        try:
            self._value = self._build_fn()
        except BaseException as exc:  # kept and reported to every caller, never dropped
            log.error("could not open memory: %s", exc)
            self._error = exc
        finally:
            self._done.set()

    def settle(self, timeout: float) -> T | None:
        """Wait up to ``timeout`` s for a build in progress; the value if it was built, else None. Never
        starts a build, never raises (the error, if any, was logged and is raised to every ``get``)."""
        if self._started:
            self._done.wait(timeout)
        return self._value if self._done.is_set() else None

    def get(self) -> T:
        """The built value; starts the build if nobody has yet. Blocks (call it in a worker thread)."""
        self.start()
        waited = None if self._done.is_set() or self.on_wait is None else time.monotonic()
        if waited is not None and self.on_wait is not None:
            self.on_wait(None)
        done = self._done.wait(self.timeout)
        if done and waited is not None and self.on_wait is not None and self._error is None:
            self.on_wait(time.monotonic() - waited)
        if not done:
            raise StoreError(
                f"tiermem is still opening its memory store after {self.timeout:.0f} s; try the call again in a "
                "moment. If this keeps happening, run `tiermem doctor` on the data directory."
            )
        if isinstance(self._error, TiermemError):
            raise self._error  # already says what to do
        if self._error is not None:
            raise StoreError(
                f"tiermem could not open its memory store ({type(self._error).__name__}: {self._error}). "
                "Fix the cause (see the server's log), then restart the server; `tiermem doctor` checks the setup."
            ) from self._error
        assert self._value is not None
        return self._value
