"""LoCoMo facts benchmark for archival memory: the dev split's observations stored as a model stores facts.

    python -m bench locomo --archival                   # every dev conversation, leave-one-conversation-out
    python -m bench locomo --archival --quick           # the first two conversations
    python -m bench locomo --archival --convs 1 --questions 5   # a slice (one conversation: no leave-one-out)
    python -m bench locomo --archival --token-match     # also word-by-word matching (``bench.locomo_tokens``)

Each LoCoMo observation (one fact about a speaker, with the dia id of the turn it came from) is stored with
``archival_memory_insert``'s path (``Memory.archival_insert``, one call per fact, no tags) as a model writes a fact
it has learnt: prefixed with its session's date, "On 8 May 2023: Caroline attended an LGBTQ support group ...". One
agent per conversation; the store is optimized once so the full-text index covers every row. Each question of
categories 1-4 is then searched once with ``archival_memory_search``'s path (``Memory.archival_search``, top_k 10).
A hit is a fact whose source turn is evidence of the question: R@5 / R@10 are the fraction of the question's
evidence turns with a fact among the top k, MRR the reciprocal rank of the first such fact. Evidence turns that no
observation came from are dropped (the facts benchmark measures finding facts, not writing them), and questions
left without evidence are skipped and counted.

Beside the shipped passage ranker (the profile ``search.kinds.PASSAGES``): the turn ranker, equal-weight reciprocal
rank fusion, each leg alone, BM25 over the facts (``baselines.BM25``, Okapi k1 1.2, b 0.75), and a ranker fitted
listwise on the other conversations' questions (leave-one-conversation-out, as ``bench.locomo_fit`` fits the turn
ranker: the figure that counts for a fitted ranker), with the weights fitted on every conversation printed (the
weights to ship). The relevance calibration of the shipped ranker's scores is judged the same way (fitted on the other
conversations, scored on the held-out one: precision of "relevance >= t" of the top 10, with the hits of the same
question asked of another conversation's facts as the negatives), beside the shipped passage calibration and the turn
calibration; the calibration fitted on every conversation is printed (the one to ship). Its l2 and a shift of its bias
are chosen on the conversations it is fitted on, never the held-out one (``Calibrator.choose``: by leave-one-out over
them, the most evidence kept at auto_recall_threshold with precision >= CALIBRATION_AIM), so the held-out figure is
that of the whole procedure.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from . import locomo_tokens
from .common import save
from .locomo_fit import CATEGORIES, fit_calibration, fit_listwise, table

SHIPPED, LOO, IN_SAMPLE = "shipped passage ranker", "leave-one-conv-out fit", "fitted on all (in-sample)"
TURNS, RRF, KEYWORD, VECTOR, BM25_NAME = (
    "turn ranker",
    "equal-weight RRF",
    "keyword leg only",
    "vector leg only",
    "BM25 (facts)",
)
THRESHOLDS = (0.075, 0.1, 0.15, 0.2, 0.3, 0.5)  # 0.075: auto_recall_threshold
CALIBRATION_AIM = 0.9  # the precision of "relevance >= auto_recall_threshold" the calibration's choice keeps
CALIBRATION_L2 = (1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 1e-1)  # the calibration fit's l2 (1e-3: ``fit_calibration``'s)
CALIBRATION_SHIFTS = tuple(-i / 20 for i in range(21))  # added to its bias (the logit): 0 to -1


def fact_text(when: datetime, fact: str) -> str:
    """A fact as a model writes it: its session's date first ("On 8 May 2023: ...")."""
    return f"On {when.day} {when:%B %Y}: {fact.strip()}"


def observations(sample: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """The conversation's facts as stored: (text, source dia ids), session by session."""
    from .locomo import sessions

    dates = {n + 1: when for n, (when, _) in enumerate(sessions(sample["conversation"]))}
    out = []
    for key, by_speaker in sample.get("observation", {}).items():
        m = re.fullmatch(r"session_(\d+)_observation", key)
        if not m or not isinstance(by_speaker, dict):
            continue
        when = dates[int(m.group(1))]
        for facts in by_speaker.values():
            for fact, source in facts:
                ids = [
                    p for s in ([source] if isinstance(source, str) else source) for p in re.split(r"[;\s]+", s) if p
                ]
                out.append((fact_text(when, fact), ids))
    return out


def ingest(memory: Any, sample: dict[str, Any]) -> tuple[str, dict[str, list[str]], list[str]]:
    """The conversation's facts stored in its own agent: (agent id, passage id -> source dia ids, texts in order)."""
    from .locomo import name_blocks

    agent = memory.ensure_agent(f"{sample['sample_id']}-facts").id
    name_blocks(memory, agent, sample)  # the people the facts are about, as the agent's blocks name them
    sources: dict[str, list[str]] = {}
    texts = []
    for text, ids in observations(sample):
        for passage in memory.archival_insert(agent, text, None).stored:
            sources[passage] = ids
        texts.append(text)
    return agent, sources, texts


def score(ranking: list[list[str]], gold: list[str]) -> tuple[float, float, float]:
    """R@5, R@10 (evidence turns with a fact in the top k, over the question's evidence) and MRR."""
    gold_set = set(gold)

    def found(k: int) -> float:
        return len(gold_set & {d for ids in ranking[:k] for d in ids}) / len(gold_set)

    mrr = next((1 / (i + 1) for i, ids in enumerate(ranking[:10]) if gold_set & set(ids)), 0.0)
    return found(5), found(10), mrr


def collect(memory: Any, convs: list[dict[str, Any]], questions: int | None) -> tuple[list[dict[str, Any]], int]:
    """One ``archival_search`` per question (checked against the shipped ranker over its candidates); the pool, its
    features and the same question's pool in the next conversation's memory (the calibration's negatives)."""
    from tiermem.domain.search.ranking import features

    from .baselines import BM25
    from .locomo import evidence_ids

    archive = memory.archive
    ranker = archive.kinds["passages"].ranker
    out: list[dict[str, Any]] = []
    skipped = 0
    for n, conv in enumerate(convs):
        other = convs[(n + 1) % len(convs)]
        bm25 = BM25(conv["texts"])
        known = {d for ids in conv["sources"].values() for d in ids}
        asked = 0
        for qa in conv["sample"]["qa"]:
            category = qa.get("category")
            if category not in CATEGORIES:
                continue
            if questions is not None and asked >= questions:
                break
            gold = evidence_ids(qa.get("evidence", []), known)
            if not gold:
                skipped += 1
                continue
            asked += 1
            query = qa["question"]
            result = memory.archival_search(
                conv["agent"],
                query,
                tags=None,
                tag_match_mode="any",
                top_k=10,
                start_datetime=None,
                end_datetime=None,
            )
            if result.mode != "hybrid":
                raise RuntimeError(f"search ran in {result.mode!r} mode: {result.notes}")
            pool = archive.candidates("passages", conv["agent"], query, limit=10)
            shipped = [c.id for c, _ in ranker.rank(pool.query, pool.candidates, pool.context)][:10]
            if shipped != [h.id for h in result.hits]:
                raise RuntimeError("archival_search and the shipped passage ranker over its candidates disagree")
            cross = archive.candidates("passages", other["agent"], query, limit=10) if other is not conv else None
            out.append(
                {
                    "conv": conv["sample"]["sample_id"],
                    "category": category,
                    "gold": gold,
                    "query": query,
                    "pool": pool,
                    "dia": [conv["sources"][c.id] for c in pool.candidates],
                    "features": features(pool.query, pool.candidates, pool.context),
                    "shipped": [conv["sources"][h.id] for h in result.hits],
                    "bm25": [conv["sources_in_order"][i] for i in bm25.top(query, 10)],
                    "cross": None
                    if cross is None
                    else {"pool": cross, "features": features(cross.query, cross.candidates, cross.context)},
                }
            )
    return out, skipped


def labelled(qs: list[dict[str, Any]]) -> list[tuple[list[list[float]], list[bool]]]:
    return [(q["features"], [bool(set(d) & set(q["gold"])) for d in q["dia"]]) for q in qs]


def ranked(q: dict[str, Any], weights: tuple[float, ...], *, cross: bool = False) -> list[tuple[int, float]]:
    """(candidate index, score) best first, ``weights``' order over the question's own (or cross) pool."""
    part = q["cross"] if cross else q
    pool, feats = part["pool"], part["features"]
    scores = [sum(w * x for w, x in zip(weights, row)) for row in feats]
    return sorted(((i, s) for i, s in enumerate(scores)), key=lambda t: (-t[1], pool.candidates[t[0]].id))


def order(q: dict[str, Any], weights: tuple[float, ...]) -> list[list[str]]:
    return [q["dia"][i] for i, _ in ranked(q, weights)]


def calibration_rows(qs: list[dict[str, Any]], ranker: Any) -> tuple[list[list[float]], list[bool], list[bool]]:
    """The top 10 of each question's own pool and of its cross pool: (calibration features, is evidence, is cross)."""
    from tiermem.domain.search.ranking import calibration_features

    x: list[list[float]] = []
    y: list[bool] = []
    crossed: list[bool] = []
    for q in qs:
        for cross in (False, True):
            if cross and q["cross"] is None:
                continue
            part = q["cross"] if cross else q
            pool = part["pool"]
            top = ranked(q, ranker.weights, cross=cross)[:10]
            rows = calibration_features(
                pool.query, pool.candidates, [(pool.candidates[i], s) for i, s in top], pool.context
            )
            for (i, _), row in zip(top, rows):
                x.append(row)
                y.append(not cross and bool(set(q["dia"][i]) & set(q["gold"])))
                crossed.append(cross)
    return x, y, crossed


Rows = tuple[list[list[float]], list[bool], list[bool]]  # ``calibration_rows``' answer


def precision(qs: list[dict[str, Any]], ranker: Any, calibration: Any) -> dict[str, dict[str, float]]:
    """Per threshold t: precision of "relevance >= t" with the other conversation's hits as the negatives, and how
    many of the held-out questions' top-10 evidence facts reach it."""
    return precision_of(calibration_rows(qs, ranker), calibration)


def precision_of(
    rows: Rows, calibration: Any, thresholds: tuple[float, ...] = THRESHOLDS
) -> dict[str, dict[str, float]]:
    """``precision`` over calibration rows already drawn."""
    x, y, crossed = rows
    probs = [
        1.0
        / (
            1.0
            + math.exp(-max(-50.0, min(50.0, sum(w * v for w, v in zip(calibration.weights, row)) + calibration.bias)))
        )
        for row in x
    ]
    out = {}
    for t in thresholds:
        tp = sum(1 for p, e in zip(probs, y) if p >= t and e)
        cross = sum(1 for p, c in zip(probs, crossed) if p >= t and c)
        out[f"{t:.2f}"] = {"precision": round(tp / max(1, tp + cross), 3), "evidence_kept": tp, "cross_kept": cross}
    return out


def pooled(held: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """``precision`` figures of several conversations summed: per threshold, the precision of the pooled counts."""
    out = {}
    for t in held[0] if held else ():
        tp = sum(h[t]["evidence_kept"] for h in held)
        cross = sum(h[t]["cross_kept"] for h in held)
        out[t] = {"precision": round(tp / max(1, tp + cross), 3), "evidence_kept": tp, "cross_kept": cross}
    return out


class Calibrator:
    """Fits the calibration of one ranker's scores on some conversations' calibration rows (``calibration_rows``, per
    conversation), each (conversations, l2) fitted once."""

    def __init__(self, rows: dict[str, Rows]) -> None:
        self.rows = rows
        self.fits: dict[tuple[frozenset[str], float], tuple[tuple[float, ...], float]] = {}

    def fit(self, convs: frozenset[str], l2: float, shift: float = 0.0) -> Any:
        from tiermem.domain.search.ranking import Calibration

        key = (convs, l2)
        if key not in self.fits:
            x = [row for c in sorted(convs) for row in self.rows[c][0]]
            y = [e for c in sorted(convs) for e in self.rows[c][1]]
            self.fits[key] = fit_calibration(x, y, l2=l2)
        weights, bias = self.fits[key]
        return Calibration(weights, round(bias + shift, 4))

    def choose(self, convs: frozenset[str]) -> tuple[Any, dict[str, Any]]:
        """The calibration fitted on ``convs`` with the l2 and bias shift chosen on them alone: leave one of them out
        at a time (fitted on the rest, judged on it, pooled), the setting keeping the most evidence at
        auto_recall_threshold (THRESHOLDS[0]) whose precision there is >= CALIBRATION_AIM (if none is, the most
        precise). Fewer than two conversations: l2 1e-3, no shift (nothing to leave out)."""
        t = f"{THRESHOLDS[0]:.2f}"
        best: tuple[tuple[Any, ...], float, float, dict[str, float]] | None = None
        if len(convs) > 1:
            for l2 in CALIBRATION_L2:
                fitted = {c: self.fit(convs - {c}, l2) for c in convs}
                for shift in CALIBRATION_SHIFTS:
                    inner = pooled(
                        [
                            precision_of(
                                self.rows[c], replace(fitted[c], bias=fitted[c].bias + shift), (THRESHOLDS[0],)
                            )
                            for c in sorted(convs)
                        ]
                    )[t]
                    kept = inner["evidence_kept"]
                    met = kept >= CALIBRATION_AIM * (kept + inner["cross_kept"]) and kept > 0
                    rank = (met, kept if met else inner["precision"], -l2, shift)
                    if best is None or rank > best[0]:
                        best = (rank, l2, shift, inner)
        l2, shift, inner = (best[1], best[2], best[3]) if best else (1e-3, 0.0, {})
        return self.fit(convs, l2, shift), {"l2": l2, "shift": shift, "inner_leave_one_out": inner}


def figures(qs: list[dict[str, Any]]) -> dict[str, Any]:
    """R@k per category for every ranker; leave-one-conversation-out for the fitted one (two conversations or more)."""
    from tiermem.domain.search.kinds import PASSAGES
    from tiermem.domain.search.ranking import (
        DEFAULT_CALIBRATION,
        DEFAULT_RANKER,
        UNDATED_PASSAGE_CALIBRATION,
        Ranker,
    )

    fixed = {
        SHIPPED: PASSAGES.ranker,
        TURNS: DEFAULT_RANKER,
        RRF: Ranker.legs(0.5, 0.5),
        KEYWORD: Ranker.legs(0.0, 1.0),
        VECTOR: Ranker.legs(1.0, 0.0),
    }
    per: dict[str, dict[int, list[tuple[float, float, float]]]] = defaultdict(lambda: defaultdict(list))
    for q in qs:
        per[SHIPPED][q["category"]].append(score(q["shipped"], q["gold"]))
        per[BM25_NAME][q["category"]].append(score(q["bm25"], q["gold"]))
        for name, ranker in fixed.items():
            if name != SHIPPED:
                per[name][q["category"]].append(score(order(q, ranker.weights), q["gold"]))
    result: dict[str, Any] = {}
    convs = sorted({q["conv"] for q in qs})
    with_cross = [q for q in qs if q["cross"] is not None]
    if len(convs) > 1:
        weights: dict[str, Any] = {}
        held: list[dict[str, dict[str, float]]] = []
        plain: list[dict[str, dict[str, float]]] = []
        # the calibration of the shipped ranker's scores: rows per conversation, fitted on the other conversations
        calibrator = Calibrator(
            {c: calibration_rows([q for q in with_cross if q["conv"] == c], PASSAGES.ranker) for c in convs}
        )
        everyone = frozenset(c for c in convs if calibrator.rows[c][0])
        for conv in convs:
            train = [q for q in qs if q["conv"] != conv]
            ranker = Ranker(fit_listwise(labelled(train)))
            calibration, chosen = calibrator.choose(everyone - {conv})
            weights[conv] = {
                "ranker": list(ranker.weights),
                "calibration": [*calibration.weights, calibration.bias],
                "calibration_choice": chosen,
            }
            for q in qs:
                if q["conv"] == conv:
                    per[LOO][q["category"]].append(score(order(q, ranker.weights), q["gold"]))
            if conv in everyone:
                held.append(precision_of(calibrator.rows[conv], calibration))
                plain.append(precision_of(calibrator.rows[conv], calibrator.fit(everyone - {conv}, 1e-3)))
        fitted = Ranker(fit_listwise(labelled(qs)))
        calibration, chosen = calibrator.choose(everyone)
        # facts that state no date are ranked by the turn ranker (``PASSAGE_RANKER.undated``): its scores' calibration
        # (``UNDATED_PASSAGE_CALIBRATION``), the plain fit (l2 1e-3), judged leave-one-conversation-out the same way
        undated = Calibrator(
            {c: calibration_rows([q for q in with_cross if q["conv"] == c], DEFAULT_RANKER) for c in convs}
        )
        undated_fit = undated.fit(everyone, 1e-3)
        result.update(
            {
                "fitted_on_all_weights": list(fitted.weights),
                "fitted_on_all_calibration": [*calibration.weights, calibration.bias],
                "fitted_on_all_calibration_choice": chosen,
                "leave_one_out_weights": weights,
                "undated_calibration_fitted_on_all": [*undated_fit.weights, undated_fit.bias],
                "relevance": {
                    "calibration fitted leave-one-out": pooled(held),
                    "l2 1e-3 unshifted, leave-one-out": pooled(plain),
                    "shipped passage calibration": precision(with_cross, PASSAGES.ranker, PASSAGES.calibration),
                    "turn calibration": precision(with_cross, PASSAGES.ranker, DEFAULT_CALIBRATION),
                    "undated (turn ranker): fitted leave-one-out": pooled(
                        [precision_of(undated.rows[c], undated.fit(everyone - {c}, 1e-3)) for c in sorted(everyone)]
                    ),
                    "undated (turn ranker): shipped calibration": precision(
                        with_cross, DEFAULT_RANKER, UNDATED_PASSAGE_CALIBRATION
                    ),
                },
            }
        )
        for q in qs:
            per[IN_SAMPLE][q["category"]].append(score(order(q, fitted.weights), q["gold"]))
    result["recall"] = {name: table(cats) for name, cats in per.items()}
    return result


def run(
    quick: bool = False, convs: int | None = None, questions: int | None = None, with_tokens: bool = False
) -> dict[str, Any]:
    from tiermem.base.config import load_settings
    from tiermem.domain.factory import open_memory
    from tiermem.domain.search.kinds import PASSAGES
    from tiermem.domain.search.ranking import FEATURES

    from .locomo import DATA

    samples = json.loads(DATA.read_text())[: convs or (2 if quick else None)]
    data_dir = Path(tempfile.mkdtemp(prefix="tiermem-locomo-facts-"))
    memory = open_memory(load_settings(data_dir=data_dir, embedding_model="default"))
    memory.archive.embedder.wait(None)
    started = time.perf_counter()
    stored = []
    for sample in samples:
        agent, sources, texts = ingest(memory, sample)
        in_order = list(sources.values())  # one passage per fact (facts are short: none is chunked)
        if len(in_order) != len(texts):
            raise RuntimeError("a fact was stored as several chunks")
        stored.append(
            {"sample": sample, "agent": agent, "sources": sources, "texts": texts, "sources_in_order": in_order}
        )
    ingest_s = time.perf_counter() - started
    memory.archive.store.indexes.optimize()
    qs, skipped = collect(memory, stored, questions)
    if with_tokens:
        locomo_tokens.token_match(memory.archive.embedder, qs)
    result = {
        "conversations": len(samples),
        "facts": sum(len(c["texts"]) for c in stored),
        "questions": len(qs),
        "questions_skipped_no_fact": skipped,
        "ingest_seconds": round(ingest_s, 1),
        "seconds": round(time.perf_counter() - started, 1),
        "features": list(FEATURES),
        "shipped_weights": list(PASSAGES.ranker.weights),
        "shipped_calibration": [*PASSAGES.calibration.weights, PASSAGES.calibration.bias],
        **figures(qs),
    }
    if with_tokens:
        tokens = locomo_tokens.recall(qs, score)
        weights = tokens.pop(locomo_tokens.COMBINED + " weights", None)
        result["recall"].update(tokens)
        if weights is not None:
            result["token_match_weights_chosen"] = weights
    return result


def report(result: dict[str, Any]) -> None:
    print(
        f"LoCoMo facts benchmark (archival_memory_insert / archival_memory_search): {result['conversations']} "
        f"conversations, {result['facts']} facts, {result['questions']} questions "
        f"({result['questions_skipped_no_fact']} skipped: no evidence turn with a fact); {result['seconds']}s"
    )
    if "fitted_on_all_weights" in result:
        print(f"  features             {result['features']}")
        print(f"  shipped weights      {result['shipped_weights']}")
        print(f"  fitted on all        {result['fitted_on_all_weights']}")
        print(f"  calibration fitted   {result['fitted_on_all_calibration']} (shipped {result['shipped_calibration']})")
        print(f"  undated calibration  {result['undated_calibration_fitted_on_all']} (turn ranker's scores, l2 1e-3)")
        chosen = [result["fitted_on_all_calibration_choice"]] + [
            w["calibration_choice"] for w in result["leave_one_out_weights"].values()
        ]
        print(
            "  calibration chosen   (l2, bias shift) on all, then each conversation held out: "
            + ", ".join(f"({c['l2']:g}, {c['shift']:g})" for c in chosen)
        )
    if "token_match_weights_chosen" in result:
        print(
            f"  token match weight   chosen per held-out conversation (nested): {result['token_match_weights_chosen']}"
        )
    print(f"  {'ranker':33s} {'category':14s} {'n':>5s} {'R@5':>6s} {'R@10':>6s} {'MRR':>6s}")
    for name, rows in result["recall"].items():
        for cat, row in rows.items():
            print(f"  {name:33s} {cat:14s} {row['n']:5d} {row['R@5']:6.3f} {row['R@10']:6.3f} {row['MRR']:6.3f}")
    if "relevance" in result:
        print(
            "  relevance >= t of the shipped ranker's top 10 (precision: another conversation's hits as the negatives):"
        )
        for name, rows in result["relevance"].items():
            for t, row in rows.items():
                print(
                    f"    {name:43s} t={t}  precision {row['precision']:.3f}  evidence kept {row['evidence_kept']:4d}"
                    f"  (cross {row['cross_kept']})"
                )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench locomo --archival")
    parser.add_argument("--archival", action="store_true", help="this benchmark (how it is named on the command line)")
    parser.add_argument("--quick", action="store_true", help="the first two conversations only")
    parser.add_argument("--convs", type=int, metavar="N", help="the first N conversations only")
    parser.add_argument("--questions", type=int, metavar="N", help="N questions per conversation at most")
    parser.add_argument("--out", type=Path, help="write the figures to this JSON file, not bench/results.json")
    parser.add_argument(
        "--token-match", action="store_true", help="also: the ranker refitted with word-by-word matching (not shipped)"
    )
    args, _ = parser.parse_known_args(sys.argv[1:])
    facts = run(args.quick, args.convs, args.questions, args.token_match)
    if args.out:
        args.out.write_text(json.dumps(facts, indent=2))
    else:
        save("locomo_facts", facts)
    report(facts)
