"""Path-shaped block labels (Letta's MemFS), pinned and detached blocks, completions and client logging,
through a real in-process MCP client on the real server."""

from __future__ import annotations

import anyio
import pytest
from mcp import Client
from mcp.types import PromptReference, ResourceTemplateReference

from tiermem.config import Settings
from tiermem.server import BLOCK_URI

from .conftest import serve_in_process, text_of

pytestmark = pytest.mark.anyio


async def call(c: Client, name: str, **args):  # type: ignore[no-untyped-def]
    return await c.call_tool(name, args)


async def test_path_labels_are_blocks_resources_and_edit_targets(settings: Settings) -> None:
    async with Client(serve_in_process(settings.model_copy(update={"tools": ["all"]})), cache=None) as c:
        r = await call(c, "memory", command="create", path="/memories/system/human/family", file_text="Mum: Ada",
                       description="Family")
        assert not r.is_error, text_of(r)
        uri = "memory://blocks/system/human/family"
        assert uri in {str(x.uri) for x in (await c.list_resources()).resources}
        assert (await c.read_resource(uri)).contents[0].text == "Mum: Ada"
        # every edit tool reaches it by its label; a leading '/' is the same label
        assert text_of(await call(c, "core_memory_append", label="system/human/family", content="Dad: Bob")) == "Mum: Ada\nDad: Bob"
        assert text_of(await call(c, "memory_replace", label="/system/human/family", old_string="Bob", new_string="Rob")).endswith("Rob")
        assert text_of(await call(c, "memory_insert", label="system/human/family", new_string="Sis: Cy", insert_line=0)).startswith("Sis")
        r = await call(c, "memory_apply_patch", label="system/human/family", patch=" Sis: Cy\n-Mum: Ada\n+Mum: Ada L.")
        assert "Mum: Ada L." in text_of(r)
        assert text_of(await call(c, "memory_rethink", label="system/human/family", new_memory="Mum: Ada")) == "Mum: Ada"
        r = await call(c, "memory", command="str_replace", path="/memories/system/human/family", old_str="Ada", new_str="Eve")
        assert text_of(r) == "Mum: Eve"
        assert (await c.read_resource(uri)).contents[0].text == "Mum: Eve"
        view = text_of(await call(c, "core_memory_view"))
        assert "<system/human/family>\n<description>\nFamily\n" in view and "Mum: Eve\n</value>\n</system/human/family>" in view
        # bad labels: a clear error, nothing created
        before = {str(x.uri) for x in (await c.list_resources()).resources}
        for path, problem in [("/memories/a//b", "empty path segment"), ("/memories/a/../b", "'..' segments"),
                              ("/memories/Notes/x", "'N' is not allowed"), ("/memories/" + "a/" * 70 + "b", "at most 128")]:
            r = await call(c, "memory", command="create", path=path, file_text="x")
            assert r.is_error and "Invalid block label" in text_of(r) and problem in text_of(r), text_of(r)
        assert {str(x.uri) for x in (await c.list_resources()).resources} == before


async def test_subscribed_path_block_is_notified(settings: Settings) -> None:
    got: list[str] = []

    async def on_message(message) -> None:  # type: ignore[no-untyped-def]
        uri = getattr(getattr(getattr(message, "root", message), "params", None), "uri", None)
        if uri is not None:
            got.append(str(uri))

    async with Client(serve_in_process(settings), cache=None, mode="legacy", message_handler=on_message) as c:
        await call(c, "memory", command="create", path="/memories/notes/projects", file_text="tiermem")
        await c.subscribe_resource("memory://blocks/notes/projects")
        await call(c, "core_memory_append", label="notes/projects", content="more")
        with anyio.fail_after(10):
            while "memory://blocks/notes/projects" not in got:
                await anyio.sleep(0.01)
