"""Does a use prior help search? The LoCoMo dev split's questions replayed in order, with and without one.

    python -m bench uses                  # the dev split, turns stored named (recall memory)
    python -m bench uses --format role    # turns stored by role, the names in core memory
    python -m bench uses --format facts   # the observations stored as archival facts (as `bench locomo --archival`)
    python -m bench uses --quick          # first two conversations

Each conversation is stored as in ``bench locomo`` (or ``--archival``; one agent each, the store optimized once), then
its questions of categories 1-4 are asked **in the order of the file**. For each, the pool a search of 5 ranks is
read (``Archive.candidates``) and ranked by the shipped ranker: its top 5 is what the search shows (checked against
``conversation_search`` / ``archival_memory_search``: ``replay_baseline_is_the_search``). Replaying the questions in
order, each question's top 5 counts as one use of each of those memories (as ``Memory`` counts a hit), and a memory's
heat is its uses decayed with a half-life counted in questions (``tiermem.core.uses.decayed``, the product's decay).
The prior re-ranks the pool by ``z + weight * (1 - 2 ** -heat)``, ``z`` the ranker's score standardised over the pool
(a bounded bonus: one use adds about half of ``weight`` standard deviations; weight 0 is the search's own order), and
the replay counts the uses of the top 5 it returned, so the prior feeds on its own choices, as it would in use.

Reported: R@5 without the prior (the baseline), with the prior whose (weight, half-life) was chosen on the other
four conversations (leave-one-conversation-out: the figure that decides), the best in-sample pair, and an upper
bound: the prior fed the *evidence* of earlier questions instead of their hits (a model that used exactly the right
memories), to show whether the signal could help at all. R@5: the fraction of a question's evidence turns held by the
top 5, macro over questions.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from .common import save
from .locomo import DATA, evidence_ids, ingest
from .locomo_fit import CATEGORIES

TOP = 5  # hits a search shows, and counts as used
WEIGHTS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)  # in standard deviations of the candidates' scores
HALF_LIVES = (10.0, 50.0, 250.0)  # in questions asked of that conversation's memory


def asked(memory: Any, convs: list[tuple[str, str, list[dict[str, Any]], dict[str, list[str]]]], table: str) -> Any:
    """Per conversation, its questions in file order: the gold dia ids, the pool the shipped search of 5 ranks (each
    candidate: its id, the dia ids it holds, its score standardised over the pool, in the ranker's order), and what
    ``conversation_search`` / ``archival_memory_search`` showed (to check the replay's baseline is the search)."""
    out: dict[str, list[dict[str, Any]]] = {}
    archive = memory.archive
    ranker = archive.kinds[table].ranker
    for conv, agent, qas, dias in convs:
        rows = []
        known = {d for ids in dias.values() for d in ids}
        for qa in qas:
            if qa.get("category") not in CATEGORIES:
                continue
            gold = evidence_ids(qa.get("evidence", []), known)
            if not gold:
                continue
            pool = archive.candidates(table, agent, qa["question"], limit=TOP)
            ranked = ranker.rank(pool.query, pool.candidates, pool.context)
            if table == "messages":
                shown = archive.conversation_search(agent, qa["question"], limit=TOP)
            else:
                shown = archive.search(agent, qa["question"], top_k=TOP)
            scores = [score for _, score in ranked]
            mid, spread = statistics.fmean(scores), statistics.pstdev(scores) or 1.0
            rows.append(
                {
                    "category": qa["category"],
                    "gold": gold,
                    "hits": [(c.id, tuple(dias.get(c.id, ())), (score - mid) / spread) for c, score in ranked],
                    "shown": [h.id for h in shown.hits],
                }
            )
        out[conv] = rows
    return out


def recall_at(top: list[tuple[str, tuple[str, ...], float]], gold: list[str]) -> float:
    return len(set(gold) & {d for _, ids, _ in top for d in ids}) / len(set(gold))


def replay(questions: list[dict[str, Any]], weight: float, half_life: float, *, oracle: bool = False) -> list[float]:
    """R@5 of each question, asked in order with the prior (weight, half-life in questions)."""
    from tiermem.core.uses import decayed

    heat: dict[str, tuple[float, int]] = {}  # memory id -> (heat, question index of its last use)
    scores = []
    for n, q in enumerate(questions):

        def prior(memory_id: str, n: int = n) -> float:
            h, last = heat.get(memory_id, (0.0, n))
            return 1 - 2 ** -decayed(h, last, n, half_life)

        ranked = sorted(q["hits"], key=lambda hit: -(hit[2] + weight * prior(hit[0])))  # stable: ties keep order
        top = ranked[:TOP]
        scores.append(recall_at(top, q["gold"]))
        used = [i for i, ids, _ in q["hits"] if set(ids) & set(q["gold"])] if oracle else [i for i, _, _ in top]
        for memory_id in used:
            h, last = heat.get(memory_id, (0.0, n))
            heat[memory_id] = (decayed(h, last, n, half_life) + 1.0, n)
    return scores


def evaluate(by_conv: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    grid = [(w, h) for w in WEIGHTS for h in HALF_LIVES]
    per: dict[tuple[float, float], dict[str, list[float]]] = {
        p: {c: replay(qs, *p) for c, qs in by_conv.items()} for p in grid
    }
    oracle = {
        p: {c: replay(qs, *p, oracle=True) for c, qs in by_conv.items()} for p in grid if p[0] > 0
    }  # evidence fed back
    base = per[(0.0, HALF_LIVES[0])]
    convs = list(by_conv)

    def mean_of(scores: dict[str, list[float]], which: list[str]) -> float:
        pooled = [s for c in which for s in scores[c]]
        return statistics.fmean(pooled) if pooled else 0.0

    held: dict[str, list[float]] = {}
    chosen: dict[str, tuple[float, float]] = {}
    for c in convs:
        others = [o for o in convs if o != c]
        best = max(grid, key=lambda p: (round(mean_of(per[p], others), 6), -p[0]))  # ties: the smaller weight
        chosen[c] = best
        held[c] = per[best][c]
    in_sample = max(grid, key=lambda p: (round(mean_of(per[p], convs), 6), -p[0]))
    best_oracle = max(oracle, key=lambda p: mean_of(oracle[p], convs))

    def by_category(scores: dict[str, list[float]]) -> dict[str, float]:
        cats: dict[str, list[float]] = defaultdict(list)
        for c in convs:
            for q, s in zip(by_conv[c], scores[c], strict=True):
                cats[CATEGORIES[q["category"]]].append(s)
        return {k: round(statistics.fmean(v), 4) for k, v in sorted(cats.items())}

    same = [q["shown"] == [i for i, _, _ in q["hits"][:TOP]] for qs in by_conv.values() for q in qs]
    pairs = [(h, b) for c in convs for h, b in zip(held[c], base[c], strict=True)]
    return {
        "questions": sum(len(q) for q in by_conv.values()),
        # held out against the baseline, question by question: how many the prior helped and hurt (a sign test's n)
        "loo_better_worse": [sum(h > b for h, b in pairs), sum(h < b for h, b in pairs)],
        "replay_baseline_is_the_search": round(sum(same) / len(same), 4),  # 1.0: weight 0 is what a search shows
        "baseline_r5": round(mean_of(base, convs), 4),
        "loo_r5": round(mean_of(held, convs), 4),
        "loo_chosen": {c: {"weight": w, "half_life_questions": h} for c, (w, h) in chosen.items()},
        "in_sample_best": {"weight": in_sample[0], "half_life_questions": in_sample[1]},
        "in_sample_r5": round(mean_of(per[in_sample], convs), 4),
        "oracle_best": {"weight": best_oracle[0], "half_life_questions": best_oracle[1]},
        "oracle_r5": round(mean_of(oracle[best_oracle], convs), 4),
        "baseline_by_category": by_category(base),
        "loo_by_category": by_category(held),
        "grid": {f"w={w} h={h}": round(mean_of(per[(w, h)], convs), 4) for w, h in grid},
    }


def run(quick: bool = False, fmt: str = "named") -> dict[str, Any]:
    """``fmt``: named | role (turns, recall memory) or facts (the observations in archival memory, as ``bench locomo
    --archival`` stores them)."""
    from tiermem.base.config import load_settings
    from tiermem.domain.factory import open_memory

    from . import locomo_facts

    samples = json.loads(DATA.read_text())[: 2 if quick else None]
    memory = open_memory(
        load_settings(data_dir=Path(tempfile.mkdtemp(prefix="tiermem-uses-")), embedding_model="default")
    )
    memory.archive.embedder.wait(None)
    started = time.perf_counter()
    convs = []
    if fmt == "facts":
        for sample in samples:
            agent, sources, _texts = locomo_facts.ingest(memory, sample)
            convs.append((sample["sample_id"], agent, sample["qa"], sources))
        table = "passages"
    else:
        for sample, agent, dia_of in ingest(memory, samples, fmt):
            convs.append((sample["sample_id"], agent, sample["qa"], {m: [d] for m, d in dia_of.items()}))
        table = "messages"
    memory.archive.store.indexes.optimize()
    by_conv = asked(memory, convs, table)
    result = evaluate(by_conv)
    result.update(format=fmt, top=TOP, seconds=round(time.perf_counter() - started, 1))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench uses")
    parser.add_argument("uses", nargs="?")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--format", choices=("named", "role", "facts"), default="named")
    args = parser.parse_args()
    result = run(args.quick, args.format)
    print(json.dumps(result, indent=2))
    save(f"uses_{args.format}", result)


if __name__ == "__main__":
    main()
