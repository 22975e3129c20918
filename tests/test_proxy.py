"""Two tiermem replicas on object storage (moto S3) behind a real reverse proxy doing TLS (HAProxy), OAuth on.

The deployment the docs describe: the proxy terminates TLS at ``public_url`` and spreads new sessions over the
replicas, keeping each MCP session on the replica that opened it (a stick table on ``Mcp-Session-Id``); the
replicas share one bucket, so any of them serves any user. Users sign in with JWT access tokens of an issuer on
loopback (``bench/oauth_issuer.py``; the sign-in flow itself is tests/test_oauth.py's). Skips, saying why, without
``haproxy`` (Debian package ``haproxy``; ``.ci/run`` installs it) or ``openssl``.

The stateless deployment (``http_stateless``): plain round robin, no stick table; every request may reach any replica.
"""

from __future__ import annotations

import ssl
import subprocess
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from .conftest import PYTHON, ROOT, text_of
from .test_object_storage import s3_config, s3_endpoint  # noqa: F401 (the fixture)
from .test_transports import free_port, server_env, wait_for_port

pytestmark = pytest.mark.anyio
REPLICAS = 2
USERS = ("alice", "bob")
CLIENTS_PER_USER = 3
APPENDS = 8


def _need(tool: str) -> str:
    from bench.proxy import find

    path = find(tool)
    if path is None:
        pytest.skip(f"{tool} is not installed (Debian: apt-get install {tool}); the proxy test needs it")
    return path


@pytest.fixture
def deployment(tmp_path: Path, s3_endpoint: str) -> Iterator[tuple[str, Path, object, list[Path]]]:  # noqa: F811
    """(the public MCP URL, its certificate, the issuer, the replicas' logs): sessions, a sticky proxy."""
    with _deploy(tmp_path, s3_endpoint, stateless=False) as deployed:
        yield deployed


@pytest.fixture
def stateless_deployment(tmp_path: Path, s3_endpoint: str) -> Iterator[tuple[str, Path, object, list[Path]]]:  # noqa: F811
    """As ``deployment``, with replicas serving ``http_stateless`` behind plain round robin (no stick table)."""
    with _deploy(tmp_path, s3_endpoint, stateless=True) as deployed:
        yield deployed


@contextmanager
def _deploy(tmp_path: Path, s3_endpoint: str, *, stateless: bool) -> Iterator[tuple[str, Path, object, list[Path]]]:  # noqa: F811
    from bench.oauth_issuer import Issuer
    from bench.proxy import start_haproxy

    haproxy = _need("haproxy")
    _need("openssl")
    issuer = Issuer(free_port())
    proxy_port = free_port()
    public = f"https://127.0.0.1:{proxy_port}"
    config = s3_config(tmp_path, s3_endpoint, f"proxy-{uuid.uuid4().hex[:8]}")
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []
    try:
        ports = []
        for r in range(REPLICAS):
            port = free_port()
            logs.append(tmp_path / f"replica{r}.log")
            env = server_env(tmp_path, TIERMEM_OAUTH_ISSUER=issuer.url, TIERMEM_PUBLIC_URL=public)
            if stateless:
                env["TIERMEM_HTTP_STATELESS"] = "1"
            env.pop("TIERMEM_EMBEDDING_MODEL", None)  # the config file decides
            proc = subprocess.Popen(
                [PYTHON, "-m", "tiermem", "serve", "--transport", "http", "--port", str(port), "--config", str(config)],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=logs[-1].open("wb"),
            )
            procs.append(proc)
            wait_for_port(port, proc, timeout=120)
            ports.append(port)
        proxy, cert = start_haproxy(haproxy, tmp_path, proxy_port, ports, sticky=not stateless)
        procs.append(proxy)
        wait_for_port(proxy_port, proxy)
        yield f"{public}/mcp", cert, issuer, logs
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(timeout=30)
        issuer.close()


async def test_replicas_behind_a_tls_proxy(deployment: tuple[str, Path, object, list[Path]]) -> None:
    url, cert, issuer, logs = deployment
    trust = ssl.create_default_context(cafile=str(cert))  # the proxy's self-signed certificate, and only it
    # what a client discovers through the proxy: https URLs all the way
    meta = httpx.get(url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp"), verify=trust, timeout=30)
    assert meta.status_code == 200 and meta.json()["resource"] == url
    challenge = httpx.post(url, json={}, verify=trust, timeout=30)
    assert (
        challenge.status_code == 401
        and f'resource_metadata="{url.replace("/mcp", "")}' in (challenge.headers["www-authenticate"])
    )
    tokens = {user: issuer.mint(url, subject=user) for user in USERS}  # type: ignore[attr-defined]

    def client(user: str) -> Client:
        http = httpx2.AsyncClient(
            headers={"authorization": f"Bearer {tokens[user]}"}, verify=trust, timeout=httpx2.Timeout(120, read=300)
        )
        return Client(
            streamable_http_client(url, http_client=http), cache=None, mode="legacy", read_timeout_seconds=240
        )

    async def worker(user: str, n: int) -> None:
        async with client(user) as c:  # a session with the handshake: it must stay on one replica
            for i in range(APPENDS):
                r = await c.call_tool("core_memory_append", {"label": "human", "content": f"{user}-{n}-{i}"})
                assert not r.is_error, text_of(r)

    async with anyio.create_task_group() as tg:
        for user in USERS:
            for n in range(CLIENTS_PER_USER):
                tg.start_soon(worker, user, n)

    for user in USERS:  # every append of each user, once, in that user's memory only; read through the proxy
        for _ in range(REPLICAS):  # new sessions: round robin reads from each replica
            async with client(user) as c:
                value = (await c.read_resource("memory://blocks/human")).contents[0].text  # type: ignore[union-attr]
            lines = Counter(line for line in value.split("\n") if line.startswith(USERS))
            expected = {f"{user}-{n}-{i}" for n in range(CLIENTS_PER_USER) for i in range(APPENDS)}
            assert set(lines) == expected and max(lines.values()) == 1, (user, sorted(set(lines) ^ expected))
    opened = [log.read_text().count("Created new transport") for log in logs]
    assert all(n > 0 for n in opened), opened  # the proxy spread the sessions over both replicas


async def test_stateless_replicas_any_replica_answers(
    stateless_deployment: tuple[str, Path, object, list[Path]],
) -> None:
    """Stateless replicas behind plain round robin: a modern client (protocol 2026-07-28, no session by design) and a
    legacy one (the handshake, no session id given) append at once; every call succeeds, nothing is lost or doubled,
    and each client's session is served by both replicas (HAProxy names the replica in ``x-tiermem-replica``)."""
    url, cert, issuer, _logs = stateless_deployment
    trust = ssl.create_default_context(cafile=str(cert))
    token = issuer.mint(url, subject="carol")  # type: ignore[attr-defined]
    served: dict[str, Counter[str]] = {"modern": Counter(), "legacy": Counter()}
    session_ids: list[str] = []

    def client(kind: str) -> Client:
        async def seen(response: httpx2.Response) -> None:
            served[kind][response.headers.get("x-tiermem-replica", "?")] += 1
            session_ids.extend(response.headers.get_list("mcp-session-id"))

        http = httpx2.AsyncClient(
            headers={"authorization": f"Bearer {token}"},
            verify=trust,
            timeout=httpx2.Timeout(120, read=300),
            event_hooks={"response": [seen]},
        )
        mode = "legacy" if kind == "legacy" else "auto"  # "auto", the default, speaks 2026-07-28 to tiermem
        return Client(streamable_http_client(url, http_client=http), cache=None, mode=mode, read_timeout_seconds=240)

    async def appends(kind: str, c: Client) -> None:
        for i in range(APPENDS):
            r = await c.call_tool("core_memory_append", {"label": "human", "content": f"{kind}-{i}"})
            assert not r.is_error, text_of(r)

    expected = {f"{kind}-{i}" for kind in served for i in range(APPENDS)}
    async with client("modern") as modern, client("legacy") as legacy:
        sessions = {"modern": modern, "legacy": legacy}
        assert modern.protocol_version == "2026-07-28" and legacy.protocol_version != "2026-07-28"
        async with anyio.create_task_group() as tg:  # both at once, each request to the next replica
            for kind, c in sessions.items():
                tg.start_soon(appends, kind, c)
        for kind, c in sessions.items():  # then each alone: its consecutive requests go to one replica, then the other
            for _ in range(REPLICAS):
                value = (await c.read_resource("memory://blocks/human")).contents[0].text  # type: ignore[union-attr]
                lines = Counter(line for line in value.split("\n") if line.startswith(tuple(served)))
                assert set(lines) == expected and max(lines.values()) == 1, (kind, sorted(set(lines) ^ expected))
    assert session_ids == []  # stateless: no replica handed out a session
    replicas = {f"r{r}" for r in range(REPLICAS)}
    assert all(set(counts) == replicas for counts in served.values()), served  # any replica answered either client
