"""MemFS directories: export an agent as one markdown file per block, import a directory back, two-way sync."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiermem.blocks import Append, is_pinned
from tiermem.config import BlockSpec, Settings, load_settings
from tiermem.errors import ValidationError
from tiermem.factory import open_memory
from tiermem.interop.commands import detect, run_export, run_import
from tiermem.memory import Memory



@pytest.fixture
def mem(settings: Settings) -> Memory:
    return open_memory(settings)


def snapshot(memory: Memory, agent: str) -> dict[str, tuple[str, str, int, bool, bool]]:
    a = memory.get_agent(agent)
    return {b.label: (b.value, b.description, b.limit, b.read_only, is_pinned(b)) for b in memory.blocks(a.id)}


def seed(memory: Memory) -> str:
    agent = memory.ensure_agent("ezra").id
    memory.create_block(agent, BlockSpec(label="system/human/family", value="Partner: Sam\n", description="Family: 'close'",
                                         limit=800))
    memory.create_block(agent, BlockSpec(label="notes/projects", value="---\ntiermem\n\n", description="Projects",
                                         read_only=True))
    memory.create_block(agent, BlockSpec(label="corrections/ezra-mistakes", value="Go? No: Python.", description=""))
    memory.update_block(agent, "notes/projects", pinned=False)
    memory.update_block(agent, "corrections/ezra-mistakes", pinned=False)
    return agent


def test_export_writes_one_file_per_block_and_import_reads_it_back(mem: Memory, tmp_path: Path) -> None:
    seed(mem)
    out = tmp_path / "memory"
    report = run_export(mem, agent="ezra", fmt="memfs", output=str(out), vectors=False)
    assert report["blocks"] == 5 and report["pinned"] == 3
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.md"))
    assert files == ["corrections/ezra-mistakes.md", "human.md", "notes/projects.md", "persona.md",
                     "system/human/family.md"]
    assert (out / "system/human/family.md").read_text() == (
        "---\ndescription: 'Family: ''close'''\nlimit: 800\nread_only: false\n---\nPartner: Sam\n\n"
    )
    # pinned is written only where it differs from the rule (system/ pinned, the rest detached)
    assert "pinned: true" in (out / "human.md").read_text() and "pinned" not in (out / "notes/projects.md").read_text()
    assert detect(out) == "memfs"
    other = open_memory(load_settings(data_dir=tmp_path / "other", embedding_model="hashing"))
    got = run_import(other, out, fmt="auto", agent="ezra", rename=None, replace=False)
    assert got["format"] == "memfs"
    assert snapshot(other, "ezra") == snapshot(mem, "ezra")
    # importing again changes nothing; exporting over an export is refused
    again = run_import(other, out, fmt="memfs", agent="ezra", rename=None, replace=False)
    assert again["blocks_created"] == [] and again["blocks_updated"] == [] and len(again["blocks_unchanged"]) == 5
    with pytest.raises(ValidationError, match="already holds .md files"):
        run_export(mem, agent="ezra", fmt="memfs", output=str(out), vectors=False)


def test_letta_code_directory_keeps_pinned_and_detached(mem: Memory, tmp_path: Path) -> None:
    root = tmp_path / "memory"
    (root / "system" / "persona").mkdir(parents=True)
    (root / "notes").mkdir()
    (root / ".git").mkdir()
    (root / ".git" / "HEAD.md").write_text("ignored")
    (root / "system" / "persona" / "git_safety.md").write_text("---\ndescription: Git rules\nlimit: 2000\n---\nNever force-push.\n")
    (root / "system" / "human.md").write_text("Name: Ada")  # no frontmatter, no final newline
    (root / "notes" / "projects.md").write_text("---\ndescription: |\n  Projects\n  in progress\n---\ntiermem\n")
    report = run_import(mem, root, fmt="auto", agent="work", rename=None, replace=False)
    assert sorted(report["blocks_created"]) == ["notes/projects", "system/human", "system/persona/git_safety"]
    blocks = snapshot(mem, "work")
    assert blocks["system/persona/git_safety"] == ("Never force-push.", "Git rules", 2000, False, True)
    assert blocks["system/human"] == ("Name: Ada", "", 5000, False, True)
    assert blocks["notes/projects"] == ("tiermem", "Projects\nin progress\n", 5000, False, False)
    core = mem.render_core(mem.get_agent("work").id)
    assert "<system/persona/git_safety>" in core and "<notes/projects>" not in core
    assert "- projects (notes/projects; 7 chars): Projects in progress" in core


@pytest.mark.parametrize("name, text, problem", [
    ("Bad Name.md", "x", "Invalid block label 'Bad Name'"),
    ("a.md", "---\nlimit: 3\n---\ntoo long", "more than its limit 3"),
    ("a.md", "---\nlimit: [1]\n---\nx", "limit must be a positive whole number"),
    ("a.md", "---\ndescription: x\nno closing", "has no closing '---' line"),
    ("a.md", "---\n: : :\n---\nx", "not valid YAML"),
    ("a.md", "---\nread_only: maybe\n---\nx", "read_only must be true or false"),
    ("a.md", "bad \x00 text", "NUL character"),
])
def test_bad_files_are_refused_and_nothing_is_written(mem: Memory, tmp_path: Path, name: str, text: str, problem: str) -> None:
    root = tmp_path / "memory"
    (root / "system").mkdir(parents=True)
    (root / "system" / "ok.md").write_text("fine")
    (root / name).write_text(text)
    with pytest.raises(ValidationError, match=problem.replace("[", r"\[").replace("(", r"\(")):
        run_import(mem, root, fmt="memfs", agent="work", rename=None, replace=False)
    assert mem.list_agents() == []


def test_cli_export_and_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tiermem.cli import main

    data, out = str(tmp_path / "d"), tmp_path / "mem"
    common = ["--data-dir", data, "--embedding-model", "hashing"]
    assert main(["agents", "create", "a", *common]) == 0  # agents are made on purpose
    assert main(["blocks", "create", "notes/todo", "--value", "buy milk", "--agent", "a", *common]) == 0
    assert main(["export", "a", "--format", "memfs", "-o", str(out), *common]) == 0
    assert (out / "notes" / "todo.md").read_text().endswith("---\nbuy milk\n")
    assert main(["import", str(out), "--agent", "b", *common]) == 0
    capsys.readouterr()
    assert main(["blocks", "show", "notes/todo", "--agent", "b", *common]) == 0
    assert capsys.readouterr().out.strip() == "buy milk"
    assert main(["export", "a", "--format", "memfs", *common]) == 1
    assert "Name one agent and a directory" in capsys.readouterr().err
    # a person detaches a block; sync writes that to the file's frontmatter
    assert main(["blocks", "set", "/notes/todo", "--pinned", "--agent", "b", *common]) == 0
    assert "pinned=true" in capsys.readouterr().out
    assert main(["sync", str(tmp_path / "synced"), "--agent", "b", *common]) == 0
    assert "pinned: true" in (tmp_path / "synced" / "notes" / "todo.md").read_text()
    assert main(["blocks", "set", "notes/todo", "--detached", "--agent", "b", *common]) == 0
    assert main(["sync", str(tmp_path / "synced"), "--agent", "b", *common]) == 0
    assert "to_files: notes/todo" in capsys.readouterr().out
    assert "pinned" not in (tmp_path / "synced" / "notes" / "todo.md").read_text()


def _git(root: Path, *args: str) -> str:
    import subprocess

    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


def test_two_way_sync_with_git_history(mem: Memory, tmp_path: Path) -> None:
    from tiermem.interop.memfs_sync import sync_memfs

    agent = seed(mem)
    root = tmp_path / "memory"
    root.mkdir()
    _git(root, "init", "-q")
    first = sync_memfs(mem, "ezra", root)  # an empty directory is filled from the store
    assert sorted(first["to_files"]) == sorted(snapshot(mem, "ezra")) and first["commit"]
    assert sync_memfs(mem, "ezra", root)["commit"] == ""  # nothing changed: no commit
    # a file edited in an editor becomes a new block version by "human"
    family = root / "system/human/family.md"
    family.write_text(family.read_text().replace("Partner: Sam", "Partner: Sam\nDaughter: Ada"))
    # an edit made by a host is written to its file
    mem.edit(agent, "human", Append("Likes lancedb"), actor="agent")
    # a new file creates a block; a deleted file detaches its block
    (root / "notes" / "books.md").write_text("---\ndescription: Reading\n---\nDune\n")
    (root / "corrections" / "ezra-mistakes.md").unlink()
    report = sync_memfs(mem, "ezra", root)
    assert report["to_store"] == ["notes/books", "system/human/family"] and report["to_files"] == ["human"]
    assert report["detached"] == ["corrections/ezra-mistakes"] and report["conflicts"] == []
    assert mem.block(agent, "system/human/family").value == "Partner: Sam\nDaughter: Ada\n"
    assert mem.history(agent, "system/human/family", 1)[0].actor == "human"
    assert (root / "human.md").read_text().endswith("\nLikes lancedb\n")
    assert snapshot(mem, "ezra")["notes/books"] == ("Dune", "Reading", 5000, False, False)
    log = _git(root, "log", "--format=%s")
    assert log.count("tiermem sync") == 2 and "system/human/family" in log.splitlines()[0]
    assert "notes/books.md" in _git(root, "show", "--stat", "HEAD")


def test_sync_conflict_is_reported_and_nothing_is_lost(mem: Memory, tmp_path: Path) -> None:
    from tiermem.interop.memfs_sync import sync_memfs

    agent = seed(mem)
    root = tmp_path / "memory"
    sync_memfs(mem, "ezra", root)
    path = root / "system/human/family.md"
    path.write_text(path.read_text().replace("Sam", "Sam (file)"))
    mem.edit(agent, "system/human/family", Append("from the host"))
    before_file, before_block = path.read_text(), mem.block(agent, "system/human/family").value
    for _ in range(2):  # reported again until settled
        report = sync_memfs(mem, "ezra", root)
        assert report["conflicts"] == ["system/human/family: the file and the block both changed since the last sync"]
        assert path.read_text() == before_file and mem.block(agent, "system/human/family").value == before_block
    settled = sync_memfs(mem, "ezra", root, prefer="store")
    assert settled["to_files"] == ["system/human/family"] and settled["conflicts"] == []
    assert path.read_text().endswith("Partner: Sam\n\nfrom the host\n")
    # the file's side is not lost either: it was the file's text, and history keeps every block version
    assert sync_memfs(mem, "ezra", root)["conflicts"] == []


def test_sync_refuses_a_bad_file_before_writing_anything(mem: Memory, tmp_path: Path) -> None:
    from tiermem.interop.memfs_sync import sync_memfs

    agent = seed(mem)
    root = tmp_path / "memory"
    sync_memfs(mem, "ezra", root)
    (root / "system/human/family.md").write_text("edited")
    (root / "Bad.md").write_text("x")
    with pytest.raises(ValidationError, match="Bad.md: Invalid block label 'Bad'"):
        sync_memfs(mem, "ezra", root)
    assert mem.block(agent, "system/human/family").value == "Partner: Sam\n"


def test_watch_syncs_repeatedly_until_stopped(mem: Memory, tmp_path: Path) -> None:
    from tiermem.interop.memfs_sync import watch_memfs

    agent = seed(mem)
    root = tmp_path / "memory"
    reports: list[dict] = []
    edits = iter([lambda: (root / "human.md").write_text("---\ndescription: d\nlimit: 100\nread_only: false\n---\nAda\n"),
                  lambda: mem.edit(agent, "human", Append("Bob"))])

    def keep_going() -> bool:  # between rounds: one edit on each side, then stop
        step = next(edits, None)
        if step is None:
            return False
        step()
        return True

    watch_memfs(mem, "ezra", root, interval=0.001, on_report=reports.append, keep_going=keep_going)
    assert len(reports) == 3
    assert reports[1]["to_store"] == ["human"] and reports[2]["to_files"] == ["human"]
    assert (root / "human.md").read_text().endswith("---\nAda\nBob\n")
    with pytest.raises(ValidationError, match="greater than 0"):
        watch_memfs(mem, "ezra", root, interval=0, on_report=reports.append)
