"""The package type-checks under mypy --strict (configuration in pyproject.toml, [tool.mypy])."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from .conftest import PYTHON, ROOT


def test_mypy_strict_passes() -> None:
    if (
        shutil.which("mypy") is None
        and subprocess.run([PYTHON, "-m", "mypy", "--version"], capture_output=True).returncode
    ):
        pytest.skip("mypy is not installed (it is in the test extra: pip install -e '.[test]')")
    out = subprocess.run([PYTHON, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "Success" in out.stdout
