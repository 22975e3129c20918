"""Vector search on small tables: LanceDB's exact scan against tiermem's early IVF-SQ index.

    python -m bench small_index [--rows 2000,5000,10000] [--rounds 12]

Part 1, per table size: the memory one vector search holds while it runs (VmHWM reset before it, the heap settings
of a serving process: glibc's mmap threshold fixed, two arenas; everything is handed back after it), for LanceDB's
exact scan (no index) and for the IVF-SQ index tiermem builds from 1,000 rows, probed and re-ranked as tiermem
does up to 20k rows (``store/search.py``: every partition, 10x the limit); its recall@10 against the exact scan, and
p50 of both. Vectors: the packaged MiniLM over the bench's synthetic passages (``bench/scale.py``), 100 questions.
Part 2: how many segments LanceDB's optimize leaves a vector index in after ROUNDS rounds of 200 one-row writes
(it appends one per round and never merges them), and how many tiermem's upkeep leaves (``Store.optimize``).
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from .common import rss_mb, stats, status_mb


def _peak_of(fn: Any) -> float:
    """MB that ``fn()`` adds to the resident set at its peak (VmHWM reset first; Linux only)."""
    from tiermem.base.memtrim import trim

    trim()
    base = rss_mb()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    fn()
    return status_mb("VmHWM") - base


def _embed(n: int) -> tuple[list[str], list[list[float]], list[list[float]]]:
    from tiermem.embedding.embedders import make_embedder

    from .corpus import passage, questions

    embedder = make_embedder("default", Path(tempfile.mkdtemp(prefix="tiermem-small-index-")))
    embedder.start()
    embedder.wait(None)
    texts = [passage(random.Random(i), i)[0] for i in range(n)]
    started = time.perf_counter()
    vectors = [list(v) for v in embedder.embed(texts)]
    print(f"embedded {n} passages in {time.perf_counter() - started:.0f} s", flush=True)
    return [f"p{i}" for i in range(n)], vectors, [list(v) for v in embedder.embed(questions(100))]


def _search(table: Any, n: int, q: list[float], *, index: bool) -> Any:
    """The vector leg's query: the exact scan, or the index probed and re-ranked as tiermem does at ``n`` rows."""
    from tiermem.store.search import vector_nprobes, vector_refine

    s = table.search(q).distance_type("cosine").select(["id", "_distance"]).limit(10)
    return s.nprobes(vector_nprobes(n)).refine_factor(vector_refine(n)) if index else s


def _timed(table: Any, n: int, questions: list[list[float]], *, index: bool) -> tuple[list[set[str]], dict[str, float]]:
    found, lat = [], []
    for q in questions:
        started = time.perf_counter()
        found.append({r["id"] for r in _search(table, n, q, index=index).to_list()})
        lat.append(time.perf_counter() - started)
    return found, stats(lat[5:])


def sizes(rows: list[int]) -> None:
    import lancedb
    import pyarrow as pa
    from lancedb.index import IvfSq

    from tiermem.base.memtrim import fix_mmap_threshold, limit_arenas
    from tiermem.store.indexes import vector_partitions
    from tiermem.store.search import vector_nprobes, vector_refine

    limit_arenas(2)
    fix_mmap_threshold(128 << 10)
    ids, vectors, questions = _embed(max(rows))
    session = lancedb.Session(index_cache_size_bytes=512 << 20, metadata_cache_size_bytes=8 << 20)
    print(
        f"{'rows':>6s} {'exact: peak MB':>15s} {'p50 ms':>7s} {'IVF-SQ: peak MB':>16s} {'p50 ms':>7s} {'recall@10':>9s} "
        f"{'partitions':>10s} {'probes':>7s} {'re-rank':>7s}"
    )
    for n in rows:
        db = lancedb.connect(
            tempfile.mkdtemp(prefix="tiermem-small-index-"), session=session, read_consistency_interval=timedelta(0)
        )
        flat = pa.FixedSizeListArray.from_arrays(pa.array([x for v in vectors[:n] for x in v], pa.float32()), 384)
        table = db.create_table("t", pa.table({"id": ids[:n], "vector": flat}))

        exact, exact_t = _timed(table, n, questions, index=False)
        exact_peak = _peak_of(lambda: _search(table, n, questions[0], index=False).to_list())  # noqa: B023 (run here)
        table.create_index("vector", config=IvfSq(distance_type="cosine", num_partitions=vector_partitions(n)))
        got, ivf_t = _timed(table, n, questions, index=True)
        ivf_peak = _peak_of(lambda: _search(table, n, questions[1], index=True).to_list())  # noqa: B023 (run here)
        recall = sum(len(a & b) for a, b in zip(exact, got)) / (10 * len(questions))
        print(
            f"{n:6d} {exact_peak:15.1f} {exact_t['p50_ms']:7.1f} {ivf_peak:16.1f} {ivf_t['p50_ms']:7.1f} {recall:9.3f} "
            f"{vector_partitions(n):10d} {min(vector_nprobes(n), vector_partitions(n)):7d} {vector_refine(n):6d}x",
            flush=True,
        )


def segments(rounds: int) -> None:
    """Segments of a vector index after rounds of 200 writes + optimize: LanceDB alone, then tiermem's upkeep."""
    from tiermem.base.config import load_settings
    from tiermem.domain.factory import open_memory

    memory = open_memory(
        load_settings(
            data_dir=Path(tempfile.mkdtemp(prefix="tiermem-small-index-")), embedding_model="hashing", optimize_every=0
        )
    )
    memory.archive.embedder.wait(60)
    agent = memory.ensure_agent("default").id
    store = memory.archive.store
    table = store.conn.tables["messages"]  # the bench reads LanceDB's own index statistics
    from lancedb.index import IvfSq

    from tiermem.store.indexes import trained_key

    def write(n: int, start: int) -> None:
        memory.archive.log_messages(agent, [{"role": "user", "content": f"hello {start + i}"} for i in range(n)])

    write(1000, 0)
    table.create_index("vector", config=IvfSq(distance_type="cosine", num_partitions=31))
    alone = []
    for r in range(rounds):  # LanceDB's optimize alone
        write(200, 1000 + 200 * r)
        table.optimize(cleanup_older_than=timedelta(minutes=10))
        alone.append(table.index_stats("vector_idx").num_indices)
    print(f"LanceDB's optimize, {rounds} rounds of 200 writes: segments after each {alone}")
    # tiermem's upkeep from here; the index gets the training record tiermem writes when it builds one (without it,
    # an index from an earlier version, it is only appended to)
    store.conn.set_meta(trained_key("messages"), "1000")
    kept = []
    for r in range(rounds):
        write(200, 1000 + 200 * (rounds + r))
        store.indexes.optimize()
        kept.append(table.index_stats("vector_idx").num_indices)
    print(f"tiermem's upkeep (Store.optimize), {rounds} more rounds: segments after each {kept}")


def main() -> None:
    if not sys.platform.startswith("linux"):
        raise SystemExit("bench small_index reads /proc (Linux only)")
    args = sys.argv[1:]
    rows = [int(x) for x in args[args.index("--rows") + 1].split(",")] if "--rows" in args else [2000, 5000, 10000]
    rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else 12
    os.environ.setdefault("LANCE_LOG", "error")
    sizes(rows)
    segments(rounds)


if __name__ == "__main__":
    main()
