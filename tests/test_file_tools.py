"""Letta's filesystem through a real MCP client: the three file tools, open files in core memory, file resources,
tools published with the first folder and withdrawn with the last (hosts told), the instructions."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError

from tiermem.base.config import Settings
from tiermem.domain.factory import open_memory
from tiermem.domain.memory import Memory

from .conftest import serve_in_process, text_of

pytestmark = pytest.mark.anyio

FILE_TOOLS = {"open_files", "grep_files", "semantic_search_files"}
GUIDE = (
    b"# Setup guide\n\nInstall the package first. Then run the server with a data directory.\n"
    b"The lighthouse keeper stores spare batteries in the blue cabinet.\n"
)
CODE = b"def main():\n    return 'TODO: ship it'\n\n\nclass Widget:\n    pass  # TODO tidy\n"


def _prepare(settings: Settings, *, attach: bool = True) -> None:
    """A folder with two files (attached to the default agent, both closed: attached while empty), written by another
    process's memory."""
    memory = open_memory(settings)
    agent = memory.ensure_agent("default")
    memory.files.create_folder("docs", description="Project documents", instructions="Cite the file you read.")
    if attach:
        memory.files.attach(agent.id, "docs")
    memory.files.upload_many("docs", [("guide.md", GUIDE, ""), ("src/app.py", CODE, "")])


async def _call(c: Any, name: str, **args: Any) -> Any:
    return await c.call_tool(name, args)


async def test_the_three_tools_answer_with_lettas_texts(settings: Settings) -> None:
    settings = settings.model_copy(update={"tools": ["default"]})
    _prepare(settings)
    async with Client(serve_in_process(settings), cache=None) as c:
        names = {t.name for t in (await c.list_tools()).tools}
        assert FILE_TOOLS <= names
        opened = await _call(
            c, "open_files", file_requests=[{"file_name": "docs/src/app.py", "offset": 0, "length": 2}]
        )
        assert not opened.is_error and text_of(opened) == "* Opened docs/src/app.py (lines 1-2)"
        again = await _call(c, "open_files", file_requests=[{"file_name": "docs/src/app.py"}])
        assert text_of(again) == "* Opened docs/src/app.py (previously lines 1-2)"
        core = (await c.read_resource("memory://core")).contents[0].text
        assert '<file status="open" name="docs/src/app.py">' in core and "[Viewing file start (out of 4 lines)]" in core
        assert "<instructions>Cite the file you read.</instructions>" in core
        assert '<file status="closed" name="docs/guide.md">' in core

        missing = await _call(c, "open_files", file_requests=[{"file_name": "docs/nope.md"}])
        assert missing.is_error
        assert text_of(missing) == (
            "docs/nope.md not attached - did you get the filename correct? Currently you have "
            "the following files attached: ['docs/guide.md', 'docs/src/app.py']"
        )

        grep = text_of(await _call(c, "grep_files", pattern="todo"))
        assert grep.startswith("Found 2 total matches across 1 files (showing matches 1-2 of 2)")
        assert "=== docs/src/app.py:2 ===" in grep and "> 2:     return 'TODO: ship it'" in grep
        assert grep.endswith("No more matches to show.")
        bad = await _call(c, "grep_files", pattern="(unclosed")
        assert bad.is_error and text_of(bad).startswith("Invalid regex pattern:")

        found = text_of(await _call(c, "semantic_search_files", query="where are the spare batteries", limit=3))
        assert found.startswith("Found ") and "for query: 'where are the spare batteries'" in found
        assert "=== docs/guide.md (passage #1) ===" in found and "blue cabinet" in found

        listed = {str(r.uri) for r in (await c.list_resources()).resources}
        assert {"memory://files/docs/guide.md", "memory://files/docs/src/app.py"} <= listed
        body = (await c.read_resource("memory://files/docs/guide.md")).contents[0].text
        assert "lighthouse keeper" in body
        for uri, what in (("memory://files/", "no file"), ("memory://files/docs", "a folder, not a file")):
            with pytest.raises(MCPError) as refused:
                await c.read_resource(uri)
            assert refused.value.error.message == (
                f"The URI names {what}: a file's URI is memory://files/<folder>/<file>, e.g. "
                "memory://files/docs/README.md (resources/list lists the attached files)."
            )


async def test_an_argument_error_of_open_files_gives_an_example_that_is_a_valid_call(settings: Settings) -> None:
    _prepare(settings)
    async with Client(serve_in_process(settings), cache=None) as c:
        for bad in ([{"file_name": "docs/guide.md", "offset": 1.5}], [{"offset": 0}]):
            r = await _call(c, "open_files", file_requests=bad)
            assert r.is_error, text_of(r)
            example = json.loads(text_of(r).rsplit("Example: ", 1)[1].removesuffix("."))
            assert example == {"file_requests": [{"file_name": "docs/README.md", "offset": 0, "length": 50}]}
        r = await _call(c, "open_files", file_requests=[dict(example["file_requests"][0], file_name="docs/guide.md")])
        assert not r.is_error and text_of(r) == "* Opened docs/guide.md (lines 1-50)"


async def test_attaching_a_folder_opens_its_first_files_as_letta(settings: Settings) -> None:
    """Letta's attach_folder_to_agent inserts the folder's files into the context window: the first
    ``max_files_open`` in upload order open (from their start), the rest closed; files of another folder stay open
    only while there is room. Attaching it again changes only the limits (how tiermem sets them)."""
    from tiermem.domain.file_views import OpenRequest
    from tiermem.domain.filesystem import render_agent_directories

    memory = open_memory(settings)
    agent = memory.ensure_agent("default")
    memory.files.create_folder("old")
    memory.files.upload_many("old", [("o.txt", b"old one\n", "")])
    memory.files.create_folder("f")
    for i in (3, 1, 2, 0):  # uploaded out of name order: the upload order decides
        memory.files.upload_many("f", [(f"n{i}.txt", f"note {i}\n".encode(), "")])
    memory.files.attach(agent.id, "old", max_files_open=3)
    assert {v.name for v in memory.files.state(agent.id).files if v.is_open} == {"old/o.txt"}
    memory.files.attach(agent.id, "f")
    core = render_agent_directories(memory.core.get_agent(agent.id))
    assert "- current_files_open=3\n" in core
    for name in ("f/n3.txt", "f/n1.txt", "f/n2.txt"):
        assert f'<file status="open" name="{name}">' in core
    assert '<file status="closed" name="f/n0.txt">' in core and '<file status="closed" name="old/o.txt">' in core
    assert "[Viewing file start (out of 1 lines)]\n1: note 3" in core
    memory.open_files(agent.id, [OpenRequest("f/n0.txt", None, None)], close_all_others=True)
    memory.files.attach(agent.id, "f", max_files_open=2)  # again: the limit changes, the open files stay
    assert {v.name for v in memory.files.state(agent.id).files if v.is_open} == {"f/n0.txt"}


async def test_opening_past_the_limit_closes_the_least_recently_used(settings: Settings) -> None:
    memory = open_memory(settings)
    agent = memory.ensure_agent("default")
    memory.files.create_folder("notes")
    memory.files.attach(agent.id, "notes", max_files_open=2)  # while empty: every file starts closed
    memory.files.upload_many("notes", [(f"n{i}.txt", f"note {i}\n".encode(), "") for i in range(4)])
    from tiermem.domain.file_views import OpenRequest

    assert memory.open_files(agent.id, [OpenRequest("notes/n0.txt", None, None)]) == "* Opened notes/n0.txt"
    memory.open_files(agent.id, [OpenRequest("notes/n1.txt", None, None)])
    result = memory.open_files(agent.id, [OpenRequest("notes/n2.txt", None, None)])
    assert result == (
        "* Opened notes/n2.txt\nNote: Closed 1 least recently used file(s) due to open file limit: notes/n0.txt"
    )
    opened = {v.name for v in memory.files.state(agent.id).files if v.is_open}
    assert opened == {"notes/n1.txt", "notes/n2.txt"}
    both = memory.open_files(agent.id, [OpenRequest("notes/n3.txt", None, None)], close_all_others=True)
    assert "Note: Closed 2 file(s) due to close_all_others=True: notes/n1.txt, notes/n2.txt" in both
    with pytest.raises(Exception, match="Cannot open 3 files: exceeds configured maximum limit of 2 files"):
        memory.open_files(agent.id, [OpenRequest(f"notes/n{i}.txt", None, None) for i in range(3)])
    assert {v.name for v in memory.files.state(agent.id).files if v.is_open} == {"notes/n3.txt"}  # unchanged


async def test_the_closed_note_names_only_the_files_the_call_leaves_closed(settings: Settings) -> None:
    """Three open of three; opening [n3, n0, n1] closes n2 alone: n0 and n1 (open before and after) are not named
    as closed (Letta closes after each request and names them too), and their earlier windows are reported."""
    from tiermem.domain.file_views import OpenRequest

    memory = open_memory(settings)
    agent = memory.ensure_agent("default")
    memory.files.create_folder("f")
    memory.files.attach(agent.id, "f", max_files_open=3)  # while empty: every file starts closed
    memory.files.upload_many("f", [(f"n{i}.txt", f"note {i}\n".encode(), "") for i in range(4)])
    for i in range(3):
        memory.open_files(agent.id, [OpenRequest(f"f/n{i}.txt", None, None)])
    result = memory.open_files(agent.id, [OpenRequest(f"f/n{i}.txt", None, None) for i in (3, 0, 1)])
    assert result == (
        "* Opened 3 files: f/n3.txt, f/n0.txt (previously full file), f/n1.txt (previously full file)\n"
        "Note: Closed 1 least recently used file(s) due to open file limit: f/n2.txt"
    )
    assert {v.name for v in memory.files.state(agent.id).files if v.is_open} == {"f/n0.txt", "f/n1.txt", "f/n3.txt"}


async def test_an_open_empty_file_takes_no_open_file_slot(settings: Settings) -> None:
    """Letta renders an open empty file closed and leaves it out of ``current_files_open``; the open file limit does
    not count it either, so the numbers agree: opening two more files under a limit of two closes nothing."""
    from tiermem.domain.file_views import OpenRequest
    from tiermem.domain.filesystem import render_agent_directories

    memory = open_memory(settings)
    agent = memory.ensure_agent("default")
    memory.files.create_folder("f")
    memory.files.attach(agent.id, "f", max_files_open=2)  # while empty: every file starts closed
    memory.files.upload_many("f", [("empty.txt", b"", ""), ("a.txt", b"a\n", ""), ("b.txt", b"b\n", "")])
    opened = memory.open_files(agent.id, [OpenRequest("f/empty.txt", None, None), OpenRequest("f/a.txt", None, None)])
    assert opened == "* Opened 2 files: f/empty.txt, f/a.txt"
    assert memory.open_files(agent.id, [OpenRequest("f/b.txt", None, None)]) == "* Opened f/b.txt"
    core = render_agent_directories(memory.core.get_agent(agent.id))
    assert "- current_files_open=2\n" in core
    assert '<file status="open" name="f/a.txt">' in core and '<file status="open" name="f/b.txt">' in core
    assert '<file status="closed" name="f/empty.txt">' in core


async def test_file_tools_come_with_the_first_folder_and_hosts_are_told(settings: Settings) -> None:
    settings = settings.model_copy(update={"tools": ["default"], "watch_seconds": 0.2})
    _prepare(settings, attach=False)
    received: list[str] = []

    async def handler(message: Any) -> None:
        root = getattr(message, "root", message)
        method = getattr(root, "method", None)
        if method:
            params = getattr(root, "params", None)
            received.append(method)
            if getattr(params, "uri", None):
                received.append(f"{method} {params.uri}")

    async with Client(serve_in_process(settings), cache=None, mode="legacy", message_handler=handler) as c:
        assert not FILE_TOOLS & {t.name for t in (await c.list_tools()).tools}
        refused = await _call(c, "open_files", file_requests=[{"file_name": "docs/guide.md"}])
        assert refused.is_error and "No folder is attached" in text_of(refused)
        await c.subscribe_resource("memory://core")  # the watch runs while someone listens
        other = open_memory(settings)  # another process attaches the folder (`tiermem folders attach docs`)
        other.files.attach(other.ensure_agent("default").id, "docs")
        with anyio.fail_after(10):
            while "notifications/tools/list_changed" not in received:
                await anyio.sleep(0.05)
        assert FILE_TOOLS <= {t.name for t in (await c.list_tools()).tools}
        core = (await c.read_resource("memory://core")).contents[0].text
        assert '<directory name="docs">' in core
        await c.subscribe_resource("memory://files/docs/guide.md")
        other.files.upload("docs", "guide.md", GUIDE + b"The cabinet moved to the attic.\n")  # the file changes
        with anyio.fail_after(10):
            while "notifications/resources/updated memory://files/docs/guide.md" not in received:
                await anyio.sleep(0.05)
        assert "moved to the attic" in (await c.read_resource("memory://files/docs/guide.md")).contents[0].text
        other.files.detach(other.ensure_agent("default").id, "docs")
        with anyio.fail_after(10):
            while received.count("notifications/tools/list_changed") < 2:
                await anyio.sleep(0.05)
        assert not FILE_TOOLS & {t.name for t in (await c.list_tools()).tools}


async def test_a_client_that_subscribes_to_nothing_hears_the_file_tools_come_and_go(settings: Settings) -> None:
    """Most hosts subscribe to no resource: a client that only listed the tools is told all the same when another
    process attaches the agent's first folder or detaches its last (``tools/list_changed``)."""
    settings = settings.model_copy(update={"tools": ["default"]})
    _prepare(settings, attach=False)
    received: list[str] = []

    async def handler(message: Any) -> None:
        method = getattr(getattr(message, "root", message), "method", None)
        if method:
            received.append(method)

    async with Client(serve_in_process(settings), cache=None, mode="legacy", message_handler=handler) as c:
        assert not FILE_TOOLS & {t.name for t in (await c.list_tools()).tools}
        await _call(c, "memory_open", label="human")  # the memory is open
        other = open_memory(settings)  # another process attaches the folder (`tiermem folders attach docs`)
        other.files.attach(other.ensure_agent("default").id, "docs")
        with anyio.fail_after(20):
            while "notifications/tools/list_changed" not in received:
                await anyio.sleep(0.05)
        assert FILE_TOOLS <= {t.name for t in (await c.list_tools()).tools}
        other.files.detach(other.ensure_agent("default").id, "docs")
        with anyio.fail_after(20):
            while received.count("notifications/tools/list_changed") < 2:
                await anyio.sleep(0.05)
        assert not FILE_TOOLS & {t.name for t in (await c.list_tools()).tools}
        assert "notifications/resources/updated" not in received  # it asked for no resource


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_file_subscriber_hears_of_another_processs_change_on_either_handshake(
    settings: Settings, mode: str
) -> None:
    """A client subscribed to a file resource is told when another process changes the file: a legacy client by
    ``resources/subscribe``, one on the current protocol (``mode="auto"``) by its ``subscriptions/listen`` stream."""
    settings = settings.model_copy(update={"tools": ["default"], "watch_seconds": 0.2})
    _prepare(settings)
    uri = "memory://files/docs/guide.md"
    received, handler = _uris_heard()

    other = open_memory(settings)  # another process re-uploads the file (`tiermem folders sync`)
    async with Client(serve_in_process(settings), cache=None, mode=mode, message_handler=handler) as c:
        if mode == "legacy":
            await c.subscribe_resource(uri)
            other.files.upload("docs", "guide.md", GUIDE + b"The cabinet moved to the attic.\n")
            with anyio.fail_after(10):
                while uri not in received:
                    await anyio.sleep(0.05)
        else:
            async with c.listen(resource_subscriptions=[uri]) as sub:
                other.files.upload("docs", "guide.md", GUIDE + b"The cabinet moved to the attic.\n")
                with anyio.fail_after(10):
                    async for event in sub:
                        if getattr(event, "uri", "") == uri:
                            break
        assert "moved to the attic" in (await c.read_resource(uri)).contents[0].text


def _uris_heard() -> tuple[list[str], Callable[[Any], Awaitable[None]]]:
    """A client's message handler that keeps the URI of each notification it hears, and the list it keeps them in."""
    received: list[str] = []

    async def handler(message: Any) -> None:
        params = getattr(getattr(message, "root", message), "params", None)
        if getattr(params, "uri", None):
            received.append(str(params.uri))

    return received, handler


async def test_a_file_subscriber_hears_only_of_its_files_changes(settings: Settings) -> None:
    """A client subscribed to two files is told of a change of one only through that one's URI: another process's
    re-upload of docs/src/app.py reaches its subscribers, not those of docs/guide.md (whose update, sorted first,
    would have come before it); the client's own open_files changes core memory, not a file's content: no file's
    subscribers hear of it."""
    settings = settings.model_copy(update={"tools": ["default"], "watch_seconds": 0.2})
    _prepare(settings)
    guide, app = "memory://files/docs/guide.md", "memory://files/docs/src/app.py"
    received, handler = _uris_heard()

    other = open_memory(settings)  # another process re-uploads a file (`tiermem folders sync`)
    async with Client(serve_in_process(settings), cache=None, mode="legacy", message_handler=handler) as c:
        for uri in ("memory://core", guide, app):
            await c.subscribe_resource(uri)
        opened = await _call(c, "open_files", file_requests=[{"file_name": "docs/src/app.py"}])
        assert not opened.is_error and "memory://core" in received, received  # told before the call's answer
        assert not [uri for uri in received if uri.startswith("memory://files/")], received
        other.files.upload("docs", "src/app.py", CODE + b"# shipped\n")
        with anyio.fail_after(10):
            while app not in received:
                await anyio.sleep(0.05)
        assert guide not in received, received
        assert "# shipped" in (await c.read_resource(app)).contents[0].text


async def test_a_file_subscribed_while_a_publish_is_on_its_way_hears_of_the_change_it_takes_in(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A publish of the files (after the client's open_files) is on its way to its look when the client subscribes
    to docs/src/app.py and another process re-uploads that file: the look takes the new version in, and tells the
    new subscriber now (the subscribed files are read with the look); taken for the baseline unseen, the change
    would look unchanged at every later publish."""
    settings = settings.model_copy(update={"tools": ["default"], "watch_seconds": 3600})
    _prepare(settings)
    guide, app = "memory://files/docs/guide.md", "memory://files/docs/src/app.py"
    received, handler = _uris_heard()

    other = open_memory(settings)  # another process re-uploads a file (`tiermem folders sync`)
    server = serve_in_process(settings)
    notifier = server.runtime.notifier
    async with Client(server, cache=None, mode="legacy", message_handler=handler) as c:
        for uri in ("memory://core", guide):
            await c.subscribe_resource(uri)
        real = notifier._files_changed
        armed = [True]

        def racing(*args: Any, **kwargs: Any) -> Any:  # in the publish's worker thread, before its look
            if armed.pop() if armed else False:
                anyio.from_thread.run(c.subscribe_resource, app)
                other.files.upload("docs", "src/app.py", CODE + b"# shipped\n")
            return real(*args, **kwargs)

        monkeypatch.setattr(notifier, "_files_changed", racing)
        opened = await _call(c, "open_files", file_requests=[{"file_name": "docs/guide.md"}])
        assert not opened.is_error and not armed
        assert app in received and guide not in received, received  # told before the call's answer


async def test_a_search_of_the_files_notifies_no_one(settings: Settings) -> None:
    """grep_files and semantic_search_files are reads: their touch of an open file (its access time, which only the
    choice of which file to close reads) tells no client anything, neither the caller nor, through the watch, a client
    of another process; a block edit after them is the only change heard."""
    settings = settings.model_copy(update={"tools": ["default"]})
    _prepare(settings)
    received: list[str] = []

    async def handler(message: Any) -> None:
        root = getattr(message, "root", message)
        method, uri = getattr(root, "method", None), getattr(getattr(root, "params", None), "uri", None)
        if method:
            received.append(f"{method} {uri}" if uri else method)

    server_a, server_b = serve_in_process(settings), serve_in_process(settings)
    async with (
        Client(server_a, cache=None, mode="legacy", message_handler=handler) as a,
        Client(server_b, cache=None, mode="legacy") as b,
    ):
        await _call(a, "open_files", file_requests=[{"file_name": "docs/guide.md"}])
        await a.subscribe_resource("memory://core")
        await a.subscribe_resource("memory://files/docs/guide.md")
        received.clear()
        for c in (a, b):  # in this process (the caller) and in another (heard through the watch)
            assert "lighthouse" in text_of(await _call(c, "grep_files", pattern="lighthouse"))
            assert not (await _call(c, "semantic_search_files", query="spare batteries")).is_error
        assert received == []
        await _call(b, "memory_insert", label="human", new_string="Keeps the lighthouse.")
        with anyio.fail_after(20):
            while "notifications/resources/updated memory://core" not in received:
                await anyio.sleep(0.05)
        assert not [r for r in received if "list_changed" in r or "memory://files/" in r], received


async def test_the_instructions_carry_open_files_within_the_hosts_budget(settings: Settings) -> None:
    _prepare(settings)
    memory = open_memory(settings)
    from tiermem.domain.file_views import OpenRequest

    memory.files.upload("docs", "big.txt", ("A long line of the big file.\n" * 200).encode())
    memory.open_files(
        memory.ensure_agent("default").id,
        [OpenRequest("docs/guide.md", None, None), OpenRequest("docs/big.txt", None, None)],
    )
    async with Client(serve_in_process(settings), cache=None) as c:
        told = c.instructions or ""
    assert "<directories>" in told and "lighthouse keeper" in told
    from tiermem.domain import briefing

    agent = memory.ensure_agent("default")
    short = briefing.instructions(
        memory.blocks(agent.id),
        ["open_files"],
        2048,
        editors=["memory_replace"],
        directories=memory.directory_texts(agent.id),
    )
    assert len(short) <= 2048 and "Folders attached: docs (3 files; open: docs/big.txt, docs/guide.md)" in short


async def test_the_agent_loop_opens_a_file_and_sees_it_in_its_system_prompt(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Letta's loop: the model calls open_files; the next request's core memory shows the window (Letta's defaults
    for the model's context window: 10 files, 40,000 characters at 200k)."""
    from . import fake_anthropic as fa
    from .test_agent import agent_settings, build, chat

    _prepare(settings.model_copy(update={"tools": ["default"]}))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-not-a-real-key")
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    with fa.FakeAnthropic() as fake:
        fake.add(
            fa.tool("open_files", {"file_requests": [{"file_name": "docs/guide.md"}]}, say="Reading."),
            fa.text("The batteries are in the blue cabinet."),
        )
        async with Client(build(agent_settings(settings, fake, tools=["default"])), cache=None) as c:
            reply, info, is_error = await chat(c, "Where are the spare batteries?")
        assert not is_error and reply == "The batteries are in the blue cabinet."
        first, second = fake.requests
        assert "open_files" in [t["name"] for t in first["tools"]]
        assert '<file status="closed" name="docs/guide.md">' in first["system"][1]["text"]
        core = second["system"][1]["text"]
        assert '<file status="open" name="docs/guide.md">' in core and "- max_files_open=10" in core
        assert "- chars_limit=40000" in core and "The lighthouse keeper stores spare batteries" in core


def test_doctor_names_files_an_interrupted_upload_left_unfinished(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    from dataclasses import replace

    from tiermem.domain.archive_files import file_row
    from tiermem.domain.maintenance import doctor

    _prepare(settings)
    memory = open_memory(settings)
    guide = next(f for f in memory.files.files("docs") if f.name == "guide.md")
    text = memory.files.text("docs", "guide.md")
    # what a process killed between a file's row and its chunks leaves: the row, status "embedding"
    memory.archive.files.store.rows.upsert_rows("files", "id", [file_row(replace(guide, status="embedding"), text)])
    agent = memory.ensure_agent("default").id
    found = memory.semantic_search_files(agent, "spare batteries blue cabinet", 5)
    assert "guide.md" not in found  # an unfinished file is not searched
    assert doctor(settings) == 1
    out = capsys.readouterr().out
    assert "1 left unfinished by an interrupted upload: docs/guide.md" in out and "tiermem folders upload" in out
    memory.files.upload("docs", "guide.md", GUIDE + b"\n")  # uploading it again finishes it
    assert doctor(settings) == 0


def test_semantic_search_cut_to_the_token_budget_says_so(settings: Settings) -> None:
    """semantic_search_files(limit=50) returned a dozen passages with no word of why (the search cut them to
    search_token_budget and its note was dropped): the answer says how many fit, the limit asked and how to get
    more; a search within the budget has no note."""
    settings = settings.model_copy(update={"search_token_budget": 1500})
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    memory.files.create_folder("reports")
    memory.files.attach(agent, "reports")
    body = [(f"r{i:02d}.txt", (f"Report {i} about the harbour project budget. " * 30).encode(), "") for i in range(30)]
    memory.files.upload_many("reports", body)
    text = memory.semantic_search_files(agent, "harbour project budget", 50)
    shown = text.count("(passage #")
    assert 0 < shown < 30, text
    assert text.startswith(f"Found {shown} semantic matches")
    assert text.endswith(
        f"\n\nNote: Only the best {shown} passage(s) fit the 1,500-token search budget, so fewer than the limit of "
        "50 are shown; narrow the query to find other passages, or raise the search_token_budget setting "
        "(TIERMEM_SEARCH_TOKEN_BUDGET) to get more in one search."
    )
    small = memory.semantic_search_files(agent, "harbour project budget", 2)
    assert small.count("(passage #") == 2 and "Note:" not in small


def test_credentials_in_an_uploaded_file_are_redacted_before_storing(settings: Settings) -> None:
    key = "AKIA" + "QX7TRW2KD9LMZ4PB"
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    memory.files.create_folder("ops")
    body = f"Deploy notes\nexport AWS_ACCESS_KEY_ID={key}\nThen run the deploy script.\n".encode()
    done = memory.files.upload("ops", "deploy.md", body)
    assert done.outcome == "added"
    stored = memory.files.text("ops", "deploy.md")
    assert key not in stored and "[redacted: AWS access key]" in stored and "Then run the deploy script." in stored
    memory.files.attach(agent, "ops")
    assert memory.grep_files(agent, key, None, 1, None).startswith("No matches found")
    assert memory.files.upload("ops", "deploy.md", body).outcome == "unchanged"  # same bytes: nothing re-read


def test_a_file_being_written_again_keeps_its_view_and_opens(memory: Memory) -> None:
    """Between the two commits of another process's re-sync of a file (its row with the new text, status
    "embedding"; then "completed") the agent's reads still find it: its open window is neither dropped nor closed
    for good, ``open_files`` opens it (never "not attached" while listing it), and the finished file shows open."""
    import hashlib
    from dataclasses import replace

    from tiermem.domain.archive_files import file_row
    from tiermem.domain.file_views import OpenRequest
    from tiermem.domain.filesystem import render_agent_directories

    agent = memory.ensure_agent("default").id
    memory.files.create_folder("docs")
    memory.files.attach(agent, "docs")  # while empty: attaching opens a folder's first files (as Letta's)
    memory.files.upload_many("docs", [("f3.md", b"# file 3\nline one of file 3\n", ""), ("g.md", b"other\n", "")])
    assert memory.open_files(agent, [OpenRequest("docs/f3.md", None, None)]) == "* Opened docs/f3.md"
    f3 = next(f for f in memory.files.files("docs") if f.name == "f3.md")
    new = "# file 3 again\nline one of file 3, changed\n"
    pending = replace(f3, status="embedding", sha256=hashlib.sha256(new.encode()).hexdigest())
    memory.archive.files.store.rows.upsert_rows("files", "id", [file_row(pending, new)])  # the sync's first commit

    assert "changed" in memory.grep_files(agent, "line one", None, 1, None)  # its stored text is read
    core = render_agent_directories(memory.core.get_agent(agent))
    assert '<file status="open" name="docs/f3.md">' in core and "changed" in core
    assert memory.open_files(agent, [OpenRequest("docs/f3.md", 0, 1)]).startswith("* Opened docs/f3.md")
    assert "f3.md" not in memory.semantic_search_files(agent, "file 3 changed", 5)  # not searched until finished

    assert memory.files.upload("docs", "f3.md", new.encode()).outcome == "updated"  # the sync finishes it
    core = render_agent_directories(memory.core.get_agent(agent))
    assert '<file status="open" name="docs/f3.md">' in core and "# file 3 again" in core


def test_a_window_past_the_end_of_a_shortened_file_shows_its_start_and_says_so(settings: Settings) -> None:
    """An open window whose first line a changed file no longer has is cut again from the file's start; its stored
    lines follow (they said 4-5 over a view of the start): the next open_files' "previously ..." and an agent file's
    ``files_agents`` tell the window the agent saw."""
    from tiermem.domain.file_views import OpenRequest
    from tiermem.interop.af_export import export_agent_files

    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    memory.files.create_folder("docs")
    memory.files.attach(agent, "docs")
    memory.files.upload("docs", "a.txt", b"one\ntwo\nthree\nfour\nfive\n")
    assert memory.open_files(agent, [OpenRequest("docs/a.txt", 3, 2)]).startswith("* Opened docs/a.txt (lines 4-5)")
    memory.files.upload("docs", "a.txt", b"one\n")  # the file now ends before the window starts

    view = memory.files.state(agent).view("docs/a.txt")
    assert view is not None and view.is_open
    assert view.visible == "[Viewing file start (out of 1 lines)]\n1: one"
    assert (view.start_line, view.end_line) == (None, None)
    data, _ = export_agent_files(memory, ["default"])
    exported = data["agents"][0]["files_agents"][0]
    assert (exported["start_line"], exported["end_line"]) == (None, None)
    assert exported["visible_content"].startswith("[Viewing file start")
    assert memory.open_files(agent, [OpenRequest("docs/a.txt")]) == "* Opened docs/a.txt (previously full file)"
