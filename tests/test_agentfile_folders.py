"""Letta's folders in agent files: a file's sources, files and files_agents become tiermem folders, files and each
agent's views (Letta's own sample, tests/fixtures/agent-file/test_agent_with_files_and_sources.af), come back out
in Letta's shape, converge when imported again, are refused whole when malformed, and travel in jsonl backups."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tiermem.base.config import BlockSpec, load_settings
from tiermem.base.errors import ValidationError
from tiermem.domain.factory import open_memory
from tiermem.domain.file_views import OpenRequest
from tiermem.domain.memory import Memory
from tiermem.interop import af_export, agentfile
from tiermem.interop.commands import run_export, run_import

from .conftest import ROOT
from .test_agentfile_roundtrip import without_rows

SAMPLE = ROOT / "tests" / "fixtures" / "agent-file" / "test_agent_with_files_and_sources.af"
AGENT = "test_disk_agent_9215c344-8b17-4989-98f4-fd73e99fc451"
FOLDER = "test_disk_export_source"


def fresh(tmp_path: Path, name: str = "data") -> Memory:
    return open_memory(load_settings(data_dir=tmp_path / name, embedding_model="hashing"))


def import_af(mem: Memory, path: Path, *, rename: str | None = None, replace: bool = False) -> dict[str, Any]:
    return run_import(mem, path, fmt="af", agent="default", rename=rename, replace=replace)


def sample() -> dict[str, Any]:
    return json.loads(SAMPLE.read_text())


def folder_part(data: dict[str, Any]) -> dict[str, Any]:
    """``sources``, ``files`` and each agent's folder fields with every file-local id replaced by what it names."""
    sources = {s["id"]: s["name"] for s in data["sources"]}
    files = {f["id"]: f["file_name"] for f in data["files"]}
    return {
        "sources": [{k: v for k, v in s.items() if k != "id"} for s in data["sources"]],
        "files": [
            {**{k: v for k, v in f.items() if k != "id"}, "source_id": sources[f["source_id"]]} for f in data["files"]
        ],
        "agents": [
            {
                "name": a["name"],
                "source_ids": [sources[s] for s in a.get("source_ids") or []],
                "folder_ids": a.get("folder_ids"),
                "max_files_open": a.get("max_files_open"),
                "per_file_view_window_char_limit": a.get("per_file_view_window_char_limit"),
                "files_agents": [
                    {
                        **{k: v for k, v in fa.items() if k not in ("id", "agent_id")},
                        "file_id": files[fa["file_id"]],
                        "source_id": sources[fa["source_id"]],
                    }
                    for fa in a.get("files_agents") or []
                ],
            }
            for a in data["agents"]
        ],
    }


def test_letta_sample_becomes_a_folder_its_files_and_the_agents_open_views(tmp_path: Path) -> None:
    mem = fresh(tmp_path)
    report = import_af(mem, SAMPLE)
    assert report["imported"] == [AGENT] and report["folders"] == 1 and report["files"] == 2
    original = sample()
    assert any("folder 'test_disk_export_source' imported" in n for n in report["notes"])
    assert "sources" not in json.dumps(report["kept_not_run"])  # run natively now, not kept aside
    folder = mem.files.folder(FOLDER)
    assert (folder.description, folder.instructions) == ("", "")
    assert folder.metadata[agentfile.SOURCE_KEY]["embedding_config"] == original["sources"][0]["embedding_config"]
    stored = {f.name: f for f in mem.files.files(FOLDER)}
    assert sorted(stored) == ["test.md", "test.txt"]
    for f in original["files"]:
        s = stored[f["original_file_name"]]
        assert (s.original_name, s.file_type, s.size, s.status) == (
            f["original_file_name"],
            f["file_type"],
            f["file_size"],
            "completed",
        )
        assert mem.files.text(FOLDER, s.name) == f["content"]
    # the agent's view is Letta's files_agents exactly: limits, both files open with Letta's window text
    agent = mem.get_agent(AGENT)
    state = mem.files.state(agent.id)
    assert (state.max_files_open, state.char_limit) == (5, 15000)
    assert [f["name"] for f in state.folders] == [FOLDER]
    rows = original["agents"][0]["files_agents"]
    assert [(v.name, v.is_open, v.visible, v.start_line, v.end_line) for v in state.files] == [
        (fa["file_name"], fa["is_open"], fa["visible_content"], fa["start_line"], fa["end_line"]) for fa in rows
    ]
    core = mem.render_core(agent.id, with_metadata=False)
    assert "<directories>" in core and f"{FOLDER}/test.txt" in core and f"{FOLDER}/test.md" in core
    assert core.count('<file status="open"') == 2 and "current_files_open=2" in core and "max_files_open=5" in core
    for fa in rows:
        assert fa["visible_content"] in core
    # Letta's three file tools work on the imported files
    opened = mem.open_files(agent.id, [OpenRequest(f"{FOLDER}/test.md", 10, 5)])
    assert f"{FOLDER}/test.md" in opened
    view = mem.files.state(agent.id).view(f"{FOLDER}/test.md")
    assert view is not None and view.is_open and view.start_line == 11 and view.end_line == 15
    assert "Advertisement" in mem.grep_files(agent.id, "Advertisement", None, 1, None)
    assert f"{FOLDER}/test.md" in mem.semantic_search_files(agent.id, "footnote markup definition lists", 5)


def test_export_writes_the_sample_back_as_letta_wrote_it(tmp_path: Path) -> None:
    mem = fresh(tmp_path)
    import_af(mem, SAMPLE)
    exported = af_export.export_agent_files(mem, [AGENT])[0]
    original = sample()
    assert folder_part(exported) == folder_part(original)  # ids aside, equal: timestamps, chunk counts, nulls
    assert [s["id"] for s in exported["sources"]] == ["source-0"]
    assert [f["id"] for f in exported["files"]] == ["file-0", "file-1"]
    agent = exported["agents"][0]
    assert {fa["agent_id"] for fa in agent["files_agents"]} == {agent["id"]}
    # the export imports again into another data directory and exports the same file, ids and all
    out = tmp_path / "out.af"
    out.write_text(json.dumps(exported))
    other = fresh(tmp_path, "other")
    assert import_af(other, out)["imported"] == [AGENT]
    again = af_export.export_agent_files(other, [AGENT])[0]
    exported.pop("created_at"), again.pop("created_at")
    assert without_rows(again, other) == without_rows(exported, mem)  # each carries its own rows' tiermem ids


def test_changes_made_in_tiermem_are_exported(tmp_path: Path) -> None:
    mem = fresh(tmp_path)
    import_af(mem, SAMPLE)
    agent = mem.get_agent(AGENT)
    mem.files.upload(FOLDER, "test.txt", b"changed\ntext\n")
    mem.files.upload(FOLDER, "new.md", b"# New\nfresh file\n")
    mem.open_files(agent.id, [OpenRequest(f"{FOLDER}/new.md")])
    mem.files.set_limits(agent.id, 3, 2000)
    data = af_export.export_agent_files(mem, [AGENT])[0]
    files = {f["file_name"]: f for f in data["files"]}
    assert files[f"{FOLDER}/test.txt"]["content"] == "changed\ntext\n"
    assert files[f"{FOLDER}/test.txt"]["total_chunks"] == 1 and files[f"{FOLDER}/test.txt"]["file_size"] == 13
    assert files[f"{FOLDER}/test.md"]["total_chunks"] == 6  # unchanged: the file's own figures
    assert files[f"{FOLDER}/new.md"]["content"] == "# New\nfresh file\n"
    agent_out = data["agents"][0]
    assert (agent_out["max_files_open"], agent_out["per_file_view_window_char_limit"]) == (3, 2000)
    views = {fa["file_name"]: fa for fa in agent_out["files_agents"]}
    assert views[f"{FOLDER}/new.md"]["is_open"] and "fresh file" in views[f"{FOLDER}/new.md"]["visible_content"]
    assert views[f"{FOLDER}/new.md"]["file_id"] == files[f"{FOLDER}/new.md"]["id"]


def test_a_folder_made_in_tiermem_exports_in_letta_shape_and_comes_back(tmp_path: Path) -> None:
    mem = fresh(tmp_path)
    agent = mem.create_agent("native", system="You are native.")
    mem.create_block(agent.id, BlockSpec(label="notes", value="hello", limit=100))
    mem.files.create_folder("docs", description="Project docs", instructions="Cite them.")
    mem.files.attach(agent.id, "docs", max_files_open=4, char_limit=3000)  # while empty: every file starts closed
    mem.files.upload_many(
        "docs",
        [("intro.md", b"# Intro\nThe quick brown fox.\n", ""), ("code/app.py", b"def main():\n    print('hi')\n", "")],
    )
    mem.open_files(agent.id, [OpenRequest("docs/code/app.py")])
    data = af_export.export_agent_files(mem, ["native"])[0]
    (source,) = data["sources"]
    assert (source["name"], source["description"], source["instructions"]) == ("docs", "Project docs", "Cite them.")
    assert source["embedding_config"]["embedding_model"] and source["metadata"] is None
    files = {f["file_name"]: f for f in data["files"]}
    assert files["docs/intro.md"]["content"] == "# Intro\nThe quick brown fox.\n"
    assert files["docs/code/app.py"]["original_file_name"] == "app.py"
    assert all(f["processing_status"] == "completed" and f["source_id"] == source["id"] for f in files.values())
    a = data["agents"][0]
    assert a["source_ids"] == [source["id"]] and (a["max_files_open"], a["per_file_view_window_char_limit"]) == (
        4,
        3000,
    )
    opened = [fa for fa in a["files_agents"] if fa["is_open"]]
    assert [fa["file_name"] for fa in opened] == ["docs/code/app.py"] and "print('hi')" in opened[0]["visible_content"]
    out = tmp_path / "native.af"
    out.write_text(json.dumps(data))
    other = fresh(tmp_path, "other")
    assert import_af(other, out)["imported"] == ["native"]
    before = [(v.name, v.is_open, v.visible) for v in mem.files.state(agent.id).files]
    assert [(v.name, v.is_open, v.visible) for v in other.files.state(other.get_agent("native").id).files] == before
    again = af_export.export_agent_files(other, ["native"])[0]
    assert folder_part(again) == folder_part(data)


def test_an_export_imported_elsewhere_keeps_its_files_dates(tmp_path: Path) -> None:
    mem = fresh(tmp_path)
    mem.create_agent("native", system="You are native.")
    mem.files.create_folder("docs")
    mem.files.attach(mem.get_agent("native").id, "docs")
    mem.files.upload_many("docs", [("a.md", b"alpha\n", ""), ("b.md", b"beta\n", "")])
    data = af_export.export_agent_files(mem, ["native"])[0]
    by_name = {f["file_name"]: f for f in data["files"]}
    by_name["docs/b.md"]["file_creation_date"] = "not a date"  # unreadable: the import's time, as with none
    by_name["docs/b.md"]["file_last_modified_date"] = None
    out = tmp_path / "native.af"
    out.write_text(json.dumps(data))
    other = fresh(tmp_path, "other")
    assert import_af(other, out)["imported"] == ["native"]
    (a,) = [f for f in mem.files.files("docs") if f.name == "a.md"]
    back = {f.name: f for f in other.files.files("docs")}
    assert (back["a.md"].created_at, back["a.md"].updated_at) == (a.created_at, a.updated_at)
    assert back["b.md"].created_at > a.created_at and back["b.md"].updated_at > a.updated_at


def test_importing_again_converges(tmp_path: Path) -> None:
    mem = fresh(tmp_path)
    import_af(mem, SAMPLE)
    folder_id = mem.files.folder(FOLDER).id
    assert import_af(mem, SAMPLE)["skipped"]  # already imported: nothing written
    # the agent gone (an import interrupted before its row): the folder is this file's, finished, not duplicated
    mem.delete_agent(mem.get_agent(AGENT).id)
    assert import_af(mem, SAMPLE)["imported"] == [AGENT]
    # the same file under another name: the identical folder is shared
    assert import_af(mem, SAMPLE, rename="second")["imported"] == ["second"]
    assert [f.id for f in mem.files.folders()] == [folder_id] and len(mem.files.files(FOLDER)) == 2
    assert sorted(mem.files.agents_of(folder_id)) == sorted([mem.get_agent(AGENT).id, mem.get_agent("second").id])
    # another file with the same source: the identical folder is used as it is
    changed = sample()
    changed["agents"][0]["description"] = "changed"
    other_file = tmp_path / "changed.af"
    other_file.write_text(json.dumps(changed))
    report = import_af(mem, other_file, replace=True)
    assert any("is here already with the same files" in n for n in report["notes"]) and report["folders"] == 0
    assert [f.id for f in mem.files.folders()] == [folder_id]
    # a folder of that name with other content is left alone: the source is imported under a free name
    mem.files.upload(FOLDER, "test.txt", b"edited in tiermem")
    changed["agents"][0]["description"] = "changed again"
    other_file.write_text(json.dumps(changed))
    report = import_af(mem, other_file, replace=True)
    assert any(f"imported as '{FOLDER}_(1)'" in n for n in report["notes"])
    assert sorted(f.name for f in mem.files.folders()) == [FOLDER, f"{FOLDER}_(1)"]
    assert mem.files.text(FOLDER, "test.txt") == "edited in tiermem"
    assert mem.files.text(f"{FOLDER}_(1)", "test.txt") == "test"
    assert [f["name"] for f in mem.files.state(mem.get_agent(AGENT).id).folders] == [f"{FOLDER}_(1)"]
    exported = af_export.export_agent_files(mem, [AGENT])[0]
    assert exported["sources"][0]["name"] == f"{FOLDER}_(1)"
    assert {f["file_name"] for f in exported["files"]} == {f"{FOLDER}_(1)/test.txt", f"{FOLDER}_(1)/test.md"}
    assert len(exported["agents"][0]["files_agents"]) == 2


def test_a_source_named_as_another_folders_id_is_imported_under_a_free_name(tmp_path: Path) -> None:
    """A folder is reached by its id too: a source whose name is a folder's id here is imported as ``NAME_(1)``, as
    one whose name a folder holds is (it was refused, naming that folder), and the folder of that id is left alone."""
    mem = fresh(tmp_path)
    private = mem.files.create_folder("private-plans")
    mem.files.upload(private.id, "plan.txt", b"the plan")
    data = sample()
    data["sources"][0]["name"] = private.id
    for f in data["files"]:
        f["file_name"] = f["file_name"].replace(f"{FOLDER}/", f"{private.id}/")
    named = tmp_path / "named.af"
    named.write_text(json.dumps(data))
    report = import_af(mem, named)
    assert report["imported"] == [AGENT], report
    assert any(
        f"folder {private.id!r} is imported as '{private.id}_(1)' (it is the id of another folder here" in n
        for n in report["notes"]
    ), report["notes"]
    assert "private-plans" not in json.dumps(report)
    assert sorted(f.name for f in mem.files.folders()) == sorted(["private-plans", f"{private.id}_(1)"])
    assert mem.files.folder(private.id) == private and [f.name for f in mem.files.files(private.id)] == ["plan.txt"]
    attached = mem.files.state(mem.get_agent(AGENT).id).folders
    assert [f["name"] for f in attached] == [f"{private.id}_(1)"]


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda d: d["files"][0].__setitem__("source_id", "source-9"), "source-9"),
        (lambda d: d["files"][1].__setitem__("file_name", f"{FOLDER}/../escape.md"), "escape.md"),
        (lambda d: d["agents"][0]["files_agents"][0].__setitem__("file_id", "file-7"), "file-7"),
        (lambda d: d["agents"][0].__setitem__("source_ids", ["source-3"]), "source-3"),
        (lambda d: d["sources"][0].__setitem__("name", "a/b"), "a/b"),
        (lambda d: d["agents"][0].__setitem__("max_files_open", 0), "max_files_open"),
    ],
    ids=["unknown-source", "dotdot-name", "unknown-file", "unknown-agent-source", "slash-folder", "limit"],
)
def test_a_malformed_file_is_refused_before_anything_is_written(tmp_path: Path, damage: Any, message: str) -> None:
    data = copy.deepcopy(sample())
    damage(data)
    bad = tmp_path / "bad.af"
    bad.write_text(json.dumps(data))
    mem = fresh(tmp_path)
    with pytest.raises(ValidationError, match=message.replace(".", r"\.")):
        import_af(mem, bad)
    assert mem.list_agents() == [] or all(a.name != AGENT for a in mem.list_agents())
    assert mem.files.folders() == [] and mem.archive.files.listing() == []


@pytest.mark.parametrize("vectors", [False, True])
def test_a_jsonl_backup_carries_folders_files_chunks_and_views(tmp_path: Path, vectors: bool) -> None:
    mem = fresh(tmp_path)
    import_af(mem, SAMPLE)
    agent = mem.get_agent(AGENT)
    mem.open_files(agent.id, [OpenRequest(f"{FOLDER}/test.md", 5, 3)])
    backup = tmp_path / "backup.jsonl"
    report = run_export(mem, fmt="jsonl", output=str(backup), vectors=vectors)
    assert report["rows"]["folders"] == 1 and report["rows"]["files"] == 2 and report["rows"]["file_chunks"] >= 2
    other = fresh(tmp_path, "other")
    inserted = run_import(other, backup, fmt="auto", agent="default", rename=None, replace=False)["inserted"]
    assert inserted["folders"] == 1 and inserted["files"] == 2
    # a file's chunks are cut again from its text and embedded before the restore returns (docs/AGENTFILE.md)
    assert inserted["embedded"] >= report["rows"]["file_chunks"] and other.archive.vectors.missing()["file_chunks"] == 0
    assert [(f.id, f.name, f.description, f.instructions, f.metadata) for f in other.files.folders()] == [
        (f.id, f.name, f.description, f.instructions, f.metadata) for f in mem.files.folders()
    ]

    def listed(m: Memory) -> list[Any]:  # every field, the times included (a restore keeps them)
        return list(m.archive.files.listing())

    assert listed(other) == listed(mem)
    ids = [f.id for f in mem.archive.files.listing()]
    assert other.archive.files.texts(ids) == mem.archive.files.texts(ids)
    restored = other.get_agent(AGENT)
    assert other.files.state(restored.id) == mem.files.state(agent.id)
    assert other.render_core(restored.id, with_metadata=False) == mem.render_core(agent.id, with_metadata=False)
    assert "Advertisement" in other.grep_files(restored.id, "Advertisement", None, 0, None)
    assert f"{FOLDER}/test.md" in other.semantic_search_files(restored.id, "footnote markup", 3)
    again = run_import(other, backup, fmt="jsonl", agent="default", rename=None, replace=False)["inserted"]
    assert again["folders"] == again["files"] == 0 and "embedded" not in again  # restoring twice writes nothing twice


def test_an_uploaded_folder_whose_bytes_are_not_its_text_is_shared_when_its_export_comes_back(tmp_path: Path) -> None:
    """A file uploaded with CRLF line ends, a BOM or another encoding (or converted from a PDF) is stored under the
    hash of its bytes while an agent file carries its text: the folder exported and imported again (another agent
    name) is the same folder, shared, not a copy ``docs_(1)`` said to have "other content"."""
    mem = fresh(tmp_path)
    agent = mem.ensure_agent("default").id
    mem.files.create_folder("docs", description="Project docs")
    mem.files.upload_many(
        "docs",
        [
            ("win.txt", b"first line\r\nsecond line\r\n", ""),
            ("bom.md", b"\xef\xbb\xbf# Title\n", ""),
            ("plain.py", b"x = 1\n", ""),
        ],
    )
    mem.files.attach(agent, "docs")
    out = tmp_path / "default.af"
    run_export(mem, agent="default", fmt="af", output=str(out), vectors=False)
    folder_id = mem.files.folder("docs").id

    report = import_af(mem, out, rename="second")
    assert report["imported"] == ["second"]
    assert [f.name for f in mem.files.folders()] == ["docs"], report["notes"]
    assert any("'docs' is here already with the same files" in n for n in report["notes"]), report["notes"]
    assert sorted(mem.files.agents_of(folder_id)) == sorted([agent, mem.get_agent("second").id])
    second = mem.get_agent("second").id
    assert mem.open_files(second, [OpenRequest("docs/win.txt")]) == "* Opened docs/win.txt (previously full file)"
    assert "2: second line" in mem.files.state(second).view("docs/win.txt").visible  # type: ignore[union-attr]
