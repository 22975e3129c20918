"""MemFS directories: export an agent as one markdown file per block, import a directory back, two-way sync."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tiermem.blocks import Append, is_pinned
from tiermem.config import BlockSpec, Settings, load_settings
from tiermem.errors import ValidationError
from tiermem.factory import open_memory
from tiermem.interop.commands import detect, run_export, run_import
from tiermem.memory import Memory

from .conftest import PYTHON, ROOT


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


def test_cli_export_and_import(tmp_path: Path) -> None:
    env = {"PYTHONPATH": str(ROOT / "src"), "TIERMEM_EMBEDDING_MODEL": "hashing", "PATH": "/usr/bin:/bin",
           "HOME": str(tmp_path)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PYTHON, "-m", "tiermem", *args], capture_output=True, text=True, env=env, timeout=120)

    data, out = str(tmp_path / "d"), tmp_path / "mem"
    assert run("blocks", "create", "notes/todo", "--value", "buy milk", "--data-dir", data, "--agent", "a").returncode == 0
    r = run("export", "a", "--format", "memfs", "-o", str(out), "--data-dir", data)
    assert r.returncode == 0, r.stderr
    assert (out / "notes" / "todo.md").read_text().endswith("---\nbuy milk\n")
    r = run("import", str(out), "--agent", "b", "--data-dir", data)
    assert r.returncode == 0, r.stderr
    r = run("blocks", "show", "notes/todo", "--agent", "b", "--data-dir", data)
    assert r.stdout.strip() == "buy milk"
    r = run("export", "a", "--format", "memfs", "--data-dir", data)
    assert r.returncode == 1 and "Name the agent and a directory" in r.stderr
