"""Change notifications across processes: a subscriber hears of another process's edit, however soon it comes.

Three real server processes on one data directory: A serves streamable HTTP (a 2026-07-28 client listens on it),
B serves stdio (a legacy client subscribes with ``resources/subscribe``), C serves stdio and edits. Waits are
bounded, never timed asserts; ``python -m bench notify`` measures the latency.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import anyio
import pytest
from mcp import Client

from .conftest import PYTHON, ROOT
from .test_transports import HTTP_TOKEN, free_port, http_target, server_env, stdio_params, wait_for_port

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore:resources/(un)?subscribe is removed")]
HUMAN = "memory://blocks/human"


@pytest.fixture
def http_server(tmp_path: Path):  # type: ignore[no-untyped-def]
    port = free_port()
    proc = subprocess.Popen(
        [PYTHON, "-m", "tiermem", "serve", "--transport", "http", "--port", str(port), "--data-dir", str(tmp_path / "data")],
        cwd=ROOT, env=server_env(tmp_path, TIERMEM_HTTP_TOKEN=HTTP_TOKEN),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        wait_for_port(port, proc)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=20)


async def test_edit_100ms_after_subscribing_reaches_http_and_stdio_subscribers(tmp_path: Path, http_server: int) -> None:
    legacy_heard: list[str] = []

    async def on_message(message) -> None:  # type: ignore[no-untyped-def]
        root = getattr(message, "root", message)
        if getattr(root, "method", None) == "notifications/resources/updated":
            legacy_heard.append(str(root.params.uri))

    async with (
        Client(stdio_params(tmp_path), cache=None) as editor,
        Client(stdio_params(tmp_path), cache=None, mode="legacy", message_handler=on_message) as legacy,
        Client(http_target(f"http://127.0.0.1:{http_server}/mcp"), cache=None) as modern,
    ):
        assert not (await editor.call_tool("core_memory_append", {"label": "human", "content": "first"})).is_error
        for round_ in range(2):  # the second round: after the first subscriptions ended and the watch went idle
            legacy_heard.clear()
            await legacy.subscribe_resource(HUMAN)
            async with modern.listen(resource_subscriptions=[HUMAN]) as sub:
                await anyio.sleep(0.1)
                r = await editor.call_tool("core_memory_append", {"label": "human", "content": f"round {round_}"})
                assert not r.is_error
                with anyio.fail_after(15):  # bounded wait: the watch of each server sees the other process's commit
                    async for event in sub:
                        if getattr(event, "uri", "") == HUMAN:
                            break
                    while HUMAN not in legacy_heard:
                        await anyio.sleep(0.02)
            await legacy.unsubscribe_resource(HUMAN)
            await anyio.sleep(0.3)
        value = (await modern.read_resource(HUMAN)).contents[0].text
        assert "round 1" in value
