"""Repository hygiene in the test command: the tree is lint-clean and formatted (ruff, configured in pyproject.toml),
and a module that grows past the house's size says why at its top."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from .conftest import ROOT

LINTED = ("src", "tests", "bench")
MAX_LINES = 450  # docs/ARCHITECTURE.md: most modules stay under ~450 lines; one past that says why, or is split
WHY = "Why this module is long:"


def _ruff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, *LINTED], capture_output=True, text=True, cwd=ROOT, check=False
    )


def test_ruff_check_passes() -> None:
    """``ruff check`` with the project's rules finds nothing (fix with ``ruff check --fix``)."""
    result = _ruff("check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_check_passes() -> None:
    """Every file is as ``ruff format`` writes it (fix with ``ruff format src tests bench``)."""
    result = _ruff("format", "--check")
    assert result.returncode == 0, result.stdout + result.stderr


def long_modules_without_a_reason(root: Path, max_lines: int = MAX_LINES) -> list[str]:
    """The modules under ``root`` longer than ``max_lines`` whose module docstring has no line starting with
    ``Why this module is long:`` (path: lines)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        source = path.read_text()
        lines = len(source.splitlines())
        if lines <= max_lines:
            continue
        doc = ast.get_docstring(ast.parse(source), clean=True) or ""
        if not any(line.strip().startswith(WHY) for line in doc.splitlines()):
            found.append(f"{path.relative_to(root)}: {lines} lines")
    return found


def test_the_size_check_finds_a_long_module_without_a_reason(tmp_path: Path) -> None:
    """Not vacuous: a long module is caught unless its docstring gives the reason; a short one never is."""
    body = "x = 1\n" * 10
    (tmp_path / "long.py").write_text('"""A module."""\n' + body)
    (tmp_path / "explained.py").write_text(f'"""A module.\n\n{WHY} it is a table.\n"""\n' + body)
    (tmp_path / "elsewhere.py").write_text(f'"""A module."""\n# {WHY} not in the docstring\n' + body)
    (tmp_path / "short.py").write_text('"""A module."""\nx = 1\n')
    assert long_modules_without_a_reason(tmp_path, max_lines=5) == ["elsewhere.py: 12 lines", "long.py: 11 lines"]


def test_every_long_module_says_why() -> None:
    """A module of ``src/`` over 450 lines is split by noun, or says why in its docstring, on a line that starts
    with ``Why this module is long:``."""
    assert long_modules_without_a_reason(ROOT / "src") == []
