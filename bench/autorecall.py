"""Auto-recall's threshold on the LoCoMo dev split: precision and recall of "relevance >= t" (`python -m bench autorecall`).

What the ``UserPromptSubmit`` hook does for each prompt (``autorecall.recall``: archival and recall search, the
prompt's own session left out) is run for every question of categories 1-4, once against its own conversation's
memory (a positive: something relevant is stored) and once against the next conversation's (a negative: the
question is about people that memory never heard of). Each conversation is one agent, its turns logged as hooks log
them: role-tagged (``speaker_a`` -> user, ``speaker_b`` -> assistant), the text without the speaker's name
(``--named`` stores "Name: text" instead).

For each threshold t, a question "gets memories" when at least one hit has relevance >= t:

- precision = own-conversation questions that got memories / all questions that got memories;
- recall = own-conversation questions that got memories / own-conversation questions;
- evidence recall = own-conversation questions whose added memories include one of its evidence turns;
- evidence precision = added memories (own conversation) that are evidence turns.

The threshold shipped is the lowest t whose precision on all five conversations is >= 0.9; the leave-one-out line
chooses t that way on four conversations and scores the fifth (the figure to expect on conversations never seen).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from .common import machine, save
from .hooks import locomo_path
from .locomo import CATEGORIES, evidence_ids, messages, sessions

LIMIT = 5  # memories a prompt may get (the auto_recall_limit default)
TARGET = 0.9
GRID = [round(0.05 * i, 2) for i in range(1, 20)]


def ingest(memory: Any, sample: dict[str, Any], named: bool) -> tuple[str, dict[str, str]]:
    """One agent per conversation; (agent id, message id -> dia_id)."""
    agent = memory.ensure_agent(sample["sample_id"]).id
    a = sample["conversation"]["speaker_a"]
    rows = []
    for m in messages(sample):
        speaker, _, text = m["content"].partition(": ")
        rows.append({"role": "user" if speaker == a else "assistant", "content": m["content"] if named else text,
                     "timestamp": m["timestamp"], "payload": m["payload"], "conversation_id": sample["sample_id"]})
    for i in range(0, len(rows), 128):
        memory.archive.log_messages(agent, rows[i : i + 128])
    return agent, {msg.id: msg.payload for msg in memory.archive.messages_of(agent)}


def run(named: bool, quick: bool) -> dict[str, Any]:
    from tiermem import autorecall
    from tiermem.config import load_settings
    from tiermem.factory import open_memory

    samples = json.loads(locomo_path().read_text())[: 2 if quick else None]
    memory = open_memory(load_settings(data_dir=Path(tempfile.mkdtemp(prefix="tiermem-autorecall-")),
                                       embedding_model="default"))
    memory.archive.embedder.wait(None)
    agents, dia = [], {}
    for sample in samples:
        agent, ids = ingest(memory, sample, named)
        agents.append(agent)
        dia.update(ids)
    memory.archive.store.optimize()
    everything = autorecall.RecallSettings(threshold=0.0, limit=LIMIT, max_chars=100_000)
    rows: list[dict[str, Any]] = []  # one per question: the relevances it got, own and cross
    t0 = time.perf_counter()
    for n, sample in enumerate(samples):
        known = {t["dia_id"] for _, turns in sessions(sample["conversation"]) for t in turns}
        other = agents[(n + 1) % len(agents)]
        for qa in sample["qa"]:
            if qa.get("category") not in CATEGORIES:
                continue
            gold = set(evidence_ids(qa.get("evidence", []), known))
            own = autorecall.recall(memory, agents[n], qa["question"], session="bench-prompt", settings=everything)
            cross = autorecall.recall(memory, other, qa["question"], session="bench-prompt", settings=everything)
            rows.append({"conv": sample["sample_id"], "own": [(r.relevance, dia.get(r.id, "") in gold) for r in own],
                         "cross": [r.relevance for r in cross], "has_gold": bool(gold)})
    seconds = time.perf_counter() - t0
    table = {t: score(rows, t) for t in GRID}
    chosen = next((t for t in GRID if table[t]["precision"] >= TARGET), None)
    loo = leave_one_out(rows)
    return {"machine": machine(), "format": "named" if named else "role-tagged", "questions": len(rows),
            "seconds_per_question_pair": round(seconds / max(1, len(rows)), 4), "by_threshold": table,
            "chosen_threshold": chosen, "at_chosen": table.get(chosen) if chosen is not None else None,
            "leave_one_conversation_out": loo}


def score(rows: list[dict[str, Any]], t: float) -> dict[str, float]:
    tp = sum(any(r >= t for r, _ in q["own"]) for q in rows)
    fp = sum(any(r >= t for r in q["cross"]) for q in rows)
    with_gold = [q for q in rows if q["has_gold"]]
    ev = sum(any(r >= t and g for r, g in q["own"]) for q in with_gold)
    added = [g for q in rows for r, g in q["own"] if r >= t]
    return {"precision": round(tp / (tp + fp), 4) if tp + fp else 1.0, "recall": round(tp / len(rows), 4),
            "cross_questions_given_memories": round(fp / len(rows), 4),
            "evidence_recall": round(ev / len(with_gold), 4) if with_gold else 0.0,
            "evidence_precision": round(sum(added) / len(added), 4) if added else 0.0}


def leave_one_out(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Choose t on four conversations, count on the fifth; the held-out counts summed over the folds."""
    by_conv: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for q in rows:
        by_conv[q["conv"]].append(q)
    tp = fp = n = 0
    chosen = {}
    for conv, held in by_conv.items():
        rest = [q for c, qs in by_conv.items() if c != conv for q in qs]
        t = next((t for t in GRID if score(rest, t)["precision"] >= TARGET), GRID[-1])
        chosen[conv] = t
        tp += sum(any(r >= t for r, _ in q["own"]) for q in held)
        fp += sum(any(r >= t for r in q["cross"]) for q in held)
        n += len(held)
    return {"thresholds": chosen, "precision": round(tp / (tp + fp), 4) if tp + fp else 1.0,
            "recall": round(tp / n, 4) if n else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench autorecall")
    parser.add_argument("--named", action="store_true", help='store turns as "Name: text" instead of role-tagged')
    parser.add_argument("--quick", action="store_true", help="the first two conversations only")
    args, _ = parser.parse_known_args(sys.argv[2:])
    result = run(args.named, args.quick)
    save("autorecall" + ("_named" if args.named else ""), result)
    print(f"{result['questions']} questions, {result['format']} turns, each asked of its own conversation and of "
          f"another ({result['seconds_per_question_pair'] * 1000:.0f} ms per pair)")
    print("   t   precision  recall  cross-given  evidence-recall  evidence-precision")
    for t, s in result["by_threshold"].items():
        print(f"{t:5.2f} {s['precision']:10.3f} {s['recall']:7.3f} {s['cross_questions_given_memories']:11.3f} "
              f"{s['evidence_recall']:15.3f} {s['evidence_precision']:18.3f}")
    chosen = result["chosen_threshold"]
    if chosen is None:
        print(f"no threshold reaches precision {TARGET}")
    else:
        s = result["at_chosen"]
        print(f"lowest threshold with precision >= {TARGET}: {chosen} (precision {s['precision']:.3f}, "
              f"recall {s['recall']:.3f}, evidence recall {s['evidence_recall']:.3f})")
    loo = result["leave_one_conversation_out"]
    print(f"leave-one-conversation-out: precision {loo['precision']:.3f}, recall {loo['recall']:.3f} "
          f"(thresholds {loo['thresholds']})")


if __name__ == "__main__":
    main()
