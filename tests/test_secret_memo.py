"""``secret_scan.find`` remembers the findings of texts scanned lately: an agent file's import scans each long text
(a document kept for export, checked, stored, then checked as stored) once; what is found is what an uncached scan
finds, whatever is done to a returned list; the texts remembered are bounded in characters."""

from __future__ import annotations

import json
from collections import Counter, OrderedDict
from pathlib import Path

import pytest

from tiermem.base.config import load_settings
from tiermem.domain import secret_json, secret_scan
from tiermem.domain.factory import open_memory
from tiermem.interop.commands import run_import

from .conftest import ROOT
from .test_secrets import AKIA, GHP

FIXTURES = ROOT / "tests" / "fixtures" / "agent-file"

TEXTS = [
    f"my key is {AKIA} ok",
    f"export GITHUB_TOKEN={GHP}\nand more",
    json.dumps({"password": "Zq8vN3mXk9vQ2mPz7a", "note": "nothing"}),
    json.dumps({"tool_calls": [{"arguments": json.dumps({"api_key": "Xk9vQ2mPz7aLq4Rt", "q": f"see {GHP}"})}]}),
    json.dumps({f"token {GHP}": "x", "list": ["postgres://u:Hunter2Secret9@h/db"]}),
    "plain prose without any credential in it, long enough to be scanned " * 40,
    "short",
]


@pytest.mark.parametrize("text", TEXTS)
def test_find_remembered_is_an_uncached_scan(text: str) -> None:
    expected = secret_scan._find(text) if len(text) >= 8 else []
    first = secret_scan.find(text)
    assert first == expected
    first.clear()  # a caller's list is its own: the next call finds the same
    assert secret_scan.find(text) == expected
    assert secret_json.redact_json(text) == secret_json.redact_json(text)


def test_remembered_texts_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(secret_scan, "_memo", OrderedDict())
    monkeypatch.setattr(secret_scan, "_memo_chars", 0)
    monkeypatch.setattr(secret_scan, "_MEMO_CHARS", 4_000)
    texts = [f"text number {i} {'plain words ' * 80}" for i in range(10)]
    for text in texts:
        secret_scan.find(text)
    assert 0 < secret_scan._memo_chars <= 4_000
    assert secret_scan._memo_chars == sum(map(len, secret_scan._memo))
    assert texts[-1] in secret_scan._memo and texts[0] not in secret_scan._memo  # the oldest go first
    huge = "plain words " * 1_000  # over a quarter of the bound: scanned, not remembered
    assert secret_scan.find(huge) == []
    assert huge not in secret_scan._memo


def test_an_agent_file_import_scans_each_long_text_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The documents an import keeps for export are checked, scrubbed, stored and checked as stored: the detectors
    run over each long text once (they ran over the same 60,000 characters three to five times)."""
    scanned: Counter[str] = Counter()
    raw = secret_scan._raw

    def counted(text: str, json_text: bool) -> list[tuple[int, int, int, str]]:
        scanned[text] += 1
        return raw(text, json_text)

    monkeypatch.setattr(secret_scan, "_raw", counted)
    monkeypatch.setattr(secret_scan, "_memo", OrderedDict())
    monkeypatch.setattr(secret_scan, "_memo_chars", 0)
    memory = open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="hashing"))
    report = run_import(
        memory, FIXTURES / "letta_memgpt_agent_with_convo.af", fmt="af", agent="default", rename=None, replace=False
    )
    assert report["imported"]
    long = {text: n for text, n in scanned.items() if len(text) >= 1_000}
    assert long, "the import scans its documents"
    assert max(long.values()) == 1, sorted((n, len(t)) for t, n in long.items() if n > 1)
