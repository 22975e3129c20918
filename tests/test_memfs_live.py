"""Keeping a MemFS directory in step while something runs: `tiermem serve` with the `sync` setting (a real stdio
server and client) and `tiermem sync DIR --watch` (a real process); `tiermem setup letta-code`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from tiermem.cli.main import main

from .conftest import PYTHON, ROOT, text_of
from .test_memfs import LETTA_FILES, agent_repo, git
from .test_transports import server_env

pytestmark = pytest.mark.anyio


def eventually(check: Callable[[], bool], timeout: float = 20.0) -> float:
    """Seconds until ``check()`` held (fails after ``timeout``)."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < timeout, "timed out"
        time.sleep(0.02)
    return time.monotonic() - start


def head_subject(root: Path) -> str:
    return git(root, "log", "-1", "--format=%s").strip()


async def test_serve_keeps_the_directory_in_step(tmp_path: Path) -> None:
    root = agent_repo(tmp_path / "lcb" / "memfs" / "agent-local-1" / "memory", LETTA_FILES)
    params = StdioServerParameters(
        command=PYTHON,
        args=["-m", "tiermem", "serve", "--data-dir", str(tmp_path / "data"), "--agent", "lc"],
        env=server_env(tmp_path, TIERMEM_SYNC=str(root), TIERMEM_MEMORY_TOOL_DIALECT="letta-code"),
        cwd=str(ROOT),
    )
    async with Client(params) as c:
        # the first sync brings the directory in (the served agent got no default blocks)
        deadline = time.monotonic() + 30
        want = {f"memory://blocks/{p[:-3]}" for p in LETTA_FILES}
        labels: set[str] = set()
        while labels != want:
            assert time.monotonic() < deadline, labels
            time.sleep(0.05)
            labels = {
                str(r.uri) for r in (await c.list_resources()).resources if str(r.uri).startswith("memory://blocks/")
            }
        # an edit through the server is committed (Letta Code's dialect: its reason is the commit message)
        r = await c.call_tool(
            "memory",
            {
                "command": "insert",
                "reason": "Ada likes tea",
                "file_path": "system/human.md",
                "insert_line": 99,
                "insert_text": "Likes tea",
            },
        )
        assert not r.is_error, text_of(r)
        eventually(lambda: head_subject(root) == "Ada likes tea" and git(root, "status", "--porcelain") == "")
        assert (root / "system/human.md").read_text().endswith("Name: Ada\nLikes tea\n")
        # a commit in the directory (as Letta Code's memory tool makes) reaches the server's block
        (root / "reference/Team-Notes.md").write_text("---\ndescription: Team\n---\nAda leads. Bo joins.")
        git(root, "commit", "-q", "-am", "Bo joins")
        deadline = time.monotonic() + 20
        while (await c.read_resource("memory://blocks/reference/Team-Notes")).contents[
            0
        ].text != "Ada leads. Bo joins.":
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_sync_watch_process(tmp_path: Path) -> None:
    root = agent_repo(tmp_path / "memory", LETTA_FILES)
    data = ["--data-dir", str(tmp_path / "data"), "--embedding-model", "hashing"]
    proc = subprocess.Popen(
        [PYTHON, "-m", "tiermem", "sync", str(root), "--agent", "lc", "--watch", *data],
        cwd=ROOT,
        env=server_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().startswith("to_store: ")  # type: ignore[union-attr]
        assert proc.stdout.readline().startswith("notes: created agent 'lc'")  # type: ignore[union-attr]
        (root / "system/human.md").write_text("---\ndescription: The human\n---\nName: Ada Lovelace")
        assert proc.stdout.readline() == "to_store: system/human\n"  # type: ignore[union-attr]
        # another process (a CLI edit here; an MCP server in use) changes the block: the file follows, committed
        assert main(["blocks", "set", "system/human", "Name: Ada Lovelace\nLikes tea", "--agent", "lc", *data]) == 0
        eventually(
            lambda: head_subject(root) == "tiermem: update system/human.md" and git(root, "status", "--porcelain") == ""
        )
        assert (
            root / "system/human.md"
        ).read_text() == "---\ndescription: The human\n---\nName: Ada Lovelace\nLikes tea\n"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def watching(tmp_path: Path, root: Path) -> subprocess.Popen[str]:
    data = ["--data-dir", str(tmp_path / "data"), "--embedding-model", "hashing", "--agent", "lc", "--json"]
    return subprocess.Popen(
        [PYTHON, "-m", "tiermem", "sync", str(root), "--watch", "0.05", *data],
        cwd=ROOT,
        env=server_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sync_watch_exits_2_on_stop_when_a_round_skipped_a_file(tmp_path: Path, signum: int) -> None:
    """`tiermem sync --watch` stopped by SIGTERM or Ctrl-C exits as a plain sync would have: 1 when a round failed
    (its error said), else 2 when a round left something to settle (a file it could not read, even one fixed since),
    else 0."""
    root = tmp_path / "memory"
    root.mkdir()
    codes = []
    for case in ("clean", "skipped", "failed"):
        bad = case == "skipped"
        (root / "human.md").write_bytes(b"---\ndescription: h\n---\nAda" + (b" \xff\n" if bad else b"\n"))
        if case == "failed":  # every round fails on it, as a plain sync would (exit 1)
            (root / ".tiermem-sync.json").write_text("not json")
        proc = watching(tmp_path, root)
        try:
            if case == "failed":
                while "is unreadable" not in (line := proc.stderr.readline()):  # type: ignore[union-attr]
                    assert line, "the watch ended without its round's error"
            else:
                report = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
                assert bool(report["skipped"]) == bad, report
            if bad:  # fixed: the next round is clean, and the exit still says a round skipped it
                (root / "human.md").write_text("---\ndescription: h\n---\nAda L\n")
                assert json.loads(proc.stdout.readline())["skipped"] == []  # type: ignore[union-attr]
            proc.send_signal(signum)
            codes.append(proc.wait(timeout=30))
            err = proc.stderr.read()  # type: ignore[union-attr]
            assert "tiermem: stopped watching" in err, err
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert codes == [0, 2, 1]


def test_sync_watch_stopped_twice_exits_130(tmp_path: Path) -> None:
    """A second Ctrl-C stops `tiermem sync --watch` at once, half-way through a round: it does not exit as if its
    rounds had finished (0 or 2) but with 130. The round is held in the repository's pre-commit hook; the second
    signal is sent once the first was taken (said on stderr), as a person presses Ctrl-C again."""
    root = agent_repo(tmp_path / "memory", {"human.md": "---\ndescription: h\n---\nAda\n"})
    hold, inside = tmp_path / "hold", tmp_path / "inside"
    hook = root / ".git" / "hooks" / "pre-commit"
    # while held, the hook writes: a signal that lands just before tiermem starts waiting on git is taken at the next
    # output (Python runs a handler between reads; a wait begun after the signal landed is not woken by it), not only
    # once the hook ends
    hook.write_text(
        f"#!/bin/sh\nif [ -e '{hold}' ]; then touch '{inside}'; while [ -e '{hold}' ]; do printf . >&2; sleep 0.05; done; "
        "fi\n"
    )
    hook.chmod(0o755)
    proc = watching(tmp_path, root)
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
    reader.start()
    try:
        assert json.loads(proc.stdout.readline())["to_store"] == ["human"]  # type: ignore[union-attr]
        hold.touch()
        data = ["--data-dir", str(tmp_path / "data"), "--embedding-model", "hashing", "--agent", "lc"]
        subprocess.run([PYTHON, "-m", "tiermem", "blocks", "set", "human", "Ada L", *data], cwd=ROOT, check=True)
        eventually(inside.exists, timeout=60)  # the round is in the hook: committing the store's change
        proc.send_signal(signal.SIGINT)
        eventually(lambda: any("Ctrl-C again stops at once" in line for line in err))
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
        hold.unlink()
        reader.join(timeout=30)
        assert "stopped watching at once" in "".join(err)
    finally:
        hold.unlink(missing_ok=True)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_setup_letta_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    base = tmp_path / "lcb"
    monkeypatch.setenv("LETTA_LOCAL_BACKEND_DIR", str(base))
    data = ["--data-dir", str(tmp_path / "data"), "--embedding-model", "hashing"]
    assert main(["setup", "letta-code", *data]) == 1
    assert "none found under" in capsys.readouterr().err
    one = agent_repo(base / "memfs" / "agent-local-1" / "memory", LETTA_FILES)
    assert main(["setup", "letta-code", "--json", *data]) == 0  # the only agent on the machine
    report = json.loads(capsys.readouterr().out)
    assert report["agent"] == "agent-local-1" and report["created_agent"] and report["letta_code_repository"]
    assert sorted(report["sync"]["to_store"]) == sorted(p[:-3] for p in LETTA_FILES)
    assert (
        f"TIERMEM_SYNC={one.resolve()}" in report["host_config"]
        and "TIERMEM_MEMORY_TOOL_DIALECT=letta-code" in report["host_config"]
    )
    agent_repo(base / "memfs" / "agent-local-2" / "memory", {"system/human.md": "---\ndescription: h\n---\nBo"})
    assert main(["setup", "letta-code", *data]) == 1
    assert "agents found: agent-local-1, agent-local-2" in capsys.readouterr().err
    assert (
        main(
            [
                "setup",
                "letta-code",
                "--letta-agent",
                "agent-local-2",
                "--agent",
                "bo",
                "--host",
                "claude-desktop",
                *data,
            ]
        )
        == 0
    )
    out = capsys.readouterr()
    config = json.loads(out.out)
    assert config["mcpServers"]["tiermem"]["args"] == ["serve", "--agent", "bo"]
    assert "tiermem agent: bo (created)" in out.err and "first sync: to_store: system/human" in out.err
    # serving another agent on a directory synced with "bo" is refused at start, with the fix
    done = subprocess.run(
        [PYTHON, "-m", "tiermem", "serve", "--agent", "other", *data],
        cwd=ROOT,
        text=True,
        env=server_env(tmp_path, TIERMEM_SYNC=str(base / "memfs" / "agent-local-2" / "memory")),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    assert (
        done.returncode == 1
        and "is synced with tiermem agent 'bo', not 'other': serve that agent (--agent bo)" in done.stderr
    )


def test_sync_watch_stopped_with_stderr_closed_exits_as_a_sync_would(tmp_path: Path) -> None:
    """`tiermem sync --watch 2>&-` stopped by Ctrl-C: the notice it writes to stderr at once has nowhere to go (fd 2
    closed in the process, as the shell's `2>&-` does), and the stop still happens: exit 0, not a traceback's 1."""
    root = tmp_path / "memory"
    root.mkdir()
    (root / "human.md").write_text("---\ndescription: h\n---\nAda\n")
    data = ["--data-dir", str(tmp_path / "data"), "--embedding-model", "hashing", "--agent", "lc", "--json"]
    proc = subprocess.Popen(
        [PYTHON, "-m", "tiermem", "sync", str(root), "--watch", "0.05", *data],
        cwd=ROOT,
        env=server_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=lambda: os.close(2),  # noqa: PLW1509 - the shell's `2>&-`: no fd 2 at all in the process
    )
    try:
        # the first report (fd 2, once closed, may be reused by a file the process opens: lines not JSON skipped)
        while not (line := proc.stdout.readline()).startswith("{"):  # type: ignore[union-attr]
            assert line, "the watch ended before its first round's report"
        assert json.loads(line)["to_store"] == ["human"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
