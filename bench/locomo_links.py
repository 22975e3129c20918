"""Links at a token budget: evidence recall of what one search returns within BUDGET tokens, with and without links.

    python -m bench locomo --links                  # turns (both formats) and facts, the dev split
    python -m bench locomo --links --quick          # the first two conversations
    python -m bench locomo --links --budget 500     # another budget
    python -m bench locomo --links --latency 10000  # only: conversation_search p50 with and without links, 10k turns

Turns are logged as ``python -m bench locomo`` logs them (``bench.locomo.ingest``, both storage formats); facts are
inserted as ``python -m bench locomo --archival`` inserts them (``bench.locomo_facts.ingest``). Every question of
categories 1-4 is searched once with the search's token budget set to BUDGET (``search_token_budget``) and a limit
of 100, so the budget, not the limit, decides what is returned: the figure is the fraction of the question's evidence
turns among the results (for facts: with a fact among them), macro over questions.

- **shipped, no links**: ``conversation_search`` / ``search`` with ``links=False``: the best hits that fit.
- **shipped, links**: ``links=True``: each hit followed by what it links to (a turn's sitting neighbours,
  ``Archive.link_reach`` each side; links made on purpose: none here), within the same budget (``domain.links``).
- **5 hits + their links**: ``limit=5, links=True`` (beside R@5: what the links add to five hits, in more tokens).
- **candidate kinds** (computed here over the stored rows, to decide what to build; nothing of them ships): the
  same hits followed by, for the first LEAD hits only or for every hit (lead "all"): ``sitting±k`` (k turns each
  side in the sitting; for facts: facts with the same stated date, in insert order), ``next`` (the next turn),
  ``similar>t`` (the 3 nearest by cosine of the stored vectors, those above t), ``names`` (up to 3 memories naming
  the same capitalised word that at most 8 memories name, the speakers' own names left out).

No parameter is fitted, so there is nothing to hold out: every figure is over every conversation's questions (the
choice among the candidate kinds is made on these figures: in-sample; read the margins with that in mind).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from .common import save
from .locomo_fit import CATEGORIES

BUDGET = 1500
LEADS: tuple[int | None, ...] = (None, 5)
KINDS = ("sitting±1", "sitting±2", "next", "similar>0.6", "similar>0.7", "names")
_CAP = re.compile(r"\b[A-Z][a-z]{2,}\b")
_COMMON = set(
    "The This That What When Where Who Why How And But Yes Wow Thanks Thank Hey Hi Oh Sure Also Just Really Great "
    "Good Nice".split()
)


def link_table(rows: list[dict[str, Any]], speakers: set[str], group: Callable[[dict[str, Any]], str]) -> dict:
    """Every row's candidate links by kind; ``rows`` in log order, ``group`` names the sitting a row belongs to."""
    import numpy as np

    ids = [r["id"] for r in rows]
    vec = np.array([r["vector"] for r in rows], dtype=np.float32)
    vec /= np.linalg.norm(vec, axis=1, keepdims=True) + 1e-9
    sims = vec @ vec.T
    np.fill_diagonal(sims, -1)
    sitting = [group(r) for r in rows]
    names = [{w for w in _CAP.findall(r["content"]) if w not in _COMMON and w not in speakers} for r in rows]
    naming: dict[str, list[int]] = defaultdict(list)
    for i, ns in enumerate(names):
        for w in ns:
            naming[w].append(i)
    out: dict[str, dict[str, list[str]]] = {}
    for i in range(len(rows)):

        def same(j: int, i: int = i) -> bool:
            return 0 <= j < len(rows) and sitting[j] == sitting[i]

        kinds: dict[str, list[str]] = {}
        for k in (1, 2):
            kinds[f"sitting±{k}"] = [ids[i + d] for s in range(1, k + 1) for d in (-s, s) if same(i + d)]
        kinds["next"] = [ids[i + 1]] if same(i + 1) else []
        nearest = np.argsort(-sims[i])[:3]
        for t in (0.6, 0.7):
            kinds[f"similar>{t}"] = [ids[j] for j in nearest if sims[i, j] >= t]
        by_name = [
            ids[j] for w in sorted(names[i], key=lambda w: len(naming[w])) if len(naming[w]) <= 8 for j in naming[w]
        ]
        kinds["names"] = [x for x in dict.fromkeys(by_name) if x != ids[i]][:3]
        out[ids[i]] = kinds
    return out


def budgeted(
    hits: list[str], content: dict[str, str], links: dict, kind: str, lead: int | None, budget: int
) -> list[str]:
    """The hits in order, the first ``lead`` (None: all) each followed by its ``kind`` links, within ``budget``
    tokens counted as the search counts them (``domain.links.expand``: content + 8 each)."""
    from tiermem.domain.links import OVERHEAD
    from tiermem.domain.tokens import count_tokens

    chosen: list[str] = []
    used = 0
    for n, h in enumerate(hits):
        for x in [h] + (links[h][kind] if lead is None or n < lead else []):
            if x in chosen:
                continue
            cost = count_tokens(content[x]) + OVERHEAD
            if used + cost > budget:
                if x == h:
                    return chosen
                continue
            chosen.append(x)
            used += cost
    return chosen


def _open(budget: int) -> Any:
    from tiermem.base.config import load_settings
    from tiermem.domain.factory import open_memory

    data_dir = Path(tempfile.mkdtemp(prefix="tiermem-links-"))
    memory = open_memory(load_settings(data_dir=data_dir, embedding_model="default", search_token_budget=budget))
    memory.archive.embedder.wait(None)
    return memory


def _table(per: dict[str, dict[int, list[float]]]) -> dict[str, dict[str, float]]:
    return {
        name: {**{CATEGORIES[c]: round(sum(v) / len(v), 3) for c, v in sorted(cats.items())}, "n": len(cats[1])}
        for name, cats in per.items()
    }


def _store_rows(memory: Any, table: str, agent: str) -> list[dict[str, Any]]:
    from tiermem.store import Filter

    return memory.archive.store.conn.rows(table, Filter(agent_id=agent))


def turns(memory: Any, samples: list[dict[str, Any]], fmt: str, budget: int) -> dict[str, Any]:
    from .locomo import ingest

    archive = memory.archive
    convs = ingest(memory, samples, fmt)
    archive.store.indexes.optimize()
    per: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for sample, agent, dia_of in convs:
        rows = sorted(_store_rows(memory, "messages", agent), key=lambda r: (r["created_us"], r["seq"]))
        starts: dict[str, int] = {}
        last: dict[str, Any] = {}
        for r in rows:  # sittings as search.sittings cuts them: a gap of over an hour opens a new one
            prev = last.get(r["conversation_id"])
            if prev is None or r["created_us"] - prev["created_us"] > 3_600_000_000:
                starts[r["id"]] = r["seq"]
            else:
                starts[r["id"]] = starts[prev["id"]]
            last[r["conversation_id"]] = r
        conv = sample["conversation"]
        links = link_table(
            rows, {conv["speaker_a"], conv["speaker_b"]}, lambda r: f"{r['conversation_id']}/{starts[r['id']]}"
        )
        content = {r["id"]: r["content"] for r in rows}
        score_sample(
            per,
            sample,
            {i: (d,) for i, d in dia_of.items()},
            lambda q, n, on: [h.id for h in archive.conversation_search(agent, q, limit=n, links=on).hits],
            (content, links, budget),
        )
    return _table(per)


def asked(sample: dict[str, Any], known: set[str]) -> Iterator[tuple[int, set[str], str]]:
    """The sample's questions of the scored categories whose evidence is stored: (category, evidence ids, question)."""
    from .locomo import evidence_ids

    for qa in sample["qa"]:
        category = qa.get("category")
        gold = set(evidence_ids(qa.get("evidence", []), known))
        if category in CATEGORIES and gold:
            yield category, gold, qa["question"]


def score_sample(
    per: dict[str, dict[int, list[float]]],
    sample: dict[str, Any],
    sources: Mapping[str, Iterable[str]],
    ask: Callable[[str, int, bool], list[str]],
    budgeting: tuple[dict[str, str], Any, int],
) -> None:
    """``score`` every question of the sample whose evidence is stored: ``sources`` maps a stored memory's id to the
    dia ids it came from, ``ask(question, limit, links)`` is the search's hit ids."""
    known = {d for dias in sources.values() for d in dias}
    for category, gold, question in asked(sample, known):

        def recall(ids: list[str], gold: set[str] = gold) -> float:
            return len(gold & {d for i in ids for d in sources[i]}) / len(gold)

        score(per, category, recall, functools.partial(ask, question), budgeting)


def score(
    per: dict[str, dict[int, list[float]]],
    category: int,
    recall: Callable[[list[str]], float],
    ids_of: Callable[[int, bool], list[str]],
    budgeting: tuple[dict[str, str], Any, int],
) -> None:
    """One question's evidence recall in every row: the shipped search (``ids_of(limit, links)``) with and without
    links, R@5, five hits with their links, and each link kind and lead within the token budget."""
    content, links, budget = budgeting
    hits = ids_of(100, False)
    per["shipped, no links"][category].append(recall(hits))
    per["shipped, links"][category].append(recall(ids_of(100, True)))
    per["R@5 (no budget)"][category].append(recall(hits[:5]))
    per["5 hits + their links"][category].append(recall(ids_of(5, True)))
    for kind in KINDS:
        for lead in LEADS:
            name = f"{kind}, lead {lead or 'all'}"
            per[name][category].append(recall(budgeted(hits, content, links, kind, lead, budget)))


def facts(memory: Any, samples: list[dict[str, Any]], budget: int) -> dict[str, Any]:
    from .locomo_facts import ingest

    archive = memory.archive
    per: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for sample in samples:
        agent, sources, _ = ingest(memory, sample)
        archive.store.indexes.optimize()
        rows = sorted(_store_rows(memory, "passages", agent), key=lambda r: (r["created_us"], r["id"]))
        conv = sample["conversation"]
        links = link_table(rows, {conv["speaker_a"], conv["speaker_b"]}, lambda r: r["content"].split(":", 1)[0])
        content = {r["id"]: r["content"] for r in rows}
        score_sample(
            per,
            sample,
            sources,
            lambda q, n, on: [h.id for h in archive.search(agent, q, top_k=n, links=on).hits],
            (content, links, budget),
        )
    return _table(per)


def latency(target: int) -> dict[str, Any]:
    """conversation_search p50/p95 (limit 10, the default budget) over one agent holding ``target`` turns, with and
    without links, interleaved; and the time to log them (links add no write: sitting links are derived)."""
    from .locomo import DATA, log_copies

    samples = json.loads(DATA.read_text())
    memory = _open(4000)
    agent = memory.ensure_agent("latency").id
    started = time.perf_counter()
    logged = log_copies(memory, agent, samples, target)
    log_s = time.perf_counter() - started
    memory.archive.store.indexes.optimize()
    memory.archive.warm_sittings(agent)
    questions = [qa["question"] for s in samples for qa in s["qa"] if qa.get("category") in CATEGORIES]
    took: dict[str, list[float]] = {"no links": [], "links": []}
    for q in questions:
        for name, on in (("no links", False), ("links", True)):
            t = time.perf_counter()
            memory.archive.conversation_search(agent, q, limit=10, links=on)
            took[name].append(1000 * (time.perf_counter() - t))
    out: dict[str, Any] = {"turns": logged, "log_seconds": round(log_s, 1), "searches": len(questions)}
    for name, v in took.items():
        v.sort()
        out[name] = {"p50_ms": round(v[len(v) // 2], 2), "p95_ms": round(v[int(len(v) * 0.95)], 2)}
    out["load"] = round(os.getloadavg()[0], 1)
    return out


def main() -> None:
    from .locomo import DATA, FORMATS

    parser = argparse.ArgumentParser(prog="python -m bench locomo --links")
    parser.add_argument("--links", action="store_true")
    parser.add_argument("--quick", action="store_true", help="first two conversations only")
    parser.add_argument("--budget", type=int, default=BUDGET, help="the search's token budget")
    parser.add_argument("--latency", type=int, metavar="TURNS", help="only: search latency with and without links")
    args, _ = parser.parse_known_args(sys.argv[1:])
    if args.latency:
        lat = latency(args.latency)
        save("locomo_links_latency", lat)
        print(json.dumps(lat))
        return
    samples = json.loads(DATA.read_text())[: 2 if args.quick else None]
    memory = _open(args.budget)
    started = time.perf_counter()
    result: dict[str, Any] = {"budget": args.budget}
    for fmt in FORMATS:
        result[f"turns {fmt}"] = turns(memory, samples, fmt, args.budget)
    result["facts"] = facts(memory, samples, args.budget)
    result["seconds"] = round(time.perf_counter() - started, 1)
    save(f"locomo_links_{args.budget}", result)
    print(f"LoCoMo dev split, evidence recall of what one search returns within {args.budget} tokens:")
    for part, rows in result.items():
        if isinstance(rows, dict):
            for name, row in rows.items():
                print(f"  [{part}] {name:26s} " + "  ".join(f"{k} {v}" for k, v in row.items()))
