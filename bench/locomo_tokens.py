"""Word-by-word matching for the facts benchmark (``python -m bench locomo --archival --token-match``): not shipped.

Each question's word pieces are matched against each pool fact's pieces (the packaged MiniLM's output per piece,
``token_states``; the fact as stored, date included): a piece's best cosine with the fact's pieces, averaged with
the pieces' idf over the pool's facts (``[CLS]``, ``[SEP]`` and punctuation left out), relative to the pool's best
(``token_match``). The fact's pieces are taken as they would be stored: float32, float16, int8 with one scale per
piece, or sign bits. The reverse match (each fact piece's best cosine with the question's pieces, averaged) is one
more feature. What it is judged by (``recall``), R@k leave-one-conversation-out:

- the facts ranker refitted with the match as one more feature (and with the reverse match too);
- the refitted ranker's own score plus a fixed weight times the match, the weight chosen by nested leave-one-out
  (per held-out conversation, the weight of ``WEIGHTS`` ranking best over the others, each scored by the ranker
  fitted on the rest of them; three conversations or more), never on the held-out one.

docs/benchmarks-history.md, "Facts ranker: token-level matching", has the figures and why it is not built.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from .locomo_fit import fit_listwise, table

PUNCTUATION = frozenset(".,?!:;'\"-()[]")
FORMS = ("float32", "float16", "int8", "bits")  # how a fact's pieces would be stored
WEIGHTS = (0.0, 2.0, 4.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0, 96.0, 128.0)  # the match's weight, nested choice
TOKEN_MATCH = "LOO fit + token match"  # float32; the other forms' rows add " (form)"
WITH_REVERSE = "LOO fit + token match + reverse"
COMBINED = "LOO score + w x token match"


def stored(rows: Any, form: str) -> Any:
    """A fact's piece rows (float64) as ``form`` keeps them, unit length."""
    import numpy as np

    if form == "float16":
        rows = rows.astype(np.float16).astype(np.float64)
    elif form == "int8":
        scale = np.maximum(np.abs(rows).max(axis=1, keepdims=True), 1e-12) / 127
        rows = np.round(rows / scale) * scale
    elif form == "bits":
        rows = np.where(rows >= 0, 1.0, -1.0)
    elif form != "float32":
        raise ValueError(f"unknown form {form!r}: one of {', '.join(FORMS)}")
    return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)


def token_match(embedder: Any, qs: list[dict[str, Any]]) -> None:
    """Adds ``token_match`` (form -> one score per candidate) and ``token_reverse`` to each question."""
    import numpy as np

    def pieces(texts: list[str]) -> dict[str, tuple[list[str], Any]]:
        out = {}
        for text, (tokens, rows) in zip(texts, embedder.token_states(texts), strict=True):
            keep = [i for i, t in enumerate(tokens) if t not in ("[CLS]", "[SEP]") and t not in PUNCTUATION]
            keep = keep or list(range(len(tokens)))  # a text of punctuation alone keeps its pieces
            out[text] = ([tokens[i] for i in keep], np.asarray(rows, dtype=np.float64)[keep])
        return out

    facts = pieces(sorted({c.content for q in qs for c in q["pool"].candidates}))
    kept = {form: {text: stored(rows, form) for text, (_, rows) in facts.items()} for form in FORMS}
    asked = pieces(sorted({q["query"] for q in qs}))
    for q in qs:
        words, rows = asked[q["query"]]
        query = stored(rows, "float32")
        contents = [c.content for c in q["pool"].candidates]
        held = [set(facts[c][0]) for c in contents]
        n = len(held)
        df = {w: sum(w in h for h in held) for w in set(words)}
        idf = np.array([math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5)) for w in words])
        q["token_match"] = {}
        for form in FORMS:
            scores = [
                float(((query @ kept[form][c].T).max(axis=1) * idf).sum() / max(idf.sum(), 1e-9)) for c in contents
            ]
            q["token_match"][form] = relative(scores)
        q["token_reverse"] = relative([float((query @ kept["float32"][c].T).max(axis=0).mean()) for c in contents])


def relative(scores: list[float]) -> list[float]:
    best = max(scores, default=0.0)
    return [x - best for x in scores]


Score = Callable[[list[list[str]], list[str]], tuple[float, float, float]]  # ``locomo_facts.score``


def labelled(qs: list[dict[str, Any]]) -> list[tuple[list[list[float]], list[bool]]]:
    return [(q["features"], [bool(set(d) & set(q["gold"])) for d in q["dia"]]) for q in qs]


def ranking(q: dict[str, Any], scores: list[float]) -> list[list[str]]:
    """The question's candidates' source dia ids, best score first (ties by passage id, as ``locomo_facts``)."""
    ids = [c.id for c in q["pool"].candidates]
    return [q["dia"][i] for i in sorted(range(len(scores)), key=lambda i: (-scores[i], ids[i]))]


def linear(q: dict[str, Any], weights: tuple[float, ...]) -> list[float]:
    return [sum(a * x for a, x in zip(weights, row)) for row in q["features"]]


def recall(qs: list[dict[str, Any]], score: Score) -> dict[str, Any]:
    """R@k leave-one-conversation-out of each way of using the match (two conversations or more; the nested
    weight three or more), each question scored by ``score``. The held-out weights chosen are under
    ``COMBINED + " weights"``."""
    convs = sorted({q["conv"] for q in qs})
    if len(convs) < 2:
        return {}

    def extended(extra: list[list[list[float]]]) -> list[dict[str, Any]]:
        return [
            {**q, "features": [f + list(x) for f, x in zip(q["features"], zip(*(e[n] for e in extra)), strict=True)]}
            for n, q in enumerate(qs)
        ]

    def held_out(rows: list[dict[str, Any]]) -> dict[str, Any]:
        per: dict[int, list[tuple[float, float, float]]] = defaultdict(list)
        for conv in convs:
            weights = fit_listwise(labelled([q for q in rows if q["conv"] != conv]))
            for q in rows:
                if q["conv"] == conv:
                    per[q["category"]].append(score(ranking(q, linear(q, weights)), q["gold"]))
        return table(per)

    out: dict[str, Any] = {}
    for form in FORMS:
        name = TOKEN_MATCH if form == "float32" else f"{TOKEN_MATCH} ({form})"
        out[name] = held_out(extended([[q["token_match"][form] for q in qs]]))
    out[WITH_REVERSE] = held_out(
        extended([[q["token_match"]["float32"] for q in qs], [q["token_reverse"] for q in qs]])
    )
    if len(convs) > 2:
        out[COMBINED], out[COMBINED + " weights"] = combined(qs, convs, score)
    return out


def combined(qs: list[dict[str, Any]], convs: list[str], score: Score) -> tuple[dict[str, Any], dict[str, float]]:
    """The ranker fitted without the match, its score plus w x the float32 match; w chosen by nested leave-one-out."""
    fits: dict[frozenset[str], tuple[float, ...]] = {}

    def fitted(left_out: frozenset[str]) -> tuple[float, ...]:
        if left_out not in fits:
            fits[left_out] = fit_listwise(labelled([q for q in qs if q["conv"] not in left_out]))
        return fits[left_out]

    def mixed(q: dict[str, Any], weights: tuple[float, ...], w: float) -> list[list[str]]:
        return ranking(q, [x + w * m for x, m in zip(linear(q, weights), q["token_match"]["float32"], strict=True)])

    per: dict[int, list[tuple[float, float, float]]] = defaultdict(list)
    chosen: dict[str, float] = {}
    for conv in convs:
        inner = [c for c in convs if c != conv]
        total = [0.0] * len(WEIGHTS)
        for other in inner:
            weights = fitted(frozenset({conv, other}))
            for q in qs:
                if q["conv"] == other:
                    for n, w in enumerate(WEIGHTS):
                        total[n] += score(mixed(q, weights, w), q["gold"])[0]
        chosen[conv] = WEIGHTS[max(range(len(WEIGHTS)), key=lambda n: (total[n], -n))]
        weights = fitted(frozenset({conv}))
        for q in qs:
            if q["conv"] == conv:
                per[q["category"]].append(score(mixed(q, weights, chosen[conv]), q["gold"]))
    return table(per), chosen
