"""Letta Code's memory-file format, its layouts, its hook's rules, its memory tool's paths and its patch format
(``tiermem.domain.memfs_format``: pure functions; tests/test_letta_code.py checks the hook rules against the real hook)."""

from __future__ import annotations

import re

import pytest

from tiermem.base.errors import EditError
from tiermem.domain import memfs_format as f


@pytest.mark.parametrize(
    "line, value",
    [
        ("description: Family: names", "Family: names"),
        ("description: #1 priorities", "#1 priorities"),
        ('description: "quoted" stays', '"quoted" stays'),
        ("description: @team [links] * misc", "@team [links] * misc"),
        ("description:    spaced   ", "spaced"),
        ("description:", ""),
    ],
)
def test_frontmatter_values_are_literal(line: str, value: str) -> None:
    parts = f.split_file(f"---\n{line}\nlimit: 300\n---\nbody\n")
    assert parts.front.get("description") == value and parts.front.get("limit") == "300"
    assert parts.front.get("read_only") is None and parts.body == "body\n"


def test_block_scalars_and_write_back() -> None:
    text = "---\ndescription: |\n  Projects\n  in progress\n\nkeep: this\n  nested: line\n---\nvalue"
    front = f.split_file(text).front
    assert front.get("description") == "Projects\nin progress\n" and front.keys() == ["description", "keep"]
    assert f.split_file("---\nd: >-\n  a\n  b\n\n  c\n---\n").front.get("d") == "a b\nc"
    # replacing one key keeps every other line as written, in order
    changed = front.set("description", "One line")
    assert (
        f.MemoryFile(changed, "value").text() == "---\ndescription: One line\n\nkeep: this\n  nested: line\n---\nvalue"
    )
    assert changed.set("keep", None).lines == ("description: One line", "")
    assert f.Front().set("description", "x", first=True).set("name", "y", first=True).lines == (
        "name: y",
        "description: x",
    )


def test_split_file_edges() -> None:
    assert f.split_file("no frontmatter\n") == f.MemoryFile(f.Front(), "no frontmatter\n")
    assert f.split_file("\ufeff---\r\ndescription: x\r\n---\r\nbody").front.get("description") == "x"
    assert f.split_file("---\n---\n").front == f.Front((), True)
    with pytest.raises(f.FrontmatterError, match="no closing '---' line"):
        f.split_file("---\ndescription: x\nbody")


def test_v2_values_are_json_strings() -> None:
    assert f.decode('"Ada: \\"the\\" user"', "v2") == 'Ada: "the" user'
    assert f.decode("'It''s'", "v2") == "It's" and f.decode("plain", "v2") == "plain"
    assert f.decode('"x"', "v1") == '"x"'
    assert f.encode("Line one\nline two", "v2") == '"Line one line two"' and f.encode("é", "v2") == '"é"'
    assert f.default_name("projects/coding_prefs-v2.md") == "Coding Prefs V2" and f.default_name("_.md") == "Memory"


def test_layout_rules() -> None:
    paths = {"MEMORY.md", "human.md", "projects/MEMORY.md", "projects/x.md", "loose/y.md", "skills/s/SKILL.md"}
    assert f.layout_of(paths) == "v2" and f.layout_of(paths, "legacy-only") == "v1" and f.layout_of({"a.md"}) == "v1"
    assert [p for p in sorted(paths) if f.in_prompt(p, "v2")] == ["MEMORY.md", "human.md"]
    assert [p for p in sorted(paths) if f.projected(p, paths, "v2")] == [
        "MEMORY.md",
        "human.md",
        "projects/MEMORY.md",
        "projects/x.md",
    ]
    assert f.in_prompt("system/a/b.md", "v1") and not f.in_prompt("reference/a.md", "v1")
    assert f.hook_checked("reference/a.md", set(), "v1") and not f.hook_checked("notes/a.md", set(), "v1")


OK = "---\ndescription: d\n---\nbody"


@pytest.mark.parametrize(
    "text, previous, problems",
    [
        (OK, None, []),
        ("---\ndescription: d\nlimit: 5\n---\n", None, []),
        ("body", None, ["missing frontmatter (must start with ---)"]),
        ("---\ndescription: d\n", None, ["frontmatter opened but never closed (missing closing ---)"]),
        ("---\nlimit: 5\n---\n", None, ["missing required field 'description'"]),
        ("---\ndescription:\n---\n", None, ["'description' must not be empty"]),
        (
            "---\ndescription: d\npinned: true\n---\n",
            None,
            ["unknown frontmatter key 'pinned' (allowed: description read_only limit)"],
        ),
        ("---\ndescription: |\n  multi\n---\n", None, []),
        (
            "---\ndescription: d\nread_only: false\n---\n",
            None,
            ["'read_only' is a protected field and cannot be set by the agent"],
        ),
        (
            "---\ndescription: d\nread_only: true\n---\n",
            "---\ndescription: d\nread_only: false\n---\n",
            ["'read_only' is a protected field and cannot be changed by the agent"],
        ),
        (
            "---\ndescription: d\n---\n",
            "---\ndescription: d\nread_only: false\n---\n",
            ["'read_only' is a protected field and cannot be removed by the agent"],
        ),
        ("---\ndescription: e\nread_only: false\n---\n", "---\ndescription: d\nread_only: false\n---\n", []),
        (OK, "---\ndescription: d\nread_only: true\n---\n", ["file is read_only and cannot be modified"]),
    ],
)
def test_hook_rules_v1(text: str, previous: str | None, problems: list[str]) -> None:
    assert f.hook_problems("system/x.md", text, previous, "v1") == [f"system/x.md: {p}" for p in problems]


@pytest.mark.parametrize(
    "rel, text, problems",
    [
        ("x.md", '---\nname: "X"\ndescription: "d"\n---\n', []),
        ("x.md", "---\ndescription: d\n---\n", ["missing required field 'name'"]),
        (
            "x.md",
            '---\nname: ""\ndescription: d\nlimit: 4\n---\n',
            ["'name' must not be empty", "unknown frontmatter key 'limit' (allowed: name description)"],
        ),
        ("MEMORY.md", "# index\n", []),
        ("p/MEMORY.md", "---\nname: x\n---\n", ["MEMORY.md must not have frontmatter"]),
    ],
)
def test_hook_rules_v2(rel: str, text: str, problems: list[str]) -> None:
    assert f.hook_problems(rel, text, None, "v2") == [f"{rel}: {p}" for p in problems]


@pytest.mark.parametrize(
    "rel, layout, unreadable",
    [  # measured with Letta Code 0.32's pre-commit hook (a copy of a local agent's repository; v2: root-marker)
        ("reference/my notes.md", "v1", True),  # `for file in $(git diff --cached --name-only ...)`: split at spaces
        ("system/ b.md", "v1", True),
        ("reference/a .md/inner.md", "v1", True),
        ("notes/my file.md", "v1", False),  # outside system/ and reference/: not read
        ("reference/Café ünï.md", "v1", False),  # git quotes it: no path the hook's pattern matches, not read
        ("reference/tab\tx.md", "v1", False),  # quoted too
        ("my notes.md", "v2", False),  # v2 reads `git ls-files` line by line
        ("Café.md", "v2", True),  # ... as git prints it: quoted, it names no file
        ("reference/ok.md", "v1", False),
    ],
)
def test_paths_the_hook_cannot_read(rel: str, layout: f.Layout, unreadable: bool) -> None:
    """Letta Code's hook refuses every commit holding such a file ("Memory validation could not read Git
    contents"): tiermem predicts it, as one of the file's problems."""
    assert (f.unreadable_path(rel, layout) is not None) == unreadable
    problems = f.hook_problems(rel, '---\nname: "n"\ndescription: d\n---\nbody', None, layout)
    assert bool(problems and "cannot read" in problems[0]) == unreadable, problems


def test_memory_tool_paths() -> None:
    assert f.label_of_path("system/contacts.md", "file_path") == "system/contacts"
    assert f.label_of_path(" memory/reference//Team-Notes.md ", "file_path") == "reference/Team-Notes"
    assert f.label_of_path("notes\\x", "file_path") == "notes/x"
    assert f.label_of_path("/home/u/mem/system/a.md", "file_path", root="/home/u/mem") == "system/a"
    for raw, problem in [
        ("", "'file_path' must be a non-empty string"),
        ("~/x.md", "not a home-relative"),
        ("/etc/passwd", "must be a relative path like system/contacts.md"),
        ("a/../b", "invalid path traversal segment"),
        (".md", "resolves to an empty memory label"),
        (3, "must be a non-empty string"),
    ]:
        with pytest.raises(EditError, match=problem):
            f.label_of_path(raw, "file_path")


def test_codex_patch_format() -> None:
    patch = (
        "*** Begin Patch\n*** Add File: notes/new.md\n+hello\n+world\n*** Update File: system/human.md\n"
        "*** Move to: system/person.md\n@@\n Name: Ada\n-Likes tea\n+Likes coffee\n@@\n+Age: 36\n Pets: none\n"
        "*** Delete File: old.md\n*** End Patch\n"
    )
    ops = f.parse_codex_patch(patch)
    assert [(o.kind, o.label, o.target) for o in ops] == [
        ("add", "notes/new", "notes/new"),
        ("update", "system/human", "system/person"),
        ("delete", "old", "old"),
    ]
    assert ops[0].lines == ("hello", "world")
    body = "---\ndescription: d\n---\nName: Ada\nLikes tea\nPets: none"  # no final newline: the fallback matches
    assert f.apply_hunks(body, ops[1].hunks, "system/human.md") == (
        "---\ndescription: d\n---\nName: Ada\nLikes coffee\nAge: 36\nPets: none"
    )
    with pytest.raises(EditError, match="context not found"):
        f.apply_hunks("nothing here", ops[1].hunks, "system/human.md")
    for bad, problem in [
        ("", "'input' must be a non-empty string"),
        ("*** Update File: a\n", 'must start with "\\*\\*\\* Begin Patch"'),
        ("*** Begin Patch\n", 'must end with "\\*\\*\\* End Patch"'),
        ("*** Begin Patch\n*** End Patch\nmore", "unexpected content after"),
        ("*** Begin Patch\n*** End Patch", "no file operations"),
        ("*** Begin Patch\n*** Add File: a\nx\n*** End Patch", "expected '\\+' prefix"),
        ("*** Begin Patch\n*** Update File: a\n-x\n*** End Patch", "expected '@@' hunk header"),
        ("*** Begin Patch\n*** Update File: a\n*** End Patch", "has no hunks"),
        ("*** Begin Patch\n*** Frobnicate: a\n*** End Patch", "unknown patch directive"),
        ("*** Begin Patch\n*** Update File: a\n@@\n+only\n*** End Patch", None),
    ]:
        if problem is None:
            with pytest.raises(EditError, match="hunk has no anchor"):
                f.apply_hunks("x", f.parse_codex_patch(bad)[0].hunks, "a.md")
            continue
        with pytest.raises(EditError, match=problem):
            f.parse_codex_patch(bad)


def test_reasons_round_trip() -> None:
    op = f.reason_operation("memory str_replace", "Update theme\npreference")
    assert op == "memory str_replace: Update theme preference" and f.reason_of(op) == "Update theme preference"
    assert f.reason_of("memfs: x (commit by y)") is None and f.reason_of("memory_replace") is None


# Frontmatter shapes a memory file comes in: what Letta Code writes (its memory tool: keys only; its
# serializeFrontmatter with no keys: a blank line; an empty body: nothing after the closing line), what people and
# other tools write (empty, unknown keys, trailing spaces, blank lines, block scalars, CRLF line endings), v2 JSON
# strings, and no frontmatter at all.
SHAPES = {
    "empty": "---\n---\nbody\n",
    "blank line (Letta Code, no keys)": "---\n\n---\nbody\n",
    "keys only": "---\ndescription: d\nread_only: true\n---\nbody\n",
    "empty body (Letta Code)": "---\ndescription: d\n---\n",
    "unknown keys": "---\ndescription: d\ncolour: blue\nlimit: 300\n---\nbody\n",
    "trailing spaces": "---\ndescription: d  \nlimit: 300 \n \n---\nbody  \n",
    "blank lines around": "---\n\ndescription: d\n\n---\n\nbody\n",
    "block scalar": "---\ndescription: |\n  two\n  lines\n\nkeep: x\n---\nbody\n",
    "crlf": "---\r\ndescription: d\r\ncolour: blue\r\n---\r\nbody\r\nmore\r\n",
    "crlf, empty": "---\r\n---\r\nbody\r\n",
    "v2": '---\nname: "Human"\ndescription: "The \\"human\\""\n---\nbody\n',
    "none": "body\n",
}


@pytest.mark.parametrize("text", SHAPES.values(), ids=SHAPES.keys())
def test_frontmatter_round_trips_byte_for_byte(text: str) -> None:
    """split, keep the frontmatter as a block keeps it (``raw``), write back: the same bytes."""
    parts = f.split_file(text)
    kept = f.Front.of(parts.front.raw)
    assert kept == parts.front and f.MemoryFile(kept, parts.body).text() == text
    assert parts.front.raw != ""  # "" is how block metadata says "no frontmatter": a file with one never keeps ""
    # a key changed in place keeps every other byte, line endings included
    if parts.front.get("description") is not None and "|" not in text:
        changed = f.MemoryFile(parts.front.set("description", '"e"'), parts.body).text()
        assert changed == re.sub(r"^description: [^\r\n]*", 'description: "e"', text, count=1, flags=re.M)


def test_frontmatter_kept_by_an_older_tiermem_still_reads() -> None:
    """Before the exact form, tiermem kept the lines joined by '\\n'."""
    assert f.Front.of("description: d\ncolour: blue") == f.Front(("description: d", "colour: blue"), True)
    assert f.Front.of("") == f.Front((), True)
    assert f.Front.of(None) == f.Front()
