"""LoCoMo retrieval benchmark for recall memory (turn level, categories 1-4), with leave-one-conversation-out.

    python -m bench locomo                  # the dev split in ../shared/bench-data/locomo-dev.json
    python -m bench locomo --quick          # first two conversations
    python -m bench locomo --latency 10000  # only: conversation_search p50/p95 over one agent with 10k turns
    python -m bench locomo --archival       # only: the same questions against the turns stored as archival passages

Every turn is logged through the public Archive API as a user message (content "{speaker}: {text}",
plus " [image: {blip_caption}]"; timestamp = the session date; the dia_id kept in the unsearched
payload). All conversations are ingested first (one agent each), the store is optimized once so the
full-text index covers every row, then each question of categories 1-4 is searched once with
``conversation_search(limit=10)``. The candidates both legs returned for it are then ranked by:
the shipped ranker (checked to equal what conversation_search returned), a ranker fitted on the
other four conversations (leave-one-conversation-out: the figure that counts), one fitted on all five
(printed: these are the weights to ship), the previous RRF default, and each leg alone.
R@5 / R@10 are the fraction of evidence turns in the top k, MRR the reciprocal rank of the first
one (0 if none in the top 10); means are macro over questions. Malformed evidence ids are split on
";" and spaces and ids matching no turn are dropped; questions left without evidence are skipped.
No parameter is chosen per conversation.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .common import ROOT, save

DATA = ROOT.parent / "shared" / "bench-data" / "locomo-dev.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
BATCH = 128  # messages per log_messages call (one embedding call each)
SHIPPED, LOO, IN_SAMPLE = "shipped ranker (in-sample)", "leave-one-conv-out", "fitted on all five"
OLD, KEYWORD, VECTOR = "old RRF 0.25/0.75 k=10", "keyword leg only", "vector leg only"
RANKERS = (LOO, SHIPPED, IN_SAMPLE, OLD, KEYWORD, VECTOR)


def sessions(conv: dict[str, Any]) -> list[tuple[datetime, list[dict[str, Any]]]]:
    out = []
    for key, turns in conv.items():
        m = re.fullmatch(r"session_(\d+)", key)
        if m and isinstance(turns, list) and turns:
            when = datetime.strptime(conv[f"{key}_date_time"], "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
            out.append((int(m.group(1)), when, turns))
    return [(when, turns) for _, when, turns in sorted(out, key=lambda s: s[0])]


def messages(sample: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for when, turns in sessions(sample["conversation"]):
        for turn in turns:
            text = f"{turn['speaker']}: {turn['text']}"
            if turn.get("blip_caption"):
                text += f" [image: {turn['blip_caption']}]"
            out.append({"role": "user", "content": text, "timestamp": when.isoformat(), "payload": turn["dia_id"],
                        "conversation_id": sample["sample_id"]})
    return out


def evidence_ids(raw: list[str], known: set[str]) -> list[str]:
    ids = []
    for item in raw:
        for part in re.split(r"[;\s]+", item):
            if part in known and part not in ids:
                ids.append(part)
    return ids


def score(ranked: list[str], gold: list[str]) -> tuple[float, float, float]:
    gold_set = set(gold)
    r5 = len(gold_set & set(ranked[:5])) / len(gold_set)
    r10 = len(gold_set & set(ranked[:10])) / len(gold_set)
    mrr = next((1 / (i + 1) for i, d in enumerate(ranked[:10]) if d in gold_set), 0.0)
    return r5, r10, mrr


def fit(rows: list[tuple[list[list[float]], list[bool]]], *, epochs: int = 300, rate: float = 0.5,
        l2: float = 1e-3) -> tuple[float, ...]:
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


def run(quick: bool = False) -> dict[str, Any]:
    from tiermem.config import load_settings
    from tiermem.factory import open_memory
    from tiermem.ranking import DEFAULT_RANKER, FEATURES, Ranker, features

    samples = json.loads(DATA.read_text())[: 2 if quick else None]
    settings = load_settings(data_dir=Path(tempfile.mkdtemp(prefix="tiermem-locomo-")), embedding_model="default")
    memory = open_memory(settings)
    memory.archive.embedder.wait(None)
    archive = memory.archive

    started = time.perf_counter()
    convs = []
    for sample in samples:
        agent = memory.ensure_agent(sample["sample_id"]).id
        batch = messages(sample)
        dia_of: dict[str, str] = {}
        for i in range(0, len(batch), BATCH):
            part = batch[i : i + BATCH]
            for message, item in zip(archive.log_messages(agent, part), part, strict=True):
                dia_of[message.id] = str(item["payload"])
        convs.append((sample, agent, dia_of))
    ingest_s = time.perf_counter() - started
    memory.archive.store.optimize()  # waits for any background upkeep; the FTS index then covers every row

    # One search per question: the candidates both legs return, ranked below by every ranker.
    questions: list[dict[str, Any]] = []
    latencies: list[float] = []
    skipped = 0
    for sample, agent, dia_of in convs:
        known = set(dia_of.values())
        for qa in sample["qa"]:
            category = qa.get("category")
            if category not in CATEGORIES:
                continue
            gold = evidence_ids(qa.get("evidence", []), known)
            if not gold:
                skipped += 1
                continue
            t = time.perf_counter()
            result = archive.conversation_search(agent, qa["question"], limit=10)
            latencies.append(time.perf_counter() - t)
            if result.mode != "hybrid":
                raise RuntimeError(f"search ran in {result.mode!r} mode: {result.notes}")
            cands = archive.candidates("messages", agent, qa["question"], limit=10)
            shipped = [dia_of[c.id] for c, _ in DEFAULT_RANKER.rank(qa["question"], cands)][:10]
            if shipped != [dia_of[h.id] for h in result.hits]:
                raise RuntimeError("conversation_search and the shipped ranker over its candidates disagree")
            questions.append({"conv": sample["sample_id"], "category": category, "gold": gold, "query": qa["question"],
                              "cands": cands, "dia": [dia_of[c.id] for c in cands],
                              "features": features(qa["question"], cands)})

    def ranked(q: dict[str, Any], ranker: Ranker) -> list[str]:
        order = {c.id: i for i, c in enumerate(q["cands"])}
        return [q["dia"][order[c.id]] for c, _ in ranker.rank(q["query"], q["cands"])]

    def labelled(qs: list[dict[str, Any]]) -> list[tuple[list[list[float]], list[bool]]]:
        return [(q["features"], [d in q["gold"] for d in q["dia"]]) for q in qs]

    per: dict[str, dict[int, list[tuple[float, float, float]]]] = {name: defaultdict(list) for name in RANKERS}
    fixed = {SHIPPED: DEFAULT_RANKER, KEYWORD: Ranker.legs(0.0, 1.0), VECTOR: Ranker.legs(1.0, 0.0),
             OLD: Ranker.legs(0.25, 0.75)}
    for q in questions:
        for name, ranker in fixed.items():
            per[name][q["category"]].append(score(ranked(q, ranker), q["gold"]))
    held_out_weights = {}
    for sample in samples:  # leave one conversation out: fitted on the others, scored on this one
        conv = sample["sample_id"]
        ranker = Ranker(fit(labelled([q for q in questions if q["conv"] != conv])))
        held_out_weights[conv] = ranker.weights
        for q in (q for q in questions if q["conv"] == conv):
            per[LOO][q["category"]].append(score(ranked(q, ranker), q["gold"]))
    fitted = Ranker(fit(labelled(questions)))
    for q in questions:
        per[IN_SAMPLE][q["category"]].append(score(ranked(q, fitted), q["gold"]))

    result: dict[str, Any] = {
        "conversations": len(samples), "turns": sum(len(d) for _, _, d in convs),
        "questions_skipped_no_evidence": skipped, "ingest_seconds": round(ingest_s, 1),
        "seconds": round(time.perf_counter() - started, 1),
        "features": list(FEATURES), "shipped_weights": list(DEFAULT_RANKER.weights),
        "fitted_on_all_weights": list(fitted.weights),
        "leave_one_out_weights": {k: list(v) for k, v in held_out_weights.items()},
    }
    for name, cats in per.items():
        rows = {CATEGORIES[c]: _mean(v) for c, v in sorted(cats.items())}
        rows["overall (1-4)"] = _mean([s for v in cats.values() for s in v])
        result[name] = rows
    latencies.sort()
    result["search_p50_ms"] = round(1000 * latencies[len(latencies) // 2], 2)
    return result


def latency(target: int = 10_000) -> dict[str, Any]:
    """conversation_search p50/p95 in process over one agent holding ``target`` turns (the dev split's turns
    repeated under new conversation ids), optimized as a long-lived store would be, every dev question once."""
    from tiermem.config import load_settings
    from tiermem.factory import open_memory

    samples = json.loads(DATA.read_text())
    settings = load_settings(data_dir=Path(tempfile.mkdtemp(prefix="tiermem-locomo-lat-")), embedding_model="default")
    memory = open_memory(settings)
    memory.archive.embedder.wait(None)
    agent = memory.ensure_agent("latency").id
    logged, copy = 0, 0
    while logged < target:
        for sample in samples:
            batch = [dict(m, conversation_id=f"{m['conversation_id']}-{copy}") for m in messages(sample)][: target - logged]
            for i in range(0, len(batch), BATCH):
                memory.archive.log_messages(agent, batch[i : i + BATCH])
            logged += len(batch)
            if logged >= target:
                break
        copy += 1
    memory.archive.store.optimize()
    questions = [qa["question"] for s in samples for qa in s["qa"] if qa.get("category") in CATEGORIES]
    times = []
    for q in questions:
        t = time.perf_counter()
        memory.archive.conversation_search(agent, q, limit=10)
        times.append(1000 * (time.perf_counter() - t))
    times.sort()
    return {"turns": logged, "searches": len(times), "p50_ms": round(times[len(times) // 2], 2),
            "p95_ms": round(times[int(len(times) * 0.95)], 2)}


def archival(quick: bool = False) -> dict[str, Any]:
    """The same questions against the turns stored as archival passages (content as inserted, dated by
    session, no previous turn in the keyword text): the shipped ranker against Letta's equal-weight fusion."""
    from tiermem.config import load_settings
    from tiermem.factory import open_memory
    from tiermem.ranking import DEFAULT_RANKER, Ranker

    samples = json.loads(DATA.read_text())[: 2 if quick else None]
    settings = load_settings(data_dir=Path(tempfile.mkdtemp(prefix="tiermem-locomo-arch-")), embedding_model="default")
    memory = open_memory(settings)
    memory.archive.embedder.wait(None)
    archive = memory.archive
    rankers = {"shipped ranker": DEFAULT_RANKER, "equal-weight RRF (Letta's archival default)": Ranker.legs(0.5, 0.5),
               "keyword leg only": Ranker.legs(0.0, 1.0), "vector leg only": Ranker.legs(1.0, 0.0)}
    per: dict[str, dict[int, list[tuple[float, float, float]]]] = {name: defaultdict(list) for name in rankers}
    for sample in samples:
        agent = memory.ensure_agent(sample["sample_id"]).id
        turns = messages(sample)
        archive.insert_many(agent, [(m["content"], [str(m["payload"])]) for m in turns],
                            created=[datetime.fromisoformat(m["timestamp"]) for m in turns])
        memory.archive.store.optimize()
        dia_of = {p.id: p.tags[0] for p in _all_passages(archive, agent)}
        for qa in sample["qa"]:
            gold = evidence_ids(qa.get("evidence", []), set(dia_of.values()))
            if qa.get("category") not in CATEGORIES or not gold:
                continue
            cands = archive.candidates("passages", agent, qa["question"], limit=10)
            for name, ranker in rankers.items():
                ranked = [dia_of[c.id] for c, _ in ranker.rank(qa["question"], cands)]
                per[name][qa["category"]].append(score(ranked, gold))
    return {name: {**{CATEGORIES[c]: _mean(v) for c, v in sorted(cats.items())},
                   "overall (1-4)": _mean([s for v in cats.values() for s in v])} for name, cats in per.items()}


def _all_passages(archive: Any, agent: str) -> list[Any]:
    out, offset = [], 0
    while True:
        page, total = archive.list_passages(agent, offset=offset, limit=200)
        out += page
        offset += len(page)
        if not page or offset >= total:
            return out


def _mean(scores: list[tuple[float, float, float]]) -> dict[str, float]:
    n = len(scores)
    return {"n": n, "R@5": round(sum(s[0] for s in scores) / n, 3), "R@10": round(sum(s[1] for s in scores) / n, 3),
            "MRR": round(sum(s[2] for s in scores) / n, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench locomo")
    parser.add_argument("--quick", action="store_true", help="first two conversations only")
    parser.add_argument("--archival", action="store_true", help="only: the questions against archival passages")
    parser.add_argument("--latency", type=int, metavar="TURNS", help="only: search latency over one agent with TURNS turns")
    args, _ = parser.parse_known_args(sys.argv[1:])
    if args.archival:
        arch = archival(args.quick)
        save("locomo_archival", arch)
        print("LoCoMo dev split as archival passages (archival_memory_search candidates, top 10):")
        for name, rows in arch.items():
            for cat, row in rows.items():
                print(f"  {name:44s} {cat:14s} {row['n']:5d} {row['R@5']:6.3f} {row['R@10']:6.3f} {row['MRR']:6.3f}")
        return
    if args.latency:
        lat = latency(args.latency)
        save("locomo_latency", lat)
        print(f"conversation_search over {lat['turns']} turns, {lat['searches']} searches in process: "
              f"p50 {lat['p50_ms']} ms, p95 {lat['p95_ms']} ms (load {os.getloadavg()[0]:.1f})")
        return
    result = run(args.quick)
    save("locomo", result)
    print(f"LoCoMo dev split: {result['conversations']} conversations, {result['turns']} turns "
          f"(ingest {result['ingest_seconds']}s, total {result['seconds']}s); "
          f"{result['questions_skipped_no_evidence']} questions without a valid evidence id skipped; "
          f"conversation_search p50 {result['search_p50_ms']} ms")
    print(f"  features {result['features']}")
    print(f"  shipped weights      {result['shipped_weights']}")
    print(f"  fitted on all five   {result['fitted_on_all_weights']}")
    print(f"  {'ranker':28s} {'category':14s} {'n':>5s} {'R@5':>6s} {'R@10':>6s} {'MRR':>6s}")
    for name in RANKERS:
        for cat, row in result[name].items():
            print(f"  {name:28s} {cat:14s} {row['n']:5d} {row['R@5']:6.3f} {row['R@10']:6.3f} {row['MRR']:6.3f}")
