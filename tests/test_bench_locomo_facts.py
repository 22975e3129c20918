"""`python -m bench locomo --archival` (the facts benchmark of archival memory) runs end to end on a tiny LoCoMo-shaped
file and prints its figures: one conversation (no leave-one-out), and three (leave-one-conversation-out, with
the word-by-word matching and its weight chosen by nested leave-one-out). A smoke test
of the benchmark, not a measurement: no figure or timing is asserted beyond its shape."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import ROOT


def conversation(n: int, pet: str, town: str) -> dict[str, Any]:
    turns = [
        {"speaker": "Ann", "dia_id": "D1:1", "text": f"I adopted a {pet} last week!"},
        {"speaker": "Bo", "dia_id": "D1:2", "text": "Lovely. I am moving soon."},
        {"speaker": "Bo", "dia_id": "D1:3", "text": f"We are moving to {town} next month."},
    ]
    later = [{"speaker": "Ann", "dia_id": "D2:1", "text": "I started pottery classes."}]
    return {
        "sample_id": f"conv-{n}",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bo",
            "session_1": turns,
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_2": later,
            "session_2_date_time": "10:00 am on 2 June, 2023",
        },
        "observation": {
            "session_1_observation": {
                "Ann": [[f"Ann adopted a {pet}.", "D1:1"]],
                "Bo": [[f"Bo is moving to {town}.", "D1:3"]],
            },
            "session_2_observation": {"Ann": [["Ann started pottery classes.", ["D2:1"]]]},
        },
        "qa": [
            {"question": "What did Bo say?", "answer": "x", "evidence": ["D1:2"], "category": 1},  # no fact: skipped
            {"question": "What pet did Ann adopt?", "answer": pet, "evidence": ["D1:1"], "category": 4},
            {"question": "Where is Bo moving?", "answer": town, "evidence": ["D1:3"], "category": 4},
            {"question": "When did Ann start pottery?", "answer": "June 2023", "evidence": ["D2:1"], "category": 2},
            {"question": "Adversarial", "answer": "x", "evidence": ["D1:1"], "category": 5},  # not asked
        ],
    }


@pytest.mark.parametrize("convs", [1, 3])
def test_facts_bench_on_a_slice_prints_its_figures(tmp_path: Path, convs: int) -> None:
    data = tmp_path / "locomo.json"
    convs_data = [
        conversation(1, "puppy", "Lisbon"),
        conversation(2, "kitten", "Oslo"),
        conversation(3, "parrot", "Rome"),
    ]
    data.write_text(json.dumps(convs_data))
    out = tmp_path / "facts.json"
    run = subprocess.run(
        [sys.executable, "-m", "bench", "locomo", "--archival", "--convs", str(convs), "--questions", "3"]
        + ["--out", str(out)]
        + (["--token-match"] if convs > 1 else []),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TIERMEM_LOCOMO_DEV": str(data), "TIERMEM_DATA_DIR": str(tmp_path / "home")},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["conversations"] == convs and figures["facts"] == 3 * convs
    assert figures["questions"] == 3 * convs and figures["questions_skipped_no_fact"] == convs
    recall = figures["recall"]
    names = {"shipped passage ranker", "BM25 (facts)", "turn ranker", "equal-weight RRF"}
    assert names <= set(recall), recall
    assert recall["shipped passage ranker"]["overall (1-4)"]["n"] == 3 * convs
    assert set(recall["shipped passage ranker"]) == {"temporal", "single-hop", "overall (1-4)"}
    assert ("leave-one-conv-out fit" in recall) == (convs > 1) == ("LOO fit + token match" in recall)
    token_rows = {"LOO fit + token match (int8)", "LOO fit + token match + reverse", "LOO score + w x token match"}
    assert (token_rows <= set(recall)) == (convs > 2), recall
    assert (sorted(figures.get("token_match_weights_chosen", {})) == ["conv-1", "conv-2", "conv-3"]) == (convs > 2)
    assert "LoCoMo facts benchmark" in run.stdout and "BM25 (facts)" in run.stdout
    lines = [line for line in run.stdout.splitlines() if "shipped passage ranker" in line and "overall" in line]
    assert len(lines) == 1 and len(lines[0].split()) == 9, run.stdout  # name (3 words), category (2), n, R@5, R@10, MRR
