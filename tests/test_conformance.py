"""The HTTP app of ``tiermem serve --transport http``: resumable SSE streams, and the official MCP conformance suite.

The suite (``@modelcontextprotocol/conformance``, run on Node 22) is installed by ``tests/install_conformance.py``
(``.ci/run`` runs it first; this test runs it if needed); without npm, or offline, the suite's test skips with the reason.
Scenarios that need the suite's own fixture tools, resources and prompts are listed, with why, in
``tests/conformance-baseline.yml``; every other scenario of the active suite must pass.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
import yaml

from .install_conformance import cli_path, install, node_path
from .test_transports import free_port

BASELINE = Path(__file__).with_name("conformance-baseline.yml")
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def http_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The HTTP app exactly as ``tiermem serve --transport http`` builds it (with the inspector at /ui), served by
    uvicorn on loopback, without bearer tokens: the conformance suite cannot send one (``tiermem serve`` itself
    always requires one: tests/test_rough_edges.py)."""
    import threading
    import time

    import uvicorn

    from tiermem.base.config import load_settings
    from tiermem.server.app import build_http_app
    from tiermem.ui.launch import http_mount

    from .conftest import serve_in_process

    tmp = tmp_path_factory.mktemp("conformance")
    port = free_port()
    settings = load_settings(
        data_dir=tmp / "data", embedding_model="hashing", transport="http", port=port, tools=["all"]
    )  # every tool, as the baseline was recorded
    server = serve_in_process(settings)
    app = build_http_app(server, settings, [], ui=http_mount(server.runtime.handle, settings))
    web = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False, timeout_graceful_shutdown=2)
    )
    thread = threading.Thread(target=web.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not web.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        web.should_exit = True
        thread.join(10)


def events(lines: Iterator[str], until_message: bool = True) -> list[dict[str, str]]:
    """SSE events as dicts (``id``, ``event``, ``data``, ``retry``), up to and including the first ``message``."""
    out: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in lines:
        if not line.strip():
            if current:
                out.append(current)
                if until_message and current.get("event") == "message":
                    break
                current = {}
            continue
        field, _, value = line.partition(":")
        current[field] = value[1:] if value.startswith(" ") else value
    return out


def post(client: httpx2.Client, url: str, body: dict[str, object], **headers: str) -> list[dict[str, str]]:
    with client.stream("POST", url, json=body, headers={**HEADERS, **headers}) as r:
        assert r.status_code in (200, 202), r.read()
        return events(r.iter_lines()) if r.status_code == 200 else []


def session(client: httpx2.Client, url: str, version: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    with client.stream("POST", url, json=init, headers=HEADERS) as r:
        sid = r.headers["mcp-session-id"]
        first = events(r.iter_lines())
    headers = {"mcp-session-id": sid, "mcp-protocol-version": version}
    post(client, url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, **headers)
    return headers, first


def test_sse_streams_are_primed_and_resumable(http_url: str) -> None:
    with httpx2.Client(timeout=30) as client:
        headers, first = session(client, http_url, "2025-11-25")
        assert first[0] == {"id": first[0]["id"], "data": "", "retry": "1000"}  # the priming event (SEP-1699)
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "core_memory_view", "arguments": {}},
        }
        stream = post(client, http_url, call, **headers)
        priming, answer = stream[0], stream[-1]
        assert priming["data"] == "" and priming["retry"] == "1000" and priming["id"]
        assert answer["event"] == "message" and answer["id"] and answer["id"] != priming["id"]
        assert "<memory_blocks>" in json.loads(answer["data"])["result"]["content"][0]["text"]

        # A client that lost the stream after the priming event reconnects with Last-Event-ID and gets the answer.
        with client.stream(
            "GET", http_url, headers={**headers, "Accept": "text/event-stream", "Last-Event-ID": priming["id"]}
        ) as r:
            assert r.status_code == 200
            replayed = [e for e in events(r.iter_lines()) if e.get("event") == "message"]
        assert replayed and replayed[0]["id"] == answer["id"] and replayed[0]["data"] == answer["data"]

        # Clients before 2025-11-25 cannot read an empty-data event: the SDK sends them none.
        old_headers, old_first = session(client, http_url, "2025-06-18")
        assert old_first[0]["event"] == "message" and "retry" not in old_first[0]


def replayed(client: httpx2.Client, url: str, headers: dict[str, str], last_event_id: str) -> list[dict[str, str]]:
    """The events a resumed stream replays: every event up to the priming event the server sends once the replay is
    done (then it waits for the stream's live events, so reading stops there)."""
    get = {**headers, "Accept": "text/event-stream", "Last-Event-ID": last_event_id}
    out: list[dict[str, str]] = []
    current: dict[str, str] = {}
    with client.stream("GET", url, headers=get) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.strip():
                field, _, value = line.partition(":")
                current[field] = value[1:] if value.startswith(" ") else value
                continue
            if current.get("data") == "" and "event" not in current:
                return out
            if current:
                out.append(current)
                current = {}
    raise AssertionError(f"the replay ended without a priming event: {out}")


def test_a_resumed_stream_replays_only_its_own_session_s_events(http_url: str) -> None:
    # Both clients number their requests from 1, so both send a request 7: B, resuming its own stream 7, must get
    # its own answer only, never A's (the SDK's stream id is the request id; the event store is per session).
    with httpx2.Client(timeout=30) as client:
        a, _ = session(client, http_url, "2025-11-25")
        b, _ = session(client, http_url, "2025-11-25")
        priming_b, pong_b = post(client, http_url, {"jsonrpc": "2.0", "id": 7, "method": "ping"}, **b)
        call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "core_memory_view"}}
        answer_a = post(client, http_url, call, **a)[-1]
        assert "<memory_blocks>" in answer_a["data"]
        got = replayed(client, http_url, b, priming_b["id"])
        assert [(e["id"], e["data"]) for e in got] == [(pong_b["id"], pong_b["data"])]


def test_official_conformance_suite(http_url: str, tmp_path: Path) -> None:
    root, why = install()
    if root is None:
        pytest.skip(f"conformance suite unavailable: {why}")
    node = node_path(root)
    assert node is not None
    baseline = yaml.safe_load(BASELINE.read_text())
    expected = set(baseline["server"])
    assert expected == set(baseline["reasons"]), "every baseline entry needs a reason"
    out = tmp_path / "results"
    done = subprocess.run(
        [node, str(cli_path(root)), "server", "--url", http_url, "--expected-failures", str(BASELINE), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    results: dict[str, list[dict[str, object]]] = {}
    for checks in out.glob("server-*/checks.json"):
        name = re.sub(r"-\d{4}-\d\d-\d\dT[\d-]+Z$", "", checks.parent.name.removeprefix("server-"))
        results[name] = json.loads(checks.read_text())
    assert len(results) >= 25, (done.stdout[-2000:], done.stderr[-2000:])
    failed = {
        name: [
            f"{c.get('id')}: {c.get('errorMessage') or c.get('description')}"
            for c in checks
            if c.get("status") in ("FAILURE", "WARNING")
        ]
        for name, checks in results.items()
    }
    failed = {name: why_ for name, why_ in failed.items() if why_}
    unexpected = {name: why_ for name, why_ in failed.items() if name not in expected}
    assert unexpected == {}, "scenarios that should pass failed"
    stale = sorted(name for name in expected if name in results and name not in failed)
    assert stale == [], f"stale entries in {BASELINE.name}: these pass now, remove them"
    assert set(expected) <= set(results), f"{BASELINE.name} names scenarios the suite no longer has"


@pytest.mark.anyio
async def test_event_store_is_bounded_and_replays_one_stream() -> None:
    from mcp.types import JSONRPCNotification

    from tiermem.server.events import EventLog

    log = EventLog(max_events=5)
    store, other = log.session(), log.session()
    sent: list[str] = []

    async def send(event) -> None:  # type: ignore[no-untyped-def]
        sent.append(f"{event.event_id}={event.message.method}")

    def note(n: int) -> JSONRPCNotification:
        return JSONRPCNotification(jsonrpc="2.0", method=f"n{n}")

    priming = await store.store_event("a", None)
    await store.store_event("a", note(1))
    await store.store_event("b", note(2))
    assert await other.store_event("a", note(9)) == "a:1"  # another session's stream a: ids counted per session
    await store.store_event("a", note(3))
    assert await store.replay_events_after(priming, send) == "a"
    assert sent == ["a:2=n1", "a:4=n3"]  # only this session's stream a after the id, never a priming event
    assert await other.replay_events_after("a:2", send) is None  # this session's id: unknown to the other one
    assert await other.replay_events_after("a:1", send) == "a" and len(sent) == 2  # its own a:1: nothing after it
    await store.store_event("a", note(4))  # the sixth event: the oldest (the priming event) is dropped
    assert log.size == 5
    assert await store.replay_events_after(priming, send) is None
    assert await store.replay_events_after("nope", send) is None
