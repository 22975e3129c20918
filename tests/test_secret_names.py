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


def test_a_memory_graphs_names_and_types_are_redacted_in_tags_too(settings: Settings, tmp_path: Path) -> None:
    graph = tmp_path / "memory.jsonl"
    graph.write_text(
        json.dumps({"type": "entity", "name": TOKEN, "entityType": "token", "observations": ["a github token"]})
        + "\n"
        + json.dumps({"type": "entity", "name": "Ada", "entityType": f"person {AKIA}", "observations": ["likes tea"]})
        + "\n"
        + json.dumps({"type": "relation", "from": "Ada", "to": "Bob", "relationType": f"knows {AKIA}"})
        + "\n"
    )
    memory = open_memory(settings)
    report = run_import(memory, graph, fmt="auto", agent="default", rename=None, replace=False)
    assert report["passages"] == 3
    agent = memory.named_agent("default").id
    tags = {t for p in memory.archive.rows.passages_of(agent) for t in p.tags}
    assert "entity:[redacted: GitHub token]" in tags and "type:person [redacted: AWS access key]" in tags
    assert "relation:knows [redacted: AWS access key]" in tags
    assert not any(TOKEN in t or AKIA in t for t in tags)
    notes = " ".join(report["notes"])
    assert "passage tags: GitHub token (1)" in notes and "passage tags: AWS access key (2)" in notes
    assert TOKEN not in notes and AKIA not in notes
    again = run_import(memory, graph, fmt="auto", agent="default", rename=None, replace=False)
    assert again["passages"] == 0 and again["already_present"] == 3 and again["notes"] == []  # nothing new
    assert TOKEN.encode() not in _everything(settings.resolved_data_dir())


def test_doctor_finds_and_redacts_credentials_in_tags_and_projects(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = open_memory(settings.model_copy(update={"secret_scan": "off"}))
    agent = memory.ensure_agent("default").id
    memory.archive.insert(agent, "the deploy notes", [f"entity:{TOKEN}", "ops"], project=f"/srv/{AKIA}")
    memory.archive.log_messages(agent, [{"role": "user", "content": "hello", "project": f"/srv/{AKIA}"}])
    audit = secret_audit.scan(open_memory(settings))
    places = sorted(f.where.split(" (", 1)[1] for f in audit.found)
    assert places == ["project)", "project)", "tag 1)"]
    assert secret_audit.doctor_secrets(settings) == 1
    out = capsys.readouterr().out
    assert "GitHub token" in out and TOKEN not in out and AKIA not in out
    assert secret_audit.doctor_secrets(settings, redact_found=True, yes=True) == 0
    memory = open_memory(settings)
    (passage,) = memory.archive.rows.passages_of(agent)
    assert passage.tags == ("entity:[redacted: GitHub token]", "ops")
    rows = [str(r) for t in ("messages", "passages") for r in memory.archive.rows.backup_rows(t, vectors=False)]
    assert not any(TOKEN in r or AKIA in r for r in rows)
    assert secret_audit.scan(memory).found == []


def test_a_folder_file_whose_name_holds_a_credential_is_skipped_and_named_redacted(
    settings: Settings, tmp_path: Path
) -> None:
    source = tmp_path / "src"
    (source / TOKEN).mkdir(parents=True)
    (source / f"notes-{TOKEN}.md").write_text("hello\n")
    (source / TOKEN / "a.md").write_text("hi\n")
    (source / "fine.md").write_text("fine\n")
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    memory.files.create_folder("code")
    report = upload_paths(memory, "code", [source])
    assert report.counts()["added"] == 1 and report.counts()["skipped"] == 2
    skipped = {r.name: r.reason for r in report.results if r.outcome == "skipped"}
    assert set(skipped) == {"notes-[redacted: GitHub token].md", "[redacted: GitHub token]/a.md"}
    assert all("its name holds a GitHub token" in why for why in skipped.values())
    assert TOKEN not in json.dumps(report.as_dict())
    assert not report.failed  # found walking a directory, as a bad name is
    named = upload_paths(memory, "code", [source / f"notes-{TOKEN}.md"])
    assert named.failed and TOKEN not in json.dumps(named.as_dict())  # a file named one by one: a failure
    synced = sync_folder(memory, "code", source)
    assert synced.counts()["skipped"] == 2 and TOKEN not in json.dumps(synced.as_dict())
    memory.files.attach(agent, "code")
    assert [f.name for f in memory.files.files("code")] == ["fine.md"]
    assert TOKEN not in memory.render_core(agent, with_metadata=False)
    with pytest.raises(SecretError, match="the file name would store a GitHub token") as refused:
        memory.files.upload("code", f"key-{TOKEN}\n.md", b"x")  # refused before the bad name is quoted
    assert TOKEN not in str(refused.value)
    assert TOKEN.encode() not in _everything(settings.resolved_data_dir())


def test_doctor_finds_a_stored_file_name_holding_a_credential_and_deletes_the_file(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = open_memory(settings.model_copy(update={"secret_scan": "off"}))
    memory.files.create_folder("ops")
    memory.files.upload("ops", f"notes-{TOKEN}.md", b"plain text\n")
    memory.files.upload("ops", "env.md", f"key {AKIA}\n".encode())
    assert secret_audit.doctor_secrets(settings) == 1
    out = capsys.readouterr().out
    assert "file ops/notes-[redacted: GitHub token].md (its name)" in out and "file ops/env.md" in out
    assert TOKEN not in out
    assert secret_audit.doctor_secrets(settings, redact_found=True, yes=True) == 0
    out = capsys.readouterr().out
    assert "deleted" in out and TOKEN not in out
    memory = open_memory(settings)
    assert [f.name for f in memory.files.files("ops")] == ["env.md"]
    assert "[redacted: AWS access key]" in memory.files.text("ops", "env.md")
    assert secret_audit.scan(memory).found == []


def test_doctor_deletes_a_file_named_with_a_credential_in_one_of_two_folders_named_alike(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two folders an older tiermem named alike: the file is deleted from its own folder, reached by its id (the
    name, refused for being two folders', left it in place)."""
    from dataclasses import replace

    memory = open_memory(settings.model_copy(update={"secret_scan": "off"}))
    ops = memory.files.create_folder("ops")
    memory.files.rows.put_folder(replace(ops, id="folder-ops-copy"))
    memory.files.upload("folder-ops-copy", f"notes-{TOKEN}.md", b"plain text\n")
    memory.files.upload(ops.id, "keep.md", b"kept\n")
    assert secret_audit.doctor_secrets(settings, redact_found=True, yes=True) == 0
    out = capsys.readouterr().out
    assert "deleted" in out and "NOT deleted" not in out and TOKEN not in out
    memory = open_memory(settings)
    assert memory.files.files("folder-ops-copy") == [] and [f.name for f in memory.files.files(ops.id)] == ["keep.md"]


def test_uploads_and_memories_imports_say_what_they_redacted(settings: Settings, tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "config.py").write_text(f'AWS_ACCESS_KEY_ID = "{AKIA}"\nGH = "{TOKEN}"\n')
    (source / "clean.py").write_text("x = 1\n")
    memory = open_memory(settings)
    memory.files.create_folder("code")
    report = upload_paths(memory, "code", [source])
    reasons = {r.name: r.reason for r in report.results}
    assert (
        reasons["config.py"] == "credentials redacted: AWS access key (1), GitHub token (1), each now [redacted: KIND]"
    )
    assert reasons["clean.py"] == ""
    memories = tmp_path / "memories"
    memories.mkdir()
    (memories / "aws.txt").write_text(f"the key is {AKIA}\n")
    first = run_import(memory, memories, fmt="memories", agent="default", rename=None, replace=False)
    assert first["blocks_created"] == ["aws"]
    assert first["notes"] == [
        "default: credentials redacted in block 'aws': AWS access key (1), each now [redacted: AWS access key]"
    ]
    again = run_import(memory, memories, fmt="memories", agent="default", rename=None, replace=False)
    assert again["blocks_unchanged"] == ["aws"] and again["conflicts"] == [] and again["notes"] == []


def test_a_memfs_or_memories_file_whose_name_holds_a_credential_is_skipped_not_the_import(
    settings: Settings, tmp_path: Path
) -> None:
    memfs = tmp_path / "memfs"
    (memfs / "system").mkdir(parents=True)
    (memfs / "system" / "ok.md").write_text("---\ndescription: fine\n---\nfine block\n")
    (memfs / f"{TOKEN}.md").write_text("---\ndescription: x\n---\nbody\n")
    memory = open_memory(settings)
    report = run_import(memory, memfs, fmt="auto", agent="default", rename=None, replace=False)
    assert report["format"] == "memfs"
    agent = memory.named_agent("default").id
    assert "system/ok" in {b.label for b in memory.blocks(agent)}
    (line,) = report["skipped"]
    assert line.startswith("[redacted: GitHub token].md: its name holds a GitHub token") and TOKEN not in line

    memories = tmp_path / "memories"
    memories.mkdir()
    (memories / "fine.md").write_text("fine\n")
    (memories / f"key-{AKIA}.md").write_text("short\n")
    (memories / f"long-{AKIA}.md").write_text("long text. " * 1000)
    report = run_import(memory, memories, fmt="memories", agent="other", rename=None, replace=False)
    assert report["blocks_created"] == ["fine"] and report["passages"] == 0
    assert len(report["skipped"]) == 2 and AKIA not in json.dumps(report)
    assert all("its name holds an AWS access key" in line for line in report["skipped"])
    assert AKIA.encode() not in _everything(settings.resolved_data_dir())
    assert TOKEN.encode() not in _everything(settings.resolved_data_dir())


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
