"""Many users on one server, kept apart in the inspector's API and the MCP prompts: the real ``tiermem serve --transport
http`` under OAuth with a local issuer on loopback (``bench/oauth_issuer.py``), real HTTP requests.

- A signed-in user learns no folder name that is not attached to one of their agents: a folder that exists and is not
  theirs and one that does not exist get the same 404 with the same text, which names only their folders.
- Deleting a whole agent (``agents/delete``, ``forget`` of kind ``agent``) needs a static token with ``agents = ["*"]``:
  a member of a shared agent, or a user for their own agent, is refused.
- A deleted agent's server is dropped: its old sessions end, the next session gets a fresh agent with none of the
  deleted agent's rows and none written after the deletion (``Memory.check_live`` refuses writes for a gone agent).
- A forget on one's own agent reaches nothing of another user's: no folder file of a folder not attached to the
  agent is named (no yes/no oracle over other users' files), no other agent's stored tool result is deleted or
  counted, no other agent's auto-memory file is edited or named; a forget that matched nothing rewrites nothing.
- ``prompts/get memory_block`` with a label the agent lacks: invalid params (-32602) naming the caller's labels only,
  no traceback in the server's log.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tiermem.base.config import load_settings
from tiermem.domain.factory import open_memory

from .test_transports import HTTP_TOKEN, free_port, serving

ADMIN = {"authorization": f"Bearer {HTTP_TOKEN}"}  # the static token of TIERMEM_HTTP_TOKEN: agents = ["*"]
SHARED = {"team": ["alice", "carol"], "crew": ["alice", "carol"], "band": ["alice", "carol"]}
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


@dataclass
class Served:
    base: str  # http://127.0.0.1:<port>
    issuer: Any
    log: Path

    def auth(self, subject: str) -> dict[str, str]:
        return {"authorization": f"Bearer {self.issuer.mint(f'{self.base}/mcp', subject=subject)}"}

    def ui(self, method: str, path: str, who: dict[str, str], **kwargs: Any) -> httpx.Response:
        return httpx.request(method, f"{self.base}/ui/api/{path}", headers=who, timeout=60, **kwargs)

    @property
    def data(self) -> Path:
        return self.log.parent / "data"

    def own_agent(self, who: dict[str, str]) -> str:
        (own,) = [a["name"] for a in self.ui("GET", "agents", who).json()["agents"] if a["name"].startswith("user-")]
        return str(own)


class Session:
    """One streamable-HTTP MCP session of a signed-in user (raw JSON-RPC: what a client sends, answer as it comes)."""

    def __init__(self, served: Served, subject: str, agent: str | None = None) -> None:
        self.http = httpx.Client(base_url=served.base, timeout=60)
        self.path = "/mcp" + (f"?agent={agent}" if agent else "")
        self.auth = served.auth(subject)
        self.sid: str | None = None
        self.n = 1
        answer = self.http.post(self.path, json=INIT, headers=self.headers())
        assert answer.status_code == 200, answer.text
        self.sid = answer.headers["mcp-session-id"]
        self.http.post(
            self.path, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers()
        )

    def headers(self) -> dict[str, str]:
        sid = {"mcp-session-id": self.sid} if self.sid else {}
        return {**ACCEPT, **self.auth, "mcp-protocol-version": "2025-06-18", **sid}

    def rpc(self, method: str, params: dict[str, Any]) -> tuple[int, Any]:
        self.n += 1
        answer = self.http.post(
            self.path, json={"jsonrpc": "2.0", "id": self.n, "method": method, "params": params}, headers=self.headers()
        )
        if answer.headers.get("content-type", "").startswith("text/event-stream"):
            events = [json.loads(line[5:]) for line in answer.text.splitlines() if line.startswith("data:")]
            return answer.status_code, events[-1]
        return answer.status_code, answer.json() if answer.content else None

    def tool(self, name: str, arguments: dict[str, Any]) -> tuple[int, Any]:
        return self.rpc("tools/call", {"name": name, "arguments": arguments})


def tool_text(answer: tuple[int, Any]) -> str:
    status, body = answer
    assert status == 200 and "result" in body, (status, body)
    return str(body["result"]["content"][0]["text"])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``serve --transport http`` under OAuth; shared agents for alice and carol (not bob); folder ``team-docs``
    attached to ``team``, folder ``loose`` attached to no agent."""
    from bench.oauth_issuer import Issuer

    tmp_path = tmp_path_factory.mktemp("oauth-inspector")
    data = tmp_path / "data"
    memory = open_memory(load_settings(data_dir=data, embedding_model="hashing"))
    team = memory.ensure_agent("team").id
    for folder in ("team-docs", "loose"):
        memory.files.create_folder(folder)
        memory.files.upload_many(folder, [("plan.txt", b"The team plan: ship in June.\n", "")])
    memory.files.attach(team, "team-docs")
    del memory
    issuer = Issuer(free_port())
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    try:
        with serving(
            tmp_path,
            "http",
            port,
            TIERMEM_DATA_DIR=str(data),
            TIERMEM_OAUTH_ISSUER=issuer.url,
            TIERMEM_PUBLIC_URL=base,
            TIERMEM_OAUTH_SHARED_AGENTS=json.dumps(SHARED),
            TIERMEM_HTTP_TOKEN=HTTP_TOKEN,
        ):
            yield Served(base, issuer, tmp_path / "server.log")
    finally:
        issuer.close()


def test_a_user_learns_no_folder_name_that_is_not_theirs(served: Served) -> None:
    bob, alice = served.auth("bob"), served.auth("alice")
    Session(served, "bob")  # his own agent exists from his first session on
    (mine,) = [a["name"] for a in served.ui("GET", "agents", bob).json()["agents"]]
    assert served.ui("GET", "folders", bob).json()["folders"] == []

    def answers(path: str, who: dict[str, str], **params: str) -> list[tuple[int, str]]:
        """The answers for the other users' folder and for a folder that does not exist, each name made X."""
        out = []
        for folder in ("team-docs", "nosuchfolder"):
            answer = served.ui("GET", path, who, params={**params, "folder": folder})
            out.append((answer.status_code, answer.text.replace(folder, "X")))
        return out

    for path, params in (("folders/files", {}), ("folders/file", {"agent": mine, "file": "plan.txt"})):
        taken, missing = answers(path, bob, **params)
        assert taken == missing and taken[0] == 404, (path, taken, missing)  # no oracle: the same status and text
        assert "loose" not in taken[1] and "(folders: none)" in taken[1], taken  # and no list of others' folders

    # alice (a member of team) sees team-docs; the not-found text names her folders only, never "loose"
    assert served.ui("GET", "folders/files", alice, params={"folder": "team-docs"}).status_code == 200
    missing = served.ui("GET", "folders/files", alice, params={"folder": "nosuchfolder"})
    assert missing.status_code == 404 and "'team-docs'" in missing.text and "loose" not in missing.text
    # a token for every agent still gets the list of every folder
    every = served.ui("GET", "folders/files", ADMIN, params={"folder": "nosuchfolder"})
    assert every.status_code == 404 and "'loose'" in every.text and "'team-docs'" in every.text

    # the MCP side: bob's file tools and file resources name only his own (no) files
    session = Session(served, "bob")
    opened = json.dumps(session.tool("open_files", {"file_requests": [{"file_name": "team-docs/plan.txt"}]}))
    read = json.dumps(session.rpc("resources/read", {"uri": "memory://files/team-docs/plan.txt"}))
    for answer in (opened, read):
        assert "ship in June" not in answer and "loose" not in answer, answer


def test_renaming_a_folder_needs_the_write_scope_and_a_token_for_every_agent(served: Served) -> None:
    """A read-only user (scope ``memory:read``) gets 403 insufficient_scope before the app; a signed-in user, even a
    member of the folder's shared agent, is refused (folder names are the store's); the static token for every agent
    renames it. Each refusal leaves the folder as it was."""
    reader = {
        "authorization": f"Bearer {served.issuer.mint(f'{served.base}/mcp', subject='alice', scope='memory:read')}"
    }
    alice = served.auth("alice")

    def names() -> list[str]:
        return sorted(f["name"] for f in served.ui("GET", "folders", ADMIN).json()["folders"])

    before = names()
    assert "team-docs" in before
    refused = served.ui("POST", "folders/rename", reader, json={"folder": "team-docs", "name": "renamed"})
    assert refused.status_code == 403 and "insufficient_scope" in refused.text, refused.text
    assert 'error="insufficient_scope"' in refused.headers["www-authenticate"]
    refused = served.ui("POST", "folders/rename", alice, json={"folder": "team-docs", "name": "renamed"})
    assert refused.status_code == 403 and 'agents = ["*"]' in refused.json()["error"], refused.text
    assert names() == before
    done = served.ui("POST", "folders/rename", ADMIN, json={"folder": "team-docs", "name": "team-handbook"})
    assert done.status_code == 200 and done.json()["renamed"] is True, done.text
    assert "team-handbook" in names() and "team-docs" not in names()
    back = served.ui("POST", "folders/rename", ADMIN, json={"folder": "team-handbook", "name": "team-docs"})
    assert back.status_code == 200 and names() == before  # (the module's other tests use the name)


def test_deleting_an_agent_needs_a_token_for_every_agent(served: Served) -> None:
    carol, alice = served.auth("carol"), served.auth("alice")
    tool_text(Session(served, "alice", "crew").tool("core_memory_append", {"label": "human", "content": "CREW-1"}))
    Session(served, "carol")
    (own,) = [a["name"] for a in served.ui("GET", "agents", carol).json()["agents"] if a["name"].startswith("user-")]
    for who, agent in ((carol, "crew"), (alice, "crew"), (carol, own)):
        refused = served.ui("POST", "agents/delete", who, json={"agent": agent, "confirm": agent})
        assert refused.status_code == 403 and 'agents = ["*"]' in refused.json()["error"], refused.text
        forgot = served.ui("POST", "forget", who, json={"agent": agent, "kind": "agent", "confirm": agent})
        assert forgot.status_code == 403 and 'agents = ["*"]' in forgot.json()["error"], forgot.text
    assert {"crew", own} <= {a["name"] for a in served.ui("GET", "agents", ADMIN).json()["agents"]}
    assert "CREW-1" in json.dumps(served.ui("GET", "agent", alice, params={"agent": "crew"}).json())
    # what a member may still do to a shared agent: edit it (memory:write)
    blocks = served.ui("GET", "agent", carol, params={"agent": "crew"}).json()["blocks"]
    human = next(b for b in blocks if b["label"] == "human")
    edit = {"agent": "crew", "label": "human", "value": "CREW-2", "expected_version": human["version"]}
    assert served.ui("POST", "edit", carol, json=edit).status_code == 200

    deleted = served.ui("POST", "agents/delete", ADMIN, json={"agent": own, "confirm": own})
    assert deleted.status_code == 200, deleted.text


def test_a_deleted_agents_server_is_dropped_and_takes_no_writes(served: Served) -> None:
    old = Session(served, "alice", "band")
    tool_text(old.tool("archival_memory_insert", {"content": "BAND-BEFORE the deletion"}))
    tool_text(old.tool("core_memory_append", {"label": "human", "content": "BAND-BLOCK"}))
    deleted = served.ui("POST", "agents/delete", ADMIN, json={"agent": "band", "confirm": "band"})
    assert deleted.status_code == 200 and deleted.json()["passages"] == 1, deleted.text

    # the session opened before the deletion is over (its server was dropped): it writes nothing
    status, body = old.tool("archival_memory_insert", {"content": "BAND-AFTER the deletion"})
    assert status == 404 and "Session not found" in json.dumps(body), (status, body)

    # a new session gets a fresh agent: no block text, no passage from before or after the deletion
    new = Session(served, "alice", "band")
    core = tool_text(new.tool("core_memory_view", {}))
    assert "BAND-BLOCK" not in core and "No agent with id" not in core, core
    listed = json.loads(tool_text(new.tool("archival_memory_list", {})))
    assert listed["total"] == 0, listed
    stored = served.ui("GET", "passages", ADMIN, params={"agent": "band"}).json()
    assert stored["total"] == 0, stored
    tool_text(new.tool("archival_memory_insert", {"content": "BAND-FRESH"}))  # the fresh agent takes writes
    assert served.ui("GET", "passages", ADMIN, params={"agent": "band"}).json()["total"] == 1


def test_an_unknown_prompt_label_is_invalid_params_without_a_traceback(served: Served) -> None:
    alice = Session(served, "alice")
    tool_text(alice.tool("memory", {"command": "create", "path": "/memories/alicesecretlabel", "file_text": "x"}))
    bob = Session(served, "bob")
    for label in ("nosuchlabel", "alicesecretlabel"):
        status, body = bob.rpc("prompts/get", {"name": "memory_block", "arguments": {"label": label}})
        error = body["error"]
        assert status == 200 and error["code"] == -32602, body
        assert repr(label) in error["message"] and "'human'" in error["message"], error
        assert "alicesecretlabel" not in error["message"].replace(repr(label), ""), error  # only bob's labels
    log = served.log.read_text()
    assert "Error rendering prompt" not in log and "Traceback" not in log, log[-3000:]


def test_a_forget_on_ones_own_agent_reaches_nothing_of_another_users(served: Served) -> None:
    secret = "kestrel-quokka-5521"
    alice, bob = served.auth("alice"), served.auth("bob")
    insert = {"label": "human", "new_string": f"alice {secret}", "insert_line": 0, "idempotency_key": "k-scope-1"}
    first = tool_text(Session(served, "alice").tool("memory_insert", insert))
    Session(served, "bob")
    hers, his = served.own_agent(alice), served.own_agent(bob)
    notes = served.data / "auto-memory" / hers / "project" / "notes.md"  # her auto memory, in the data directory
    notes.parent.mkdir(parents=True)
    notes.write_text(f"alice private: {secret}\n")

    for text in (secret, "ship in June"):  # her block, record and auto memory; team-docs' and loose's plan.txt
        answer = served.ui("POST", "forget", bob, json={"agent": his, "kind": "text", "ref": text})
        assert answer.status_code == 200, answer.text
        done = answer.json()
        assert done["folder_files_holding_it"] == [] and done["requests"] == 0, done
        assert done["auto_memory_files_edited"] == [] and done["still_held_outside_the_store"] == [], done
        assert done["core_purge"] == {}, done  # nothing was forgotten: the core database is not rewritten
    assert notes.read_text() == f"alice private: {secret}\n"
    retried = Session(served, "alice")  # her record is there: a retry gets the first answer, writing nothing
    assert tool_text(retried.tool("memory_insert", insert)) == first
    assert tool_text(retried.tool("core_memory_view", {})).count(secret) == 1

    # within her own agents, a forget finds what is hers: the files of the folders attached (team-docs, not loose)
    team = served.ui("POST", "forget", alice, json={"agent": "team", "kind": "text", "ref": "ship in June"}).json()
    assert team["folder_files_holding_it"] == ["team-docs/plan.txt"], team
    own = served.ui("POST", "forget", alice, json={"agent": hers, "kind": "text", "ref": secret}).json()
    assert own["requests"] == 1 and own["auto_memory_files_edited"] == [str(notes)], own
    assert own["core_purge"], own
