"""server/tenants.py: one MCP server per agent signed-in users use, started on first use, stopped when idle (never
while a request or stream of it is open) and at shutdown. The agents' apps here are small Starlette apps that
record their lifespans; the real ones (and the guard that names the agent) are tests/test_oauth.py's."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from tiermem.server.tenants import TenantApps

pytestmark = pytest.mark.anyio


class Recorder:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.hold = anyio.Event()

    def build(self, agent: str) -> Starlette:
        @asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            self.events.append(f"start {agent}")
            yield
            self.events.append(f"stop {agent}")

        async def hello(request: Request) -> PlainTextResponse:
            if request.query_params.get("hold"):
                await self.hold.wait()
            return PlainTextResponse(agent)

        return Starlette(routes=[Route("/", hello)], lifespan=lifespan)


async def default(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            kind = message["type"].rsplit(".", 1)[-1]
            await send({"type": f"lifespan.{kind}.complete"})
            if kind == "shutdown":
                return
    await PlainTextResponse("default")(scope, receive, send)


async def test_started_on_first_use_stopped_when_idle_and_at_shutdown() -> None:
    recorder = Recorder()
    apps = TenantApps(default, recorder.build, idle_seconds=0)  # idle at once: every new agent sweeps the others

    async def named(scope: Any, receive: Any, send: Any) -> None:  # the guard's part: the agent in the scope
        for key, value in scope.get("headers", []):
            if key == b"x-agent":
                scope["tiermem.agent"] = value.decode()
        await apps(scope, receive, send)

    to_lifespan, lifespan_in = anyio.create_memory_object_stream[dict[str, Any]](4)
    lifespan_out, from_lifespan = anyio.create_memory_object_stream[dict[str, Any]](4)
    async with anyio.create_task_group() as tg:
        tg.start_soon(apps, {"type": "lifespan"}, lifespan_in.receive, lifespan_out.send)
        await to_lifespan.send({"type": "lifespan.startup"})
        assert (await from_lifespan.receive())["type"] == "lifespan.startup.complete"
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=named), base_url="http://t")

        async def get(agent: str | None, **params: str) -> str:
            headers = {"x-agent": agent} if agent else {}
            return (await client.get("/", headers=headers, params=params)).text

        assert await get(None) == "default"
        assert await get("a") == "a" and await get("a") == "a"
        assert recorder.events == ["start a"]  # one server for agent a, started once
        assert await get("b") == "b"
        assert recorder.events == ["start a", "stop a", "start b"]  # a was idle: stopped when b started
        assert apps.serving == ["b"]
        # a request in flight keeps its agent's server: c holds one while d starts
        async with anyio.create_task_group() as held:
            held.start_soon(functools.partial(get, "c", hold="1"))
            with anyio.fail_after(10):
                while "start c" not in recorder.events:
                    await anyio.sleep(0.01)
            await anyio.sleep(0.05)  # c's request is inside its app now
            assert await get("d") == "d"
            assert "stop c" not in recorder.events and apps.serving == ["c", "d"]
            recorder.hold.set()
        assert await get("a") == "a"  # started again on its next request; c and d were idle by then
        assert apps.serving == ["a"]
        await to_lifespan.send({"type": "lifespan.shutdown"})
        assert (await from_lifespan.receive())["type"] == "lifespan.shutdown.complete"
        await client.aclose()
    starts = [e for e in recorder.events if e.startswith("start")]
    stops = [e for e in recorder.events if e.startswith("stop")]
    assert sorted(s.split()[1] for s in starts) == sorted(s.split()[1] for s in stops)  # every server ended
