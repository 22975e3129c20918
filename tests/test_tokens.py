"""Offline tiktoken encodings: hash-checked, never downloaded; token budgets."""

from __future__ import annotations

import gzip
import hashlib
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tiermem.base.errors import TokenizerError
from tiermem.domain.tokens import (
    _PATTERNS,
    _SPECIAL,
    EXPECTED_SHA256,
    count_tokens,
    fit_to_budget,
    get_encoding,
    load_ranks,
    rank_file,
    truncate,
)

from .conftest import PYTHON, ROOT

NO_NETWORK = (
    "import socket\n"
    "def _refuse(*a, **k):\n"
    "    raise OSError('network use attempted')\n"
    "socket.socket.connect = socket.socket.connect_ex = _refuse\n"
    "socket.create_connection = socket.getaddrinfo = _refuse\n"
)


def test_counts_match_the_published_encodings() -> None:
    assert count_tokens("hello world") == 2
    assert count_tokens("tiktoken is great!") == 6
    assert count_tokens("hello world", "o200k_base") == 2
    assert count_tokens("") == 0
    assert count_tokens("<|endoftext|>") > 1  # special tokens are plain text here
    enc = get_encoding()
    assert enc is get_encoding("cl100k_base")  # built once
    assert enc.n_vocab == 100277 and get_encoding("o200k_base").n_vocab == 200019
    assert enc.decode(enc.encode("round trip ✓ 漢字")) == "round trip ✓ 漢字"
    with pytest.raises(TokenizerError, match="use 'cl100k_base' or 'o200k_base'"):
        get_encoding("p50k_base")  # type: ignore[arg-type]


def test_constants_equal_tiktokens_own_definitions() -> None:
    """Run tiktoken_ext.openai_public's constructors with the file loader stubbed out (no download)."""
    import tiktoken_ext.openai_public as public

    source = Path(public.__file__).read_text()
    namespace: dict[str, Any] = {}
    exec(compile(source, public.__file__, "exec"), namespace)
    hashes: dict[str, str] = {}
    namespace["load_tiktoken_bpe"] = lambda url, expected_hash=None: hashes.setdefault(url, expected_hash) and {}
    for name in ("cl100k_base", "o200k_base"):
        spec = namespace[name]()
        assert spec["pat_str"] == _PATTERNS[name]
        assert spec["special_tokens"] == _SPECIAL[name]
        assert [h for url, h in hashes.items() if url.endswith(f"/{name}.tiktoken")] == [EXPECTED_SHA256[name]]


def test_packaged_files_have_the_published_hashes() -> None:
    for name, expected in EXPECTED_SHA256.items():
        assert hashlib.sha256(gzip.decompress(rank_file(name).read_bytes())).hexdigest() == expected


def test_tampered_or_broken_data_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "cl100k_base.tiktoken.gz"
    raw = gzip.decompress(rank_file("cl100k_base").read_bytes())
    bad.write_bytes(gzip.compress(raw.replace(b"IQ== 0", b"IQ== 9", 1)))
    with pytest.raises(TokenizerError, match=f"{bad} has sha256 [0-9a-f]{{64}}, expected 223921b7.*reinstall"):
        load_ranks(bad, EXPECTED_SHA256["cl100k_base"])
    bad.write_bytes(b"not gzip")
    with pytest.raises(TokenizerError, match="Cannot read tokenizer data"):
        load_ranks(bad, EXPECTED_SHA256["cl100k_base"])
    with pytest.raises(TokenizerError, match="Cannot read tokenizer data"):
        load_ranks(tmp_path / "missing.tiktoken.gz", EXPECTED_SHA256["cl100k_base"])
    junk = b"!!notbase64 1\n"
    bad.write_bytes(gzip.compress(junk))
    with pytest.raises(TokenizerError, match="malformed"):
        load_ranks(bad, hashlib.sha256(junk).hexdigest())


def test_no_network_no_download_and_no_cache_writes(tmp_path: Path) -> None:
    cache = tmp_path / "tiktoken-cache"
    (tmp_path / "tmp").mkdir()
    code = NO_NETWORK + (
        "from tiermem.domain.tokens import count_tokens\n"
        "print(count_tokens('offline please'), count_tokens('offline please', 'o200k_base'))\n"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT / "src"),
        "TIKTOKEN_CACHE_DIR": str(cache),
        "DATA_GYM_CACHE_DIR": str(cache),
        "TMPDIR": str(tmp_path / "tmp"),
        "HOME": str(tmp_path),
    }
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2", "2"]
    assert not cache.exists() and list((tmp_path / "tmp").iterdir()) == []


def test_fit_to_budget() -> None:
    items = ["one two three"] * 10  # 3 tokens + 8 overhead = 11 each
    kept, cut = fit_to_budget(items, budget=40)
    assert len(kept) == 3 and cut
    assert fit_to_budget(items, budget=110) == (items, False)  # exactly fits
    assert fit_to_budget(items, budget=109) == (items[:9], True)
    assert fit_to_budget(items, budget=30, overhead=0) == (items, False)
    assert fit_to_budget([], budget=5) == ([], False)
    kept, cut = fit_to_budget(["word " * 500, "x"], budget=5)
    assert len(kept) == 1 and cut  # an oversized first result is still returned whole; the rest is cut
    assert fit_to_budget(["word " * 500], budget=5) == (["word " * 500], False)
    assert fit_to_budget(["word " * 500], budget=5, keep_first=False) == ([], True)


def test_truncate() -> None:
    text, cut = truncate("alpha beta gamma delta", 2)
    assert cut and text == "alpha beta"
    assert truncate("short", 10) == ("short", False)
    sample = "café 🎉🎉 漢字漢字 end"
    for n in range(count_tokens(sample)):
        text, cut = truncate(sample, n)
        assert cut and sample.startswith(text) and "\ufffd" not in text and count_tokens(text) <= n


def _exact_fit(items: list[str], budget: int, overhead: int = 8) -> tuple[list[str], bool]:
    """fit_to_budget's rule with every item counted by the encoding (the reference the shortcut must equal)."""
    kept: list[str] = []
    used = 0
    for item in items:
        cost = count_tokens(item) + overhead
        if used + cost > budget and kept:
            return kept, True
        kept.append(item)
        used += cost
    return kept, False


def test_fit_to_budget_equals_exact_counting_near_the_byte_bound() -> None:
    # the shortcut (UTF-8 bytes bound tokens) must never keep what exact counting would cut, nor cut what it keeps
    texts = ["hi", "café 🎉", "漢字漢字", "<|endoftext|>", " \n\t ", "a" * 40, "word " * 30, "\ud800 lone surrogate"]
    for n in range(1, len(texts) + 1):
        items = texts[:n]
        bytes_needed = sum(len(t.encode("utf-8", "surrogatepass")) + 8 for t in items)
        for budget in {1, 9, 30, bytes_needed - 1, bytes_needed, bytes_needed + 1, 10 * bytes_needed}:
            assert fit_to_budget(items, budget) == _exact_fit(items, budget), (items, budget)


def test_short_results_fit_without_loading_the_encoding() -> None:
    # a few short search results under a 4,000-token budget: no tiktoken in the process (~40 MB resident)
    code = (
        "import sys\nfrom tiermem.domain.tokens import fit_to_budget\n"
        "print(fit_to_budget(['Ada moved to Lisbon.'] * 10, 4000), 'tiktoken' in sys.modules)\n"
        "fit_to_budget(['x ' * 3000], 4000, keep_first=False)\n"
        "print('tiktoken' in sys.modules)\n"
    )
    out = subprocess.run(
        [PYTHON, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "src")},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == [f"({['Ada moved to Lisbon.'] * 10!r}, False) False", "True"]


def test_an_encoding_still_counts_after_its_rank_dict_is_freed() -> None:
    enc = get_encoding()
    assert enc._mergeable_ranks == {}  # handed to the Rust tokenizer, then emptied: ~16 MB not kept twice
    assert enc.n_vocab == 100277 and enc.encode("hello world") == [15339, 1917]
    assert enc.decode_single_token_bytes(15339) == b"hello"
