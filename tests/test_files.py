"""The one atomic file write (base/files.py): the old file or the new one, never half of one, no temporary left."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import TextIO

import pytest

from tiermem.base.files import write_atomically, write_text_atomically


def test_a_write_replaces_the_file_whole_with_the_mode_asked(tmp_path: Path) -> None:
    target = tmp_path / "settings.json"
    target.write_text("old", encoding="utf-8")
    write_text_atomically(target, "new\r\n", mode=0o640, durable=True, newline="")
    assert target.read_bytes() == b"new\r\n"  # newline "": written as given
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["settings.json"]


def test_a_failing_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "export.af"
    target.write_text("the old export", encoding="utf-8")

    def half(f: TextIO) -> None:
        f.write("half of a new ")
        raise RuntimeError("the writer failed")

    with pytest.raises(RuntimeError, match="the writer failed"):
        write_atomically(target, half)
    assert target.read_text(encoding="utf-8") == "the old export"
    assert [p.name for p in tmp_path.iterdir()] == ["export.af"]


def test_a_missing_directory_is_an_error_and_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_text_atomically(tmp_path / "nowhere" / "file.md", "text")
    assert list(tmp_path.iterdir()) == []
