"""Letta agent files whose blocks have path-shaped labels: import, shared blocks, export with the file's spelling, re-import."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tiermem.base.config import Settings, load_settings
from tiermem.base.errors import ValidationError
from tiermem.domain.blocks import is_pinned
from tiermem.domain.factory import open_memory
from tiermem.domain.memory import Memory
from tiermem.interop.commands import run_export, run_import

from .conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "agent-file"


@pytest.fixture
def mem(settings: Settings) -> Memory:
    return open_memory(settings)


def blocks_of(memory: Memory, name: str) -> dict[str, tuple[str, int, str, bool]]:
    agent = memory.get_agent(name)
    return {b.label: (b.value, b.limit, b.description, b.read_only) for b in memory.blocks(agent.id)}


def test_path_labels_import_and_round_trip(mem: Memory, tmp_path: Path) -> None:
    report = run_import(mem, FIXTURES / "memfs_labels.af", fmt="auto", agent="default", rename=None, replace=False)
    assert sorted(report["imported"]) == ["ezra", "ezra-sleeptime"] and report["blocks"] == 7
    source = json.loads((FIXTURES / "memfs_labels.af").read_text())
    ezra = blocks_of(mem, "ezra")
    assert sorted(ezra) == [
        "corrections/ezra-mistakes",
        "note_directory",
        "system/human/family",
        "system/persona",
        "system/references/lettabot",
    ]
    for b in source["blocks"]:
        label = "/".join(s for s in b["label"].split("/") if s)
        assert ezra[label] == (b["value"], b["limit"], b["description"], b["read_only"])
    # shared blocks stay one block: an edit through one agent is seen by the other
    agent, helper = mem.get_agent("ezra"), mem.get_agent("ezra-sleeptime")
    from tiermem.domain.blocks import Append

    mem.edit(helper.id, "system/human/family", Append("Dog: Rex"))
    assert mem.block(agent.id, "system/human/family").value.endswith("Dog: Rex")
    assert mem.block(agent.id, "/note_directory").label == "note_directory"
    unsupported = json.loads(agent.metadata["letta_unsupported"])
    assert unsupported == {"tool_rules": 1, "tools": ["web_search"]}
    # export: Letta gets its own spelling of every label back; re-import is lossless for blocks and messages
    mem.update_block(agent.id, "corrections/ezra-mistakes", pinned=False)  # detached stays detached
    out = tmp_path / "ezra.af"
    run_export(mem, agent="ezra", fmt="af", output=str(out), vectors=False)
    exported = json.loads(out.read_text())
    assert sorted(b["label"] for b in exported["blocks"]) == sorted(b["label"] for b in source["blocks"])
    other = open_memory(load_settings(data_dir=tmp_path / "other", embedding_model="hashing"))
    run_import(other, out, fmt="af", agent="default", rename=None, replace=False)
    assert blocks_of(other, "ezra") == blocks_of(mem, "ezra")
    pinned = {b.label: is_pinned(b) for b in other.blocks(other.get_agent("ezra").id)}
    assert [label for label, p in pinned.items() if not p] == ["corrections/ezra-mistakes"]
    again = other.get_agent("ezra")
    assert [(m.role, m.content) for m in other.archive.rows.messages_of(again.id)] == [
        (m.role, m.content) for m in mem.archive.rows.messages_of(agent.id)
    ]
    # and exporting the re-imported agent gives the same blocks again (labels as Letta spelled them)
    out2 = tmp_path / "ezra2.af"
    run_export(other, agent="ezra", fmt="af", output=str(out2), vectors=False)

    def strip(d: dict) -> list:
        return sorted((b["label"], b["value"], b["limit"], b["description"], b["read_only"]) for b in d["blocks"])

    assert strip(json.loads(out2.read_text())) == strip(exported)


def test_older_single_agent_format_with_path_labels(mem: Memory) -> None:
    report = run_import(mem, FIXTURES / "memfs_labels_v1.af", fmt="af", agent="default", rename=None, replace=False)
    assert report["imported"] == ["family-helper"]
    assert sorted(blocks_of(mem, "family-helper")) == ["note_directory", "school/term-dates", "system/human/family"]


def test_a_label_that_cannot_be_normalised_is_refused_and_nothing_is_written(mem: Memory, tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "memfs_labels.af").read_text())
    data["blocks"][4]["label"] = "corrections/../secrets"  # the last block: the others would be valid
    bad = tmp_path / "bad.af"
    bad.write_text(json.dumps(data))
    with pytest.raises(ValidationError, match="Invalid block label 'corrections/../secrets': '.' and '..' segments"):
        run_import(mem, bad, fmt="af", agent="default", rename=None, replace=False)
    assert [len(mem.core.all_rows(t)) for t in ("agents", "blocks", "attachments")] == [0, 0, 0]
    assert mem.archive.store.rows.count("messages") == 0
