"""Claude Code's auto memory and tiermem as one (``interop/auto_memory.py``), with the real Claude Code, offline.

After `tiermem setup claude-code`: the auto-memory files the user had are copied into the shared folder (theirs left
in place) and stored in tiermem; a memory file Claude Code's model writes (its Write tool, scripted on a fake
Anthropic API) is in tiermem's archival memory after that session's reply (found as another host finds it); a block
edited in tiermem is in the ``MEMORY.md`` Claude Code loads into its next session; `--uninstall` restores the user's
setting and leaves the files. Skipped, with the reason, when Claude Code is missing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tiermem.base.config import load_settings
from tiermem.domain.factory import open_memory
from tiermem.interop import auto_memory

from . import fake_anthropic as fa
from .claude_code import ClaudeCode, claude_code

OLD = "---\nname: editor\ndescription: the user's editor\nmetadata:\n  type: user\n---\n\nAda edits code in Helix.\n"
NEW = "---\nname: cat\ndescription: the user's cat\nmetadata:\n  type: user\n---\n\nAda's cat is called Miso.\n"
EDITED = "Name: Ada Lovelace. Moved to Lisbon in November."


def found(data: Path, query: str) -> list[str]:
    memory = open_memory(load_settings(data_dir=data, embedding_model="default"), start_embedder=False)
    agent = memory.ensure_agent("default").id
    return [h.content for h in memory.archive.search(agent, query, top_k=5).hits]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    exe, why = claude_code()
    if exe is None:
        pytest.skip(why)
    with ClaudeCode(exe, tmp_path_factory.mktemp("auto-memory")) as cc:
        data = cc.home / "memory"
        old = cc.home / ".claude" / "projects" / "-work-old" / "memory"
        old.mkdir(parents=True)
        (old / "editor.md").write_text(OLD)
        (old / "MEMORY.md").write_text("- [Editor](editor.md) — which editor\n")
        cc.tiermem("agents", "create", "default", "--data-dir", str(data))
        setup = cc.tiermem("setup", "claude-code", "--data-dir", str(data))
        folder = auto_memory.directory(data, "default")
        target = folder / "cat.md"
        cc.fake.add(fa.tool("Write", {"file_path": str(target), "content": NEW}), fa.text("Saved."))
        first = cc.run("Remember that my cat is called Miso.", "--allowedTools", "Write")
        after_first = found(data, "What is my cat called?")
        cc.tiermem("blocks", "set", "human", EDITED, "--data-dir", str(data))
        before = len(cc.fake.requests)
        second = cc.run("Hello again.")
        yield {
            "cc": cc,
            "data": data,
            "folder": folder,
            "old": old,
            "setup": setup,
            "first": first,
            "after_first": after_first,
            "second": second,
            "second_requests": cc.fake.requests[before:],
        }


def test_setup_points_auto_memory_at_the_shared_folder_and_imports_what_there_was(shared: dict[str, Any]) -> None:
    cc, folder = shared["cc"], shared["folder"]
    settings = json.loads((cc.home / ".claude" / "settings.json").read_text())
    assert settings["autoMemoryDirectory"] == str(folder)
    assert (shared["old"] / "editor.md").read_text() == OLD  # theirs left as it was
    assert (folder / "editor.md").read_text() == OLD and "(editor.md)" in (folder / "MEMORY.md").read_text()
    assert any("Helix" in hit for hit in found(shared["data"], "Which editor does Ada use?"))


def test_a_memory_claude_code_writes_is_in_tiermem_after_the_reply(shared: dict[str, Any]) -> None:
    assert not shared["first"]["is_error"], shared["first"]
    written = (shared["folder"] / "cat.md").read_text()  # Claude Code's Write tool wrote it (its frontmatter
    assert "Ada's cat is called Miso." in written and "name: cat" in written  # normalised: it quotes values)
    assert any("Miso" in hit for hit in shared["after_first"]), shared["after_first"]


def test_a_block_edit_in_tiermem_is_in_the_auto_memory_claude_code_loads_next(shared: dict[str, Any]) -> None:
    first = json.dumps(shared["second_requests"][0])
    start = first.index("user's auto-memory")
    assert EDITED in first[start : start + 3000], first[start : start + 3000]


def test_uninstall_restores_the_setting_and_leaves_the_files(shared: dict[str, Any]) -> None:
    cc, folder = shared["cc"], shared["folder"]
    cc.tiermem("setup", "claude-code", "--uninstall", "--data-dir", str(shared["data"]))
    settings_file = cc.home / ".claude" / "settings.json"
    assert not settings_file.exists() or "autoMemoryDirectory" not in json.loads(settings_file.read_text())
    assert (folder / "cat.md").exists() and (shared["old"] / "editor.md").read_text() == OLD


def test_sync_both_ways_without_a_host(tmp_path: Path) -> None:
    """A changed file replaces its passage and a removed one removes it; a block file edited on disk becomes the
    block's value, and a block edited in tiermem rewrites its file and its index line; the user's lines stay."""
    memory = open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="hashing"), start_embedder=False)
    agent = memory.ensure_agent("default").id
    folder = tmp_path / "shared"
    folder.mkdir()
    (folder / "MEMORY.md").write_text("- [Cat](cat.md) — the cat\n")
    (folder / "cat.md").write_text(NEW)
    first = auto_memory.sync(memory, agent, folder)
    assert first.imported == 1 and first.blocks_written == len(memory.blocks(agent))
    tagged = [p for p in memory.archive.rows.passages_of(agent) if auto_memory.TAG in p.tags]
    assert [p.content for p in tagged] == ["the user's cat\n\nAda's cat is called Miso."]
    assert auto_memory.sync(memory, agent, folder) == auto_memory.Synced()  # nothing changed: nothing done

    (folder / "cat.md").write_text(NEW.replace("Miso", "Tofu"))
    (folder / "tiermem-human.md").write_text("---\nname: tiermem-human\n---\n\nName: Ada. Lives in Lisbon.\n")
    second = auto_memory.sync(memory, agent, folder)
    assert second.imported == 1 and second.blocks_edited == 1
    assert memory.block(agent, "human").value == "Name: Ada. Lives in Lisbon."
    tagged = [p.content for p in memory.archive.rows.passages_of(agent) if auto_memory.TAG in p.tags]
    assert tagged == ["the user's cat\n\nAda's cat is called Tofu."]

    from tiermem.domain.blocks import Rethink

    memory.edit(agent, "human", Rethink("Name: Ada. Lives in Porto."), actor="human")
    (folder / "cat.md").unlink()
    third = auto_memory.sync(memory, agent, folder)
    assert third.removed == 1 and third.blocks_edited == 0
    assert "Lives in Porto." in (folder / "tiermem-human.md").read_text()
    index = (folder / "MEMORY.md").read_text()
    assert "(tiermem-human.md) — Name: Ada. Lives in Porto." in index and "- [Cat](cat.md) — the cat" in index
    assert not [p for p in memory.archive.rows.passages_of(agent) if auto_memory.TAG in p.tags]


def test_what_claude_code_writes_keeps_no_credential_and_no_private_span(tmp_path: Path) -> None:
    """Auto memory enters tiermem on its own path, so it gets what every hook-captured text gets: `<private>` spans
    dropped and credentials redacted, in a memory file's passage and in a block file Claude Code's model edits (the
    block file is then rewritten without them)."""
    memory = open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="hashing"), start_embedder=False)
    agent = memory.ensure_agent("default").id
    folder = tmp_path / "shared"
    folder.mkdir()
    key = "AKIA" + "Q3EGRIBFXPN7WMT4"
    (folder / "aws.md").write_text(
        f"---\nname: aws\n---\n\nThe deploy key is {key}. <private>my PIN is 4821</private>\n"
    )
    auto_memory.sync(memory, agent, folder)
    (stored,) = [p.content for p in memory.archive.rows.passages_of(agent) if auto_memory.TAG in p.tags]
    assert key not in stored and "4821" not in stored and "[redacted: AWS access key]" in stored, stored
    (folder / "tiermem-human.md").write_text(f"---\nname: tiermem-human\n---\n\nName: Ada. Key {key}.\n")
    auto_memory.sync(memory, agent, folder)
    value = memory.block(agent, "human").value
    assert value.startswith("Name: Ada. Key [redacted: ") and key not in value, value
    assert key not in (folder / "tiermem-human.md").read_text()
