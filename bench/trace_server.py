"""Run ``tiermem`` with a sampler thread that records what grows.

    python -m bench load --wrap bench/trace_server.py [--seconds 180]   (TIERMEM_TRACE=out.jsonl)

Every TIERMEM_TRACE_SECONDS (default 10) it appends one JSON line to TIERMEM_TRACE (default
trace-<pid>.jsonl in the working directory): VmRSS, anonymous memory and file pages (smaps_rollup), the
thread count by thread name (/proc/self/task/*/comm, digits folded), the LanceDB sessions' ``size_bytes`` and
``approx_num_items`` (the newest ``lancedb.Session`` the process made), and with
TIERMEM_TRACE_MALLOC=1 the Python heap (tracemalloc's current size and its ten largest growths since the first
sample). It changes nothing else: the arguments go to tiermem's CLI as given.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

_sessions: list[Any] = []  # the newest lancedb.Session


def _record_sessions() -> None:
    import lancedb

    original = lancedb.Session

    def recorded(*args: Any, **kwargs: Any) -> Any:
        session = original(*args, **kwargs)
        _sessions[:] = [session]  # the newest only (a native object without weak references): old ones may go
        return session

    lancedb.Session = recorded


def _memory() -> dict[str, float]:
    out: dict[str, float] = {}
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines()[1:]:
        name, value = line.split(":", 1)
        if name in ("Rss", "Anonymous"):
            out[name.lower()] = round(int(value.split()[0]) / 1024, 1)
    out["file"] = round(out.get("rss", 0.0) - out.get("anonymous", 0.0), 1)
    return out


def _threads() -> dict[str, int]:
    names: Counter[str] = Counter()
    for task in Path("/proc/self/task").iterdir():
        try:
            names[re.sub(r"\d+", "#", (task / "comm").read_text().strip())] += 1
        except OSError:
            continue
    return dict(names.most_common())


def _sample(started: float, heap: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"t": round(time.time() - started, 1), **_memory()}
    threads = _threads()
    row["threads"] = sum(threads.values())
    row["thread_names"] = threads
    row["sessions"] = [{"bytes": s.size_bytes, "items": s.approx_num_items} for s in _sessions]
    if heap:
        import tracemalloc

        snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        row["py_heap_mb"] = round(tracemalloc.get_traced_memory()[0] / 2**20, 1)
        if "first" not in heap:
            heap["first"] = snap
        else:
            row["py_growth"] = [
                f"{s.traceback[0].filename}:{s.traceback[0].lineno} {s.size_diff / 1024:+.0f} KB"
                for s in snap.compare_to(heap["first"], "lineno")[:10]
            ]
    return row


def _sampler(path: Path, every: float, heap: dict[str, Any]) -> None:
    started = time.time()
    while True:
        try:
            row = _sample(started, heap)
        except Exception as exc:  # a sampler must not take the server down; its error is recorded instead
            row = {"t": round(time.time() - started, 1), "error": repr(exc)}
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        time.sleep(every)


def main() -> int:
    heap: dict[str, Any] = {}
    if os.environ.get("TIERMEM_TRACE_MALLOC") == "1":
        import tracemalloc

        tracemalloc.start(1)
        heap["on"] = True
    _record_sessions()
    path = Path(os.environ.get("TIERMEM_TRACE", f"trace-{os.getpid()}.jsonl"))
    every = float(os.environ.get("TIERMEM_TRACE_SECONDS", "10"))
    threading.Thread(target=_sampler, args=(path, every, heap), name="trace-sampler", daemon=True).start()
    from tiermem.cli.main import main as tiermem_main

    sys.argv[0] = "tiermem"
    return int(tiermem_main() or 0)


if __name__ == "__main__":
    sys.exit(main())
