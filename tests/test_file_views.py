"""file_views: Letta's file views and texts, character for character, and a grep that is fast and bounded in time.

The expected strings were produced by running Letta's own code (LineChunker.chunk_text, the grep_files loop of
LettaFileToolExecutor, Memory._render_directories_common) on the same inputs.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import time
from pathlib import Path

import pytest

from tiermem.base.errors import ValidationError
from tiermem.domain import file_views as fv
from tiermem.domain.file_views import (
    DirectoryInfo,
    FileEntry,
    GrepFile,
    OpenRequest,
    check_file_name,
    check_folder_name,
    check_requests,
    compile_pattern,
    file_defaults,
    file_type,
    grep,
    is_text_type,
    open_summary,
    render_directories,
    render_window,
    semantic_text,
    stored_range,
    strategy_of,
    truncate_visible,
    unique_name,
    view_lines,
    window_of,
)

GUIDE = "Install the tool. Then run it!\nErrors are logged. Run again if needed."
APP = "def run():\n    log('start')\n\n    return run_all()\n"
NOTES = "  nothing here  \nrun once\n"


def files() -> list[GrepFile]:
    return [
        GrepFile("docs/guide.md", view_lines(GUIDE, "documentation"), len(GUIDE)),
        GrepFile("src/app.py", view_lines(APP, "code"), len(APP)),
        GrepFile("notes.txt", view_lines(NOTES, "line_based"), len(NOTES)),
    ]


def test_the_registry_is_lettas() -> None:
    assert len(fv.FILE_TYPES) == 48  # every extension Letta's FileTypeRegistry registers
    assert file_type("a/b.md") == "text/markdown" and strategy_of("b.md", "text/markdown") == "documentation"
    assert file_type("x.PY") == "text/x-python" and strategy_of("x.py", None) == "code"
    assert (
        strategy_of("x.html", "text/html") == "code" and strategy_of("d.json", "application/json") == "structured_data"
    )
    assert strategy_of("x.h", "text/x-c") == "code" and strategy_of("r.pdf", "application/pdf") == "line_based"
    assert strategy_of("notes.md", "text/x-markdown") == "documentation"  # unregistered MIME: the extension decides
    assert strategy_of("notes.txt", "text/markdown") == "documentation"  # the MIME first
    assert strategy_of("Makefile", "text/plain") == "line_based" and strategy_of("x.unknown", None) == "line_based"
    assert file_type("Makefile") == "text/plain" and file_type("p.png") == "application/octet-stream"
    assert file_type("r.docx").endswith("wordprocessingml.document")
    assert is_text_type("a.py") and is_text_type("a.yaml") and is_text_type("Makefile")
    assert not is_text_type("a.pdf") and not is_text_type("a.docx") and is_text_type("a.html")
    assert not is_text_type("a.png")
    assert fv.chunk_type("documentation") == "sentences" and fv.chunk_type("code") == "lines"


def test_view_lines_follow_the_line_chunker() -> None:
    assert view_lines(GUIDE, "documentation") == [
        "Install the tool.",
        "Then run it!",
        "Errors are logged.",
        "Run again if needed.",
    ]
    assert view_lines("a.  b?\n\n  C d\te.\n", "documentation") == ["a. b?", "C d e."]  # split only before capitals
    assert view_lines(APP, "code") == ["def run():", "    log('start')", "    return run_all()"]
    assert view_lines(NOTES, "line_based") == ["nothing here", "run once"]
    assert view_lines("a\x0cb\u2028c\r\nd", "structured_data") == ["a", "b", "c", "d"]  # str.splitlines
    assert view_lines("", "code") == [] and view_lines(" \n ", "line_based") == []


def test_render_window_texts() -> None:
    lines = view_lines(GUIDE, "documentation")
    assert render_window("docs/guide.md", lines, "documentation", 1, 3) == (
        "[Viewing sentences 2 to 3 (out of 4 sentences)]\n2: Then run it!\n3: Errors are logged."
    )
    code = view_lines(APP, "code")
    assert render_window("a.py", code, "code", None, None) == (
        "[Viewing file start (out of 3 lines)]\n1: def run():\n2:     log('start')\n3:     return run_all()"
    )
    assert (
        render_window("a.py", code, "code", 2, None)
        == "[Viewing lines 3 to end (out of 3 lines)]\n3:     return run_all()"
    )
    assert render_window("a.py", code, "code", 1, 99) == (
        "[Viewing lines 2 to 3 (out of 3 lines)]\n2:     log('start')\n3:     return run_all()"
    )  # end clamped
    with pytest.raises(ValidationError, match=re.escape("Invalid range: start (2) must be less than end (2)")):
        render_window("a.py", code, "code", 2, 2)
    with pytest.raises(ValidationError) as info:
        render_window("d/a.py", code, "code", 3, None)
    assert str(info.value) == "File d/a.py has only 3 lines, but requested offset 4 is out of range"
    assert render_window("empty.txt", [], "line_based", 5, 9) == ""  # Letta: nothing for an empty file


def test_truncate_and_defaults() -> None:
    assert truncate_visible("short", 10) == "short"
    text = "x" * 200
    out = truncate_visible(text, 120)
    warning = "...[TRUNCATED]\n# NOTE: This block is truncated, use functions to view the full content."
    assert out == "x" * (120 - len(warning)) + warning and len(out) == 120
    assert file_defaults(None) == (5, 50000) and file_defaults(0) == (5, 50000)
    assert [file_defaults(w) for w in (8_000, 8_001, 32_000, 128_000, 200_000, 200_001)] == [
        (3, 5000),
        (5, 15000),
        (5, 15000),
        (10, 25000),
        (10, 40000),
        (15, 40000),
    ]


def test_open_files_texts() -> None:
    one = [OpenRequest("docs/a.md", 0, 50)]
    assert open_summary(one, {}, [], []) == "* Opened docs/a.md (lines 1-50)"
    many = [OpenRequest("a", 9, 10), OpenRequest("b", 4, None), OpenRequest("c"), OpenRequest("d", None, 5)]
    previous = {"a": (1, 20), "b": (3, None), "c": (None, None)}
    assert open_summary(many, previous, ["x", "y"], ["z"]) == (
        "* Opened 4 files: a (lines 10-19) (previously lines 1-20), b (lines 5-end) (previously lines 3-end), "
        "c (previously full file), d\n"
        "Note: Closed 2 file(s) due to close_all_others=True: x, y\n"
        "Note: Closed 1 least recently used file(s) due to open file limit: z"
    )
    assert window_of(OpenRequest("a", 9, 10)) == (9, 19) and stored_range(OpenRequest("a", 9, 10)) == (10, 19)
    assert window_of(OpenRequest("a", 3)) == (3, None) and stored_range(OpenRequest("a", 3)) == (4, None)
    assert window_of(OpenRequest("a", None, 5)) == (None, None)  # Letta ignores a length without an offset
    texts = {
        "Cannot open 3 files: exceeds configured maximum limit of 2 files": ([OpenRequest("a")] * 3, 2),
        "No file requests provided": ([], 2),
        "Offset for file a must be >= 0 (0-indexed), got -1": ([OpenRequest("a", -1)], 2),
        "Length for file a must be >= 1, got 0": ([OpenRequest("a", 0, 0)], 2),
    }
    for message, (requests, limit) in texts.items():
        with pytest.raises(ValidationError) as info:
            check_requests(requests, limit)
        assert str(info.value) == message
    check_requests([OpenRequest("a", 0, 1)], 1)


def test_grep_output_is_lettas() -> None:
    assert grep(files(), "run").text == (
        "Found 5 total matches across 3 files (showing matches 1-5 of 5)\n" + "=" * 80 + "\n\nFiles with matches:\n"
        "  - docs/guide.md: 2 matches\n  - src/app.py: 2 matches\n  - notes.txt: 1 matches\n\n\n"
        "=== docs/guide.md:2 ===\n  1: Install the tool.\n> 2: Then run it!\n  3: Errors are logged.\n\n"
        "=== docs/guide.md:4 ===\n  3: Errors are logged.\n> 4: Run again if needed.\n\n"
        "=== src/app.py:1 ===\n> 1: def run():\n  2:     log('start')\n\n"
        "=== src/app.py:3 ===\n  2:     log('start')\n> 3:     return run_all()\n\n"
        "=== notes.txt:2 ===\n  1: nothing here\n> 2: run once\n\nNo more matches to show."
    )
    result = grep(files(), "  run ", include="*.py", context_lines=0)
    assert result.text == (
        "Found 2 total matches across 1 files (showing matches 1-2 of 2)\n" + "=" * 80 + "\n\nFiles with matches:\n"
        "  - src/app.py: 2 matches\n\n\n=== src/app.py:1 ===\n> 1: def run():\n\n"
        "=== src/app.py:3 ===\n> 3:     return run_all()\n\nNo more matches to show."
    )
    assert result.matched_files == ["src/app.py"]
    assert grep(files(), "^return").matched_files == ["src/app.py"]  # the content is stripped, as Letta's
    assert grep(files(), "zzz", include="*.py").text == "No matches found for pattern: 'zzz' in files matching '*.py'"
    assert grep(files(), "run", include="*.rs").text == "No files match the filename pattern '*.rs' (filtered 3 files)"
    assert grep(files(), "zzz", include="  ").text == "No matches found for pattern: 'zzz' in files matching '  '"
    assert grep(files(), "run", include="^src/").matched_files == ["src/app.py"]  # a regex include
    assert grep([], "run").text == "No files are currently attached to search"
    assert grep(files(), "zzz").matched_files == []


def test_grep_pages_and_the_collection_limit() -> None:
    big = GrepFile("big.txt", [f"match {i}" for i in range(1200)], 10_000)
    other = GrepFile("other.txt", ["match"], 5)
    text = grep([big, other], "match", offset=990).text
    assert text.startswith("Found 1000+ total matches across 1 files (showing matches 991-1000 of 1000+)\n")
    assert (
        "\nFiles with matches:\n  - big.txt: 1000+ matches\n\n\n=== big.txt:991 ===\n  990: match 989\n> 991: " in text
    )
    assert text.endswith(
        "=== big.txt:1000 ===\n  999: match 998\n> 1000: match 999\n  1001: match 1000\n\n"
        "Showing last page of collected matches. There may be more matches beyond the collection limit."
    )
    first = grep([big, other], "match").text.splitlines()
    assert first[0] == "Found 1000+ total matches across 1 files (showing matches 1-20 of 1000+)"
    assert first[-2:] == [
        'To see more matches, call: grep_files(pattern="match", offset=20)',
        "Note: Only the first 1000 matches were collected. There may be more matches beyond this limit.",
    ]
    small = GrepFile("s.txt", [f"hit {i}" for i in range(25)], 100)
    page = grep([small], "hit", offset=-5, context_lines=None).text.splitlines()
    assert page[0] == "Found 25 total matches across 1 files (showing matches 1-20 of 25)"
    assert page[-1] == 'To see more matches, call: grep_files(pattern="hit", context_lines=0, offset=20)'
    assert "=== s.txt:1 ===" in page and "> 1: hit 0" in page and "  2: hit 1" not in page  # no context
    assert grep([small], "hit", offset=20).text.splitlines()[-1] == "No more matches to show."


def test_the_next_page_hint_is_a_call_that_repeats_every_argument() -> None:
    """The hint repeats ``include`` and ``context_lines`` and writes strings as JSON (a quote in the pattern stays a
    valid call); an offset past the last match says so and how many there are, not "showing matches 1001-1000"."""
    small = GrepFile("f00.txt", [f'ma"tch {i}' for i in range(25)], 100)
    text = grep([small], 'ma"tch|match', include="f00", context_lines=2).text
    hint = text.splitlines()[-1]
    assert (
        hint
        == r'To see more matches, call: grep_files(pattern="ma\"tch|match", include="f00", context_lines=2, offset=20)'
    )
    assert json.loads(hint.split("pattern=", 1)[1].split(", include=")[0]) == 'ma"tch|match'  # the pattern given
    big = GrepFile("big.txt", [f"match {i}" for i in range(1200)], 10_000)
    assert grep([big], "match", offset=1000).text == (
        "Found 1000+ total matches across 1 files, but none at offset 1000: offsets run from 0 to 999. To see the "
        'last page, call: grep_files(pattern="match", offset=980)'
    )
    assert grep([small], "tch", offset=30).text.startswith(
        "Found 25 total matches across 1 files, but none at offset 30: offsets run from 0 to 24."
    )


def test_grep_size_limits() -> None:
    huge = GrepFile("huge.txt", ["needle"], fv.MAX_FILE_SIZE_BYTES + 1)
    fine = GrepFile("fine.txt", ["needle here"], 100)
    text = grep([huge, fine], "needle").text
    assert text.startswith(
        "Found 1 total matches across 1 files (showing matches 1-1 of 1)\n"
        "Note: Skipped 1 files due to size limits\n" + "=" * 80
    )
    assert grep([huge, fine], "absent").text == "No matches found for pattern: 'absent' (searched 1 files, skipped 1)"
    many = [GrepFile(f"f{i}.txt", ["x"], 45 * 1024 * 1024) for i in range(6)]  # the 5th passes 200 MB: stop there
    assert grep(many, "absent").text == "No matches found for pattern: 'absent' (searched 4 files, skipped 1)"


def test_grep_pattern_checks() -> None:
    for bad, message in [
        ("", "Empty search pattern provided"),
        ("   ", "Empty search pattern provided"),
        ("a" * 1001, "Pattern too complex: 1001 chars > 1000 limit"),
        ("(ab", "Invalid regex pattern: missing ), unterminated subpattern at position 0"),
        (r"\p{L}", "Invalid regex pattern: bad escape \\p at position 0"),
    ]:  # re's verdict, as Letta
        with pytest.raises(ValidationError) as info:
            grep(files(), bad)
        assert str(info.value) == message
    with pytest.raises(ValidationError, match=re.escape("Invalid regex pattern: ")):
        grep(files(), "run", include="(x")
    with pytest.raises(ValidationError, match="Pattern too complex"):
        compile_pattern("b" * 1001)
    assert compile_pattern("RUN").search("run") is not None  # case-insensitive


def test_grep_has_a_time_limit() -> None:
    evil = GrepFile("evil.txt", ["x" * 5000], 5000)
    with pytest.raises(ValidationError) as info:  # only the time limit ends this search: it raises, nothing partial
        grep([evil], "(x+x+)+y", time_limit=0.2)
    message = str(info.value)
    assert "'(x+x+)+y'" in message and "simpler or more specific pattern" in message


def test_grep_time_limit_is_wall_clock() -> None:
    """The limit is on the wall clock, not the CPU the ``regex`` library counts: on a machine so busy that each reading
    of the clock is 3 s later, a catastrophic search over a 5 s limit stops after one CPU slice, saying so."""
    evil = GrepFile("evil.txt", ["x" * 5000], 5000)
    now = [0.0]

    def busy_clock() -> float:
        now[0] += 3.0
        return now[0]

    with pytest.raises(ValidationError) as info:
        grep([evil], "(x+x+)+y", time_limit=5, clock=busy_clock)
    assert "stopped at its 5-second time limit" in str(info.value)


def _children() -> list[int]:
    """The live processes whose parent is this one (Linux: /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended while listed
        if int(fields[1]) == os.getpid() and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


@pytest.mark.timeout(120)
def test_grep_deadline_child_answers_and_is_killed() -> None:
    """A search past its CPU slice runs in a child process: same answers as in this process, and at the deadline the
    child is killed (it burns nothing after), not left to run out its CPU budget."""
    from tiermem.domain import grep_deadline

    compiled = compile_pattern("b.r")
    text = "foo bar\nBAR baz\nnothing\nkébab rien"
    far = time.monotonic() + 60
    assert grep_deadline.search(compiled, text, far, time.monotonic, slice_seconds=0) is True
    assert grep_deadline.search(compile_pattern("zzz"), text, far, time.monotonic, slice_seconds=0) is False
    assert grep_deadline.match_starts(compiled, text, far, time.monotonic, slice_seconds=0) == [4, 8, 28]
    assert grep_deadline.match_starts(compiled, text, far, time.monotonic) == [4, 8, 28]
    before = set(_children())
    with pytest.raises(TimeoutError):
        grep_deadline.search(compile_pattern("(x+x+)+y"), "x" * 5000, time.monotonic() + 1.5, time.monotonic)
    assert set(_children()) <= before


@pytest.mark.timeout(120)
def test_grep_deadline_child_finds_regex_on_pythonpath_only(tmp_path: Path) -> None:
    """A ``regex`` found only through ``PYTHONPATH`` (or a user site) is found by the search's child too, though it
    runs with ``python -I``: an interpreter with no ``regex`` of its own (a bare venv) searches past its slice."""
    import venv

    import regex

    import tiermem

    venv.EnvBuilder(with_pip=False).create(tmp_path / "bare")
    python = tmp_path / "bare" / "bin" / "python"
    libs = tmp_path / "libs"
    libs.mkdir()
    (libs / "regex").symlink_to(Path(regex.__file__).parent, target_is_directory=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(tiermem.__file__).parent.parent), str(libs)])}
    bare = subprocess.run([str(python), "-I", "-c", "import regex"], capture_output=True, env=env, check=False)
    assert bare.returncode != 0  # the bare interpreter has no regex of its own
    script = (
        "import regex, time\n"
        "from tiermem.domain import grep_deadline\n"
        "far = time.monotonic() + 60\n"
        "print(grep_deadline.match_starts(regex.compile('b.r'), 'foo bar bur', far, time.monotonic, slice_seconds=0))"
    )
    run = subprocess.run([str(python), "-c", script], capture_output=True, text=True, env=env, check=False)
    assert (run.returncode, run.stdout.strip()) == (0, "[4, 8]"), run.stderr


TRICKY_LINES = [
    "alpha beta",
    "    indented line",
    "end.",
    "a",
    "b",
    "-x-",
    "foo_bar baz",
    "Caps Here",
    "x y z",
    "tab\there",
    "1234",
    "alpha",
    "last line",
]
TRICKY_PATTERNS = [
    r"^a",
    r"a$",
    r"^a$",
    r"\ba\b",
    r"\Ba",
    r"^\s*indented",
    r"^indented",
    r"(?<!a)b",
    r"a(?!l)",
    r"\Aalpha",
    r"beta\Z",
    r"a\nb",
    r"a\sb",
    r"[^x]b",
    r"^$",
    r"x*",
    r"(?-i:CAPS)",
    r"(?i)caps",
    r"(?s)a.b",
    r"(?m)^b$",
    r"(?<=-)x",
    r"x(?=-)",
    r"\W",
    r"^-",
    r"-$",
    r"(?x) a  $",
    r"e.$",
    r"alpha|beta",
    r"z",
    r"\d+$",
    r"^\d",
    r"(a)\1",
    r"\bz",
    r"^\w+\W",
    # lines narrowed to where a whole-file match starts (never_spans_lines) or to literal hits
    r"e\.",
    r"a.",
    r"(?<=\W)x",
    r"(?<=a)l",
    r"al+",
    r"\bl\w+",
    r"LINE",
    r"spaces  before",
    r"a|b|z",
]


def letta_lines(lines: list[str], pattern: str) -> list[int]:
    """Letta's per-line semantics with the standard ``re``: the stripped content of each line searched alone."""
    compiled = re.compile(pattern, re.IGNORECASE | re.MULTILINE)
    return [i + 1 for i, line in enumerate(lines) if compiled.search(line.strip())]


def test_the_fast_path_agrees_with_the_per_line_search() -> None:
    """Whether or not the prefilter runs (``prefilter_is_sound``), grep finds exactly Letta's lines, file by file."""
    rnd = random.Random(7)
    corpus = [TRICKY_LINES] + [rnd.sample(TRICKY_LINES, 4) for _ in range(40)] + [["only", "  spaces  before"]]
    grep_files = [GrepFile(f"f{i}.txt", lines, 100) for i, lines in enumerate(corpus)]
    used_prefilter = 0
    for pattern in TRICKY_PATTERNS:
        used_prefilter += fv.prefilter_is_sound(pattern)
        expected = [(f.name, n) for f in grep_files for n in letta_lines(list(f.lines), pattern)]
        result = grep(grep_files, pattern, offset=0)
        kept = grep(
            [GrepFile(f.name, fv.JoinedLines.of(list(f.lines)), f.size_bytes) for f in grep_files], pattern, offset=0
        )  # the lines as the cache keeps them: one string a file
        assert kept == result, pattern
        shown = re.findall(r"^=== (.+):(\d+) ===$", result.text, re.MULTILINE)
        total = re.match(r"Found (\d+) total", result.text)
        assert (int(total.group(1)) if total else 0) == len(expected), pattern
        assert [(name, int(n)) for name, n in shown] == expected[:20], pattern
        assert result.matched_files == list(dict.fromkeys(name for name, _ in expected)), pattern
    assert 10 < used_prefilter < len(TRICKY_PATTERNS)
    assert fv.never_spans_lines(r"e\.") and fv.never_spans_lines(r"\bl\w+") and not fv.never_spans_lines(r"a\sb")
    assert (
        not fv.never_spans_lines(r"[^x]b") and not fv.never_spans_lines(r"(?s)a.b") and not fv.never_spans_lines(r"\W")
    )
    for unsound in (r"\Aa", r"a\Z", r"(?!x)a", r"(?<!x)a", r"(?-m:^a)", r"a{e<=1}", r"\N{DIGIT ONE}"):
        assert not fv.prefilter_is_sound(unsound), unsound
    assert fv.literal_alternatives("TODO|fixme") == ("todo", "fixme") and fv.literal_alternatives("a.b") is None


def test_grep_over_ten_thousand_files_finds_the_one_match() -> None:
    """The prefilter over many files (speed is measured by `python -m bench files`, never asserted here)."""
    rnd = random.Random(3)
    words = ["alpha", "beta", "gamma", "delta", "return", "import", "value", "config", "server", "client"]
    pool = ["    " * (j % 3) + " ".join(rnd.choices(words, k=5)) for j in range(1000)]
    corpus = [GrepFile(f"d/f{i}.py", rnd.sample(pool, 100), 3000) for i in range(10_000)]
    corpus[6000] = GrepFile("d/needle.py", [*corpus[6000].lines, "the needle is here"], 3000)
    for pattern in ("needle", "NEEDLE|haystack", r"need(le|ful)\b", r"^the\s+needle"):
        result = grep(corpus, pattern)
        assert result.matched_files == ["d/needle.py"], pattern
        assert "=== d/needle.py:101 ===" in result.text, pattern


def test_semantic_text_is_lettas() -> None:
    long_passage = "\n".join(f"line {i}" for i in range(23))
    hits = [
        ("docs/a.md", "  First passage\nsecond line  "),
        ("code/b.py", long_passage),
        ("docs/a.md", "third"),
        ("", "orphan"),
    ]
    summary = "Found 4 semantic matches in 3 files for query: 'memory tiers'"
    assert semantic_text("  memory tiers ", hits) == "\n".join(
        [
            summary,
            "=" * len(summary),
            "\n=== docs/a.md (passage #1) ===\n  First passage\n  second line",
            "\n=== docs/a.md (passage #2) ===\n  third",
            "\n=== code/b.py (passage #3) ===\n"
            + "\n".join(f"  line {i}" for i in range(20))
            + "\n  ... [truncated 3 more lines]",
            "\n=== Unknown File (passage #4) ===\n  orphan",
        ]
    )
    assert semantic_text("x", [("a.md", "y")]).startswith("Found 1 semantic matches in 1 file for query: 'x'\n")
    assert semantic_text("q", []) == "No semantic matches found for query: 'q'"
    with pytest.raises(ValidationError, match="^Empty search query provided$"):
        semantic_text("  ", [])
    assert fv.SEMANTIC_LIMIT_CAP == 50


FOLDERS = [DirectoryInfo("s1", "docs", "Team docs", "Read first"), DirectoryInfo("s2", "code", None, "")]
ENTRIES = [
    FileEntry("s1", "docs/a.md", "[Viewing file start (out of 1 sentences)]\n1: Hi.", 5000, read_only=True),
    FileEntry("s1", "docs/b.txt", "", 5000, read_only=True),
    FileEntry("s2", "code/c.py", "", 100),
]


def test_render_directories_is_lettas() -> None:
    body = (
        '<directory name="docs">\n<description>Team docs</description>\n<instructions>Read first</instructions>\n'
        '<file status="open" name="docs/a.md">\n<metadata>\n- read_only=true\n- chars_current=48\n'
        "- chars_limit=5000\n</metadata>\n<value>\n[Viewing file start (out of 1 sentences)]\n1: Hi.\n</value>\n"
        '</file>\n<file status="closed" name="docs/b.txt">\n<metadata>\n- read_only=true\n- chars_current=0\n'
        '- chars_limit=5000\n</metadata>\n</file>\n</directory>\n<directory name="code">\n'
        '<file status="closed" name="code/c.py">\n<metadata>\n- chars_current=0\n- chars_limit=100\n</metadata>\n'
        "</file>\n</directory>\n</directories>"
    )
    assert render_directories(5, FOLDERS, ENTRIES) == (
        "\n\n<directories>\n<file_limits>\n- current_files_open=1\n- max_files_open=5\n</file_limits>\n" + body
    )
    assert render_directories(None, FOLDERS, ENTRIES) == "\n\n<directories>\n" + body


def test_render_directories_caps_closed_files() -> None:
    entries = [FileEntry("s1", f"docs/{i}.txt", "", 10) for i in range(5)] + [FileEntry("s1", "docs/open.md", "x", 10)]
    text = render_directories(5, FOLDERS[:1], entries, closed_cap=2)
    assert text.count('<file status="closed"') == 2 and '<file status="open" name="docs/open.md">' in text
    assert 'name="docs/0.txt"' in text and 'name="docs/1.txt"' in text and 'name="docs/2.txt"' not in text
    more = re.search(r'<more_files count="3">(.*)</more_files>\n</directory>', text)
    assert more and "3 more closed files" in more.group(1)
    assert all(tool in more.group(1) for tool in ("grep_files", "semantic_search_files", "open_files"))
    assert render_directories(5, FOLDERS[:1], entries, closed_cap=5) == render_directories(5, FOLDERS[:1], entries)


def test_names() -> None:
    for good in ("notes.md", "sub/dir/file.py", "Dockerfile", "a b (1).txt", "caf\u00e9.md"):
        assert check_file_name(good) == good
    for bad, hint in [
        ("", "cannot be empty"),
        ("a\x00b", "control character"),
        ("a\nb.md", "control character"),
        ("/etc/passwd", "'etc/passwd'"),
        ("../x.md", "'x.md'"),
        ("a/./b", "'a/b'"),
        ("a\\b.txt", "'a/b.txt'"),
        ("C:/x.txt", "absolute"),
        (" a.md", "'a.md'"),
        ("a//b", "'a/b'"),
        ("x" * 256, "at most 255"),
    ]:
        with pytest.raises(ValidationError) as info:
            check_file_name(bad)
        assert hint in str(info.value), (bad, str(info.value))
    assert check_folder_name("research") == "research"
    for bad in ("a/b", "..", "x" * 101, "", "a\tb"):
        with pytest.raises(ValidationError):
            check_folder_name(bad)
    assert unique_name("report.pdf", set()) == "report.pdf"
    assert unique_name("report.pdf", {"report.pdf"}) == "report_(1).pdf"
    assert unique_name("report.pdf", {"report.pdf", "report_(1).pdf"}) == "report_(2).pdf"
    assert unique_name("README", {"README"}) == "README_(1)"
    long = "y" * 250 + ".txt"
    assert len(unique_name(long, {long})) <= 255 and unique_name(long, {long}).endswith("_(1).txt")


def test_a_refused_folder_name_suggests_a_name_a_folder_may_have() -> None:
    """The file name rules suggest paths ('a/b' for 'a\\b', 'a/b' for '/a/b'); a folder's name has no '/', so each
    refusal of a folder name suggests a flat one, which is accepted."""
    for bad, suggested in [
        ("a\\b", "a-b"),
        ("/a/b", "a-b"),
        ("a//b", "a-b"),
        ("a/../b", "a-b"),
        ("../x", "x"),
        ("docs/ ", "docs"),
        ("a/b\n", "a-b"),
        ("/", "docs"),
        ("..", "docs"),
        (".", "docs"),
    ]:
        with pytest.raises(ValidationError) as info:
            check_folder_name(bad)
        said = str(info.value)
        assert f"e.g. '{suggested}'" in said, (bad, said)
        assert "inside the folder" not in said and "'/'," not in said.split("e.g.")[-1], (bad, said)
        assert check_folder_name(suggested) == suggested


def test_a_huge_context_is_cut_to_the_pages_cap_with_a_note() -> None:
    """Letta's context_lines has no bound (10**6 answers with whole files); tiermem keeps Letta's argument but cuts a
    page's context to the widest radius that fits GREP_CONTEXT_CHARS, says so, and shows every match line."""
    lines = [f"line {i} " + "filler " * 10 for i in range(3000)]
    lines[1000] = lines[2000] = "the needle is here"
    files = [GrepFile("big.txt", lines, sum(len(x) + 1 for x in lines))]
    small = grep(files, "needle", context_lines=2).text
    assert "Note: context cut" not in small and "  999: line 998" in small
    huge = grep(files, "needle", context_lines=1_000_000).text
    assert len(huge) <= fv.GREP_CONTEXT_CHARS + 2_000
    assert "> 1001: the needle is here" in huge and "> 2001: the needle is here" in huge
    note = huge.rsplit("Note: context cut to ", 1)[1]
    radius = int(note.split(" ", 1)[0])
    assert 0 < radius < 1000 and "(context_lines=1000000)" in note and "open_files on a match's lines" in note
    assert f"  {1001 - radius}: line {1000 - radius} " in huge and f"  {1000 - radius}: line" not in huge


def test_the_list_of_files_with_matches_is_bounded_and_says_how_to_narrow() -> None:
    """900 files of long names, one match each: Letta lists every file (~330 KB; 1,000 make ~370 KB). The list stops within
    GREP_FILES_CHARS, most matches first, with a line saying how many files it left out and how to narrow the search;
    the whole answer stays within the cap. A short list is Letta's, untouched."""
    folder = "f" * 100
    files = [GrepFile(f"{folder}/{i:04d}-" + "n" * 240 + ".txt", ["a needle"], 9) for i in range(900)]
    files[500] = GrepFile(files[500].name, ["needle", "needle again", "a third needle"], 30)
    text = grep(files, "needle", context_lines=3).text
    assert len(text) <= fv.GREP_CONTEXT_CHARS + 2_000, len(text)
    listing = text.split("Files with matches:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert listing[0] == f"  - {files[500].name}: 3 matches"
    left = 900 - (len(listing) - 1)
    assert (
        text.startswith("Found 902 total matches across 900 files")
        and 0 < len(listing) - 1 < 900
        and sum(len(x) + 1 for x in listing[:-1]) <= fv.GREP_FILES_CHARS
    )
    assert listing[-1] == (
        f"  ... and {left} more files, not listed to keep this answer under 50,000 characters: narrow the search "
        'with a more specific pattern or include (a glob such as include="docs/*.md")'
    )
    some = grep(files, "needle", include="*.txt").text  # still too many: the advice names the glob given
    assert "more specific pattern or a narrower include glob" in some
    few = grep(files[:3], "needle").text
    assert "Files with matches:\n" + "\n".join(f"  - {f.name}: 1 matches" for f in files[:3]) + "\n\n" in few
    assert "not listed" not in few


@pytest.mark.parametrize("joined", [False, True], ids=["lines", "joined"])
@pytest.mark.parametrize("context", [0, 1])
def test_a_match_on_a_huge_line_is_clipped_around_it_with_a_true_note(joined: bool, context: int) -> None:
    """A minified 1 MB line holding the match was shown whole (a 1 MB answer under a note saying it was kept under
    50,000 characters, and advising a smaller context_lines even at 0): the line is clipped to GREP_LINE_CHARS
    around the match, with markers saying how much was cut and where the match is, and a note saying so."""
    line = "var x=1;" * 125_000 + "NEEDLE;"
    held = fv.JoinedLines(line) if joined else [line]
    text = grep([GrepFile("g/min.js", held, len(line))], "needle", context_lines=context).text
    assert len(text) < fv.GREP_LINE_CHARS + 1_000, len(text)
    shown = text.split("> 1: ", 1)[1].split("\n", 1)[0]
    assert shown.startswith("[... 998,007 characters cut; the match is at column 1,000,001 ...];var x=1;")
    assert shown.endswith("NEEDLE;") and len(shown) < fv.GREP_LINE_CHARS + 100
    assert "Note: lines longer than 2,000 characters are shown in part" in text
    assert "Note: context cut" not in text and "under 50,000" not in text  # nothing else was cut


def test_twenty_huge_lines_fit_the_pages_cap_and_short_lines_stay_whole() -> None:
    """A page of 20 matches on 100 KB lines (match mid-line, context lines as long): the answer stays within the
    cap, each match keeps its match, cut on both sides, a context line is kept from its start; lines under the cap
    are shown whole, with no note (Letta's answer)."""
    lines = [("a" * 50_000 + f" hit{i} " + "b" * 50_000) if i % 2 == 0 else "c" * 100_000 for i in range(60)]
    text = grep([GrepFile("x.txt", lines, 6_000_000)], "hit", context_lines=1).text
    assert len(text) <= fv.GREP_CONTEXT_CHARS + 2_000, len(text)
    for i in range(0, 40, 2):
        assert f"> {i + 1}: [... 49,001 characters cut; the match is at column 50,002 ...]" in text
        assert f" hit{i} " in text
    assert text.count("[... 49,005 more characters cut ...]") == 5  # hit0 .. hit8
    assert text.count("[... 49,006 more characters cut ...]") == 15  # hit10 .. hit38
    assert "Note: lines longer than 2,000 characters are shown in part" in text
    note = text.split("Note: context cut to ", 1)[1]
    assert note.startswith(
        "0 line(s) around each match (context_lines=1) to keep the matches shown and the list of files under 50,000"
    )
    assert "smaller context_lines" not in text  # no advice that cannot help
    two = grep([GrepFile("x.txt", ["c" * 3_000, "short hit", "d" * 3_000], 6_000)], "hit").text
    assert "  1: " + "c" * 2_000 + "[... 1,000 more characters cut ...]\n> 2: short hit\n  3: " + "d" * 2_000 in two
    whole = ["e" * 1_900, "x hit " + "f" * 1_990, "g"]
    assert "[... " not in grep([GrepFile("y.txt", whole, 4_000)], "hit").text


def test_a_negative_context_is_refused_and_a_negative_offset_is_the_first_page() -> None:
    """context_lines=-1 showed each match with no line at all (Letta's empty context) under a false note "context
    cut to -1 line(s)": refused, saying what it takes. A negative offset is the first page, as Letta reads it."""
    small = GrepFile("s.txt", [f"hit {i}" for i in range(25)], 100)
    with pytest.raises(ValidationError, match=r"context_lines must be a whole number >= 0 .*got -1\."):
        grep([small], "hit", context_lines=-1)
    assert grep([small], "hit", offset=-1).text == grep([small], "hit", offset=0).text


@pytest.mark.parametrize("joined", [False, True], ids=["lines", "joined"])
def test_a_huge_context_reads_windows_for_the_page_only(joined: bool) -> None:
    """1,000 matches collected with context_lines=10**9: only the page's 20 are read with their context (each window
    was built for every match collected: 1,000 windows of the whole file)."""
    import tracemalloc

    lines = [f"match {i}" for i in range(3000)]
    held = fv.JoinedLines("\n".join(lines)) if joined else lines
    files = [GrepFile("big.txt", held, sum(len(x) + 1 for x in lines))]
    tracemalloc.start()
    try:
        text = grep(files, "match", context_lines=10**9, offset=500).text
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert text.startswith("Found 1000+ total matches across 1 files (showing matches 501-520 of 1000+)")
    assert "> 501: match 500" in text and "> 520: match 519" in text and "Note: context cut to " in text
    assert peak < 40 * 1024 * 1024, peak  # 20 windows of 3,000 lines, not 1,000


@pytest.mark.parametrize("joined", [False, True], ids=["lines", "joined"])
def test_a_context_past_the_lines_read_is_noted_though_the_page_fits(joined: bool) -> None:
    """A match on a file's first line with context_lines=10**6: the search reads GREP_CONTEXT_CHARS // 10 lines each
    side (a page of empty lines that fits the cap), and the answer says the context was cut; one whose file ends
    within the lines read has no note."""
    reach = fv.GREP_CONTEXT_CHARS // 10
    lines = ["the needle is here", *([""] * (reach + 500))]
    held = fv.JoinedLines("\n".join(lines)) if joined else lines
    files = [GrepFile("empty.txt", held, sum(len(x) + 1 for x in lines))]
    text = grep(files, "needle", context_lines=10**6).text
    assert len(text) <= fv.GREP_CONTEXT_CHARS + 2_000 and f"  {reach + 1}: " in text and f"  {reach + 2}: " not in text
    assert f"Note: context cut to {reach} line(s) around each match (context_lines=1000000)" in text
    short = lines[: reach + 1]  # the file ends at the last line read: nothing left out
    held = fv.JoinedLines("\n".join(short)) if joined else short
    files = [GrepFile("short.txt", held, sum(len(x) + 1 for x in short))]
    text = grep(files, "needle", context_lines=10**6).text
    assert f"  {reach + 1}: " in text and "Note: context cut" not in text
