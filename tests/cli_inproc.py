"""Run the tiermem CLI in the test process, as ``python -m tiermem`` would run it, without starting a process.

A process costs ~2.5 s of imports (lancedb, anthropic) each time; in process they are paid once per worker. Tests
about the process itself (signals, exit on a closed pipe, the stdio transport, racing processes, crash recovery)
keep their subprocess: this is for tests of what a command does and says.

What a process would give each run, and this gives it too: its own environment (``env`` as given, nothing else
from ``TIERMEM_*``; what the run sets in ``os.environ`` itself is undone after), working directory, temporary
directory (``tempfile`` reads ``TMPDIR`` of ``env`` afresh, as a new process would), ``sys.argv``,
stdin/stdout/stderr (bytes underneath, utf-8 text on top), root logging as ``main`` sets it up (the handler it adds
is removed after), ``SIGINT``/``SIGTERM`` handlers put back, and the ``atexit`` work the run registered done at its
"exit" (stderr still captured, as a process would print it) rather than at the end of the test session; the thread
pools it started are shut down then, as the interpreter's exit shuts them down.

Not for ``serve``: a serving process sets its heap up (malloc arenas, mmap threshold, a trimming thread) for the
whole process, which a test process must not get; a test of ``serve`` starts a process.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import io
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from .conftest import ROOT


def _code_of(exc: SystemExit, err: io.TextIOBase) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=err)
    return 1


@contextlib.contextmanager
def _exit_work() -> Iterator[list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]]]:
    """Collects what the run registers with ``atexit`` (and honours its ``unregister``) instead of the real one."""
    registered: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = []

    def register(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[..., Any]:
        registered.append((func, args, kwargs))
        return func

    def unregister(func: Callable[..., Any]) -> None:
        registered[:] = [r for r in registered if r[0] != func]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(atexit, "register", register)
        mp.setattr(atexit, "unregister", unregister)
        yield registered


def run_cli(
    *args: str, env: Mapping[str, str], stdin: str | None = None, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    """``tiermem *args`` in process with ``env`` as its whole environment; returns what ``subprocess.run(...,
    capture_output=True, text=True)`` would (``returncode``, ``stdout``, ``stderr``)."""
    from tiermem.cli.main import main

    out_bytes, err_bytes = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(out_bytes, encoding="utf-8", write_through=True)
    err = io.TextIOWrapper(err_bytes, encoding="utf-8", write_through=True)
    inp = io.TextIOWrapper(io.BytesIO((stdin or "").encode()), encoding="utf-8")
    root = logging.getLogger()
    saved_root = (root.handlers[:], root.level)
    saved_levels = {
        name: lg.level for name, lg in logging.Logger.manager.loggerDict.items() if isinstance(lg, logging.Logger)
    }
    saved_signals = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    threads_before = set(threading.enumerate())
    saved_env = dict(os.environ)
    with pytest.MonkeyPatch.context() as mp, _exit_work() as at_exit:
        for name in list(os.environ):
            if name not in env:
                mp.delenv(name)
        for name, value in env.items():
            mp.setenv(name, value)
        mp.setattr(tempfile, "tempdir", None)  # read from TMPDIR (or its default) again, not this process's choice
        mp.chdir(cwd)
        mp.setattr(sys, "argv", ["tiermem", *args])
        mp.setattr(sys, "stdin", inp)
        mp.setattr(sys, "stdout", out)
        mp.setattr(sys, "stderr", err)
        root.handlers = []  # main's logging.basicConfig then adds its stderr handler, as in a fresh process
        try:
            try:
                code = main(list(args))
            except SystemExit as exc:
                code = _code_of(exc, err)
            except BaseException:  # what the interpreter does with an uncaught exception
                traceback.print_exc(file=err)
                code = 1
            for func, f_args, f_kwargs in reversed(at_exit):  # the process's exit
                try:
                    func(*f_args, **f_kwargs)
                except Exception:
                    traceback.print_exc(file=err)
            # the thread pools the run started (an object store's parallel reads): the interpreter's exit tells their
            # idle workers to end, which waiting for them here would otherwise never do
            started = set(threading.enumerate()) - threads_before
            for pool in gc.get_objects():
                if isinstance(pool, ThreadPoolExecutor) and started & set(pool._threads):
                    pool.shutdown(wait=False)
            for thread in set(threading.enumerate()) - threads_before:
                if not thread.daemon:
                    thread.join(60)
            with contextlib.suppress(ValueError):
                out.flush()
                err.flush()
        finally:
            for handler in root.handlers:
                if handler not in saved_root[0]:
                    handler.close()
            root.handlers, root.level = saved_root
            for name, lg in logging.Logger.manager.loggerDict.items():
                if isinstance(lg, logging.Logger):
                    lg.setLevel(saved_levels.get(name, logging.NOTSET))
            for s, h in saved_signals.items():
                signal.signal(s, h)
    for name in set(os.environ) - set(saved_env):  # set by the run itself (e.g. LANCEDB_LOG): gone, as at its exit
        del os.environ[name]
    os.environ.update(saved_env)
    return subprocess.CompletedProcess(
        ["tiermem", *args], code, out_bytes.getvalue().decode("utf-8"), err_bytes.getvalue().decode("utf-8")
    )
