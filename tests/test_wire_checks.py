"""Messages the SDK's parser misreads (an id it drops, a batch, params that are not an object...), answered as JSON-RPC
says, with the request's own id where it can be read, the same over stdio and streamable HTTP: the real
``tiermem serve`` process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2

from .test_transports import AUTH, HTTP_TOKEN, free_port, serving, stdio_server

HELLO = {"capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
NOT_AN_ID = (
    "Invalid Request: id is not a string or an integer (null, true or false, a fraction, an object or an array is "
    "not). Send the request with one."
)
# (message, the id it is answered with, its code, its message's start)
CASES: list[tuple[Any, Any, int, str]] = [
    ({"jsonrpc": "2.0", "id": None, "method": "ping"}, None, -32600, NOT_AN_ID),
    ({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, None, -32600, NOT_AN_ID),
    ({"jsonrpc": "2.0", "id": True, "method": "ping"}, None, -32600, NOT_AN_ID),
    ({"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}, None, -32600, NOT_AN_ID),
    (
        {"jsonrpc": "2.0", "id": 21, "method": "tools/list", "params": ["my-secret-value"]},
        21,
        -32602,
        "Invalid params: params of tools/list is not an object. MCP's parameters are named",
    ),
    ({"jsonrpc": "1.0", "id": 22, "method": "ping"}, 22, -32600, 'Invalid Request: jsonrpc is not "2.0".'),
    ({"jsonrpc": "2.0", "id": "m", "method": 5}, "m", -32600, "Invalid Request: method is not a string."),
    (
        [{"jsonrpc": "2.0", "id": 23, "method": "ping"}],
        None,
        -32600,
        "Invalid Request: a JSON-RPC batch (an array of messages); tiermem does not take batches. Send one JSON-RPC "
        "message per ",
    ),
]

LONG = "x" * 6000  # a long body is screened whole, as a short one


def long_case(message: Any) -> Any:
    """``message`` with long ``params`` (last, as clients send them), or, in a batch, its message so."""
    if isinstance(message, list):
        return [long_case(m) for m in message]
    params = message.get("params", {})
    return {**message, "params": [*params, LONG] if isinstance(params, list) else {**params, "_meta": {"n": LONG}}}


LONG_CASES = [(long_case(message), *rest) for message, *rest in CASES]
# A member repeated after long params: the SDK reads its last value (a request with "id": null after its own id is a
# notification to it, never answered), and so does the screen, which reads the whole body.
HEAD = '{"jsonrpc":"2.0","id":7,"method":"ping","params":' + json.dumps({"_meta": {"n": LONG}})
DOUBLED = [
    (HEAD + ',"id":null}', None, -32600, NOT_AN_ID),
    (HEAD + ',"id":true}', None, -32600, NOT_AN_ID),
    (HEAD + ',"jsonrpc":"1.0"}', 7, -32600, "Invalid Request: "),
    (HEAD + ',"params":[1]}', 7, -32602, "Invalid params: "),
]


def test_stdio_answers_misread_lines_with_their_ids(tmp_path: Path) -> None:
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-03-26", **HELLO}}
    server = stdio_server(tmp_path)
    assert server.stdin is not None and server.stdout is not None

    def send(message: Any) -> None:
        assert server.stdin is not None
        server.stdin.write(json.dumps(message) + "\n")
        server.stdin.flush()

    try:
        send(init)
        assert json.loads(server.stdout.readline())["id"] == 1
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        for n, (message, ident, code, start) in enumerate(CASES):  # one at a time, each answer read before the next
            send(message)
            send({"jsonrpc": "2.0", "id": 100 + n, "method": "ping"})  # answered after the line before it
            answer = json.loads(server.stdout.readline())
            assert answer["id"] == ident and answer["error"]["code"] == code, answer
            assert answer["error"]["message"].startswith(start), answer
            assert "my-secret-value" not in json.dumps(answer)
            assert json.loads(server.stdout.readline()) == {"jsonrpc": "2.0", "id": 100 + n, "result": {}}
        _, stderr = server.communicate(timeout=60)  # closes stdin: the server ends
    finally:
        server.kill()
        server.wait()
    assert stderr.count("stdin: Invalid") == len(CASES) and "my-secret-value" not in stderr, stderr


def test_streamable_http_answers_misread_bodies_like_stdio(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    accept = {**AUTH, "accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-03-26"}
    with serving(tmp_path, "http", port, "--data-dir", str(tmp_path / "data"), TIERMEM_HTTP_TOKEN=HTTP_TOKEN):
        with httpx2.Client(headers=accept, timeout=60) as web:
            init = {"jsonrpc": "2.0", "id": 1, "method": "initialize"}
            opened = web.post(url, json={**init, "params": {"protocolVersion": "2025-03-26", **HELLO}})
            assert opened.status_code == 200, opened.text
            session = {"mcp-session-id": opened.headers["mcp-session-id"]}
            web.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
            for message, ident, code, start in [*CASES, *LONG_CASES]:
                r = web.post(url, json=message, headers=session)
                assert r.status_code == 400, (message, r.status_code, r.text)
                answer = r.json()
                assert answer["id"] == ident and answer["error"]["code"] == code, answer
                assert answer["error"]["message"].startswith(start), answer
                assert "my-secret-value" not in r.text and "pydantic" not in r.text
            for body, ident, code, start in DOUBLED:
                r = web.post(url, content=body, headers={**session, "content-type": "application/json"})
                assert r.status_code == 400, (body[-40:], r.status_code, r.text)
                answer = r.json()
                assert answer["id"] == ident and answer["error"]["code"] == code, answer
                assert answer["error"]["message"].startswith(start) and "pydantic" not in r.text, answer
            r = web.post(url, json={"jsonrpc": "2.0", "id": 9, "method": "ping"}, headers=session)
            assert r.status_code == 200 and '"id":9' in r.text, r.text
            r = web.post(url, json=long_case({"jsonrpc": "2.0", "id": 10, "method": "ping"}), headers=session)
            assert r.status_code == 200 and '"id":10' in r.text, r.text


def test_sse_answers_misread_and_unparsable_bodies_like_streamable_http(tmp_path: Path) -> None:
    """The deprecated SSE transport's ``/messages`` answers as streamable HTTP does: a JSON-RPC error with HTTP 400,
    not the SDK's plain "Could not parse message" (nor a dropped id, never answered); a body that is not JSON gets
    -32700. A sound message still goes to its session (202)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with serving(tmp_path, "sse", port, "--data-dir", str(tmp_path / "data"), TIERMEM_HTTP_TOKEN=HTTP_TOKEN):
        with httpx2.Client(headers=AUTH, timeout=60) as web, web.stream("GET", f"{base}/sse") as stream:
            lines = stream.iter_lines()
            endpoint = next(line for line in lines if line.startswith("data: "))[len("data: ") :]
            url = base + endpoint
            for message, ident, code, start in CASES:
                r = web.post(url, json=message)
                assert r.status_code == 400, (message, r.status_code, r.text)
                answer = r.json()
                assert answer["id"] == ident and answer["error"]["code"] == code, answer
                assert answer["error"]["message"].startswith(start), answer
                assert "my-secret-value" not in r.text and "pydantic" not in r.text
            r = web.post(url, content=b"{not json", headers={"content-type": "application/json"})
            assert r.status_code == 400 and r.json()["error"]["code"] == -32700, r.text
            init = {"jsonrpc": "2.0", "id": 1, "method": "initialize"}
            r = web.post(url, json={**init, "params": {"protocolVersion": "2025-03-26", **HELLO}})
            assert r.status_code == 202, r.text


def test_a_refused_request_opens_no_session(tmp_path: Path) -> None:
    """Streamable HTTP: a request without a session id that the SDK refuses (an Accept header without both types, a
    first request that is not initialize, a GET or DELETE) is answered without a session id (the SDK discards the
    session it opened for it, but its answer named it); an initialize that is answered opens one."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    both = "application/json, text/event-stream"
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-03-26", **HELLO}}
    with serving(tmp_path, "http", port, "--data-dir", str(tmp_path / "data"), TIERMEM_HTTP_TOKEN=HTTP_TOKEN):
        with httpx2.Client(headers=AUTH, timeout=60) as web:
            refused = [
                web.post(url, json=init, headers={"accept": "text/plain"}),
                web.post(url, json=init, headers={"accept": "application/json"}),
                web.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "ping"}, headers={"accept": both}),
                web.get(url, headers={"accept": "text/event-stream"}),
                web.delete(url),
            ]
            assert [r.status_code for r in refused] == [406, 406, 400, 400, 400], [r.text for r in refused]
            assert [r.headers.get("mcp-session-id") for r in refused] == [None] * 5
            opened = web.post(url, json=init, headers={"accept": both})
            assert opened.status_code == 200 and opened.headers.get("mcp-session-id"), opened.text
            session = {"mcp-session-id": opened.headers["mcp-session-id"]}
            again = web.post(url, json=init, headers={"accept": "text/plain", **session})  # in a session: its own id
            assert again.status_code == 406 and again.headers.get("mcp-session-id") == session["mcp-session-id"]
