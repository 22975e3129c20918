"""What Chinese, Japanese and Korean text costs: the sittings index, the first search, doctor's scan, long rows.

    python -m bench cjk                          # every part below, on a fresh store in a temporary directory
    python -m bench cjk --turns 20000            # the conversation's length (default 20000)

Seconds are CPU seconds (the machine is shared) unless said.

- ``sittings``: ``SittingIndex`` built from a Chinese conversation of ``--turns`` turns (``bench/cjk_corpus.py``:
  natural sentences, mixed; about 150 characters a turn), best of three builds, and the memory it holds
  (tracemalloc), with the words it counts per turn and its (sitting, word) entries;
- ``first search``: a fresh process opens a store holding that conversation (logged with the hashing embedder, the
  full-text index brought up to date), runs one ``conversation_search`` (which builds the sittings index) and then
  a second; the first's seconds and the process's peak RSS;
- ``doctor scan``: ``AgentRows.stale_keyword_texts`` on that store (what ``doctor`` and ``optimize`` run on every
  store, whatever its keyword-text mark), seconds and the Python memory it peaks at;
- ``long row``: ``cjk.keyword_text`` of a 1,000,000-character Chinese text (seconds, peak memory, length of the
  keyword text against the text's), and the ranker's ``features`` and the calibration's ``coverage`` of a
  candidate of that length.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from .cjk_corpus import conversation

QUERIES = ["我妈妈的生日礼物准备好了吗", "你对花生过敏吗", "护照放在哪里", "特斯拉停在哪个车库"]


def _peak(fn: Any) -> tuple[Any, float, float]:
    """(result, CPU seconds with tracemalloc on, peak MB of Python allocations) of ``fn()``."""
    tracemalloc.start()
    started = time.process_time()
    out = fn()
    seconds = time.process_time() - started
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    return out, seconds, peak


def sittings(rows: list[dict[str, Any]]) -> dict[str, Any]:
    from tiermem.domain.search.sittings import SittingIndex, stems

    def build() -> SittingIndex:
        index = SittingIndex()
        index.add(rows)
        return index

    best = min(_time(build) for _ in range(3))
    index, _, peak = _peak(build)
    return {
        "turns": len(rows),
        "chars_per_turn": round(sum(len(r["content"]) for r in rows) / len(rows), 1),
        "words_per_turn": round(sum(len(stems(r["content"])) for r in rows[:2000]) / min(len(rows), 2000), 1),
        "build_s": round(best, 3),
        "held_mb": round(peak, 1),
        "sittings": len(index.sittings),
        "entries": sum(len(s.tf) for s in index.sittings),
        "matched_sittings": [len(index.ranks(q)) for q in QUERIES],
    }


def _time(fn: Any) -> float:
    """The CPU seconds of ``fn()`` (the machine is shared: its wall time is noise)."""
    started = time.process_time()
    fn()
    return time.process_time() - started


def build_store(data_dir: Path, rows: list[dict[str, Any]]) -> None:
    from datetime import UTC, datetime

    from tiermem.base.config import load_settings
    from tiermem.domain import maintenance
    from tiermem.domain.factory import open_memory

    memory = open_memory(load_settings(data_dir=data_dir, embedding_model="hashing", optimize_every=0))
    agent = memory.ensure_agent("default").id
    turns = [
        {
            "role": r["role"],
            "content": r["content"],
            "conversation_id": r["conversation_id"],
            "timestamp": datetime.fromtimestamp(r["created_us"] / 1e6, tz=UTC).isoformat(),
        }
        for r in rows
    ]
    for i in range(0, len(turns), 500):
        memory.archive.log_messages(agent, turns[i : i + 500])
    memory.archive.vectors.catch_up(None)
    maintenance.optimize(memory)


FIRST_SEARCH = """
import json, resource, sys, time
from tiermem.base.config import load_settings
from tiermem.domain.factory import open_memory
memory = open_memory(load_settings(data_dir=sys.argv[1], embedding_model="hashing", optimize_every=0))
agent = memory.ensure_agent("default").id
cpu, started = time.process_time(), time.perf_counter()
memory.archive.conversation_search(agent, sys.argv[2], limit=5)
first, first_cpu = time.perf_counter() - started, time.process_time() - cpu
cpu, started = time.process_time(), time.perf_counter()
memory.archive.conversation_search(agent, sys.argv[3], limit=5)
second, second_cpu = time.perf_counter() - started, time.process_time() - cpu
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"first_s": round(first, 3), "first_cpu_s": round(first_cpu, 3), "second_s": round(second, 3),
    "second_cpu_s": round(second_cpu, 3), "peak_rss_mb": round(rss, 1)}))
"""


def first_search(data_dir: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", FIRST_SEARCH, str(data_dir), QUERIES[0], QUERIES[1]],
        check=True,
        capture_output=True,
        text=True,
        env=os.environ.copy(),
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def doctor_scan(data_dir: Path) -> dict[str, Any]:
    from tiermem.base.config import load_settings
    from tiermem.domain.factory import open_memory

    memory = open_memory(load_settings(data_dir=data_dir, embedding_model="hashing", optimize_every=0))
    found, seconds, peak = _peak(memory.archive.rows.stale_keyword_texts)
    return {
        "rows_named": sum(len(ids) for ids in found.values()),
        "seconds": round(seconds, 3),
        "peak_mb": round(peak, 1),
    }


def long_row(chars: int = 1_000_000) -> dict[str, Any]:
    from datetime import UTC, datetime

    from tiermem.base.records import Found
    from tiermem.domain.search import cjk
    from tiermem.domain.search.query import analyse
    from tiermem.domain.search.ranking import Candidate, Context, coverage, features

    text = ""
    for r in conversation(20_000):
        text += r["content"]
        if len(text) >= chars:
            break
    text = text[:chars]
    keyword, seconds, peak = _peak(lambda: cjk.keyword_text(text))
    found = Found(id="p", content=text, created_us=int(datetime(2024, 5, 8, tzinfo=UTC).timestamp() * 1e6))
    candidate = Candidate(id="p", content=text, found=found, fts_rank=1, bm25=1.0)
    query = analyse(QUERIES[0])
    ranked = _time(lambda: (features(query, [candidate]), coverage(query, candidate, Context())))
    return {
        "chars": len(text),
        "keyword_text_s": round(seconds, 3),
        "keyword_text_peak_mb": round(peak, 1),
        "keyword_text_times_longer": round(len(keyword) / len(text), 2),
        "features_and_coverage_s": round(ranked, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench cjk")
    parser.add_argument("names", nargs="*")
    parser.add_argument("--turns", type=int, default=20_000)
    args = parser.parse_args()
    rows = conversation(args.turns)
    results: dict[str, Any] = {"sittings": sittings(rows), "long row": long_row()}
    print(json.dumps(results, ensure_ascii=False, indent=1), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        started = time.perf_counter()
        build_store(data_dir, rows)
        print(f"store of {len(rows)} turns built in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        results["first search"] = first_search(data_dir)
        results["doctor scan"] = doctor_scan(data_dir)
    print(json.dumps({k: results[k] for k in ("first search", "doctor scan")}, ensure_ascii=False, indent=1))
