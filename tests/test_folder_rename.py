"""``tiermem folders rename OLD NEW`` through the real CLI (the checks of a create: a bad name, a name another folder
has, another folder's id; the agents' views follow), and ``tiermem doctor`` naming a folder an older tiermem named
after another folder's id, with the rename that ends it."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tiermem.domain.filesystem import render_agent_directories
from tiermem.domain.memory import Memory

from .test_folders_cli import memory_of, run


def folders_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, err = run(tmp_path, capsys, "doctor", "--json")
    checks = json.loads(out)["checks"]
    found = [c for c in checks if c["check"] == "folder ids"]
    assert len(found) == 1, checks
    return found[0]


def test_rename_a_folder_and_the_agents_see_the_new_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "notes.md"
    source.write_text("# Notes\nThe launch is on 3 March.\n")
    assert run(tmp_path, capsys, "folders", "create", "docs")[0] == 0
    assert run(tmp_path, capsys, "folders", "upload", "docs", str(source), "--no-embed")[0] == 0
    assert run(tmp_path, capsys, "folders", "attach", "docs", "--agent", "default")[0] == 0
    folder_id = memory_of(tmp_path).files.folder("docs").id

    code, out, err = run(tmp_path, capsys, "folders", "rename", "docs", "handbook")
    assert code == 0, err
    assert out.strip() == (
        f"renamed folder docs to handbook ({folder_id}); agent(s) default see its files as handbook/FILE"
    )
    memory = memory_of(tmp_path)
    assert [(f.id, f.name) for f in memory.files.folders()] == [(folder_id, "handbook")]
    shown = render_agent_directories(memory.named_agent("default"))
    assert 'name="handbook/notes.md"' in shown and "docs/" not in shown, shown
    code, out, _ = run(tmp_path, capsys, "folders", "show", "handbook", "--json")
    assert code == 0 and [f["name"] for f in json.loads(out)["files"]] == ["notes.md"]

    # by its id, and back; its own name again changes nothing
    assert run(tmp_path, capsys, "folders", "rename", folder_id, "docs")[0] == 0
    code, out, _ = run(tmp_path, capsys, "folders", "rename", "docs", "docs")
    assert code == 0 and out.strip() == f"folder docs ({folder_id}) is named so already; nothing changed"
    assert [f.name for f in memory_of(tmp_path).files.folders()] == ["docs"]


@pytest.mark.parametrize(
    ("new", "said"),
    [
        ("specs", "A folder named 'specs' exists already; choose another name."),
        ("{specs_id}", "'{specs_id}' is the id of another folder (a folder is reached by its id too); choose another"),
        ("a/b", "The folder name 'a/b' contains '/'; folders do not nest, use e.g. 'a-b'."),
        ("x" * 101, "is 101 characters long; use at most 100."),
        ("", "folder name"),
    ],
)
def test_a_refused_rename_says_why_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], new: str, said: str
) -> None:
    assert run(tmp_path, capsys, "folders", "create", "docs")[0] == 0
    assert run(tmp_path, capsys, "folders", "create", "specs")[0] == 0
    before = memory_of(tmp_path).files.folders()
    specs_id = next(f.id for f in before if f.name == "specs")
    new, said = new.format(specs_id=specs_id), said.format(specs_id=specs_id)
    code, out, err = run(tmp_path, capsys, "folders", "rename", "docs", new)
    assert code != 0 and said in err and not out, (code, out, err)
    assert memory_of(tmp_path).files.folders() == before


def test_renaming_a_folder_that_is_not_there_names_the_folders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(tmp_path, capsys, "folders", "create", "docs")[0] == 0
    code, _, err = run(tmp_path, capsys, "folders", "rename", "dcos", "manuals")
    assert code != 0 and "No folder named 'dcos'. Folders: 'docs'." in err, err
    assert [f.name for f in memory_of(tmp_path).files.folders()] == ["docs"]


def test_doctor_names_a_folder_named_another_folders_id_and_its_rename_ends_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store an older tiermem left with a folder named another folder's id (a rename or restore before 2026-12):
    the name reaches the other folder, so doctor names the folder and gives the rename (``NAME_(n)``, as an import
    names it) that ends it; run, doctor is content."""
    assert run(tmp_path, capsys, "folders", "create", "private-plans")[0] == 0
    assert run(tmp_path, capsys, "folders", "create", "docs")[0] == 0
    check = folders_check(tmp_path, capsys)
    assert check == {"check": "folder ids", "ok": True, "detail": "no folder is named another folder's id"}

    memory = memory_of(tmp_path)
    private, docs = memory.files.folder("private-plans"), memory.files.folder("docs")
    memory.files.rows.put_folder(replace(docs, name=private.id))  # what an older tiermem let a rename do
    memory.files.rows.put_folder(replace(docs, id="folder-restored", name=f"{private.id}_(1)"))  # the free name taken

    check = folders_check(tmp_path, capsys)
    assert not check["ok"]
    assert check["detail"].startswith(f"folder {docs.id} (0 file(s)) is named {private.id!r}, the id of another folder")
    rename = f"tiermem folders rename {docs.id} {private.id}_(2)"
    assert f"`{shlex.join(shlex.split(rename))}`" in check["fix"], check["fix"]
    code, _, _ = run(tmp_path, capsys, "doctor")
    assert code == 1

    code, out, err = run(tmp_path, capsys, *shlex.split(rename)[1:])
    assert code == 0, err
    assert folders_check(tmp_path, capsys)["ok"]
    memory = memory_of(tmp_path)
    assert memory.files.folder(private.id).name == "private-plans"
    assert memory.files.folder(docs.id).name == f"{private.id}_(2)"


def _racing_read(memory: Memory, monkeypatch: pytest.MonkeyPatch, meanwhile: Any) -> None:
    """``memory.files.folder`` (the read a rename or an edit starts with) returns the folder, then ``meanwhile`` runs:
    another process acting between that read and the locked write."""
    read = memory.files.folder

    def racing(name: str) -> Any:
        found = read(name)
        meanwhile()
        return found

    monkeypatch.setattr(memory.files, "folder", racing)


def test_a_rename_racing_a_delete_does_not_bring_the_folder_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run(tmp_path, capsys, "folders", "create", "docs")[0] == 0
    renaming, other = memory_of(tmp_path), memory_of(tmp_path)  # two processes
    _racing_read(renaming, monkeypatch, lambda: other.files.delete_folder(other.files.folder("docs").id))

    with pytest.raises(Exception, match="folder 'docs' was deleted meanwhile"):
        renaming.files.update_folder("docs", new_name="handbook")
    assert memory_of(tmp_path).files.folders() == []


def test_a_rename_racing_an_edit_keeps_the_edit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run(tmp_path, capsys, "folders", "create", "docs", "--description", "old words")[0] == 0
    renaming, other = memory_of(tmp_path), memory_of(tmp_path)
    _racing_read(renaming, monkeypatch, lambda: other.files.update_folder("docs", description="new words"))

    renaming.files.update_folder("docs", new_name="handbook")
    [folder] = memory_of(tmp_path).files.folders()
    assert (folder.name, folder.description) == ("handbook", "new words")
