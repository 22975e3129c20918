"""Started with stderr closed (``2>&-``), tiermem drops its notices: none reaches stdout (the stdio MCP transport, or a
command's output), and none reaches a file that took fd 2 after it was closed (``cli.keep_notices_off_stdout``)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from .conftest import PYTHON, ROOT
from .test_transports import exercise, server_env

NOTICE = "TIERMEM_NOT_A_SETTING is not a tiermem setting"  # the warning every command prints for an unknown variable


def _env(tmp_path: Path) -> dict[str, str]:
    return server_env(tmp_path, TIERMEM_NOT_A_SETTING="1", TIERMEM_DATA_DIR=str(tmp_path / "data"))


def test_a_command_started_with_stderr_closed_prints_only_its_output(tmp_path: Path) -> None:
    run = [PYTHON, "-m", "tiermem", "remember", "The launch is on March 3rd"]
    assert subprocess.run(run, capture_output=True, env=_env(tmp_path), timeout=120).returncode == 0
    done = subprocess.run(
        [PYTHON, "-m", "tiermem", "blocks", "list", "--json"],
        stdout=subprocess.PIPE,
        env=_env(tmp_path),
        timeout=120,
        preexec_fn=lambda: os.close(2),  # noqa: PLW1509 - the shell's `2>&-`
    )
    assert done.returncode == 0
    assert NOTICE not in done.stdout.decode()
    json.loads(done.stdout)  # the command's output, and nothing else


def _with_fd_2_taken(tmp_path: Path, data: Path, script: str) -> subprocess.CompletedProcess[bytes]:
    """Python started with fd 2 closed (``sys.stderr`` None), then ``data`` opened (it becomes fd 2), then
    ``script``; stdout kept."""
    start = (
        "import os, sys\n"
        f"fd = os.open({str(data)!r}, os.O_WRONLY | os.O_CREAT)\n"
        "assert fd == 2 and sys.stderr is None, fd\n"
    )
    return subprocess.run(
        [PYTHON, "-c", start + script],
        stdout=subprocess.PIPE,
        env=_env(tmp_path),
        cwd=ROOT,
        timeout=120,
        preexec_fn=lambda: os.close(2),  # noqa: PLW1509
    )


def test_a_file_that_took_fd_2_gets_no_notice(tmp_path: Path) -> None:
    """Python found fd 2 closed at start; a file opened since is fd 2: the notices must not be written into it."""
    data = tmp_path / "data.bin"
    done = _with_fd_2_taken(
        tmp_path, data, "from tiermem.cli import main\nsys.exit(main(['blocks', 'list', '--json']))\n"
    )
    assert done.returncode in (0, 1)
    assert data.read_bytes() == b""
    assert NOTICE not in done.stdout.decode()


@pytest.mark.anyio
async def test_serve_over_stdio_with_stderr_closed_speaks_only_protocol(tmp_path: Path) -> None:
    """A real client session works, and every byte the server wrote on stdout (kept by ``tee``) is JSON-RPC."""
    raw = tmp_path / "stdout.jsonl"
    serve = f"exec {PYTHON} -m tiermem serve --data-dir {tmp_path / 'data'} 2>&-"
    params = StdioServerParameters(
        command="sh",
        args=["-c", f'({serve}) | tee "$0"', str(raw)],
        env=server_env(tmp_path, TIERMEM_NOT_A_SETTING="1"),
        cwd=str(ROOT),
    )
    async with Client(params, cache=None) as client:
        await exercise(client)
    lines = raw.read_text().splitlines()
    assert len(lines) >= 6
    for line in lines:
        assert json.loads(line)["jsonrpc"] == "2.0", line


def test_the_stop_notice_does_not_go_into_a_file_that_took_fd_2(tmp_path: Path) -> None:
    """``stopping()`` announces a stop with ``os.write`` (the handler may interrupt a print): to stderr's own
    descriptor, the null device here, not to the file that is fd 2 now; the stop still happens."""
    data = tmp_path / "data.bin"
    script = (
        "import signal\n"
        "from tiermem.cli import keep_notices_off_stdout\n"
        "keep_notices_off_stdout()\n"
        "from tiermem.cli.commands import stopping\n"
        "with stopping() as stop:\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    assert stop.wait(60)\n"
        "print('stopped')\n"
    )
    done = _with_fd_2_taken(tmp_path, data, script)
    assert (done.returncode, done.stdout.decode()) == (0, "stopped\n")
    assert data.read_bytes() == b""


def test_a_command_whose_stderr_reader_left_still_runs(tmp_path: Path) -> None:
    """stderr a pipe whose reader is gone (a host that closed its end): the warning is dropped, not a
    ``BrokenPipeError`` that fails the command (it did: exit 1, no output)."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [PYTHON, "-m", "tiermem", "blocks", "list", "--json"],
            stdout=subprocess.PIPE,
            stderr=write,
            env=_env(tmp_path),
            timeout=120,
        )
    finally:
        os.close(write)
    assert done.returncode == 0
    assert [b["label"] for b in json.loads(done.stdout)] == ["persona", "human"]
