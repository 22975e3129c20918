"""grep's searches bounded by the wall clock, and really stopped when it runs out.

The ``regex`` library's ``timeout`` counts the process's CPU time (C's ``clock()``), not the wall clock: on a busy
machine a search given 30 seconds runs for a minute or more, and the CPU of the server's other threads makes it fire
early. So each search runs in this process for a short slice of CPU time (``SLICE_SECONDS``, never past the wall
deadline); the rare search that needs longer is run again, from the start, in a child process (``python -I`` with
only the ``regex`` library, found where this process found it: a user site or ``PYTHONPATH``, which ``-I`` leaves
out, is given to it), and the child is killed when the wall deadline passes. A pathological pattern
(``(a+)+b``) stops within about a slice of the deadline and burns no CPU after it, and a long but honest search
(a 50 MB file) still finishes.

``search`` and ``match_starts`` raise ``TimeoutError`` once the deadline has passed; the caller words it.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal, Protocol

from ..base.errors import ValidationError

SLICE_SECONDS = 1.0  # CPU seconds a search gets in this process before it moves to a child that can be killed

# The child: reads (pattern, flags, text, mode, timeout) pickled from its parent, answers in JSON. Its own timeout
# (CPU of the child alone, so never later than the wall clock) stops it even if its parent is gone.
_CHILD = """\
import json, pickle, sys
sys.path[:0] = sys.argv[1:]  # the directory its parent's regex came from
import regex
pattern, flags, text, mode, timeout = pickle.load(sys.stdin.buffer)
compiled = regex.compile(pattern, flags)
try:
    if mode == "search":
        answer = compiled.search(text, timeout=timeout) is not None
    else:
        answer = [m.start() for m in compiled.finditer(text, timeout=timeout)]
except TimeoutError:
    sys.exit(3)
sys.stdout.write(json.dumps(answer))
"""
_TIMED_OUT_EXIT = 3


class Compiled(Protocol):
    """A compiled ``regex`` pattern (``file_views.Searcher``)."""

    @property
    def pattern(self) -> str: ...

    @property
    def flags(self) -> int: ...

    def search(self, string: str, *, timeout: float | None = None, concurrent: bool | None = None) -> object | None: ...

    def finditer(
        self, string: str, *, timeout: float | None = None, concurrent: bool | None = None
    ) -> Iterator[_Match]: ...


class _Match(Protocol):
    def start(self) -> int: ...


Clock = Callable[[], float]


def _left(deadline: float, clock: Clock) -> float:
    left = deadline - clock()
    if left <= 0:
        raise TimeoutError("the wall-clock deadline has passed")
    return left


def search(
    compiled: Compiled, text: str, deadline: float, clock: Clock, *, slice_seconds: float = SLICE_SECONDS
) -> bool:
    """Whether ``compiled`` matches somewhere in ``text``, found before ``deadline`` (a reading of ``clock``)."""
    left = _left(deadline, clock)
    if slice_seconds > 0:
        try:
            return compiled.search(text, timeout=min(left, slice_seconds), concurrent=True) is not None
        except TimeoutError:
            pass  # longer than a slice: searched again where it can be stopped
    answer = _in_child(compiled, text, "search", deadline, clock)
    return bool(answer)


def match_starts(
    compiled: Compiled, text: str, deadline: float, clock: Clock, *, slice_seconds: float = SLICE_SECONDS
) -> list[int]:
    """The start offsets of every match of ``compiled`` in ``text`` (``finditer``), found before ``deadline``."""
    left = _left(deadline, clock)
    if slice_seconds > 0:
        try:
            return [m.start() for m in compiled.finditer(text, timeout=min(left, slice_seconds), concurrent=True)]
        except TimeoutError:
            pass  # longer than a slice: searched again where it can be stopped
    answer = _in_child(compiled, text, "starts", deadline, clock)
    assert isinstance(answer, list)
    return [int(x) for x in answer]


def _regex_home() -> list[str]:
    """The directory holding the ``regex`` package this process uses (loaded by ``file_views``, which compiled the
    pattern), for the child: ``-I`` drops ``PYTHONPATH`` and the user site, where it may have been installed."""
    module = sys.modules.get("regex")
    where = getattr(module, "__file__", None)
    return [str(Path(where).parent.parent)] if where else []


def _in_child(
    compiled: Compiled, text: str, mode: Literal["search", "starts"], deadline: float, clock: Clock
) -> bool | list[int]:
    """The search run in a child process, killed (and waited for) if the deadline passes first."""
    left = _left(deadline, clock)
    payload = pickle.dumps((compiled.pattern, compiled.flags, text, mode, left), protocol=pickle.HIGHEST_PROTOCOL)
    with subprocess.Popen(
        [sys.executable, "-I", "-c", _CHILD, *_regex_home()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as child:
        try:
            out, err = child.communicate(payload, timeout=left)
        except subprocess.TimeoutExpired as exc:
            raise TimeoutError("the wall-clock deadline has passed") from exc
        finally:
            if child.returncode is None:  # timed out or interrupted: it stops now, not when its CPU runs out
                child.kill()
                child.communicate()
    if child.returncode == _TIMED_OUT_EXIT:
        raise TimeoutError("the wall-clock deadline has passed")
    if child.returncode != 0:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no message"]
        raise ValidationError(
            f"grep_files could not finish: its search process failed (exit {child.returncode}: {tail[0]}). "
            "Try again, or use a simpler pattern."
        )
    answer: bool | list[int] = json.loads(out)
    return answer
