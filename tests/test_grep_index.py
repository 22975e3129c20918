"""grep's trigram signatures (``domain.grep_index``): files skipped unread, and never a match lost."""

from __future__ import annotations

import random
import re
from typing import Any

import pytest
import regex
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tiermem.base.config import Settings
from tiermem.domain import archive_files
from tiermem.domain import file_views as fv
from tiermem.domain import grep_index as gi
from tiermem.domain.factory import open_memory
from tiermem.domain.file_views import GrepFile, JoinedLines, OpenRequest, grep


def per_line(files: list[list[str]], pattern: str) -> list[tuple[int, int]]:
    """Letta's semantics with the standard ``re``: (file, line) of every stripped line that matches on its own."""
    compiled = re.compile(pattern, re.IGNORECASE | re.MULTILINE)
    return [(i, n) for i, lines in enumerate(files) for n, line in enumerate(lines) if compiled.search(line.strip())]


def test_requirements_hold_the_literals_every_match_needs() -> None:
    def sizes(pattern: str) -> list[int] | None:
        found = gi.requirement(pattern)
        return None if found is None else [len(h) for h in found.hashes]

    assert sizes("xyzzy") == [3]
    assert sizes("def __init__") == [10]
    assert sizes(r"raise \w+Error\(f?['\"]") == [8]  # "raise " and "error(": a class, a repeat or `?` ends a run
    assert sizes("TODO|FIXME") == [2, 3]  # one requirement per branch
    assert sizes(r"(?:foo|bar)baz") == [1]  # the group's branches need nothing; "baz" is needed
    assert sizes(r"\bclass\s+Foo") == [4]
    for unknown in ("ab", "a.*b", "todo|x", "[[:alpha:]]xyz", r"(abc)*", "(?:abc)?", "[abc]{3}"):
        assert gi.requirement(unknown) is None, unknown


def test_a_signature_tells_which_texts_cannot_match() -> None:
    text = "class Foo:\n    def __init__(self):\n        raise ValueError('x')\n"
    held = gi.signature(text)
    for pattern in ("def __init__", "DEF __INIT", r"raise \w+Error\(f?['\"]", "foo", "FOO"):
        needs = gi.requirement(pattern)
        assert needs is not None and held.may_match(needs), pattern
    for pattern in ("xyzzy", "TODO|FIXME", "(?:foo|bar)baz"):
        needs = gi.requirement(pattern)
        assert needs is not None and not held.may_match(needs), pattern


def test_the_characters_folding_to_ascii_are_all_known() -> None:
    """Every non-ASCII character that matches an ASCII one case-insensitively (under the ``regex`` module grep uses)
    is written as that letter before the trigrams are taken; a new one in a future ``regex`` fails here."""
    ascii_class = regex.compile("[\x00-\x7f]", regex.IGNORECASE)
    folding = {c for c in range(128, 0x110000) if ascii_class.match(chr(c))}
    assert folding == set(gi.FOLDS_TO_ASCII)
    for c, letter in gi.FOLDS_TO_ASCII.items():
        assert any(regex.fullmatch(x, chr(c), regex.IGNORECASE) for x in (str(letter), str(letter).upper())), hex(c)


def test_literal_lines_are_the_lines_holding_a_literal() -> None:
    rnd = random.Random(11)
    for _ in range(200):
        lines = ["".join(rnd.choices("ab\n", k=rnd.randint(0, 6))).replace("\n", "") for _ in range(rnd.randint(1, 8))]
        lowered = "\n".join(lines)
        for literals in (("a",), ("ab",), ("ba", "aa"), ("b", "bb"), ("a\nb",)):
            starts = [sum(len(x) + 1 for x in lines[:i]) for i in range(len(lines))]
            expected = [(i, starts[i]) for i, line in enumerate(lines) if any(x in line for x in literals)]
            assert fv.literal_lines(lowered, literals) == expected, (lowered, literals)


def test_characters_that_match_ascii_letters_keep_their_files() -> None:
    """The Kelvin sign matches ``k`` case-insensitively, the long s ``s``, dotted and dotless i ``i``: a file holding
    them where a pattern has the letters is kept, and one holding neither is skipped (accents stay themselves)."""
    files = [
        GrepFile("k.txt", JoinedLines.of(["the \u212aelvin scale"]), 20),
        GrepFile("s.txt", JoinedLines.of(["a \u017fign of \u0130stanbul and D\u0131YARBAKIR"]), 20),
        GrepFile("e.txt", JoinedLines.of(["caf\u00e9 Kelvin"]), 20),
        GrepFile("none.txt", JoinedLines.of(["caf\u00e9 au lait"]), 20),
    ]
    assert grep(files, "kelvin").matched_files == ["k.txt", "e.txt"]
    assert grep(files, "sign of istanbul").matched_files == ["s.txt"]
    assert grep(files, "DIYARBAKIR").matched_files == ["s.txt"]  # dotless i matches I (not i) in regex
    assert grep(files, "cafe").matched_files == []
    needs = gi.requirement("kelvin")
    assert needs is not None and not files[3].lines.signature().may_match(needs)  # type: ignore[union-attr]


def test_grep_skips_the_files_whose_signature_rules_them_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over 2,000 files, a word one file holds: every other file is skipped by its signature (false positives
    aside), and the answer equals grep without signatures, for that word and for common ones."""
    rnd = random.Random(5)
    words = ["alpha", "beta", "gamma", "delta", "return", "import", "value", "config", "server", "client"]
    pool = ["    " * (j % 3) + " ".join(rnd.choices(words, k=5)) for j in range(500)]
    texts = [rnd.sample(pool, 50) for _ in range(2000)]
    texts[1234] = [*texts[1234], "raise NeedleError(f'lost')"]
    joined = [GrepFile(f"d/f{i}.py", JoinedLines.of(lines), 2000) for i, lines in enumerate(texts)]
    ruled_out = 0
    real = gi.Signature.may_match

    def counting(self: gi.Signature, needs: gi.Requirement) -> bool:
        nonlocal ruled_out
        verdict = real(self, needs)
        ruled_out += not verdict
        return verdict

    monkeypatch.setattr(gi.Signature, "may_match", counting)
    patterns = ("needle", r"raise \w+Error\(f?['\"]", "NEEDLE|haystack", "gamma delta", r"^return\b", "config")
    with_signatures = [grep(joined, p) for p in patterns]
    assert ruled_out >= 3 * 1900  # the first three patterns: one file may match, ~all others ruled out unread
    monkeypatch.setattr(fv, "requirement", lambda pattern: None)
    assert with_signatures == [grep(joined, p) for p in patterns]
    assert with_signatures[0].matched_files == ["d/f1234.py"]


LINE = st.text(alphabet="abcABC xyz_()-.\t", max_size=24)
PIECE = st.one_of(
    st.text(alphabet="abcABCxyz _().-", min_size=1, max_size=5).map(re.escape),
    st.sampled_from(
        [r"\w", r"\s", ".", "[ab]", "[^c]", r"\b", "^", "$", r"\W", "a*", "b+", "c?", "(?:ab|ca)", "(abc)"]
    ),
)
PATTERN = st.lists(PIECE, min_size=1, max_size=5).map("".join)


@settings(max_examples=300, deadline=None)
@given(
    files=st.lists(st.lists(LINE, min_size=1, max_size=6), min_size=1, max_size=6),
    pattern=PATTERN,
    context=st.integers(0, 3),
)
def test_signatures_never_lose_a_match(files: list[list[str]], pattern: str, context: int) -> None:
    """For any pattern made of literals, classes, anchors, repeats and groups, and any lines: every line that
    matches on its own is in a file the signatures keep, and grep answers exactly as over the split lines (the
    lines it reads in place, and their context)."""
    pattern = pattern.strip()  # as grep takes it
    try:
        re.compile(pattern)
    except re.error:
        assume(False)  # stripping can leave a lone backslash
    needs = gi.requirement(pattern)
    for i, _ in per_line(files, pattern):
        held = gi.signature("\n".join(files[i]))
        assert needs is None or held.may_match(needs), (pattern, files[i])
    assume(pattern != "" and [""] not in files)  # one empty line joins to "", which the cache keeps as no lines
    kept = grep(
        [GrepFile(f"f{i}", JoinedLines.of(lines), 10) for i, lines in enumerate(files)],
        pattern,
        context_lines=context,
        offset=0,
    )
    listed = grep(
        [GrepFile(f"f{i}", lines, 10) for i, lines in enumerate(files)], pattern, context_lines=context, offset=0
    )
    assert kept == listed, pattern


def test_an_agents_files_are_kept_as_grep_reads_them_while_nothing_changes(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second grep over the same files makes nothing again; a file changed or deleted, or the agent's view
    changed (a file opened), are seen at once."""
    memory = open_memory(settings, start_embedder=False)
    try:
        one, two = memory.ensure_agent("one").id, memory.ensure_agent("two").id
        memory.files.create_folder("notes")
        for agent in (one, two):  # while empty: every file starts closed, the two views alike
            memory.files.attach(agent, "notes")
        memory.files.upload_many("notes", [(f"n{i}.md", f"note {i} about tea\n".encode(), "") for i in range(5)])
        made = 0
        real = archive_files.FileRows.joined

        def counting(self: archive_files.FileRows, files: list[Any]) -> dict[str, JoinedLines]:
            nonlocal made
            made += 1
            return real(self, files)

        monkeypatch.setattr(archive_files.FileRows, "joined", counting)
        assert "Found 5 total matches" in memory.grep_files(one, "tea", None, 0, None)
        assert "Found 5 total matches" in memory.grep_files(one, "tea", None, 0, None)
        assert made == 1  # the second grep read the kept files
        memory.files.upload("notes", "n3.md", b"note 3 about coffee\n")
        assert "Found 4 total matches" in memory.grep_files(one, "tea", None, 0, None)
        assert "notes/n3.md" in memory.grep_files(one, "coffee", None, 0, None) and made == 2
        # the same stored view (same folder, files and windows) is parsed once for both agents: nothing made
        assert "Found 4 total matches" in memory.grep_files(two, "tea", None, 0, None) and made == 2
        memory.open_files(one, [OpenRequest("notes/n1.md", None, None)])  # one's view changes: made again
        opened = made
        assert "Found 4 total matches" in memory.grep_files(one, "tea", None, 0, None) and made == opened + 1
        # that grep marked the open n1.md accessed (a new view again); a grep matching no open file changes nothing
        assert "Found 1 total matches" in memory.grep_files(one, "note 2", None, 0, None) and made == opened + 2
        assert "Found 1 total matches" in memory.grep_files(one, "note 2", None, 0, None) and made == opened + 2
        memory.files.delete_files("notes", ["n0.md"])
        assert "Found 3 total matches" in memory.grep_files(two, "tea", None, 0, None) and made == opened + 3
    finally:
        memory.core.close()
