"""A long upload says how far its embedding is: each file's chunks embedded of its total, as lines on stderr, at most
one every few seconds and none for a quick upload; stdout (what ``--json`` writes) gets none of it."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from tiermem.cli import folders as folders_cli
from tiermem.domain.file_embedding import SLICE
from tiermem.interop.folder_sync import EMBED_INLINE_MAX, upload_paths
from tiermem.interop.progress import BackfillLines, ChunkLines, duration

from .test_folders_cli import memory_of, run, write

BIG = "".join(f"the quick brown fox jumps over the lazy dog, line {i}\n" for i in range(6_000))


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("tiermem: embedding ")]


def test_each_files_chunks_are_told_as_they_are_embedded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "d", {"big.txt": BIG, "small.md": "a few words\n"})
    assert run(tmp_path, capsys, "folders", "create", "docs")[0] == 0
    memory = memory_of(tmp_path)
    told = io.StringIO()
    paths = [tmp_path / "d" / "big.txt", tmp_path / "d" / "small.md"]
    report = upload_paths(memory, "docs", paths, progress=None, embedded=ChunkLines(stream=told, every=0))
    assert not report.failed
    total = next(f.chunks for f in memory.files.files("docs") if f.name == "big.txt")
    assert total > SLICE
    assert _lines(told.getvalue()) == [
        f"tiermem: embedding big.txt: {SLICE} of {total:,} chunks",
        f"tiermem: embedding big.txt: {total:,} of {total:,} chunks",
        "tiermem: embedding small.md: 1 of 1 chunks",
    ]
    assert not any(memory.archive.vectors.missing().values())  # embedded in slices, none left for the backfill


def test_the_cli_tells_it_on_stderr_and_keeps_stdout_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "d", {"big.txt": BIG})
    assert run(tmp_path, capsys, "folders", "create", "docs")[0] == 0
    code, out, err = run(tmp_path, capsys, "folders", "upload", "docs", str(tmp_path / "d" / "big.txt"), "--json")
    assert code == 0 and not _lines(err), err  # quick (under PROGRESS_SECONDS): nothing said
    (tmp_path / "d" / "big.txt").write_text(BIG + "one more line\n")
    monkeypatch.setattr(folders_cli, "PROGRESS_SECONDS", 0.0)
    code, out, err = run(tmp_path, capsys, "folders", "upload", "docs", str(tmp_path / "d" / "big.txt"), "--json")
    assert code == 0 and json.loads(out)["folder"] == "docs" and len(out.splitlines()) == 1, out
    told = _lines(err)
    assert told and told[-1].endswith(" chunks") and "big.txt: " in told[-1], err


def test_lines_come_at_most_every_interval_and_a_shown_file_gets_its_last() -> None:
    now = [0.0]
    told = io.StringIO()
    lines = ChunkLines(stream=told, every=5.0, clock=lambda: now[0])
    lines("a.txt", 256, 1_000)  # within the first 5 s: quiet
    now[0] = 5.0
    lines("a.txt", 512, 1_000)
    now[0] = 6.0
    lines("a.txt", 768, 1_000)  # 1 s after the last line: quiet
    lines("a.txt", 1_000, 1_000)  # its last: said, as its progress was
    lines("b\tc.txt", 3, 3)  # done, never shown, within the interval: quiet
    now[0] = 12.0
    lines("d\nx.txt", 1_024, 2_048)
    assert told.getvalue().splitlines() == [
        "tiermem: embedding a.txt: 512 of 1,000 chunks",
        "tiermem: embedding a.txt: 1,000 of 1,000 chunks",
        "tiermem: embedding d\\nx.txt: 1,024 of 2,048 chunks",
    ]


def test_an_upload_of_many_files_tells_its_backfill_with_rate_and_time_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over ``EMBED_INLINE_MAX`` files are stored without vectors and embedded afterwards (``_embed`` ->
    ``catch_up`` -> ``backfill_now``): that embedding says how far it is too, on stderr, not only its last line."""
    files: dict[str, str | bytes] = {
        f"f{i:03}.txt": f"file {i}\n" + BIG[: 40 * 60] for i in range(EMBED_INLINE_MAX + 1)
    }
    write(tmp_path / "d", files)
    assert run(tmp_path, capsys, "folders", "create", "docs")[0] == 0
    monkeypatch.setattr(folders_cli, "PROGRESS_SECONDS", 0.0)
    code, out, err = run(tmp_path, capsys, "folders", "upload", "docs", str(tmp_path / "d"), "--json")
    assert code == 0 and json.loads(out)["folder"] == "docs" and len(out.splitlines()) == 1, out
    memory = memory_of(tmp_path)
    chunks = sum(f.chunks for f in memory.files.files("docs"))
    assert chunks > 128  # more than one batch of the backfill
    told = [line for line in err.splitlines() if line.startswith("tiermem: embedding stored rows: ")]
    assert len(told) >= 2, err
    counts = [tuple(int(n.replace(",", "")) for n in line.split(": ")[2].split(" (")[0].split(" of ")) for line in told]
    assert counts[-1] == (chunks, chunks) and all(d < t for d, t in counts[:-1])
    assert [d for d, _ in counts] == sorted(d for d, _ in counts)
    assert " rows/s, about " in told[0] and told[0].endswith(" left") and "done in" in told[-1]
    assert f"embedded {chunks} row(s) stored without vectors" in err
    assert not any(memory.archive.vectors.missing().values())


def test_backfill_lines_come_at_most_every_interval_with_the_rate_and_time_left() -> None:
    now = [0.0]
    told = io.StringIO()
    lines = BackfillLines(stream=told, every=5.0, clock=lambda: now[0])
    now[0] = 2.0
    lines(128, 10_000)  # within the first 5 s: quiet
    now[0] = 10.0
    lines(1_000, 10_000)  # 100 rows/s: 9,000 left take 90 s
    now[0] = 12.0
    lines(1_128, 10_000)  # 2 s after the last line: quiet
    now[0] = 100.0
    lines(10_000, 10_000)  # the last: said, as the progress was
    assert told.getvalue().splitlines() == [
        "tiermem: embedding stored rows: 1,000 of 10,000 (10%), 100.0 rows/s, about 2 min left",
        "tiermem: embedding stored rows: 10,000 of 10,000 (100%), 100.0 rows/s, done in 2 min",
    ]
    quick = io.StringIO()
    lines = BackfillLines(stream=quick, every=5.0, clock=lambda: now[0])
    now[0] = 101.0
    lines(50, 50)  # a quick backfill: nothing said (the command's own last line says it)
    assert quick.getvalue() == ""
    assert [duration(s) for s in (0.4, 45, 60, 61, 3599, 3600, 5_700)] == [
        "0 s",
        "45 s",
        "1 min",
        "2 min",
        "1 h 0 min",
        "1 h 0 min",
        "1 h 35 min",
    ]
