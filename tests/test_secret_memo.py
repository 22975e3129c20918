"""``secret_scan.find`` remembers the findings of texts scanned lately: an agent file's import scans each long text
(a document kept for export, checked, stored, then checked as stored) once; what is found is what an uncached scan
finds, whatever is done to a returned list; the findings remembered are bounded, kept by digest."""

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


def test_remembered_findings_are_bounded_and_hold_no_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(secret_scan, "_memo", OrderedDict())
    monkeypatch.setattr(secret_scan, "_MEMO_TEXTS", 4)
    texts = [f"text number {i} key {AKIA} {'plain words ' * 80}" for i in range(10)]
    for text in texts:
        secret_scan.find(text)
    assert len(secret_scan._memo) == 4
    kept = list(secret_scan._memo)
    assert secret_scan._digest(texts[-1]) in kept and secret_scan._digest(texts[0]) not in kept  # the oldest go first
    for key, found in secret_scan._memo.items():  # a digest and spans: no text, no credential
        assert isinstance(key, bytes) and len(key) == 16 and AKIA.encode() not in key
        assert found and all(isinstance(f, secret_scan.Finding) for f in found)
    monkeypatch.setattr(secret_scan, "_MEMO_LONGEST", 100)
    huge = "plain words " * 1_000  # longer than the longest remembered: scanned, not remembered
    assert secret_scan.find(huge) == []
    assert secret_scan._digest(huge) not in secret_scan._memo


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
    memory = open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="hashing"))
    report = run_import(
        memory, FIXTURES / "letta_memgpt_agent_with_convo.af", fmt="af", agent="default", rename=None, replace=False
    )
    assert report["imported"]
    long = {text: n for text, n in scanned.items() if len(text) >= 1_000}
    assert long, "the import scans its documents"
    assert max(long.values()) == 1, sorted((n, len(t)) for t, n in long.items() if n > 1)
