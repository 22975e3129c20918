"""`python -m bench files --quick` runs end to end on the hashing embedder and prints every figure it promises
(a smoke test of the benchmark, not a measurement: no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .conftest import ROOT

KEYS = (
    "ingest_files",
    "ingest_text_mb",
    "ingest_mb_per_s",
    "ingest_files_per_s",
    "backfill_chunks",
    "backfill_seconds",
    "backfill_chunks_per_s",
    "query_embed_p50_ms",
    "hit_at_5_sentence",
    "hit_at_5_phrase5",
    "latency_files",
    "grep_files_literal_p50_ms",
    "grep_files_regex_p50_ms",
    "grep_files_rare_p50_ms",
    "semantic_search_files_concept_p50_ms",
    "semantic_search_files_api_p50_ms",
    "resync",
    "resync_embedded_p50_s",
    "resync_unembedded_p50_s",
    "resync_embedded_middle_p50_s",
    "rss_mb",
    "targets",
)


def test_files_bench_quick_prints_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "files.json"
    run = subprocess.run(
        [sys.executable, "-m", "bench", "files", "--quick", "--model", "hashing", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    printed = {line.split(":", 1)[0] for line in run.stdout.splitlines() if ":" in line}
    assert [k for k in KEYS if k not in printed] == [], run.stdout
    figures = json.loads(out.read_text())
    assert figures["ingest"]["files"] == 40 and figures["ingest"]["mb_per_s"] > 0
    assert figures["backfill"]["complete"] and figures["latency_files"] == 100
    assert figures["hit_at_5"]["probes"] > 0 and figures["latency"]["grep_files"]["literal"]["n"] >= 5
    assert set(figures["rss_mb"]) == {"start", "before_ingest", "after_ingest", "after_backfill", "after_searches"}
