"""The real ``tiermem serve`` process over stdio, streamable HTTP and SSE, driven by the official client."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from .cli_inproc import run_cli
from .conftest import PYTHON, ROOT, text_of

pytestmark = pytest.mark.anyio


def server_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERMEM_")}
    env.update(
        XDG_CONFIG_HOME=str(tmp_path / "cfg"),
        XDG_DATA_HOME=str(tmp_path / "xdg"),
        TIERMEM_EMBEDDING_MODEL="hashing",
        TIERMEM_TOOLS="all",
    )  # every tool: tests exercise each one (the default set's tests ask for it)
    env.update(extra)
    return env


def stdio_server(tmp_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``tiermem serve`` over stdio on ``tmp_path / "data"``, its three streams piped as text (``server_env`` unless
    ``env`` is given); the caller ends it."""
    proc = subprocess.Popen(
        [PYTHON, "-m", "tiermem", "serve", "--data-dir", str(tmp_path / "data")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=server_env(tmp_path) if env is None else env,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    return proc


HTTP_TOKEN = "9a4f2c7e0b1d4e6f8a3c5b7d9e0f1a2b"  # TIERMEM_HTTP_TOKEN of the HTTP servers these tests start
AUTH = {"authorization": f"Bearer {HTTP_TOKEN}"}


def http_target(url: str, token: str = HTTP_TOKEN):  # type: ignore[no-untyped-def]
    """A streamable-HTTP transport for ``Client`` that sends the bearer token."""
    return streamable_http_client(
        url,
        http_client=httpx2.AsyncClient(
            headers={"authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(120, read=300)
        ),
    )


def stdio_params(tmp_path: Path, *args: str, **env: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=PYTHON,
        args=["-m", "tiermem", "serve", "--data-dir", str(tmp_path / "data"), *args],
        env=server_env(tmp_path, **env),
        cwd=str(ROOT),
    )


@asynccontextmanager
async def in_thread(app: Any, port: int) -> AsyncIterator[str]:
    """The ASGI ``app`` served by uvicorn on ``port`` in a thread of this process, while within: its MCP URL."""
    import threading

    import anyio
    import uvicorn

    web = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=web.run, daemon=True)
    thread.start()
    try:
        with anyio.fail_after(30):
            while not web.started:
                await anyio.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        web.should_exit = True
        thread.join(10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 60, host: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited early: {proc.stderr.read().decode() if proc.stderr else ''}")
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("server did not start listening")


@contextmanager
def serving(
    tmp_path: Path, transport: str, port: int, *args: str, open_files: int | None = None, **env: str
) -> Iterator[subprocess.Popen[bytes]]:
    """``tiermem serve --transport TRANSPORT --port PORT ARGS...`` with ``server_env(tmp_path, **env)``, listening,
    stopped on exit; its stderr goes to tmp_path/server.log (read it when a test fails). ``open_files``: the
    server's limit on open files (``ulimit -n``)."""

    def limited() -> None:
        import resource

        assert open_files is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))

    proc = subprocess.Popen(
        [PYTHON, "-m", "tiermem", "serve", "--transport", transport, "--port", str(port), *args],
        cwd=ROOT,
        env=server_env(tmp_path, **env),
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "server.log").open("wb"),
        preexec_fn=limited if open_files is not None else None,
    )
    try:
        wait_for_port(port, proc, host=args[args.index("--host") + 1].strip("[]") if "--host" in args else "127.0.0.1")
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.fixture
def network_server(tmp_path: Path, request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    transport = request.param
    port = free_port()
    with serving(tmp_path, transport, port, "--data-dir", str(tmp_path / "data"), TIERMEM_HTTP_TOKEN=HTTP_TOKEN):
        yield transport, port


async def exercise(client: Client) -> None:
    names = {t.name for t in (await client.list_tools()).tools}
    assert {"memory_replace", "archival_memory_search", "conversation_search"} <= names
    r = await client.call_tool("core_memory_append", {"label": "human", "content": "Prefers tea"})
    assert not r.is_error and text_of(r) == "\nPrefers tea"
    r = await client.call_tool("memory_replace", {"label": "human", "old_string": "nope", "new_string": "x"})
    assert r.is_error and "did not appear verbatim" in text_of(r)
    core = (await client.read_resource("memory://core")).contents[0].text
    assert "Prefers tea" in core
    r = await client.call_tool("archival_memory_insert", {"content": "The launch is on March 3rd", "tags": ["work"]})
    ids = json.loads(text_of(r))["ids"]
    found = json.loads(text_of(await client.call_tool("archival_memory_search", {"query": "launch date"})))
    assert found["results"][0]["id"] == ids[0]


async def test_stdio_subprocess(tmp_path: Path) -> None:
    async with Client(stdio_params(tmp_path), cache=None) as client:
        await exercise(client)


async def test_stdio_stdout_is_protocol_only(tmp_path: Path) -> None:
    """Logs go to stderr: a raw initialize over stdio gets exactly one JSON-RPC line back."""
    proc = subprocess.run(
        [PYTHON, "-m", "tiermem", "serve", "--data-dir", str(tmp_path / "data")],
        input=json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            }
        )
        + "\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=server_env(tmp_path),
        timeout=60,
    )
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1
    reply = json.loads(lines[0])
    assert reply["id"] == 1 and reply["result"]["serverInfo"]["name"] == "tiermem"
    assert "<memory_blocks>" in reply["result"]["instructions"]


@pytest.mark.parametrize("network_server", ["http"], indirect=True)
async def test_streamable_http(network_server) -> None:  # type: ignore[no-untyped-def]
    _, port = network_server
    async with Client(http_target(f"http://127.0.0.1:{port}/mcp"), cache=None) as client:
        await exercise(client)


@pytest.mark.parametrize("network_server", ["sse"], indirect=True)
async def test_sse(network_server) -> None:  # type: ignore[no-untyped-def]
    _, port = network_server
    async with Client(sse_client(f"http://127.0.0.1:{port}/sse", headers=AUTH), cache=None) as client:
        await exercise(client)


def test_refuses_public_bind_without_auth(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            PYTHON,
            "-m",
            "tiermem",
            "serve",
            "--transport",
            "http",
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
    assert proc.returncode == 1
    assert "Refusing to serve on 0.0.0.0" in proc.stderr and proc.stdout == ""
    said = " ".join(proc.stderr.split())  # no path of the repository (an installed tiermem has no docs/ beside it):
    assert "docs/" not in said and "`tiermem config http` prints a server configuration with a fresh token" in said
    assert "the documentation, 'Security and privacy', section 'Running on a network'" in said  # one that exists:
    page = (ROOT / "docs" / "security.md").read_text()
    assert page.startswith("# Security and privacy\n") and "\n## Running on a network\n" in page


def test_cli_blocks_roundtrip(tmp_path: Path) -> None:
    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, "--data-dir", str(tmp_path / "data"), env=server_env(tmp_path), stdin=stdin)

    assert run("blocks", "set", "human", "-", stdin="Name: Ada").returncode == 0
    assert run("blocks", "show", "human").stdout == "Name: Ada\n"
    assert run("blocks", "create", "rules", "--value", "Be brief", "--read-only").returncode == 0
    assert run("blocks", "set", "rules", "Be very brief").returncode == 0  # people may edit read-only blocks
    listed = json.loads(run("blocks", "list", "--json").stdout)
    assert {b["label"]: b["read_only"] for b in listed} == {"persona": False, "human": False, "rules": True}
    hist = json.loads(run("blocks", "history", "rules", "--json").stdout)
    assert [h["version"] for h in hist] == [2, 1]
    assert run("blocks", "revert", "rules", "1").returncode == 0
    assert run("blocks", "show", "rules").stdout == "Be brief\n"
    assert run("agents", "create", "work").returncode == 0
    assert run("blocks", "attach", "rules", "--from", "default", "--agent", "work").returncode == 0
    assert run("blocks", "set", "rules", "Shared rule", "--agent", "work").returncode == 0
    assert run("blocks", "show", "rules").stdout == "Shared rule\n"  # one block, two agents
    names = [a["name"] for a in json.loads(run("agents", "list", "--json").stdout)]
    assert names == ["default", "work"]
    bad = run("blocks", "show", "nope")
    assert bad.returncode == 1 and "No memory block with label 'nope'" in bad.stderr
    assert run("blocks", "--help").returncode == 0 and "example" in run("blocks", "--help").stdout


async def test_first_search_after_spawn_is_hybrid(tmp_path: Path) -> None:
    """Search right after initialize, with the real default model: by meaning, tag filters included, and rows a
    process stored without vectors (its model never loaded) are found by meaning too."""
    import threading

    from tiermem.base.config import load_settings
    from tiermem.base.errors import EmbeddingError
    from tiermem.domain.archive import Archive
    from tiermem.domain.factory import open_memory
    from tiermem.embedding.embedders import DEFAULT_MODEL, BackgroundEmbedder

    settings = load_settings(data_dir=tmp_path / "data", embedding_model="default")
    earlier = open_memory(settings)
    agent = earlier.ensure_agent("default").id
    archive = earlier.archive
    assert archive is not None and archive.embedder.wait(300)
    cat = archive.insert(agent, "The cat sleeps on the windowsill every afternoon", ["pets"])[0]
    archive.insert(agent, "Our dog Rex is due for his vaccination in May", ["pets"])
    boiler = archive.insert(agent, "The boiler was serviced in October", ["home"])[0]
    archive.log_messages(
        agent,
        [
            {"role": "user", "content": "I started learning to play the cello last week"},
            {"role": "user", "content": "My sister lives in Lisbon"},
        ],
    )
    gate = threading.Event()

    def never_loads() -> BackgroundEmbedder:
        gate.wait(60)
        raise EmbeddingError("this process's model never loaded")

    short_lived = Archive(
        earlier.archive.store, BackgroundEmbedder(never_loads, DEFAULT_MODEL, 384, 256), wait_seconds=0
    )
    short_lived.embedder.start()
    parrot = short_lived.insert(agent, "My parrot Kiwi can whistle the national anthem", ["pets"])[0]
    gate.set()
    assert earlier.archive.vectors.missing()["passages"] == 1

    # A generous wait: this checks that the search waits for the model, not how fast a busy machine loads it.
    params = stdio_params(tmp_path, TIERMEM_EMBEDDING_MODEL="default", TIERMEM_EMBEDDING_WAIT_SECONDS="300")
    async with Client(params, cache=None) as client:

        async def search(tool: str, **args: object) -> dict:  # type: ignore[type-arg]
            r = await client.call_tool(tool, args)
            assert not r.is_error, text_of(r)
            out = json.loads(text_of(r))
            assert out["search_mode"] == "hybrid" and "notes" not in out, out
            return out  # type: ignore[no-any-return]

        found = await search("archival_memory_search", query="feline napping spot", tags=["pets"], top_k=2)
        assert found["results"][0]["id"] == cat and found["results"][0]["ranking"]["fts_rank"] is None
        found = await search("archival_memory_search", query="bird that sings tunes", tags=["pets"], top_k=3)
        assert found["results"][0]["id"] == parrot and found["results"][0]["ranking"]["vector_rank"] == 1
        found = await search("archival_memory_search", query="heating maintenance date", top_k=3)
        assert found["results"][0]["id"] == boiler
        found = await search("conversation_search", query="musical instrument lessons", limit=2)
        assert "cello" in found["results"][0]["content"]
    assert (
        earlier.archive.vectors.missing()["passages"] == 0
        and earlier.archive.store.rows.unembedded_marks("passages") == {}
    )


def test_served_connections_send_without_waiting_for_acks() -> None:
    """The HTTP listening socket says it is TCP, so the event loop turns Nagle off on every connection it accepts:
    otherwise an answer's body (written after its headers) waits for the client's delayed ACK, 40 ms per call."""
    import asyncio

    from tiermem.process.netguard import listen_socket

    async def accepted_nodelay() -> int:
        sock = listen_socket("127.0.0.1", 0)
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            served = writer.get_extra_info("socket")
            seen.set_result(served.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(on_connect, sock=sock)  # as uvicorn serves ``sockets=[sock]``
        async with server:
            _, writer = await asyncio.open_connection(*sock.getsockname())
            nodelay = await asyncio.wait_for(seen, 10)
            writer.close()
        return nodelay

    assert asyncio.run(accepted_nodelay()) != 0
