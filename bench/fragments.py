"""What small fragments cost a search, and what an optimize costs as a table grows: the two figures the
search-paced upkeep weighs (``store/connection.py``, ``Connection.searched``).

    python -m bench fragments [--tail 180] [--sizes 2000,20000,100000] [--rounds 3]

Raw LanceDB in a temp dir (no tiermem code in the timed parts), rows shaped like the messages table's search
columns (an agent id with a bitmap index, a text column with the full-text index tiermem builds, 384-d random
vectors; an IVF-SQ index on the larger tables):

- legs: p50 of a vector leg and a full-text leg (limit 40, prefiltered on the agent, as tiermem's legs run) over a
  2,000-row table after TAIL one-row commits, against the same rows appended in one commit, and after an optimize;
  the difference per fragment, quiet, is what ``FRAGMENT_LEG_MS`` stands for (it is taken at the scale of a loaded
  server, 4× this: ``store/connection.py``);
- optimize: for each size, ROUNDS rounds of 20 one-row commits, each followed by an optimize (its wall time).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import timedelta
from typing import Any

WORDS = "alpha beta gamma delta hello world memory search river mountain dog cat music paint travel".split()


def main() -> None:
    import lancedb
    import numpy as np
    from lancedb.index import FTS, Bitmap, IvfSq

    parser = argparse.ArgumentParser(prog="python -m bench fragments")
    parser.add_argument("fragments", nargs="?")
    parser.add_argument("--tail", type=int, default=180, help="one-row commits after the base rows (180)")
    parser.add_argument("--sizes", default="2000,20000,100000", help="table sizes for the optimize timing")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    db = lancedb.connect(tempfile.mkdtemp(prefix="tiermem-fragments-"))

    def rows(n: int, start: int) -> list[dict[str, Any]]:
        return [
            {
                "id": str(start + i),
                "agent_id": "a",
                "text": " ".join(rng.choice(WORDS, 12)) + f" {start + i}",
                "vector": rng.standard_normal(384).astype("float32").tolist(),
            }
            for i in range(n)
        ]

    def table(name: str, n: int, vector_index: bool) -> Any:
        t = db.create_table(name, rows(n, 0))
        t.create_index("text", config=FTS(with_position=False))
        t.create_index("agent_id", config=Bitmap())
        if vector_index:
            t.create_index("vector", config=IvfSq(distance_type="cosine", num_partitions=max(1, int(n**0.5) // 2)))
        return t

    def legs(t: Any, k: int = 30) -> tuple[float, float]:
        vec, text = [], []
        for _ in range(k):
            q = rng.standard_normal(384).astype("float32")
            started = time.perf_counter()
            t.search(q).where("agent_id = 'a'", prefilter=True).limit(40).to_arrow()
            vec.append(time.perf_counter() - started)
            started = time.perf_counter()
            t.search("hello river", query_type="fts").where("agent_id = 'a'", prefilter=True).limit(40).to_arrow()
            text.append(time.perf_counter() - started)
        return statistics.median(vec) * 1000, statistics.median(text) * 1000

    many, one = table("many", 2000, False), table("one", 2000, False)
    for i in range(args.tail):
        many.add(rows(1, 10**6 + i))
    one.add(rows(args.tail, 10**6))
    split, whole = legs(many), legs(one)
    print(
        f"legs over 2,000 rows + {args.tail} one-row fragments: vector {split[0]:.2f} ms, full text {split[1]:.2f} ms"
    )
    print(f"the same rows in one fragment:                  vector {whole[0]:.2f} ms, full text {whole[1]:.2f} ms")
    per = [(s - w) / args.tail for s, w in zip(split, whole, strict=True)]
    print(f"per fragment and leg: vector {per[0]:.3f} ms, full text {per[1]:.3f} ms")
    many.optimize(cleanup_older_than=timedelta(0))
    folded = legs(many)
    print(f"after an optimize:                              vector {folded[0]:.2f} ms, full text {folded[1]:.2f} ms")

    for size in (int(s) for s in args.sizes.split(",") if s):
        t = table(f"t{size}", size, size >= 1000)
        took = []
        for r in range(args.rounds):
            for i in range(20):
                t.add(rows(1, 10**7 + r * 100 + i))
            started = time.perf_counter()
            t.optimize(cleanup_older_than=timedelta(0))
            took.append(time.perf_counter() - started)
        print(f"optimize after 20 one-row commits at {size:,} rows: " + ", ".join(f"{x:.3f} s" for x in took))


if __name__ == "__main__":
    main()
