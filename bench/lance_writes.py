"""Resident memory of LanceDB alone under one-row writes: what is LanceDB's and what is tiermem's (issue #13).

    python -m bench lance_writes [--writes 8000] [--cache-mb 16|0] [--no-fts] [--no-optimize] [--trim-every N]

One fresh process per run writes single rows (384-float vectors) to a table opened with
read_consistency_interval=0 (as tiermem's store is), runs a filtered full-text query after each write (with
--no-fts: none), compacts every 200 writes, and prints VmRSS every 1,000 writes. --cache-mb caps LanceDB's
metadata and index caches (0: LanceDB's defaults). Set MALLOC_ARENA_MAX=2 in the environment to compare
glibc arenas. BENCHMARKS.md "Under HTTP load" quotes its figures.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
from datetime import timedelta

from .common import rss_mb


def run(writes: int, cache_mb: int, fts: bool, optimize: bool, trim_every: int = 0) -> None:
    import ctypes

    import lancedb
    import pyarrow as pa

    kw: dict[str, object] = {"read_consistency_interval": timedelta(0)}
    if cache_mb:
        kw["session"] = lancedb.Session(index_cache_size_bytes=cache_mb << 20, metadata_cache_size_bytes=cache_mb << 20)
    db = lancedb.connect(tempfile.mkdtemp(prefix="lance-writes-"), **kw)
    schema = pa.schema([("id", pa.string()), ("agent_id", pa.string()), ("text", pa.string()),
                        ("vector", pa.list_(pa.float32(), 384))])
    table = db.create_table("m", schema=schema)
    table.add([{"id": "x", "agent_id": "a", "text": "hello", "vector": [0.1] * 384}])
    if fts:
        from lancedb.index import FTS, Bitmap

        table.create_index("agent_id", config=Bitmap())
        table.create_index("text", config=FTS(with_position=False))
    print(f"writes 0 rss {rss_mb():.0f} MB", flush=True)
    for i in range(writes):
        table.add([{"id": str(i), "agent_id": "a", "text": f"hello {i} things", "vector": [0.1] * 384}])
        if fts:
            table.search(f"hello {i}", query_type="fts").where("agent_id = 'a'").limit(5).to_list()
        if optimize and i % 200 == 199:
            table.optimize()
        if trim_every and (i + 1) % trim_every == 0:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        if (i + 1) % 1000 == 0:
            gc.collect()
            print(f"writes {i + 1} rss {rss_mb():.0f} MB", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench lance_writes")
    parser.add_argument("--writes", type=int, default=8000)
    parser.add_argument("--cache-mb", type=int, default=16, help="cap of each LanceDB cache in MiB; 0 = its defaults")
    parser.add_argument("--no-fts", dest="fts", action="store_false")
    parser.add_argument("--no-optimize", dest="optimize", action="store_false")
    parser.add_argument("--trim-every", type=int, default=0, help="malloc_trim(0) after every N writes (0: never)")
    args, _ = parser.parse_known_args(sys.argv[1:])
    run(args.writes, args.cache_mb, args.fts, args.optimize, args.trim_every)
