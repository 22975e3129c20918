"""Where an archival search's time goes, leg by leg, on a store ``python -m bench scale`` built.

    python -m bench scale --profile DATA_DIR                 # per-leg breakdown, 100 queries
    python -m bench scale --profile DATA_DIR --sweep         # also: ANN settings vs recall@10 and latency

Every part of ``Archive.search`` is timed on its own, for the same queries, the parts taking turns
per query (so a burst of load on the shared machine hits them all alike):

- ``embed query``: the MiniLM query embedding (one text);
- ``vector leg``: ``Store.vector_search`` as a search runs it, the pool a top-5 search asks for (without the agent
  filter when the agent owns every row: ``store/search.py``), and ``vector leg, filtered``: the same with the filter;
- ``keyword leg`` / ``keyword leg, filtered``: ``Store.text_search`` (BM25 over the full-text index), likewise;
- ``rank``: merging the two legs' rows and the linear ranker over the pool;
- ``unembedded check``: the meta read that says whether rows without vectors exist (on its own);
- ``both legs and marks, one hand-off``: ``Store.search_legs``, what a search runs after embedding the query: the
  two legs and the marks read together on LanceDB's loop (older trees lack it);
- ``search, end to end``: ``Archive.search(top_k=5)``, everything above (the query embedding, then
  both legs together; older trees: the keyword leg beside the query embedding and the vector leg), run after the parts
  of the same query (their caches warm);
- ``search, end to end, new queries``: ``Archive.search(top_k=5)`` alone, after all the above, on as many other
  questions, none searched before in the process (the figure to hold against the target).

The questions are distinct.

``--orders`` times two orderings of the same search, per query taking turns, from the store's public parts: the
oldest (the keyword leg started first, the query embedded, the marks read, the vector leg: three hand-offs to
LanceDB's loop) and this tree's (the query embedded first, then both legs and the marks in one hand-off); the rows are
checked equal. (The middle ordering of the history's figures, two hand-offs, needed the store's private parts.)

``--sweep`` measures the vector leg alone for several (nprobes, ef, refine factor) settings, with
recall@10 against exact search (LanceDB's flat scan under the same agent filter).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from .common import stats
from .corpus import questions

# (nprobes, ef, refine factor; 0 = no refine step)
SWEEP = [(24, 128, 2), (32, 128, 2), (48, 128, 2), (64, 128, 2), (48, 128, 0), (96, 128, 0)]


def open_store(data_dir: Path) -> tuple[Any, str]:
    from tiermem.base.config import load_settings
    from tiermem.domain.factory import open_memory

    memory = open_memory(load_settings(data_dir=data_dir, embedding_model="default", optimize_every=0))
    memory.archive.embedder.wait(None)
    return memory, memory.ensure_agent("default").id


def profile(data_dir: Path, n_queries: int = 100, top_k: int = 5, warm: int = 10) -> dict[str, Any]:
    from tiermem.domain.search.query import analyse
    from tiermem.domain.search.ranking import merge
    from tiermem.store.query import Filter

    memory, agent = open_store(data_dir)
    archive = memory.archive
    store = archive.store
    where = Filter(agent_id=agent)
    pool = max(top_k * 4, 40)
    queries = questions(2 * n_queries + warm)
    queries, fresh = queries[: n_queries + warm], queries[n_queries + warm :]
    parts: dict[str, list[float]] = {
        k: []
        for k in (
            "embed query",
            "vector leg",
            "vector leg, filtered",
            "keyword leg",
            "keyword leg, filtered",
            "rank",
            "unembedded check",
            "both legs and marks, one hand-off",
            "search, end to end",
            "search, end to end, new queries",
        )
    }
    together = getattr(store.search, "search_legs", None)
    toggles = hasattr(store.search, "sole_agent_shortcut")  # older trees always filter
    shortcut = getattr(store.search, "sole_agent_shortcut", None)

    def timed(fn: Any, *args: Any, filtered: bool = False) -> tuple[Any, float]:
        if toggles and filtered:
            store.search.sole_agent_shortcut = False
        t = time.perf_counter()
        out = fn(*args)
        elapsed = time.perf_counter() - t
        if toggles:
            store.search.sole_agent_shortcut = shortcut
        return out, elapsed

    for n, q in enumerate(queries):
        vec, embed_s = timed(lambda text: archive.embedder.embed([text])[0], q)
        # A query's second run finds its partitions and rows in the caches: the two ways take turns going first.
        if n % 2:
            _, vector_f = timed(store.search.vector_search, "passages", vec, where, pool, filtered=True)
            vrows, vector_s = timed(store.search.vector_search, "passages", vec, where, pool)
            _, keyword_f = timed(store.search.text_search, "passages", q, where, pool, filtered=True)
            frows, keyword_s = timed(store.search.text_search, "passages", q, where, pool)
        else:
            vrows, vector_s = timed(store.search.vector_search, "passages", vec, where, pool)
            _, vector_f = timed(store.search.vector_search, "passages", vec, where, pool, filtered=True)
            frows, keyword_s = timed(store.search.text_search, "passages", q, where, pool)
            _, keyword_f = timed(store.search.text_search, "passages", q, where, pool, filtered=True)
        _, rank_s = timed(lambda: archive.kinds["passages"].ranker.rank(analyse(q), merge(vrows, frows))[:top_k])
        _, marks_s = timed(store.rows.unembedded_marks, "passages")
        both_s = timed(together, "passages", q, vec, where, pool)[1] if together else None
        _, e2e_s = timed(lambda: archive.search(agent, q, top_k=top_k))
        if n >= warm:
            values = (embed_s, vector_s, vector_f, keyword_s, keyword_f, rank_s, marks_s, both_s, e2e_s)
            for key, value in zip(parts, values):
                if value is not None:
                    parts[key].append(value)
    for q in fresh:
        parts["search, end to end, new queries"].append(timed(lambda: archive.search(agent, q, top_k=top_k))[1])
    return {
        "rows": store.rows.count("passages"),
        "queries": n_queries,
        "top_k": top_k,
        "pool": pool,
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "parts": {k: stats(v) for k, v in parts.items() if v},
    }


def orders(data_dir: Path, n_queries: int = 330, top_k: int = 5) -> dict[str, Any]:
    """The orderings of ``--orders`` (module docstring), each query searched once, the orderings in turn."""
    from tiermem.domain.search.query import analyse, without_names
    from tiermem.domain.search.ranking import merge
    from tiermem.store.query import Filter

    memory, agent = open_store(data_dir)
    archive, store, t = memory.archive, memory.archive.store, "passages"
    where, pool = Filter(agent_id=agent), max(top_k * 4, 40)
    queries = questions(n_queries + 20)
    for q in queries[:10]:
        archive.search(agent, q, top_k=top_k)  # the agent's speakers known: every search takes the usual path

    def embed(q: str) -> list[float]:
        return archive.embedder.embed([without_names(q, archive.speakers(agent))])[0]

    def ranked(q: str, vector_rows: list[Any], text_rows: list[Any]) -> list[str]:
        return [
            c.id for c, _ in archive.kinds["passages"].ranker.rank(analyse(q), merge(vector_rows, text_rows))[:top_k]
        ]

    def three_hand_offs(q: str) -> list[str]:
        text = store.search.start_text_search(t, q, where, pool)
        vec = embed(q)
        store.rows.unembedded_marks(t)
        return ranked(q, store.search.vector_search(t, vec, where, pool), text.result())

    def one_hand_off(q: str) -> list[str]:
        vector_rows, text_rows, _ = store.search.search_legs(t, q, embed(q), where, pool)
        return ranked(q, vector_rows, text_rows)

    ways = {
        "keyword leg first, 3 hand-offs": three_hand_offs,
        "query embedded first, 1 hand-off": one_hand_off,
    }
    for q in queries[10:20]:
        assert len({tuple(way(q)) for way in ways.values()}) == 1, q  # the same results every way
    times: dict[str, list[float]] = {k: [] for k in ways}
    for n, q in enumerate(queries[20:]):
        name = list(ways)[n % len(ways)]
        start = time.perf_counter()
        ways[name](q)
        times[name].append(time.perf_counter() - start)
    return {
        "rows": store.rows.count("passages"),
        "queries": n_queries,
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "orders": {k: stats(v) for k, v in times.items()},
    }


def sweep(
    data_dir: Path, n_queries: int = 60, k: int = 10, settings: list[tuple[int, int, int]] | None = None
) -> dict[str, Any]:
    """Vector leg latency and recall@10 against LanceDB's exact (flat) search, per ANN setting."""
    from tiermem.store.query import Filter, compile_filter

    memory, agent = open_store(data_dir)
    table = memory.archive.store.conn.tables["passages"]  # the bench reaches into the store to vary the knobs
    where = compile_filter(Filter(agent_id=agent))
    vectors = [memory.archive.embedder.embed([q])[0] for q in questions(n_queries)]

    def query(vec: list[float]) -> Any:
        return (
            table.search(vec, vector_column_name="vector")
            .distance_type("cosine")
            .where(where, prefilter=True)
            .select(["id", "_distance"])
            .limit(k)
        )

    exact = [{r["id"] for r in query(v).bypass_vector_index().to_list()} for v in vectors]
    out: dict[str, Any] = {
        "rows": memory.archive.store.rows.count("passages"),
        "queries": n_queries,
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "settings": {},
    }
    chosen = settings or SWEEP
    lat: dict[tuple[int, int, int], list[float]] = {c: [] for c in chosen}
    found = dict.fromkeys(chosen, 0)
    for n, (v, truth) in enumerate(zip(vectors, exact)):
        for c in chosen:  # the settings take turns per query: load on the machine hits them alike
            nprobes, ef, refine = c
            q = query(v).nprobes(nprobes).ef(ef)
            t = time.perf_counter()
            got = (q.refine_factor(refine) if refine else q).to_list()
            if n >= 5:
                lat[c].append(time.perf_counter() - t)
            found[c] += len(truth & {r["id"] for r in got})
    for c in chosen:
        out["settings"][f"nprobes={c[0]} ef={c[1]} refine={c[2]}"] = {
            "recall_at_10": round(found[c] / (k * len(vectors)), 3),
            **stats(lat[c]),
        }
    return out


def upkeep(data_dir: Path, share: float = 0.01) -> dict[str, Any]:
    """On a copy of a built store: add ``share`` of its passage count as new rows (stored vectors plus noise),
    then time the incremental ``optimize`` that appends them to the vector index, against a full rebuild of
    that index (what upkeep would cost if it retrained)."""
    import shutil
    import tempfile

    import numpy as np
    from lancedb.index import IvfSq

    from tiermem.store.indexes import vector_partitions

    copy = Path(tempfile.mkdtemp(prefix="tiermem-upkeep-")) / "data"
    shutil.copytree(data_dir, copy)
    try:
        memory, agent = open_store(copy)
        store = memory.archive.store
        n = store.rows.count("passages")
        added = max(1, int(n * share))
        sample = store.conn.tables["passages"].search().select(["content", "tags", "vector"]).limit(added).to_arrow()
        vecs = sample.column("vector").combine_chunks().flatten().to_numpy().reshape(added, -1).astype(np.float32)
        vecs += 0.05 * np.random.default_rng(7).normal(size=vecs.shape).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        contents, tags = sample.column("content").to_pylist(), sample.column("tags").to_pylist()
        store.rows.add_rows(
            "passages",
            [
                {
                    "id": f"upkeep-{i}",
                    "agent_id": agent,
                    "group_id": f"upkeep-{i}",
                    "chunk": 0,
                    "content": contents[i],
                    "tags": tags[i],
                    "text": contents[i],
                    "created_us": 1_800_000_000_000_000 + i,
                    "vector": vecs[i].tolist(),
                }
                for i in range(added)
            ],
        )
        t = time.perf_counter()
        report = store.indexes.optimize()
        incremental = time.perf_counter() - t
        health = store.indexes.index_health()["passages"]
        t = time.perf_counter()
        store.conn.tables["passages"].create_index(
            "vector", config=IvfSq(distance_type="cosine", num_partitions=vector_partitions(n + added)), replace=True
        )
        rebuild = time.perf_counter() - t
        return {
            "rows_before": n,
            "rows_added": added,
            "optimize_incremental_s": round(incremental, 1),
            "optimize_report": report,
            "after_optimize": health,
            "vector_index_full_rebuild_s": round(rebuild, 1),
            "load_avg": [round(x, 2) for x in os.getloadavg()],
        }
    finally:
        shutil.rmtree(copy.parent, ignore_errors=True)
