"""A watchdog for the suite's controller: a run that stops hearing from its workers ends, it does not wait forever.

pytest-timeout ends a test that runs too long inside its worker, but not a worker whose process is gone or stuck in
native code, and pytest-xdist can then wait for it forever: a worker killed by a segmentation fault in native code
(LanceDB), with ``--dist loadfile``, left both workers idle and the controller waiting until CI's limit. Here the
controller notes each test report; after ``TIERMEM_TEST_WATCHDOG`` seconds (default 600: twice pytest-timeout's
limit) with none (at least 120 s before the first test starts: xdist starts the tests once every worker has collected
them, and a worker may start late on a loaded machine), it prints the tests still running and the last ones reported
to stderr, kills its worker processes and exits with status 3. Only the xdist controller runs it (``-n 0`` runs have
pytest-timeout).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import pytest

DEFAULT_SILENCE = 600.0
BOOT = 120.0  # seconds allowed, at least, before the first test starts (every worker started and collected)
EXIT_STATUS = 3


def silence_limit() -> float:
    raw = os.environ.get("TIERMEM_TEST_WATCHDOG", "")
    if not raw:
        return DEFAULT_SILENCE
    try:
        value = float(raw)
    except ValueError:
        raise pytest.UsageError(f"TIERMEM_TEST_WATCHDOG must be seconds (a number), not {raw!r}") from None
    if value <= 0:
        raise pytest.UsageError(f"TIERMEM_TEST_WATCHDOG must be more than 0 seconds, not {raw!r}")
    return value


def descendants(pid: int) -> list[int]:
    """The processes started from ``pid``, children first (read from /proc; empty where there is none)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone since listed
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so read after its last ')'
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class Watchdog:
    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.heard = time.monotonic()
        self.running: dict[str, float] = {}  # test id -> when its worker said it started
        self.recent: deque[str] = deque(maxlen=5)
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.booted = False  # a worker has collected (``tests`` is known)
        self.started = False  # a test has started: every worker has collected (xdist schedules only then)
        self.tests = 0  # collected (the first worker's count: with xdist every worker collects them all)
        self.finished = 0

    def pytest_sessionstart(self) -> None:
        threading.Thread(target=self.watch, name="tiermem-test-watchdog", daemon=True).start()

    def pytest_sessionfinish(self) -> None:
        self.done.set()

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        with self.lock:
            self.heard = time.monotonic()
            self.started = True
            self.running[nodeid] = self.heard

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        with self.lock:
            self.heard = time.monotonic()
            if report.when == "teardown":
                self.finished += self.running.pop(report.nodeid, None) is not None
                self.recent.append(report.nodeid)

    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        with self.lock:
            self.heard = time.monotonic()
            self.booted = True
            self.tests = max(self.tests, len(ids))

    def overdue(self) -> bool:
        with self.lock:
            if self.booted and self.finished >= self.tests:
                return False  # every test has reported: what is left is the workers' own ending
            limit = self.limit if self.started else max(self.limit, BOOT)
            return time.monotonic() - self.heard >= limit

    def watch(self) -> None:
        while not self.done.wait(min(10.0, self.limit / 4)):
            if self.overdue():
                self.end()

    def report(self) -> str:
        now = time.monotonic()
        with self.lock:
            running = [f"  {test} (started {now - started:.0f} s ago)" for test, started in self.running.items()]
            recent = [f"  {test}" for test in self.recent]
        return "\n".join(
            [
                f"watchdog: no test report for {self.limit:.0f} s (TIERMEM_TEST_WATCHDOG): a worker died or hangs;"
                " ending the run instead of waiting for it.",
                "tests started and not finished:",
                *(running or ["  (none: the workers were idle)"]),
                "the last tests reported:",
                *(recent or ["  (none)"]),
            ]
        )

    def end(self) -> None:
        print("\n" + self.report(), file=sys.stderr, flush=True)
        for pid in descendants(os.getpid()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os._exit(EXIT_STATUS)


def install(config: pytest.Config) -> None:
    """Register the watchdog in an xdist controller (a run with workers); nothing in workers or ``-n 0`` runs."""
    if hasattr(config, "workerinput"):
        return
    workers = getattr(config.option, "numprocesses", None)
    if not workers or getattr(config.option, "collectonly", False):
        return
    config.pluginmanager.register(Watchdog(silence_limit()), "tiermem-watchdog")
