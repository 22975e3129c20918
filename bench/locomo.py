"""LoCoMo retrieval benchmark for recall memory (turn level, categories 1-4), with leave-one-conversation-out.

    python -m bench locomo                  # the dev split (../shared/bench-data/locomo-dev.json), both formats
    python -m bench locomo --format role    # one storage format only (named | role)
    python -m bench locomo --quick          # first two conversations
    python -m bench locomo --latency 10000  # only: conversation_search p50/p95 over one agent with 10k turns
    python -m bench locomo --archival       # only: the facts benchmark of archival memory (``bench.locomo_facts``,
                                            # which ``bench/__main__.py`` runs instead of this module)
    python -m bench locomo --archival-turns # only: the same questions against the turns stored as archival passages

Every turn is logged through the public Archive API in one of two storage formats: **named**, a user message
"{speaker}: {text}"; **role**, as hosts log turns, without names: the first speaker's turns as ``user``, the
other's as ``assistant``, and the names only in the agent's blocks (``human``: "The user's name is {a}.",
``persona``: "I am {b}."). Image turns add " [image: {blip_caption}]"; timestamp = the session date; the dia_id
is kept in the unsearched payload. All conversations are ingested first (one agent each), the store is
optimized once so the full-text index covers every row, then each question of categories 1-4 is searched once
with ``conversation_search(limit=10)``, and its candidates are kept, with those of the same question asked of
another conversation's memory (the negatives of the relevance calibration).

The candidates are ranked by: the shipped ranker (checked to equal what conversation_search returned), a ranker
fitted on the other four conversations (leave-one-conversation-out, both formats' questions, listwise: the figure
that counts; the earlier pointwise fit beside it), one fitted on all five (printed: the weights to ship), and
each leg alone. The relevance calibration is
judged the same way (fitted on four conversations with their ranker, scored on the fifth): precision and recall
of "relevance >= t" (``bench.locomo_fit``). R@5 / R@10 are the fraction of evidence turns in the top k, MRR the
reciprocal rank of the first one (0 if none in the top 10); means are macro over questions. Malformed evidence
ids are split on ";" and spaces and ids matching no turn are dropped; questions left without evidence are
skipped. No parameter is chosen per conversation.
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
from .locomo_fit import (
    CATEGORIES,
    calibration_data,
    fit_calibration,
    fit_listwise,
    labelled,
    leave_one_out,
    ranked,
    score,
    table,
)


def _data() -> Path:
    """The dev split: $TIERMEM_LOCOMO_DEV, else ``shared/bench-data/locomo-dev.json`` beside the checkout or above it
    (the integration tree sits beside ``shared``; a worktree one level deeper)."""
    if os.environ.get("TIERMEM_LOCOMO_DEV"):
        return Path(os.environ["TIERMEM_LOCOMO_DEV"])
    for base in ROOT.parents:
        found = base / "shared" / "bench-data" / "locomo-dev.json"
        if found.exists():
            return found
    return ROOT.parent / "shared" / "bench-data" / "locomo-dev.json"


DATA = _data()
FORMATS = ("named", "role")
BATCH = 128  # messages per log_messages call (one embedding call each)
SHIPPED, LOO, IN_SAMPLE = "shipped ranker (in-sample)", "leave-one-conv-out", "fitted on all five"
POINTWISE = "leave-one-out, pointwise fit"
KEYWORD, VECTOR = "keyword leg only", "vector leg only"
RANKERS = (LOO, POINTWISE, SHIPPED, IN_SAMPLE, KEYWORD, VECTOR)


def sessions(conv: dict[str, Any]) -> list[tuple[datetime, list[dict[str, Any]]]]:
    out = []
    for key, turns in conv.items():
        m = re.fullmatch(r"session_(\d+)", key)
        if m and isinstance(turns, list) and turns:
            when = datetime.strptime(conv[f"{key}_date_time"], "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
            out.append((int(m.group(1)), when, turns))
    return [(when, turns) for _, when, turns in sorted(out, key=lambda s: s[0])]


def messages(sample: dict[str, Any], fmt: str = "named") -> list[dict[str, Any]]:
    """The conversation's turns as ``log_messages`` items, in the storage format ``fmt`` (named | role)."""
    first = sample["conversation"]["speaker_a"]
    out = []
    for when, turns in sessions(sample["conversation"]):
        for turn in turns:
            text = turn["text"] + (f" [image: {turn['blip_caption']}]" if turn.get("blip_caption") else "")
            role = "user" if fmt == "named" or turn["speaker"] == first else "assistant"
            out.append(
                {
                    "role": role,
                    "content": f"{turn['speaker']}: {text}" if fmt == "named" else text,
                    "timestamp": when.isoformat(),
                    "payload": turn["dia_id"],
                    "conversation_id": sample["sample_id"],
                }
            )
    return out


def name_blocks(memory: Any, agent: str, sample: dict[str, Any]) -> None:
    """The role format's names, where a host keeps them: the user's in ``human``, the agent's own in ``persona``."""
    from tiermem.domain.blocks import Rethink

    conv = sample["conversation"]
    memory.edit(agent, "human", Rethink(f"The user's name is {conv['speaker_a']}."))
    memory.edit(agent, "persona", Rethink(f"I am {conv['speaker_b']}."))


def evidence_ids(raw: list[str], known: set[str]) -> list[str]:
    ids = []
    for item in raw:
        for part in re.split(r"[;\s]+", item):
            if part in known and part not in ids:
                ids.append(part)
    return ids


def ingest(memory: Any, samples: list[dict[str, Any]], fmt: str) -> list[tuple[dict[str, Any], str, dict[str, str]]]:
    """Every conversation logged in format ``fmt``, one agent each: (sample, agent id, message id -> dia id)."""
    convs = []
    for sample in samples:
        agent = memory.ensure_agent(f"{sample['sample_id']}-{fmt}").id
        if fmt == "role":
            name_blocks(memory, agent, sample)
        batch = messages(sample, fmt)
        dia_of: dict[str, str] = {}
        for i in range(0, len(batch), BATCH):
            part = batch[i : i + BATCH]
            for message, item in zip(memory.archive.log_messages(agent, part), part, strict=True):
                dia_of[message.id] = str(item["payload"])
        convs.append((sample, agent, dia_of))
    return convs


def collect(
    memory: Any,
    convs: list[tuple[dict[str, Any], str, dict[str, str]]],
    fmt: str,
    latencies: list[float],
    *,
    unnamed: bool = False,
) -> tuple[list[dict[str, Any]], int]:
    """One search per question (checked against the shipped ranker over its candidates); the candidates, and the
    candidates of the same question asked of the next conversation's memory. Returns (questions, skipped).

    ``unnamed``: the questions with the two speakers' names left out ("What did Caroline research?" -> "What did
    research?"), as a prompt that names nobody would be: the relevance calibration is fitted and judged on both."""
    from tiermem.domain.search.query import without_names
    from tiermem.domain.search.ranking import DEFAULT_RANKER, features

    archive = memory.archive
    questions: list[dict[str, Any]] = []
    skipped = 0
    for n, (sample, agent, dia_of) in enumerate(convs):
        _, other, other_dia = convs[(n + 1) % len(convs)]
        known = set(dia_of.values())
        for qa in sample["qa"]:
            category = qa.get("category")
            if category not in CATEGORIES:
                continue
            gold = evidence_ids(qa.get("evidence", []), known)
            if not gold:
                skipped += 1
                continue
            query = qa["question"]
            if unnamed:
                query = without_names(query, [sample["conversation"]["speaker_a"], sample["conversation"]["speaker_b"]])
            t = time.perf_counter()
            result = archive.conversation_search(agent, query, limit=10)
            latencies.append(time.perf_counter() - t)
            if result.mode != "hybrid":
                raise RuntimeError(f"search ran in {result.mode!r} mode: {result.notes}")
            pool = archive.candidates("messages", agent, query, limit=10)
            shipped = [c.id for c, _ in DEFAULT_RANKER.rank(pool.query, pool.candidates, pool.context)][:10]
            if shipped != [h.id for h in result.hits]:
                raise RuntimeError("conversation_search and the shipped ranker over its candidates disagree")
            cross = archive.candidates("messages", other, query, limit=10)
            questions.append(
                {
                    "conv": sample["sample_id"],
                    "fmt": fmt,
                    "variant": "unnamed" if unnamed else "asked",
                    "category": category,
                    "gold": gold,
                    "query": query,
                    "pool": pool,
                    "dia": [dia_of[c.id] for c in pool.candidates],
                    "features": features(pool.query, pool.candidates, pool.context),
                    "cross": {
                        "pool": cross,
                        "dia": [other_dia[c.id] for c in cross.candidates],
                        "features": features(cross.query, cross.candidates, cross.context),
                    },
                }
            )
    return questions, skipped


def run(quick: bool = False, formats: tuple[str, ...] = FORMATS) -> dict[str, Any]:
    from tiermem.base.config import load_settings
    from tiermem.domain.factory import open_memory
    from tiermem.domain.search.ranking import (
        CALIBRATION_FEATURES,
        DEFAULT_CALIBRATION,
        DEFAULT_RANKER,
        FEATURES,
        Ranker,
    )

    samples = json.loads(DATA.read_text())[: 2 if quick else None]
    data_dir = Path(tempfile.mkdtemp(prefix="tiermem-locomo-"))
    memory = open_memory(load_settings(data_dir=data_dir, embedding_model="default"))
    memory.archive.embedder.wait(None)
    started = time.perf_counter()
    ingested = {fmt: ingest(memory, samples, fmt) for fmt in formats}
    ingest_s = time.perf_counter() - started
    memory.archive.store.indexes.optimize()  # waits for any background upkeep; the FTS index then covers every row

    questions: list[dict[str, Any]] = []
    latencies: dict[str, list[float]] = {fmt: [] for fmt in formats}
    skipped = 0
    for fmt in formats:
        found, skipped = collect(memory, ingested[fmt], fmt, latencies[fmt])
        questions += found + collect(memory, ingested[fmt], fmt, [], unnamed=True)[0]
    asked = [q for q in questions if q["variant"] == "asked"]

    fixed = {SHIPPED: DEFAULT_RANKER, KEYWORD: Ranker.legs(0.0, 1.0), VECTOR: Ranker.legs(1.0, 0.0)}
    fitted = Ranker(fit_listwise(labelled(asked)))
    fixed[IN_SAMPLE] = fitted
    calibration = fit_calibration(*calibration_data(questions, fitted))
    per: dict[str, dict[str, dict[int, list[tuple[float, float, float]]]]] = {
        fmt: {name: defaultdict(list) for name in fixed} for fmt in formats
    }
    for q in asked:
        for name, ranker in fixed.items():
            per[q["fmt"]][name][q["category"]].append(score([d for d, _, _ in ranked(q, ranker)], q["gold"]))
    held_out = leave_one_out(questions)
    result: dict[str, Any] = {
        "conversations": len(samples),
        "turns": sum(len(d) for _, _, d in ingested[formats[0]]),
        "questions_skipped_no_evidence": skipped,
        "ingest_seconds": round(ingest_s, 1),
        "seconds": round(time.perf_counter() - started, 1),
        "features": list(FEATURES),
        "shipped_weights": list(DEFAULT_RANKER.weights),
        "fitted_on_all_weights": list(fitted.weights),
        "calibration_features": [*CALIBRATION_FEATURES, "bias"],
        "shipped_calibration": [*DEFAULT_CALIBRATION.weights, DEFAULT_CALIBRATION.bias],
        "fitted_calibration": [*calibration[0], calibration[1]],
        "leave_one_out_weights": held_out["weights"],
        "relevance": held_out["relevance"],
        "reliability": held_out["reliability"],
        "thresholds_note": "precision: hits from other conversations' memories are the negatives; strict: every hit "
        "that is not evidence; recall: evidence turns in the top 10 with relevance >= t / all",
        "search_p50_ms": {fmt: round(1000 * sorted(v)[len(v) // 2], 2) for fmt, v in latencies.items()},
    }
    for fmt in formats:
        result[fmt] = {
            LOO: held_out["recall"][fmt],
            POINTWISE: held_out["recall_pointwise"][fmt],
            **{name: table(per[fmt][name]) for name in fixed},
        }
    return result


def log_copies(memory: Any, agent: str, samples: list[dict[str, Any]], target: int, fmt: str = "named") -> int:
    """Log ``target`` turns: the samples' turns in storage format ``fmt``, repeated under new conversation ids (one
    suffix per copy) as often as it takes; returns the turns logged."""
    logged, copy = 0, 0
    while logged < target:
        for sample in samples:
            batch = [dict(m, conversation_id=f"{m['conversation_id']}-{copy}") for m in messages(sample, fmt)]
            batch = batch[: target - logged]
            for i in range(0, len(batch), BATCH):
                memory.archive.log_messages(agent, batch[i : i + BATCH])
            logged += len(batch)
            if logged >= target:
                return logged
        copy += 1
    return logged


def latency(target: int = 10_000) -> dict[str, Any]:
    """conversation_search p50/p95 in process over one agent holding ``target`` turns (the dev split's turns
    repeated under new conversation ids), optimized as a long-lived store would be, every dev question once."""
    from tiermem.base.config import load_settings
    from tiermem.domain.factory import open_memory

    samples = json.loads(DATA.read_text())
    settings = load_settings(data_dir=Path(tempfile.mkdtemp(prefix="tiermem-locomo-lat-")), embedding_model="default")
    memory = open_memory(settings)
    memory.archive.embedder.wait(None)
    agent = memory.ensure_agent("latency").id
    logged = log_copies(memory, agent, samples, target)
    memory.archive.store.indexes.optimize()
    questions = [qa["question"] for s in samples for qa in s["qa"] if qa.get("category") in CATEGORIES]
    first = first_search(settings, agent, questions[:FIRST_RUNS])
    times = []
    for q in questions:
        t = time.perf_counter()
        memory.archive.conversation_search(agent, q, limit=10)
        times.append(1000 * (time.perf_counter() - t))
    times.sort()
    return {
        "turns": logged,
        "searches": len(times),
        "p50_ms": round(times[len(times) // 2], 2),
        "p95_ms": round(times[int(len(times) * 0.95)], 2),
        "first_search": first,
    }


FIRST_RUNS = 5  # fresh openings per way of meeting the first search
FIRST_MODES = ("no warm", "during warm", "after warm")


def first_search(settings: Any, agent: str, questions: list[str]) -> dict[str, Any]:
    """The first conversation_search of a freshly opened memory (as a new server process's; the model loaded, the
    store's files in the page cache): with no warm (it builds the agent's sitting index itself), right after
    ``Memory.warm`` started (it waits for the warm's build), and once the warm has finished (``Memory.settle``).
    Each question once per way, the ways interleaved; medians and each run, ms (the warm's own build: s)."""
    from tiermem.domain.factory import open_memory

    took: dict[str, list[float]] = {mode: [] for mode in FIRST_MODES}
    warm_s: list[float] = []
    for q in questions:
        for mode in FIRST_MODES:
            memory = open_memory(settings)
            memory.archive.embedder.wait(None)
            if mode != "no warm":
                started = time.perf_counter()
                memory.warm(agent)
                if mode == "after warm":
                    memory.settle(120)  # joins the warm
                    warm_s.append(round(time.perf_counter() - started, 3))
            t = time.perf_counter()
            memory.archive.conversation_search(agent, q, limit=10)
            took[mode].append(round(1000 * (time.perf_counter() - t), 1))
            memory.settle(120)
    return {
        "runs": len(questions),
        "warm_build_s": warm_s,
        **{mode: {"median_ms": sorted(v)[len(v) // 2], "each_ms": v} for mode, v in took.items()},
    }


def archival(quick: bool = False) -> dict[str, Any]:
    """The same questions against the turns stored as archival passages (content as inserted, dated by
    session, no previous turn in the keyword text): the shipped ranker against Letta's equal-weight fusion."""
    from tiermem.base.config import load_settings
    from tiermem.domain.factory import open_memory
    from tiermem.domain.search.ranking import DEFAULT_RANKER, Ranker

    samples = json.loads(DATA.read_text())[: 2 if quick else None]
    settings = load_settings(data_dir=Path(tempfile.mkdtemp(prefix="tiermem-locomo-arch-")), embedding_model="default")
    memory = open_memory(settings)
    memory.archive.embedder.wait(None)
    archive = memory.archive
    rankers = {
        "shipped ranker": DEFAULT_RANKER,
        "equal-weight RRF (Letta's archival default)": Ranker.legs(0.5, 0.5),
        "keyword leg only": Ranker.legs(0.0, 1.0),
        "vector leg only": Ranker.legs(1.0, 0.0),
    }
    per: dict[str, dict[int, list[tuple[float, float, float]]]] = {name: defaultdict(list) for name in rankers}
    for sample in samples:
        agent = memory.ensure_agent(sample["sample_id"]).id
        turns = messages(sample)
        archive.insert_many(
            agent,
            [(m["content"], [str(m["payload"])]) for m in turns],
            created=[datetime.fromisoformat(m["timestamp"]) for m in turns],
        )
        memory.archive.store.indexes.optimize()
        dia_of = {p.id: p.tags[0] for p in _all_passages(archive, agent)}
        for qa in sample["qa"]:
            gold = evidence_ids(qa.get("evidence", []), set(dia_of.values()))
            if qa.get("category") not in CATEGORIES or not gold:
                continue
            pool = archive.candidates("passages", agent, qa["question"], limit=10)
            for name, ranker in rankers.items():
                order = [dia_of[c.id] for c, _ in ranker.rank(pool.query, pool.candidates, pool.context)]
                per[name][qa["category"]].append(score(order, gold))
    return {name: table(cats) for name, cats in per.items()}


def _all_passages(archive: Any, agent: str) -> list[Any]:
    out, offset = [], 0
    while True:
        page, total = archive.list_passages(agent, offset=offset, limit=200)
        out += page
        offset += len(page)
        if not page or offset >= total:
            return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench locomo")
    parser.add_argument("--quick", action="store_true", help="first two conversations only")
    parser.add_argument("--format", choices=("both", *FORMATS), default="both", help="storage format(s) of the turns")
    parser.add_argument("--archival-turns", action="store_true", help="only: the questions against turns as passages")
    parser.add_argument(
        "--latency", type=int, metavar="TURNS", help="only: search latency over one agent with TURNS turns"
    )
    args, _ = parser.parse_known_args(sys.argv[1:])
    if args.archival_turns:
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
        print(
            f"conversation_search over {lat['turns']} turns, {lat['searches']} searches in process: "
            f"p50 {lat['p50_ms']} ms, p95 {lat['p95_ms']} ms (load {os.getloadavg()[0]:.1f})"
        )
        first = lat["first_search"]
        print(
            f"first search of a freshly opened memory, median of {first['runs']} (ms): "
            + ", ".join(f"{mode} {first[mode]['median_ms']} (each {first[mode]['each_ms']})" for mode in FIRST_MODES)
            + f"; the warm's build (s): {first['warm_build_s']}"
        )
        return
    formats = FORMATS if args.format == "both" else (args.format,)
    result = run(args.quick, formats)
    save("locomo", result)
    print(
        f"LoCoMo dev split: {result['conversations']} conversations, {result['turns']} turns per format "
        f"(ingest {result['ingest_seconds']}s, total {result['seconds']}s); "
        f"{result['questions_skipped_no_evidence']} questions without a valid evidence id skipped; "
        f"conversation_search p50 {result['search_p50_ms']} ms"
    )
    print(f"  features {result['features']}")
    print(f"  shipped weights      {result['shipped_weights']}")
    print(f"  fitted on all five   {result['fitted_on_all_weights']}")
    print(
        f"  calibration {result['calibration_features']}: shipped {result['shipped_calibration']}, "
        f"fitted on all five {result['fitted_calibration']}"
    )
    for fmt in formats:
        print(f"  [{fmt}] {'ranker':26s} {'category':14s} {'n':>5s} {'R@5':>6s} {'R@10':>6s} {'MRR':>6s}")
        for name in RANKERS:
            for cat, row in result[fmt][name].items():
                print(
                    f"  [{fmt}] {name:26s} {cat:14s} {row['n']:5d} {row['R@5']:6.3f} {row['R@10']:6.3f} {row['MRR']:6.3f}"
                )
    print(
        "  relevance >= t, leave-one-conversation-out (precision: other conversations' hits as the negatives; "
        "strict: every non-evidence hit):"
    )
    for key, rows in result["relevance"].items():
        for t, row in rows.items():
            print(
                f"  [{key}] t={t}  precision {row['precision']:.3f}  strict {row['strict']:.3f}  recall {row['recall']:.3f}"
                f"  kept {row['kept']} (cross {row['cross_kept']})"
            )
