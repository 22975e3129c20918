"""The ``tiermem`` command: hooks start fast, everything else goes to the CLI.

A host runs ``tiermem hook ...`` once per prompt and waits for it to exit, so that path imports only ``hooks``
(standard library and ``rendezvous``) and reads its few options itself; any other command, ``--help``, or options it
does not know go to ``cli.main`` with its full parser.
"""

from __future__ import annotations

import io
import os
import sys

from ..base import gcpause

HOOK_OPTIONS = ("--data-dir", "--agent", "--config")


def main(argv: list[str] | None = None) -> int:
    keep_notices_off_stdout()
    notices_survive_stderr_reader_leaving()
    args = sys.argv[1:] if argv is None else argv
    quick = _hook_options(args)
    if quick is not None:
        from .hooks import run

        return run(quick.get("--data-dir"), quick.get("--agent"), quick.get("--config"))
    if args[:1] == ["serve"]:  # a server's start creates objects, not garbage: collect once it has answered
        gcpause.hold()
    from .main import main as cli_main

    return cli_main(args)


def keep_notices_off_stdout() -> None:
    """Started with stderr closed (``2>&-``), Python sets ``sys.stderr`` to None, and ``print(..., file=None)`` writes
    to stdout: the stdio MCP transport, or a command's output. Notices then go to the null device: fd 2 is taken by
    it while free, so no file or socket opened later becomes fd 2 and receives them; if something already holds fd 2
    (not stderr: Python found it closed), it is left alone and ``sys.stderr`` writes to a null device of its own."""
    if sys.stderr is not None:
        return
    try:
        os.fstat(2)
        reused = True
    except OSError:
        reused = False
    fd = os.open(os.devnull, os.O_WRONLY)
    if not reused and fd != 2:
        os.dup2(fd, 2)
        os.close(fd)
        fd = 2
    sys.stderr = open(fd, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=fd != 2)  # noqa: SIM115


class _Notices(io.TextIOWrapper):
    """stderr that drops what it cannot write once its reader is gone (``BrokenPipeError``): fd 2 is pointed at the
    null device then, so a notice (a print, a log record) does not fail the command or request it is printed in."""

    def write(self, s: str) -> int:
        try:
            return super().write(s)
        except BrokenPipeError:
            self._reader_left()
            return len(s)

    def flush(self) -> None:
        try:
            super().flush()
        except BrokenPipeError:
            self._reader_left()

    def _reader_left(self) -> None:
        fd = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(fd, self.fileno())
        finally:
            os.close(fd)
        super().flush()  # what the pipe refused goes to the null device


def notices_survive_stderr_reader_leaving() -> None:
    """With Python's own stderr (not a test's capture), make it a ``_Notices``: a warning printed after the reader of
    stderr left (a host that closed its end) is dropped, as with stderr closed at start, and the command goes on."""
    if sys.stderr is not sys.__stderr__ or sys.stderr is None or isinstance(sys.stderr, _Notices):
        return
    try:
        fd = sys.stderr.fileno()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    binary = open(fd, "wb", closefd=False)  # noqa: SIM115
    sys.stderr = _Notices(binary, encoding=sys.stderr.encoding, errors="backslashreplace", line_buffering=True)


def _hook_options(args: list[str]) -> dict[str, str] | None:
    """``tiermem hook claude-code [--data-dir D] [--agent A] [--config C]``: its options; else None."""
    if args[:2] != ["hook", "claude-code"]:
        return None
    rest, options = args[2:], {}
    while rest:
        if len(rest) < 2 or rest[0] not in HOOK_OPTIONS or rest[0] in options:
            return None
        options[rest[0]] = rest[1]
        rest = rest[2:]
    return options
