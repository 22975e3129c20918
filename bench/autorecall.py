"""Auto-recall's threshold on the LoCoMo dev split: precision and recall of "relevance >= t" (`python -m bench autorecall`).

What the ``UserPromptSubmit`` hook does for each prompt (``autorecall.recall``: archival and recall search, the
prompt's own session left out) is run for every question of categories 1-4, once against its own conversation's
memory (a positive: something relevant is stored) and once against the next conversation's (a negative: the
question is about people that memory never heard of). Each conversation is one agent, its turns logged as hooks log
them: role-tagged (``speaker_a`` -> user, ``speaker_b`` -> assistant), the text without the speaker's name
(``--named`` stores "Name: text" instead).

For each threshold t, a question "gets memories" when at least one of the (at most ``LIMIT``) memories auto-recall
would add has relevance >= t:

- precision = own-conversation questions that got memories / all questions that got memories (the negatives: the
  same questions asked of another conversation's memory);
- recall = own-conversation questions that got memories / own-conversation questions;
- memory precision = memories added from the own conversation / all memories added (the hit-level figure);
- evidence recall = evidence turns among the memories added / all evidence turns; evidence precision = memories
  added (own conversation) that are evidence turns.

The bench prints the lowest t whose precision and memory precision on all five conversations are both >= 0.9, the
leave-one-out figures (t chosen that way on four conversations, scored on the fifth: what to expect on
conversations never seen), and the figures at the shipped ``auto_recall_threshold``.
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
from .locomo import CATEGORIES, DATA, evidence_ids, messages, name_blocks, sessions

LIMIT = 5  # memories a prompt may get (the auto_recall_limit default)
TARGET = 0.9
GRID = [round(0.025 * i, 3) for i in range(1, 40)]


def ingest(memory: Any, sample: dict[str, Any], named: bool) -> tuple[str, dict[str, str]]:
    """One agent per conversation, stored as ``bench locomo`` stores it; (agent id, message id -> dia_id)."""
    agent = memory.ensure_agent(sample["sample_id"]).id
    rows = messages(sample, "named" if named else "role")
    if not named:
        name_blocks(memory, agent, sample)  # the names a host keeps: the user's in human, its own in persona
    for i in range(0, len(rows), 128):
        memory.archive.log_messages(agent, rows[i : i + 128])
    return agent, {msg.id: msg.payload for msg in memory.archive.rows.messages_of(agent)}


def run(named: bool, quick: bool) -> dict[str, Any]:
    from tiermem.base.config import load_settings
    from tiermem.domain import autorecall
    from tiermem.domain.factory import open_memory

    samples = json.loads(DATA.read_text())[: 2 if quick else None]
    memory = open_memory(
        load_settings(data_dir=Path(tempfile.mkdtemp(prefix="tiermem-autorecall-")), embedding_model="default")
    )
    memory.archive.embedder.wait(None)
    agents, dia = [], {}
    for sample in samples:
        agent, ids = ingest(memory, sample, named)
        agents.append(agent)
        dia.update(ids)
    memory.archive.store.indexes.optimize()
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
            rows.append(
                {
                    "conv": sample["sample_id"],
                    "own": [(r.relevance, dia.get(r.id, "") in gold) for r in own],
                    "cross": [r.relevance for r in cross],
                    "gold": len(gold),
                }
            )
    seconds = time.perf_counter() - t0
    table = {t: score(rows, t) for t in GRID}
    chosen = next((t for t in GRID if meets(table[t])), None)
    loo = leave_one_out(rows)
    from tiermem.base.config import Settings

    shipped = Settings.model_fields["auto_recall_threshold"].default
    return {
        "shipped_threshold": shipped,
        "at_shipped": score(rows, shipped),
        "machine": machine(),
        "format": "named" if named else "role-tagged",
        "questions": len(rows),
        "seconds_per_question_pair": round(seconds / max(1, len(rows)), 4),
        "by_threshold": table,
        "chosen_threshold": chosen,
        "at_chosen": table.get(chosen) if chosen is not None else None,
        "leave_one_conversation_out": loo,
    }


def score(rows: list[dict[str, Any]], t: float) -> dict[str, float]:
    tp = sum(any(r >= t for r, _ in q["own"]) for q in rows)
    fp = sum(any(r >= t for r in q["cross"]) for q in rows)
    own_hits = sum(r >= t for q in rows for r, _ in q["own"])
    cross_hits = sum(r >= t for q in rows for r in q["cross"])
    gold = sum(q["gold"] for q in rows)
    found = sum(r >= t and g for q in rows for r, g in q["own"])
    return {
        "precision": round(tp / (tp + fp), 4) if tp + fp else 1.0,
        "recall": round(tp / len(rows), 4),
        "cross_questions_given_memories": round(fp / len(rows), 4),
        "memory_precision": round(own_hits / (own_hits + cross_hits), 4) if own_hits + cross_hits else 1.0,
        "evidence_recall": round(found / gold, 4) if gold else 0.0,
        "evidence_precision": round(found / own_hits, 4) if own_hits else 0.0,
    }


def meets(s: dict[str, float]) -> bool:
    return s["precision"] >= TARGET and s["memory_precision"] >= TARGET


def leave_one_out(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Choose t on four conversations, count on the fifth; the held-out counts summed over the folds."""
    by_conv: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for q in rows:
        by_conv[q["conv"]].append(q)
    chosen, held_out = {}, []
    for conv, held in by_conv.items():
        rest = [q for c, qs in by_conv.items() if c != conv for q in qs]
        chosen[conv] = next((t for t in GRID if meets(score(rest, t))), GRID[-1])
        held_out += [dict(q, t=chosen[conv]) for q in held]
    tp = sum(any(r >= q["t"] for r, _ in q["own"]) for q in held_out)
    fp = sum(any(r >= q["t"] for r in q["cross"]) for q in held_out)
    own_hits = sum(r >= q["t"] for q in held_out for r, _ in q["own"])
    cross_hits = sum(r >= q["t"] for q in held_out for r in q["cross"])
    found = sum(r >= q["t"] and g for q in held_out for r, g in q["own"])
    gold = sum(q["gold"] for q in held_out)
    return {
        "thresholds": chosen,
        "precision": round(tp / (tp + fp), 4) if tp + fp else 1.0,
        "recall": round(tp / len(held_out), 4) if held_out else 0.0,
        "memory_precision": round(own_hits / (own_hits + cross_hits), 4) if own_hits + cross_hits else 1.0,
        "evidence_recall": round(found / gold, 4) if gold else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench autorecall")
    parser.add_argument("--named", action="store_true", help='store turns as "Name: text" instead of role-tagged')
    parser.add_argument("--quick", action="store_true", help="the first two conversations only")
    args, _ = parser.parse_known_args(sys.argv[2:])
    result = run(args.named, args.quick)
    save("autorecall" + ("_named" if args.named else ""), result)
    print(
        f"{result['questions']} questions, {result['format']} turns, each asked of its own conversation and of "
        f"another ({result['seconds_per_question_pair'] * 1000:.0f} ms per pair)"
    )
    print("   t   precision  recall  cross-given  memory-precision  evidence-recall  evidence-precision")
    for t, s in result["by_threshold"].items():
        print(
            f"{t:5.2f} {s['precision']:10.3f} {s['recall']:7.3f} {s['cross_questions_given_memories']:11.3f} "
            f"{s['memory_precision']:16.3f} {s['evidence_recall']:15.3f} {s['evidence_precision']:18.3f}"
        )
    chosen = result["chosen_threshold"]
    if chosen is None:
        print(f"no threshold reaches precision {TARGET}")
    else:
        s = result["at_chosen"]
        print(
            f"lowest threshold with precision and memory precision >= {TARGET}: {chosen} (precision "
            f"{s['precision']:.3f}, recall {s['recall']:.3f}, memory precision {s['memory_precision']:.3f}, "
            f"evidence recall {s['evidence_recall']:.3f})"
        )
    s = result["at_shipped"]
    print(
        f"shipped threshold (auto_recall_threshold) {result['shipped_threshold']}: precision {s['precision']:.3f}, "
        f"recall {s['recall']:.3f}, memory precision {s['memory_precision']:.3f}, evidence recall "
        f"{s['evidence_recall']:.3f}"
    )
    loo = result["leave_one_conversation_out"]
    print(
        f"leave-one-conversation-out: precision {loo['precision']:.3f}, recall {loo['recall']:.3f}, memory "
        f"precision {loo['memory_precision']:.3f}, evidence recall {loo['evidence_recall']:.3f} "
        f"(thresholds {loo['thresholds']})"
    )


if __name__ == "__main__":
    main()
