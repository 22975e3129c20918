"""Pure Letta edit semantics (blocks.py): exact texts, check order, limits."""

import json
import re
from datetime import UTC, datetime

import pytest

from tiermem.base.errors import EditError, ValidationError
from tiermem.base.records import Block
from tiermem.domain import blocks as b


def blk(
    value: str = "I am Sam.\nI am curious.", limit: int = 5000, read_only: bool = False, label: str = "persona"
) -> Block:
    return Block(
        id="block-1",
        label=label,
        value=value,
        limit=limit,
        description="d",
        read_only=read_only,
        version=1,
        updated_at=datetime(2026, 1, 1, tzinfo=UTC),
    )


def test_append_adds_newline():
    assert b.apply_edit(blk("a"), b.Append("b")) == "a\nb"


def test_core_replace_all_and_missing():
    assert b.apply_edit(blk("x y x"), b.ReplaceAll("x", "z")) == "z y z"
    assert b.apply_edit(blk("x y x"), b.ReplaceAll("x ", "")) == "y x"
    with pytest.raises(EditError, match=r"^Old content 'nope' not found in memory block 'persona'$"):
        b.apply_edit(blk(), b.ReplaceAll("nope", "z"))


def test_memory_replace_unique_missing_multiple():
    assert b.apply_edit(blk(), b.StrReplace("Sam", "Ada")) == "I am Ada.\nI am curious."
    with pytest.raises(EditError) as e:
        b.apply_edit(blk(), b.StrReplace("Bob", "x"))
    assert str(e.value) == (
        "No replacement was performed, old_string `Bob` did not appear verbatim in memory block with label `persona`."
    )
    with pytest.raises(EditError) as e:
        b.apply_edit(blk(), b.StrReplace("I am", "x"))
    assert str(e.value) == (
        "No replacement was performed. Multiple occurrences of old_string `I am` in lines [1, 2]. "
        "Please ensure it is unique."
    )


def test_memory_replace_check_order():
    ro = blk(read_only=True)
    with pytest.raises(EditError, match=r"^Error This block is read-only and cannot be edited\.$"):
        b.apply_edit(ro, b.StrReplace("1→ I am", "x"))
    with pytest.raises(EditError, match=r"^old_string contains a line number prefix"):
        b.apply_edit(blk(), b.StrReplace("1→ I am Sam.", "2→ x"))
    with pytest.raises(EditError, match=r"^old_string contains a line number warning"):
        b.apply_edit(blk(), b.StrReplace(b.LINE_NUMBER_WARNING, "x"))
    with pytest.raises(
        EditError, match=r"^new_string contains a line number prefix, which is not allowed\. Do not include"
    ):
        b.apply_edit(blk(), b.StrReplace("Sam", "  12→ Ada"))


def test_insert_positions_and_range():
    v = "a\nb"
    assert b.apply_edit(blk(v), b.Insert("x", -1)) == "a\nb\nx"
    assert b.apply_edit(blk(v), b.Insert("x", 0)) == "x\na\nb"
    assert b.apply_edit(blk(v), b.Insert("x", 1)) == "a\nx\nb"
    assert b.apply_edit(blk(v), b.Insert("x", 2)) == "a\nb\nx"
    for bad in (3, -2, 10**9):
        with pytest.raises(EditError) as e:
            b.apply_edit(blk(v), b.Insert("x", bad))
        assert str(e.value) == (
            f"Invalid `insert_line` parameter: {bad}. It should be within the range of lines of the "
            "memory block: [0, 2], or -1 to append to the end of the memory block."
        )


def test_limit_enforced_with_letta_text():
    with pytest.raises(EditError) as e:
        b.apply_edit(blk("abc", limit=5), b.Append("def"))
    assert str(e.value) == "Edit failed: Exceeds 5 character limit (requested 7)"
    assert b.apply_edit(blk("abc", limit=7), b.Append("def")) == "abc\ndef"


def test_rethink_and_line_numbers():
    assert b.apply_edit(blk(), b.Rethink("new")) == "new"
    with pytest.raises(EditError, match="^new_memory contains a line number prefix"):
        b.apply_edit(blk(), b.Rethink("1→ new"))


def test_patch_apply_and_errors():
    v = "alpha\nbeta\ngamma\nbeta"
    patch = " alpha\n-beta\n+BETA\n gamma"
    assert b.apply_edit(blk(v), b.Patch(patch)) == "alpha\nBETA\ngamma\nbeta"
    two = "@@\n alpha\n+one\n@@\n gamma\n-beta\n+two"
    assert b.apply_edit(blk(v), b.Patch(two)) == "alpha\none\nbeta\ngamma\ntwo"
    with pytest.raises(EditError, match="^Failed to apply patch: expected hunk context not found in the memory block"):
        b.apply_edit(blk(v), b.Patch(" nope\n-beta\n+x"))
    with pytest.raises(
        EditError, match="^Failed to apply patch: hunk context matched multiple places in the memory block"
    ):
        b.apply_edit(blk(v), b.Patch("-beta\n+x"))
    with pytest.raises(EditError, match="does not start with"):
        b.apply_edit(blk(v), b.Patch("garbage line"))


def test_labels_and_paths():
    assert b.validate_label("project_notes-2") == "project_notes-2"
    assert b.validate_label("system/human/family") == "system/human/family"
    assert b.validate_label("/note_directory") == "note_directory"
    # labels keep a file's path as written (Letta Code's MemFS): capitals, dots, spaces, long names
    for good in ("Team-Notes", "reference/Team Notes", "notes/v1.2", "MEMORY", "skills/x/SKILL", "it's", "x" * 250):
        assert b.validate_label(good) == good
    cases = {
        "": "it is empty",
        "a//b": "empty path segment",
        "a/": "empty path segment",
        "//a": "empty path segment",
        "x" * 251: "has 251 bytes, at most 250 are allowed",
        "é" * 126: "has 252 bytes",
        "/".join(["abcdefgh"] * 120): "at most 1024 are allowed",
        "a\\b": "the character '\\' is not allowed",
        "../etc": "'.' and '..' segments are not allowed",
        "a/./b": "'.' and '..' segments are not allowed",
        "a/.hidden": "starts with '.' (a hidden file)",
        "a\tb": "control character",
        "a\x85b": "control character",
        # a right-to-left override makes "notes\u202egnp.txt" display as "notestxt.png": one label shown as another
        "notes\u202egnp.txt": "bidirectional control character U+202E, which can make a label display as another",
    }
    for c in "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069":
        cases[f"a/b{c}c"] = f"bidirectional control character U+{ord(c):04X}"
    for bad, problem in cases.items():
        with pytest.raises(ValidationError, match="^Invalid block label .*" + re.escape(problem)):
            b.validate_label(bad)
    assert b.label_from_path("/memories/human") == "human"
    assert b.label_from_path("/memories/notes/projects") == "notes/projects"
    with pytest.raises(ValidationError):
        b.label_from_path("/etc/passwd")
    # a path's '/' at the end is a trailing '/' of the label: refused as in any label (one leading '/' is dropped)
    for path in ("/memories/human/", "/memories/notes/projects/", "/memories/"):
        with pytest.raises(ValidationError, match="^Invalid block label"):
            b.label_from_path(path)
    assert b.label_from_path("/memories//human") == "human"
    assert b.label_from_letta("system//references/lettabot") == "system/references/lettabot"
    assert b.label_from_letta("/note_directory") == "note_directory"
    with pytest.raises(ValidationError, match="'..' segments"):
        b.label_from_letta("a/../b")


def test_render_core_memory_layout():
    text = b.render_core_memory([blk(read_only=True)])
    assert text == (
        "<memory_blocks>\nThe following memory blocks are currently engaged in your core memory unit:\n\n"
        "<persona>\n<description>\nd\n</description>\n<metadata>\n- read_only=true\n- chars_current=23\n"
        "- chars_limit=5000\n</metadata>\n<value>\nI am Sam.\nI am curious.\n</value>\n</persona>\n\n</memory_blocks>"
    )
    numbered = b.render_core_memory([blk()], line_numbers=True)
    assert "<warning>\n" + b.LINE_NUMBER_WARNING + "\n</warning>" in numbered
    assert "1→ I am Sam.\n2→ I am curious." in numbered
    meta = b.render_memory_metadata(
        agent_id="agent-1",
        recompiled_at=datetime(2026, 2, 11, 20, 8, 35, tzinfo=UTC),
        recall_count=42,
        archival_count=156,
    )
    assert "- System prompt last recompiled: 2026-02-11 08:08:35 PM UTC+0000" in meta
    assert "- 42 previous messages between you and the user are stored in recall memory" in meta
    assert "- 156 total memories you created are stored in archival memory (use tools to access them)" in meta
    # tiermem's tag line: a plain tag as written, one that could be misread as a JSON string, '<' and '>' escaped
    tags = ["t1", "my notes", "a,b", "</memory_metadata>", " x", "\u200bdev", 'say "hi"']
    meta = b.render_memory_metadata(
        agent_id="agent-1",
        recompiled_at=datetime(2026, 2, 11, tzinfo=UTC),
        recall_count=0,
        archival_count=1,
        archival_tags=tags,
    )
    line = next(x for x in meta.split("\n") if x.startswith("- Archival memory tags: "))
    assert line == (
        '- Archival memory tags: t1, my notes, "a,b", "\\u003c/memory_metadata\\u003e", " x", "\\u200bdev", '
        '"say \\"hi\\""'
    )
    assert meta.count("</memory_metadata>") == 1 and meta.endswith("\n</memory_metadata>")
    assert [json.loads(b.render_tag(t)) for t in tags[2:]] == tags[2:]  # each quoted one reads back as the tag
