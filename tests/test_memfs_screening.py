"""MemFS import and sync screen every file before writing anything: a file the store would refuse (a text longer
than a block holds, a credential anywhere in it, a hidden name) is listed under ``skipped`` with the reason and the
rest goes on; one file's change lands whole or not at all; an untouched export imports back as "unchanged"."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiermem.base.config import BlockSpec, Settings, load_settings
from tiermem.base.errors import TiermemError
from tiermem.domain.factory import open_memory
from tiermem.domain.memory import Memory
from tiermem.interop.commands import run_export, run_import
from tiermem.interop.memfs import apply_file, parse_file, tree_of
from tiermem.interop.memfs_sync import sync_memfs

TOKEN = "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB"  # a GitHub token's shape (not a real one)


@pytest.fixture
def small(tmp_path: Path) -> Memory:
    """A store whose blocks hold at most 1,000 characters (``max_content_chars``)."""
    return open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="hashing", max_content_chars=1000))


@pytest.fixture
def mem(settings: Settings) -> Memory:
    return open_memory(settings)


def write(root: Path, rel: str, text: str) -> None:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text)


def test_a_file_longer_than_a_block_holds_is_skipped_and_the_rest_syncs(small: Memory, tmp_path: Path) -> None:
    """It used to stop the sync half-way (renames written, the block's limit raised without its text), naming no
    file, and the next sync then reported a conflict."""
    root = tmp_path / "memory"
    write(root, "system/human.md", "---\ndescription: h\n---\nName: Ada\n")
    write(root, "reference/big.md", "---\ndescription: big\n---\nsmall now\n")
    write(root, "reference/old.md", "---\ndescription: ren\n---\nrename me\n")
    sync_memfs(small, "s", root)
    agent = small.get_agent("s").id
    before = small.block(agent, "reference/big")
    write(root, "reference/big.md", "---\ndescription: big\n---\n" + "w " * 600 + "\n")  # 1,200 characters
    (root / "reference/old.md").rename(root / "reference/new.md")
    report = sync_memfs(small, "s", root)
    assert report["renamed"] == ["reference/old -> reference/new"]
    [line] = report["skipped"]
    assert line.startswith("reference/big.md: its text has 1200 characters; a block holds at most 1000")
    assert "max_content_chars" in line
    after = small.block(agent, "reference/big")
    assert (after.version, after.limit, after.value) == (before.version, before.limit, "small now")
    again = sync_memfs(small, "s", root)
    assert again["conflicts"] == [] and again["skipped"] == [line]
    # the import says the same and takes the rest
    got = run_import(small, root, fmt="memfs", agent="i", rename=None, replace=False)
    assert got["skipped"] == [line] and sorted(got["blocks_created"]) == ["reference/new", "system/human"]


def test_a_files_change_lands_whole_or_not_at_all(small: Memory, tmp_path: Path) -> None:
    """The limit a longer text needs and the text are one version: a text the store refuses leaves the limit too."""
    root = tmp_path / "memory"
    write(root, "notes/a.md", "---\ndescription: a\n---\nshort\n")
    sync_memfs(small, "s", root)
    agent = small.get_agent("s").id
    before = small.block(agent, "notes/a")
    tree = tree_of({"notes/a.md"})
    too_long = parse_file("notes/a.md", "---\ndescription: changed\n---\n" + "x" * 1200 + "\n", tree)
    with pytest.raises(TiermemError, match="1200 characters"):
        apply_file(small, agent, too_long, tree, actor="human")
    assert small.block(agent, "notes/a") == before
    longer = parse_file("notes/a.md", "---\ndescription: changed\n---\n" + "x" * 900 + "\n", tree)
    small.update_block(agent, "notes/a", limit=100)
    at = small.block(agent, "notes/a").version
    assert apply_file(small, agent, longer, tree, actor="human") == "updated"
    now = small.block(agent, "notes/a")
    assert (now.version, now.limit, len(now.value), now.description) == (at + 1, 900, 900, "changed")


def test_a_credential_in_any_frontmatter_key_skips_that_file_only(mem: Memory, tmp_path: Path) -> None:
    """The block keeps its file's frontmatter, unknown keys and all: a token there used to stop the import and the
    sync half-done ("Nothing was written", no file named) once the store refused it."""
    root = tmp_path / "memory"
    write(root, "system/aa.md", "---\ndescription: ok\n---\nfine\n")
    write(root, "zz/extra.md", f"---\ndescription: extra key\napi_token: {TOKEN}\n---\nx\n")
    got = run_import(mem, root, fmt="memfs", agent="c", rename=None, replace=False)
    [line] = got["skipped"]
    assert line.startswith("zz/extra.md holds a GitHub token (line 3, characters 12-53) in its frontmatter")
    assert TOKEN not in line
    assert got["blocks_created"] == ["system/aa"]
    report = sync_memfs(mem, "c2", root)
    assert report["skipped"] == [line] and report["to_store"] == ["system/aa"]
    write(root, "system/aa.md", "---\ndescription: ok\n---\nfine, edited\n")
    assert sync_memfs(mem, "c2", root)["to_store"] == ["system/aa"]


def test_an_import_into_a_new_agent_makes_it_with_the_directory_alone(mem: Memory, tmp_path: Path) -> None:
    """No default blocks beside the files; a directory of files all refused makes no agent and writes nothing."""
    root = tmp_path / "memory"
    write(root, "system/aa.md", "---\ndescription: first\n---\nfirst file\n")
    write(root, "system/zz.md", "---\ndescription: big\n---\n" + "word " * 30000 + "\n")  # over max_content_chars
    got = run_import(mem, root, fmt="auto", agent="fresh", rename=None, replace=False)
    assert got["blocks_created"] == ["system/aa"] and got["skipped"][0].startswith("system/zz.md: its text has")
    assert [b.label for b in mem.blocks(mem.get_agent("fresh").id)] == ["system/aa"]
    bad = tmp_path / "bad"
    write(bad, "system/zz.md", f"---\ndescription: {TOKEN}\n---\nx\n")
    with pytest.raises(TiermemError, match="no .md block files tiermem can read") as caught:
        run_import(mem, bad, fmt="memfs", agent="never", rename=None, replace=False)
    assert TOKEN not in str(caught.value)
    assert mem.core.find_agent("never") is None


def test_hidden_files_are_listed_as_skipped_and_tool_folders_are_not(mem: Memory, tmp_path: Path) -> None:
    """Letta Code's tools make notes/.hidden.md as readily as any file; no label can be hidden, so it is listed
    with the reason (it used to be left out silently); a hidden folder (.git, .obsidian) is a tool's, left out."""
    root = tmp_path / "memory"
    write(root, "system/human.md", "---\ndescription: h\n---\nName: Ada\n")
    write(root, "notes/.hidden.md", "---\ndescription: hidden\n---\nsecret plan\n")
    write(root, ".obsidian/x.md", "---\ndescription: in a hidden folder\n---\nobsidian\n")
    report = sync_memfs(mem, "h", root)
    [line] = report["skipped"]
    assert line.startswith("notes/.hidden.md: a hidden file") and "rename it without the leading '.'" in line
    got = run_import(mem, root, fmt="memfs", agent="h2", rename=None, replace=False)
    assert got["skipped"] == [line] and got["blocks_created"] == ["system/human"]


def test_an_export_always_writes_a_description(mem: Memory, tmp_path: Path) -> None:
    """Letta Code's tools refuse a file without frontmatter ("missing frontmatter"): a block without a description
    gets Letta Code's own default, in any directory (it used to, only in a Letta Code agent's repository)."""
    agent = mem.ensure_agent("n", blocks=()).id
    mem.create_block(agent, BlockSpec(label="system/project", value="Project apollo"))
    run_export(mem, agent="n", fmt="memfs", output=str(tmp_path / "mem"), vectors=False)
    assert (tmp_path / "mem/system/project.md").read_text() == (
        "---\ndescription: Memory block system/project\n---\nProject apollo\n"
    )


def test_an_untouched_export_imports_back_unchanged(mem: Memory, tmp_path: Path) -> None:
    """Re-importing an export nobody edited writes nothing: a block made in tiermem keeps no frontmatter, and the
    one its file has is what tiermem writes for it (it used to be stored, a new version of every such block)."""
    agent = mem.ensure_agent("a").id  # with the default blocks
    specs = [
        BlockSpec(label="system/project notes", value="Project: apollo", description="notes on project"),
        BlockSpec(label="reference/v1.2/spec", value="dotted path", description="spec"),
        BlockSpec(label="reference/Café", value="unicode", description="café notes"),
        BlockSpec(label="scratch", value="scratch text", description="scratch", limit=50),
        BlockSpec(label="locked", value="do not touch", description="ro", read_only=True),
    ]
    for spec in specs:
        mem.create_block(agent, spec)
    mem.update_block(agent, "reference/Café", pinned=False)
    versions = {b.label: b.version for b in mem.blocks(agent)}
    out = tmp_path / "mem"
    run_export(mem, agent="a", fmt="memfs", output=str(out), vectors=False)
    got = run_import(mem, out, fmt="memfs", agent="a", rename=None, replace=False)
    assert got["blocks_created"] == got["blocks_updated"] == got["skipped"] == []
    assert sorted(got["blocks_unchanged"]) == sorted(versions)
    assert {b.label: b.version for b in mem.blocks(agent)} == versions
