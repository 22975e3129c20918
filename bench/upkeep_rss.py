"""Resident memory of object-storage upkeep rounds, by how the upkeep opens its tables.

    python -m bench upkeep_rss [--rounds 100] [--variants new,own,reused]

A moto S3 server on loopback (``bench.moto_counting``, its own process: the objects it keeps are not counted). Each
variant runs in a fresh process over its own prefix: ``--rounds`` rounds of one appended row and one background
optimize (every round has tables due), the process's RSS after each. Variants: ``new``, as shipped (each round opens
the tables on a connection of its own, ``Connection.upkeep_tables``, dropped with them); ``own``, no second
connection (the request path's tables compacted, as on a local directory); ``reused``, one second connection kept
for every round. Prints RSS at rounds 1, 10, 25, 50, 75 and the last, and the growth from round 25 on per round.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

SHOWN = (1, 10, 25, 50, 75)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_kb() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * 4096 // 1024


def child(endpoint: str, uri: str, variant: str, rounds: int) -> None:
    """One variant's rounds in this process (importing tiermem alone); prints its RSS per round as one JSON line."""
    import gc

    from tiermem.base.object_deadlines import for_bulk
    from tiermem.store import DEFAULT_INDEX_CACHE, DEFAULT_METADATA_CACHE, Store
    from tiermem.store.connection import OBJECT_STORE_STALENESS, connect

    opts = {"aws_endpoint": endpoint, "aws_access_key_id": "test", "aws_secret_access_key": "test"}
    opts |= {"region": "us-east-1", "allow_http": "true"}
    store = Store(uri, embedding_model="hashing-8", embedding_dim=8, storage_options=opts, optimize_every=0)
    if variant == "own":
        store.conn.upkeep_tables = lambda names: {n: store.conn.tables[n] for n in names}  # type: ignore[method-assign]
    elif variant == "reused":
        db, _ = connect(uri, for_bulk(uri, opts), DEFAULT_METADATA_CACHE, DEFAULT_INDEX_CACHE, OBJECT_STORE_STALENESS)
        store.conn.upkeep_tables = lambda names: {n: db.open_table(n) for n in names}  # type: ignore[method-assign]
    rss = []
    for i in range(rounds):
        row: dict[str, Any] = {"id": f"c{i}", "agent_id": "folder", "group_id": "file", "chunk": i}
        row |= {"content": f"text {i}", "text": f"text {i}", "tags": ["file"], "created_us": i, "vector": None}
        store.rows.add_rows("file_chunks", [row])
        store.indexes.optimize(background=True)
        gc.collect()
        rss.append(rss_kb())
    print(json.dumps({"variant": variant, "rss_kb": rss}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--variants", default="new,own,reused")
    args, _ = ap.parse_known_args()
    from .common import stop_processes
    from .objstore import BUCKET, start_moto

    with tempfile.TemporaryDirectory() as work:
        moto, endpoint = start_moto(Path(work), free_port())
        try:
            for variant in args.variants.split(","):
                out = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "bench.upkeep_rss",
                        "--child",
                        endpoint,
                        f"s3://{BUCKET}/rss-{variant}",
                        variant,
                    ]
                    + [str(args.rounds)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                rss = json.loads(out.stdout.strip().splitlines()[-1])["rss_kb"]
                shown = ", ".join(f"r{n} {rss[n - 1] / 1024:.1f}" for n in (*SHOWN, len(rss)) if n <= len(rss))
                tail = (rss[-1] - rss[24]) / max(1, len(rss) - 25) if len(rss) > 25 else 0.0
                print(f"{variant:7s} RSS MB: {shown}; from r25 on {tail:+.0f} KB/round", flush=True)
        finally:
            stop_processes([moto])


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        main()
