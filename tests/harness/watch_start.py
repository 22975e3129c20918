"""Run the ``tiermem`` command and report on stderr what its start did before it first answered.

    python watch_start.py serve --data-dir DIR

Lines written (each in one write) when the process first writes to stdout (the answer to ``initialize``):
``gc-before-answer N``, N being the cyclic garbage collections run since the command was called; ``threads-at-answer
A,B,..`` (the live threads' names); ``heavy-at-answer X,Y,..`` (which of lancedb, pyarrow, onnxruntime, numpy are
imported, or being imported). At exit: ``gc-exit enabled=B frozen=F collections=N``. The collector's own hook
(``gc.callbacks``) counts the collections, so nothing of tiermem is touched.
"""

from __future__ import annotations

import atexit
import gc
import io
import os
import sys

runs = 0
answered = False


def count(phase: str, info: dict[str, int]) -> None:
    global runs
    if phase == "start":
        runs += 1


class Watched(io.RawIOBase):
    """fd 1, noting the first write."""

    def writable(self) -> bool:
        return True

    def write(self, data: object) -> int:
        global answered
        if not answered:
            answered = True
            os.write(2, f"gc-before-answer {runs}\n".encode())
            os.write(2, f"threads-at-answer {','.join(t.name for t in threading.enumerate())}\n".encode())
            heavy = [m for m in ("lancedb", "pyarrow", "onnxruntime", "numpy") if m in sys.modules]
            os.write(2, f"heavy-at-answer {','.join(heavy)}\n".encode())
        return os.write(1, bytes(data))  # type: ignore[arg-type]


def report() -> None:
    os.write(2, f"gc-exit enabled={gc.isenabled()} frozen={gc.get_freeze_count()} collections={runs}\n".encode())


gc.callbacks.append(count)
atexit.register(report)
sys.stdout = io.TextIOWrapper(io.BufferedWriter(Watched()), encoding="utf-8", line_buffering=True)

import threading  # noqa: E402  (imported by the hold: loaded here, its allocations are the harness's)

from tiermem.cli import main  # noqa: E402  (the console script's entry: it decides about the collector)

gc.collect()  # from an empty youngest generation, the command's first lines cannot tip it into a collection
runs = 0  # counted from here: what ran while this harness started is not the command's
sys.exit(main(sys.argv[1:]))
