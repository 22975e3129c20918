"""``tiermem folders ...`` as a user runs it: a directory uploaded (.gitignore, nested directories, binary, too large
and linked files), statuses shown, folders attached and detached, a refused delete, ``sync`` after edits (only the
changed file read and stored again), a file vanishing mid-sync, and ``sync --watch`` picking up an edit."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tiermem.base.config import load_settings
from tiermem.base.errors import ValidationError
from tiermem.cli.main import main
from tiermem.domain.factory import open_memory
from tiermem.domain.filesystem import render_agent_directories
from tiermem.domain.memory import Memory
from tiermem.interop.folder_sync import VANISHED, sync_folder

from .conftest import PYTHON, ROOT
from .test_transports import server_env

MAX_BYTES = 1024  # TIERMEM_FILE_MAX_BYTES in these tests (its smallest allowed value)
HOUR_AGO_NS = time.time_ns() - 3600 * 10**9


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The real CLI in this process, on this test's data directory with the hashing embedder."""
    capsys.readouterr()
    code = main([*args, "--data-dir", str(tmp_path / "data"), "--embedding-model", "hashing"])
    out, err = capsys.readouterr()
    return code, out, err


def memory_of(tmp_path: Path) -> Memory:
    return open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="hashing"), start_embedder=False)


def write(root: Path, files: dict[str, str | bytes]) -> None:
    for name, body in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(body, bytes):
            path.write_bytes(body)
        else:
            path.write_text(body)
        os.utime(path, ns=(HOUR_AGO_NS, HOUR_AGO_NS))  # not "just changed": a re-sync trusts size and time


def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    write(
        root,
        {
            ".gitignore": "*.log\nbuild/\n!keep.log\n",
            "README.md": "# Project\nThe launch is on 3 March.\n",
            "keep.log": "kept despite *.log\n",
            "debug.log": "ignored\n",
            "build/out.txt": "ignored with its directory\n",
            ".git/HEAD": "ref: refs/heads/main\n",
            "notes/.gitignore": "private.md\n",
            "notes/private.md": "ignored by the nested .gitignore\n",
            "notes/deep/plan.md": "Step one: write the plan.\n",
            "src/app.py": "def main():\n    print('hello')\n",
            "logo.png": b"\x89PNG\r\n\x1a\n\x00\x00",
            "big.txt": "x" * 2000,
            "data.txt": b"\x00\x01\x02\x03" * 40,  # text by its name, binary by its bytes: stored with status error
        },
    )
    (tmp_path / "secret.md").write_text("outside the project\n")
    os.symlink(tmp_path / "secret.md", root / "outside.md")
    os.symlink(root / "README.md", root / "readme-link.md")
    os.symlink(root / "notes", root / "notes-link")
    os.symlink(root / "loop-b", root / "loop-a")  # a loop: each link points at the other
    os.symlink(root / "loop-a", root / "loop-b")
    os.symlink(root / "gone.md", root / "dangling.md")
    return root


def test_upload_a_directory_show_and_the_api_refuses_dotdot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIERMEM_FILE_MAX_BYTES", str(MAX_BYTES))
    root = project(tmp_path)
    code, out, _ = run(
        tmp_path,
        capsys,
        "folders",
        "create",
        "docs",
        "--description",
        "Project docs",
        "--instructions",
        "Read the plan first.",
    )
    assert code == 0 and "created folder docs" in out
    code, out, err = run(tmp_path, capsys, "folders", "upload", "docs", str(root), "--json")
    assert code == 1, (out, err)  # data.txt could not be parsed
    report = json.loads(out)
    outcomes = {f["name"]: f["outcome"] for f in report["files"]}
    assert outcomes == {
        "README.md": "added",
        "keep.log": "added",
        "notes/deep/plan.md": "added",
        "src/app.py": "added",
        "data.txt": "error",
        "logo.png": "skipped",
        "big.txt": "skipped",
        "outside.md": "skipped",
        "readme-link.md": "skipped",
        "notes-link": "skipped",
        "loop-a": "skipped",
        "loop-b": "skipped",
        "dangling.md": "skipped",
    }
    assert report["ignored"] == 6  # debug.log, build/, notes/private.md; hidden: .git/, .gitignore, notes/.gitignore
    reasons = {f["name"]: f.get("reason", "") for f in report["files"]}
    assert "2,000 bytes, over the limit of 1,024 bytes" in reasons["big.txt"]
    assert "TIERMEM_FILE_MAX_BYTES" in reasons["big.txt"]
    assert "binary by its extension (.png)" in reasons["logo.png"]
    assert "outside" in reasons["outside.md"] and str(tmp_path / "secret.md") in reasons["outside.md"]
    assert "uploaded under its own name" in reasons["readme-link.md"]
    assert "directory; not followed" in reasons["notes-link"]
    assert "in a loop" in reasons["loop-a"] and "in a loop" in reasons["loop-b"]
    assert "a broken link" in reasons["dangling.md"]

    # the plain summary: counts, then each error and skip with its reason
    code, out, _ = run(tmp_path, capsys, "folders", "upload", "docs", str(root))
    assert code == 1
    assert out.splitlines()[0] == (
        "folder docs: 0 added, 0 updated, 4 unchanged, 1 error, 8 skipped (6 hidden or ignored by .gitignore)"
    )
    assert "  error data.txt: " in out and "  skipped logo.png: binary" in out

    code, out, _ = run(tmp_path, capsys, "folders", "show", "docs", "--json")
    shown = json.loads(out)
    status = {f["name"]: (f["status"], f["size"], f["chunks"] > 0) for f in shown["files"]}
    assert status["notes/deep/plan.md"] == ("completed", 26, True)
    assert status["data.txt"] == ("error", 160, False)
    assert "data.txt" in next(f["error"] for f in shown["files"] if f["name"] == "data.txt")
    assert shown["description"] == "Project docs" and shown["instructions"] == "Read the plan first."
    code, out, _ = run(tmp_path, capsys, "folders", "show", "docs")
    assert "status" in out and "completed" in out and "error" in out

    # one file named on the command line: its own name
    single = tmp_path / "one.md"
    single.write_text("just one\n")
    code, out, _ = run(tmp_path, capsys, "folders", "upload", "docs", str(single))
    assert code == 0 and out.startswith("folder docs: 1 added")

    memory = memory_of(tmp_path)
    with pytest.raises(ValidationError, match=r"\.\."):
        memory.files.upload("docs", "../escape.md", b"no")
    done = memory.files.upload_many("docs", [("notes/../../escape.md", b"no", "")])
    assert done[0].outcome == "skipped" and ".." in done[0].reason
    assert "escape.md" not in {f.name for f in memory.files.files("docs")}

    code, _, err = run(tmp_path, capsys, "folders", "upload", "nope", str(single))
    assert code == 1 and "No folder named 'nope'" in err and "tiermem folders create nope" in err


def test_attach_detach_and_a_refused_delete(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "d"
    write(root, {"a.md": "alpha\n"})
    assert run(tmp_path, capsys, "folders", "create", "docs")[0] == 0
    assert run(tmp_path, capsys, "folders", "upload", "docs", str(root))[0] == 0
    code, out, _ = run(tmp_path, capsys, "folders", "attach", "docs", "--max-files-open", "3", "--char-limit", "1000")
    assert code == 0 and "to agent default: up to 3 files open, 1,000 characters" in out
    code, _, err = run(tmp_path, capsys, "folders", "attach", "docs", "--agent", "nobody")
    assert code == 1 and "No agent named 'nobody'" in err
    code, out, _ = run(tmp_path, capsys, "folders", "list", "--json")
    assert json.loads(out) == [{"name": "docs", "files": 1, "description": "", "agents": "default"}]
    code, out, _ = run(tmp_path, capsys, "blocks", "show", "--core")
    assert "docs/a.md" in out
    code, _, err = run(tmp_path, capsys, "folders", "delete", "docs")
    assert code == 1 and "attached to agent(s) default" in err and "--yes" in err and "folders detach docs" in err
    assert run(tmp_path, capsys, "folders", "detach", "docs")[0] == 0
    code, _, err = run(tmp_path, capsys, "folders", "detach", "docs")
    assert code == 1 and "not attached" in err
    assert run(tmp_path, capsys, "folders", "attach", "docs")[0] == 0
    code, out, _ = run(tmp_path, capsys, "folders", "delete", "docs", "--yes")
    assert code == 0 and "deleted folder docs and its 1 file(s); detached from default" in out
    code, out, _ = run(tmp_path, capsys, "folders", "list")
    assert "no folders" in out
    code, out, _ = run(tmp_path, capsys, "blocks", "show", "--core")
    assert "docs/a.md" not in out


def test_sync_uploads_only_what_changed_and_deletes_what_is_gone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "d"
    write(root, {"a.md": "alpha\n", "b.md": "beta\n", "sub/c.md": "gamma\n", "old.md": "to be removed\n"})
    code, out, err = run(tmp_path, capsys, "folders", "sync", "docs", str(root), "--json")
    assert code == 0 and "created folder docs" in err
    first = json.loads(out)
    assert (first["added"], first["read"]) == (4, 4)
    memory = memory_of(tmp_path)
    memory.files.upload("docs", "by-hand.md", b"uploaded by other means")  # not from the directory: kept

    code, out, _ = run(tmp_path, capsys, "folders", "sync", "docs", str(root), "--json")
    again = json.loads(out)
    assert (again["unchanged"], again["read"], again["deleted"]) == (4, 0, 0)  # no file read: size and time agree

    (root / "a.md").write_text("alpha, edited\n")
    (root / "new.md").write_text("brand new\n")
    (root / "old.md").unlink()
    code, out, _ = run(tmp_path, capsys, "folders", "sync", "docs", str(root), "--json")
    third = json.loads(out)
    assert {f["name"]: f["outcome"] for f in third["files"]} == {
        "a.md": "updated",
        "new.md": "added",
        "b.md": "unchanged",
        "sub/c.md": "unchanged",
    }
    assert third["deleted_files"] == ["old.md"] and third["read"] == 2
    names = {f.name for f in memory.files.files("docs")}
    assert names == {"a.md", "b.md", "new.md", "sub/c.md", "by-hand.md"}
    assert memory.files.text("docs", "a.md") == "alpha, edited\n"
    code, out, _ = run(tmp_path, capsys, "folders", "show", "docs")
    assert f"synced_from: {root.resolve()}" in out

    # a file that vanishes between the listing and its reading is reported, and the sync goes on
    (root / "b.md").write_text("beta, edited\n")
    seen: list[int] = []

    def vanish(done: int, total: int) -> None:
        if not seen:
            (root / "b.md").unlink()  # a.md is settled first (unchanged); b.md is read after this
        seen.append(done)

    report = sync_folder(memory, "docs", root, progress=vanish)
    assert report.outcome("b.md") == "skipped" and VANISHED in next(
        r.reason for r in report.results if r.name == "b.md"
    )
    assert report.deleted == ["b.md"] and not report.failed and seen[-1] == 4

    code, _, err = run(tmp_path, capsys, "folders", "sync", "docs", str(tmp_path / "missing"))
    assert code == 1 and "is not a directory" in err


def _lines(stream: Any, into: queue.Queue[str]) -> None:
    for line in stream:
        into.put(line)


def test_sync_watch_reflects_an_edit(tmp_path: Path) -> None:
    root = tmp_path / "d"
    write(root, {"a.md": "first\n", "b.md": "other\n"})
    proc = subprocess.Popen(
        [
            PYTHON,
            "-m",
            "tiermem",
            "folders",
            "sync",
            "docs",
            str(root),
            "--watch",
            "--interval",
            "0.2",
            "--json",
            "--data-dir",
            str(tmp_path / "data"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=server_env(tmp_path),
    )
    reports: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stdout, reports), daemon=True).start()
    try:
        first = json.loads(reports.get(timeout=90))
        assert first["added"] == 2, first
        (root / "a.md").write_text("second, edited\n")
        edited = time.monotonic()
        delay = None
        while time.monotonic() - edited < 10:
            try:
                report = json.loads(reports.get(timeout=0.1))
            except queue.Empty:
                continue
            if any(f["name"] == "a.md" and f["outcome"] == "updated" for f in report["files"]):
                delay = time.monotonic() - edited
                break
        assert delay is not None, "the edit was not synced within 10 s"
        print(f"sync --watch reflected the edit after {delay:.2f} s")
        assert delay < 10, f"the edit took {delay:.2f} s to reach the folder (target: 2 s)"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    assert memory_of(tmp_path).files.text("docs", "a.md") == "second, edited\n"


def test_a_file_vanishing_mid_sync_and_a_full_folder_are_reported_not_failed(settings: Any, tmp_path: Path) -> None:
    """Bad input named by the issue: a file listed, then removed before it is read, is skipped with the reason (the
    sync goes on); a folder at its file limit takes no new file and says which setting to raise."""
    from tiermem.domain.factory import open_memory
    from tiermem.interop.folder_sync import VANISHED, sync_folder, walk

    root = tmp_path / "docs"
    root.mkdir()
    for name in ("a.md", "b.md", "c.md"):
        (root / name).write_text(f"note {name}\n")
    memory = open_memory(settings.model_copy(update={"folder_max_files": 2}))
    memory.files.create_folder("docs")
    listing = walk(root, max_bytes=memory.files.file_max_bytes)
    (root / "b.md").unlink()  # gone between the listing and the read
    report = sync_folder(memory, "docs", root, listing=listing)
    reasons = {r.name: (r.outcome, r.reason) for r in report.results}
    assert reasons["b.md"] == ("skipped", VANISHED)
    assert reasons["a.md"][0] == "added" and reasons["c.md"][0] == "added"
    (root / "d.md").write_text("one too many\n")
    full = sync_folder(memory, "docs", root)
    outcome, reason = {r.name: (r.outcome, r.reason) for r in full.results}["d.md"]
    assert outcome == "skipped" and "folder_max_files" in reason and "TIERMEM_FOLDER_MAX_FILES" in reason
    assert sorted(f.name for f in memory.files.files("docs")) == ["a.md", "c.md"]


def test_a_utf8_file_cut_mid_character_is_stored_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``head -c`` or a log rotation cuts a UTF-8 file inside a character: the file is stored (U+FFFD for the cut
    character) and the upload says so; it is not refused as binary, nor does a sync replace the good version."""
    root = tmp_path / "logs"
    text = "Отчёт о работе: всё прошло хорошо.\n" * 40
    write(root, {"run.log": text})
    assert run(tmp_path, capsys, "folders", "sync", "logs", str(root))[0] == 0
    write(root, {"run.log": (text + "Конец").encode()[:-1]})
    code, out, _ = run(tmp_path, capsys, "folders", "sync", "logs", str(root))
    assert code == 0 and "1 updated" in out
    assert "updated run.log: its last character was cut short; replaced by U+FFFD" in out
    stored = memory_of(tmp_path).files.text("logs", "run.log")
    assert stored == text + "Коне\ufffd"


def test_lowering_the_open_limit_names_the_files_it_closes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Attaching a folder names the files it opened; attaching it again (new limits) opens none, so names none (the
    files the agent opened itself are not its), and names the files the lower limit closed."""
    from tiermem.domain.file_views import OpenRequest

    root = tmp_path / "d"
    write(root, {f"f{i}.md": f"file {i}\n" for i in range(4)})
    assert run(tmp_path, capsys, "folders", "sync", "sf", str(root))[0] == 0
    code, out, _ = run(tmp_path, capsys, "folders", "attach", "sf", "--max-files-open", "4")
    assert code == 0 and "opened the first 4 uploaded: " in out and all(f"sf/f{i}.md" in out for i in range(4))
    memory = memory_of(tmp_path)
    agent = memory.named_agent("default")
    for i in range(4):
        memory.open_files(agent.id, [OpenRequest(f"sf/f{i}.md", None, None)])
    code, out, _ = run(tmp_path, capsys, "folders", "attach", "sf", "--max-files-open", "2")
    assert code == 0 and "up to 2 files open" in out
    assert "opened" not in out  # attached already: only the limits change, no file is opened by it
    assert "closed 2 least recently used file(s) of agent default to keep within 2 open: sf/f0.md, sf/f1.md" in out
    assert {v.name for v in memory.files.state(agent.id).files if v.is_open} == {"sf/f2.md", "sf/f3.md"}
    code, out, _ = run(tmp_path, capsys, "folders", "attach", "sf", "--max-files-open", "3")
    assert code == 0 and "closed" not in out


def test_exit_status_a_named_file_not_uploaded_or_a_full_folder_is_a_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file named on the command line that is not uploaded (too big, binary by its extension, unparsable) exits 1
    and says why; the same files met walking a directory are reported and exit 0 (skipped by rule), but for an
    error; a sync that the folder's file limit leaves incomplete exits 1."""
    monkeypatch.setenv("TIERMEM_FILE_MAX_BYTES", str(MAX_BYTES))
    root = tmp_path / "d"
    write(root, {"ok.md": "fine\n", "big.txt": "x" * 2000, "blob.bin": b"\x01\x02"})
    assert run(tmp_path, capsys, "folders", "create", "docs")[0] == 0
    for name, why in (("big.txt", "over the limit of 1,024 bytes"), ("blob.bin", "binary by its extension")):
        code, out, _ = run(tmp_path, capsys, "folders", "upload", "docs", str(root / name))
        assert code == 1 and f"  skipped {name}: " in out and why in out, out
    code, out, _ = run(tmp_path, capsys, "folders", "upload", "docs", str(root))
    assert code == 0 and "1 added" in out and "2 skipped" in out and "  skipped big.txt: " in out
    assert run(tmp_path, capsys, "folders", "upload", "docs", str(root / "ok.md"))[0] == 0  # unchanged: fine
    monkeypatch.setenv("TIERMEM_FOLDER_MAX_FILES", "2")
    write(root, {"more.md": "more\n", "most.md": "most\n"})
    code, out, _ = run(tmp_path, capsys, "folders", "sync", "full", str(root))
    assert code == 1 and "2 added" in out and "folder_max_files" in out, out


def test_new_files_open_in_the_attached_agents_as_lettas_upload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An upload inserts each new file open in every agent the folder is attached to, closing the least recently
    used beyond the agent's limit (the last uploaded stay open); a changed file keeps the agent's view of it."""
    root = tmp_path / "d"
    write(root, {"a.md": "alpha\n"})
    assert run(tmp_path, capsys, "folders", "sync", "docs", str(root))[0] == 0
    assert run(tmp_path, capsys, "folders", "attach", "docs", "--max-files-open", "2")[0] == 0
    memory = memory_of(tmp_path)
    agent = memory.named_agent("default")

    def opened() -> set[str]:
        return {v.name for v in memory.files.state(agent.id).files if v.is_open}

    assert opened() == {"docs/a.md"}  # attaching opens the folder's first files (Letta)
    write(root, {"b.md": "beta\n"})
    assert run(tmp_path, capsys, "folders", "sync", "docs", str(root))[0] == 0
    assert opened() == {"docs/a.md", "docs/b.md"}
    write(root, {"a.md": "alpha, changed\n", "c.md": "gamma\n", "d.md": "delta\n"})
    assert run(tmp_path, capsys, "folders", "sync", "docs", str(root))[0] == 0
    assert opened() == {"docs/c.md", "docs/d.md"}  # b.md closed (least recently used); a.md changed, not opened
    core = render_agent_directories(memory.core.get_agent(agent.id))
    assert '<file status="open" name="docs/d.md">' in core and "1: delta" in core


def test_uploading_another_file_of_a_taken_name_keeps_both_as_lettas_upload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two different files named report.txt uploaded into one folder: the second is stored as report_(1).txt (Letta's
    duplicate_handling=suffix) and the upload says so; each one uploaded again from its own path updates itself; a
    sync of one directory still replaces a file by its name."""
    write(tmp_path, {"projA/report.txt": "Project A budget is 10k\n", "projB/report.txt": "Project B is due in Q3\n"})
    a, b = tmp_path / "projA" / "report.txt", tmp_path / "projB" / "report.txt"
    assert run(tmp_path, capsys, "folders", "create", "docs")[0] == 0
    assert run(tmp_path, capsys, "folders", "upload", "docs", str(a))[0] == 0
    code, out, _ = run(tmp_path, capsys, "folders", "upload", "docs", str(b))
    assert code == 0 and "1 added, 0 updated" in out
    assert f"added report_(1).txt: the folder's report.txt is another file (from {a})" in out
    files = memory_of(tmp_path).files
    assert files.text("docs", "report.txt") == "Project A budget is 10k\n"
    assert files.text("docs", "report_(1).txt") == "Project B is due in Q3\n"

    write(tmp_path, {"projB/report.txt": "Project B slipped to Q4\n"})
    code, out, _ = run(tmp_path, capsys, "folders", "upload", "docs", str(b))
    assert code == 0 and "0 added, 1 updated" in out
    assert run(tmp_path, capsys, "folders", "upload", "docs", str(a))[1].startswith("folder docs: 0 added, 0 updated")
    assert files.text("docs", "report_(1).txt") == "Project B slipped to Q4\n"
    assert sorted(f.name for f in files.files("docs")) == ["report.txt", "report_(1).txt"]

    write(tmp_path, {"moved/report.txt": "Synced from elsewhere\n"})  # a sync mirrors its directory by name
    assert run(tmp_path, capsys, "folders", "sync", "docs", str(tmp_path / "moved"))[0] == 0
    assert files.text("docs", "report.txt") == "Synced from elsewhere\n"


def test_a_suffixed_name_given_in_an_upload_is_not_taken_again_by_a_file_of_that_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The folder holds report.txt from A; one upload of X/report.txt (stored as report_(1).txt) and
    Y/report_(1).txt: the second is not written over the first (one file id) but stored as report_(1)_(1).txt."""
    write(tmp_path, {"A/report.txt": "from A\n", "X/report.txt": "from X\n", "Y/report_(1).txt": "from Y\n"})
    assert run(tmp_path, capsys, "folders", "create", "docs")[0] == 0
    assert run(tmp_path, capsys, "folders", "upload", "docs", str(tmp_path / "A" / "report.txt"))[0] == 0
    x, y = tmp_path / "X" / "report.txt", tmp_path / "Y" / "report_(1).txt"
    code, out, _ = run(tmp_path, capsys, "folders", "upload", "docs", str(x), str(y))
    assert code == 0 and "2 added, 0 updated" in out, out
    assert "the folder's report_(1).txt is another file of this upload" in out
    files = memory_of(tmp_path).files
    assert {f.name: files.text("docs", f.name) for f in files.files("docs")} == {
        "report.txt": "from A\n",
        "report_(1).txt": "from X\n",
        "report_(1)_(1).txt": "from Y\n",
    }
    code, out, _ = run(tmp_path, capsys, "folders", "upload", "docs", str(x), str(y))  # again: each one is itself
    assert code == 0 and "0 added, 0 updated" in out, out


def test_a_sync_or_upload_with_nothing_to_embed_exits_cleanly_with_the_real_model(tmp_path: Path) -> None:
    """A folder sync with nothing new and an unchanged file uploaded again, with the packaged model (not hashing):
    the command starts loading the model, finds nothing to embed and exits; it used to exit while onnxruntime was
    still loading in a daemon thread, which aborted the process (SIGABRT, exit 134, "terminate called without an
    active exception"). Each is run a few times: how far the load had got at exit varied."""
    root = tmp_path / "d"
    write(root, {"a.md": "apples and pears\n"})
    env = server_env(tmp_path, TIERMEM_EMBEDDING_MODEL="default")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [PYTHON, "-m", "tiermem", "folders", *args, "--data-dir", str(tmp_path / "data")],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=300,
            check=False,
        )

    first = cli("sync", "docs", str(root))
    assert first.returncode == 0 and "1 added" in first.stdout, first.stderr
    for args in [("sync", "docs", str(root))] * 3 + [("upload", "docs", str(root / "a.md"))] * 3:
        done = cli(*args)
        assert done.returncode == 0, (args, done.returncode, done.stderr[-2000:])
        assert "0 added, 0 updated" in done.stdout and "terminate called" not in done.stderr, (args, done.stderr)


def test_a_file_name_holding_a_line_feed_cannot_forge_a_report_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A skipped file's name was printed raw: a name holding a line feed started a line of its own that read as
    another entry of the report ("  error fake.txt: injected"). Each name and reason stays on its line, escaped."""
    root = tmp_path / "d"
    write(root, {"evil\n  error fake.txt: injected": "x\n", "fine.md": "ok\n"})
    code, out, _ = run(tmp_path, capsys, "folders", "sync", "docs", str(root))
    lines = out.splitlines()
    assert lines[0] == "folder docs: 1 added, 0 updated, 0 unchanged, 0 error, 1 skipped", out
    assert len(lines) == 2 and lines[1].startswith("  skipped evil\\n  error fake.txt: injected: The file name"), out
    assert not any(line.startswith("  error") for line in lines), out


def test_a_file_name_that_is_not_utf8_is_skipped_with_its_reason_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A name on disk written in another encoding (bytes that are not UTF-8, read back with surrogate escapes)
    crashed the whole upload with a UnicodeEncodeError traceback and stored nothing. It is skipped, saying why and
    what to rename it to; the other files are stored."""
    root = tmp_path / "d"
    root.mkdir()
    (root / "fine.md").write_text("ok\n")
    with open(os.path.join(os.fsencode(root), b"caf\xe9.txt"), "wb") as f:  # Latin-1 'café.txt'
        f.write(b"latin-1 name\n")
    code, out, _ = run(tmp_path, capsys, "folders", "sync", "docs", str(root))
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == "folder docs: 1 added, 0 updated, 0 unchanged, 0 error, 1 skipped", out
    assert "is not valid UTF-8" in lines[1] and "'caf_.txt'" in lines[1], out
    code, out, _ = run(tmp_path, capsys, "folders", "create", "more")
    code, out, _ = run(tmp_path, capsys, "folders", "upload", "more", os.fsdecode(root / os.fsdecode(b"caf\xe9.txt")))
    assert code == 1 and "is not valid UTF-8" in out, out
    code, out, _ = run(tmp_path, capsys, "folders", "sync", "docs", str(root), "--json")
    (skipped,) = [f for f in json.loads(out)["files"] if f["outcome"] == "skipped"]
    assert "is not valid UTF-8" in skipped["reason"], out


def test_watch_says_a_removed_directory_once_and_syncs_when_it_is_back(settings: Any, tmp_path: Path) -> None:
    """The synced directory removed while `sync --watch` ran: the same error was printed every round (twice a
    second, for ever). It is said once; the folder keeps its files; once the directory is back the next round syncs
    and reports it."""
    import shutil

    from tiermem.interop.folder_sync import watch

    root = tmp_path / "d"
    write(root, {"a.md": "one\n"})
    memory = open_memory(settings)
    memory.files.create_folder("docs")
    reports: list[Any] = []
    errors: list[str] = []
    rounds = iter(range(12))
    waited: list[float] = []

    def between(seconds: float) -> None:  # what happens on disk between the rounds
        if not waited:
            shutil.rmtree(root)  # gone after the first round
        if len(waited) == 6:  # back after six rounds without it
            write(root, {"a.md": "one\n", "b.md": "two\n"})
        waited.append(seconds)

    watch(
        memory,
        "docs",
        root,
        on_report=reports.append,
        on_error=lambda exc: errors.append(str(exc)),
        keep_going=lambda: next(rounds, None) is not None,
        wait=between,
    )
    assert len(errors) == 1 and "is not a directory" in errors[0], errors
    assert len(reports) == 2, reports
    assert {r.name: r.outcome for r in reports[1].results} == {"a.md": "unchanged", "b.md": "added"}
    assert sorted(f.name for f in memory.files.files("docs")) == ["a.md", "b.md"]


def test_watch_stops_with_an_error_when_its_folder_is_deleted(tmp_path: Path) -> None:
    """`tiermem folders delete` run while `sync --watch` synced the folder: the watch went on doing nothing (or
    said "No folder named" at each change). It stops at once, exit 1, saying the folder was deleted and how to start
    again."""
    root = tmp_path / "d"
    write(root, {"a.md": "one\n"})
    proc = subprocess.Popen(
        [PYTHON, "-m", "tiermem", "folders", "sync", "docs", str(root), "--watch", "--interval", "0.2", "--json"]
        + ["--data-dir", str(tmp_path / "data")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=server_env(tmp_path),
    )
    reports: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stdout, reports), daemon=True).start()
    try:
        assert json.loads(reports.get(timeout=90))["added"] == 1
        memory_of(tmp_path).files.delete_folder("docs")
        code = proc.wait(90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read() if proc.stderr else ""
    assert code == 1, err
    assert "tiermem: Folder 'docs' was deleted while this watch synced it, so the watch stopped." in err
    assert f"run `tiermem folders sync docs {root} --watch` (it makes the folder anew)" in err


def test_two_files_of_one_name_in_one_upload_are_both_kept_as_a_separate_upload_keeps_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`upload docs a/report.txt b/report.txt` skipped the second, advising to upload it "separately into another
    folder", though uploading it separately into the same folder keeps it as report_(1).txt. One upload now does the
    same and says so; the same file given twice is uploaded once; uploading both again changes nothing."""
    write(tmp_path, {"a/report.txt": "from A\n", "b/report.txt": "from B\n"})
    a, b = tmp_path / "a" / "report.txt", tmp_path / "b" / "report.txt"
    assert run(tmp_path, capsys, "folders", "create", "docs")[0] == 0
    code, out, _ = run(tmp_path, capsys, "folders", "upload", "docs", str(a), str(b), str(a))
    assert code == 0 and out.startswith("folder docs: 2 added, 0 updated, 0 unchanged, 0 error, 0 skipped"), out
    assert "added report_(1).txt: the folder's report.txt is another file of this upload: this one is stored as " in out
    assert "separately" not in out
    files = memory_of(tmp_path).files
    assert {f.name: files.text("docs", f.name) for f in files.files("docs")} == {
        "report.txt": "from A\n",
        "report_(1).txt": "from B\n",
    }
    code, out, _ = run(tmp_path, capsys, "folders", "upload", "docs", str(a), str(b))
    assert code == 0 and out.startswith("folder docs: 0 added, 0 updated, 2 unchanged"), out


def test_a_file_name_holding_a_tab_is_escaped_in_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A skipped name's tab was printed raw (a gap that reads as the report's own spacing); it is written \\t."""
    root = tmp_path / "d"
    write(root, {"evil\tname.txt": "x\n", "fine.md": "ok\n"})
    code, out, _ = run(tmp_path, capsys, "folders", "sync", "docs", str(root))
    lines = out.splitlines()
    assert len(lines) == 2 and lines[1].startswith("  skipped evil\\tname.txt: The file name"), out
    assert "\t" not in out
