"""The memory inspector's HTTP API (no browser): auth, edits as a person, refusals, live changes, import/export.

The app is the one ``tiermem ui`` serves (``build_ui_server``) and the ``/ui`` mount of the HTTP transport,
driven with Starlette's in-process client over a real store; "another process" is a second ``Memory`` on
the same data directory.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tiermem.base.config import BlockSpec, Settings, load_settings
from tiermem.domain.blocks import Rethink
from tiermem.domain.factory import open_memory
from tiermem.domain.memory import Memory
from tiermem.ui.launch import build_ui_server

from .conftest import ROOT

PORT = 8931
BASE = f"http://127.0.0.1:{PORT}"
AF = ROOT / "tests" / "fixtures" / "agent-file" / "customer_service.af"


@pytest.fixture
def ui_settings(tmp_path: Path) -> Settings:
    return load_settings(data_dir=tmp_path / "data", embedding_model="hashing", watch_seconds=0.1)


@pytest.fixture
def client(ui_settings: Settings):  # type: ignore[no-untyped-def]
    app, url = build_ui_server(ui_settings, port=PORT)
    token = url.split("#token=", 1)[1]
    with TestClient(app, base_url=BASE, headers={"authorization": f"Bearer {token}"}) as c:
        yield c


def test_page_is_public_data_needs_the_session_token(ui_settings: Settings) -> None:
    app, url = build_ui_server(ui_settings, port=PORT)
    assert url.startswith(f"{BASE}/ui/#token=")
    with TestClient(app, base_url=BASE) as anonymous:
        page = anonymous.get("/ui/")
        assert page.status_code == 200 and "memory inspector" in page.text
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assert anonymous.get("/ui/static/app.js").status_code == 200
        assert anonymous.get("/ui", follow_redirects=False).headers["location"] == "/ui/"
        assert anonymous.get("/ui/api/agents").status_code == 401
        assert anonymous.get("/ui/api/agents", headers={"authorization": "Bearer " + "x" * 43}).status_code == 401
        assert anonymous.get("/ui/", headers={"host": "evil.example"}).status_code == 403  # DNS rebinding
        root = anonymous.get("/", follow_redirects=False)  # `tiermem ui`'s root sends the browser to the page
        assert root.status_code == 307 and root.headers["location"] == "/ui/"
        assert anonymous.get("/favicon.ico").status_code == 204  # no icon, and no 401 in the browser's console
        assert anonymous.get("/other").status_code == 401  # nothing else is opened up
        assert anonymous.post("/", content=b"{}").status_code == 401
        assert anonymous.get("/", headers={"host": "evil.example"}).status_code == 403


def test_ui_refuses_a_public_address(tmp_path: Path) -> None:
    from tiermem.base.errors import ConfigError

    with pytest.raises(ConfigError, match="loopback only"):
        build_ui_server(load_settings(data_dir=tmp_path / "d", embedding_model="hashing", host="0.0.0.0"), port=PORT)


def test_edit_as_a_person_with_every_refusal(client: TestClient, ui_settings: Settings) -> None:
    view = client.get("/ui/api/agent", params={"agent": "default"}).json()
    human = next(b for b in view["blocks"] if b["label"] == "human")
    edit = {"agent": "default", "label": "human", "value": "Name: Ada\nLikes tea", "expected_version": human["version"]}
    saved = client.post("/ui/api/edit", json=edit)
    assert saved.status_code == 200 and saved.json()["block"]["version"] == human["version"] + 1

    stale = client.post("/ui/api/edit", json={**edit, "value": "overwrites?"})  # the editor's version is old now
    assert stale.status_code == 409 and "changed while you were editing" in stale.json()["error"]
    too_long = client.post(
        "/ui/api/edit", json={**edit, "value": "x" * (human["limit"] + 1), "expected_version": human["version"] + 1}
    )
    assert too_long.status_code == 409 and "Exceeds" in too_long.json()["error"]

    memory = open_memory(ui_settings, start_embedder=False)  # the store, as another process sees it
    agent = memory.get_agent("default")
    memory.create_block(agent.id, BlockSpec(label="rules", value="be kind", limit=100, read_only=True))
    ro = {"agent": "default", "label": "rules", "value": "be kind, always", "expected_version": 1}
    refused = client.post("/ui/api/edit", json=ro)
    assert refused.status_code == 409 and "read-only" in refused.json()["error"]
    assert client.post("/ui/api/edit", json={**ro, "override_read_only": True}).status_code == 200

    versions = memory.history(agent.id, "human")
    assert [v.value for v in versions[:2]] == ["Name: Ada\nLikes tea", versions[1].value]  # one new version only
    assert versions[0].actor == "human" and versions[0].operation == "ui_edit"
    assert memory.block(agent.id, "rules").value == "be kind, always"
    assert memory.history(agent.id, "rules")[0].actor == "human"


def test_history_diff_revert(client: TestClient, ui_settings: Settings) -> None:
    def edit(value: str, version: int) -> None:
        r = client.post(
            "/ui/api/edit", json={"agent": "default", "label": "human", "value": value, "expected_version": version}
        )
        assert r.status_code == 200, r.text

    first = client.get("/ui/api/history", params={"agent": "default", "label": "human"}).json()["versions"]
    edit("one\ntwo\nthree", first[0]["version"])
    edit("one\n2\nthree", first[0]["version"] + 1)
    hist = client.get("/ui/api/history", params={"agent": "default", "label": "human"}).json()["versions"]
    newest = hist[0]["version"]
    lines = client.get(
        "/ui/api/diff", params={"agent": "default", "label": "human", "old": newest - 1, "new": newest}
    ).json()["lines"]
    assert {"kind": "-", "text": "two"} in lines and {"kind": "+", "text": "2"} in lines
    missing = client.get("/ui/api/diff", params={"agent": "default", "label": "human", "old": 99, "new": newest})
    assert missing.status_code == 404 and "no version 99" in missing.json()["error"]
    past = client.get("/ui/api/diff", params={"agent": "default", "label": "human", "old": 2**63, "new": newest})
    assert past.status_code == 404 and f"no version {2**63}" in past.json()["error"]  # not an OverflowError
    huge = 99999999999999999999999  # past SQLite's integers: a version the block does not have, not a 500
    for answer in (
        client.get("/ui/api/diff", params={"agent": "default", "label": "human", "old": huge, "new": newest}),
        client.post("/ui/api/revert", json={"agent": "default", "label": "human", "version": huge}),
    ):
        assert answer.status_code == 404, answer.text
        assert answer.json()["error"] == f"Block 'human' has no version {huge}; its versions are 1 to {newest}."

    reverted = client.post("/ui/api/revert", json={"agent": "default", "label": "human", "version": newest - 1})
    assert reverted.status_code == 200 and reverted.json()["block"]["value"] == "one\ntwo\nthree"
    top = client.get("/ui/api/history", params={"agent": "default", "label": "human"}).json()["versions"][0]
    assert (top["actor"], top["operation"]) == ("human", f"revert:{newest - 1}")


def test_an_unexpected_error_is_a_json_500_without_its_details(ui_settings: Settings) -> None:
    """An error the inspector does not expect (here: the memory cannot be opened) answers a JSON 500 the page can
    show, with nothing of the code or the error's text in it (that goes to the server's log)."""
    from tiermem.ui.app import Inspector, build_ui_app

    def broken() -> Memory:
        raise RuntimeError("secret internals at /srv/data")

    app = build_ui_app(Inspector(broken, default_agent="default"))
    with TestClient(app, base_url=BASE, raise_server_exceptions=False) as c:
        answer = c.get("/api/agent", params={"agent": "default"})
    assert answer.status_code == 500 and answer.headers["content-type"] == "application/json"
    assert answer.json() == {"error": "The inspector met an unexpected error; the server's log has the details."}
    assert answer.headers["cache-control"] == "no-store"


def test_deeply_nested_json_is_a_400_on_every_write(client: TestClient) -> None:
    """A body nesting JSON too deeply to read is refused with 400 on every write of the inspector, and an import of
    JSON lines nesting too deeply says why (400), as an agent file does."""
    deep = "[" * 100_000 + "]" * 100_000
    inside = '{"agent": "default", "label": "human", "value": "x", "extra": ' + deep + "}"
    for path in ("edit", "forget", "revert", "passages/delete", "agents/delete"):
        for body in (deep, inside):
            answer = client.post(f"/ui/api/{path}", content=body, headers={"content-type": "application/json"})
            assert answer.status_code == 400, (path, answer.text)
            assert "too deeply" in answer.json()["error"], path
    for fmt in ("jsonl", "memory-graph", "auto"):
        answer = client.post("/ui/api/import", params={"filename": "x.jsonl", "format": fmt}, content=deep + "\n")
        assert answer.status_code == 400 and "too deeply" in answer.json()["error"], (fmt, answer.text)


def test_changes_wait_for_another_process(client: TestClient, ui_settings: Settings) -> None:
    since = client.get("/ui/api/agent", params={"agent": "default"}).json()["signature"]
    idle = client.get("/ui/api/changes", params={"agent": "default", "since": since, "wait": 0})
    assert idle.json() == {"signature": since, "changed": False}

    other = open_memory(ui_settings, start_embedder=False)
    agent = other.get_agent("default")
    timer = threading.Timer(
        0.3, lambda: other.edit(agent.id, "persona", Rethink("I am terse.", check_line_numbers=False))
    )
    timer.start()
    try:
        answer = client.get("/ui/api/changes", params={"agent": "default", "since": since, "wait": 20}).json()
    finally:
        timer.join()
    assert answer["changed"] and answer["signature"] != since
    view = client.get("/ui/api/agent", params={"agent": "default"}).json()
    assert next(b for b in view["blocks"] if b["label"] == "persona")["value"] == "I am terse."
    assert view["signature"] == answer["signature"]


def test_search_passages_delete(client: TestClient, ui_settings: Settings) -> None:
    memory = open_memory(ui_settings)
    agent = memory.get_agent("default")
    assert memory.archive is not None
    tea = memory.archive.insert(agent.id, "Ada drinks green tea every morning", ["drinks"])[0]
    memory.archive.insert(agent.id, "The launch is planned for June", ["work"])
    memory.archive.log_messages(agent.id, [{"role": "user", "content": "I moved to Lyon last year"}])

    found = client.get("/ui/api/search", params={"agent": "default", "q": "green tea", "memory": "archival"}).json()
    top = found["hits"][0]
    assert (
        top["id"] == tea and top["keyword_rank"] == 1 and top["vector_rank"] is not None and top["tags"] == ["drinks"]
    )
    only_work = client.get("/ui/api/search", params={"agent": "default", "q": "tea", "tags": "work"}).json()
    assert tea not in [h["id"] for h in only_work["hits"]]
    recall = client.get(
        "/ui/api/search", params={"agent": "default", "q": "Lyon", "memory": "recall", "roles": "user"}
    ).json()
    assert recall["hits"][0]["role"] == "user" and "Lyon" in recall["hits"][0]["content"]
    bad = client.get("/ui/api/search", params={"agent": "default", "q": "x", "memory": "recall", "roles": "boss"})
    assert bad.status_code == 400 and "Unknown role" in bad.json()["error"]
    bad_date = client.get("/ui/api/search", params={"agent": "default", "q": "x", "start": "yesterday"})
    assert bad_date.status_code == 400 and "ISO 8601" in bad_date.json()["error"]

    page = client.get("/ui/api/passages", params={"agent": "default", "limit": 1}).json()
    assert page["total"] == 2 and len(page["passages"]) == 1
    assert client.post("/ui/api/passages/delete", json={"agent": "default", "id": tea}).json() == {"deleted": 1}
    again = client.post("/ui/api/passages/delete", json={"agent": "default", "id": tea})
    assert again.status_code == 404
    assert client.get("/ui/api/passages", params={"agent": "default"}).json()["total"] == 1


def test_memory_stays_out_of_the_browsers_stores(client: TestClient, ui_settings: Settings) -> None:
    """Every answer of the inspector, the API's JSON (memory text) above all, says no-store, so no browser keeps it
    in its disk cache after `tiermem forget`; and nosniff and the page's CSP. What is typed into the page's text
    fields is not kept by the browser's autofill either."""
    memory = open_memory(ui_settings)
    agent = memory.get_agent("default")
    assert memory.archive is not None
    memory.archive.insert(agent.id, "Ada's clinic is on Zebra Street", ["health"])
    answers = [
        client.get("/ui/api/passages", params={"agent": "default"}),
        client.get("/ui/api/search", params={"agent": "default", "q": "clinic", "memory": "archival"}),
        client.get("/ui/api/agent", params={"agent": "default"}),
        client.get("/ui/api/agents"),
        client.get("/ui/api/search", params={"agent": "default", "q": "x", "start": "yesterday"}),  # an error
        client.get("/ui/"),
        client.get("/ui/static/app.js"),
    ]
    assert "Zebra Street" in answers[0].text and "Zebra Street" in answers[1].text
    for answer in answers:
        assert answer.headers["cache-control"] == "no-store", answer.url
        assert answer.headers["x-content-type-options"] == "nosniff", answer.url
        assert "default-src 'self'" in answer.headers["content-security-policy"], answer.url
        assert len(answer.headers.get_list("cache-control")) == 1
    page = client.get("/ui/").text
    for field in ("block-filter", "ed-value", "s-query", "s-tags", "tl-query", "ln-id", "fs-query", "fs-include"):
        assert f'id="{field}" autocomplete="off"' in page, field


def test_export_and_import(client: TestClient) -> None:
    exported = client.get("/ui/api/export", params={"agent": "default", "format": "af"})
    assert exported.status_code == 200 and 'filename="default.af"' in exported.headers["content-disposition"]
    assert [b["label"] for b in exported.json()["blocks"]] == ["persona", "human"]
    backup = client.get("/ui/api/export", params={"format": "jsonl"})
    assert backup.status_code == 200 and all(json.loads(line) for line in backup.text.splitlines())

    report = client.post(
        "/ui/api/import", params={"filename": "customer_service.af", "rename": "cs-copy"}, content=AF.read_bytes()
    )
    assert report.status_code == 200, report.text
    assert report.json()["report"]["imported"] and report.json()["report"]["blocks"] > 0
    names = [a["name"] for a in client.get("/ui/api/agents").json()["agents"]]
    assert "cs-copy" in names
    again = client.post("/ui/api/import", params={"filename": "x.af", "rename": "cs-copy"}, content=AF.read_bytes())
    assert again.status_code == 200 and again.json()["report"]["skipped"] == [
        "cs-copy (already imported from this file)"
    ]
    empty = client.post("/ui/api/import", params={"filename": "x.af"}, content=b"")
    assert empty.status_code == 400 and "empty" in empty.json()["error"]
    for name, fmt, body in (  # an error names the uploaded file, never the server's temporary copy of it
        ("my-agent.af", "af", b"not json at all"),
        ("C:\\Users\\ada\\their-agent.af", "auto", b"{not json"),
        ("memory.jsonl", "memory-graph", b'{"type":"entity","name":"x"'),
        ("backup.jsonl", "jsonl", b"garbage\n"),
    ):
        refused = client.post("/ui/api/import", params={"filename": name, "format": fmt}, content=body)
        error = refused.json()["error"]
        assert refused.status_code == 400 and "tiermem-ui-import" not in error, error
        assert name.rsplit("\\", 1)[-1] in error and "Users" not in error, error


def test_http_transport_mount_scopes_tokens(tmp_path: Path) -> None:
    """On ``tiermem serve --transport http``, /ui is behind the same tokens, and a token sees only its agents."""
    from tiermem.process.netguard import make_tokens
    from tiermem.server.app import build_http_app, build_server
    from tiermem.server.runtime import MemoryHandle
    from tiermem.ui.launch import http_mount

    work, admin = "1b7d9f3a5c2e4a6b8d0f1e3c5a7b9d2f", "e8c6a4b2d0f9e7c5a3b1d8f6e4c2a0b9"
    settings = load_settings(
        data_dir=tmp_path / "data", embedding_model="hashing", transport="http", port=PORT, agent="work"
    )
    memory = open_memory(settings)
    memory.ensure_agent("work")
    memory.ensure_agent("private")
    handle = MemoryHandle(lambda: (memory, memory.ensure_agent("work").id))
    tokens = make_tokens([{"token": work, "agents": ["work"]}, {"token": admin, "agents": ["*"]}], "test")
    app = build_http_app(build_server(handle, settings), settings, tokens, ui=http_mount(handle, settings))
    with TestClient(app, base_url=BASE) as c:
        assert c.get("/ui/").status_code == 200
        assert c.get("/ui/api/agents").status_code == 401
        mine = c.get("/ui/api/agents", headers={"authorization": f"Bearer {work}"}).json()
        assert [a["name"] for a in mine["agents"]] == ["work"] and mine["default"] == "work"
        other = c.get("/ui/api/agent", params={"agent": "private"}, headers={"authorization": f"Bearer {work}"})
        assert other.status_code == 403 and "may not use agent 'private'" in other.json()["error"]
        dump = c.get("/ui/api/export", params={"format": "jsonl"}, headers={"authorization": f"Bearer {work}"})
        assert dump.status_code == 403 and "every agent" in dump.json()["error"]
        every = c.get("/ui/api/agents", headers={"authorization": f"Bearer {admin}"}).json()["agents"]
        assert sorted(a["name"] for a in every) == ["private", "work"]
        assert c.post("/mcp", headers={"authorization": f"Bearer {work}"}).status_code != 401  # /mcp still served


def test_tiermem_ui_command(tmp_path: Path) -> None:
    """`tiermem ui --no-browser` as a user runs it: prints the URL with its secret, serves the page and the API. A
    data directory holding no memory (a mistyped --data-dir) is refused and not made; a missing agent too."""
    import subprocess

    import httpx

    from .conftest import PYTHON
    from .test_transports import free_port, server_env, wait_for_port

    port = free_port()

    def refused(agent: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                PYTHON,
                "-m",
                "tiermem",
                "ui",
                "--no-browser",
                "--port",
                str(port),
                "--agent",
                agent,
                "--data-dir",
                str(tmp_path / "data"),
            ],
            cwd=ROOT,
            env=server_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
        )

    no_store = refused("work")
    assert no_store.returncode == 1 and f"The data directory {tmp_path / 'data'} does not exist" in no_store.stderr
    assert not (tmp_path / "data").exists()  # nothing created
    open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="hashing")).create_agent("work")
    no_agent = refused("other")
    assert no_agent.returncode == 1 and "No agent named 'other'" in no_agent.stderr  # agents are made on purpose
    proc = subprocess.Popen(
        [
            PYTHON,
            "-m",
            "tiermem",
            "ui",
            "--no-browser",
            "--port",
            str(port),
            "--agent",
            "work",
            "--data-dir",
            str(tmp_path / "data"),
        ],
        cwd=ROOT,
        env=server_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.startswith(f"tiermem memory inspector: http://127.0.0.1:{port}/ui/#token="), line
        token = line.strip().split("#token=", 1)[1]
        wait_for_port(port, proc)  # type: ignore[arg-type]
        base = f"http://127.0.0.1:{port}/ui"
        assert httpx.get(f"{base}/api/agents", timeout=30).status_code == 401
        agents = httpx.get(f"{base}/api/agents", headers={"authorization": f"Bearer {token}"}, timeout=30).json()
        assert agents["default"] == "work" and [a["name"] for a in agents["agents"]] == ["work"]
        assert "memory inspector" in httpx.get(f"{base}/", timeout=30).text
        busy = refused("work")  # its port is taken now: the way out is one `tiermem ui` takes (it reads no `port`)
        assert busy.returncode == 1 and f"Port {port} on 127.0.0.1 is already in use" in busy.stderr
        assert "leave --port out" in busy.stderr and "config file" not in busy.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_ui_gives_the_browser_a_private_page_not_the_secret(tmp_path: Path) -> None:
    """`tiermem ui` opens the browser on a page file (0600, in a 0700 directory of its own) that leads to the
    inspector: the URL with the session's secret is never on the browser's command line, which every local user
    reads with ps. The page is removed when the inspector stops."""
    import stat
    import subprocess
    import time

    import httpx

    from .conftest import PYTHON
    from .test_transports import free_port, server_env

    open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="hashing")).create_agent("work")
    seen = tmp_path / "browser"
    browser = tmp_path / "browser.sh"  # stands in for the browser (webbrowser runs $BROWSER with what it opens)
    browser.write_text(
        f'#!/bin/sh\nprintf "%s" "$*" > {seen}.args\npage="${{1#file://}}"\n'
        f'stat -c "%a" "$page" > {seen}.mode\nstat -c "%a" "$(dirname "$page")" >> {seen}.mode\n'
        f'cp "$page" {seen}.html\ntouch {seen}.done\n'
    )
    browser.chmod(0o700)
    port = free_port()
    proc = subprocess.Popen(
        [PYTHON, "-m", "tiermem", "ui", "--port", str(port), "--agent", "work", "--data-dir", str(tmp_path / "data")],
        cwd=ROOT,
        env=server_env(tmp_path, BROWSER=str(browser)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        token = line.strip().split("#token=", 1)[1]  # printed to the user's own terminal
        deadline = time.monotonic() + 60
        while not Path(f"{seen}.done").exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        args = Path(f"{seen}.args").read_text()
        assert token not in args and args.startswith("file://") and args.endswith("/open.html")
        assert Path(f"{seen}.mode").read_text().split() == ["600", "700"]
        page = Path(f"{seen}.html").read_text()
        assert f"http://127.0.0.1:{port}/ui/#token={token}" in page and 'http-equiv="refresh"' in page
        api = httpx.get(f"http://127.0.0.1:{port}/ui/api/agents", headers={"authorization": f"Bearer {token}"})
        assert api.status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert not Path(args.removeprefix("file://")).parent.exists()
    assert stat.S_IMODE(browser.stat().st_mode) == 0o700


def test_passage_pages_are_in_order(client: TestClient, ui_settings: Settings) -> None:
    """Pages (read by sort key first, then only the page's rows) cover every passage once, oldest first."""
    memory = open_memory(ui_settings, start_embedder=False)
    agent = memory.get_agent("default")
    assert memory.archive is not None
    ids = [memory.archive.insert(agent.id, f"fact number {i}", ["n"])[0] for i in range(7)]
    pages = [
        client.get("/ui/api/passages", params={"agent": "default", "offset": o, "limit": 3}).json()
        for o in (0, 3, 6, 9)
    ]
    assert [[p["id"] for p in page["passages"]] for page in pages] == [ids[0:3], ids[3:6], ids[6:7], []]
    assert {page["total"] for page in pages} == {7}
    everything, total = memory.archive.list_passages(agent.id, limit=200)
    assert [p.id for p in everything] == ids and total == 7


def test_detached_blocks_are_marked(client: TestClient, ui_settings: Settings) -> None:
    from tiermem.cli.main import open_memory

    memory = open_memory(ui_settings)
    agent = memory.ensure_agent("default")
    memory.update_block(agent.id, "persona", pinned=False)
    view = client.get("/ui/api/agent", params={"agent": "default"}).json()
    pinned = {b["label"]: b["pinned"] for b in view["blocks"]}
    assert pinned == {"persona": False, "human": True}
