"""`tiermem setup claude-code`: what it writes, idempotently; `--uninstall` removes exactly that; `config` shows it."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from .conftest import PYTHON, ROOT
from .test_transports import server_env


def tiermem(tmp_path: Path, home: Path, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = server_env(tmp_path, HOME=str(home))
    return subprocess.run(
        [PYTHON, "-m", "tiermem", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=60, check=False
    )


def read(path: Path) -> dict[str, object]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def test_user_scope_install_is_idempotent_and_uninstall_restores_the_files(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    theirs_servers = {"numStartups": 3, "mcpServers": {"other": {"command": "other-server", "args": []}}}
    theirs_settings = {
        "model": "opus",
        "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]},
    }
    (home / ".claude.json").write_text(json.dumps(theirs_servers))
    (home / ".claude" / "settings.json").write_text(json.dumps(theirs_settings))
    data = tmp_path / "memory"
    args = ["setup", "claude-code", "--data-dir", str(data), "--agent", "work", "--tools", "minimal"]
    first = tiermem(tmp_path, home, *args)
    assert first.returncode == 0, first.stderr
    servers, settings = read(home / ".claude.json"), read(home / ".claude" / "settings.json")
    again = tiermem(tmp_path, home, *args)
    assert again.returncode == 0 and again.stdout.count("unchanged") == 2, again.stdout
    assert read(home / ".claude.json") == servers and read(home / ".claude" / "settings.json") == settings

    entry = servers["mcpServers"]["tiermem"]  # type: ignore[index]
    assert Path(entry["command"]).is_absolute() and Path(entry["command"]).name == "tiermem"
    assert Path(entry["command"]).exists()  # the tiermem that ran setup
    assert entry["args"] == ["serve", "--data-dir", str(data), "--agent", "work", "--tools", "minimal"]
    assert entry["alwaysLoad"] is True
    assert servers["numStartups"] == 3 and "other" in servers["mcpServers"]  # type: ignore[operator]
    hooks = settings["hooks"]
    assert isinstance(hooks, dict) and set(hooks) == {"SessionStart", "UserPromptSubmit", "Stop"}
    assert hooks["Stop"][0] == theirs_settings["hooks"]["Stop"][0]  # type: ignore[index]  # theirs kept, first
    command = hooks["UserPromptSubmit"][0]["hooks"][0]["command"]
    assert shlex.split(command) == [entry["command"], "hook", "claude-code", "--data-dir", str(data), "--agent", "work"]
    assert hooks["SessionStart"][0]["matcher"] == "startup|clear|compact"

    gone = tiermem(tmp_path, home, "setup", "claude-code", "--uninstall", "--data-dir", str(data), "--agent", "work")
    assert gone.returncode == 0, gone.stderr
    assert read(home / ".claude.json") == theirs_servers
    assert read(home / ".claude" / "settings.json") == theirs_settings
    twice = tiermem(tmp_path, home, "setup", "claude-code", "--uninstall")
    assert twice.returncode == 0 and twice.stdout.count("unchanged") == 2


def test_setup_makes_a_new_data_directory_private_and_doctor_passes_it(tmp_path: Path) -> None:
    """Setup (user scope) records Claude Code's auto memory in <data dir>/auto-memory/<agent> before it opens the
    memory: a new data directory, and what it makes inside, are private to the user (0700, as every other command
    makes one), not the umask's 0755 that `tiermem doctor` then fails as open to every user."""
    home, data = tmp_path / "home", tmp_path / "memory"
    home.mkdir()
    env = server_env(tmp_path, HOME=str(home))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [PYTHON, "-m", "tiermem", *args, "--data-dir", str(data)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=120,
            check=False,
            preexec_fn=lambda: os.umask(0o022),  # the usual umask: what a mkdir without a mode gives is 0755
        )

    done = run("setup", "claude-code")
    assert done.returncode == 0, done.stderr
    for made in (data, data / "auto-memory", data / "auto-memory" / "default"):
        assert made.stat().st_mode & 0o777 == 0o700, (made, oct(made.stat().st_mode))
    doctor = run("doctor")
    assert "[ok ] data directory access" in doctor.stdout, doctor.stdout


def test_project_scope_writes_the_project_files_and_approves_the_server(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    done = tiermem(tmp_path, home, "setup", "claude-code", "--scope", "project", "--agent", "proj", cwd=project)
    assert done.returncode == 0, done.stderr
    assert not (home / ".claude.json").exists()  # nothing at user scope
    entry = read(project / ".mcp.json")["mcpServers"]["tiermem"]  # type: ignore[index]
    assert entry["args"][:2] == ["serve", "--data-dir"] and entry["args"][3:5] == ["--agent", "proj"]
    assert Path(entry["args"][2]).is_absolute()  # the default data directory, spelled out
    assert set(read(project / ".claude" / "settings.json")["hooks"]) == {"SessionStart", "UserPromptSubmit", "Stop"}  # type: ignore[arg-type]
    assert read(project / ".claude" / "settings.local.json") == {"enabledMcpjsonServers": ["tiermem"]}
    gone = tiermem(
        tmp_path, home, "setup", "claude-code", "--scope", "project", "--uninstall", "--project-dir", str(project)
    )
    assert gone.returncode == 0, gone.stderr
    assert list(project.iterdir()) == []  # the files (and the .claude folder) it created are gone


def test_config_shows_what_setup_would_write_and_writes_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = tiermem(tmp_path, home, "config", "claude-code", "--agent", "work", "--data-dir", str(tmp_path / "d"))
    assert done.returncode == 0, done.stderr
    assert f"# {home / '.claude.json'}: mcpServers" in done.stdout
    assert f"# {home / '.claude' / 'settings.json'}: hooks" in done.stdout
    assert "hook claude-code --data-dir" in done.stdout and '"alwaysLoad": true' in done.stdout
    assert not home.exists()


@pytest.mark.parametrize("broken", ["{not json", "[1, 2]"])
def test_a_broken_settings_file_is_reported_and_left_alone(tmp_path: Path, broken: str) -> None:
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text(broken)
    done = tiermem(tmp_path, home, "setup", "claude-code")
    assert done.returncode == 1 and "settings.json" in done.stderr and "Nothing was changed" in done.stderr
    assert (home / ".claude" / "settings.json").read_text() == broken


def test_a_tiermem_server_of_yours_is_kept_unless_force_and_uninstall_puts_it_back(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    yours = {
        "numStartups": 7,
        "mcpServers": {
            "tiermem": {"command": "tiermem", "args": ["serve", "--agent", "mine"]},
            "other": {"command": "other-server"},
        },
    }
    text = json.dumps(yours, indent=4)
    (home / ".claude.json").write_text(text)
    refused = tiermem(tmp_path, home, "setup", "claude-code", "--agent", "work")
    assert refused.returncode == 1 and "already has an MCP server `tiermem` that setup did not write" in refused.stderr
    assert "--force" in refused.stderr and "Nothing was changed" in refused.stderr
    assert (home / ".claude.json").read_text() == text and not (home / ".claude" / "settings.json").exists()

    forced = tiermem(tmp_path, home, "setup", "claude-code", "--agent", "work", "--force")
    assert forced.returncode == 0, forced.stderr
    assert "replaced (--force" in forced.stdout
    entry = read(home / ".claude.json")["mcpServers"]["tiermem"]  # type: ignore[index]
    assert entry["args"][3:5] == ["--agent", "work"]
    again = tiermem(tmp_path, home, "setup", "claude-code", "--agent", "work")  # its own entry now: no --force needed
    assert again.returncode == 0 and again.stdout.count("unchanged") == 2, again.stdout + again.stderr

    gone = tiermem(tmp_path, home, "setup", "claude-code", "--uninstall")
    assert gone.returncode == 0, gone.stderr
    assert "yours put back" in gone.stdout
    assert read(home / ".claude.json") == yours
    assert not (home / ".claude").exists()  # setup created the folder and the settings file: both gone


def test_uninstall_keeps_your_approval_and_the_files_that_were_there(tmp_path: Path) -> None:
    """Files that existed before setup stay, even when nothing is left in them, and so do the (empty) keys you had;
    an approval of tiermem you had stays; only what setup created goes."""
    home, project = tmp_path / "home", tmp_path / "project"
    (project / ".claude").mkdir(parents=True)
    (project / ".mcp.json").write_text("{}")
    (project / ".claude" / "settings.json").write_text('{"hooks": {"Stop": []}}\n')
    approval = {"enabledMcpjsonServers": ["tiermem"], "permissions": {"allow": ["Bash(ls)"]}}
    (project / ".claude" / "settings.local.json").write_text(json.dumps(approval))
    done = tiermem(tmp_path, home, "setup", "claude-code", "--scope", "project", "--agent", "p", cwd=project)
    assert done.returncode == 0, done.stderr
    assert "settings.local.json: unchanged" in done.stdout  # approved already
    assert set(read(project / ".claude" / "settings.json")["hooks"]) == {"SessionStart", "UserPromptSubmit", "Stop"}  # type: ignore[arg-type]
    gone = tiermem(tmp_path, home, "setup", "claude-code", "--scope", "project", "--uninstall", cwd=project)
    assert gone.returncode == 0, gone.stderr
    assert read(project / ".mcp.json") == {} and read(project / ".claude" / "settings.json") == {"hooks": {"Stop": []}}
    assert read(project / ".claude" / "settings.local.json") == approval


def test_your_hooks_survive_setup_and_uninstall_in_their_order(tmp_path: Path) -> None:
    """Your entries in the same event arrays, a tiermem hook you wrote yourself included, are never touched or
    reordered; setup's entries go after them, and a re-run leaves them where they are."""
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)

    def entry(command: str, **more: object) -> dict[str, object]:
        return {**more, "hooks": [{"type": "command", "command": command}]}

    own_tiermem = entry("tiermem hook claude-code --data-dir /elsewhere --agent mine", matcher="startup")
    theirs = {
        "hooks": {
            "SessionStart": [own_tiermem, entry("echo start")],
            "UserPromptSubmit": [entry("log-prompt", matcher=""), entry("spell-check")],
            "Stop": [entry("notify-send done")],
            "PreToolUse": [entry("guard", matcher="Bash")],
        },
        "model": "opus",
    }
    settings = home / ".claude" / "settings.json"
    settings.write_text(json.dumps(theirs))
    assert tiermem(tmp_path, home, "setup", "claude-code").returncode == 0
    after = read(settings)["hooks"]
    for event, entries in theirs["hooks"].items():  # type: ignore[attr-defined]
        assert json.dumps(after[event][: len(entries)]) == json.dumps(entries)  # type: ignore[index]
    assert len(after["SessionStart"]) == 3 and after["SessionStart"][2]["matcher"] == "startup|clear|compact"  # type: ignore[index]
    # you add a hook after setup's; a re-run changes nothing
    later = read(settings)
    later["hooks"]["Stop"].append(entry("say finished"))  # type: ignore[index]
    settings.write_text(json.dumps(later))
    again = tiermem(tmp_path, home, "setup", "claude-code")
    assert again.returncode == 0 and f"{settings}: unchanged" in again.stdout, again.stdout
    assert read(settings) == later
    gone = tiermem(tmp_path, home, "setup", "claude-code", "--uninstall")
    assert gone.returncode == 0, gone.stderr
    expected = json.loads(json.dumps(theirs))
    expected["hooks"]["Stop"].append(entry("say finished"))
    assert json.dumps(read(settings)) == json.dumps(expected)  # yours, byte for byte in their order
