"""Network transports over real HTTP on loopback: bearer tokens, agent scoping, DNS rebinding, body limits."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from .conftest import PYTHON, ROOT, text_of
from .test_transports import free_port, server_env, serving

pytestmark = pytest.mark.anyio
WORK = "5f0c1e9a7b3d42c8a61e0f7d9b2c4a86"
OTHER = "c3a9e1f07d5b4b2e8f6a0c1d9e7b3a52"
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
BROWSER_HOST = "https://host.example"  # a browser-based MCP host's origin, in allowed_origins


@pytest.fixture
def secured(tmp_path: Path):  # type: ignore[no-untyped-def]
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(
        f'[[tokens]]\nname = "laptop"\ntoken = "{WORK}"\nagents = ["work"]\n\n'
        f'[[tokens]]\ntoken = "{OTHER}"\nagents = ["private"]\n'
    )
    port = free_port()
    with serving(
        tmp_path,
        "http",
        port,
        "--agent",
        "work",
        "--tokens-file",
        str(tokens),
        "--data-dir",
        str(tmp_path / "data"),
        TIERMEM_MAX_REQUEST_BYTES="65536",
        TIERMEM_ALLOWED_ORIGINS=BROWSER_HOST,
    ):
        yield port


def post(port: int, headers: dict[str, str] | None = None, body: bytes | None = None) -> httpx.Response:
    return httpx.post(
        f"http://127.0.0.1:{port}/mcp",
        headers={**HEADERS, **(headers or {})},
        content=body if body is not None else json.dumps(INIT).encode(),
        timeout=30,
    )


def test_tokens_scope_and_rebinding(secured: int) -> None:
    port = secured
    assert post(port).status_code == 401
    assert post(port).headers["www-authenticate"].startswith("Bearer")
    assert post(port, {"authorization": "Bearer " + "x" * 40}).status_code == 401
    assert post(port, {"authorization": "Basic " + WORK}).status_code == 401
    denied = post(port, {"authorization": f"Bearer {OTHER}"})
    assert denied.status_code == 403 and "may not use agent 'work'" in denied.text  # a token for another agent
    ok = post(port, {"authorization": f"Bearer {WORK}"})
    assert ok.status_code == 200 and "tiermem" in ok.text
    evil_host = post(port, {"authorization": f"Bearer {WORK}", "host": "evil.example:80"})
    assert evil_host.status_code == 403 and "DNS-rebinding" in evil_host.text
    evil_origin = post(port, {"authorization": f"Bearer {WORK}", "origin": "http://evil.example"})
    assert evil_origin.status_code == 403
    assert post(port, {"authorization": f"Bearer {WORK}", "origin": f"http://localhost:{port}"}).status_code == 200
    big = post(port, {"authorization": f"Bearer {WORK}"}, body=b"{" + b" " * 100_000 + b"}")
    assert big.status_code == 413


async def test_mcp_client_with_token(secured: int) -> None:
    port = secured
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {WORK}"}, timeout=30)
    async with Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http), cache=None) as c:
        r = await c.call_tool("core_memory_append", {"label": "human", "content": "via token"})
        assert not r.is_error and text_of(r) == "\nvia token"
        core = (await c.read_resource("memory://core")).contents[0].text
        assert "via token" in core


def test_chunked_body_over_the_limit(secured: int, tmp_path: Path) -> None:
    """A body sent in chunks (no Content-Length) past max_request_bytes gets 413 as one with a length does, and the
    server logs no traceback; a chunked body under the limit still reaches the app."""
    port = secured

    def chunks(body: bytes, size: int = 16_384) -> Iterator[bytes]:
        for start in range(0, len(body), size):
            yield body[start : start + size]

    url = f"http://127.0.0.1:{port}/mcp"
    auth = {**HEADERS, "authorization": f"Bearer {WORK}"}
    big = b"{" + b" " * 200_000 + b"}"
    refused = httpx.post(url, headers=auth, content=chunks(big), timeout=30)
    assert refused.status_code == 413 and "65536 bytes" in refused.text, (refused.status_code, refused.text)
    assert httpx.post(url, headers=HEADERS, content=chunks(big), timeout=30).status_code == 401  # no token: 401 first
    accepted = httpx.post(url, headers=auth, content=chunks(json.dumps(INIT).encode(), 20), timeout=30)
    assert accepted.status_code == 200 and "tiermem" in accepted.text
    log = (tmp_path / "server.log").read_text()
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log[-3000:]


def test_cors_for_allowed_origins(secured: int) -> None:
    """A browser-based host of an allowed origin (the server's own, or one in allowed_origins) gets its preflight
    answered without a token and can read every answer, 401s included; other origins get 403 and no CORS header."""
    port = secured
    url = f"http://127.0.0.1:{port}/mcp"
    asking = {"access-control-request-method": "POST", "access-control-request-headers": "authorization, content-type"}
    for origin in (f"http://127.0.0.1:{port}", BROWSER_HOST):
        preflight = httpx.options(url, headers={"origin": origin, **asking}, timeout=30)
        assert preflight.status_code == 204, (origin, preflight.status_code, preflight.text)
        assert preflight.headers["access-control-allow-origin"] == origin
        assert {"GET", "POST", "DELETE"} <= set(preflight.headers["access-control-allow-methods"].split(", "))
        allowed = set(preflight.headers["access-control-allow-headers"].split(", "))
        assert {"authorization", "content-type", "mcp-session-id", "mcp-protocol-version", "last-event-id"} <= allowed
        assert int(preflight.headers["access-control-max-age"]) > 0
        answered = post(port, {"authorization": f"Bearer {WORK}", "origin": origin})
        assert answered.status_code == 200 and answered.headers["access-control-allow-origin"] == origin
        assert "mcp-session-id" in answered.headers["access-control-expose-headers"]
        refused = post(port, {"origin": origin})
        assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == origin
        assert "www-authenticate" in refused.headers["access-control-expose-headers"]  # the page reads the challenge
    for evil in ("http://evil.example", "null"):
        preflight = httpx.options(url, headers={"origin": evil, **asking}, timeout=30)
        answered = post(port, {"authorization": f"Bearer {WORK}", "origin": evil})
        for answer in (preflight, answered):
            assert answer.status_code == 403 and "access-control-allow-origin" not in answer.headers
    # an OPTIONS that is no preflight (no Origin) is an ordinary request: it needs a token
    assert httpx.options(url, headers=asking, timeout=30).status_code == 401


def test_one_authorization_header(secured: int) -> None:
    """Two Authorization headers: which one counts is ambiguous, so neither does (400 invalid_request)."""
    port = secured
    for first, second in ((f"Bearer {WORK}", "Bearer " + "x" * 40), ("Bearer " + "x" * 40, f"Bearer {WORK}")):
        headers = [*HEADERS.items(), ("authorization", first), ("authorization", second)]
        answer = httpx.post(f"http://127.0.0.1:{port}/mcp", headers=headers, content=json.dumps(INIT), timeout=30)
        assert answer.status_code == 400 and "one Authorization header" in answer.text
        assert 'error="invalid_request"' in answer.headers["www-authenticate"]


def test_public_bind_allowed_only_with_tokens(tmp_path: Path) -> None:
    refused = subprocess.run(
        [
            PYTHON,
            "-m",
            "tiermem",
            "serve",
            "--transport",
            "sse",
            "--host",
            "0.0.0.0",
            "--data-dir",
            str(tmp_path / "d"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=server_env(tmp_path),
        timeout=60,
    )
    assert refused.returncode == 1 and "without authentication" in refused.stderr
    short = tmp_path / "short.toml"
    short.write_text('[[tokens]]\ntoken = "abc"\nagents = ["*"]\n')
    bad = subprocess.run(
        [
            PYTHON,
            "-m",
            "tiermem",
            "serve",
            "--transport",
            "http",
            "--tokens-file",
            str(short),
            "--data-dir",
            str(tmp_path / "d"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=server_env(tmp_path),
        timeout=60,
    )
    assert bad.returncode == 1 and "at least 16 characters" in bad.stderr
    accented = tmp_path / "accented.toml"  # a client sends headers as ASCII: this token could never be presented
    accented.write_text('[[tokens]]\nname = "laptop"\ntoken = "pässwörd-tökén-0123456789"\nagents = ["*"]\n')
    refused = subprocess.run(
        [PYTHON, "-m", "tiermem", "serve", "--transport", "http", "--tokens-file", str(accented)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=server_env(tmp_path),
        timeout=60,
    )
    assert refused.returncode == 1 and "token #1 ('laptop') has characters other than visible ASCII" in refused.stderr
    assert "pässwörd" not in refused.stderr and str(accented) in refused.stderr  # the entry is named, not the token


def test_slow_client_does_not_block_others(secured: int) -> None:
    import socket

    port = secured
    stalled = [socket.create_connection(("127.0.0.1", port)) for _ in range(5)]
    try:
        for s in stalled:  # half a request, then silence
            s.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: 500\r\n\r\n{" % port)
        assert post(port, {"authorization": f"Bearer {WORK}"}).status_code == 200
    finally:
        for s in stalled:
            s.close()


def test_every_interface_says_which_hosts_are_answered(tmp_path: Path) -> None:
    """`tiermem config http` says that a server bound to every interface answers only the Host names in
    allowed_hosts; such a server says at start which names it answers (a client on another machine, sending this
    machine's address, gets 403 otherwise), and the name the snippet tells to add is then answered."""
    port = free_port()
    snippet = subprocess.run(
        [PYTHON, "-m", "tiermem", "config", "http", "--data-dir", str(tmp_path / "data")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=server_env(tmp_path),
        timeout=60,
    ).stdout
    assert "allowed_hosts" in snippet and '"0.0.0.0"' in snippet
    token = snippet.split('token = "', 1)[1].split('"', 1)[0]
    config = tmp_path / "http.toml"
    lan = f"192.0.2.7:{port}"  # this machine's address as a client elsewhere sends it (a documentation address)
    wide = snippet.replace('host = "127.0.0.1"', 'host = "0.0.0.0"').replace("port = 8765", f"port = {port}")
    for allowed in ("", f'allowed_hosts = ["{lan}"]\n'):
        config.write_text(allowed + wide)
        with serving(tmp_path, "http", port, "--config", str(config)):
            answer = post(port, {"authorization": f"Bearer {token}", "host": lan})
        log = (tmp_path / "server.log").read_text()
        assert f"only requests whose Host header is one of 127.0.0.1:{port}, localhost:{port}" in log
        assert "to allowed_hosts" in log
        if not allowed:
            assert answer.status_code == 403 and "not allowed" in answer.text
            assert "WARNING" in log and lan not in log
        else:
            assert answer.status_code == 200, answer.text
            assert f"[::1]:{port}, {lan} are answered" in log


def test_a_loopback_alias_and_ipv6_are_answered_and_shown(tmp_path: Path) -> None:
    """Bound to a loopback address other than 127.0.0.1, the server answers requests naming it (its own address is
    an allowed Host); bound to ::1, the URLs it prints bracket the address, and they work."""
    port = free_port()
    data = str(tmp_path / "data")
    with serving(tmp_path, "http", port, "--host", "127.0.0.2", "--data-dir", data, TIERMEM_HTTP_TOKEN=WORK):
        url = f"http://127.0.0.2:{port}/mcp"
        answer = httpx.post(url, headers={**HEADERS, "authorization": f"Bearer {WORK}"}, json=INIT, timeout=30)
        assert answer.status_code == 200, answer.text
    with serving(tmp_path, "http", port, "--host", "::1", "--data-dir", data):
        log = (tmp_path / "server.log").read_text()
        for _ in range(600):  # the secret is printed once the server listens
            if "#token=" in log:
                break
            time.sleep(0.05)
            log = (tmp_path / "server.log").read_text()
        assert f"listening on http://[::1]:{port}/mcp" in log, log
        link = log.split("memory inspector: ", 1)[1].split()[0]
        assert link.startswith(f"http://[::1]:{port}/ui/#token="), link
        secret = link.split("#token=", 1)[1]
        answer = httpx.get(link.split("#", 1)[0] + "api/agents", headers={"authorization": f"Bearer {secret}"})
        assert answer.status_code == 200 and answer.json()["default"] == "default", answer.text


def test_a_session_is_bound_to_the_token_that_opened_it(tmp_path: Path) -> None:
    """A streamable-HTTP session opened with one static token cannot be used or deleted with another (even one for
    the same agent): "Session not found", as for a session that does not exist; over SSE another token cannot post
    into a stream's session. The server's log holds no session id."""
    first, second = "7d1e5b9c3a8f4e2d6b0c9a1f3e5d7b28", "2c8e4a6f0d9b1e3c5a7f9d0b2e4c6a81"
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(
        f'[[tokens]]\nname = "laptop"\ntoken = "{first}"\nagents = ["*"]\n\n'
        f'[[tokens]]\nname = "phone"\ntoken = "{second}"\nagents = ["work"]\n'
    )
    args = ("--agent", "work", "--tokens-file", str(tokens), "--data-dir", str(tmp_path / "data"))
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    listing = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    with serving(tmp_path, "http", port, *args):
        opened = post(port, {"authorization": f"Bearer {first}"})
        session = opened.headers["mcp-session-id"]
        mine = {**HEADERS, "mcp-session-id": session, "mcp-protocol-version": "2025-06-18"}
        done = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert httpx.post(url, headers={**mine, "authorization": f"Bearer {first}"}, content=done).status_code == 202
        other = {**mine, "authorization": f"Bearer {second}"}
        used = httpx.post(url, headers=other, content=listing, timeout=30)
        assert used.status_code == 404 and "Session not found" in used.text, used.text
        assert httpx.delete(url, headers=other, timeout=30).status_code == 404
        owner = httpx.post(url, headers={**mine, "authorization": f"Bearer {first}"}, content=listing, timeout=30)
        assert owner.status_code == 200 and "core_memory_append" in owner.text  # the session is still the owner's
    log = (tmp_path / "server.log").read_text()
    assert session not in log and "<session id>" in log, log[-2000:]

    port = free_port()
    with serving(tmp_path, "sse", port, *args):
        base = f"http://127.0.0.1:{port}"
        with httpx.stream("GET", f"{base}/sse", headers={"authorization": f"Bearer {first}"}, timeout=30) as stream:
            lines = stream.iter_lines()  # kept: the stream (and its session) lives while it is read
            endpoint = next(line for line in lines if line.startswith("data:"))[5:].strip()
            body = json.dumps(INIT)
            json_type = {"content-type": "application/json"}
            intruder = httpx.post(
                base + endpoint, headers={**json_type, "authorization": f"Bearer {second}"}, content=body, timeout=30
            )
            assert intruder.status_code == 404, intruder.text
            owner = httpx.post(
                base + endpoint, headers={**json_type, "authorization": f"Bearer {first}"}, content=body, timeout=30
            )
            assert owner.status_code == 202, owner.text
    session = endpoint.split("session_id=", 1)[1]
    log = (tmp_path / "server.log").read_text()
    assert session not in log and "<session id>" in log, log[-3000:]


def test_session_ids_stay_out_of_the_log_at_debug_too(caplog: pytest.LogCaptureFixture) -> None:
    """The SDK's transports log session ids at DEBUG too (SSE's "Created new session with ID: ..."): with the log at
    DEBUG (a host process that logs everything), those lines show no session id either."""
    import logging
    import uuid

    from tiermem.server.sdk import quiet_session_ids

    quiet_session_ids()
    session = uuid.uuid4().hex
    with caplog.at_level(logging.DEBUG, logger="mcp.server.sse"):
        logging.getLogger("mcp.server.sse").debug(f"Created new session with ID: {session}")  # the SDK's line
    assert session not in caplog.text and "Created new session with ID: <session id>" in caplog.text, caplog.text


def test_a_static_tokens_principal_is_made_once() -> None:
    """The principal a static token's requests carry (what sessions are bound to) is made once per token, not on
    every request; another token gets its own."""
    import hashlib

    from tiermem.process.netguard import Token
    from tiermem.server.app import static_principal

    laptop = Token(hashlib.sha256(WORK.encode()).digest(), frozenset({"*"}), "laptop")
    phone = Token(hashlib.sha256(OTHER.encode()).digest(), frozenset({"*"}), "laptop")
    user, auth = static_principal(laptop)
    assert static_principal(laptop) == (user, auth) and static_principal(laptop)[0] is user
    assert user.access_token.subject == laptop.owner and WORK not in repr(user.access_token)
    assert static_principal(phone)[0].access_token.client_id != user.access_token.client_id


def test_websocket_handshakes_are_refused_without_websocket_libraries(tmp_path: Path) -> None:
    """Nothing here speaks WebSocket: a handshake is refused by the guard itself (403 with its reason), token or not,
    whichever WebSocket library is installed (here none can be imported), without a warning in the log; and the
    event loop is asyncio's even where uvloop is installed (here a uvloop that fails if used)."""
    stubs = tmp_path / "stubs"
    (stubs / "wsproto").mkdir(parents=True)
    (stubs / "wsproto" / "__init__.py").write_text('raise ImportError("wsproto is not installed here")\n')
    (stubs / "websockets").mkdir()
    (stubs / "websockets" / "__init__.py").write_text('raise ImportError("websockets is not installed here")\n')
    (stubs / "uvloop").mkdir()
    (stubs / "uvloop" / "__init__.py").write_text(
        "def new_event_loop():\n    raise RuntimeError('uvloop was used')\n\n\ndef install():\n    new_event_loop()\n"
    )
    path = os.pathsep.join(p for p in (str(stubs), os.environ.get("PYTHONPATH", "")) if p)
    port = free_port()
    data = str(tmp_path / "data")
    with serving(tmp_path, "http", port, "--data-dir", data, TIERMEM_HTTP_TOKEN=WORK, PYTHONPATH=path):
        for extra in (b"", f"Authorization: Bearer {WORK}\r\n".encode()):
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                s.sendall(
                    b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n%s"
                    b"\r\n" % (port, extra)
                )
                answer = b""
                while b"WebSocket is not served here" not in answer:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    answer += chunk
            assert answer.startswith(b"HTTP/1.1 403") and b"WebSocket is not served here" in answer, answer
        assert post(port, {"authorization": f"Bearer {WORK}"}).status_code == 200
    log = (tmp_path / "server.log").read_text()
    assert "upgrade" not in log.lower() and "WebSocket" not in log and "Traceback" not in log, log[-3000:]


def _answer_of(sock: socket.socket) -> bytes:
    """Everything the server sends on ``sock`` until it closes the connection."""
    sock.settimeout(120)
    answer = b""
    try:
        while chunk := sock.recv(4096):
            answer += chunk
    except ConnectionResetError:  # closed with bytes of ours unread: what it answered first was read above
        pass
    return answer


def _eventually(check: Callable[[], bool]) -> bool:
    """Whether ``check`` holds within a generous bound (the server acts on its own clock)."""
    for _ in range(600):
        if check():
            return True
        time.sleep(0.1)
    return False


def _started_post(host: bytes, length: int, token: str | None = WORK) -> bytes:
    """The headers of an MCP POST with a body of ``length`` bytes (sent by the caller, or not)."""
    auth = b"Authorization: Bearer " + token.encode() + b"\r\n" if token else b""
    return (
        b"POST /mcp HTTP/1.1\r\nHost: " + host + b"\r\n" + auth + b"Accept: application/json, text/event-stream\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % length
    )


def _trickled(sock: socket.socket, length: int) -> tuple[bytes, int]:
    """Send a body of ``length`` bytes on ``sock`` a byte at a time, one whenever the server has said nothing for a
    moment (so the connection never idles), until the server closes it: what it answered, and how many of the bytes
    were left unsent."""
    answer = b""
    while True:
        if select.select([sock], [], [], 0.1)[0]:
            try:
                chunk = sock.recv(4096)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                return answer, length
            answer += chunk
        elif length == 0:  # all of it sent: the server answers it, and closes the connection when it likes
            return answer + _answer_of(sock), 0
        else:
            try:
                sock.sendall(b" ")
            except (BrokenPipeError, ConnectionResetError):  # closed: what it answered is read above, or now
                return answer + _answer_of(sock), length
            length -= 1


def test_half_sent_requests_are_closed_and_connections_are_capped(tmp_path: Path) -> None:
    """A connection whose request headers never complete (slowloris), or that sends nothing, is answered 408 and
    closed after http_header_timeout; a request answered before its body arrived (no token: 401; too large: 413) is
    closed once answered, not held while the rest of the body comes (here the body's deadline is an hour away); past
    http_max_connections open ones, a new connection gets 503 at once; once they close, requests are served again."""
    port = free_port()
    host = f"127.0.0.1:{port}".encode()
    with serving(
        tmp_path,
        "http",
        port,
        "--data-dir",
        str(tmp_path / "data"),
        TIERMEM_HTTP_TOKEN=WORK,
        TIERMEM_HTTP_HEADER_TIMEOUT="1",
        TIERMEM_HTTP_BODY_TIMEOUT="3600",
        TIERMEM_HTTP_MAX_CONNECTIONS="4",
        TIERMEM_MAX_REQUEST_BYTES="65536",
    ):
        with (
            socket.create_connection(("127.0.0.1", port)) as half,
            socket.create_connection(("127.0.0.1", port)) as mute,
        ):
            half.sendall(b"POST /mcp HTTP/1.1\r\nHost: " + host + b"\r\nAuthorization: Bearer " + WORK.encode())
            for sock in (half, mute):
                answer = _answer_of(sock)
                assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive within 1 s" in answer, answer
        for start, status in ((_started_post(host, 200, token=None), b"401"), (_started_post(host, 70_000), b"413")):
            unread = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]  # as many as are let in
            try:
                for sock in unread:
                    sock.sendall(start)
                for sock in unread:  # answered, then closed while the body trickles in (which keeps it from idling)
                    answer, unsent = _trickled(sock, 200)
                    assert answer.startswith(b"HTTP/1.1 " + status) and unsent > 0, (answer, unsent)
            finally:
                for sock in unread:
                    sock.close()
        page = b"GET /ui/ HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n\r\n"
        holders = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
        try:
            for sock in holders:  # whole headers, part of a body: the app reads it, the header deadline is over
                sock.sendall(_started_post(host, 500) + b"{")
            with socket.create_connection(("127.0.0.1", port)) as extra:  # refused at once, before it sends anything
                answer = _answer_of(extra)
            assert answer.startswith(b"HTTP/1.1 503") and b"Too many open connections" in answer, answer
        finally:
            for sock in holders:
                sock.close()

        def served() -> bool:
            with socket.create_connection(("127.0.0.1", port)) as again:
                again.sendall(page)
                return _answer_of(again).startswith(b"HTTP/1.1 200")

        assert _eventually(served)
    log = (tmp_path / "server.log").read_text()
    assert "refusing new connections: 4 are open (http_max_connections)" in log, log[-2000:]


def test_a_body_that_trickles_in_gets_408(tmp_path: Path) -> None:
    """A request body that trickles in a byte at a time (each byte within any idle timeout) gets 408 and is closed
    http_body_timeout after the request began; the server serves on, with no traceback in its log."""
    port = free_port()
    host = f"127.0.0.1:{port}".encode()
    data = str(tmp_path / "data")
    with serving(tmp_path, "http", port, "--data-dir", data, TIERMEM_HTTP_TOKEN=WORK, TIERMEM_HTTP_BODY_TIMEOUT="2"):
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(_started_post(host, 1000))
            answer, unsent = _trickled(sock, 1000)
        assert answer.startswith(b"HTTP/1.1 408") and b"body did not arrive within 2 s" in answer, answer
        assert unsent > 0
        assert post(port, {"authorization": f"Bearer {WORK}"}).status_code == 200
    log = (tmp_path / "server.log").read_text()
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log[-3000:]


def test_running_out_of_open_files_is_logged_once(tmp_path: Path) -> None:
    """Past the process's limit on open files (a connection cap above it), asyncio reports every failed accept with a
    traceback, thousands a second; the server logs one line naming the limit instead, and serves again once the
    connections close."""
    port = free_port()
    host = f"127.0.0.1:{port}".encode()
    data = str(tmp_path / "data")
    with serving(tmp_path, "http", port, "--data-dir", data, open_files=64, TIERMEM_HTTP_MAX_CONNECTIONS="1000"):
        log = tmp_path / "server.log"
        held = []
        try:
            for _ in range(120):  # more than the server can open files for
                sock = socket.create_connection(("127.0.0.1", port))
                sock.sendall(b"GET /ui/ HTTP/1.1\r\nHost: " + host + b"\r\n")
                held.append(sock)
            assert _eventually(lambda: "cannot accept" in log.read_text() or "system resource" in log.read_text())
        finally:
            for sock in held:
                sock.close()
        page = b"GET /ui/ HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n\r\n"

        def served() -> bool:
            with socket.create_connection(("127.0.0.1", port)) as again:
                again.sendall(page)
                return _answer_of(again).startswith(b"HTTP/1.1 200")

        assert _eventually(served)
    text = log.read_text()
    assert "out of system resource" not in text and "Traceback" not in text, text[-3000:]
    assert text.count("cannot accept connections: [Errno 24] Too many open files") == 1, text[-3000:]
    assert "lower http_max_connections or raise the limit" in text
