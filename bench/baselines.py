"""Plain baselines on the same data, so tiermem's hybrid search is a measured ratio, not a claim.

    python -m bench baselines                         # LoCoMo dev split: quality and latency
    python -m bench baselines --store DIR             # also latency at scale, on a store `bench scale` built

On LoCoMo (the same turns, questions and metrics as `bench locomo`) three rankers are compared with
tiermem's `conversation_search` in the same run:

- exact cosine: numpy dot product over the same MiniLM int8 vectors (normalised), full scan;
- BM25 over each turn's content: Okapi BM25 (k1 = 1.2, b = 0.75), lower-cased word tokens, written here
  (independent of LanceDB's full-text index);
- BM25 over tiermem's keyword text (session date + the previous turn + the turn), to separate the gain of
  that text from the gain of fusing it with vectors.

Latency is per query: query embedding (for cosine) plus ranking, in this process. With `--store DIR`
the same baselines run over the passages of a 100k (or larger) store: exact cosine, BM25, and
tiermem's own `archival_memory_search` on the same rows.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from .common import save, stats

WORD = re.compile(r"\w+")


def tokens(text: str) -> list[str]:
    return WORD.findall(text.lower())


class BM25:
    """Okapi BM25 with an inverted index of numpy arrays (document ids, term frequencies)."""

    def __init__(self, docs: list[str], k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        lengths = np.zeros(len(docs), dtype=np.float32)
        for i, doc in enumerate(docs):
            counts = Counter(tokens(doc))
            lengths[i] = sum(counts.values())
            for term, tf in counts.items():
                postings[term].append((i, tf))
        self.n = len(docs)
        self.avgdl = float(lengths.mean()) if len(docs) else 1.0
        self.norm = k1 * (1 - b + b * lengths / self.avgdl)
        self.index = {
            t: (np.array([d for d, _ in p], dtype=np.int64), np.array([f for _, f in p], dtype=np.float32))
            for t, p in postings.items()
        }

    def top(self, query: str, k: int) -> list[int]:
        scores = np.zeros(self.n, dtype=np.float32)
        for term in set(tokens(query)):
            hit = self.index.get(term)
            if hit is None:
                continue
            docs, tf = hit
            idf = math.log(1 + (self.n - len(docs) + 0.5) / (len(docs) + 0.5))
            scores[docs] += idf * tf * (self.k1 + 1) / (tf + self.norm[docs])
        if k >= self.n:
            order = np.argsort(-scores)
        else:
            part = np.argpartition(-scores, k)[:k]
            order = part[np.argsort(-scores[part])]
        return [int(i) for i in order[:k] if scores[i] > 0]


def cosine_top(matrix: np.ndarray, vec: np.ndarray, k: int) -> list[int]:
    scores = matrix @ vec
    if k >= len(scores):
        return [int(i) for i in np.argsort(-scores)]
    part = np.argpartition(-scores, k)[:k]
    return [int(i) for i in part[np.argsort(-scores[part])]]


def locomo(quick: bool) -> dict[str, Any]:
    from tiermem.domain.archive import shape_message

    from . import locomo as lm

    tiermem_result = lm.run(quick, ("named",))  # tiermem itself, same data, same run
    import json

    from tiermem.embedding.embedders import make_embedder

    samples = json.loads(lm.DATA.read_text())[: 2 if quick else None]
    embedder = make_embedder("default", Path("/tmp/tiermem-baselines-models"))
    embedder.wait(None)
    names = ("exact cosine (numpy)", "BM25 (content)", "BM25 (tiermem keyword text)")
    per: dict[str, dict[int, list[tuple[float, float, float]]]] = {n: defaultdict(list) for n in names}
    latency: dict[str, list[float]] = {n: [] for n in names}
    for sample in samples:
        msgs = lm.messages(sample)
        contents = [m["content"] for m in msgs]
        dia = [str(m["payload"]) for m in msgs]
        from datetime import datetime

        shaped = [
            shape_message(m["content"], datetime.fromisoformat(m["timestamp"]), msgs[i - 1]["content"] if i else "")
            for i, m in enumerate(msgs)
        ]
        matrix = np.asarray(embedder.embed(contents), dtype=np.float32)
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        plain, rich = BM25(contents), BM25(shaped)
        known = set(dia)
        for qa in sample["qa"]:
            category = qa.get("category")
            if category not in lm.CATEGORIES:
                continue
            gold = lm.evidence_ids(qa.get("evidence", []), known)
            if not gold:
                continue
            q = qa["question"]
            t = time.perf_counter()
            vec = np.asarray(embedder.embed([q])[0], dtype=np.float32)
            ranked = cosine_top(matrix, vec / np.linalg.norm(vec), 10)
            latency[names[0]].append(time.perf_counter() - t)
            per[names[0]][category].append(lm.score([dia[i] for i in ranked], gold))
            for name, index in ((names[1], plain), (names[2], rich)):
                t = time.perf_counter()
                ranked = index.top(q, 10)
                latency[name].append(time.perf_counter() - t)
                per[name][category].append(lm.score([dia[i] for i in ranked], gold))
    out: dict[str, Any] = {
        "tiermem": tiermem_result["named"][lm.SHIPPED]["overall (1-4)"],
        "tiermem_search_p50_ms": tiermem_result["search_p50_ms"]["named"],
    }
    for name in names:
        rows = lm.table(per[name])
        out[name] = {"quality": rows, "latency": stats(latency[name])}
    return out


def at_scale(store_dir: Path, n_queries: int = 100) -> dict[str, Any]:
    import random

    from tiermem.base.config import load_settings
    from tiermem.domain.factory import open_memory

    from .corpus import passage, query_for
    from .scale import _vectors

    memory = open_memory(load_settings(data_dir=store_dir, embedding_model="default", optimize_every=0))
    memory.archive.embedder.wait(None)
    agent = memory.ensure_agent("default").id
    ids, matrix = _vectors(memory)
    table = memory.archive.store.conn.tables["passages"].to_arrow().select(["content"])
    contents = table.column("content").to_pylist()
    started = time.perf_counter()
    bm25 = BM25(contents)
    build_s = time.perf_counter() - started
    rng = random.Random(7)
    items = [passage(random.Random(i), i) for i in range(1000)]
    queries = [query_for(rng, items[rng.randrange(1000)][0]) for _ in range(n_queries)]
    lat: dict[str, list[float]] = {"exact cosine (numpy)": [], "BM25": [], "tiermem archival_memory_search": []}
    for q in queries:
        t = time.perf_counter()
        vec = np.asarray(memory.archive.embedder.embed([q])[0], dtype=np.float32)
        cosine_top(matrix, vec, 10)
        lat["exact cosine (numpy)"].append(time.perf_counter() - t)
        t = time.perf_counter()
        bm25.top(q, 10)
        lat["BM25"].append(time.perf_counter() - t)
        t = time.perf_counter()
        memory.archive.search(agent, q, top_k=10)
        lat["tiermem archival_memory_search"].append(time.perf_counter() - t)
    return {
        "passages": len(ids),
        "bm25_build_s": round(build_s, 1),
        "latency": {k: stats(v[5:]) for k, v in lat.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench baselines")
    parser.add_argument("--quick", action="store_true", help="LoCoMo: first two conversations only")
    parser.add_argument("--store", type=Path, help="data dir of a store built by `bench scale` (latency at scale)")
    args, _ = parser.parse_known_args(sys.argv[1:])
    import os

    result: dict[str, Any] = {"loadavg_start": os.getloadavg()}
    result["locomo"] = locomo(args.quick)
    if args.store:
        result["scale"] = at_scale(args.store)
    result["loadavg_end"] = os.getloadavg()
    save("baselines", result)
    lo = result["locomo"]
    ours = lo["tiermem"]
    print(f"LoCoMo dev split, categories 1-4 (load {result['loadavg_start'][0]:.2f} -> {result['loadavg_end'][0]:.2f})")
    print(f"  {'ranker':32s} {'R@5':>6s} {'R@10':>6s} {'MRR':>6s}  {'p50 ms':>7s} {'p95 ms':>7s}   tiermem R@5 / this")
    print(
        f"  {'tiermem conversation_search':32s} {ours['R@5']:6.3f} {ours['R@10']:6.3f} {ours['MRR']:6.3f}  "
        f"{lo['tiermem_search_p50_ms']:7.2f} {'':>7s}"
    )
    for name, r in lo.items():
        if not isinstance(r, dict) or "quality" not in r:
            continue
        q, lat = r["quality"]["overall (1-4)"], r["latency"]
        print(
            f"  {name:32s} {q['R@5']:6.3f} {q['R@10']:6.3f} {q['MRR']:6.3f}  {lat['p50_ms']:7.2f} {lat['p95_ms']:7.2f}   "
            f"{ours['R@5'] / q['R@5']:.2f}x"
        )
    if "scale" in result:
        sc = result["scale"]
        print(f"latency at {sc['passages']} passages (per query, ms; BM25 index build {sc['bm25_build_s']} s)")
        for name, lat in sc["latency"].items():
            print(f"  {name:32s} p50 {lat['p50_ms']:8.2f}  p95 {lat['p95_ms']:8.2f}")


if __name__ == "__main__":
    main()
