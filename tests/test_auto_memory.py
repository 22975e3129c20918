"""Claude Code's auto memory and tiermem as one (``interop/auto_memory.py``), with the real Claude Code, offline.

After `tiermem setup claude-code`: the auto-memory files the user had are copied into the shared folder (theirs left
in place) and stored in tiermem; a memory file Claude Code's model writes (its Write tool, scripted on a fake
Anthropic API) is in tiermem's archival memory after that session's reply (found as another host finds it); a block
edited in tiermem is in the ``MEMORY.md`` Claude Code loads into its next session; `--uninstall` restores the user's
setting and leaves the files. Skipped, with the reason, when Claude Code is missing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from starlette.testclient import TestClient

from tiermem.base.config import BlockSpec, Settings, load_settings
from tiermem.base.errors import StoreError
from tiermem.base.projects import project_of
from tiermem.base.records import Passage
from tiermem.cli.main import main
from tiermem.domain import autorecall
from tiermem.domain.blocks import Rethink
from tiermem.domain.factory import open_memory
from tiermem.domain.memory import Memory
from tiermem.interop import auto_memory, auto_memory_admin, claude_projects
from tiermem.interop.auto_memory import directory
from tiermem.interop.claude_code import install, plan
from tiermem.interop.claude_projects import folder_name
from tiermem.ui.launch import build_ui_server

from . import fake_anthropic as fa
from .claude_code import ClaudeCode, claude_code
from .conftest import text_of
from .test_transports import stdio_params

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
        projects = cc.home / ".claude" / "projects"
        elsewhere = cc.workdir.parent / "elsewhere"  # another project, worked in before setup
        elsewhere.mkdir()
        old = projects / folder_name(str(elsewhere)) / "memory"
        old.mkdir(parents=True)
        (old / "editor.md").write_text(OLD)
        (old / "MEMORY.md").write_text("- [Editor](editor.md) — which editor\n")
        (old.parent / "earlier.jsonl").write_text(json.dumps({"type": "user", "cwd": str(elsewhere)}) + "\n")
        cc.tiermem("agents", "create", "default", "--data-dir", str(data))
        setup = cc.tiermem("setup", "claude-code", "--data-dir", str(data))
        folder = projects / folder_name(os.path.realpath(cc.workdir)) / "memory"  # where Claude Code keeps this one's
        target = folder / "cat.md"
        cc.fake.add(fa.tool("Write", {"file_path": str(target), "content": NEW}), fa.text("Saved."))
        first = cc.run("Remember that my cat is called Miso.", "--allowedTools", "Write")
        after_first = found(data, "What is my cat called?")
        cc.tiermem("blocks", "set", "human", EDITED, "--data-dir", str(data))
        before = len(cc.fake.requests)
        second = cc.run("Hello again. Which editor does Ada use?")
        yield {
            "cc": cc,
            "data": data,
            "folder": folder,
            "old": old,
            "elsewhere": elsewhere,
            "setup": setup,
            "first": first,
            "after_first": after_first,
            "second": second,
            "second_requests": cc.fake.requests[before:],
        }


def projects_of(data: Path) -> dict[str, str | None]:
    memory = open_memory(load_settings(data_dir=data, embedding_model="default"), start_embedder=False)
    agent = memory.ensure_agent("default").id
    return {p.content: p.project for p in memory.archive.rows.passages_of(agent) if auto_memory.TAG in p.tags}


def test_setup_syncs_each_projects_auto_memory_in_its_project(shared: dict[str, Any]) -> None:
    cc, old = shared["cc"], shared["old"]
    settings = json.loads((cc.home / ".claude" / "settings.json").read_text())
    assert "autoMemoryDirectory" not in settings  # Claude Code keeps one folder per project
    assert (old / "editor.md").read_text() == OLD  # theirs left as it was, tiermem's lines added to its index
    index = (old / "MEMORY.md").read_text()
    assert "- [Editor](editor.md) — which editor" in index and "(tiermem-human.md)" in index
    (editor,) = [project for text, project in projects_of(shared["data"]).items() if "Helix" in text]
    assert editor == os.path.realpath(shared["elsewhere"])


def test_a_memory_claude_code_writes_is_in_tiermem_after_the_reply(shared: dict[str, Any]) -> None:
    assert not shared["first"]["is_error"], shared["first"]
    written = (shared["folder"] / "cat.md").read_text()  # Claude Code's Write tool wrote it (its frontmatter
    assert "Ada's cat is called Miso." in written and "name: cat" in written  # normalised: it quotes values)
    assert any("Miso" in hit for hit in shared["after_first"]), shared["after_first"]
    projects = projects_of(shared["data"])
    (cat,) = [p for text, p in projects.items() if "Miso" in text]
    assert cat == os.path.realpath(shared["cc"].workdir)


def test_a_block_edit_in_tiermem_is_in_the_auto_memory_claude_code_loads_next(shared: dict[str, Any]) -> None:
    first = json.dumps(shared["second_requests"][0])
    start = first.index("user's auto-memory")
    assert EDITED in first[start : start + 3000], first[start : start + 3000]


def test_another_projects_auto_memory_is_not_in_a_session(shared: dict[str, Any]) -> None:
    """What Claude Code remembered in another project is neither in the MEMORY.md it loads here nor recalled."""
    sent = json.dumps(shared["second_requests"])
    assert "Which editor does Ada use?" in sent and "user's auto-memory" in sent
    assert "Helix" not in sent and "which editor" not in sent


def test_uninstall_takes_tiermems_files_out_and_leaves_claude_codes(shared: dict[str, Any]) -> None:
    cc, folder, old = shared["cc"], shared["folder"], shared["old"]
    cc.tiermem("setup", "claude-code", "--uninstall", "--data-dir", str(shared["data"]))
    settings_file = cc.home / ".claude" / "settings.json"
    assert not settings_file.exists() or "autoMemoryDirectory" not in json.loads(settings_file.read_text())
    assert (folder / "cat.md").exists() and (old / "editor.md").read_text() == OLD
    assert not list(folder.glob("tiermem-*.md")) and not list(old.glob("tiermem-*.md"))
    assert (old / "MEMORY.md").read_text() == "- [Editor](editor.md) — which editor\n"


def claude_home(tmp_path: Path, *projects: Path) -> tuple[Path, dict[Path, Path]]:
    """A Claude Code HOME whose projects each have an auto-memory folder, and tiermem's side recorded as setup
    records it; (tiermem's side, each project's folder)."""
    claude = tmp_path / "home" / ".claude"
    claude.mkdir(parents=True)
    folders = {}
    for project in projects:
        project.mkdir(parents=True, exist_ok=True)
        folders[project] = claude / "projects" / folder_name(os.path.realpath(project)) / "memory"
        folders[project].mkdir(parents=True)
    home = tmp_path / "data" / "auto-memory" / "default"
    home.mkdir(parents=True)
    sources = {"projects": str(claude / "projects"), "config": str(claude.parent / ".claude.json")}
    (home / "sources.json").write_text(json.dumps({**sources, "settings": str(claude / "settings.json")}))
    return home, folders


def opened(tmp_path: Path) -> tuple[Memory, str]:
    memory = open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="hashing"), start_embedder=False)
    return memory, memory.ensure_agent("default").id


def tagged(memory: Memory, agent: str) -> list[Passage]:
    return [p for p in memory.archive.rows.passages_of(agent) if auto_memory.TAG in p.tags]


def cat_synced(tmp_path: Path) -> tuple[Memory, str, Path, Path, Passage]:
    """A store whose sync stored Claude Code's memory file cat.md (``NEW``) of a project: (the memory, the agent,
    Claude Code's home, the file, the passage)."""
    memory, agent = opened(tmp_path)
    project = tmp_path / "work"
    home, folders = claude_home(tmp_path, project)
    cat = folders[project] / "cat.md"
    cat.write_text(NEW)
    auto_memory.sync(memory, agent, home, str(project))
    [stored] = tagged(memory, agent)
    return memory, agent, home, cat, stored


def test_sync_both_ways_without_a_host(tmp_path: Path) -> None:
    """A changed file replaces its passage and a removed one removes it; a block file edited on disk becomes the
    block's value, and a block edited in tiermem rewrites its file and its index line; the user's lines stay."""
    memory, agent = opened(tmp_path)
    project = tmp_path / "work"
    home, folders = claude_home(tmp_path, project)
    folder = folders[project]
    (folder / "MEMORY.md").write_text("- [Cat](cat.md) — the cat\n")
    (folder / "cat.md").write_text(NEW)
    first = auto_memory.sync(memory, agent, home, str(project))
    assert first.imported == 1 and first.blocks_written == len(memory.blocks(agent)) and not first.problems
    assert [(p.content, p.project) for p in tagged(memory, agent)] == [
        ("the user's cat\n\nAda's cat is called Miso.", project_of(str(project)))
    ]
    assert auto_memory.sync(memory, agent, home) == auto_memory.Synced()  # nothing changed: nothing done

    [cat] = tagged(memory, agent)
    memory.uses.note("passage", agent, [cat.id])
    memory.uses.flush()
    (folder / "cat.md").write_text(NEW.replace("Miso", "Tofu"))
    (folder / "tiermem-human.md").write_text("---\nname: tiermem-human\n---\n\nName: Ada. Lives in Lisbon.\n")
    second = auto_memory.sync(memory, agent, home)
    assert second.imported == 1 and second.blocks_edited == 1
    assert memory.block(agent, "human").value == "Name: Ada. Lives in Lisbon."
    assert [p.content for p in tagged(memory, agent)] == ["the user's cat\n\nAda's cat is called Tofu."]
    assert cat.id not in {u.id for u in memory.uses.by_agent()}  # the replaced passage left no use record

    memory.edit(agent, "human", Rethink("Name: Ada. Lives in Porto."), actor="human")
    (folder / "cat.md").unlink()
    third = auto_memory.sync(memory, agent, home)
    assert third.removed == 1 and third.blocks_edited == 0
    assert "Lives in Porto." in (folder / "tiermem-human.md").read_text()
    index = (folder / "MEMORY.md").read_text()
    assert "(tiermem-human.md) — Name: Ada. Lives in Porto." in index and "- [Cat](cat.md) — the cat" in index
    assert not tagged(memory, agent)


def test_an_agent_deleted_and_made_anew_has_every_file_stored_again(tmp_path: Path) -> None:
    """`tiermem agents delete default` leaves the sync's state (Claude Code's folders are not the agent's); the
    default agent made anew (the same id: it is stable) has every file stored again and its own blocks written."""
    memory, agent = opened(tmp_path)
    project = tmp_path / "work"
    home, folders = claude_home(tmp_path, project)
    folder = folders[project]
    (folder / "cat.md").write_text(NEW)
    memory.edit(agent, "human", Rethink("Name: Ada. Lives in Porto."), actor="human")
    assert auto_memory.sync(memory, agent, home, str(project)).imported == 1
    memory.delete_agent(agent)
    again = memory.ensure_agent("default").id
    assert again == agent
    done = auto_memory.sync(memory, again, home)
    assert done.imported == 1 and not done.problems, done
    assert [p.content for p in tagged(memory, again)] == ["the user's cat\n\nAda's cat is called Miso."]
    assert "Porto" not in (folder / "tiermem-human.md").read_text()
    assert auto_memory.sync(memory, again, home) == auto_memory.Synced()


def test_a_file_whose_passage_is_gone_is_stored_again_unless_it_was_forgotten(tmp_path: Path) -> None:
    """A passage of a file gone from the store, not by a deletion asked for (a backup from before it restored; here
    deleted with no ``deletion_guard``, as a store that lost it) is stored again by the next sync; one a forget took
    and whose file it could not edit, or deleted on purpose (marked so), is not, until the file changes."""
    memory, agent, home, cat, stored = cat_synced(tmp_path)
    memory.archival_delete(agent, stored.id)
    assert auto_memory.sync(memory, agent, home).imported == 1
    [again] = tagged(memory, agent)
    assert again.content == stored.content and again.project == stored.project

    memory.archival_delete(agent, again.id)
    auto_memory_admin._keep_forgotten([home], {cat})  # as a forget that could not edit the file marks it
    assert auto_memory.sync(memory, agent, home) == auto_memory.Synced() and not tagged(memory, agent)
    cat.write_text(NEW.replace("Miso", "Tofu"))
    assert auto_memory.sync(memory, agent, home).imported == 1
    assert [p.content for p in tagged(memory, agent)] == ["the user's cat\n\nAda's cat is called Tofu."]


def test_a_passage_deleted_on_purpose_stays_deleted_when_the_deletion_fails_after_its_rows_went(
    tmp_path: Path,
) -> None:
    """`archival_memory_delete` deletes the passage's rows, then its use record: when that fails (the use counters'
    file cannot be opened: a directory stands at its path), the deletion fails, yet the passage is gone and its file
    is marked, so the next sync does not store it again."""
    memory, agent, home, _, stored = cat_synced(tmp_path)
    memory.core.close()
    memory, agent = opened(tmp_path)
    auto_memory_admin.guard_deletions(memory, tmp_path / "data")
    uses = tmp_path / "data" / "uses.sqlite3"
    for extra in ("", "-wal", "-shm"):
        Path(f"{uses}{extra}").unlink(missing_ok=True)
    uses.mkdir()
    with pytest.raises(StoreError, match="use counters"):
        memory.archival_delete(agent, stored.id)
    assert not tagged(memory, agent)
    assert auto_memory.sync(memory, agent, home) == auto_memory.Synced() and not tagged(memory, agent)


def test_each_projects_auto_memory_stays_in_its_project(tmp_path: Path) -> None:
    """Claude Code keeps one auto-memory folder per project; each file is stored in the project the hooks name
    (known from a hook's working directory, or from Claude Code's own transcripts), so a prompt in another project
    does not recall it; a folder whose project is not known is not stored at all (it would be every project's)."""
    memory, agent = opened(tmp_path)
    acme, other, unknown = tmp_path / "acme", tmp_path / "other", tmp_path / "unknown"
    home, folders = claude_home(tmp_path, acme, other, unknown)
    (folders[acme] / "client.md").write_text(
        "---\nname: client_acme\ndescription: ACME contract\n---\n\nThe ACME contract renewal is 48,000 EUR.\n"
    )
    (folders[other] / "editor.md").write_text(OLD)
    (folders[unknown] / "door.md").write_text("---\nname: door\n---\n\nThe office door code is 7719.\n")
    transcript = folders[acme].parent / "session.jsonl"  # Claude Code's transcript of a session in acme
    transcript.write_text(json.dumps({"type": "user", "cwd": str(acme)}) + "\n")
    done = auto_memory.sync(memory, agent, home, str(other / "src"))  # a hook working in a folder of `other`
    assert done.imported == 2 and len(done.waiting) == 1 and str(folders[unknown]) in done.waiting[0]
    kept = {p.project: p.content for p in tagged(memory, agent)}
    assert set(kept) == {project_of(str(acme)), project_of(str(other))}
    assert "48,000" in kept[project_of(str(acme))] and "Helix" in kept[project_of(str(other))]
    assert not (folders[unknown] / "tiermem-human.md").exists()  # not synced either way

    scope = autorecall.RecallSettings(threshold=0.0, limit=10, max_chars=5000)
    ask = "What is the ACME contract renewal price in EUR?"
    elsewhere = autorecall.recall(memory, agent, ask, session="s", settings=scope, project=project_of(str(other)))
    assert not any("48,000" in r.content for r in elsewhere), elsewhere
    there = autorecall.recall(memory, agent, ask, session="s", settings=scope, project=project_of(str(acme)))
    assert any("48,000" in r.content for r in there), there

    later = auto_memory.sync(memory, agent, home, str(unknown))  # a session there names its project
    assert later.imported == 1 and not later.waiting
    assert {p.project for p in tagged(memory, agent)} == {project_of(str(p)) for p in (acme, other, unknown)}


def test_a_file_that_cannot_be_synced_is_reported_and_the_rest_is_not_stored_twice(tmp_path: Path) -> None:
    """A block whose label is a path, a file that is not UTF-8, a name too long for a tag, and a block file edited
    past the block's limit: each is handled on its own (the bad ones reported), the state is saved, and later
    syncs store nothing again."""
    memory, agent = opened(tmp_path)
    project = tmp_path / "work"
    home, folders = claude_home(tmp_path, project)
    folder = folders[project]
    memory.create_block(agent, BlockSpec(label="notes/projects", value="Project list: BLUEHERON, KESTREL"))
    (folder / "alpha.md").write_text("---\nname: alpha\n---\n\nThe alpha service runs on port 7001.\n")
    (folder / "long.md").write_text(f"---\nname: {'n' * 90}\n---\n\nThe long-named note.\n")
    (folder / "zeta.md").write_bytes(b"---\nname: zeta\n---\n\ncaf\xe9 latin-1 body\n")
    first = auto_memory.sync(memory, agent, home, str(project))
    assert first.imported == 2, first
    assert len(first.problems) == 1 and "zeta.md" in first.problems[0] and "UTF-8" in first.problems[0]
    notes = folder / auto_memory.block_file("notes/projects")
    assert notes.parent == folder and "BLUEHERON" in notes.read_text()
    assert f"({notes.name})" in (folder / "MEMORY.md").read_text()
    assert auto_memory_admin.problems(tmp_path / "data") == {"default": first.problems}  # what doctor shows

    human = folder / "tiermem-human.md"
    human.write_text(human.read_text() + "x" * (memory.block(agent, "human").limit + 10) + "\n")
    (folder / "beta.md").write_text("---\nname: beta\n---\n\nThe beta service runs on port 7002.\n")
    second = auto_memory.sync(memory, agent, home)
    assert second.imported == 1 and any("tiermem-human.md" in p for p in second.problems), second
    assert "xxxxxxxx" not in memory.block(agent, "human").value  # the block kept; the edit kept as a passage
    assert "xxxxxxxx" not in human.read_text()
    assert [p for p in memory.archive.rows.passages_of(agent) if auto_memory.CONFLICT_TAG in p.tags]
    for _ in range(2):
        auto_memory.sync(memory, agent, home)
    contents = [p.content for p in tagged(memory, agent) if auto_memory.CONFLICT_TAG not in p.tags]
    assert sorted(contents) == sorted(
        ["The alpha service runs on port 7001.", "The long-named note.", "The beta service runs on port 7002."]
    )
    assert all(len(t) <= 64 for p in tagged(memory, agent) for t in p.tags)


def test_a_file_gone_before_it_is_read_is_gone_and_a_folder_named_md_is_no_file(tmp_path: Path) -> None:
    """A file listed but gone when read (removed meanwhile; here a link to nothing) is not a problem: its passage is
    removed as a removed file's is. A folder named like a memory file is no file: neither the sync nor `forget
    --text` reports it."""
    memory, agent = opened(tmp_path)
    project = tmp_path / "work"
    home, folders = claude_home(tmp_path, project)
    folder = folders[project]
    (folder / "alpha.md").write_text("---\nname: alpha\n---\n\nThe alpha service runs on port 7001.\n")
    (folder / "beta.md").write_text("---\nname: beta\n---\n\nThe beta service runs on port 7002.\n")
    assert auto_memory.sync(memory, agent, home, str(project)).imported == 2
    (folder / "beta.md").unlink()
    (folder / "beta.md").symlink_to(tmp_path / "nowhere.md")
    (folder / "drafts.md").mkdir()
    done = auto_memory.sync(memory, agent, home)
    assert done.removed == 1 and not done.problems, done
    assert [p.content for p in tagged(memory, agent)] == ["The alpha service runs on port 7001."]
    assert auto_memory_admin.forget_text(tmp_path / "data", ["default"], ["port 7001"]) == (
        [str(folder / "alpha.md")],
        [],
    )


def test_a_block_edited_on_both_sides_keeps_both(tmp_path: Path) -> None:
    """A block set in tiermem while Claude Code edits its file: lines Claude Code added are added to tiermem's value;
    any other edit of both keeps tiermem's value, stores Claude Code's text as a passage and reports it."""
    memory, agent = opened(tmp_path)
    project = tmp_path / "work"
    home, folders = claude_home(tmp_path, project)
    human = folders[project] / "tiermem-human.md"
    auto_memory.sync(memory, agent, home, str(project))
    memory.edit(agent, "human", Rethink("Name: Ada. Works at Initech."), actor="human")
    human.write_text(human.read_text() + "\nLikes tea.\n")
    auto_memory.sync(memory, agent, home)
    assert memory.block(agent, "human").value == "Name: Ada. Works at Initech.\n\nLikes tea."
    assert "Initech" in human.read_text()

    memory.edit(agent, "human", Rethink("Name: Ada. Works at Globex."), actor="human")
    human.write_text("---\nname: tiermem-human\n---\n\nName: Ada Lovelace.\n")
    done = auto_memory.sync(memory, agent, home)
    assert memory.block(agent, "human").value == "Name: Ada. Works at Globex."
    assert "Globex" in human.read_text()
    assert len(done.problems) == 1 and "changed in tiermem and its file by Claude Code" in done.problems[0]
    (aside,) = [p for p in memory.archive.rows.passages_of(agent) if auto_memory.CONFLICT_TAG in p.tags]
    assert "Name: Ada Lovelace." in aside.content and aside.project == project_of(str(project))


def test_forget_edits_the_text_out_of_the_auto_memory_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`tiermem forget --text` edits the text out of Claude Code's auto-memory files (which Claude Code loads and
    reads) and names them; a later edit of such a file by Claude Code does not bring the text back."""
    memory, agent = opened(tmp_path)
    project = tmp_path / "work"
    home, folders = claude_home(tmp_path, project)
    door = folders[project] / "door.md"
    door.write_text("---\nname: door\ndescription: office door\n---\n\nThe Porto door code is QUOKKA-7719.\n")
    (folders[project] / "MEMORY.md").write_text("- [Door](door.md) — door code QUOKKA-7719\n")
    auto_memory.sync(memory, agent, home, str(project))
    memory.core.close()
    common = ["--data-dir", str(tmp_path / "data"), "--embedding-model", "hashing", "--yes", "--now"]
    assert main(["forget", "--text", "QUOKKA-7719", *common]) == 0
    out = capsys.readouterr().out
    assert f"auto-memory file {door}" in out and f"auto-memory file {folders[project] / 'MEMORY.md'}" in out
    assert "QUOKKA" not in door.read_text() and "QUOKKA" not in (folders[project] / "MEMORY.md").read_text()

    memory, agent = opened(tmp_path)
    door.write_text(door.read_text() + "Visitors sign in at reception.\n")  # Claude Code adds a line
    auto_memory.sync(memory, agent, home)
    (stored,) = [p.content for p in tagged(memory, agent)]
    assert "QUOKKA" not in stored and "Visitors sign in" in stored and "Porto door code" in stored


@pytest.mark.anyio
async def test_a_passage_deleted_with_the_tool_is_not_stored_again_while_its_file_holds_the_same_text(
    tmp_path: Path,
) -> None:
    """`archival_memory_delete` (a real `tiermem serve` over stdio) deletes the passage a sync stored from Claude
    Code's file: the next sync does not store the file again while it holds the same text (the file's record keeps
    its digest, not its text); once Claude Code changes the file, the new text is stored. The inspector's delete
    (`tiermem ui`) does the same."""
    memory, agent, home, cat, stored = cat_synced(tmp_path)
    memory.core.close()
    async with Client(stdio_params(tmp_path), cache=None) as client:
        result = await client.call_tool("archival_memory_delete", {"id": stored.id})
        assert not result.is_error and json.loads(text_of(result))["deleted"] == 1, text_of(result)
    memory, agent = opened(tmp_path)
    assert auto_memory.sync(memory, agent, home) == auto_memory.Synced() and not tagged(memory, agent)
    assert "Miso" not in json.dumps(json.loads((home / "state.json").read_text()))  # a digest, not the text
    cat.write_text(NEW.replace("Miso", "Tofu"))
    assert auto_memory.sync(memory, agent, home).imported == 1
    [tofu] = tagged(memory, agent)
    assert tofu.content == "the user's cat\n\nAda's cat is called Tofu."
    memory.core.close()

    app, url = build_ui_server(load_settings(data_dir=tmp_path / "data", embedding_model="hashing"), port=8931)
    token = url.split("#token=", 1)[1]
    with TestClient(app, base_url="http://127.0.0.1:8931", headers={"authorization": f"Bearer {token}"}) as ui:
        assert ui.post("/ui/api/passages/delete", json={"agent": "default", "id": tofu.id}).json() == {"deleted": 1}
    memory, agent = opened(tmp_path)
    assert auto_memory.sync(memory, agent, home) == auto_memory.Synced() and not tagged(memory, agent)


def test_a_passage_the_chat_agent_deletes_is_not_stored_again_while_its_file_holds_the_same_text(
    tmp_path: Path,
) -> None:
    """`tiermem chat` (a real process, its model a loopback Anthropic server) runs the same tools in process: the
    passage a sync stored from Claude Code's file that its agent deletes with `archival_memory_delete` stays deleted
    at the next sync, as one the server's tool or the inspector deleted."""
    import subprocess

    from .conftest import PYTHON, ROOT
    from .test_transports import server_env

    memory, _, home, _, stored = cat_synced(tmp_path)
    memory.core.close()
    with fa.FakeAnthropic() as fake:
        fake.add(fa.tool("archival_memory_delete", {"id": stored.id}), fa.text("Deleted."))
        env = server_env(tmp_path, ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=fake.url)
        chat = subprocess.run(
            [PYTHON, "-m", "tiermem", "chat", "-m", "Forget my cat.", "--data-dir", str(tmp_path / "data")],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=120,
        )
    assert chat.returncode == 0 and "archival_memory_delete" in chat.stderr, chat.stderr
    memory, agent = opened(tmp_path)
    assert not tagged(memory, agent)
    assert auto_memory.sync(memory, agent, home) == auto_memory.Synced() and not tagged(memory, agent)


def test_a_file_whose_passage_a_forget_took_but_whose_text_it_could_not_edit_is_not_stored_again(
    tmp_path: Path,
) -> None:
    """The store finds a text where a file does not hold it as given (here from the file's description into its
    body, as its passage joins them): the forget takes the passage, its exact edit changes nothing in the file, and
    the file is marked so the next sync does not store it again (until it changes)."""
    memory, agent = opened(tmp_path)
    project = tmp_path / "work"
    home, folders = claude_home(tmp_path, project)
    door = folders[project] / "door.md"
    door.write_text("---\nname: door\ndescription: office door\n---\n\nThe Porto door code is QUOKKA-7719.\n")
    auto_memory.sync(memory, agent, home, str(project))
    assert [p.content for p in tagged(memory, agent)] == ["office door\n\nThe Porto door code is QUOKKA-7719."]
    memory.core.close()
    common = ["--data-dir", str(tmp_path / "data"), "--embedding-model", "hashing", "--yes", "--now"]
    assert main(["forget", "--text", "office door\n\nThe Porto door", *common]) == 0
    assert "QUOKKA" in door.read_text()  # not edited: the file does not hold the text as given

    memory, agent = opened(tmp_path)
    assert auto_memory.sync(memory, agent, home) == auto_memory.Synced() and not tagged(memory, agent)
    door.write_text(door.read_text() + "Visitors sign in at reception.\n")  # changed: stored again
    assert auto_memory.sync(memory, agent, home).imported == 1


def test_forgetting_a_passage_by_id_edits_it_out_of_the_auto_memory_file_it_came_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tiermem forget passage ID` of a passage stored from an auto-memory file edits what it was stored from (the
    file's description and body, a credential the passage holds redacted included) out of the file, and the file's
    line out of `MEMORY.md`, and names them; the other files stay. Claude Code's next change to the file (a line
    added) is stored by the next sync without the forgotten text."""
    memory, agent = opened(tmp_path)
    project = tmp_path / "work"
    home, folders = claude_home(tmp_path, project)
    folder = folders[project]
    door, index = folder / "door.md", folder / "MEMORY.md"
    key = "AKIA" + "Q3EGRIBFXPN7WMT4"
    door.write_text(
        f'---\nname: door\ndescription: "office door code"\n---\n\nThe Porto door code is QUOKKA-7719.\n'
        f"The alarm key is {key}.\n"
    )
    (folder / "cat.md").write_text(NEW)
    index.write_text("- [Door](door.md) — door code QUOKKA-7719\n- [Cat](cat.md) — the cat\n")
    auto_memory.sync(memory, agent, home, str(project))
    (passage,) = [p for p in tagged(memory, agent) if "QUOKKA" in p.content]
    memory.core.close()
    common = ["--data-dir", str(tmp_path / "data"), "--embedding-model", "hashing", "--yes", "--now"]
    assert main(["forget", "passage", passage.id, *common]) == 0
    out = capsys.readouterr().out
    assert f"out of Claude Code's auto-memory file {door}\n" in out and f"auto-memory file {index}\n" in out, out
    assert "still held" not in out, out
    left = door.read_text()
    assert "QUOKKA" not in left and key not in left and "office door code" not in left and "name: door" in left
    assert (folder / "cat.md").read_text() == NEW
    lines = index.read_text()  # Claude Code's line for the file (its summary of it) taken out
    assert "(door.md)" not in lines and "QUOKKA" not in lines and "- [Cat](cat.md) — the cat\n" in lines, lines

    memory, agent = opened(tmp_path)
    assert auto_memory.sync(memory, agent, home).imported == 0  # what is left of it holds nothing to store
    door.write_text(door.read_text() + "Visitors sign in at reception.\n")  # Claude Code adds a line
    assert auto_memory.sync(memory, agent, home).imported == 1
    stored = sorted(p.content for p in tagged(memory, agent))
    assert stored == ["Visitors sign in at reception.", "the user's cat\n\nAda's cat is called Miso."], stored


def test_forgetting_a_passage_whose_file_changed_since_edits_out_the_lines_it_was_stored_from(tmp_path: Path) -> None:
    """The inspector's forget of one passage whose file Claude Code changed after the sync stored it: the passage's
    lines (its description's value included) are edited out of the file, Claude Code's new line stays, and the next
    sync stores that line alone."""
    from tiermem.ui import api

    memory, agent = opened(tmp_path)
    project = tmp_path / "work"
    home, folders = claude_home(tmp_path, project)
    door = folders[project] / "door.md"
    door.write_text("---\nname: door\ndescription: office door\n---\n\nThe Porto door code is QUOKKA-7719.\n")
    auto_memory.sync(memory, agent, home, str(project))
    (passage,) = tagged(memory, agent)
    door.write_text(door.read_text() + "Visitors sign in at reception.\n")  # after the sync: not stored yet
    name = memory.core.get_agent(agent).name
    done = api.forget(memory, name, {"kind": "passage", "ref": passage.id, "now": True}, data_dir=tmp_path / "data")
    assert done["auto_memory_files_edited"] == [str(door)] and done["still_held_outside_the_store"] == []
    assert door.read_text() == "---\nname: door\ndescription:\n---\n\nVisitors sign in at reception.\n"
    auto_memory.sync(memory, agent, home)
    assert [p.content for p in tagged(memory, agent)] == ["Visitors sign in at reception."]


def test_the_inspectors_forget_edits_the_auto_memory_files_too(tmp_path: Path) -> None:
    from tiermem.ui import api

    memory, agent = opened(tmp_path)
    project = tmp_path / "work"
    home, folders = claude_home(tmp_path, project)
    door = folders[project] / "door.md"
    door.write_text("---\nname: door\n---\n\nThe Porto door code is QUOKKA-7719.\n")
    auto_memory.sync(memory, agent, home, str(project))
    name = memory.core.get_agent(agent).name
    done = api.forget(memory, name, {"kind": "text", "ref": "QUOKKA-7719", "now": True}, data_dir=tmp_path / "data")
    assert done["auto_memory_files_edited"] == [str(door)] and "QUOKKA" not in door.read_text()


def test_a_credential_in_a_files_name_is_no_tag(tmp_path: Path) -> None:
    memory, agent = opened(tmp_path)
    project = tmp_path / "work"
    home, folders = claude_home(tmp_path, project)
    token = "ghp_" + "1234567890abcdefghijklmnopqrstuvwxyzAB"
    (folders[project] / "tok.md").write_text(f"---\nname: token {token}\n---\n\nUse the CI token.\n")
    assert auto_memory.sync(memory, agent, home, str(project)).imported == 1
    (passage,) = tagged(memory, agent)
    assert not any(token in t for t in passage.tags) and any("[redacted" in t for t in passage.tags), passage.tags


def test_what_claude_code_writes_keeps_no_credential_and_no_private_span(tmp_path: Path) -> None:
    """Auto memory enters tiermem on its own path, so it gets what every hook-captured text gets: `<private>` spans
    dropped and credentials redacted, in a memory file's passage and in a block file Claude Code's model edits (the
    block file is then rewritten without them)."""
    memory, agent = opened(tmp_path)
    project = tmp_path / "work"
    home, folders = claude_home(tmp_path, project)
    folder = folders[project]
    key = "AKIA" + "Q3EGRIBFXPN7WMT4"
    (folder / "aws.md").write_text(
        f"---\nname: aws\n---\n\nThe deploy key is {key}. <private>my PIN is 4821</private>\n"
    )
    auto_memory.sync(memory, agent, home, str(project))
    (stored,) = [p.content for p in tagged(memory, agent)]
    assert key not in stored and "4821" not in stored and "[redacted: AWS access key]" in stored, stored
    (folder / "tiermem-human.md").write_text(f"---\nname: tiermem-human\n---\n\nName: Ada. Key {key}.\n")
    auto_memory.sync(memory, agent, home)
    value = memory.block(agent, "human").value
    assert value.startswith("Name: Ada. Key [redacted: ") and key not in value, value
    assert key not in (folder / "tiermem-human.md").read_text()


def test_symbolic_links_are_never_followed(tmp_path: Path) -> None:
    """A memory file, a block file, an index or a whole folder that is a symbolic link is never read (what it points to
    may be anything of the user's): each is reported, nothing of its target is stored or becomes a block's value, and
    `forget --text` does not write through one."""
    memory, agent = opened(tmp_path)
    work, linked = tmp_path / "work", tmp_path / "linked"
    home, folders = claude_home(tmp_path, work, linked)
    folder = folders[work]
    secret = tmp_path / "outside.txt"
    secret.write_text("OUTSIDE FILE: root password is hunter2\n")
    (folder / "cat.md").write_text(NEW)
    (folder / "leak.md").symlink_to(secret)
    elsewhere = tmp_path / "elsewhere-memory"  # a project's whole memory folder a link to elsewhere
    elsewhere.mkdir()
    (elsewhere / "note.md").write_text("---\nname: note\n---\n\nOUTSIDE FOLDER note.\n")
    folders[linked].rmdir()
    folders[linked].symlink_to(elsewhere, target_is_directory=True)
    first = auto_memory.sync(memory, agent, home, str(work))
    auto_memory.sync(memory, agent, home, str(linked))
    assert [p.content for p in tagged(memory, agent)] == ["the user's cat\n\nAda's cat is called Miso."]
    assert any("leak.md" in p and "symbolic link" in p for p in first.problems), first
    persona = folder / auto_memory.block_file("persona")
    persona.unlink()
    persona.symlink_to(secret)
    (folder / "MEMORY.md").unlink()
    (folder / "MEMORY.md").symlink_to(secret)
    done = auto_memory.sync(memory, agent, home, str(work))
    assert "OUTSIDE" not in memory.block(agent, "persona").value
    assert any("tiermem-persona.md" in p and "symbolic link" in p for p in done.problems), done
    assert any("MEMORY.md" in p and "symbolic link" in p for p in done.problems), done
    assert any(str(folders[linked]) in p for p in done.problems) and not (elsewhere / "MEMORY.md").exists()
    assert persona.is_symlink() and (folder / "MEMORY.md").is_symlink()  # left as they are
    assert not [p for p in memory.archive.rows.passages_of(agent) if "OUTSIDE" in p.content]
    auto_memory_admin.forget_text(tmp_path / "data", ["default"], ["hunter2"])
    assert (folder / "leak.md").is_symlink() and "hunter2" in secret.read_text()


def test_a_blocks_private_spans_stay_in_tiermem_and_survive_claude_codes_edit(tmp_path: Path) -> None:
    """A block's `<private>` spans are not written to Claude Code's files (its block file and `MEMORY.md` line show
    a mark in their place); Claude Code's edit of the block file becomes the block's value with the spans kept where
    the marks are. An edit that takes a mark out cannot say where the private text goes: the block is kept and the
    edit stored aside, reported."""
    memory, agent = opened(tmp_path)
    project = tmp_path / "work"
    home, folders = claude_home(tmp_path, project)
    folder = folders[project]
    memory.edit(agent, "human", Rethink("Name: Ada <private>PIN 4321</private>\nLikes tea"), actor="human")
    auto_memory.sync(memory, agent, home, str(project))
    human = folder / "tiermem-human.md"
    assert "4321" not in human.read_text() and "Name: Ada [private: not kept]\nLikes tea" in human.read_text()
    assert "4321" not in (folder / "MEMORY.md").read_text()
    human.write_text(human.read_text().rstrip("\n") + "\nHas a cat <private>named Miso</private>\n")
    auto_memory.sync(memory, agent, home)
    value = memory.block(agent, "human").value
    assert value == "Name: Ada <private>PIN 4321</private>\nLikes tea\nHas a cat [private: not kept]", value

    human.write_text(human.read_text().replace("Name: Ada [private: not kept]\n", "Name: Ada Lovelace\n"))
    done = auto_memory.sync(memory, agent, home)
    assert memory.block(agent, "human").value == value
    assert len(done.problems) == 1 and "[private: not kept] mark" in done.problems[0], done
    (aside,) = [p for p in memory.archive.rows.passages_of(agent) if auto_memory.CONFLICT_TAG in p.tags]
    assert "Name: Ada Lovelace" in aside.content and "4321" not in aside.content


def test_the_users_own_auto_memory_directory_is_every_projects(tmp_path: Path) -> None:
    """A folder the user set as `autoMemoryDirectory` is Claude Code's memory in every project (their choice): its
    files are stored without a project."""
    memory, agent = opened(tmp_path)
    home, _ = claude_home(tmp_path)
    mine = tmp_path / "my-auto-memory"
    mine.mkdir()
    (mine / "editor.md").write_text(OLD)
    (tmp_path / "home" / ".claude" / "settings.json").write_text(json.dumps({"autoMemoryDirectory": str(mine)}))
    assert auto_memory.sync(memory, agent, home, str(tmp_path)).imported == 1
    assert [p.project for p in tagged(memory, agent)] == [None]
    assert (mine / "tiermem-human.md").exists()


def test_setup_puts_back_the_one_folder_an_earlier_setup_gave_every_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An earlier setup pointed `autoMemoryDirectory` at one folder for every project; setup now takes that out
    (with no record of it too), so Claude Code keeps a folder per project again."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    home, data = tmp_path / "home", tmp_path / "data"
    (home / ".claude").mkdir(parents=True)
    settings = home / ".claude" / "settings.json"
    settings.write_text(json.dumps({"theme": "dark", "autoMemoryDirectory": str(directory(data, "default"))}))
    the_plan = plan("/opt/tiermem/bin/tiermem", [], data_dir=data, agent="default", scope="user", home=home)
    lines = install(the_plan)
    after = json.loads(settings.read_text())
    assert "autoMemoryDirectory" not in after and after["theme"] == "dark", after
    assert any("autoMemoryDirectory removed" in line for line in lines), lines


def test_the_known_paths_are_found_once_per_sync_for_every_folder_not_placed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each folder whose project is not known yet is looked up among the known paths; their candidates are found once
    for the sync, not once per such folder."""
    memory, agent = opened(tmp_path)
    waiting = [tmp_path / f"later-{n}" for n in range(3)]
    home, folders = claude_home(tmp_path, *waiting)
    state = {"paths": [str(tmp_path / f"seen-{n}") for n in range(5)]}
    (home / "state.json").write_text(json.dumps(state))
    found: list[str] = []
    real = claude_projects.candidates

    def counted(path: str) -> set[str]:
        found.append(path)
        return real(path)

    monkeypatch.setattr(claude_projects, "candidates", counted)
    done = auto_memory.sync(memory, agent, home)
    assert len(done.waiting) == 3 and sorted(found) == sorted(state["paths"])  # once each, not once per folder
    found.clear()
    placed = auto_memory.sync(memory, agent, home, str(waiting[0]))  # a hook there names its project
    assert len(placed.waiting) == 2 and len(found) == len(state["paths"]) + 1
    assert folders[waiting[0]] not in [Path(w.split(": ")[0]) for w in placed.waiting]


def test_a_long_projects_folder_is_placed_by_the_start_of_its_name(tmp_path: Path) -> None:
    """Claude Code cuts a folder name over 200 characters and adds a hash: the known path is found by its start."""
    deep = tmp_path / ("a-project-with-a-long-name-" * 8)  # its parent's name is short
    deep.mkdir()
    name = folder_name(str(deep))
    assert len(name) > claude_projects.MAX_NAME
    known = claude_projects.KnownPaths([str(deep)])
    assert known.project_for(name[: claude_projects.MAX_NAME] + "-1a2b3c") == (project_of(str(deep)), "")
    assert known.project_for(name[: claude_projects.MAX_NAME])[0] is None  # cut, without Claude Code's hash
    assert known.project_for(folder_name(str(tmp_path))) == (project_of(str(tmp_path)), "")  # a parent's


def earlier_setup(tmp_path: Path) -> tuple[Settings, Memory, str, Path, Path]:
    """What tiermem 0.1.0's setup left: Claude Code's `autoMemoryDirectory` pointed at the agent's folder of the
    data directory (one folder for every project), a file there stored by its sync (recorded in its
    `.tiermem-sync.json`), and no `sources.json`; then Claude Code wrote another file there, after the upgrade.
    (settings, memory, agent, that folder, the user's home.)"""
    settings = load_settings(data_dir=tmp_path / "data", embedding_model="hashing")
    memory = open_memory(settings, start_embedder=False)
    agent = memory.ensure_agent("default").id
    home = directory(tmp_path / "data", "default")
    home.mkdir(parents=True)
    (home / "editor.md").write_text(OLD)
    ids = memory.archive.insert(agent, "the user's editor\n\nAda edits code in Helix.", [auto_memory.TAG, "editor"])
    record = {"files": {"editor.md": {"digest": auto_memory.digest(OLD), "passages": ids}}, "blocks": {}}
    (home / ".tiermem-sync.json").write_text(json.dumps(record))
    user_home = tmp_path / "home"
    (user_home / ".claude").mkdir(parents=True)
    (user_home / ".claude" / "settings.json").write_text(json.dumps({"autoMemoryDirectory": str(home)}))
    (home / "cat.md").write_text(NEW)  # Claude Code's, after the upgrade
    return settings, memory, agent, home, user_home


def test_the_server_takes_over_the_auto_memory_folder_tiermem_010_set_up_and_says_to_run_setup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """After an upgrade from 0.1.0 without running setup again, what Claude Code writes to the folder 0.1.0 gave it
    is still stored (the server's first sync takes the folder over, as setup would; what 0.1.0 stored is not stored
    twice), and the server's log and doctor say to run setup again for a folder per project."""
    import logging

    from tiermem.cli.serving import _auto_memory_sync
    from tiermem.server.runtime import MemoryHandle

    settings, memory, agent, home, user_home = earlier_setup(tmp_path)
    monkeypatch.setenv("HOME", str(user_home))
    with caplog.at_level(logging.WARNING):
        sync = _auto_memory_sync(MemoryHandle(lambda: (memory, agent)), settings)
    assert any("tiermem setup claude-code" in r.getMessage() and str(home) in r.getMessage() for r in caplog.records)
    sync(str(tmp_path))
    assert sorted((p.content, p.project) for p in tagged(memory, agent)) == [
        ("the user's cat\n\nAda's cat is called Miso.", None),
        ("the user's editor\n\nAda edits code in Helix.", None),
    ]
    assert (home / "sources.json").exists() and not (home / ".tiermem-sync.json").exists()
    (home / "tea.md").write_text(NEW.replace("cat", "tea").replace("Miso", "Sencha"))
    sync(str(tmp_path))  # the setting still points there: Claude Code writes there, so it is still synced
    assert any("Sencha" in p.content for p in tagged(memory, agent)) and len(tagged(memory, agent)) == 3
    (check,) = [c for c in auto_memory_admin.doctor_check(settings) if c["check"] == "claude code auto memory setup"]
    assert not check["ok"] and str(home) in check["detail"] and "tiermem setup claude-code" in check["fix"]


def test_setup_run_again_after_0_1_0_stores_what_claude_code_wrote_in_the_old_folder(tmp_path: Path) -> None:
    """Setup run again takes Claude Code's setting back (a folder per project) and stores, once, what Claude Code
    wrote in 0.1.0's folder since 0.1.0 last synced it; doctor then has nothing to say about the setup."""
    settings, memory, agent, home, user_home = earlier_setup(tmp_path)
    (user_home / ".claude" / "settings.json").write_text("{}")  # what setup's install puts back first
    lines = auto_memory_admin.adopt(settings, home, user_home)
    assert "taken over (1 file(s)" in lines, lines
    assert sorted(p.content for p in tagged(memory, agent)) == [
        "the user's cat\n\nAda's cat is called Miso.",
        "the user's editor\n\nAda edits code in Helix.",
    ]
    assert not [c for c in auto_memory_admin.doctor_check(settings) if not c["ok"]]
