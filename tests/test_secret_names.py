"""Credentials in names and tags, not only in texts: a memory graph's entity names and types (stored as passage tags)
redacted with a note; a folder file or a MemFS or /memories file whose name holds one skipped and listed by its name
redacted; `doctor --secrets` finding them in tags, projects and file names; imports and uploads saying what they
redacted; and a refusal that never quotes a secret back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tiermem.base.config import Settings
from tiermem.base.errors import NotFoundError, SecretError, ValidationError
from tiermem.domain import secret_audit
from tiermem.domain.blocks import validate_label
from tiermem.domain.factory import open_memory
from tiermem.interop.commands import run_import
from tiermem.interop.folder_sync import sync_folder, upload_paths

TOKEN = "ghp_" + "Zq3xW9vB7nM2kL5jH8gF4dS1aP6oI0uY2tR4"  # a GitHub token's shape, split so no scanner flags this file
AKIA = "AKIA" + "Q3EGRIBFXPN7WMT4"


def _everything(memory_dir: Path) -> bytes:
    """Every byte stored under a data directory (SQLite, LanceDB files)."""
    return b"".join(p.read_bytes() for p in memory_dir.rglob("*") if p.is_file())


def test_a_refusal_never_quotes_a_credential_in_a_label(settings: Settings) -> None:
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    for label in (f"token {TOKEN}\n", f"a/.{TOKEN}", f"x/{TOKEN}" + "y" * 300):
        with pytest.raises(ValidationError) as bad:
            validate_label(label)
        assert TOKEN not in str(bad.value) and TOKEN[:20] not in str(bad.value), label
        assert "[redacted: GitHub token]" in str(bad.value) or "'[redacted: Git" in str(bad.value)
    with pytest.raises(NotFoundError) as missing:
        memory.block(agent, f"notes\t{TOKEN}")
    assert "No memory block with label 'notes\\t[redacted: GitHub token]'" in str(missing.value)
