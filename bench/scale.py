"""Archival memory at scale: bulk insert throughput, search latency (in process and over stdio),
vector recall@10 against exact search, and the server's resident memory.

    python -m bench scale                    # 10k and 100k passages, real MiniLM embeddings
    python -m bench scale --sizes 10000      # one size
    python -m bench scale --million          # adds 1M passages with synthetic vectors (storage scale)
    python -m bench scale --probe DIR        # read-only: search a store whose indexes may still be building
    python -m bench scale --profile DIR      # where a search's time goes, leg by leg (--sweep: ANN settings;
                                             # --orders: two orderings of the legs)

Passages are generated from seeded templates (names, places, activities, dates), so every run
sees the same data. Insertion goes through the public Archive API; embedding time is measured
separately from storage time with a timing wrapper around the embedder.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import numpy as np
from mcp import Client, StdioServerParameters

from .common import RESULTS, ROOT, bench_env, rss_mb, save, server_pid, stats
from .corpus import passage, query_for


class TimedEmbedder:
    """Delegates to an embedder and adds up the time spent embedding."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seconds = 0.0
        self.name, self.dim, self.max_tokens = inner.name, inner.dim, inner.max_tokens

    def embed(self, texts: list[str]) -> list[list[float]]:
        t = time.perf_counter()
        out = self.inner.embed(texts)
        self.seconds += time.perf_counter() - t
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def over_stdio(data_dir: Path, queries: list[str]) -> dict[str, Any]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "tiermem", "serve", "--data-dir", str(data_dir)],
        env=bench_env(data_dir),
        cwd=str(ROOT),
    )
    async with Client(params, cache=None) as client:
        while True:  # wait until the model is loaded: we measure hybrid search, not the loading window
            r = await client.call_tool("archival_memory_search", {"query": "warm up"})
            if '"search_mode": "hybrid"' in r.content[0].text:
                break
            await anyio.sleep(0.2)
        lat = {"archival_memory_search": [], "conversation_search": []}
        for q in queries:
            for tool in lat:
                t = time.perf_counter()
                r = await client.call_tool(tool, {"query": q})
                lat[tool].append(time.perf_counter() - t)
                assert not r.is_error, r.content
        pid = server_pid(data_dir)
        return {**{k: stats(v) for k, v in lat.items()}, "server_rss_mb": round(rss_mb(pid), 1) if pid else None}


def run_size(n: int, synthetic: bool, rng: random.Random) -> dict[str, Any]:
    from tiermem.base.config import load_settings
    from tiermem.cli.main import open_memory
    from tiermem.domain.archive import Archive

    data_dir = Path(tempfile.mkdtemp(prefix=f"tiermem-scale-{n}-"))
    settings = load_settings(data_dir=data_dir, embedding_model="default", optimize_every=0)
    memory = open_memory(settings)
    memory.archive.embedder.wait(None)
    agent = memory.ensure_agent("default").id
    items = [passage(rng, i) for i in range(n)]
    out: dict[str, Any] = {
        "passages": n,
        "vectors": "synthetic (clustered, from real query space)" if synthetic else "MiniLM",
    }
    (data_dir / "bench-scale.json").write_text(json.dumps({"passages": n, "vectors": out["vectors"]}))
    started = time.perf_counter()
    if synthetic:
        out.update(_insert_synthetic(memory, agent, items, rng))
    else:
        timed = TimedEmbedder(memory.archive.embedder)
        archive = Archive(memory.archive.store, timed)  # type: ignore[arg-type]
        archive.insert_many(agent, items, batch=512)
        total = time.perf_counter() - started
        out["insert_total_s"] = round(total, 1)
        out["insert_embed_s"] = round(timed.seconds, 1)
        out["insert_storage_overhead"] = round((total - timed.seconds) / total, 3)
        out["insert_per_s"] = round(n / total, 1)
    # Messages too, so conversation_search is measured on a table of the same size (copied as Arrow, in
    # slices: at 1M rows Python lists of vectors would need ~12 GB).
    _progress(n, "inserted", out, data_dir)
    t = time.perf_counter()
    _copy_to_messages(memory, agent)
    out["messages_copy_s"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    memory.archive.store.indexes.optimize()
    out["optimize_index_s"] = round(time.perf_counter() - t, 1)
    _progress(n, "indexed", out, data_dir)
    out.update(measure(memory, agent, data_dir, [query_for(rng, items[rng.randrange(n)][0]) for _ in range(120)]))
    return out


def measure(memory: Any, agent: str, data_dir: Path, queries: list[str]) -> dict[str, Any]:
    """Search latency in process and over stdio, vector recall@10 and server RSS on a built store."""
    out: dict[str, Any] = {"indexes": memory.archive.store.indexes.index_health()["passages"]}
    rows = _vectors(memory)
    # In process: the library call, query embedding included.
    lat = []
    for q in queries:
        t = time.perf_counter()
        memory.archive.search(agent, q, top_k=5)
        lat.append(time.perf_counter() - t)
    out["in_process_search"] = stats(lat[10:])
    out["vector_recall_at_10"] = _recall(memory, agent, queries[:60], rows)
    out["stdio"] = anyio.run(over_stdio, data_dir, queries[:100])
    return out


def remeasure(data_dir: Path) -> dict[str, Any]:
    from tiermem.base.config import load_settings
    from tiermem.domain.factory import open_memory

    memory = open_memory(load_settings(data_dir=data_dir, embedding_model="default", optimize_every=0))
    memory.archive.embedder.wait(None)
    memory.archive.store.indexes.optimize()
    agent = memory.ensure_agent("default").id
    n = memory.archive.store.rows.count("passages")
    rng = random.Random(99)
    items = [passage(random.Random(i), i) for i in range(1000)]
    marker = data_dir / "bench-scale.json"
    vectors = json.loads(marker.read_text())["vectors"] if marker.exists() else "as stored by the run that built it"
    out = {"passages": n, "vectors": vectors, "remeasured": True}
    out.update(measure(memory, agent, data_dir, [query_for(rng, items[rng.randrange(1000)][0]) for _ in range(120)]))
    return out


def _progress(n: int, phase: str, out: dict[str, Any], data_dir: Path) -> None:
    """One line per phase, so a long run can be followed in its log."""
    print(f"   {time.strftime('%H:%M:%S')} {n} {phase} (load {os.getloadavg()[0]:.2f}, {data_dir}): {out}", flush=True)


def probe(data_dir: Path, table_name: str = "messages", n_queries: int = 60) -> dict[str, Any]:
    """Read-only look at a (large) store another process may still be indexing: per query, the exact numpy
    scan, LanceDB's vector search with tiermem's ANN settings (a flat scan while the table has no vector index)
    and its full-text search, each with recall@10 of the vector search against the exact scan. It opens the
    tables with lancedb directly (tiermem's own open could start building indexes); the query model comes from a
    throwaway store."""
    import lancedb

    from tiermem.base.config import load_settings
    from tiermem.domain.factory import open_memory
    from tiermem.store import RESULT_COLUMNS, VECTOR_EF, VECTOR_REFINE
    from tiermem.store.search import vector_nprobes

    scratch = Path(tempfile.mkdtemp(prefix="tiermem-probe-"))
    embedder = open_memory(
        load_settings(data_dir=scratch, embedding_model="default", optimize_every=0)
    ).archive.embedder
    embedder.wait(None)
    table = lancedb.connect(str(data_dir / "db")).open_table(table_name)
    indices = [i.index_type for i in table.list_indices()]
    t = time.perf_counter()
    arrow = table.to_arrow().select(["id", "vector"])
    ids = arrow.column("id").to_pylist()
    matrix = arrow.column("vector").combine_chunks().flatten().to_numpy().reshape(len(ids), -1).astype(np.float32)
    load_s = time.perf_counter() - t
    rng = random.Random(99)
    items = [passage(random.Random(i), i) for i in range(1000)]
    queries = [query_for(rng, items[rng.randrange(1000)][0]) for _ in range(n_queries + 5)]
    lat: dict[str, list[float]] = {"embed query": [], "exact numpy": [], "lancedb vector": [], "lancedb fts": []}
    found = 0
    cols = [*RESULT_COLUMNS[table_name], "_distance"]
    for q in queries:
        t = time.perf_counter()
        vec = np.asarray(embedder.embed([q])[0], dtype=np.float32)
        lat["embed query"].append(time.perf_counter() - t)
        t = time.perf_counter()
        exact = {ids[i] for i in np.argpartition(-(matrix @ vec), 10)[:10]}
        lat["exact numpy"].append(time.perf_counter() - t)
        t = time.perf_counter()
        got = (
            table.search(vec.tolist(), vector_column_name="vector")
            .distance_type("cosine")
            .select(cols)
            .nprobes(vector_nprobes(len(ids)))
            .ef(VECTOR_EF)
            .refine_factor(VECTOR_REFINE)
            .limit(10)
            .to_list()
        )
        lat["lancedb vector"].append(time.perf_counter() - t)
        found += len(exact & {r["id"] for r in got})
        if "FTS" in indices:
            t = time.perf_counter()
            table.search(q, query_type="fts", fts_columns="text").select(cols[:-1] + ["_score"]).limit(10).to_list()
            lat["lancedb fts"].append(time.perf_counter() - t)
    return {
        "table": table_name,
        "rows": len(ids),
        "indexes": indices,
        "vectors_load_s": round(load_s, 1),
        "vector_recall_at_10": round(found / (10 * len(queries)), 3),
        "load_avg": os.getloadavg(),
        "latency": {k: stats(v[5:]) for k, v in lat.items() if v},
    }


def _insert_synthetic(
    memory: Any, agent: str, items: list[tuple[str, list[str]]], rng: random.Random
) -> dict[str, Any]:
    """Real MiniLM vectors for a pool of passages, reused with noise: storage and index scale, not model scale."""
    pool = [t for t, _ in items[:2000]]
    base = np.asarray(memory.archive.embedder.embed(pool), dtype=np.float32)
    gen = np.random.default_rng(rng.randrange(1 << 30))
    started = time.perf_counter()
    for start in range(0, len(items), 20_000):
        chunk = items[start : start + 20_000]
        vecs = base[gen.integers(0, len(base), len(chunk))] + 0.15 * gen.normal(
            size=(len(chunk), base.shape[1])
        ).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        memory.archive.store.rows.add_rows(
            "passages",
            [
                {
                    "id": f"passage-{start + i}",
                    "agent_id": agent,
                    "group_id": f"passage-{start + i}",
                    "chunk": 0,
                    "content": text,
                    "tags": tags,
                    "text": text,
                    "created_us": 1_700_000_000_000_000 + start + i,
                    "vector": vecs[i].tolist(),
                }
                for i, (text, tags) in enumerate(chunk)
            ],
        )
    total = time.perf_counter() - started
    return {"insert_total_s": round(total, 1), "insert_per_s": round(len(items) / total, 1), "insert_embed_s": 0.0}


def _vectors(memory: Any) -> tuple[list[str], np.ndarray]:
    """(ids, unit vectors) of every passage, straight from Arrow (the bench may reach into the store)."""
    table = memory.archive.store.conn.tables["passages"].to_arrow().select(["id", "vector"])
    dim = memory.archive.store.conn.embedding_dim
    matrix = table.column("vector").combine_chunks().flatten().to_numpy().reshape(-1, dim).astype(np.float32)
    return table.column("id").to_pylist(), matrix


def _copy_to_messages(memory: Any, agent: str) -> None:
    import pyarrow as pa

    source = memory.archive.store.conn.tables["passages"].to_arrow()
    target = memory.archive.store.conn.tables["messages"]
    schema = target.schema
    for start in range(0, source.num_rows, 100_000):
        part = source.slice(start, 100_000)
        n = part.num_rows
        columns = {
            "id": pa.array([f"message-{i}" for i in part.column("id").to_pylist()]),
            "agent_id": pa.array([agent] * n),
            "conversation_id": pa.array(["bench"] * n),
            "seq": pa.array(range(start, start + n), pa.int64()),
            "role": pa.array(["user"] * n),
            "content": part.column("content"),
            "payload": pa.array([""] * n),
            "text": pa.array([f"user: {c}" for c in part.column("content").to_pylist()]),
            "created_us": part.column("created_us"),
            "vector": part.column("vector"),
            "project": pa.nulls(n, pa.string()),
            "plumbing": pa.array([False] * n),
        }
        target.add(pa.table([columns[f.name] for f in schema], schema=schema))


def _recall(memory: Any, agent: str, queries: list[str], rows: tuple[list[str], np.ndarray]) -> float:
    from tiermem.store import Filter

    ids, matrix = rows
    found = 0
    for q in queries:
        vec = memory.archive.embedder.embed([q])[0]
        exact = {ids[i] for i in np.argsort(-(matrix @ np.asarray(vec, dtype=np.float32)))[:10]}
        got = {r.id for r in memory.archive.store.search.vector_search("passages", vec, Filter(agent_id=agent), 10)}
        found += len(exact & got)
    return round(found / (10 * len(queries)), 3)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench scale")
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--million", action="store_true", help="also 1M passages with synthetic vectors")
    parser.add_argument("--measure", type=Path, help="re-measure search on a store an earlier run built (its data dir)")
    parser.add_argument("--probe", type=Path, help="read-only search probe of a store (its data dir); see probe()")
    parser.add_argument("--table", default="messages", help="with --probe: messages or passages")
    parser.add_argument(
        "--profile", type=Path, help="per-leg search breakdown on a built store (bench/search_profile.py)"
    )
    parser.add_argument("--sweep", action="store_true", help="with --profile: ANN settings vs recall@10 and latency")
    parser.add_argument(
        "--upkeep", action="store_true", help="with --profile: optimize after adding 1%% rows vs a rebuild"
    )
    parser.add_argument("--orders", action="store_true", help="with --profile: two orderings of a search's legs only")
    args, _ = parser.parse_known_args(sys.argv[2:])
    rng = random.Random(1234)
    results = {}
    if args.profile:
        from .search_profile import orders, profile, sweep, upkeep

        if args.orders:
            print(json.dumps({f"orders {args.profile.name}": orders(args.profile)}, indent=1), flush=True)
            return
        results[f"profile {args.profile.name}"] = profile(args.profile)
        if args.sweep:
            results[f"sweep {args.profile.name}"] = sweep(args.profile)
        if args.upkeep:
            results[f"upkeep {args.profile.name}"] = upkeep(args.profile)
        print(json.dumps(results, indent=1), flush=True)
        return
    if args.probe:
        results[f"probe {args.probe.name}"] = probe(args.probe, args.table)
        print(json.dumps(results, indent=1), flush=True)
        previous = json.loads(RESULTS.read_text()).get("scale", {}).get("result", {}) if RESULTS.exists() else {}
        save("scale", {**previous, **results})
        return
    if args.measure:
        results[f"{args.measure.name}"] = remeasure(args.measure)
        print(results, flush=True)
        args.sizes = ""
    for n in [int(x) for x in args.sizes.split(",") if x]:
        print(f"-- {n} passages", flush=True)
        results[str(n)] = run_size(n, False, rng)
        print(results[str(n)], flush=True)
    if args.million:
        print("-- 1000000 passages (synthetic vectors)", flush=True)
        results["1000000"] = run_size(1_000_000, True, rng)
        print(results["1000000"], flush=True)
    # Merge with the sizes an earlier run measured (a `--million`-only run must not drop the 10k/100k rows).
    previous = json.loads(RESULTS.read_text()).get("scale", {}).get("result", {}) if RESULTS.exists() else {}
    save("scale", {**previous, **results})
    print(
        f"{'passages':>9s} {'insert/s':>9s} {'storage%':>9s} {'index s':>8s} {'search p50':>11s} {'p95':>7s} "
        f"{'stdio arch p50':>15s} {'p95':>7s} {'stdio conv p50':>15s} {'p95':>7s} {'recall@10':>9s} {'RSS MB':>7s}"
    )
    for n, r in results.items():
        st = r["stdio"]
        print(
            f"{n:>9s} {r.get('insert_per_s', 0):9.0f} {100 * r.get('insert_storage_overhead', 0):8.1f}% {r.get('optimize_index_s', 0):8.1f} "
            f"{r['in_process_search']['p50_ms']:11.1f} {r['in_process_search']['p95_ms']:7.1f} "
            f"{st['archival_memory_search']['p50_ms']:15.1f} {st['archival_memory_search']['p95_ms']:7.1f} "
            f"{st['conversation_search']['p50_ms']:15.1f} {st['conversation_search']['p95_ms']:7.1f} "
            f"{r['vector_recall_at_10']:9.3f} {st['server_rss_mb']!s:>7s}"
        )


if __name__ == "__main__":
    main()
