"""A nonlinear second stage over the ranker's 20 features, measured offline
(leave-one-conversation-out, both storage formats). Not part of ``python -m bench all``; nothing here ships.

    python -m bench.locomo_nonlin collect   # one bench-locomo collection (both formats) -> /tmp/i32/records.pkl
    python -m bench.locomo_nonlin           # every variant, leave-one-conversation-out

``collect`` ingests the dev split as ``bench locomo`` does (``ingest``, ``collect``: the same pools, features and
evidence) and keeps per question: conversation, format, variant, category, evidence, candidate ids and dia ids, the
20 features. The fits then take seconds: ``linear`` (``fit_listwise``, the shipped fitter), ``gbdt`` (boosted
regression trees on the listwise softmax gradient, Newton leaves, from the linear score), ``lambdamart`` (lambda
gradients for NDCG@10), ``mlp`` (the linear score plus one tanh hidden layer, listwise softmax loss, Adam),
``nested_mlp`` (its step count chosen by an inner leave-one-conversation-out over the four training conversations).
"""

from __future__ import annotations

import json
import pickle
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from .locomo_fit import fit_listwise, labelled, score

RECORDS = Path("/tmp/i32/records.pkl")
RECS = None


def load():
    global RECS
    if RECS is None:
        RECS = pickle.loads(RECORDS.read_bytes())
    return RECS


# ---------- packing: padded tensors of asked questions ----------
def pack(qs, mu, sd):
    kept = [q for q in qs if q["features"] and any(d in q["gold"] for d in q["dia"])]
    width = max(len(q["dia"]) for q in kept)
    d = len(kept[0]["features"][0])
    z = np.zeros((len(kept), width, d))
    mask = np.full((len(kept), width), -np.inf)
    t = np.zeros((len(kept), width))
    for i, q in enumerate(kept):
        f = np.array(q["features"], dtype=np.float64)
        lab = np.array([x in q["gold"] for x in q["dia"]], float)
        n = len(lab)
        z[i, :n] = (f - mu) / sd
        mask[i, :n] = 0
        t[i, :n] = lab / lab.sum()
    return z, mask, t


def softmax(s):
    s = s - s.max(1, keepdims=True)
    p = np.exp(s)
    return p / p.sum(1, keepdims=True)


# ---------- models: each returns a function rows(np array n x 20) -> scores ----------
def linear(train):
    w = np.array(fit_listwise(labelled(train)))
    return lambda x: x @ w, w


def stats(train):
    x = np.array([f for q in train for f in q["features"]], float)
    return x.mean(0), x.std(0) + 1e-9


def mlp(train, hidden=16, steps=400, lr=0.01, l2=1e-3, seed=0, residual=True):
    mu, sd = stats(train)
    z, mask, t = pack(train, mu, sd)
    lin = np.array(fit_listwise(labelled(train)))
    base = (z * sd) @ lin if residual else np.zeros(mask.shape)  # linear score on raw features minus const per q
    rng = np.random.default_rng(seed)
    D = z.shape[2]
    P = {"W": rng.normal(0, 1 / np.sqrt(D), (D, hidden)), "b": np.zeros(hidden), "v": np.zeros(hidden)}
    if not residual:
        P["v"] = rng.normal(0, 0.1, hidden)
        P["u"] = np.zeros(D)
    m = {k: np.zeros_like(v) for k, v in P.items()}
    s2 = {k: np.zeros_like(v) for k, v in P.items()}
    nq = len(z)
    valid = np.isfinite(mask)
    for it in range(1, steps + 1):
        h = np.tanh(z @ P["W"] + P["b"])
        sc = base + h @ P["v"] + (z @ P["u"] if "u" in P else 0) + mask
        p = softmax(sc)
        g = (p - t) / nq
        g[~valid] = 0
        G = {"v": np.einsum("qn,qnh->h", g, h) + l2 * P["v"]}
        dh = g[..., None] * P["v"] * (1 - h**2)
        G["W"] = np.einsum("qnd,qnh->dh", z, dh) + l2 * P["W"]
        G["b"] = dh.sum((0, 1))
        if "u" in P:
            G["u"] = np.einsum("qn,qnd->d", g, z) + l2 * P["u"]
        for k in P:
            m[k] = 0.9 * m[k] + 0.1 * G[k]
            s2[k] = 0.999 * s2[k] + 0.001 * G[k] ** 2
            P[k] -= lr * (m[k] / (1 - 0.9**it)) / (np.sqrt(s2[k] / (1 - 0.999**it)) + 1e-8)

    def f(x):
        zz = (x - mu) / sd
        out = np.tanh(zz @ P["W"] + P["b"]) @ P["v"]
        if residual:
            out = out + x @ lin
        if "u" in P:
            out = out + zz @ P["u"]
        return out

    return f, (mu, sd, lin, P)


# ---------- gradient-boosted trees on the listwise softmax loss, starting from the linear score ----------
def bins_of(x, nb=32):
    edges = []
    for j in range(x.shape[1]):
        u = np.unique(x[:, j])
        edges.append(u[:-1] if len(u) <= nb else np.unique(np.quantile(x[:, j], np.linspace(0, 1, nb + 1)[1:-1])))
    return edges


def binned(x, edges):
    return np.stack([np.searchsorted(e, x[:, j], side="left") for j, e in enumerate(edges)], 1).astype(np.int32)


def build_tree(B, g, h, idx, depth, min_leaf, lam, nb):
    """A nested tuple tree: ('leaf', value) or ('split', feature, bin, left, right); x's bin <= bin goes left."""
    G, H = g[idx].sum(), h[idx].sum()
    if depth == 0 or len(idx) < 2 * min_leaf:
        return ("leaf", -G / (H + lam))
    best = (0.0, None)
    parent = G * G / (H + lam)
    gi, hi = g[idx], h[idx]
    for j in range(B.shape[1]):
        bj = B[idx, j]
        cg = np.cumsum(np.bincount(bj, gi, minlength=nb + 1))
        ch = np.cumsum(np.bincount(bj, hi, minlength=nb + 1))
        cn = np.cumsum(np.bincount(bj, minlength=nb + 1))
        gl, hl, nl = cg[:-1], ch[:-1], cn[:-1]
        gr, hr, nr = G - gl, H - hl, len(idx) - nl
        ok = (nl >= min_leaf) & (nr >= min_leaf)
        if not ok.any():
            continue
        gain = np.where(ok, gl**2 / (hl + lam) + gr**2 / (hr + lam) - parent, -np.inf)
        k = int(np.argmax(gain))
        if gain[k] > best[0]:
            best = (gain[k], (j, k))
    if best[1] is None:
        return ("leaf", -G / (H + lam))
    j, k = best[1]
    left = idx[B[idx, j] <= k]
    right = idx[B[idx, j] > k]
    return (
        "split",
        j,
        k,
        build_tree(B, g, h, left, depth - 1, min_leaf, lam, nb),
        build_tree(B, g, h, right, depth - 1, min_leaf, lam, nb),
    )


def tree_predict(tree, B):
    out = np.zeros(len(B))

    def go(t, idx):
        if t[0] == "leaf":
            out[idx] = t[1]
            return
        _, j, k, left, r = t
        m = B[idx, j] <= k
        go(left, idx[m])
        go(r, idx[~m])

    go(tree, np.arange(len(B)))
    return out


def _evidence_rows(train):
    """The training questions that hold evidence, their candidates' rows stacked: (kept, x, question of each row,
    is-evidence of each row)."""
    kept = [q for q in train if q["features"] and any(d in q["gold"] for d in q["dia"])]
    x = np.concatenate([np.array(q["features"], float) for q in kept])
    qid = np.concatenate([np.full(len(q["dia"]), i) for i, q in enumerate(kept)])
    y = np.concatenate([np.array([d in q["gold"] for d in q["dia"]], float) for q in kept])
    return kept, x, qid, y


def _softmax_by_question(F, qid):
    """Each row's softmax probability among its question's rows (rows of one question are contiguous)."""
    s = F - np.maximum.reduceat(F, np.r_[0, np.flatnonzero(np.diff(qid)) + 1])[qid]
    e = np.exp(s)
    return e / np.bincount(qid, e)[qid]


def _boost(x, lin, gradients, trees, depth, shrink, min_leaf, lam, nb):
    """Boosted regression trees on top of the linear score ``x @ lin``: ``gradients(F)`` gives each tree its
    (gradient, hessian, rows to fit) at the current scores F. Returns (scoring function, (lin, edges, forest))."""
    F = x @ lin
    edges = bins_of(x, nb)
    B = binned(x, edges)
    forest = []
    for _ in range(trees):
        g, h, idx = gradients(F)
        tree = build_tree(B, g, h, idx, depth, min_leaf, lam, nb + 1)
        F += shrink * tree_predict(tree, B)
        forest.append(tree)
    return _gbdt_scorer(lin, edges, forest, shrink), (lin, edges, forest)


def _gbdt_scorer(lin, edges, forest, shrink):
    def f(xx):
        bb = binned(xx, edges)
        return xx @ lin + shrink * sum((tree_predict(t, bb) for t in forest), np.zeros(len(xx)))

    return f


def gbdt(train, trees=100, depth=3, shrink=0.1, min_leaf=50, lam=1.0, nb=32, from_linear=True):
    """Trees on the listwise softmax gradient (the loss ``fit_listwise`` minimises)."""
    _, x, qid, y = _evidence_rows(train)
    tgt = y / np.bincount(qid, y)[qid]
    lin = np.array(fit_listwise(labelled(train))) if from_linear else np.zeros(x.shape[1])
    rows = np.arange(len(x))

    def gradients(F):
        p = _softmax_by_question(F, qid)
        return p - tgt, np.maximum(p * (1 - p), 1e-6), rows

    return _boost(x, lin, gradients, trees, depth, shrink, min_leaf, lam, nb)


# ---------- evaluation ----------
def evaluate(model_fn, recs=None, convs=None, verbose=False):
    recs = recs or load()
    asked = [q for q in recs if q["variant"] == "asked"]
    convs = convs or sorted({q["conv"] for q in asked})
    per = defaultdict(lambda: defaultdict(list))
    for conv in convs:
        train = [q for q in asked if q["conv"] != conv]
        f, _ = model_fn(train)
        for q in (q for q in asked if q["conv"] == conv):
            s = f(np.array(q["features"], float)) if q["features"] else np.zeros(0)
            order = sorted(range(len(s)), key=lambda i: (-s[i], q["ids"][i]))
            per[q["fmt"]][q["category"]].append(score([q["dia"][i] for i in order], q["gold"]))
    out = {}
    for fmt, cats in sorted(per.items()):
        allq = [x for v in cats.values() for x in v]

        def m(v: list, k: int) -> float:
            return round(sum(x[k] for x in v) / len(v), 3)

        out[fmt] = {
            "R@5": m(allq, 0),
            "R@10": m(allq, 1),
            "MRR": m(allq, 2),
            "multi": m(cats[1], 0),
            "temporal": m(cats[2], 0),
            "multi10": m(cats[1], 1),
        }
    return out


def show(name, res):
    print(
        f"{name:50s} "
        + "  ".join(
            f"{fmt}: {r['R@5']:.3f}/{r['R@10']:.3f} mh {r['multi']:.3f} tmp {r['temporal']:.3f} mrr {r['MRR']:.3f}"
            for fmt, r in res.items()
        ),
        flush=True,
    )


def lambdamart(train, trees=100, depth=3, shrink=0.1, min_leaf=50, lam=1.0, nb=32, k=10, from_linear=True):
    """LambdaMART: lambda gradients for NDCG@k (binary gains), Newton leaves, from the linear score."""
    kept, x, _, _ = _evidence_rows(train)
    starts = np.cumsum([0] + [len(q["dia"]) for q in kept])
    ys = [np.array([d in q["gold"] for d in q["dia"]], float) for q in kept]
    lin = np.array(fit_listwise(labelled(train))) if from_linear else np.zeros(x.shape[1])
    ideal = [sum(1 / np.log2(2 + i) for i in range(min(int(y.sum()), k))) for y in ys]
    disc_all = np.zeros(2000)
    disc_all[:k] = 1 / np.log2(2 + np.arange(k))
    rows = np.arange(len(x))

    def gradients(F):
        g = np.zeros(len(x))
        h = np.zeros(len(x))
        for qi, y in enumerate(ys):
            a, b = starts[qi], starts[qi + 1]
            s = F[a:b]
            rank = np.empty(len(s), int)
            rank[np.argsort(-s, kind="stable")] = np.arange(len(s))
            disc = disc_all[rank]
            pos = np.flatnonzero(y > 0)
            neg = np.flatnonzero(y == 0)
            if len(neg) == 0:
                continue
            dn = np.abs(disc[pos][:, None] - disc[neg][None, :]) / ideal[qi]
            rho = 1 / (1 + np.exp(np.clip(s[pos][:, None] - s[neg][None, :], -50, 50)))
            lamb = dn * rho
            hh = dn * rho * (1 - rho)
            g[a + pos] -= lamb.sum(1)
            g[a + neg] += lamb.sum(0)
            h[a + pos] += hh.sum(1)
            h[a + neg] += hh.sum(0)
        return g, np.maximum(h, 1e-9), rows

    return _boost(x, lin, gradients, trees, depth, shrink, min_leaf, lam, nb)


def gbdt_w(train, trees=30, depth=3, shrink=0.1, min_leaf=50, lam=1.0, nb=32, per_evidence=True, subsample=1.0, seed=0):
    """gbdt with the per-evidence softmax loss (sum over evidence turns of -log p): a question with more evidence
    counts more; optional question subsampling per tree."""
    kept, x, qid, y = _evidence_rows(train)
    npos = np.bincount(qid, y)[qid]
    lin = np.array(fit_listwise(labelled(train)))
    rng = np.random.default_rng(seed)

    def gradients(F):
        p = _softmax_by_question(F, qid)
        if per_evidence:
            g = npos * p - y
            h = np.maximum(npos * p * (1 - p), 1e-6)
        else:
            g = p - y / npos
            h = np.maximum(p * (1 - p), 1e-6)
        idx = np.arange(len(x))
        if subsample < 1.0:
            keepq = rng.random(len(kept)) < subsample
            idx = idx[keepq[qid]]
        return g, h, idx

    return _boost(x, lin, gradients, trees, depth, shrink, min_leaf, lam, nb)


def bagged(train, n=5, **kw):
    fs = [gbdt_w(train, subsample=0.8, seed=s, **kw)[0] for s in range(n)]
    return (lambda xx: sum(f(xx) for f in fs) / n), None


def mlp_ckpt(train, checkpoints, hidden=16, lr=0.003, l2=1e-2, seed=0):
    """One MLP run, the scoring function at each checkpoint step."""
    mu, sd = stats(train)
    z, mask, t = pack(train, mu, sd)
    lin = np.array(fit_listwise(labelled(train)))
    base = (z * sd) @ lin
    rng = np.random.default_rng(seed)
    D = z.shape[2]
    P = {"W": rng.normal(0, 1 / np.sqrt(D), (D, hidden)), "b": np.zeros(hidden), "v": np.zeros(hidden)}
    m = {k: np.zeros_like(v) for k, v in P.items()}
    s2 = {k: np.zeros_like(v) for k, v in P.items()}
    nq = len(z)
    valid = np.isfinite(mask)
    out = {}
    for it in range(1, max(checkpoints) + 1):
        h = np.tanh(z @ P["W"] + P["b"])
        p = softmax(base + h @ P["v"] + mask)
        g = (p - t) / nq
        g[~valid] = 0
        G = {"v": np.einsum("qn,qnh->h", g, h) + l2 * P["v"]}
        dh = g[..., None] * P["v"] * (1 - h**2)
        G["W"] = np.einsum("qnd,qnh->dh", z, dh) + l2 * P["W"]
        G["b"] = dh.sum((0, 1))
        for k in P:
            m[k] = 0.9 * m[k] + 0.1 * G[k]
            s2[k] = 0.999 * s2[k] + 0.001 * G[k] ** 2
            P[k] -= lr * (m[k] / (1 - 0.9**it)) / (np.sqrt(s2[k] / (1 - 0.999**it)) + 1e-8)
        if it in checkpoints:
            out[it] = _mlp_scorer({k: v.copy() for k, v in P.items()}, mu, sd, lin)
    return out


def _mlp_scorer(Q, mu, sd, lin):
    return lambda x: np.tanh(((x - mu) / sd) @ Q["W"] + Q["b"]) @ Q["v"] + x @ lin


def r_at(fs, qs):
    """mean R@10 of each scoring function over questions qs"""
    res = {}
    for k, f in fs.items():
        tot = 0.0
        for q in qs:
            s = f(np.array(q["features"], float)) if q["features"] else np.zeros(0)
            order = sorted(range(len(s)), key=lambda i: (-s[i], q["ids"][i]))
            tot += score([q["dia"][i] for i in order], q["gold"])[1]
        res[k] = tot / len(qs)
    return res


def nested_mlp(train, checkpoints=(0, 50, 100, 150, 200, 300), log=None):
    """steps chosen by inner leave-one-conversation-out R@10 over the training conversations (0 = the linear ranker)."""
    convs = sorted({q["conv"] for q in train})
    tot = defaultdict(float)
    cps = tuple(c for c in checkpoints if c > 0)
    for c in convs:
        inner = [q for q in train if q["conv"] != c]
        fs = mlp_ckpt(inner, cps)
        lin = np.array(fit_listwise(labelled(inner)))
        fs[0] = lambda x, lin=lin: x @ lin
        for k, v in r_at(fs, [q for q in train if q["conv"] == c]).items():
            tot[k] += v
    best = max(sorted(tot), key=lambda k: tot[k])
    if log is not None:
        log.append((best, {k: round(v / len(convs), 4) for k, v in sorted(tot.items())}))
    if best == 0:
        lin = np.array(fit_listwise(labelled(train)))
        return (lambda x: x @ lin), None
    return mlp_ckpt(train, (best,))[best], None


def mlp_seeds(train, seeds=(0, 1, 2)):
    fs = [mlp(train, steps=150, lr=0.003, l2=1e-2, seed=s)[0] for s in seeds]
    return (lambda xx: sum(f(xx) for f in fs) / len(fs)), None


def collect_records() -> None:
    from tiermem.base.config import load_settings
    from tiermem.domain.factory import open_memory
    from tiermem.domain.search.ranking import calibration_features

    from .locomo import DATA, FORMATS, collect, ingest

    samples = json.loads(DATA.read_text())
    memory = open_memory(
        load_settings(data_dir=Path(tempfile.mkdtemp(prefix="tiermem-locomo-i32-")), embedding_model="default")
    )
    memory.archive.embedder.wait(None)
    ingested = {fmt: ingest(memory, samples, fmt) for fmt in FORMATS}
    memory.archive.store.indexes.optimize()

    def slim(q):
        def calib(pool):
            rows = calibration_features(pool.query, pool.candidates, [(c, 0.0) for c in pool.candidates], pool.context)
            return [r[1:] for r in rows]

        return {
            "conv": q["conv"],
            "fmt": q["fmt"],
            "variant": q["variant"],
            "category": q["category"],
            "gold": q["gold"],
            "query": q["query"],
            "dia": q["dia"],
            "ids": [c.id for c in q["pool"].candidates],
            "features": q["features"],
            "calib": calib(q["pool"]),
            "cross": {
                "dia": q["cross"]["dia"],
                "ids": [c.id for c in q["cross"]["pool"].candidates],
                "features": q["cross"]["features"],
                "calib": calib(q["cross"]["pool"]),
            },
        }

    out = []
    for fmt in FORMATS:
        out += [slim(q) for q in collect(memory, ingested[fmt], fmt, [])[0]]
        out += [slim(q) for q in collect(memory, ingested[fmt], fmt, [], unnamed=True)[0]]
    RECORDS.parent.mkdir(parents=True, exist_ok=True)
    RECORDS.write_bytes(pickle.dumps(out))
    print(f"{len(out)} question records -> {RECORDS}")


VARIANTS = {
    "linear listwise (the shipped fitter)": lambda tr: linear(tr),
    "gbdt d3 100 s0.1 leaf50 (fixed up front)": lambda tr: gbdt(tr),
    "gbdt d3 30 s0.1 leaf50": lambda tr: gbdt(tr, trees=30),
    "gbdt d3 100 s0.05 leaf200": lambda tr: gbdt(tr, trees=100, shrink=0.05, min_leaf=200),
    "gbdt d2 100 s0.1 leaf50": lambda tr: gbdt(tr, depth=2),
    "gbdt d4 100 s0.1 leaf100": lambda tr: gbdt(tr, depth=4, min_leaf=100),
    "gbdt d3 200 s0.1 leaf50 from zero": lambda tr: gbdt(tr, trees=200, from_linear=False),
    "lambdamart ndcg@10 d3 100 s0.1 leaf50": lambda tr: lambdamart(tr),
    "mlp16 400 steps lr0.01 l2 1e-3": lambda tr: mlp(tr),
    "mlp16 100 steps lr0.003 l2 1e-2": lambda tr: mlp(tr, steps=100, lr=0.003, l2=1e-2),
    "mlp16 150 steps lr0.003 l2 1e-2": lambda tr: mlp(tr, steps=150, lr=0.003, l2=1e-2),
    "mlp16 300 steps lr0.003 l2 1e-2": lambda tr: mlp(tr, steps=300, lr=0.003, l2=1e-2),
    "mlp8 150 steps": lambda tr: mlp(tr, hidden=8, steps=150, lr=0.003, l2=1e-2),
    "mlp32 150 steps": lambda tr: mlp(tr, hidden=32, steps=150, lr=0.003, l2=1e-2),
    "mlp16 150 steps seed 1": lambda tr: mlp(tr, steps=150, lr=0.003, l2=1e-2, seed=1),
    "mlp16 150 steps seed 2": lambda tr: mlp(tr, steps=150, lr=0.003, l2=1e-2, seed=2),
    "mlp16, steps by nested LOO (R@10)": lambda tr: nested_mlp(tr),
    "gbdt d3 30 s0.1 per-evidence loss": lambda tr: gbdt_w(tr),
    "gbdt d3 30 s0.1, 5 bags of 80% questions": lambda tr: bagged(tr, per_evidence=False),
    "mlp16 150 steps, mean of seeds 0-2": lambda tr: mlp_seeds(tr),
}


def main() -> None:
    if "collect" in sys.argv[1:]:
        collect_records()
        return
    for name, fn in VARIANTS.items():
        t = time.time()
        show(name, evaluate(fn))
        print(f"    {time.time() - t:.0f} s", flush=True)


def linear_per_evidence(train, epochs=300, rate=0.5, l2=1e-3):
    """``fit_listwise`` with the per-evidence loss (sum over evidence turns of -log p), the gbdt_w loss, linear."""
    x = np.array([f for q in train for f in q["features"]], float)
    mu, sd = x.mean(0), x.std(0) + 1e-9
    z, mask, t = pack(train, mu, sd)
    npos = np.array(
        [
            sum(d in q["gold"] for d in q["dia"])
            for q in train
            if q["features"] and any(d in q["gold"] for d in q["dia"])
        ],
        float,
    )
    y = t * npos[:, None]
    w = np.zeros(z.shape[2])
    for _ in range(epochs):
        p = softmax(z @ w + mask)
        w -= rate * (np.einsum("qn,qnd->d", npos[:, None] * p - y, z) / npos.sum() + l2 * w)
    w = w / sd
    return (lambda xx: xx @ w), w


def in_sample(fn):
    """Fitted on all five, scored on all five (the in-sample ceiling)."""
    asked = [q for q in load() if q["variant"] == "asked"]
    f, _ = fn(asked)
    return evaluate(lambda tr: (f, None))


VARIANTS["linear, per-evidence loss"] = lambda tr: linear_per_evidence(tr)


def gbdt_staged(train, stages, depth=3, shrink=0.1, min_leaf=50, lam=1.0, nb=32):
    """``gbdt`` (softmax gradient, from the linear score), the scoring function after each number of trees."""
    _, (lin, edges, forest) = gbdt(
        train, trees=max(stages), depth=depth, shrink=shrink, min_leaf=min_leaf, lam=lam, nb=nb
    )
    return {n: _gbdt_scorer(lin, edges, forest[:n], shrink) for n in stages}


def nested_gbdt(train, stages=(0, 10, 30, 60, 100), log=None):
    """The number of trees (depth 3, shrinkage 0.1, 50 rows a leaf) chosen by inner leave-one-conversation-out R@10
    over the training conversations (0 = the linear ranker)."""
    convs = sorted({q["conv"] for q in train})
    tot = defaultdict(float)
    for c in convs:
        fs = gbdt_staged([q for q in train if q["conv"] != c], stages)
        for k, v in r_at(fs, [q for q in train if q["conv"] == c]).items():
            tot[k] += v
    best = max(sorted(tot), key=lambda k: tot[k])
    if log is not None:
        log.append((best, {k: round(v / len(convs), 4) for k, v in sorted(tot.items())}))
    return gbdt_staged(train, (best,))[best], None


VARIANTS["gbdt d3 s0.1 leaf50, trees by nested LOO (R@10)"] = lambda tr: nested_gbdt(tr)


if __name__ == "__main__":
    main()
