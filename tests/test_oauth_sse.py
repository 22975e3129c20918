"""Shared agents over SSE under OAuth (server/sse_agent.py): a stream opened with ``/sse?agent=NAME`` hands out a message
endpoint that carries ``&agent=NAME``, so the client's POSTs are checked by the guard and reach that agent's server.
The real ``tiermem serve --transport sse`` with a local issuer on loopback (``bench/oauth_issuer.py``: metadata, JWKS
and tokens minted here); the sign-in flow itself is tests/test_oauth.py's (oidc-provider)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.sse import sse_client

from tiermem.server.sse_agent import CarryAgent

from .conftest import text_of
from .test_transports import free_port, serving

pytestmark = pytest.mark.anyio

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
MARK = "sse-shared-7731"  # what alice appends to the shared agent


@dataclass
class Served:
    base: str  # http://127.0.0.1:<port>
    issuer: Any
    log: Path  # the server's stderr

    def token(self, subject: str) -> str:
        return str(self.issuer.mint(f"{self.base}/sse", subject=subject))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``serve --transport sse`` under OAuth with a shared agent "shared" for alice and carol (not bob)."""
    from bench.oauth_issuer import Issuer

    tmp_path = tmp_path_factory.mktemp("sse-oauth")
    issuer = Issuer(free_port())
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    try:
        with serving(
            tmp_path,
            "sse",
            port,
            TIERMEM_DATA_DIR=str(tmp_path / "data"),
            TIERMEM_OAUTH_ISSUER=issuer.url,
            TIERMEM_PUBLIC_URL=base,
            TIERMEM_OAUTH_SHARED_AGENTS=json.dumps({"shared": ["alice", "carol"]}),
        ):
            yield Served(base, issuer, tmp_path / "server.log")
    finally:
        issuer.close()


def sse(served: Served, token: str, agent: str | None = None) -> Client:
    url = f"{served.base}/sse" + (f"?agent={agent}" if agent else "")
    return Client(sse_client(url, headers={"authorization": f"Bearer {token}"}), cache=None)


async def core_of(served: Served, token: str, agent: str | None = None) -> str:
    async with sse(served, token, agent) as client:
        contents = await client.read_resource("memory://core")
        return json.dumps([c.model_dump(mode="json") for c in contents.contents])


async def test_shared_agent_over_sse(served: Served) -> None:
    alice, bob, carol = (served.token(s) for s in ("alice", "bob", "carol"))
    auth = {n: {"authorization": f"Bearer {t}"} for n, t in (("alice", alice), ("bob", bob), ("carol", carol))}
    async with httpx.AsyncClient(base_url=served.base, timeout=30) as http:
        # bob may not use the shared agent: the stream is refused
        refused = await http.get("/sse", params={"agent": "shared"}, headers=auth["bob"])
        assert refused.status_code == 403, refused.text
        async with http.stream("GET", "/sse", params={"agent": "shared"}, headers=auth["alice"]) as stream:
            assert stream.status_code == 200
            lines = stream.aiter_lines()  # held: a dropped iterator would close the stream (and end the session)
            endpoint = await _endpoint_event(lines)
            assert re.fullmatch(r"/messages/\?session_id=[0-9a-f]{32}&agent=shared", endpoint), endpoint
            without_agent = endpoint.removesuffix("&agent=shared")
            accepted = await http.post(endpoint, headers=auth["alice"], json=INIT)  # the way in: alice, as handed out
            assert accepted.status_code == 202, accepted.text
            # none of these reaches alice's session: bob is refused by the guard; carol (allowed the shared agent)
            # reaches its server but not alice's session; alice herself without the parameter reaches her own agent
            for who, path, status in (
                ("bob", endpoint, 403),
                ("carol", endpoint, 404),
                ("alice", without_agent, 404),
                ("carol", without_agent, 404),
            ):
                answer = await http.post(path, headers=auth[who], json=INIT)
                assert answer.status_code == status, (who, path, answer.status_code, answer.text)
            ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
            accepted = await http.post(endpoint, headers=auth["alice"], json=ping)  # the session is still there
            assert accepted.status_code == 202, accepted.text

    # the SDK's SSE client follows the endpoint it is given: alice's write lands in the shared agent
    async with sse(served, alice, "shared") as client:
        result = await client.call_tool("core_memory_append", {"label": "human", "content": MARK})
        assert not result.is_error, text_of(result)
    assert MARK in await core_of(served, carol, "shared")  # carol sees it in the shared agent
    assert MARK not in await core_of(served, alice)  # alice's own agent does not hold it
    with pytest.raises(Exception, match="403"):  # bob through the SDK's client: refused too
        async with sse(served, bob, "shared"):
            pass


async def test_chunked_body_over_the_limit_on_the_message_endpoint(served: Served) -> None:
    """A POST to the message endpoint sent in chunks (no Content-Length) past max_request_bytes gets 413, not 500, and
    the server logs no traceback."""
    alice = {"authorization": f"Bearer {served.token('alice')}"}

    def chunks() -> Iterator[bytes]:
        for _ in range(5):
            yield b" " * (1024 * 1024)  # 5 MiB, past the default 4 MiB

    async with httpx.AsyncClient(base_url=served.base, timeout=60) as http:
        async with http.stream("GET", "/sse", headers=alice) as stream:
            lines = stream.aiter_lines()  # held: a dropped iterator would close the stream (and end the session)
            endpoint = await _endpoint_event(lines)
            big = await anyio.to_thread.run_sync(
                lambda: httpx.post(f"{served.base}{endpoint}", headers=alice, content=chunks(), timeout=60)
            )
            assert big.status_code == 413, (big.status_code, big.text)
            ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            assert (await http.post(endpoint, headers=alice, json=ping)).status_code == 202  # the session goes on
    log = served.log.read_text()
    assert "BodyTooLarge" not in log and "Exception in ASGI application" not in log, log[-3000:]


async def _endpoint_event(lines: AsyncIterator[str]) -> str:
    event = None
    with anyio.fail_after(10):
        async for line in lines:
            if line.startswith("event:"):
                event = line.partition(":")[2].strip()
            elif line.startswith("data:") and event == "endpoint":
                return line.partition(":")[2].strip()
    raise AssertionError("the stream ended before its endpoint event")


# -- the middleware alone ------------------------------------------------------------------------------------------


async def _run(scope: dict[str, Any], chunks: list[bytes], content_type: bytes = b"text/event-stream") -> list[bytes]:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", content_type)]})
        for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})

    out: list[bytes] = []

    async def send(message: Any) -> None:
        if message["type"] == "http.response.body":
            out.append(message["body"])

    async def receive() -> Any:
        return {"type": "http.disconnect"}

    await CarryAgent(app)({"type": "http", "method": "GET", **scope}, receive, send)
    return out


async def test_carry_agent_rewrites_only_the_endpoint_event() -> None:
    endpoint = b"event: endpoint\r\ndata: /messages/?session_id=ab12\r\n\r\n"
    message = b'event: message\r\ndata: {"x": "event: endpoint"}\r\n\r\n'
    asked = {"query_string": b"agent=team+a", "tiermem.agent": "team a"}
    assert await _run(asked, [endpoint, message, endpoint]) == [
        b"event: endpoint\r\ndata: /messages/?session_id=ab12&agent=team%20a\r\n\r\n",  # quoted
        message,
        endpoint,  # only the first
    ]
    assert await _run(asked, [b"event: endpoint\ndata: /m/?session_id=1\n\n"]) == [
        b"event: endpoint\ndata: /m/?session_id=1&agent=team%20a\n\n"
    ]
    # unchanged: no ?agent= (the user's own agent), no agent decided by the guard (static tokens), not a stream
    assert await _run({"query_string": b"", "tiermem.agent": "user-x"}, [endpoint]) == [endpoint]
    assert await _run({"query_string": b"agent=team"}, [endpoint]) == [endpoint]
    assert await _run(asked, [endpoint], content_type=b"application/json") == [endpoint]
