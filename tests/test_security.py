"""Network transports over real HTTP on loopback: bearer tokens, agent scoping, DNS rebinding, body limits."""

from __future__ import annotations

import json
import subprocess
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
