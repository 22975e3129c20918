"""MemFS directories: export an agent as one markdown file per block, import a directory back, two-way sync,
as Letta Code writes them (capitals, raw frontmatter, reference/, v2 indexes) and commits them (its hook)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tiermem.base.config import BlockSpec, Settings, load_settings
from tiermem.base.errors import ValidationError
from tiermem.domain.blocks import Append, Rethink, is_pinned
from tiermem.domain.factory import open_memory
from tiermem.domain.memfs_format import split_file
from tiermem.domain.memory import Memory
from tiermem.interop.commands import detect, run_export, run_import
from tiermem.interop.memfs_sync import sync_memfs, watch_memfs

from .test_memfs_format import SHAPES


@pytest.fixture
def mem(settings: Settings) -> Memory:
    return open_memory(settings)


def snapshot(memory: Memory, agent: str) -> dict[str, tuple[str, str, int, bool, bool]]:
    a = memory.get_agent(agent)
    return {b.label: (b.value, b.description, b.limit, b.read_only, is_pinned(b)) for b in memory.blocks(a.id)}


def seed(memory: Memory) -> str:
    agent = memory.ensure_agent("ezra").id
    memory.create_block(
        agent, BlockSpec(label="system/human/family", value="Partner: Sam\n", description="Family: 'close'", limit=800)
    )
    memory.create_block(
        agent, BlockSpec(label="notes/projects", value="---\ntiermem\n\n", description="Projects", read_only=True)
    )
    memory.create_block(agent, BlockSpec(label="corrections/ezra-mistakes", value="Go? No: Python.", description=""))
    memory.update_block(agent, "notes/projects", pinned=False)
    memory.update_block(agent, "corrections/ezra-mistakes", pinned=False)
    return agent


def git(root: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=check)
    return done.stdout


def agent_repo(root: Path, files: dict[str, str], *, policy: str = "legacy-only") -> Path:
    """A directory laid out and committed the way Letta Code's local backend keeps an agent's memory."""
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "agent-local-1@letta.com")
    git(root, "config", "user.name", "Letta Code")
    (root / ".git" / "letta-memory-layout-policy").write_text(policy + "\n")
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "chore: initialize local memory")
    return root


LETTA_FILES = {
    "system/persona.md": "---\ndescription: Who I am: a coding assistant\n---\nI'm a coding assistant.",
    "system/human.md": '---\ndescription: "The human" #1 priorities\nlimit: 300\n---\nName: Ada',
    "reference/Team-Notes.md": "---\ndescription: @team [links] * misc\n---\nAda leads.\n",
    "notes/v1.2.md": "---\ndescription: Release notes\ncolour: blue\n---\nShipped\n",
    "skills/x/SKILL.md": "---\nname: x\ndescription: A skill\nallowed-tools: Bash\n---\nDo x.\n",
}


def test_export_writes_one_file_per_block_and_import_reads_it_back(mem: Memory, tmp_path: Path) -> None:
    seed(mem)
    out = tmp_path / "memory"
    report = run_export(mem, agent="ezra", fmt="memfs", output=str(out), vectors=False)
    assert report["blocks"] == 5 and report["pinned"] == 3
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.md"))
    assert files == [
        "corrections/ezra-mistakes.md",
        "human.md",
        "notes/projects.md",
        "persona.md",
        "system/human/family.md",
    ]
    # Letta Code's frontmatter: the description as written (no YAML quoting), limit where it is not the default
    assert (out / "system/human/family.md").read_text() == (
        "---\ndescription: Family: 'close'\nlimit: 800\n---\nPartner: Sam\n\n"
    )
    assert (
        out / "notes/projects.md"
    ).read_text() == "---\ndescription: Projects\nread_only: true\n---\n---\ntiermem\n\n\n"
    # outside a Letta Code agent's repository, the blocks pinned otherwise than the layout says (system/ pinned) are
    # listed beside the files, never in their frontmatter (Letta Code's hook refuses keys it does not know)
    assert not any("pinned" in p.read_text() for p in out.rglob("*.md"))
    assert json.loads((out / ".tiermem-pinned.json").read_text()) == {"pinned": {"human.md": True, "persona.md": True}}
    assert detect(out) == "memfs"
    other = open_memory(load_settings(data_dir=tmp_path / "other", embedding_model="hashing"))
    got = run_import(other, out, fmt="auto", agent="ezra", rename=None, replace=False)
    assert got["format"] == "memfs" and got["skipped"] == []
    # a block without a description is written with Letta Code's default one (its tools refuse a file without one),
    # which the block it is read into gets
    assert (
        (out / "corrections/ezra-mistakes.md")
        .read_text()
        .startswith("---\ndescription: Memory block corrections/ezra-mistakes\n")
    )
    expected = snapshot(mem, "ezra")
    value, _, *rest = expected["corrections/ezra-mistakes"]
    expected["corrections/ezra-mistakes"] = (value, "Memory block corrections/ezra-mistakes", *rest)  # type: ignore[assignment]
    assert snapshot(other, "ezra") == expected
    # importing again changes nothing; exporting over an export is refused
    again = run_import(other, out, fmt="memfs", agent="ezra", rename=None, replace=False)
    assert again["blocks_created"] == [] and again["blocks_updated"] == [] and len(again["blocks_unchanged"]) == 5
    with pytest.raises(ValidationError, match="already holds .md files"):
        run_export(mem, agent="ezra", fmt="memfs", output=str(out), vectors=False)


def test_a_letta_code_directory_syncs_whole(mem: Memory, tmp_path: Path) -> None:
    """Capitals, dots, raw frontmatter with YAML-hostile descriptions, reference/, unknown keys, skills/."""
    root = agent_repo(tmp_path / "memory", LETTA_FILES)
    report = sync_memfs(mem, "lc", root)
    assert report["skipped"] == [] and report["conflicts"] == [] and report["commit"] == ""
    assert sorted(report["to_store"]) == [
        "notes/v1.2",
        "reference/Team-Notes",
        "skills/x/SKILL",
        "system/human",
        "system/persona",
    ]
    got = snapshot(mem, "lc")
    assert got["system/persona"] == ("I'm a coding assistant.", "Who I am: a coding assistant", 5000, False, True)
    assert got["system/human"] == ("Name: Ada", '"The human" #1 priorities', 300, False, True)
    assert got["reference/Team-Notes"][:2] == ("Ada leads.", "@team [links] * misc")
    assert {label: pinned for label, (*_, pinned) in got.items()} == {  # the layout decides: system/** only
        "system/persona": True,
        "system/human": True,
        "reference/Team-Notes": False,
        "notes/v1.2": False,
        "skills/x/SKILL": False,
    }
    # an agent created by a sync has no default blocks, and nothing was written into the directory
    assert "human" not in got and "persona" not in got
    assert git(root, "status", "--porcelain") == "" and not (root / ".tiermem-sync.json").exists()
    assert (root / ".git" / "tiermem-sync.json").exists()
    # a host edits the block with unknown frontmatter keys: they are written back as they were
    agent = mem.get_agent("lc").id
    mem.edit(agent, "notes/v1.2", Append("Fixed"), actor="agent")
    report = sync_memfs(mem, "lc", root)
    assert report["to_files"] == ["notes/v1.2"] and report["commit"]
    assert (
        root / "notes/v1.2.md"
    ).read_text() == "---\ndescription: Release notes\ncolour: blue\n---\nShipped\nFixed\n"
    core = mem.render_core(agent)
    assert "<system/human>" in core and "<reference/Team-Notes>" not in core and "Team-Notes" in core


def test_v2_indexes_and_names(mem: Memory, tmp_path: Path) -> None:
    files = {
        "MEMORY.md": "# Memory\n- [human](human.md)\n- [projects](projects/MEMORY.md)\n",
        "human.md": '---\nname: "Human"\ndescription: "Ada: \\"the\\" user"\n---\nName: Ada\n',
        "projects/MEMORY.md": "# Projects\n",
        "projects/tiermem.md": "---\nname: Tiermem\ndescription: 'It''s a project'\n---\nMCP memory\n",
    }
    root = agent_repo(tmp_path / "memory", files, policy="root-marker")
    report = sync_memfs(mem, "v2", root)
    assert report["layout"] == "v2" and report["skipped"] == [] and len(report["to_store"]) == 4
    got = snapshot(mem, "v2")
    # root files are in the prompt (v2), the rest detached; an index is a block without frontmatter
    assert {label: pinned for label, (*_, pinned) in got.items()} == {
        "MEMORY": True,
        "human": True,
        "projects/MEMORY": False,
        "projects/tiermem": False,
    }
    assert got["human"][:2] == ("Name: Ada", 'Ada: "the" user') and got["projects/tiermem"][1] == "It's a project"
    agent = mem.get_agent("v2").id
    mem.edit(agent, "MEMORY", Append("- [ideas](ideas.md)"), actor="agent")
    mem.update_block(agent, "human", description="Ada, the user")
    mem.create_block(agent, BlockSpec(label="ideas", value="Sync both ways", description="Ideas: new"))
    mem.create_block(agent, BlockSpec(label="loose/idea", value="x", description="A loose idea"))
    report = sync_memfs(mem, "v2", root)
    assert sorted(report["to_files"]) == ["MEMORY", "human", "ideas", "loose/idea"] and report["rejected"] == []
    assert report["notes"] == [
        "loose/idea.md is outside Letta Code's memory (layout v2) until loose/MEMORY.md indexes its folder"
    ]
    assert (root / "MEMORY.md").read_text().endswith("- [ideas](ideas.md)\n") and not (
        root / "MEMORY.md"
    ).read_text().startswith("---")
    assert (root / "human.md").read_text() == '---\nname: "Human"\ndescription: "Ada, the user"\n---\nName: Ada\n'
    assert (root / "ideas.md").read_text() == '---\nname: "Ideas"\ndescription: "Ideas: new"\n---\nSync both ways\n'


def test_files_tiermem_cannot_take_are_skipped_not_the_directory(mem: Memory, tmp_path: Path) -> None:
    root = tmp_path / "memory"
    (root / "system").mkdir(parents=True)
    (root / "system" / "ok.md").write_text("---\ndescription: fine\n---\nfine")
    bad = {
        "open.md": "---\ndescription: x\nno closing",
        "small.md": "---\nlimit: 3\n---\ntoo long",
        "limit.md": "---\nlimit: [1]\n---\nx",
        "nul.md": "bad \x00 text",
        "back\\slash.md": "x",
    }
    for name, text in bad.items():
        (root / name).write_text(text)
    (root / "latin1.md").write_bytes(b"caf\xe9")
    report = run_import(mem, root, fmt="memfs", agent="work", rename=None, replace=False)
    assert report["blocks_created"] == ["system/ok"]
    skipped = "\n".join(report["skipped"])
    for problem in (
        "open.md: its frontmatter starts with '---' but has no closing '---' line",
        "small.md: the value has 8 characters, more than its limit 3",
        "limit.md: limit must be",
        "nul.md: the file contains a NUL character",
        "back\\slash.md: Invalid block label",
        "latin1.md: cannot be read as UTF-8",
    ):
        assert problem in skipped, skipped
    # in a sync, a file that cannot be read keeps its block: it is not taken for deleted
    sync_memfs(mem, "work", root)
    (root / "system" / "ok.md").write_bytes(b"\xff\xfe")
    report = sync_memfs(mem, "work", root)
    assert report["detached"] == [] and "system/ok.md: cannot be read" in report["skipped"][-1]
    assert mem.block(mem.get_agent("work").id, "system/ok").value == "fine"


TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"  # a GitHub token's shape, split so no scanner flags this file


def test_a_file_holding_a_credential_is_skipped_whole_and_the_rest_imported(mem: Memory, tmp_path: Path) -> None:
    """Import and sync screen every file before writing anything: the file with a credential is skipped (nothing of
    it stored, named in the report with the kind and place, never the secret), the files around it are taken,
    whatever their order."""
    root = tmp_path / "memory"
    (root / "system").mkdir(parents=True)
    (root / "system" / "a_clean.md").write_text("---\ndescription: a\n---\nfirst")
    (root / "system" / "b_secret.md").write_text(f"---\ndescription: b\n---\ndeploy with {TOKEN}\n")
    (root / "system" / "c_clean.md").write_text("---\ndescription: c\n---\nthird")
    (root / "notes.md").write_text(f"---\ndescription: uses {TOKEN}\n---\nclean text")
    report = run_import(mem, root, fmt="memfs", agent="work", rename=None, replace=False)
    assert report["blocks_created"] == ["system/a_clean", "system/c_clean"]
    skipped = "\n".join(report["skipped"])
    assert "system/b_secret.md holds a GitHub token (line 1" in skipped and "in its text" in skipped, skipped
    assert "notes.md holds a GitHub token" in skipped and "in its description" in skipped, skipped
    assert TOKEN not in skipped
    agent = mem.get_agent("work").id
    labels = {b.label for b in mem.blocks(agent)}
    assert "system/b_secret" not in labels and "notes" not in labels
    # a sync takes the same files and leaves the one with the credential alone on both sides
    report = sync_memfs(mem, "work", root)
    assert any("system/b_secret.md holds a GitHub token" in s for s in report["skipped"]), report
    assert "system/b_secret" not in {b.label for b in mem.blocks(agent)}
    assert TOKEN in (root / "system" / "b_secret.md").read_text()  # the user's file is not touched
    # once the credential is taken out of the file, the next sync brings it in
    (root / "system" / "b_secret.md").write_text("---\ndescription: b\n---\ndeploy with the key in DEPLOY_KEY\n")
    sync_memfs(mem, "work", root)
    assert mem.block(agent, "system/b_secret").value.strip() == "deploy with the key in DEPLOY_KEY"
    for b in mem.blocks(agent):
        assert TOKEN not in b.value and TOKEN not in b.description


def test_a_directory_of_credentials_alone_creates_no_agent(mem: Memory, tmp_path: Path) -> None:
    root = tmp_path / "memory"
    (root / "system").mkdir(parents=True)
    (root / "system" / "only.md").write_text(f"---\ndescription: x\n---\n{TOKEN}")
    with pytest.raises(ValidationError, match="no .md block files tiermem can read .*holds a GitHub token"):
        run_import(mem, root, fmt="memfs", agent="fresh", rename=None, replace=False)
    assert "fresh" not in {a.name for a in mem.list_agents()}


def test_cli_export_and_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tiermem.cli.main import main

    data, out = str(tmp_path / "d"), tmp_path / "mem"
    common = ["--data-dir", data, "--embedding-model", "hashing"]
    assert main(["agents", "create", "a", *common]) == 0  # agents are made on purpose
    assert main(["blocks", "create", "notes/todo", "--value", "buy milk", "--agent", "a", *common]) == 0
    assert main(["export", "a", "--format", "memfs", "-o", str(out), *common]) == 0
    # pinned, said beside the files; no description: Letta Code's default one, which its tools need
    assert (out / "notes" / "todo.md").read_text() == "---\ndescription: Memory block notes/todo\n---\nbuy milk\n"
    assert main(["import", str(out), "--agent", "b", *common]) == 0
    capsys.readouterr()
    assert main(["blocks", "show", "notes/todo", "--agent", "b", *common]) == 0
    assert capsys.readouterr().out.strip() == "buy milk"
    assert main(["export", "a", "--format", "memfs", *common]) == 1
    assert "Name one agent and a directory" in capsys.readouterr().err
    # a person pins or detaches a block; sync keeps that beside the files (a plain directory), not in the file
    assert main(["blocks", "set", "/notes/todo", "--pinned", "--agent", "b", *common]) == 0
    assert "pinned=true" in capsys.readouterr().out
    synced = tmp_path / "synced"
    assert main(["sync", str(synced), "--agent", "b", *common]) == 0
    assert "pinned" not in (synced / "notes" / "todo.md").read_text()
    # b's human and persona are a's untouched default blocks, imported as they were: never written by a sync
    assert json.loads((synced / ".tiermem-pinned.json").read_text())["pinned"] == {"notes/todo.md": True}
    assert sorted(p.relative_to(synced).as_posix() for p in synced.rglob("*.md")) == ["notes/todo.md"]
    assert main(["blocks", "set", "notes/todo", "--detached", "--agent", "b", *common]) == 0
    # the directory remembers its agent: no --agent needed
    assert main(["sync", str(synced), *common]) == 0
    assert not (synced / ".tiermem-pinned.json").exists()  # notes/: detached, as the layout says


def test_two_way_sync_with_git_history(mem: Memory, tmp_path: Path) -> None:
    agent = seed(mem)
    root = tmp_path / "memory"
    root.mkdir()
    git(root, "init", "-q")
    git(root, "config", "user.email", "me@example.com")
    git(root, "config", "user.name", "Me")
    first = sync_memfs(mem, "ezra", root)  # an empty directory is filled from the store (not with default blocks)
    assert sorted(first["to_files"]) == ["corrections/ezra-mistakes", "notes/projects", "system/human/family"]
    assert first["commit"] and not (root / "human.md").exists()
    assert git(root, "log", "-1", "--format=%an <%ae>").strip() == "tiermem <tiermem@localhost>"
    assert ".tiermem-sync.json" not in git(root, "ls-files")  # the record lives in .git
    assert sync_memfs(mem, "ezra", root)["commit"] == ""  # nothing changed: no commit
    # a file edited in an editor becomes a new block version by "human"; the sync does not commit it (not its edit)
    family = root / "system/human/family.md"
    family.write_text(family.read_text().replace("Partner: Sam", "Partner: Sam\nDaughter: Ada"))
    # an edit made by a host is written to its file and committed, with what changed and who changed it
    mem.edit(agent, "human", Append("Likes lancedb"), actor="agent")
    # a new file creates a block; a deleted file detaches its block
    (root / "notes" / "books.md").write_text("---\ndescription: Reading\n---\nDune\n")
    (root / "corrections" / "ezra-mistakes.md").unlink()
    (root / "unrelated.txt").write_text("someone else's work")
    report = sync_memfs(mem, "ezra", root)
    assert report["to_store"] == ["notes/books", "system/human/family"] and report["to_files"] == ["human"]
    assert report["detached"] == ["corrections/ezra-mistakes"] and report["conflicts"] == []
    assert mem.block(agent, "system/human/family").value == "Partner: Sam\nDaughter: Ada\n"
    assert mem.history(agent, "system/human/family", 1)[0].actor == "human"
    assert mem.history(agent, "system/human/family", 1)[0].operation == "memfs: system/human/family.md edited"
    assert (root / "human.md").read_text().endswith("\nLikes lancedb\n")
    assert snapshot(mem, "ezra")["notes/books"] == ("Dune", "Reading", 5000, False, False)
    assert git(root, "show", "--stat", "--format=", "HEAD").split("|")[0].strip() == "human.md"
    message = git(root, "log", "-1", "--format=%B")
    assert message.startswith("tiermem: create human.md\n") and "core_memory_append by agent" in message
    # the person's own changes are theirs to commit
    status = git(root, "status", "--porcelain")
    for path in ("system/human/family.md", "notes/", "corrections/ezra-mistakes.md", "unrelated.txt"):
        assert path in status, status


def test_conflicting_sync_commits_nothing(mem: Memory, tmp_path: Path) -> None:
    """Regression: a conflicting sync committed the user's file edit as "tiermem sync: 0 block(s)"."""
    agent = seed(mem)
    root = tmp_path / "memory"
    root.mkdir()
    git(root, "init", "-q")
    sync_memfs(mem, "ezra", root)
    head = git(root, "rev-parse", "HEAD")
    path = root / "system/human/family.md"
    path.write_text(path.read_text().replace("Sam", "Sam (file)"))
    mem.edit(agent, "system/human/family", Append("from the host"))
    before_file, before_block = path.read_text(), mem.block(agent, "system/human/family").value
    for _ in range(2):  # reported again until settled
        report = sync_memfs(mem, "ezra", root)
        assert report["conflicts"] == ["system/human/family: the file and the block both changed since the last sync"]
        assert report["commit"] == "" and git(root, "rev-parse", "HEAD") == head
        assert path.read_text() == before_file and mem.block(agent, "system/human/family").value == before_block
    assert git(root, "diff", "--cached", "--name-only") == ""  # nothing staged either
    settled = sync_memfs(mem, "ezra", root, prefer="store")
    assert settled["to_files"] == ["system/human/family"] and settled["conflicts"] == []
    assert path.read_text().endswith("Partner: Sam\n\nfrom the host\n")
    assert sync_memfs(mem, "ezra", root)["conflicts"] == []


def test_commits_the_hook_accepts(mem: Memory, tmp_path: Path) -> None:
    """In a Letta Code agent's repository: read_only is never added, changed or removed; limit not added; a file
    the hook would refuse is not written; an old record committed by an older tiermem leaves the repository."""
    files = dict(LETTA_FILES)
    files["system/rules.md"] = "---\ndescription: Rules\nread_only: true\n---\nBe kind"
    files[".tiermem-sync.json"] = "{}"
    root = agent_repo(tmp_path / "memory", files)
    (root / ".tiermem-sync.json").write_text(json.dumps({"agent": "lc", "blocks": {}}))
    report = sync_memfs(mem, "lc", root)
    assert ".tiermem-sync.json" in " ".join(report["notes"]) and report["commit"]
    assert ".tiermem-sync.json" not in git(root, "ls-files") and not (root / ".tiermem-sync.json").exists()
    agent = mem.get_agent("lc").id
    assert mem.block(agent, "system/rules").read_only
    mem.create_block(agent, BlockSpec(label="reference/new", value="x", limit=900))  # no description, a limit
    mem.update_block(agent, "system/human", read_only=True)  # a person; the file may not say so
    mem.edit(agent, "system/human", Append("Likes tea"), actor="human")
    mem.edit(agent, "system/rules", Append("Be brief"), actor="human")  # a read-only file: the hook refuses
    report = sync_memfs(mem, "lc", root)
    assert sorted(report["to_files"]) == ["reference/new", "system/human"]
    assert report["rejected"] == ["system/rules.md: file is read_only and cannot be modified"]  # the file named once
    assert (root / "reference/new.md").read_text() == "---\ndescription: Memory block reference/new\n---\nx\n"
    assert (root / "system/human.md").read_text() == (
        '---\ndescription: "The human" #1 priorities\nlimit: 300\n---\nName: Ada\nLikes tea\n'
    )
    assert (root / "system/rules.md").read_text() == files["system/rules.md"]
    assert git(root, "status", "--porcelain") == ""
    # both sides agree afterwards: the description Letta Code needs is the block's too
    assert mem.block(agent, "reference/new").description == "Memory block reference/new"
    again = sync_memfs(mem, "lc", root)
    assert again["to_files"] == [] and again["rejected"] == [] and again["waiting"] and again["commit"] == ""


def test_a_rejected_commit_leaves_nothing_staged_and_says_why(mem: Memory, tmp_path: Path) -> None:
    root = agent_repo(tmp_path / "memory", LETTA_FILES)
    hook = root / ".git" / "hooks" / "pre-commit"
    hook.write_text(
        "#!/bin/sh\nif git diff --cached --name-only | grep -q spicy; then\n"
        "  echo 'Frontmatter validation failed:'; echo '  reference/spicy.md: too spicy'; exit 1; fi\n"
    )
    hook.chmod(0o755)
    sync_memfs(mem, "lc", root)
    agent = mem.get_agent("lc").id
    mem.create_block(agent, BlockSpec(label="reference/spicy", value="chili", description="Hot"))
    mem.edit(agent, "reference/Team-Notes", Append("Bo joins"), actor="agent")
    report = sync_memfs(mem, "lc", root)
    assert report["rejected"] == ["reference/spicy.md: too spicy"]
    assert report["to_files"] == ["reference/Team-Notes"] and report["commit"]  # the rest went in
    assert git(root, "show", "--stat", "--format=", "HEAD").split("|")[0].strip() == "reference/Team-Notes.md"
    assert not (root / "reference/spicy.md").exists() and git(root, "status", "--porcelain") == ""
    assert sync_memfs(mem, "lc", root)["waiting"] == ["reference/spicy.md: too spicy"]
    mem.edit(agent, "reference/spicy", Append("mild"), actor="agent")  # changed again: tried again
    assert sync_memfs(mem, "lc", root)["rejected"] == ["reference/spicy.md: too spicy"]


def test_letta_code_edits_arrive_and_limits_stay(mem: Memory, tmp_path: Path) -> None:
    """Letta Code's tool rewrites frontmatter without `limit`, renames with `git mv`, deletes folders."""
    root = agent_repo(tmp_path / "memory", LETTA_FILES)
    sync_memfs(mem, "lc", root)
    agent = mem.get_agent("lc").id
    (root / "system/human.md").write_text("---\ndescription: The human\n---\nName: Ada Lovelace")
    git(root, "mv", "reference/Team-Notes.md", "reference/team.md")
    git(root, "rm", "-q", "-r", "skills")
    git(root, "commit", "-q", "-a", "-m", "Rename team notes")
    report = sync_memfs(mem, "lc", root)
    assert report["renamed"] == ["reference/Team-Notes -> reference/team"] and report["detached"] == ["skills/x/SKILL"]
    human = mem.block(agent, "system/human")
    assert (human.value, human.limit) == ("Name: Ada Lovelace", 300)
    assert mem.history(agent, "system/human", 1)[0].operation == "memfs: Rename team notes (commit by Letta Code)"
    assert mem.block(agent, "reference/team").value == "Ada leads."
    assert [v.operation for v in mem.history(agent, "reference/team", 5)][-2:] == [
        "memfs: renamed from reference/Team-Notes.md",
        "create",
    ]
    (root / "system/human.md").write_text("---\ndescription: The human\n---\n" + "x" * 400)
    report = sync_memfs(mem, "lc", root)
    assert mem.block(agent, "system/human").limit == 400
    assert report["notes"] == [
        "system/human: limit raised from 300 to 400 characters to fit system/human.md (the file states no limit)"
    ]


def test_default_blocks_are_not_written(settings: Settings, tmp_path: Path) -> None:
    memory = open_memory(
        settings.model_copy(
            update={
                "default_blocks": [
                    BlockSpec(label="human", value="", description="The human"),
                    BlockSpec(label="persona", value="I am tiermem.", description="Me"),
                ]
            }
        )
    )
    agent = memory.ensure_agent("work").id  # as `tiermem serve` creates it
    root = agent_repo(tmp_path / "memory", {"system/human.md": "---\ndescription: The human\n---\nAda"})
    report = sync_memfs(memory, "work", root)
    assert report["to_files"] == [] and report["commit"] == "" and sorted(p.name for p in root.glob("*.md")) == []
    memory.edit(agent, "persona", Append("I like tea."), actor="agent")  # edited: now it is memory worth a file
    assert sync_memfs(memory, "work", root)["to_files"] == ["persona"]


def test_watch_syncs_when_either_side_changes(mem: Memory, tmp_path: Path) -> None:
    agent = seed(mem)
    root = tmp_path / "memory"
    reports: list[dict] = []
    counts: list[int] = []
    idle = lambda: None  # noqa: E731
    steps = iter(
        [
            idle,
            idle,
            lambda: (root / "human.md").write_text("---\ndescription: d\nlimit: 100\n---\nAda\n"),
            idle,
            idle,
            lambda: mem.edit(agent, "human", Append("Bob")),
            idle,
            idle,
        ]
    )

    def keep_going() -> bool:  # between rounds: one change, then rounds with nothing to do
        counts.append(len(reports))
        step = next(steps, None)
        if step is None:
            return False
        step()
        return True

    watch_memfs(mem, "ezra", root, interval=0.001, on_report=reports.append, keep_going=keep_going)
    changes = [r for r in reports if r["to_store"] or r["to_files"]]
    assert [(r["to_store"], r["to_files"]) for r in changes] == [
        ([], ["corrections/ezra-mistakes", "notes/projects", "system/human/family"]),
        (["human"], []),
        ([], ["human"]),
    ]
    assert counts[1] == counts[2] and counts[4] == counts[5] and counts[-2] == counts[-1]  # quiet: no pass at all
    assert (root / "human.md").read_text().endswith("---\nAda\nBob\n")
    with pytest.raises(ValidationError, match="greater than 0"):
        watch_memfs(mem, "ezra", root, interval=0, on_report=reports.append)


def test_a_watch_stopped_while_it_waits_runs_no_other_round(mem: Memory, tmp_path: Path) -> None:
    """A stop that comes while the watch waits between rounds (Ctrl-C) ends it there: a change made meanwhile is
    not synced by one more round first."""
    root = tmp_path / "memory"
    reports: list[dict[str, object]] = []
    stopped: list[bool] = []

    def wait(_seconds: float) -> None:  # the stop arrives during the wait, with a change to sync
        (root / "human.md").write_text("---\ndescription: h\n---\nAda\n")
        stopped.append(True)

    watch_memfs(mem, "ezra", root, interval=1, on_report=reports.append, keep_going=lambda: not stopped, wait=wait)
    assert len(reports) == 1  # the first round only


def test_a_commit_landing_meanwhile_is_kept(mem: Memory, tmp_path: Path) -> None:
    """Letta Code commits while tiermem's commit is in its hook: tiermem's is built again on top, nothing undone."""
    root = agent_repo(tmp_path / "memory", LETTA_FILES)
    sync_memfs(mem, "lc", root)
    # someone else's commit, made aside and moved onto the branch by the hook, once
    (root / "notes/theirs.md").write_text("---\ndescription: Theirs\n---\nLetta's\n")
    git(root, "add", "notes/theirs.md")
    git(root, "commit", "-q", "-m", "Their note")
    theirs = git(root, "rev-parse", "HEAD").strip()
    git(root, "reset", "-q", "--hard", "HEAD~1")
    hook = root / ".git" / "hooks" / "pre-commit"
    hook.write_text(
        f"#!/bin/sh\n[ -e .git/once ] && exit 0\ntouch .git/once\ngit update-ref HEAD {theirs}\n"
        f"GIT_INDEX_FILE=.git/index git read-tree {theirs}\n"
    )  # the branch and the index, as a commit moves them
    hook.chmod(0o755)
    mem.edit(mem.get_agent("lc").id, "system/human", Append("Likes tea"), actor="agent")
    report = sync_memfs(mem, "lc", root)
    assert report["commit"] and report["rejected"] == []
    assert git(root, "rev-parse", "HEAD~1").strip() == theirs  # built on their commit
    assert git(root, "show", "HEAD:notes/theirs.md") == "---\ndescription: Theirs\n---\nLetta's\n"
    assert git(root, "show", "HEAD:system/human.md").endswith("Name: Ada\nLikes tea\n")


def test_the_branch_does_not_move_under_another_git_command(mem: Memory, tmp_path: Path) -> None:
    """While another git command holds the index (Letta Code's own commit, whose hook takes a moment), tiermem's
    commit waits: moving the branch under it would make that commit fail."""
    import threading
    import time

    root = agent_repo(tmp_path / "memory", LETTA_FILES)
    sync_memfs(mem, "lc", root)
    head = git(root, "rev-parse", "HEAD")
    mem.edit(mem.get_agent("lc").id, "system/human", Append("Likes tea"), actor="agent")
    lock = root / ".git" / "index.lock"
    lock.write_text("")
    done: list[dict] = []
    worker = threading.Thread(target=lambda: done.append(sync_memfs(mem, "lc", root)))
    worker.start()
    time.sleep(1.0)
    assert git(root, "rev-parse", "HEAD") == head and not done  # waiting
    lock.unlink()
    worker.join(30)
    assert done and done[0]["commit"] and git(root, "rev-parse", "HEAD") != head
    assert git(root, "status", "--porcelain") == ""


def test_branch_work_tree_and_index_move_together(mem: Memory, tmp_path: Path) -> None:
    """The first git command after tiermem's branch moved (here: the post-commit hook, standing in for Letta Code's
    memory tool) finds the repository clean, and a file Letta Code had staged, committed then, keeps tiermem's edit
    (its commit is made from the repository's index: one without tiermem's files would take them back)."""
    root = agent_repo(tmp_path / "memory", LETTA_FILES)
    (root / ".git" / "letta-memory-layout-policy").unlink()  # not Letta Code's: tiermem does not wait for a staged file
    sync_memfs(mem, "lc", root)
    (root / "notes/theirs.md").write_text("---\ndescription: Theirs\n---\nLetta's\n")
    git(root, "add", "notes/theirs.md")
    hook = root / ".git" / "hooks" / "post-commit"
    hook.write_text(
        "#!/bin/sh\n[ -e .git/once ] && exit 0\ntouch .git/once\n"
        "git status --porcelain --untracked-files=no > .git/seen\ngit commit -q -m 'Their note'\n"
    )
    hook.chmod(0o755)
    mem.edit(mem.get_agent("lc").id, "system/human", Append("Likes tea"), actor="agent")
    report = sync_memfs(mem, "lc", root)
    assert report["commit"] and report["rejected"] == []
    assert (root / ".git" / "seen").read_text() == "A  notes/theirs.md\n"  # only their staged file
    assert git(root, "log", "-1", "--format=%s") == "Their note\n"
    assert git(root, "show", "HEAD:system/human.md").endswith("Name: Ada\nLikes tea\n")  # not taken back
    assert git(root, "status", "--porcelain") == ""
    assert sync_memfs(mem, "lc", root)["to_store"] == []


def test_a_lock_left_behind_is_reported_not_waited_for(mem: Memory, tmp_path: Path) -> None:
    import os
    import time

    root = agent_repo(tmp_path / "memory", LETTA_FILES)
    sync_memfs(mem, "lc", root)
    head, before = git(root, "rev-parse", "HEAD"), (root / "system/human.md").read_text()
    lock = root / ".git" / "index.lock"
    lock.write_text("")
    os.utime(lock, (time.time() - 60, time.time() - 60))
    mem.edit(mem.get_agent("lc").id, "system/human", Append("Likes tea"), actor="agent")
    with pytest.raises(ValidationError, match=r"index.lock is \d+ s old: .* remove it; nothing was committed"):
        sync_memfs(mem, "lc", root)
    assert (git(root, "rev-parse", "HEAD"), (root / "system/human.md").read_text()) == (head, before)
    lock.unlink()
    report = sync_memfs(mem, "lc", root)
    assert report["to_files"] == ["system/human"] and report["commit"] and git(root, "status", "--porcelain") == ""


def test_the_branch_does_not_move_under_a_letta_code_commit_on_its_way(mem: Memory, tmp_path: Path) -> None:
    """Letta Code's memory tool stages its file, then commits (its hook runs with the index unlocked; the commit
    fails if the branch moved since it began): tiermem waits while the index holds a file not in HEAD, then builds
    on that commit."""
    import threading
    import time

    root = agent_repo(tmp_path / "memory", LETTA_FILES)
    sync_memfs(mem, "lc", root)
    head = git(root, "rev-parse", "HEAD")
    (root / "reference/theirs.md").write_text("---\ndescription: Theirs\n---\nLetta's\n")
    git(root, "add", "reference/theirs.md")
    mem.edit(mem.get_agent("lc").id, "system/human", Append("Likes tea"), actor="agent")
    done: list[dict] = []
    worker = threading.Thread(target=lambda: done.append(sync_memfs(mem, "lc", root)))
    worker.start()
    time.sleep(1.0)
    assert git(root, "rev-parse", "HEAD") == head and not done  # waiting for the commit on its way
    git(root, "commit", "-q", "-m", "Their note")
    theirs = git(root, "rev-parse", "HEAD")
    worker.join(30)
    assert done and done[0]["commit"] and git(root, "rev-parse", "HEAD~1") == theirs
    assert git(root, "show", "HEAD:system/human.md").endswith("Name: Ada\nLikes tea\n")
    assert git(root, "show", "HEAD:reference/theirs.md").endswith("Letta's\n")
    assert git(root, "status", "--porcelain") == ""


ROUND_TRIP = {k: v for k, v in SHAPES.items() if "read_only" not in v and not k.startswith("v2")}


@pytest.mark.parametrize("text", ROUND_TRIP.values(), ids=ROUND_TRIP.keys())
def test_frontmatter_survives_a_block_edit_byte_for_byte(mem: Memory, tmp_path: Path, text: str) -> None:
    """A file Letta Code (or a person) changed, then a block edit in tiermem written back: only the value's lines
    change, never a byte of the frontmatter (an empty frontmatter used to gain a blank line, a spurious diff)."""
    root = tmp_path / "memory"
    (root / "notes").mkdir(parents=True)
    (root / "notes/x.md").write_bytes(b"---\ndescription: first\n---\nold\n")
    sync_memfs(mem, "lc", root)
    (root / "notes/x.md").write_bytes(text.encode())  # the file side changes: the block keeps its frontmatter
    assert sync_memfs(mem, "lc", root)["to_store"] == ["notes/x"]
    agent = mem.get_agent("lc").id
    mem.edit(agent, "notes/x", Append("added"), actor="agent")
    assert sync_memfs(mem, "lc", root)["to_files"] == ["notes/x"]
    body = split_file(text).body
    head = text[: len(text) - len(body)]
    eol = "\r\n" if text.startswith("---\r\n") else "\n"  # the body in the file's own line ending
    assert (root / "notes/x.md").read_bytes().decode() == head + (mem.block(agent, "notes/x").value + "\n").replace(
        "\n", eol
    )
    version = mem.block(agent, "notes/x").version
    again = sync_memfs(mem, "lc", root)
    assert again["to_files"] == again["to_store"] == [] and mem.block(agent, "notes/x").version == version
    # an empty value: nothing after the closing line, as Letta Code writes it (it used to gain a blank line)
    mem.edit(agent, "notes/x", Rethink(""), actor="agent")
    assert sync_memfs(mem, "lc", root)["to_files"] == ["notes/x"]
    assert (root / "notes/x.md").read_bytes().decode() == head


def test_a_sync_pass_reads_the_last_commit_in_one_git_process(
    mem: Memory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the last commit holds is read with one `git cat-file --batch` per look (the hook pre-check, the commit),
    not one `git show` per file; the results are those of reading file by file."""
    from tiermem.interop.memfs_git import Repo

    files = dict(LETTA_FILES)
    files |= {f"reference/f{i}.md": f"---\ndescription: File {i}\n---\nText {i}\n" for i in range(12)}
    files["reference/a b é.md"] = "---\ndescription: Spaces and é\n---\nSé\n"
    files["reference/crlf.md"] = "---\r\ndescription: CRLF\r\n---\r\nLine\r\n"
    root = agent_repo(tmp_path / "memory", files)
    sync_memfs(mem, "lc", root)
    agent = mem.get_agent("lc").id
    for i in range(12):
        mem.edit(agent, f"reference/f{i}", Append("more"), actor="agent")
    mem.create_block(agent, BlockSpec(label="reference/new", value="x", description="New"))
    trace = tmp_path / "git-trace"
    monkeypatch.setenv("GIT_TRACE", str(trace))
    report = sync_memfs(mem, "lc", root)
    monkeypatch.delenv("GIT_TRACE")
    ran = [line.split("built-in: ", 1)[1] for line in trace.read_text().splitlines() if "built-in: git " in line]
    assert [r for r in ran if r.startswith("git show")] == []
    assert len([r for r in ran if r.startswith("git cat-file --batch")]) == 2
    assert sorted(report["to_files"]) == sorted([f"reference/f{i}" for i in range(12)] + ["reference/new"])
    message = git(root, "log", "-1", "--format=%B")
    assert "create reference/new.md:" in message and "update reference/f3.md:" in message
    assert git(root, "status", "--porcelain") == ""
    # file by file with `git show`, as it was read before: the same texts (CRLF, spaces, non-ASCII; None: absent)
    repo = Repo.find(root)
    assert repo is not None
    rels = [*files, "reference/new.md", "nope.md", "reference"]
    shown = {}
    for rel in rels:
        done = subprocess.run(["git", "-C", str(root), "show", f"HEAD:{rel}"], capture_output=True, check=False)
        shown[rel] = done.stdout.decode() if done.returncode == 0 and not rel == "reference" else None
    assert repo.head_texts(rels) == shown and shown["reference/crlf.md"] == files["reference/crlf.md"]
    empty = tmp_path / "empty"
    git(tmp_path, "init", "-q", str(empty))
    assert Repo.find(empty).head_texts(["x.md"]) == {"x.md": None}  # type: ignore[union-attr]
