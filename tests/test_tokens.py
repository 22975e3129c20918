"""Offline tiktoken encodings: hash-checked, never downloaded; token budgets."""

from __future__ import annotations

import gzip
import subprocess
from pathlib import Path

import pytest

from tiermem.errors import TokenizerError
from tiermem.tokens import EXPECTED_SHA256, count_tokens, fit_to_budget, load_ranks, rank_file, truncate

from .conftest import PYTHON, ROOT


def test_counts_match_the_published_encodings() -> None:
    assert count_tokens("hello world") == 2
    assert count_tokens("tiktoken is great!") == 6
    assert count_tokens("hello world", "o200k_base") == 2
    assert count_tokens("<|endoftext|>") > 1  # special tokens are plain text here


def test_tampered_data_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "cl100k_base.tiktoken.gz"
    raw = gzip.decompress(rank_file("cl100k_base").read_bytes())
    bad.write_bytes(gzip.compress(raw.replace(b"IQ== 0", b"IQ== 9", 1)))
    with pytest.raises(TokenizerError, match="expected 223921b7"):
        load_ranks(bad, EXPECTED_SHA256["cl100k_base"])
    bad.write_bytes(b"not gzip")
    with pytest.raises(TokenizerError, match="Cannot read tokenizer data"):
        load_ranks(bad, EXPECTED_SHA256["cl100k_base"])


def test_no_download_and_no_cache_writes(tmp_path: Path) -> None:
    cache = tmp_path / "tiktoken-cache"
    code = "from tiermem.tokens import count_tokens; print(count_tokens('offline please'))"
    env = {"PATH": "/usr/bin:/bin", "TIKTOKEN_CACHE_DIR": str(cache), "TMPDIR": str(tmp_path / "tmp"),
           "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}
    (tmp_path / "tmp").mkdir()
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "2"
    assert not cache.exists() and list((tmp_path / "tmp").iterdir()) == []


def test_budget_and_truncate() -> None:
    items = ["one two three"] * 10
    kept, cut = fit_to_budget(items, budget=40)
    assert 1 <= len(kept) < 10 and cut
    kept, cut = fit_to_budget(items, budget=10_000)
    assert len(kept) == 10 and not cut
    kept, cut = fit_to_budget(["word " * 500], budget=5)
    assert len(kept) == 1 and cut is False  # a single oversized result is still returned whole
    text, cut = truncate("alpha beta gamma delta", 2)
    assert cut and text == "alpha beta"
