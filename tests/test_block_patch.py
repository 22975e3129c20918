"""memory_apply_patch as Letta's: a patch of '+' lines appends, and a multi-block patch's ``*** Update Block:``,
``*** Add Block:`` and ``*** Move to:`` headers name the blocks it changes (all of it, or nothing), through a real MCP
client; the planning and undoing parts on a real Memory."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp import Client

from tiermem.base.config import BlockSpec, Settings
from tiermem.base.errors import ConflictError, EditError, LabelTakenError
from tiermem.domain import block_patch
from tiermem.domain import blocks as rules
from tiermem.server.registry import edited_labels

from .conftest import serve_in_process, text_of

GHP = "ghp_" + "R8kT2mVx9QbL4nZc7Yw1Hd5Jf3Ps6Ge0Aa12"


async def _call(c: Client, **args: Any) -> tuple[str, bool]:
    r = await c.call_tool("memory_apply_patch", args)
    return text_of(r), bool(r.is_error)


async def _blocks(c: Client) -> dict[str, dict[str, Any]]:
    view = (await c.call_tool("core_memory_view", {})).structured_content
    assert view is not None
    return {b["label"]: b for b in view["blocks"]}


@pytest.mark.anyio
async def test_update_block_header_patches_the_block_it_names(settings: Settings) -> None:
    async with Client(serve_in_process(settings), cache=None) as c:
        await c.call_tool("memory_open", {"label": "human"})  # a rethink needs a view first (sessionless)
        await c.call_tool("memory_rethink", {"label": "human", "new_memory": "status: open"})
        await c.call_tool("memory", {"command": "create", "path": "/memories/project", "file_text": "status: open"})
        # the label argument is not what Letta patches: the header names the block
        text, failed = await _call(
            c, label="human", patch="*** Update Block: project\n@@\n-status: open\n+status: closed"
        )
        assert not failed, text
        assert (
            text
            == "Successfully applied memory patch operations.\n\nOperations completed:\n- Updated memory block 'project'"
        )
        blocks = await _blocks(c)
        assert blocks["project"]["value"] == "status: closed"
        assert blocks["human"]["value"] == "status: open" and blocks["human"]["version"] == 2
        hist = json.loads(text_of(await c.call_tool("memory_history", {"label": "project", "limit": 1})))
        assert hist["versions"][0]["operation"] == "memory_apply_patch"


@pytest.mark.anyio
async def test_multi_block_add_update_and_move(settings: Settings) -> None:
    async with Client(serve_in_process(settings), cache=None) as c:
        await c.call_tool("memory_open", {"label": "human"})  # a rethink needs a view first (sessionless)
        await c.call_tool("memory_rethink", {"label": "human", "new_memory": "Name: Ada\n\nLikes tea"})
        patch = (
            "*** Begin Patch\n"
            "*** Update Block: human\n"
            "@@\n"
            " Name: Ada\n"
            "\n"  # a blank line inside a hunk is an empty context line
            "-Likes tea\n"
            "+Likes mint tea\n"
            "*** Add Block: ideas\n"
            "Description: things to try\n"
            "+first idea\n"
            "\n"
            "+second idea\n"
            "*** Update Block: persona\n"
            "+I keep notes.\n"  # only '+' lines: appended to the end
            "*** Move to: notes/persona\n"
            "*** End Patch\n"
        )
        text, failed = await _call(c, label="", patch=patch)
        assert not failed, text
        assert text.endswith(
            "- Updated memory block 'human'\n- Created memory block 'ideas'\n- Updated memory block 'persona'\n"
            "- Renamed memory block 'persona' to 'notes/persona'"
        )
        blocks = await _blocks(c)
        assert blocks["human"]["value"] == "Name: Ada\n\nLikes mint tea"
        assert blocks["ideas"]["value"] == "first idea\n\nsecond idea"
        assert blocks["ideas"]["description"] == "things to try"
        assert "persona" not in blocks and blocks["notes/persona"]["value"].endswith("\nI keep notes.")
        # an added block renamed in the same patch is created under its final label; an added one can be patched
        text, failed = await _call(
            c, label="", patch="*** Add Block: a\n+one\n*** Move to: b\n*** Update Block: b\n-one\n+two"
        )
        assert not failed, text
        blocks = await _blocks(c)
        assert "a" not in blocks and blocks["b"]["value"] == "two" and blocks["b"]["version"] == 1
        # an update with a Move to and no hunks is a rename alone: the value and its version stay as they were
        text, failed = await _call(c, label="", patch="*** Update Block: human\n*** Move to: people/ada\n")
        assert (text, failed) == (
            "Successfully applied memory patch operations.\n\nOperations completed:\n"
            "- Renamed memory block 'human' to 'people/ada'",
            False,
        )
        blocks = await _blocks(c)
        assert "human" not in blocks and blocks["people/ada"]["value"] == "Name: Ada\n\nLikes mint tea"
        # without a Move to (or moved to its own label), an update without hunks still has nothing to do
        for patch in ("*** Update Block: b\n", "*** Update Block: b\n*** Move to: b"):
            text, failed = await _call(c, label="", patch=patch)
            assert failed and text.startswith(rules.NO_HUNKS), (patch, text)


@pytest.mark.anyio
async def test_a_failing_multi_block_patch_changes_nothing(settings: Settings) -> None:
    locked = BlockSpec(label="locked", value="fixed", read_only=True)
    settings = settings.model_copy(update={"default_blocks": [*settings.default_blocks, locked]})
    async with Client(serve_in_process(settings), cache=None) as c:
        await c.call_tool("memory_open", {"label": "human"})  # a rethink needs a view first (sessionless)
        await c.call_tool("memory_rethink", {"label": "human", "new_memory": "status: open"})
        await c.call_tool("memory", {"command": "create", "path": "/memories/small", "file_text": "x"})
        before = await _blocks(c)
        good = "*** Add Block: fresh\n+new\n*** Update Block: human\n-status: open\n+status: closed\n"
        cases = [
            (good + "*** Update Block: small\n-nope\n+y", "expected hunk context not found in the memory block"),
            (good + "*** Update Block: gone\n-x\n+y", "Error: Memory block 'gone' does not exist. Blocks that exist:"),
            (good + "*** Add Block: small\n+z", "Error: Memory block 'small' already exists"),
            (good + "*** Update Block: small\n-x\n+" + "y" * 6000, "Edit failed: Exceeds 5000 character limit"),
            (good + f"*** Update Block: small\n-x\n+token {GHP}", "GitHub"),
            (good + "*** Update Block: small\n-x\n+y\n*** Move to: human", "A block labelled 'human' already exists"),
            (good + "*** Delete Block: small", "'*** Delete Block: small': memory_apply_patch does not delete blocks"),
            (good + "*** Update Block:  \n-x\n+y", "*** Update Block: must specify a non-empty label"),
            (good + "*** Add Block: bad//label\n+x", "Invalid block label 'bad//label'"),
            ("*** Move to: elsewhere\n" + good, "*** Move to: must follow an Add/Update/Delete header"),
            ("-status: open\n+status: shut\n" + good, "comes before the first '*** Update Block:'"),
            ("*** Add Block: fresh\nnot a plus line\n", "does not start with '+'"),
            (good + "*** Update Block: small\n", "No applicable hunks found in patch."),
            (good + "*** Update Block: small\n 1→ x\n+y", "Patch contains a line number prefix"),
            # a '+' line's number is its text's: refused as memory_insert refuses it, in added blocks too
            (good + "*** Update Block: small\n-x\n+1→ y", "Patch contains a line number prefix, which is not allowed."),
            (good + "*** Add Block: numbered\n+2→ y", "Patch contains a line number prefix"),
        ]
        for patch, expected in cases:
            text, failed = await _call(c, label="small", patch=patch)
            assert failed and expected in text, (patch, text)
            assert await _blocks(c) == before, patch
        # a read-only block stays as it is
        for patch in (
            good + "*** Update Block: locked\n-fixed\n+loose",
            good + "*** Update Block: locked\n*** Move to: x",
        ):
            text, failed = await _call(c, label="", patch=patch)
            assert failed and rules.READ_ONLY_ERROR in text, text
            assert "no block was changed" in text
            assert await _blocks(c) == before


@pytest.mark.anyio
async def test_single_block_patches_as_letta_applies_them(settings: Settings) -> None:
    async with Client(serve_in_process(settings), cache=None) as c:
        await c.call_tool("memory", {"command": "create", "path": "/memories/empty"})
        # only '+' lines append (an empty block gets no leading blank line)
        assert await _call(c, label="empty", patch="+first") == ("first", False)
        assert await _call(c, label="empty", patch="+second\n+third\n") == ("first\nsecond\nthird", False)
        # codex's framing lines and diff file headers are not content
        text, failed = await _call(
            c, label="empty", patch="*** Begin Patch\n--- a/empty\n+++ b/empty\n@@\n-second\n+2nd\n*** End Patch"
        )
        assert (text, failed) == ("first\n2nd\nthird", False)
        # line numbers copied from a line_numbers=true view, on '+' or '-' lines: refused, as memory_insert refuses them
        for numbered in ("+4→ fourth", "-  2→ 2nd\n+second", "@@\n 1→ first\n+x"):
            text, failed = await _call(c, label="empty", patch=numbered)
            assert failed and text.startswith(  # Letta's words
                "Patch contains a line number prefix, which is not allowed. Do not include line numbers (they are for "
                "display only)."
            ), (numbered, text)
        text, failed = await _call(c, label="empty", patch=f"{rules.LINE_NUMBER_WARNING}\n-first\n+1st")
        assert failed and text.startswith(
            "Patch contains the line number warning banner, which is not allowed. Provide only the text to edit."
        ), text
        # context not found: Letta's words, with the hunk's first expected lines
        text, failed = await _call(c, label="empty", patch=" first\n-second\n-third\n-fourth\n-fifth\n+x")
        assert failed and text.startswith(
            "Failed to apply patch: expected hunk context not found in the memory block. Verify the target lines "
            "exist and try providing more context. Expected start:\nfirst\nsecond\nthird\nfourth"
        ), text
        assert "fifth" not in text
        # a header this tool does not know is refused, not taken for content or for another block
        text, failed = await _call(c, label="empty", patch="*** Update File: human\n@@\n-first\n+1st")
        assert failed and "'*** Update File: human' is not a header memory_apply_patch knows" in text
        blocks = await _blocks(c)
        assert blocks["empty"]["value"] == "first\n2nd\nthird"


def test_a_patch_whose_write_fails_part_way_is_undone(memory) -> None:  # type: ignore[no-untyped-def]
    """Planned, then written: a conflict at the second write undoes the first (another writer came in between)."""
    agent = memory.ensure_agent("default").id
    memory.create_block(agent, BlockSpec(label="a", value="one"))
    memory.create_block(agent, BlockSpec(label="b", value="two"))
    plan = block_patch._plan(
        memory,
        agent,
        block_patch.parse_block_patch("*** Update Block: a\n-one\n+1\n*** Update Block: b\n-two\n+2"),
        "agent",
    )
    memory.edit(agent, "b", rules.Rethink("TWO"))  # another writer, after the plan was made
    with pytest.raises(ConflictError, match="no block was changed \\(the writes before it were undone\\)"):
        block_patch._write(memory, agent, plan, "agent")
    assert memory.block(agent, "a").value == "one" and memory.block(agent, "b").value == "TWO"
    ops = [v.operation for v in memory.history(agent, "a")]
    assert ops[:2] == ["memory_apply_patch undone", "memory_apply_patch"]


def test_an_undone_patch_puts_back_a_block_it_both_edited_and_renamed(memory) -> None:  # type: ignore[no-untyped-def]
    """Each undo expects the version the step after it left: the value's undo runs once the rename is undone."""
    agent = memory.ensure_agent("default").id
    memory.create_block(agent, BlockSpec(label="a", value="one"))
    patch = "*** Update Block: a\n-one\n+1\n*** Move to: b\n*** Add Block: c\n+new"
    plan = block_patch._plan(memory, agent, block_patch.parse_block_patch(patch), "agent")
    memory.create_block(agent, BlockSpec(label="c", value="theirs"))  # another writer, after the plan was made
    with pytest.raises(LabelTakenError, match="no block was changed \\(the writes before it were undone\\)") as got:
        block_patch._write(memory, agent, plan, "agent")
    assert got.value.label == "c"  # the error's own attributes are kept
    a = memory.block(agent, "a")
    assert a.value == "one" and "b" not in [blk.label for blk in memory.blocks(agent)]
    assert memory.block(agent, "c").value == "theirs"
    assert [v.operation for v in memory.history(agent, "a")][:2] == ["memory_apply_patch undone"] * 2


def test_a_patch_whose_undo_fails_names_what_stays_written(memory, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Another writer edits a block after the patch wrote it: its undo is refused (that edit is kept), and the error
    names the write that failed and the block that stays patched, without saying nothing was written."""
    agent = memory.ensure_agent("default").id
    memory.create_block(agent, BlockSpec(label="a", value="one"))
    memory.create_block(agent, BlockSpec(label="b", value="two"))
    patch = "*** Update Block: a\n-one\n+1\n*** Update Block: b\n-two\n+2\n*** Add Block: c\n+new"
    plan = block_patch._plan(memory, agent, block_patch.parse_block_patch(patch), "agent")
    memory.create_block(agent, BlockSpec(label="c", value="theirs"))
    core = memory.core
    real = core.commit_edit

    def commit(previous: Any, *args: Any) -> Any:  # at the patch's write of b, another writer edits a (patched)
        if previous.label == "b":
            monkeypatch.setattr(core, "commit_edit", real)
            memory.edit(agent, "a", rules.Append("theirs"))
        return real(previous, *args)

    monkeypatch.setattr(core, "commit_edit", commit)
    with pytest.raises(LabelTakenError) as got:
        block_patch._write(memory, agent, plan, "agent")
    text = str(got.value)
    assert got.value.label == "c" and "nothing was written" not in text.lower(), text
    assert text.startswith("The patch was applied only in part: the creation of block 'c' failed (A block"), text
    assert "these stay as the patch wrote them: the write of block 'a''s new value." in text, text
    assert memory.block(agent, "a").value == "1\ntheirs" and memory.block(agent, "b").value == "two"


@pytest.mark.anyio
async def test_a_refused_patch_does_not_echo_a_credential_in_a_label(settings: Settings) -> None:
    async with Client(serve_in_process(settings), cache=None) as c:
        for patch in (
            f"*** Add Block: {GHP}\n+x",
            f"*** Update Block: {GHP}\n-x\n+y",
            f"*** Delete Block: {GHP}",
            f"token {GHP}\n*** Add Block: x\n+y",
            f"*** Add Block: x\ntoken {GHP}",
        ):
            text, failed = await _call(c, label="", patch=patch)
            assert failed and GHP not in text and "[redacted: " in text, (patch, text)
            assert "x" not in await _blocks(c)


def test_hunks_and_the_labels_a_patch_edits() -> None:
    assert rules.apply_hunks("a\nb", rules.parse_patch("+c")) == "a\nb\nc"
    assert rules.apply_hunks("", rules.parse_patch("+c\n+d")) == "c\nd"
    assert rules.apply_hunks("a\n\nb", rules.parse_patch(" a\n\n-b\n+c\n\n")) == "a\n\nc"
    with pytest.raises(EditError, match="starts an operation of a multi-block patch"):
        rules.parse_patch("*** Update Block: x\n-a\n+b")
    assert block_patch.is_multi_block("-a\n+b\n*** Add Block: x") and not block_patch.is_multi_block(
        " *** Add Block: x"
    )
    patch = "*** Update Block: a\n-x\n+y\n*** Move to: b\n*** Add Block: c\n+z"
    assert edited_labels("memory_apply_patch", {"label": "human", "patch": patch}) == ["a", "b", "c"]
    assert edited_labels("memory_apply_patch", {"label": "human", "patch": "-x\n+y"}) == ["human"]


def test_why_a_write_failed_is_told_without_nothing_written() -> None:
    """A patch applied only in part (either dialect) says why its write failed without that write's "nothing was
    written" (misread about the whole patch), and without the doubled period its removal leaves."""
    from tiermem.base.errors import ConflictError, without_nothing_written

    exc = ConflictError("Block 'a' was changed meanwhile. Nothing was written. Read it again.\nmore")
    assert without_nothing_written(exc) == "Block 'a' was changed meanwhile. Read it again"
    assert without_nothing_written(ConflictError("Busy; nothing was written, try again.")) == "Busy"


@pytest.mark.anyio
async def test_crlf_patches_apply_as_in_letta(settings: Settings) -> None:
    # Letta reads a patch's lines with splitlines: CRLF line ends (a client on Windows) patch as LF ones do, in one
    # block's hunks and in a multi-block patch alike; no carriage return reaches a block.
    async with Client(serve_in_process(settings), cache=None) as c:
        await c.call_tool("memory_open", {"label": "human"})  # a rethink needs a view first (sessionless)
        await c.call_tool("memory_rethink", {"label": "human", "new_memory": "Name: Ada\nLikes tea"})
        text, failed = await _call(c, label="human", patch="@@\r\n Name: Ada\r\n-Likes tea\r\n+Likes coffee\r\n")
        assert not failed, text
        patch = (
            "*** Begin Patch\r\n*** Update Block: human\r\n@@\r\n-Likes coffee\r\n+Likes cocoa\r\n"
            "*** Add Block: project\r\nDescription: The project\r\n+status: open\r\n+owner: Ada\r\n*** End Patch\r\n"
        )
        text, failed = await _call(c, label="", patch=patch)
        assert not failed, text
        blocks = await _blocks(c)
        assert blocks["human"]["value"] == "Name: Ada\nLikes cocoa"
        assert blocks["project"]["value"] == "status: open\nowner: Ada"
        assert blocks["project"]["description"] == "The project"
