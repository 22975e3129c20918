"""The memory inspector's Folders section over its HTTP API (no browser): folders, their files with status and
errors, a file's text beside what the inspected agent has open of it, and the agent's own file tools.

The app is the ``/ui`` mount of ``tiermem serve --transport http`` (``http_mount``) on one real store, driven with
Starlette's in-process client; the "host" changes memory through the same ``Memory`` the server serves.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tiermem.base.config import load_settings
from tiermem.base.errors import ValidationError
from tiermem.domain.factory import open_memory
from tiermem.domain.file_views import OpenRequest
from tiermem.domain.memory import Memory
from tiermem.ui import api

PORT = 8932
BASE = f"http://127.0.0.1:{PORT}"
WORK = "1b7d9f3a5c2e4a6b8d0f1e3c5a7b9d2f"  # covers agent "work" only
ADMIN = "e8c6a4b2d0f9e7c5a3b1d8f6e4c2a0b9"  # covers every agent
APP_PY = b"def main():\n    print('hello TODO')\n\n# TODO fix the launcher\n"


@dataclass
class Site:
    client: TestClient
    memory: Memory
    work: str  # agent ids
    private: str

    def get(self, path: str, token: str = ADMIN, **params: str) -> Any:
        return self.client.get(f"/ui/api/{path}", params=params, headers={"authorization": f"Bearer {token}"})

    def post(self, path: str, body: Any, token: str = ADMIN) -> Any:
        return self.client.post(f"/ui/api/{path}", json=body, headers={"authorization": f"Bearer {token}"})


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    from tiermem.process.netguard import make_tokens
    from tiermem.server.app import build_http_app, build_server
    from tiermem.server.runtime import MemoryHandle
    from tiermem.ui.launch import http_mount

    settings = load_settings(
        data_dir=tmp_path / "data", embedding_model="hashing", transport="http", port=PORT, agent="work"
    )
    memory = open_memory(settings)
    work, private = memory.ensure_agent("work").id, memory.ensure_agent("private").id
    memory.files.create_folder("docs", description="Project docs")
    memory.files.attach(work, "docs")  # while empty: every file starts closed
    memory.files.upload_many(
        "docs",
        [
            (
                "intro.md",
                b"# Intro\nThe quick brown fox jumps over the lazy dog.\nAnother line about foxes.\n",
                "/home/ada/private/intro.md",  # where the uploader had it: never shown to the page
            ),
            ("code/app.py", APP_PY, ""),
            ("bin.dat", b"\x00\x01\x02\x03\xff\xfe", ""),
        ],
    )
    memory.files.create_folder("secrets", description="Only for the private agent")
    memory.files.upload_many("secrets", [("plan.txt", b"The private plan: move to Lyon in June.\n", "")])
    memory.files.attach(private, "secrets")
    handle = MemoryHandle(lambda: (memory, work))
    tokens = make_tokens([{"token": WORK, "agents": ["work"]}, {"token": ADMIN, "agents": ["*"]}], "test")
    app = build_http_app(build_server(handle, settings), settings, tokens, ui=http_mount(handle, settings))
    with TestClient(app, base_url=BASE) as client:
        yield Site(client, memory, work, private)


def test_folders_list_their_files_and_agents(site: Site) -> None:
    folders = site.get("folders").json()["folders"]
    by_name = {f["name"]: f for f in folders}
    assert set(by_name) == {"docs", "secrets"}
    assert (by_name["docs"]["description"], by_name["docs"]["files"], by_name["docs"]["agents"]) == (
        "Project docs",
        3,
        ["work"],
    )
    assert by_name["secrets"]["agents"] == ["private"] and by_name["secrets"]["files"] == 1

    listed = site.get("folders/files", folder="docs")
    files = {f["name"]: f for f in listed.json()["files"]}
    assert set(files) == {"intro.md", "code/app.py", "bin.dat"}
    assert "/home/ada" not in listed.text and not any("source_path" in f for f in files.values())
    app = files["code/app.py"]
    assert (app["status"], app["size"], app["error"]) == ("completed", len(APP_PY), "") and app["chunks"] >= 1
    assert app["file_type"]
    broken = files["bin.dat"]
    assert broken["status"] == "error" and broken["error"] and broken["chunks"] == 0

    missing = site.get("folders/files", folder="nope")
    assert missing.status_code == 404 and "No folder named 'nope'" in missing.json()["error"]


def test_a_files_text_and_the_agents_window(site: Site) -> None:
    closed = site.get("folders/file", agent="work", folder="docs", file="code/app.py").json()
    assert closed["text"] == APP_PY.decode() and closed["status"] == "completed"
    assert closed["view"] == {"attached": True, "name": "docs/code/app.py", "is_open": False}

    site.memory.open_files(site.work, [OpenRequest("docs/code/app.py", 1, 2)])  # the host's model opens lines 2-3
    opened = site.get("folders/file", agent="work", folder="docs", file="code/app.py").json()
    view = opened["view"]
    assert view["is_open"] and (view["start_line"], view["end_line"]) == (2, 3)
    assert "hello TODO" in view["visible"] and "def main" not in view["visible"] and view["accessed_us"] > 0

    other = site.get("folders/file", agent="private", folder="docs", file="code/app.py").json()
    assert other["view"] == {"attached": False, "name": "docs/code/app.py", "is_open": False}
    failed = site.get("folders/file", agent="work", folder="docs", file="bin.dat").json()
    assert failed["status"] == "error" and failed["error"] and failed["text"] == "" and not failed["view"]["attached"]
    nothing = site.get("folders/file", agent="work", folder="docs", file="nope.md")
    assert nothing.status_code == 404 and "no file 'nope.md'" in nothing.json()["error"]


def test_search_the_agents_files_with_both_tools(site: Site) -> None:
    both = site.get("folders/search", agent="work", q="TODO").json()
    assert both["grep"].startswith("Found 2 total matches across 1 files") and "docs/code/app.py" in both["grep"]
    assert "semantic matches" in both["semantic"] and "docs/code/app.py" in both["semantic"]
    assert "plan.txt" not in both["grep"] + both["semantic"]  # another agent's folder

    foxes = site.get("folders/search", agent="work", q="fox", kind="grep", include="*.md").json()
    assert "docs/intro.md" in foxes["grep"] and "semantic" not in foxes
    meaning = site.get("folders/search", agent="work", q="lazy dog", kind="semantic").json()
    assert "docs/intro.md" in meaning["semantic"] and "grep" not in meaning

    bad = site.get("folders/search", agent="work", q="print(").json()
    assert "Invalid regex pattern" in bad["grep_error"] and "semantic" in bad  # one tool's refusal, the other's answer
    refused = site.get("folders/search", agent="work", q="print(", kind="grep")
    assert refused.status_code == 400 and "Invalid regex pattern" in refused.json()["error"]
    empty = site.get("folders/search", agent="work", q="  ")
    assert empty.status_code == 400 and "Type what to look for" in empty.json()["error"]
    wrong = site.get("folders/search", agent="work", q="x", kind="fuzzy")
    assert wrong.status_code == 400 and "kind must be" in wrong.json()["error"]
    site.memory.ensure_agent("loner")
    none = site.get("folders/search", agent="loner", q="TODO")
    assert none.status_code == 200 and "No folder is attached" in none.json()["grep_error"]


def test_a_token_for_one_agent_sees_only_its_agents_folders(site: Site) -> None:
    mine = site.get("folders", token=WORK).json()["folders"]
    assert [f["name"] for f in mine] == ["docs"] and mine[0]["agents"] == ["work"]
    site.memory.files.attach(site.private, "docs")
    shared = site.get("folders", token=WORK).json()["folders"][0]
    assert (shared["agents"], shared["other_agents"]) == (["work"], 1)  # the other agent is counted, not named

    # another agent's folder answers as a folder that does not exist does: no oracle, no other folder named
    files = site.get("folders/files", token=WORK, folder="secrets")
    missing = site.get("folders/files", token=WORK, folder="nope")
    assert files.status_code == missing.status_code == 404
    assert files.json()["error"].replace("secrets", "X") == missing.json()["error"].replace("nope", "X")
    assert "(folders: 'docs')" in files.json()["error"]
    text = site.get("folders/file", token=WORK, agent="work", folder="secrets", file="plan.txt")
    assert text.status_code == 404 and "secrets" not in text.json()["error"].replace("'secrets'", "")
    search = site.get("folders/search", token=WORK, agent="private", q="plan")
    assert search.status_code == 403 and "may not use agent 'private'" in search.json()["error"]
    assert site.get("folders/files", token=WORK, folder="docs").status_code == 200


def test_two_folders_an_older_tiermem_named_alike_are_each_reached_by_id_and_kept_apart(site: Site) -> None:
    """A store an older tiermem left with two folders named ``docs`` (one attached to each agent): the inspector lists
    both, opens each by its id, and a token for one agent sees its own alone, by name or id, and never learns of the
    other (its id, its files)."""
    memory = site.memory
    mine = memory.files.folder("docs")
    other = replace(mine, id="folder-older-copy", description="the private agent's")  # as an older tiermem stored it
    memory.files.rows.put_folder(other)
    memory.files.upload_many(other.id, [("private-plan.txt", b"The private plan: Lyon in June.\n", "")])
    memory.files.attach(site.private, other.id)

    listed = site.get("folders")
    assert listed.status_code == 200, listed.text
    assert sorted((f["id"], f["files"]) for f in listed.json()["folders"] if f["name"] == "docs") == sorted(
        [(mine.id, 3), (other.id, 1)]
    )
    for folder, names in ((mine.id, {"intro.md", "code/app.py", "bin.dat"}), (other.id, {"private-plan.txt"})):
        files = site.get("folders/files", folder=folder)
        assert files.status_code == 200, files.text
        assert {f["name"] for f in files.json()["files"]} == names and files.json()["folder"] == "docs"
    text = site.get("folders/file", agent="private", folder=other.id, file="private-plan.txt")
    assert text.status_code == 200 and "Lyon" in text.json()["text"], text.text
    assert text.json()["view"]["name"] == "docs/private-plan.txt" and text.json()["view"]["attached"]
    shared = site.get("folders/files", folder="docs")  # the name is refused, naming both ids (this token sees both)
    assert shared.status_code == 400 and mine.id in shared.json()["error"] and other.id in shared.json()["error"]

    seen = site.get("folders", token=WORK)
    assert seen.status_code == 200, seen.text
    assert [(f["id"], f["files"]) for f in seen.json()["folders"]] == [(mine.id, 3)]
    assert other.id not in seen.text
    for folder in ("docs", mine.id):  # its own folder, by name (the only one it sees) or by id
        files = site.get("folders/files", token=WORK, folder=folder)
        assert files.status_code == 200, files.text
        assert {f["name"] for f in files.json()["files"]} == {"intro.md", "code/app.py", "bin.dat"}
        assert other.id not in files.text
        text = site.get("folders/file", token=WORK, agent="work", folder=folder, file="intro.md")
        assert text.status_code == 200 and "quick brown fox" in text.json()["text"], text.text
    hidden = site.get("folders/files", token=WORK, folder=other.id)
    assert hidden.status_code == 404 and "private-plan" not in hidden.text
    plan = site.get("folders/file", token=WORK, agent="work", folder="docs", file="private-plan.txt")
    assert plan.status_code == 404 and "Lyon" not in plan.text and other.id not in plan.text

    # a token for both agents is refused the name, naming the two it sees and not a third one's folder of that name
    third = replace(mine, id="folder-third-copy")
    memory.files.rows.put_folder(third)
    memory.files.attach(memory.ensure_agent("guest").id, third.id)
    with pytest.raises(ValidationError) as refused:
        api.folder_files(memory, "docs", ["work", "private"])
    assert mine.id in str(refused.value) and other.id in str(refused.value) and third.id not in str(refused.value)
    assert "2 folders are named 'docs'" in str(refused.value)


def test_the_page_has_the_folders_section(site: Site) -> None:
    page = site.client.get("/ui/").text
    assert 'id="folders-section"' in page and 'id="fs-form"' in page
    script = site.client.get("/ui/static/app.js").text
    assert 'call("folders")' in script and "folders/search?" in script


def test_a_large_open_windows_length_is_its_whole_length_not_the_rows_cut(site: Site) -> None:
    """The agent's row keeps a large window cut (``file_windows``): the inspector counts the window whole and shows
    what core memory shows of it (cut at the per-file limit, with Letta's note)."""
    big = "".join(f"the quick brown fox jumps over the lazy dog, line {i}\n" for i in range(2_500))
    site.memory.files.upload_many("docs", [("big.txt", big.encode(), "")], embed=False)
    site.memory.open_files(site.work, [OpenRequest("docs/big.txt")])
    view = site.get("folders/file", agent="work", folder="docs", file="big.txt").json()["view"]
    whole = site.memory.files.attached_text(site.work, "docs/big.txt")
    assert view["window_chars"] > len(whole) > 120_000  # the whole window: every line with its number
    limit = site.memory.files.state(site.work).limits[1]
    assert len(view["visible"]) == limit and "[TRUNCATED]" in view["visible"]
    site.memory.files.set_limits(site.work, None, 1_000_000)
    view = site.get("folders/file", agent="work", folder="docs", file="big.txt").json()["view"]
    assert len(view["visible"]) == view["window_chars"] and "[TRUNCATED]" not in view["visible"]


def _stored(memory: Memory) -> list[tuple[str, str, str]]:
    """Every folder as stored (id, name, its updated time) and what the agents see of their files."""
    return [(f.id, f.name, f.updated_at.isoformat()) for f in memory.files.folders()]


def test_a_folder_is_renamed_with_the_clis_checks_and_texts(site: Site) -> None:
    """``folders/rename``: the agent attached sees the files under the new name; each refusal is the domain's text
    (what `tiermem folders rename` prints) with a 400, and changes nothing."""
    memory = site.memory
    docs, secrets = memory.files.folder("docs"), memory.files.folder("secrets")
    before = _stored(memory)
    refusals = {
        "secrets": "secrets",  # a name another folder has
        secrets.id: secrets.id,  # another folder's id
        "a/b": "a/b",  # a path, not a name
        "x" * 101: "x" * 101,  # over 100 characters
    }
    for new in refusals:
        with pytest.raises(ValidationError) as cli:  # what the CLI's rename calls, and prints
            memory.files.update_folder(docs.id, new_name=new)
        refused = site.post("folders/rename", {"folder": docs.id, "name": new})
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"] == str(cli.value)
        assert _stored(memory) == before
    for body, text in (
        ({"folder": docs.id, "name": ""}, "Type the folder's new name"),
        ({"folder": docs.id}, "Type the folder's new name"),
        ({"name": "manuals"}, "Name the folder to rename"),
    ):
        refused = site.post("folders/rename", body)
        assert refused.status_code == 400 and text in refused.json()["error"], refused.text
    assert site.post("folders/rename", {"folder": "nope", "name": "manuals"}).status_code == 404
    assert _stored(memory) == before
    assert site.memory.files.attached_text(site.work, "docs/intro.md")

    same = site.post("folders/rename", {"folder": "docs", "name": "docs"})
    assert same.status_code == 200 and same.json()["renamed"] is False and _stored(memory) == before

    done = site.post("folders/rename", {"folder": docs.id, "name": "manuals"})
    assert done.status_code == 200, done.text
    assert done.json() == {"id": docs.id, "name": "manuals", "old_name": "docs", "renamed": True}
    assert memory.files.folder(docs.id).name == "manuals"
    assert [f["name"] for f in site.get("folders").json()["folders"]] == ["manuals", "secrets"]
    assert "quick brown fox" in memory.files.attached_text(site.work, "manuals/intro.md")


def test_a_token_for_some_agents_may_not_rename_a_folder(site: Site) -> None:
    """Folder names are one namespace for the store: a token for some agents is refused (403), even for a folder of
    its own agent, so no refusal tells it which names other users' folders hold; nothing changes."""
    before = _stored(site.memory)
    for folder, new in (("docs", "manuals"), ("docs", "secrets"), ("secrets", "mine")):
        refused = site.post("folders/rename", {"folder": folder, "name": new}, token=WORK)
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"].startswith("Renaming a folder needs a token with agents")
    assert _stored(site.memory) == before
    plain = site.client.post("/ui/api/folders/rename", json={"folder": "docs", "name": "manuals"})
    assert plain.status_code == 401 and _stored(site.memory) == before  # no token: refused before the app
