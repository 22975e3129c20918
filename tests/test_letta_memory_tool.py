"""memory_tool_dialect = "letta-code": the `memory` and `memory_apply_patch` tools with Letta Code's schema and
semantics, through a real MCP client; and the Anthropic dialect's `view` of folders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tiermem.base.config import Settings, load_settings
from tiermem.domain.memory import Memory
from tiermem.server.registry import edited_labels

from .conftest import serve_in_process, text_of

pytestmark = pytest.mark.anyio

# Letta Code 0.32.18's src/tools/schemas/Memory.json and MemoryApplyPatch.json: names, types, enum, required
MEMORY_SCHEMA = {
    "command": {
        "type": "string",
        "enum": ["create", "str_replace", "insert", "delete", "rename", "update_description"],
    },
    "reason": {"type": "string"},
    "file_path": {"type": "string"},
    "old_path": {"type": "string"},
    "new_path": {"type": "string"},
    "old_string": {"type": "string"},
    "new_string": {"type": "string"},
    "insert_line": {"type": "number"},
    "insert_text": {"type": "string"},
    "description": {"type": "string"},
    "file_text": {"type": "string"},
}


@pytest.fixture
def lc_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("TIERMEM_MEMORY_TOOL_DIALECT", "letta-code")
    # every tool: these tests read core memory with core_memory_view (the dialect alone adds memory + its patch tool)
    return load_settings(data_dir=tmp_path / "data", embedding_model="hashing", sync=tmp_path / "mem", tools=["all"])


async def call(c: Client, tool: str = "memory", **args: Any) -> tuple[bool, str, Any]:
    r = await c.call_tool(tool, args)
    return r.is_error, text_of(r), r.structured_content


async def test_schema_and_commands(lc_settings: Settings) -> None:
    async with Client(serve_in_process(lc_settings)) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        schema = tools["memory"].input_schema
        assert {
            k: {x: v[x] for x in ("type", "enum") if x in v}
            for k, v in schema["properties"].items()
            if k != "idempotency_key"
        } == MEMORY_SCHEMA
        assert schema["required"] == ["command", "reason"]
        patch = tools["memory_apply_patch"].input_schema
        assert set(patch["properties"]) - {"idempotency_key"} == {"reason", "input"} and patch["required"] == [
            "reason",
            "input",
        ]
        assert "memory_replace" in tools  # the rest of the surface is unchanged

        ok = await call(
            c,
            command="create",
            reason="Track prefs",
            file_path="system/human/prefs.md",
            description="Coding: prefs",
            file_text="Likes tea\nLikes tea\nHates rain",
        )
        assert ok[:2] == (False, "Memory create: created system/human/prefs.md (version 1).")
        assert ok[2]["paths"] == ["system/human/prefs.md"] and ok[2]["versions"] == {"system/human/prefs": 1}
        # str_replace: the first occurrence (Letta Code's), not "unique or refuse"
        await call(
            c,
            command="str_replace",
            reason="Coffee now",
            file_path="memory/system/human/prefs",
            old_string="tea",
            new_string="coffee",
        )
        # insert: 1-based, the text becomes line k; out of range is clamped; fractions floor
        for line, text in [(1, "first"), (99, "last"), (2.9, "second"), (0, "zeroth")]:
            assert not (
                await call(
                    c,
                    command="insert",
                    reason="add",
                    file_path="system/human/prefs.md",
                    insert_line=line,
                    insert_text=text,
                )
            )[0]
        r = await c.read_resource("memory://blocks/system/human/prefs")
        assert r.contents[0].text == "zeroth\nfirst\nsecond\nLikes coffee\nLikes tea\nHates rain\nlast"
        history = text_of(await c.call_tool("memory_history", {"label": "system/human/prefs", "limit": 6}))
        assert (
            '"operation": "memory str_replace: Coffee now"' in history
            and '"operation": "memory create: Track prefs"' in history
        )
        # a file outside system/ is detached (listed, not in the prompt); update_description; rename
        await call(c, command="create", reason="r", file_path="reference/Team-Notes.md", description="Team")
        await call(
            c, command="update_description", reason="r", file_path="reference/Team-Notes.md", description="The team"
        )
        await call(c, command="rename", reason="promote", old_path="reference/Team-Notes.md", new_path="system/team.md")
        core = text_of(await c.call_tool("core_memory_view", {}))
        assert "<system/team>\n<description>\nThe team\n" in core and "<system/human/prefs>" in core
        # absolute paths inside the synced directory are accepted, as Letta Code's $MEMORY_DIR paths
        root = str(lc_settings.sync.resolve())  # type: ignore[union-attr]
        err, text, _ = await call(
            c, command="update_description", reason="r", file_path=f"{root}/system/team.md", description="Our team"
        )
        assert not err, text
        # delete a folder with everything in it
        await call(c, command="create", reason="r", file_path="notes/a.md", description="a")
        await call(c, command="create", reason="r", file_path="notes/b/c.md", description="c")
        gone = await call(c, command="delete", reason="Clean up", file_path="notes")
        assert gone[:2] == (False, "Memory delete: removed notes/a.md, notes/b/c.md.")

        # Letta Code's errors, and nothing changes
        for args, message in [
            (
                {"command": "create", "reason": "", "file_path": "x.md", "description": "d"},
                "memory: 'reason' must be a non-empty string",
            ),
            (
                {"command": "create", "reason": "r", "file_path": "x.md"},
                "memory create: 'description' must be a non-empty string",
            ),
            (
                {"command": "create", "reason": "r", "file_path": "system/team.md", "description": "d"},
                "memory create: block already exists at system/team.md",
            ),
            (
                {
                    "command": "str_replace",
                    "reason": "r",
                    "file_path": "system/team.md",
                    "old_string": "zzz",
                    "new_string": "y",
                },
                "memory str_replace: old_string was not found in the target memory block",
            ),
            (
                {
                    "command": "str_replace",
                    "reason": "r",
                    "file_path": "system/team.md",
                    "old_string": "a",
                    "new_string": "",
                },
                "memory str_replace: 'new_string' must be a non-empty string",
            ),
            (
                {"command": "insert", "reason": "r", "file_path": "nope.md", "insert_line": 1, "insert_text": "x"},
                "memory: failed to read nope.md: no such memory file",
            ),
            (
                {"command": "rename", "reason": "r", "old_path": "system/team.md", "new_path": "system/human/prefs.md"},
                "memory rename: destination already exists at system/human/prefs.md",
            ),
            (
                {"command": "delete", "reason": "r", "file_path": "../etc/passwd"},
                "contains invalid path traversal segment",
            ),
            (
                {"command": "delete", "reason": "r", "file_path": "/etc/passwd"},
                "must be a relative path like system/contacts.md",
            ),
            (
                {
                    "command": "update_description",
                    "reason": "r",
                    "file_path": "system/team.md",
                    "description": "Our team",
                },
                "Memory update_description made no effective changes",
            ),
            ({"command": "view", "reason": "r", "file_path": "system/team.md"}, "command"),
            ({"command": "create", "reason": "r", "path": "/memories/x"}, "does not take the argument `path`"),
        ]:
            err, text, _ = await call(c, **args)
            assert err and message in text, (args, text)


async def test_a_boolean_insert_line_is_refused(lc_settings: Settings) -> None:
    """`insert_line: true` is a mistake, not line 1 (pydantic's lax mode reads it as 1.0): refused as the other
    tools refuse a boolean for a number, and the file is not changed."""
    async with Client(serve_in_process(lc_settings)) as c:
        await call(c, command="create", reason="r", file_path="system/notes.md", description="d", file_text="a")
        for flag in (True, False):
            err, text, _ = await call(
                c, command="insert", reason="r", file_path="system/notes.md", insert_line=flag, insert_text="x"
            )
            assert err and text.startswith(f"memory: `insert_line` must be a number, got {str(flag).lower()}."), text
        r = await c.read_resource("memory://blocks/system/notes")
        assert r.contents[0].text == "a"


async def test_read_only_files_refuse_edits(lc_settings: Settings) -> None:
    from tiermem.cli.main import main

    data = ["--data-dir", str(lc_settings.data_dir), "--embedding-model", "hashing"]
    assert main(["blocks", "create", "system/rules", "--value", "Be kind", "--read-only", *data]) == 0
    async with Client(serve_in_process(lc_settings)) as c:
        for args in (
            {"command": "insert", "file_path": "system/rules.md", "insert_line": 1, "insert_text": "x"},
            {"command": "delete", "file_path": "system"},
        ):
            err, text, _ = await call(c, reason="r", **args)
            assert err and "system/rules.md is read_only and cannot be modified" in text, text
        err, text, _ = await call(
            c,
            "memory_apply_patch",
            reason="r",
            input="*** Begin Patch\n*** Update File: system/rules.md\n@@\n-Be kind\n+Be mean\n*** End Patch",
        )
        assert err and text == "memory_apply_patch: system/rules.md is read_only and cannot be modified"


async def test_codex_patches(lc_settings: Settings) -> None:
    async with Client(serve_in_process(lc_settings)) as c:
        await call(
            c,
            command="create",
            reason="r",
            file_path="system/human.md",
            description="The human",
            file_text="Name: Ada\nLikes tea",
        )
        patch = (
            "*** Begin Patch\n*** Update File: system/human.md\n*** Move to: system/person.md\n@@\n"
            "-description: The human\n+description: The person\n@@\n Name: Ada\n-Likes tea\n+Likes coffee\n"
            "*** Add File: reference/new.md\n+hello\n*** Add File: reference/framed.md\n+---\n"
            "+description: Framed\n+colour: blue\n+---\n+body\n*** End Patch"
        )
        err, text, data = await call(c, "memory_apply_patch", reason="Reorganise", input=patch)
        assert not err, text
        assert data["paths"] == ["reference/framed.md", "reference/new.md", "system/human.md", "system/person.md"]
        core = text_of(await c.call_tool("core_memory_view", {}))
        assert "<system/person>\n<description>\nThe person\n" in core and "Likes coffee" in core
        assert "new (reference/new; 5 chars): Memory block reference/new" in core
        assert "framed (reference/framed; 4 chars): Framed" in core
        history = text_of(await c.call_tool("memory_history", {"label": "system/person"}))
        assert '"operation": "memory_apply_patch: Reorganise"' in history
        # a failing hunk changes nothing, however many operations came before it
        before = text_of(await c.call_tool("core_memory_view", {}))
        bad = (
            "*** Begin Patch\n*** Delete File: reference/new.md\n*** Update File: system/person.md\n@@\n-nope\n+x\n"
            "*** End Patch"
        )
        err, text, _ = await call(c, "memory_apply_patch", reason="r", input=bad)
        assert err and "failed to apply hunk to system/person.md: context not found" in text

        def blocks_only(view: str) -> str:
            return view.split("<memory_metadata>")[0]  # the metadata has the time of day

        assert blocks_only(text_of(await c.call_tool("core_memory_view", {}))) == blocks_only(before)
        assert "reference/new" in blocks_only(before)
        err, text, _ = await call(
            c,
            "memory_apply_patch",
            reason="r",
            input="*** Begin Patch\n*** Add File: system/person.md\n+x\n*** End Patch",
        )
        assert err and text == "memory_apply_patch: cannot add existing memory file: system/person.md"


async def test_anthropic_view_lists_folders(settings: Settings) -> None:
    """`view /memories` failed once any label held a '/' (its folder entry had no limit)."""
    async with Client(serve_in_process(settings)) as c:
        await c.call_tool("memory", {"command": "create", "path": "/memories/notes/projects", "file_text": "x"})
        r = await c.call_tool("memory", {"command": "view", "path": "/memories"})
        assert not r.is_error, text_of(r)
        assert "1\tdir /memories/notes\t1 files" in text_of(r)
        entry = next(e for e in r.structured_content["entries"] if e["path"] == "/memories/notes")
        assert entry["kind"] == "directory" and "limit" not in entry


def test_edited_labels_of_both_dialects() -> None:
    """Each dialect's tools read their own arguments: the server's dialect says which, not the arguments' shape."""
    rename = {"command": "rename", "reason": "r", "old_path": "a.md", "new_path": "memory/b/c"}
    assert edited_labels("memory", rename, "letta-code") == ["a", "b/c"]
    patch = (
        "*** Begin Patch\n*** Update File: x.md\n*** Move to: y.md\n@@\n-a\n+b\n*** Delete File: z.md\n*** End Patch"
    )
    assert edited_labels("memory_apply_patch", {"reason": "r", "input": patch}, "letta-code") == ["x", "y", "z"]
    assert edited_labels("memory", {"command": "str_replace", "path": "/memories/human"}) == ["human"]
    assert edited_labels("memory_apply_patch", {"label": "human", "patch": "-a\n+b"}) == ["human"]
    # a stray "reason" does not switch an anthropic-dialect call to Letta Code's reading of it
    assert edited_labels("memory", {"command": "str_replace", "path": "/memories/human", "reason": "r"}) == ["human"]
    assert edited_labels("memory", {"command": "str_replace", "path": "/memories/human"}, "letta-code") == []


def test_a_bad_dialect_is_refused(tmp_path: Path) -> None:
    from tiermem.base.errors import ConfigError

    with pytest.raises(ConfigError, match="memory_tool_dialect"):
        load_settings(data_dir=tmp_path, memory_tool_dialect="letta")


async def test_instructions_speak_the_dialect(lc_settings: Settings) -> None:
    """The server's instructions tell the model how the `memory` tool it gets names blocks."""
    async with Client(serve_in_process(lc_settings.model_copy(update={"tools": ["memory"]}))) as c:
        letta = c.instructions or ""
    other = lc_settings.model_copy(update={"tools": ["memory"], "memory_tool_dialect": "anthropic", "sync": None})
    async with Client(serve_in_process(other)) as c:
        anthropic = c.instructions or ""
    assert "memory and memory_apply_patch tools (each block is a file of your memory directory)" in letta
    assert "/memories/" not in letta  # Letta Code's patch tool comes with its memory tool
    assert "/memories/<label>" in anthropic and "memory_apply_patch" not in anthropic


async def test_the_layout_decides_what_is_in_the_prompt(lc_settings: Settings) -> None:
    """A synced directory with a root MEMORY.md is layout v2: its top-level files are in the prompt (not system/),
    as Letta Code's own tool decides; the patch tool applies hunks to the file as the sync writes it (v2: a JSON
    `name` and `description`)."""
    root = lc_settings.sync
    assert root is not None
    root.mkdir()
    (root / "MEMORY.md").write_text("# Memory\n")
    async with Client(serve_in_process(lc_settings)) as c:
        for path in ("human.md", "notes/x.md"):
            err, text, _ = await call(
                c, command="create", reason="r", file_path=path, description=f"About {path}", file_text="hello"
            )
            assert not err, text
        # v2 has no system/ folder (core memory is the root files) and skills/ is not memory: Letta Code's words
        for args, message in [
            (
                {"command": "create", "file_path": "system/y.md", "description": "d"},
                "memory: core memory uses root Markdown files, not system/",
            ),
            (
                {"command": "rename", "old_path": "notes/x.md", "new_path": "skills/x.md"},
                "memory: skills are managed by the skill/file tooling, not the memory tool",
            ),
        ]:
            err, text, _ = await call(c, reason="r", **args)
            assert err and message in text, (args, text)
        err, text, _ = await call(
            c, "memory_apply_patch", reason="r", input="*** Begin Patch\n*** Add File: system/z.md\n+x\n*** End Patch"
        )
        assert err and text == "memory_apply_patch: core memory uses root Markdown files, not system/"
        await call(c, command="rename", reason="r", old_path="notes/x.md", new_path="x.md")
        patch = (
            '*** Begin Patch\n*** Add File: added.md\n+new\n*** Update File: human.md\n@@\n name: "Human"\n'
            '-description: "About human.md"\n+description: "The human"\n*** End Patch'
        )
        err, text, _ = await call(c, "memory_apply_patch", reason="r", input=patch)
        assert not err, text
        core = text_of(await c.call_tool("core_memory_view", {}))
    assert "<human>\n<description>\nThe human\n" in core  # top level: in the prompt
    assert "<x>\n<description>\nAbout notes/x.md\n" in core and "<added>\n<description>\nMemory block added\n" in core
    assert "system/" not in core


async def test_legacy_policy_keeps_layout_v1(lc_settings: Settings) -> None:
    """Letta Code's local backend (policy legacy-only) is layout v1 even with a root MEMORY.md."""
    root = lc_settings.sync
    assert root is not None
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "letta-memory-layout-policy").write_text("legacy-only\n")
    (root / "MEMORY.md").write_text("# Memory\n")
    async with Client(serve_in_process(lc_settings)) as c:
        for path in ("human.md", "system/y.md"):
            assert not (await call(c, command="create", reason="r", file_path=path, description="d", file_text="a"))[0]
        core = text_of(await c.call_tool("core_memory_view", {}))
    assert "human (human; 1 chars): d" in core and "<system/y>\n<description>\nd\n" in core


async def test_create_takes_a_long_file_as_a_patch_does(lc_settings: Settings) -> None:
    """Letta Code's tools enforce no limit: `create` and a patch's Add File both make a block that fits the text."""
    long = "x" * 7000
    async with Client(serve_in_process(lc_settings)) as c:
        err, text, _ = await call(
            c, command="create", reason="r", file_path="reference/long.md", description="d", file_text=long
        )
        assert not err, text
        patch = "*** Begin Patch\n*** Add File: reference/long2.md\n+" + long + "\n*** End Patch"
        err, text, _ = await call(c, "memory_apply_patch", reason="r", input=patch)
        assert not err, text
        await call(c, command="create", reason="r", file_path="reference/short.md", description="d", file_text="short")
        view = (await c.call_tool("core_memory_view", {})).structured_content
    limits = {b["label"]: (b["chars"], b["limit"]) for b in view["blocks"]}
    assert limits["reference/long"] == limits["reference/long2"] == (7000, 7000)
    assert limits["reference/short"] == (5, 5000)


async def test_a_patch_is_checked_in_full_before_its_first_write(lc_settings: Settings) -> None:
    """A patch whose later file would be refused (a credential in its frontmatter or text, past max_content_chars)
    writes nothing, the earlier files included, and says so; Letta Code builds every write before the first one."""
    token = "ghp_" + "0123456789abcdefghijklmnopqrstuvwxyzAB"
    async with Client(serve_in_process(lc_settings)) as c:
        await call(c, command="create", reason="mk", file_path="reference/a.md", description="A", file_text="alpha")
        await call(c, command="create", reason="mk", file_path="reference/b.md", description="B", file_text="beta")
        update = "*** Begin Patch\n*** Update File: reference/a.md\n@@\n-alpha\n+ALPHA\n"
        for add, refused in [
            (f"*** Add File: zz/new.md\n+---\n+description: n\n+api_token: {token}\n+---\n+body\n", "metadata value"),
            (f"*** Add File: zz/new2.md\n+token {token}\n", "value of block 'zz/new2'"),
            ("*** Add File: zz/big.md\n+" + "w" * 120_000 + "\n", "120000 characters"),
            (f"*** Update File: reference/b.md\n@@\n-beta\n+key {token}\n", "value of block 'reference/b'"),
        ]:
            err, text, _ = await call(c, "memory_apply_patch", reason="p", input=update + add + "*** End Patch")
            assert err and refused in text, text
            assert "were changed" not in text and "in part" not in text, text
            history = text_of(await c.call_tool("memory_history", {"label": "reference/a"}))
            assert '"version": 2' not in history and "ALPHA" not in history, history


async def test_paths_letta_codes_hook_cannot_read_are_refused(lc_settings: Settings) -> None:
    """A path under system/ or reference/ with a space never reaches Letta Code (its pre-commit hook splits paths at
    spaces and refuses the commit): refused up front, with why; elsewhere a space is fine. Deleting or moving away
    from such a path stays possible."""
    async with Client(serve_in_process(lc_settings)) as c:
        for path in ("reference/a .md", "reference/ b.md", "system/my notes.md"):
            err, text, _ = await call(c, command="create", reason="r", file_path=path, description="d", file_text="t")
            assert err and f'"{path}" cannot be committed' in text and "without a space" in text, text
        err, text, _ = await call(
            c,
            "memory_apply_patch",
            reason="r",
            input="*** Begin Patch\n*** Add File: reference/x y.md\n+t\n*** End Patch",
        )
        assert err and "cannot be committed" in text, text
        err, text, _ = await call(c, command="create", reason="r", file_path="notes/a b.md", description="d")
        assert not err, text
        await call(c, command="create", reason="r", file_path="reference/ok.md", description="d", file_text="t")
        err, text, _ = await call(
            c, command="rename", reason="r", old_path="reference/ok.md", new_path="reference/o k.md"
        )
        assert err and "cannot be committed" in text, text


async def test_a_file_the_sync_skipped_is_there_for_create_and_rename(lc_settings: Settings) -> None:
    """A file of the synced directory that its sync cannot take (here: frontmatter never closed) has no block, but
    Letta Code finds it: create, rename and a patch's Add File or Move to onto it are refused with Letta Code's
    words, and the file is left as it is."""
    root = lc_settings.sync
    assert root is not None
    (root / "reference").mkdir(parents=True)
    broken = "---\ndescription: my notes\nPRECIOUS NOTES, frontmatter never closed\n"
    (root / "reference" / "broken.md").write_text(broken)
    async with Client(serve_in_process(lc_settings)) as c:
        err, text, _ = await call(
            c, command="create", reason="r", file_path="reference/broken.md", description="d", file_text="model"
        )
        assert err and text == "memory create: block already exists at reference/broken.md", text
        await call(c, command="create", reason="r", file_path="reference/tmp.md", description="d", file_text="t")
        err, text, _ = await call(
            c, command="rename", reason="r", old_path="reference/tmp.md", new_path="reference/broken.md"
        )
        assert err and text == "memory rename: destination already exists at reference/broken.md", text
        err, text, _ = await call(
            c,
            "memory_apply_patch",
            reason="r",
            input="*** Begin Patch\n*** Add File: reference/broken.md\n+x\n*** End Patch",
        )
        assert err and text == "memory_apply_patch: cannot add existing memory file: reference/broken.md", text
        move = "*** Begin Patch\n*** Update File: reference/tmp.md\n*** Move to: reference/broken.md\n@@\n-t\n+u\n*** End Patch"
        err, text, _ = await call(c, "memory_apply_patch", reason="r", input=move)
        assert err and "onto the existing file reference/broken.md" in text, text
    assert (root / "reference" / "broken.md").read_text() == broken


async def test_a_file_the_sync_screens_out_is_there_for_create(lc_settings: Settings, memory: Memory) -> None:
    """The files the sync's screening skips for what their block would hold (a text over max_content_chars, a
    credential in the frontmatter alone) are there for Letta Code too: `create` and a patch's Add File onto one are
    refused as onto any file, and the file is left as it is (the tools screen a file as the sync does)."""
    from tiermem.interop.memfs import plan_memfs

    root = lc_settings.sync
    assert root is not None
    (root / "reference").mkdir(parents=True)
    token = "ghp_" + "0123456789abcdefghijklmnopqrstuvwxyzAB"
    found = {
        "reference/big.md": "---\ndescription: big\n---\n" + "w" * 120_000 + "\n",
        "reference/keyed.md": f"---\ndescription: notes\napi_token: {token}\n---\nplain notes\n",
    }
    for rel, text in found.items():
        (root / rel).write_text(text)
    async with Client(serve_in_process(lc_settings)) as c:
        for rel in found:
            err, text, _ = await call(c, command="create", reason="r", file_path=rel, description="d", file_text="m")
            assert err and text == f"memory create: block already exists at {rel}", text
            add = f"*** Begin Patch\n*** Add File: {rel}\n+x\n*** End Patch"
            err, text, _ = await call(c, "memory_apply_patch", reason="r", input=add)
            assert err and text == f"memory_apply_patch: cannot add existing memory file: {rel}", text
    for rel, text in found.items():
        assert (root / rel).read_text() == text
    (root / "reference" / "ok.md").write_text("---\ndescription: ok\n---\nfine\n")
    _, skipped = plan_memfs(root, memory)  # what the sync skips: those two files
    assert sorted(line.split(":")[0].split(" ")[0] for line in skipped) == sorted(found), skipped


async def test_letta_code_patch_headers_crlf_and_the_servers_block_headers(lc_settings: Settings) -> None:
    # Letta Code's patch reads CRLF line ends and deletes with '*** Delete File:'. The Letta server's block headers
    # ('*** Delete Block:', ...) are an unknown directive to Letta Code too; the error says which file header to write.
    async with Client(serve_in_process(lc_settings)) as c:
        for path in ("reference/a.md", "reference/b.md"):
            await call(c, command="create", reason="r", file_path=path, description="d", file_text="one\ntwo")
        patch = (
            "*** Begin Patch\r\n*** Update File: reference/b.md\r\n@@\r\n one\r\n-two\r\n+three\r\n"
            "*** Delete File: reference/a.md\r\n*** End Patch\r\n"
        )
        err, text, data = await call(c, "memory_apply_patch", reason="r", input=patch)
        assert not err, text
        assert data["paths"] == ["reference/a.md", "reference/b.md"]
        err, text, _ = await call(c, "memory_open", label="reference/b")
        assert not err and "one\nthree" in text and "\r" not in text
        for header, instead in (
            ("*** Delete Block: reference/b", "*** Delete File: reference/b.md"),
            ("*** Update Block: reference/b\n@@\n-three\n+four", "*** Update File: reference/b.md"),
        ):
            err, text, _ = await call(
                c, "memory_apply_patch", reason="r", input=f"*** Begin Patch\n{header}\n*** End Patch"
            )
            assert err and text.startswith(f"memory_apply_patch: unknown patch directive at line 2: {header[:29]}")
            assert f"write '{instead}' instead" in text and text.endswith("The patch changed nothing.")
        err, text, _ = await call(c, "memory_open", label="reference/b")
        assert not err and "one\nthree" in text
