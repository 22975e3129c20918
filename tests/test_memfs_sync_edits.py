"""MemFS sync while the store is edited: an edit made during a sync pass is never put back by the pass."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tiermem.base.config import Settings
from tiermem.base.errors import ValidationError
from tiermem.domain.blocks import Append, Rethink
from tiermem.domain.factory import open_memory
from tiermem.domain.memory import Memory
from tiermem.interop.memfs_sync import sync_memfs

from .test_memfs import LETTA_FILES, agent_repo


@pytest.fixture
def mem(settings: Settings) -> Memory:
    return open_memory(settings)


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def test_an_edit_made_while_its_file_is_written_is_kept(mem: Memory, tmp_path: Path) -> None:
    """The pass renders the block, commits (its hook holds the commit while the agent edits the block again), writes
    the file: the block keeps the newer edit (no "written as" version puts the older text back) and the next pass
    writes it into the file."""
    root = agent_repo(tmp_path / "memory", LETTA_FILES)
    sync_memfs(mem, "lc", root)
    agent = mem.get_agent("lc").id
    git_dir = root / ".git"
    hook = git_dir / "hooks" / "pre-commit"
    hook.write_text(f"#!/bin/sh\ntouch {git_dir}/started\nwhile [ ! -e {git_dir}/go ]; do sleep 0.02; done\n")
    hook.chmod(0o755)
    mem.edit(agent, "reference/Team-Notes", Append("fact-1"), actor="agent")
    done: list[dict] = []
    worker = threading.Thread(target=lambda: done.append(sync_memfs(mem, "lc", root)))
    worker.start()
    _wait_for(git_dir / "started")
    mem.edit(agent, "reference/Team-Notes", Append("fact-2"), actor="agent")  # during the pass
    (git_dir / "go").touch()
    worker.join(60)
    assert done and done[0]["to_files"] == ["reference/Team-Notes"]
    block = mem.block(agent, "reference/Team-Notes")
    assert block.value == "Ada leads.\nfact-1\nfact-2"
    assert all(v.actor == "agent" or v.version == 1 for v in mem.history(agent, "reference/Team-Notes", 20))
    hook.unlink()
    report = sync_memfs(mem, "lc", root)  # the store is newer: the file is written again
    assert report["to_files"] == ["reference/Team-Notes"] and report["to_store"] == []
    assert (root / "reference/Team-Notes.md").read_text().endswith("Ada leads.\nfact-1\nfact-2\n")
    assert mem.block(agent, "reference/Team-Notes").version == block.version
    assert sync_memfs(mem, "lc", root)["to_files"] == []


def test_a_file_applied_onto_a_version_that_moved_on_writes_nothing(mem: Memory, tmp_path: Path) -> None:
    from tiermem.base.errors import ConflictError
    from tiermem.interop.memfs import apply_file, parse_file, tree_of

    root = agent_repo(tmp_path / "memory", LETTA_FILES)
    sync_memfs(mem, "lc", root)
    agent = mem.get_agent("lc").id
    seen = mem.block(agent, "system/human")
    mem.edit(agent, "system/human", Append("Likes tea"), actor="agent")
    text = "---\ndescription: Changed\n---\nName: Ada Lovelace"
    tree = tree_of(set(LETTA_FILES))
    plan = parse_file("system/human.md", text, tree)
    with pytest.raises(ConflictError, match="changed meanwhile"):
        apply_file(mem, agent, plan, tree, actor="human", expected_version=seen.version)
    now = mem.block(agent, "system/human")
    assert (now.version, now.value, now.description) == (seen.version + 1, "Name: Ada\nLikes tea", seen.description)
    assert apply_file(mem, agent, plan, tree, actor="human", expected_version=now.version) == "updated"
    assert mem.block(agent, "system/human").value == "Name: Ada Lovelace"


def test_the_sync_never_reads_a_file_through_a_link(tmp_path: Path) -> None:
    """The text a sync reads before it writes or removes a file (its line endings, whether it changed) was read
    through a symbolic link: one put in a file's place after the pass looked (it can point at ~/.ssh/id_rsa) was read
    and kept. A link, at the file or on its way, is refused, naming the file; a missing file is None."""
    from tiermem.interop.memfs import LINK_WHY
    from tiermem.interop.memfs_sync import _read_or_none

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "id_rsa.md").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    root = tmp_path / "memory"
    (root / "system").mkdir(parents=True)
    (root / "system/human.md").symlink_to(outside / "id_rsa.md")
    (root / "keys").symlink_to(outside)
    (root / "system/persona.md").write_text("I help.\r\n")
    for rel in ("system/human.md", "keys/id_rsa.md"):
        with pytest.raises(ValidationError) as refused:
            _read_or_none(root, rel)
        assert str(refused.value) == f"{rel}: {LINK_WHY}." and "PRIVATE KEY" not in str(refused.value)
    assert _read_or_none(root, "system/persona.md") == "I help.\r\n"
    assert _read_or_none(root, "system/gone.md") is None


def test_symbolic_links_are_never_followed_nor_written_over(mem: Memory, tmp_path: Path) -> None:
    """A linked .md file (or folder) can point anywhere (/etc/passwd): sync and import skip it, saying why, and a
    sync never writes through or over it; the block of a file that became a link is left alone."""
    from tiermem.interop.memfs import import_memfs

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("---\ndescription: Not memory\n---\nroot:x:0:0\n")
    root = agent_repo(tmp_path / "memory", LETTA_FILES)
    sync_memfs(mem, "lc", root)
    agent = mem.get_agent("lc").id
    (root / "reference/passwd.md").symlink_to(outside / "secret.md")
    (root / "linked").symlink_to(outside)
    (root / "notes/v1.2.md").unlink()
    (root / "notes/v1.2.md").symlink_to(outside / "secret.md")  # a synced file replaced by a link
    mem.edit(agent, "notes/v1.2", Append("More"), actor="agent")
    report = sync_memfs(mem, "lc", root)
    links = [line for line in report["skipped"] if "symbolic link" in line]
    assert sorted(line.split(":")[0] for line in links) == ["linked", "notes/v1.2.md", "reference/passwd.md"]
    held = [line for line in report["skipped"] if line not in links]  # the edit that cannot reach the linked file
    assert len(held) == 1 and held[0].startswith("notes/v1.2.md: the block was edited in tiermem"), held
    labels = {b.label for b in mem.blocks(agent)}
    assert "reference/passwd" not in labels and "linked/secret" not in labels
    assert mem.block(agent, "notes/v1.2").value.endswith("More") and report["detached"] == []
    assert (root / "notes/v1.2.md").is_symlink() and "More" not in (outside / "secret.md").read_text()
    imported = import_memfs(mem, "other", root)
    assert len(imported["skipped"]) == 3 and "reference/passwd" not in imported["blocks_created"]


def test_a_value_starting_with_dashes_reads_back_as_itself(mem: Memory, tmp_path: Path) -> None:
    """A block whose value starts with a '---' line is written with a frontmatter (an empty one when it has nothing
    else), so the value is not read back as one; a v2 index, which has none, refuses such a value instead."""
    from tiermem.base.config import BlockSpec
    from tiermem.interop.memfs import export_memfs, import_memfs

    agent = mem.ensure_agent("a", blocks=()).id
    value = "---\nfoo: bar\n---\nbody text"
    mem.create_block(agent, BlockSpec(label="notes", value=value, description=""))
    export_memfs(mem, "a", tmp_path / "out")
    assert (tmp_path / "out/notes.md").read_text() == f"---\ndescription: Memory block notes\n---\n{value}\n"
    import_memfs(mem, "b", tmp_path / "out")
    assert mem.block(mem.get_agent("b").id, "notes").value == value

    root = tmp_path / "v2"
    root.mkdir()
    (root / "MEMORY.md").write_text("The index\n")
    (root / "persona.md").write_text('---\nname: "persona"\ndescription: "Me"\n---\nHelpful\n')
    sync_memfs(mem, "v", root)
    v = mem.get_agent("v").id
    mem.edit(v, "MEMORY", Rethink("---\nkey: x\n---\nindex", check_line_numbers=False), actor="agent")
    report = sync_memfs(mem, "v", root)
    assert report["to_files"] == [] and "index has no frontmatter" in report["rejected"][0]
    assert report["rejected"][0].startswith("MEMORY.md cannot hold this text")  # the file named once
    assert (root / "MEMORY.md").read_text() == "The index\n"  # left as it was
    assert sync_memfs(mem, "v", root)["waiting"] == report["rejected"]  # until the block changes again


def test_the_watch_command_setup_prints_runs_on_the_same_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json
    import shlex
    import subprocess

    from tiermem.cli.main import main

    from .conftest import PYTHON, ROOT
    from .test_transports import server_env

    base = tmp_path / "letta base"  # a space: the command must quote it
    monkeypatch.setenv("LETTA_LOCAL_BACKEND_DIR", str(base))
    agent_repo(base / "memfs" / "agent-local-1" / "memory", LETTA_FILES)
    config = tmp_path / "my config.toml"
    config.write_text("")
    data = ["--data-dir", str(tmp_path / "my data"), "--config", str(config), "--embedding-model", "hashing"]
    assert main(["setup", "letta-code", "--json", *data]) == 0
    words = shlex.split(json.loads(capsys.readouterr().out)["watch_command"])
    assert words[:2] == ["tiermem", "sync"] and words[-1] == "--watch"
    assert words[words.index("--data-dir") + 1] == str((tmp_path / "my data").resolve())
    assert words[words.index("--config") + 1] == str(config.resolve())
    once = subprocess.run(  # as printed, once (without --watch): the same store, so nothing to do
        [PYTHON, "-m", "tiermem", *words[1:-1], "--json"],
        cwd=ROOT,
        text=True,
        env=server_env(tmp_path),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=120,
    )
    report = json.loads(once.stdout)
    assert once.returncode == 0 and report["to_store"] == [] and report["to_files"] == [], once.stderr


def test_forget_names_a_directory_synced_with_tiermem_sync(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from tiermem.cli.main import main

    monkeypatch.setenv("LETTA_LOCAL_BACKEND_DIR", str(tmp_path / "no letta"))
    monkeypatch.delenv("TIERMEM_SYNC", raising=False)
    root = agent_repo(tmp_path / "g8", {"system/human.md": "---\ndescription: h\n---\nName Ada. Pin 4242-SECRET.\n"})
    common = ["--data-dir", str(tmp_path / "data"), "--embedding-model", "hashing", "--agent", "a"]
    assert main(["sync", str(root), *common]) == 0
    capsys.readouterr()
    assert main(["forget", "--text", "4242-SECRET", "--yes", "--json", *common]) == 0
    held = json.loads(capsys.readouterr().out)["still_held_outside_the_store"]
    assert any(line.startswith(str((root / "system/human.md").resolve())) for line in held), held
    assert any("git history" in line for line in held)
    # the inspector's forget names it too (it knows its data directory)
    from tiermem.base.config import load_settings
    from tiermem.domain.factory import open_memory
    from tiermem.ui import api

    memory = open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="hashing"), start_embedder=False)
    done = api.forget(memory, "a", {"kind": "text", "ref": "Pin 4242"}, data_dir=tmp_path / "data")
    held = done["still_held_outside_the_store"]
    assert any(line.startswith(str((root / "system/human.md").resolve())) for line in held), held


def test_import_into_a_new_agent_adds_no_default_blocks(mem: Memory, tmp_path: Path) -> None:
    from tiermem.interop.memfs import import_memfs

    root = agent_repo(tmp_path / "memory", LETTA_FILES)
    report = import_memfs(mem, "fresh", root)
    labels = sorted(b.label for b in mem.blocks(mem.get_agent("fresh").id))
    assert labels == sorted(p[: -len(".md")] for p in LETTA_FILES)  # no 'human' / 'persona' beside system/persona
    assert any("no default blocks" in n for n in report["notes"])


def test_a_directory_of_a_deleted_agent_says_so_and_how_to_start_over(mem: Memory, tmp_path: Path) -> None:
    from tiermem.base.errors import ValidationError

    root = agent_repo(tmp_path / "memory", LETTA_FILES)
    sync_memfs(mem, "a", root)
    old = mem.get_agent("a").id
    mem.delete_agent(old)
    record = root / ".git" / "tiermem-sync.json"
    with pytest.raises(ValidationError, match=rf"agent 'a' \(id {old}\), which is not in this store .*delete {record}"):
        sync_memfs(mem, "a", root)
    record.unlink()
    assert sorted(sync_memfs(mem, "a", root)["to_store"]) == sorted(p[: -len(".md")] for p in LETTA_FILES)


def test_sync_exits_2_for_a_skipped_file_and_names_the_store_edit_it_holds_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file over its `limit:` is skipped: `tiermem sync` exits 2 (as for conflicts), so a hook sees it; a store
    edit of its block, which cannot be written over it, is reported; once the file is fixed, both are compared. A
    symbolic link alone (never followed, by design) is listed and exits 0."""
    import json

    from tiermem.cli.main import main

    root = tmp_path / "mem"
    (root / "system").mkdir(parents=True)
    human = root / "system/human.md"
    human.write_text("---\ndescription: h\nlimit: 20\n---\nhello\n")
    common = ["--data-dir", str(tmp_path / "data"), "--embedding-model", "hashing", "--agent", "a", "--json"]
    assert main(["sync", str(root), *common]) == 0
    capsys.readouterr()
    human.write_text("---\ndescription: h\nlimit: 20\n---\nhello, this is longer than twenty\n")
    assert main(["sync", str(root), *common]) == 2
    assert "more than its limit 20" in json.loads(capsys.readouterr().out)["skipped"][0]
    assert main(["blocks", "set", "system/human", "hi", *common[:-1]]) == 0
    capsys.readouterr()
    assert main(["sync", str(root), *common]) == 2
    skipped = json.loads(capsys.readouterr().out)["skipped"]
    assert len(skipped) == 2 and "edited in tiermem (version 2)" in skipped[1] and "not written" in skipped[1]
    human.write_text("---\ndescription: h\nlimit: 20\n---\nhello\n")  # fixed: the store's edit is written now
    assert main(["sync", str(root), *common]) == 0
    assert json.loads(capsys.readouterr().out)["to_files"] == ["system/human"] and human.read_text().endswith("hi\n")
    (root / "linked.md").symlink_to(human)
    assert main(["sync", str(root), *common]) == 0
    assert "symbolic link" in json.loads(capsys.readouterr().out)["skipped"][0]


def test_prefer_store_says_it_did_not_overwrite_a_file_it_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--prefer store` never writes over a file tiermem cannot read (its text would be lost): the report says so,
    naming the way to have the block written, and the sync exits 2, whether or not the block was edited since."""
    import json

    from tiermem.cli.main import main

    root = tmp_path / "mem"
    (root / "system").mkdir(parents=True)
    human = root / "system/human.md"
    human.write_text("---\ndescription: h\n---\nhello\n")
    common = ["--data-dir", str(tmp_path / "data"), "--embedding-model", "hashing", "--agent", "a", "--json"]
    assert main(["sync", str(root), *common]) == 0
    unreadable = b"---\ndescription: h\n---\nhello \xff\xfe\n"
    human.write_bytes(unreadable)
    for edited in (False, True):
        if edited:
            assert main(["blocks", "set", "system/human", "hi", *common[:-1]]) == 0
        capsys.readouterr()
        assert main(["sync", str(root), "--prefer", "store", *common]) == 2
        skipped = json.loads(capsys.readouterr().out)["skipped"]
        assert "cannot be read as UTF-8 text" in skipped[0], skipped
        assert len(skipped) == 2 and skipped[1].startswith(
            "system/human.md: --prefer store did not overwrite this file"
        )
        assert "delete it and run `tiermem sync --prefer store` again" in skipped[1], skipped
        assert human.read_bytes() == unreadable
    human.unlink()  # as the report says: the block is written in its place
    assert main(["sync", str(root), "--prefer", "store", *common]) == 0
    assert human.read_text().endswith("hi\n")


def test_an_oversized_file_is_named_as_a_file() -> None:
    from tiermem.interop.memfs import MAX_FILE_CHARS, parse_file, tree_of

    with pytest.raises(Exception, match="the file has .* a memory file may hold; split it into several files") as e:
        parse_file("system/big.md", "x" * (MAX_FILE_CHARS + 1), tree_of({"system/big.md"}))
    assert "argument" not in str(e.value) and "calls" not in str(e.value)
    with pytest.raises(Exception, match="the file contains a NUL character") as e:
        parse_file("system/nul.md", "a\x00b", tree_of({"system/nul.md"}))
    assert str(e.value).count("system/nul.md") == 1  # named once, as the file


def test_crlf_and_bom_files_read_with_lf_and_are_written_back_in_their_own_style(mem: Memory, tmp_path: Path) -> None:
    """A CRLF file's value has no '\\r'; a store edit rewrites each file in its own line ending, BOM kept, never mixed;
    the next sync finds nothing to do."""
    root = tmp_path / "mem"
    (root / "system").mkdir(parents=True)
    files = {
        "system/crlf.md": b"---\r\ndescription: crlf\r\n---\r\nline one\r\nline two\r\n",
        "system/bom.md": b"\xef\xbb\xbf---\ndescription: bom\n---\nbom body\n",
        "system/bare.md": b"\xef\xbb\xbfno frontmatter\r\nsecond\r\n",
    }
    for rel, data in files.items():
        (root / rel).write_bytes(data)
    sync_memfs(mem, "a", root)
    agent = mem.get_agent("a").id
    assert mem.block(agent, "system/crlf").value == "line one\nline two"
    assert mem.block(agent, "system/bare").value == "no frontmatter\nsecond"
    for label in ("system/crlf", "system/bom", "system/bare"):
        mem.edit(agent, label, Rethink("edited one\nedited two", check_line_numbers=False), actor="agent")
    versions = {b.label: b.version for b in mem.blocks(agent)}
    report = sync_memfs(mem, "a", root)
    assert sorted(report["to_files"]) == ["system/bare", "system/bom", "system/crlf"], report
    assert (root / "system/crlf.md").read_bytes() == b"---\r\ndescription: crlf\r\n---\r\nedited one\r\nedited two\r\n"
    assert (root / "system/bom.md").read_bytes() == b"\xef\xbb\xbf---\ndescription: bom\n---\nedited one\nedited two\n"
    assert (root / "system/bare.md").read_bytes() == b"\xef\xbb\xbfedited one\r\nedited two\r\n"
    assert {b.label: b.version for b in mem.blocks(agent)} == versions  # the files say what the blocks say
    again = sync_memfs(mem, "a", root)
    assert again["to_store"] == [] and again["to_files"] == [] and again["conflicts"] == []


def test_a_conflict_while_serve_syncs_is_a_warning_naming_the_file_and_how_to_settle_it(
    mem: Memory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The `sync` setting's thread (`LiveSync`): a conflict is logged at WARNING with the file and the command that
    settles it (it was an INFO line among the rest)."""
    import logging

    from tiermem.interop.letta_code import LiveSync
    from tiermem.server.runtime import MemoryHandle

    root = tmp_path / "mem"
    (root / "system").mkdir(parents=True)
    human = root / "system/human.md"
    human.write_text("---\ndescription: h\n---\nName: Ada\n")
    sync_memfs(mem, "a", root)
    agent = mem.get_agent("a").id
    human.write_text("---\ndescription: h\n---\nName: Ada\nhand edit\n")
    mem.edit(agent, "system/human", Append("tool edit"), actor="agent")
    handle = MemoryHandle(lambda: (mem, agent))
    handle.start()
    live = LiveSync(handle, "a", root, 0.05, data_dir=tmp_path / "data")
    with caplog.at_level(logging.INFO, logger="tiermem.sync"):
        live.start()
        try:
            deadline = time.monotonic() + 60
            while not any(r.levelno == logging.WARNING for r in caplog.records):
                assert time.monotonic() < deadline, caplog.text
                time.sleep(0.02)
        finally:
            live.stop()
    warning = next(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert f"conflict in {human}" in warning, warning
    assert f"tiermem sync {root} --agent a --data-dir {tmp_path / 'data'} --prefer file" in warning, warning
    assert "--prefer store` keeps the block" in warning


def test_a_rename_by_one_edit_commits_under_its_reason(mem: Memory, tmp_path: Path) -> None:
    """A Letta-dialect rename moves one file (two paths in the commit): the edit's reason is the subject, as for any
    single edit, and the body says where the file went."""
    from tiermem.domain import memfs_format as fmt

    from .test_memfs import git

    root = agent_repo(tmp_path / "memory", LETTA_FILES)
    sync_memfs(mem, "lc", root)
    agent = mem.get_agent("lc").id
    op = fmt.reason_operation("memory rename", "Team notes belong with the projects")
    mem.update_block(agent, "reference/Team-Notes", new_label="reference/projects/team", actor="agent", operation=op)
    report = sync_memfs(mem, "lc", root)
    assert report["commit"] and report["files_removed"] == ["reference/Team-Notes"], report
    message = git(root, "log", "-1", "--format=%B")
    assert message.split("\n")[0] == "Team notes belong with the projects", message
    assert "delete reference/Team-Notes.md: renamed to reference/projects/team.md" in message, message
    assert message.count("Team notes belong") == 2, message  # the subject, and the new file's line


def test_a_delete_and_a_patch_move_commit_under_their_reason(mem: Memory, tmp_path: Path) -> None:
    """A Letta-dialect delete (a file, or a folder's files) records its reason as the block's last version, so the
    commit that removes the files has it as its subject; a patch that moves and edits a file (two versions, one
    reason) too."""
    from tiermem.base.config import BlockSpec
    from tiermem.server.letta_memory_tool import run_command, run_patch

    from .test_memfs import git

    root = agent_repo(tmp_path / "memory", LETTA_FILES)
    sync_memfs(mem, "lc", root)
    agent = mem.get_agent("lc").id
    mem.create_block(agent, BlockSpec(label="notes/extra", value="x", description="d"))
    sync_memfs(mem, "lc", root)

    def subject() -> str:
        return git(root, "log", "-1", "--format=%s").strip()

    run_command(mem, agent, {"command": "delete", "reason": "Notes are stale", "file_path": "notes"}, str(root))
    assert sync_memfs(mem, "lc", root)["commit"] and subject() == "Notes are stale"
    assert not list((root / "notes").rglob("*.md"))
    args = {"command": "delete", "reason": "Moved to the wiki", "file_path": "reference/Team-Notes.md"}
    run_command(mem, agent, args, str(root))
    assert sync_memfs(mem, "lc", root)["commit"] and subject() == "Moved to the wiki"
    patch = (
        "*** Begin Patch\n*** Update File: system/persona.md\n*** Move to: system/self.md\n@@\n"
        "-I'm a coding assistant.\n+I am a coding assistant.\n*** End Patch"
    )
    run_patch(mem, agent, "Persona is self now", patch, str(root))
    assert sync_memfs(mem, "lc", root)["commit"] and subject() == "Persona is self now"


def test_forget_does_not_look_through_symbolic_links(tmp_path: Path) -> None:
    """`holders` (what `tiermem forget` names) reads the directory's own files, as the sync does: a linked file or
    folder leads elsewhere, and is neither read nor named."""
    from tiermem.interop.memfs_holders import holders

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "other.md").write_text("Pin 4242-SECRET\n")
    root = tmp_path / "mem"
    (root / "system").mkdir(parents=True)
    (root / "system/human.md").write_text("---\ndescription: h\n---\nPin 4242-SECRET\n")
    (root / "system/linked.md").symlink_to(outside / "other.md")
    (root / "elsewhere").symlink_to(outside)
    held = holders([root], ["4242-SECRET"])
    assert held == [
        f"{root / 'system/human.md'}: the file still holds it (a synced MemFS file: edit it, or sync after the edit)"
    ], held
