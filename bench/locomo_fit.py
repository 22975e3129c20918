"""Fitting for `bench locomo`: the ranker's weights (logistic regression over every question's candidates), the
relevance calibration (logistic over the top 10 hits of each question asked of its own conversation's memory and
of another conversation's), and the figures: R@k per category, precision / recall of "relevance >= t".

A question record (built by ``bench.locomo.collect``) holds: ``conv``, ``fmt``, ``category``, ``gold`` (evidence
dia ids), ``query``, ``pool`` (the candidates and the ranker's context, from ``Archive.candidates``), ``dia`` (the
dia id of each candidate), ``features``; and ``cross``: the same question's pool and features in another
conversation's memory (every hit there is a negative).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

THRESHOLDS = (0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


def fit(
    rows: list[tuple[list[list[float]], list[bool]]], *, epochs: int = 300, rate: float = 0.5, l2: float = 1e-3
) -> tuple[float, ...]:
    """Logistic regression over (feature rows, is-evidence) of every question's candidates, positives
    up-weighted to balance the classes; returns weights on the raw features (standardisation folded in)."""
    import numpy as np

    x = np.array([f for feats, _ in rows for f in feats], dtype=np.float64)
    y = np.array([v for _, labels in rows for v in labels], dtype=np.float64)
    mu, sd = x.mean(0), x.std(0) + 1e-9
    z = (x - mu) / sd
    w, b = np.zeros(z.shape[1]), 0.0
    balance = np.where(y > 0, (len(y) - y.sum()) / max(y.sum(), 1.0), 1.0)
    for _ in range(epochs):
        p = 1.0 / (1.0 + np.exp(-(z @ w + b)))
        g = (p - y) * balance
        w -= rate * (z.T @ g / len(y) + l2 * w)
        b -= rate * g.mean()
    return tuple(round(float(v), 4) for v in w / sd)


def fit_listwise(
    rows: list[tuple[list[list[float]], list[bool]]], *, epochs: int = 300, rate: float = 0.5, l2: float = 1e-3
) -> tuple[float, ...]:
    """Listwise (softmax) logistic regression: per question, the softmax of the scores over its candidates is
    pulled towards its evidence turns (questions whose candidates hold none are left out). It orders each
    question's candidates, which is what search needs, rather than classifying rows one by one (``fit``).
    Returns weights on the raw features (standardisation folded in)."""
    import numpy as np

    x = np.array([f for feats, _ in rows for f in feats], dtype=np.float64)
    mu, sd = x.mean(0), x.std(0) + 1e-9
    kept = [
        (np.array(feats, dtype=np.float64), np.array(labels, dtype=np.float64))
        for feats, labels in rows
        if feats and any(labels)
    ]
    width = max(len(labels) for _, labels in kept)
    z = np.zeros((len(kept), width, x.shape[1]))
    mask = np.full((len(kept), width), -np.inf)
    target = np.zeros((len(kept), width))
    for i, (feats, labels) in enumerate(kept):
        z[i, : len(labels)] = (feats - mu) / sd
        mask[i, : len(labels)] = 0.0
        target[i, : len(labels)] = labels / labels.sum()
    w = np.zeros(x.shape[1])
    for _ in range(epochs):
        s = z @ w + mask
        s -= s.max(1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(1, keepdims=True)
        w -= rate * (np.einsum("qn,qnd->d", p - target, z) / len(kept) + l2 * w)
    return tuple(round(float(v), 4) for v in w / sd)


def fit_calibration(
    x: list[list[float]], y: list[bool], *, epochs: int = 2000, rate: float = 0.5, l2: float = 1e-3
) -> tuple[tuple[float, ...], float]:
    """Plain (unweighted) logistic regression, so its output is a probability: (weights, bias) on raw features."""
    import numpy as np

    xs, ys = np.array(x, dtype=np.float64), np.array(y, dtype=np.float64)
    mu, sd = xs.mean(0), xs.std(0) + 1e-9
    z = (xs - mu) / sd
    w, b = np.zeros(z.shape[1]), 0.0
    for _ in range(epochs):
        p = 1.0 / (1.0 + np.exp(-(z @ w + b)))
        g = p - ys
        w -= rate * (z.T @ g / len(ys) + l2 * w)
        b -= rate * g.mean()
    return tuple(round(float(v), 4) for v in w / sd), round(float(b - (mu / sd) @ w), 4)


def labelled(qs: list[dict[str, Any]]) -> list[tuple[list[list[float]], list[bool]]]:
    return [(q["features"], [d in q["gold"] for d in q["dia"]]) for q in qs]


def ranked(q: dict[str, Any], ranker: Any, *, cross: bool = False) -> list[tuple[str, Any, float]]:
    """(dia id, candidate, score) best first, the ranker's order over the question's own (or cross) pool (as
    ``Ranker.rank`` orders it: a clear best match by meaning first for a ranker that keeps it so)."""
    from tiermem.domain.search.ranking import keep_clear_first

    pool, feats, dia = (
        (q["cross"]["pool"], q["cross"]["features"], q["cross"]["dia"])
        if cross
        else (q["pool"], q["features"], q["dia"])
    )
    scores = [sum(w * x for w, x in zip(ranker.weights, row)) for row in feats]
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], pool.candidates[i].id))
    scored = [(pool.candidates[i], scores[i]) for i in order]
    if getattr(ranker, "clear_first", False):
        scored = keep_clear_first(pool.candidates, scored, ranker.unsized(pool.candidates, feats))
    at = {c.id: i for i, c in enumerate(pool.candidates)}
    return [(dia[at[c.id]], c, s) for c, s in scored]


def score(ranking: list[str], gold: list[str]) -> tuple[float, float, float]:
    gold_set = set(gold)
    r5 = len(gold_set & set(ranking[:5])) / len(gold_set)
    r10 = len(gold_set & set(ranking[:10])) / len(gold_set)
    mrr = next((1 / (i + 1) for i, d in enumerate(ranking[:10]) if d in gold_set), 0.0)
    return r5, r10, mrr


def mean(scores: list[tuple[float, float, float]]) -> dict[str, float]:
    n = len(scores)
    return {
        "n": n,
        "R@5": round(sum(s[0] for s in scores) / n, 3),
        "R@10": round(sum(s[1] for s in scores) / n, 3),
        "MRR": round(sum(s[2] for s in scores) / n, 3),
    }


def table(per: dict[int, list[tuple[float, float, float]]]) -> dict[str, dict[str, float]]:
    rows = {CATEGORIES[c]: mean(v) for c, v in sorted(per.items())}
    rows["overall (1-4)"] = mean([s for v in per.values() for s in v])
    return rows


def top_hits(q: dict[str, Any], ranker: Any, *, cross: bool) -> list[tuple[str, list[float]]]:
    """The top 10 of a question's own (or cross) pool with their calibration features."""
    from tiermem.domain.search.ranking import calibration_features

    top = ranked(q, ranker, cross=cross)[:10]
    pool = q["cross"]["pool"] if cross else q["pool"]
    rows = calibration_features(pool.query, pool.candidates, [(c, s) for _, c, s in top], pool.context)
    return [(d, row) for (d, _, _), row in zip(top, rows)]


def calibration_data(qs: list[dict[str, Any]], ranker: Any) -> tuple[list[list[float]], list[bool]]:
    x: list[list[float]] = []
    y: list[bool] = []
    for q in qs:
        for cross in (False, True):
            for d, row in top_hits(q, ranker, cross=cross):
                x.append(row)
                y.append(not cross and d in q["gold"])
    return x, y


def leave_one_out(qs: list[dict[str, Any]]) -> dict[str, Any]:
    """For each conversation: ranker (``fit_listwise`` over the questions as asked, every storage format; the
    pointwise ``fit`` is scored beside it) and calibration (also the questions without names) fitted on the other
    four, scored on this one. R@k per format and category; precision
    / recall of "relevance >= t" per format and question variant; the weights."""
    from tiermem.domain.search.ranking import Calibration, Ranker

    per: dict[str, dict[int, list[tuple[float, float, float]]]] = defaultdict(lambda: defaultdict(list))
    per_pointwise: dict[str, dict[int, list[tuple[float, float, float]]]] = defaultdict(lambda: defaultdict(list))
    hits: dict[str, list[tuple[float, bool, bool]]] = defaultdict(
        list
    )  # "fmt, variant" -> (relevance, evidence, cross)
    gold_total: dict[str, int] = defaultdict(int)
    weights = {}
    for conv in sorted({q["conv"] for q in qs}):
        train = [q for q in qs if q["conv"] != conv]
        asked = [q for q in train if q["variant"] == "asked"]
        ranker = Ranker(fit_listwise(labelled(asked)))
        pointwise = Ranker(fit(labelled(asked)))
        calibration = Calibration(*fit_calibration(*calibration_data(train, ranker)))
        weights[conv] = {"ranker": list(ranker.weights), "calibration": [*calibration.weights, calibration.bias]}
        for q in (q for q in qs if q["conv"] == conv):
            key = f"{q['fmt']}, {q['variant']}"
            if q["variant"] == "asked":
                per[q["fmt"]][q["category"]].append(score([d for d, _, _ in ranked(q, ranker)], q["gold"]))
                per_pointwise[q["fmt"]][q["category"]].append(score([d for d, _, _ in ranked(q, pointwise)], q["gold"]))
            gold_total[key] += len(q["gold"])
            for cross in (False, True):
                rows = top_hits(q, ranker, cross=cross)
                for d, row in rows:
                    p = 1.0 / (
                        1.0 + math.exp(-(sum(w * x for w, x in zip(calibration.weights, row)) + calibration.bias))
                    )
                    hits[key].append((p, not cross and d in q["gold"], cross))
    return {
        "recall": {fmt: table(cats) for fmt, cats in per.items()},
        "recall_pointwise": {fmt: table(cats) for fmt, cats in per_pointwise.items()},
        "relevance": {key: precision_recall(h, gold_total[key]) for key, h in sorted(hits.items())},
        "reliability": {key: reliability(h) for key, h in sorted(hits.items())},
        "weights": weights,
    }


def precision_recall(hits: list[tuple[float, bool, bool]], gold_total: int) -> dict[str, dict[str, float]]:
    """Per threshold t: precision of "relevance >= t" with the hits of other conversations' memories as the
    negatives (``precision``), with every hit that is not evidence as a negative (``strict``), and recall: the
    evidence turns found in the top 10 with relevance >= t, over all evidence turns of the questions."""
    out = {}
    for t in THRESHOLDS:
        kept = [(e, c) for p, e, c in hits if p >= t]
        tp = sum(1 for e, _ in kept if e)
        cross = sum(1 for _, c in kept if c)
        out[f"{t:.2f}"] = {
            "precision": round(tp / max(1, tp + cross), 3),
            "strict": round(tp / max(1, len(kept)), 3),
            "recall": round(tp / max(1, gold_total), 3),
            "kept": len(kept),
            "cross_kept": cross,
        }
    return out


def reliability(hits: list[tuple[float, bool, bool]]) -> list[dict[str, float]]:
    """Hits by predicted relevance (tenths): how many, and the share that were evidence (calibration check)."""
    out = []
    for lo in range(10):
        inside = [e for p, e, _ in hits if lo / 10 <= p < (lo + 1) / 10 or lo == 9 and p == 1.0]
        if inside:
            out.append({"from": lo / 10, "n": len(inside), "evidence": round(sum(inside) / len(inside), 3)})
    return out
