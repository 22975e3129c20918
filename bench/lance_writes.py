"""Resident memory of LanceDB alone under one-row writes: what is LanceDB's and what is tiermem's.

    python -m bench lance_writes [--writes 8000] [--cache-mb 16|0] [--no-fts] [--no-optimize] [--trim-every N]
                                 [--arenas N] [--mmap-threshold-kb N] [--renew-every N] [--report-every N]

One fresh process per run writes single rows (384-float vectors) to a table opened with
read_consistency_interval=0 (as tiermem's store is), runs a filtered full-text query after each write (with
--no-fts: none), compacts every 200 writes, and prints VmRSS every 1,000 writes. --cache-mb caps LanceDB's
metadata and index caches (0: LanceDB's defaults). Set MALLOC_ARENA_MAX=2 in the environment to compare
glibc arenas, or --arenas / --mmap-threshold-kb to apply tiermem's own settings (memtrim.py: what `tiermem serve`
does with malloc_arenas and malloc_mmap_threshold_kb). --renew-every N reopens the table on a new connection and
session every N writes (the old ones dropped). Each report also gives anonymous memory and glibc's heap in use
(mallinfo2), after gc and malloc_trim.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
from datetime import timedelta

from .common import memory_split, rss_mb


def _heap() -> str:
    """Anonymous memory and glibc's heap in use, after gc and malloc_trim (MB)."""
    import ctypes

    class Info(ctypes.Structure):
        _fields_ = [
            (n, ctypes.c_size_t)
            for n in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()
        ]

    gc.collect()
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc_trim(0)
    libc.mallinfo2.restype = Info
    anon = memory_split().get("anon", float("nan"))
    return f"anon {anon:.0f} MB heap in use {libc.mallinfo2().uordblks / 2**20:.0f} MB"


def run(
    writes: int,
    cache_mb: int,
    fts: bool,
    optimize: bool,
    trim_every: int = 0,
    arenas: int = 0,
    mmap_threshold_kb: int = 0,
    renew_every: int = 0,
    report_every: int = 1000,
) -> None:
    import ctypes

    from tiermem.base.memtrim import fix_mmap_threshold, limit_arenas

    limit_arenas(arenas)
    fix_mmap_threshold(mmap_threshold_kb << 10)
    import lancedb
    import pyarrow as pa

    where = tempfile.mkdtemp(prefix="lance-writes-")

    def connect() -> object:
        kw: dict[str, object] = {"read_consistency_interval": timedelta(0)}
        if cache_mb:
            kw["session"] = lancedb.Session(
                index_cache_size_bytes=cache_mb << 20, metadata_cache_size_bytes=cache_mb << 20
            )
        return lancedb.connect(where, **kw)

    db = connect()
    schema = pa.schema(
        [("id", pa.string()), ("agent_id", pa.string()), ("text", pa.string()), ("vector", pa.list_(pa.float32(), 384))]
    )
    table = db.create_table("m", schema=schema)
    table.add([{"id": "x", "agent_id": "a", "text": "hello", "vector": [0.1] * 384}])
    if fts:
        from lancedb.index import FTS, Bitmap

        table.create_index("agent_id", config=Bitmap())
        table.create_index("text", config=FTS(with_position=False))
    print(f"writes 0 rss {rss_mb():.0f} MB {_heap()}", flush=True)
    for i in range(writes):
        table.add([{"id": str(i), "agent_id": "a", "text": f"hello {i} things", "vector": [0.1] * 384}])
        if fts:
            table.search(f"hello {i}", query_type="fts").where("agent_id = 'a'").limit(5).to_list()
        if optimize and i % 200 == 199:
            table.optimize()
        if trim_every and (i + 1) % trim_every == 0:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        if renew_every and (i + 1) % renew_every == 0:
            db = connect()
            table = db.open_table("m")  # type: ignore[attr-defined]
        if (i + 1) % report_every == 0:
            gc.collect()
            print(f"writes {i + 1} rss {rss_mb():.0f} MB {_heap()}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench lance_writes")
    parser.add_argument("--writes", type=int, default=8000)
    parser.add_argument("--cache-mb", type=int, default=16, help="cap of each LanceDB cache in MiB; 0 = its defaults")
    parser.add_argument("--no-fts", dest="fts", action="store_false")
    parser.add_argument("--no-optimize", dest="optimize", action="store_false")
    parser.add_argument("--trim-every", type=int, default=0, help="malloc_trim(0) after every N writes (0: never)")
    parser.add_argument(
        "--arenas", type=int, default=0, help="cap glibc's malloc arenas (tiermem's malloc_arenas; 0: default)"
    )
    parser.add_argument(
        "--mmap-threshold-kb",
        type=int,
        default=0,
        help="fix glibc's mmap threshold (tiermem's malloc_mmap_threshold_kb; 0: glibc's dynamic one)",
    )
    parser.add_argument(
        "--renew-every", type=int, default=0, help="a new connection and session every N writes (0: never)"
    )
    parser.add_argument("--report-every", type=int, default=1000, help="print memory every N writes")
    args, _ = parser.parse_known_args(sys.argv[1:])
    run(
        args.writes,
        args.cache_mb,
        args.fts,
        args.optimize,
        args.trim_every,
        args.arenas,
        args.mmap_threshold_kb,
        args.renew_every,
        args.report_every,
    )
