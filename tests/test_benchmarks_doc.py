"""BENCHMARKS.md is a short report: one table of current figures, each with the command that measures it.

The dated measurements live in docs/benchmarks-history.md. Neither page carries machine paths or commit hashes, and
every ``python -m bench NAME`` the report gives names a benchmark ``bench/__main__.py`` dispatches to.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "BENCHMARKS.md"
HISTORY = ROOT / "docs" / "benchmarks-history.md"
MAX_BYTES = 30_000
COLUMNS = ["what", "figure", "goal", "command", "date"]
# Commands other than a benchmark that a row may give (a test that prints its figure).
OTHER_COMMANDS = ("python -m pytest ",)
MACHINE_PATH = re.compile(r"/work/|/tmp/")
FULL_HASH = re.compile(r"\b[0-9a-f]{40}\b")
# A short commit id: 7-12 hex digits with at least one letter and one digit (so `1000000` or "deadbeef" do not count).
SHORT_HASH = r"(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,12}"
SHORT_HASH_IN_BACKTICKS = re.compile(rf"`{SHORT_HASH}`")
SHORT_HASH_BARE = re.compile(rf"\b{SHORT_HASH}\b")


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def first_table(text: str) -> tuple[list[str], list[list[str]]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("|"))
    header = cells(lines[start])
    assert re.fullmatch(r"\|?(\s*:?-+:?\s*\|)+\s*:?-*:?\s*\|?", lines[start + 1].strip()), "no separator row"
    rows = []
    for line in lines[start + 2 :]:
        if not line.lstrip().startswith("|"):
            break
        rows.append(cells(line))
    return header, rows


def benches() -> set[str]:
    tree = ast.parse((ROOT / "bench" / "__main__.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "BENCHES" for t in node.targets):
            return {ast.literal_eval(e) for e in node.value.elts}
    raise AssertionError("bench/__main__.py has no BENCHES list")


def test_the_report_is_short() -> None:
    assert len(REPORT.read_bytes()) <= MAX_BYTES


def test_the_first_table_has_a_command_and_a_date_per_row() -> None:
    header, rows = first_table(REPORT.read_text())
    assert [h.lower() for h in header] == COLUMNS
    assert len(rows) >= 20
    for row in rows:
        assert len(row) == len(COLUMNS), row
        what, figure, goal, command, date = row
        assert what and figure and goal, row
        assert command.startswith("`") and command.endswith("`"), row
        command = command.strip("`")
        assert command.startswith("python -m bench ") or command.startswith(OTHER_COMMANDS), row
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", date), row
        assert len(figure) <= 60 and len(goal) <= 40, row


def test_every_bench_command_names_a_benchmark() -> None:
    names = benches() | {"all"}
    text = REPORT.read_text()
    found = re.findall(r"python -m bench(\.[a-z_]+)?(?: +([a-z_]+))?", text)
    assert found
    for module, name in found:
        if module:
            assert (ROOT / "bench" / f"{module[1:]}.py").is_file(), module
        elif name:
            assert name in names, f"python -m bench {name}: no such benchmark"
            assert name == "all" or (ROOT / "bench" / f"{name}.py").is_file(), name


def test_no_machine_paths_or_commit_hashes() -> None:
    for page in (REPORT, HISTORY):
        text = page.read_text()
        for pattern in (MACHINE_PATH, FULL_HASH, SHORT_HASH_IN_BACKTICKS, SHORT_HASH_BARE):
            hits = pattern.findall(text)
            assert not hits, f"{page.name}: {pattern.pattern} {hits[:5]}"


def test_the_report_states_no_history() -> None:
    text = REPORT.read_text()
    for pattern in (r"\b[Ii]ssues? #?\d", r"\bround \d", r"\bsession \d", r"\bticket"):
        assert not re.search(pattern, text), pattern
