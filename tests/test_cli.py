"""The command line as a user runs it: help with examples, blocks edit in $EDITOR, search from the terminal."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from tiermem.cli.main import build_parser

from .cli_inproc import run_cli
from .conftest import PYTHON, ROOT
from .test_transports import server_env


def tiermem(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``tiermem *args`` on ``tmp_path / "data"``, in this process (``run_cli``: what a command does and says); the
    tests of ``serve`` and of a shell running README's lines start processes."""
    return run_cli(*args, "--data-dir", str(tmp_path / "data"), env=server_env(tmp_path, **env))


def test_every_command_has_help_with_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert {"serve", "agents", "blocks", "search", "import", "export", "config", "chat", "doctor"} <= set(commands)
    for name in commands:
        with pytest.raises(SystemExit):
            parser.parse_args([name, "--help"])
        out = capsys.readouterr().out
        assert "example:\n  tiermem" in out or "ANTHROPIC_API_KEY=" in out, name


def _editor(tmp_path: Path, body: str) -> str:
    script = tmp_path / "editor.sh"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_blocks_edit_in_editor(tmp_path: Path) -> None:
    """The edit's temporary file is made in $TMPDIR (here the test's own: a failed edit keeps the user's text there,
    on purpose, and a test must leave nothing in /tmp)."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    assert tiermem(tmp_path, "blocks", "set", "human", "Name: Ada").returncode == 0
    edit = _editor(tmp_path, 'printf "Name: Ada\\nLikes tea" > "$1"')
    done = tiermem(tmp_path, "blocks", "edit", "human", EDITOR=edit, TMPDIR=str(temp))
    assert done.returncode == 0, done.stderr
    assert "version 3" in done.stdout
    assert tiermem(tmp_path, "blocks", "show", "human").stdout == "Name: Ada\nLikes tea\n"
    history = json.loads(tiermem(tmp_path, "blocks", "history", "human", "--json").stdout)
    assert history[0]["actor"] == "human" and history[0]["operation"] == "edit"
    same = tiermem(tmp_path, "blocks", "edit", "human", EDITOR=_editor(tmp_path, "true"), TMPDIR=str(temp))
    assert same.returncode == 0 and "unchanged" in same.stdout
    failed = tiermem(tmp_path, "blocks", "edit", "human", EDITOR=_editor(tmp_path, "exit 3"), TMPDIR=str(temp))
    assert failed.returncode == 1 and "status 3" in failed.stderr
    assert list(temp.iterdir()) == []  # nothing kept: there was no text of the user's to keep
    too_long = tiermem(
        tmp_path, "blocks", "edit", "human", EDITOR=_editor(tmp_path, "printf '%06000d' 0 > \"$1\""), TMPDIR=str(temp)
    )
    assert too_long.returncode == 1 and "5000 character limit" in too_long.stderr
    [kept] = temp.iterdir()
    assert kept.name.startswith("tiermem-human-") and f"your text is kept in {kept}." in too_long.stderr
    assert kept.read_text() == "0" * 6000
    assert tiermem(tmp_path, "blocks", "show", "human").stdout == "Name: Ada\nLikes tea\n"
    kept.unlink()
    # a label with "/" (system/human/family) names no directory: the file is made in $TMPDIR all the same, never in
    # a "system/" someone else may have made there
    (temp / "system").mkdir(mode=0o777)
    assert tiermem(tmp_path, "blocks", "create", "system/human/family", "--value", "Sister: Bea").returncode == 0
    nested = tiermem(
        tmp_path,
        "blocks",
        "edit",
        "system/human/family",
        EDITOR=_editor(tmp_path, 'printf "Sister: Bea\nBrother: Cy" > "$1"'),
        TMPDIR=str(temp),
    )
    assert nested.returncode == 0, nested.stderr
    assert tiermem(tmp_path, "blocks", "show", "system/human/family").stdout == "Sister: Bea\nBrother: Cy\n"
    kept_nested = tiermem(
        tmp_path,
        "blocks",
        "edit",
        "system/human/family",
        EDITOR=_editor(tmp_path, "printf '%06000d' 0 > \"$1\""),
        TMPDIR=str(temp),
    )
    assert kept_nested.returncode == 1 and list((temp / "system").iterdir()) == []
    [kept] = (p for p in temp.iterdir() if p.is_file())
    assert kept.name.startswith("tiermem-system_human_family-") and kept.read_text() == "0" * 6000


def test_blocks_edit_drops_the_newline_an_editor_adds(tmp_path: Path) -> None:
    """An editor that ends the file with a newline on saving (vim's 'fixendofline', nano) adds none to the block,
    and a save without a change (vim's :wq) makes no new version; a value that ends with a newline keeps it."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    assert tiermem(tmp_path, "blocks", "set", "human", "Name: Ada").returncode == 0
    vim_wq = _editor(tmp_path, '[ -n "$(tail -c1 "$1")" ] && printf "\\n" >> "$1"; exit 0')
    same = tiermem(tmp_path, "blocks", "edit", "human", EDITOR=vim_wq, TMPDIR=str(temp))
    assert same.returncode == 0 and "human: unchanged (version 2)" in same.stdout, same.stdout + same.stderr
    sed = _editor(tmp_path, "sed -i 's/Ada/Bea/' \"$1\"")
    changed = tiermem(tmp_path, "blocks", "edit", "human", EDITOR=sed, TMPDIR=str(temp))
    assert changed.returncode == 0 and "version 3" in changed.stdout, changed.stderr
    assert json.loads(tiermem(tmp_path, "blocks", "show", "human", "--json").stdout)["value"] == "Name: Bea"
    assert tiermem(tmp_path, "blocks", "set", "human", "Name: Bea\n").returncode == 0
    kept = tiermem(tmp_path, "blocks", "edit", "human", EDITOR=vim_wq, TMPDIR=str(temp))
    assert "human: unchanged (version 4)" in kept.stdout, kept.stdout + kept.stderr
    assert json.loads(tiermem(tmp_path, "blocks", "show", "human", "--json").stdout)["value"] == "Name: Bea\n"
    assert list(temp.iterdir()) == []


def test_serve_at_a_terminal_says_it_waits_for_a_host(tmp_path: Path) -> None:
    """`tiermem serve` typed at a terminal (stdin a TTY) says on stderr that it speaks MCP over stdio for a host to
    start, and how to connect one; started by a host (stdin a pipe) it says nothing of the kind. With no request, it
    stores no memory, and `tiermem doctor` then says so and what to do, rather than to run `tiermem serve`."""
    import pty

    data = tmp_path / "data"
    primary, terminal = pty.openpty()
    proc = subprocess.Popen(
        [PYTHON, "-m", "tiermem", "serve", "--data-dir", str(data)],
        stdin=terminal,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=server_env(tmp_path),
    )
    os.close(terminal)
    assert proc.stderr is not None
    said = []
    for line in proc.stderr:
        said.append(line)
        if "serving agent" in line:
            break
    os.close(primary)  # the terminal hangs up: the server ends, as at a host's end of input
    proc.wait(timeout=120)
    assert proc.stdout is not None
    out, err = proc.stdout.read(), proc.stderr.read()  # (not communicate: it would skip what the loop above buffered)
    stderr = "".join(said) + err
    assert proc.returncode == 0 and out == "", stderr
    assert "stdin is a terminal: `tiermem serve` speaks MCP over stdio" in stderr
    assert "`tiermem setup claude-code`" in stderr
    piped = subprocess.run(
        [PYTHON, "-m", "tiermem", "serve", "--data-dir", str(data)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=server_env(tmp_path),
        timeout=120,
        check=False,
    )
    assert piped.returncode == 0 and "serving agent" in piped.stderr and "stdin is a terminal" not in piped.stderr
    doctor = tiermem(tmp_path, "doctor")
    assert doctor.returncode == 1 and f"{data} holds no tiermem memory yet" in doctor.stdout
    assert "connect a host to `tiermem serve` (`tiermem setup`)" in doctor.stdout
    assert "made by the first `tiermem serve`" not in doctor.stdout


def test_the_log_level_setting_applies_to_serve(tmp_path: Path) -> None:
    """`log_level` (TIERMEM_LOG_LEVEL) is the server's level on stderr: WARNING leaves its INFO lines out (the CLI's
    logging was set up at INFO before the setting was read, so it had no effect)."""

    def serve(level: str | None) -> str:
        env = server_env(tmp_path)
        if level is not None:
            env["TIERMEM_LOG_LEVEL"] = level
        done = subprocess.run(
            [PYTHON, "-m", "tiermem", "serve", "--data-dir", str(tmp_path / "data")],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stderr

    assert "serving agent" in serve(None)
    assert "serving agent" not in serve("WARNING")


def test_search_prints_a_table_and_json(tmp_path: Path) -> None:
    graph = tmp_path / "memory.jsonl"
    graph.write_text(
        json.dumps(
            {"type": "entity", "name": "Launch", "entityType": "event", "observations": ["The launch is on 3 March"]}
        )
        + "\n"
    )
    assert tiermem(tmp_path, "import", str(graph)).returncode == 0
    table = tiermem(tmp_path, "search", "when is the launch", "--archival")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:3] == ["memory", "relevance", "time"] and "archival" in lines[1] and "3 March" in lines[1]
    rows = json.loads(tiermem(tmp_path, "search", "launch", "--json").stdout)
    assert rows[0]["memory"] == "archival" and "type:event" in rows[0]["where"]
    none = tiermem(tmp_path, "search", "launch", "--recall")
    assert none.stdout.strip() == "no results"
    bad = tiermem(tmp_path, "search", "x", "--limit", "1000")
    assert bad.returncode == 1 and "limit" in bad.stderr
    typo = tiermem(tmp_path, "search", "launch", "--agent", "defualt")
    assert typo.returncode == 1 and "No agent named 'defualt' (agents: default)" in typo.stderr
    assert "defualt" not in tiermem(tmp_path, "agents", "list").stdout


def test_readme_tour_runs_as_written(tmp_path: Path) -> None:
    """Every shell line of README's five-minute tour, run literally in a terminal alone (no host, no API key) with
    the default model, in a fresh data directory. It ends with the memory it promises: the search finds the fact,
    the block shows it, the folder holds the file, the exports exist, and the doctor says healthy."""
    readme = (ROOT / "README.md").read_text()
    tour = readme.split("## A five-minute tour", 1)[1].split("\n## ", 1)[0]
    lines = []
    for block in tour.split("```bash")[1:]:
        for line in block.split("```", 1)[0].splitlines():
            command = line.split("  #", 1)[0].strip() if not line.strip().startswith("#") else ""
            if command and not command.startswith("pip install"):
                lines.append(command)
    assert lines[0] == "tiermem blocks show --core" and lines[-1] == "tiermem doctor"
    env = server_env(
        tmp_path, HOME=str(tmp_path / "home"), EDITOR="true", XDG_DATA_HOME=str(tmp_path / "home" / ".local" / "share")
    )
    env.pop("TIERMEM_EMBEDDING_MODEL")  # as a user runs it: the default model
    env.pop("TIERMEM_DATA_DIR", None)  # and the default data directory, under the (temporary) home
    env["PATH"] = f"{Path(PYTHON).parent}{os.pathsep}{env.get('PATH', '')}"
    work = tmp_path / "work"
    work.mkdir()
    seen = {}
    for command in lines:
        done = subprocess.run(
            command, shell=True, capture_output=True, text=True, cwd=work, env=env, timeout=300, check=False
        )
        assert done.returncode == 0, f"{command}: {done.stdout}{done.stderr}"
        assert "Traceback" not in done.stderr and " INFO " not in done.stderr, f"{command}: {done.stderr}"
        seen[command] = done.stdout
    search = next(out for c, out in seen.items() if c.startswith("tiermem search"))
    first = search.splitlines()[1]
    assert first.split()[0] == "archival" and "green tea" in first, search
    assert seen["tiermem blocks show human"].strip() == "Name: Ada. Works on compilers. Prefers tea."
    history = seen["tiermem blocks history human"].splitlines()
    assert history[1].split()[0] == "2" and "Prefers tea" in history[1], history
    assert (work / "default.af").exists() and (work / "backup.jsonl").exists()
    af = json.loads((work / "default.af").read_text())
    assert [f["file_name"] for f in af["files"]] == ["notes/plans.md"], af["files"]
    doctor = seen["tiermem doctor"].splitlines()
    assert doctor[-1] == "healthy", doctor
    assert any(line.startswith("[ok ] passages index: 1 rows, 0 without vectors") for line in doctor), doctor
    assert "[ok ] folders: 1 folder(s), 1 file(s)" in doctor, doctor
    assert (tmp_path / "home" / ".local" / "share" / "tiermem").is_dir()  # the default data directory was used
