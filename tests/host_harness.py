"""Run the real Codex CLI, Gemini CLI and opencode offline against tiermem (as ``shared/HOSTS.md`` describes).

Each run gets a throwaway HOME holding the host's config, with tiermem registered from the snippet
``tiermem config HOST`` prints (the user's own path), and the host's model pointed at a fake API on loopback
(``fake_models.FakeModel``). ``HTTP(S)_PROXY`` point at a closed loopback port, so any attempt to reach another
host fails instead of leaving the machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

from .fake_models import FakeModel

ROOT = Path(__file__).resolve().parent.parent
TIERMEM = str(Path(sys.executable).with_name("tiermem"))
DEAD_PROXY = "http://127.0.0.1:9"  # discard port: nothing listens, so a request that tries to leave fails
HOST_TIMEOUT = 240


def snippet(host: str, data_dir: Path, agent: str = "default") -> str:
    """The MCP server part of what `tiermem config HOST` prints for this data directory (what `tiermem setup HOST`
    writes; its first file's part: TOML for Codex, JSON for the others)."""
    done = subprocess.run(
        [sys.executable, "-m", "tiermem", "config", host, "--data-dir", str(data_dir), "--agent", agent],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=True,
    )
    parts: list[list[str]] = []
    for line in done.stdout.splitlines():
        if line.startswith("# /"):
            parts.append([])
        elif parts:
            parts[-1].append(line)
    return "\n".join(parts[0])


def base_env(home: Path, **extra: str) -> dict[str, str]:
    keep = (
        "PATH",
        "PYTHONPATH",
        "LANG",
        "LC_ALL",
        "TERM",
        "TMPDIR",
        "SYSTEMROOT",
    )  # PYTHONPATH: the tiermem under test
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_STATE_HOME=str(home / ".local" / "state"),
        HTTP_PROXY=DEAD_PROXY,
        HTTPS_PROXY=DEAD_PROXY,
        http_proxy=DEAD_PROXY,
        https_proxy=DEAD_PROXY,
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
        NO_COLOR="1",
        CI="1",
    )
    env.update(extra)
    return env


SERVER_ENV = {"TIERMEM_EMBEDDING_MODEL": "hashing"}  # the archive opens fast; block tools never wait for it


def run(cmd: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=HOST_TIMEOUT, stdin=subprocess.DEVNULL
    )


# -- Codex CLI -----------------------------------------------------------------------------------------------


def codex_fake_provider(url: str) -> list[str]:
    """config.toml lines that point Codex at the fake model server ``url``, with nothing else switched on."""
    return [
        'model = "fake-model"',
        'model_provider = "fake"',
        'approval_policy = "never"',
        'sandbox_mode = "read-only"',
        "[analytics]",
        "enabled = false",
        "[features]",
        "plugins = false",
        "remote_plugin = false",
        "[model_providers.fake]",
        'name = "fake"',
        f'base_url = "{url}/v1"',
        'wire_api = "responses"',
        'env_key = "FAKE_API_KEY"',
        "stream_max_retries = 0",
        "request_max_retries = 0",
    ]


def run_codex(exe: Path, tmp_path: Path, fake: FakeModel, prompt: str) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "codex-home"
    work = tmp_path / "codex-work"
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    work.mkdir(exist_ok=True)
    server = tomllib.loads(snippet("codex", tmp_path / "data"))["mcp_servers"]["tiermem"]
    server["env"] = {**server.get("env", {}), **SERVER_ENV}
    config = "\n".join(
        [
            *codex_fake_provider(fake.url),
            "[mcp_servers.tiermem]",
            f"command = {json.dumps(server['command'])}",
            f"args = {json.dumps(server['args'])}",
            "env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in server["env"].items()) + " }",
            f"startup_timeout_sec = {server.get('startup_timeout_sec', 30)}",
            *([f"required = {str(server['required']).lower()}"] if "required" in server else []),
        ]
    )
    (home / ".codex" / "config.toml").write_text(config + "\n")
    env = base_env(home, FAKE_API_KEY="sk-fake", CODEX_HOME=str(home / ".codex"))
    return run([str(exe), "exec", "--skip-git-repo-check", "--json", "-C", str(work), prompt], env, work)


# -- Gemini CLI ----------------------------------------------------------------------------------------------


def run_gemini(
    exe: Path, tmp_path: Path, fake: FakeModel, prompt: str, *, trusted: bool
) -> subprocess.CompletedProcess[str]:
    """``trusted``: tiermem's entry keeps ``trust: true`` from the snippet; without it Gemini offers none of its tools."""
    home = tmp_path / ("gemini-home" if trusted else "gemini-home-untrusted")
    work = tmp_path / ("gemini-work" if trusted else "gemini-work-untrusted")
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    work.mkdir(exist_ok=True)
    settings: dict[str, Any] = json.loads(snippet("gemini", tmp_path / "data"))
    settings.pop("hooks", None)  # the server alone (tests/test_setup_hosts.py drives the hooks)
    entry = settings["mcpServers"]["tiermem"]
    entry["env"] = {**entry.get("env", {}), **SERVER_ENV}
    if not trusted:  # without `trust`, `gemini -p` offers none of the server's tools (it cannot ask to confirm)
        entry.pop("trust", None)
    settings.update(
        {
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        }
    )
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings, indent=2))
    env = base_env(home, GEMINI_API_KEY="fake-key", GOOGLE_GEMINI_BASE_URL=fake.url, GEMINI_CLI_NO_RELAUNCH="true")
    cmd = [str(exe), "-p", prompt, "-o", "json", "--skip-trust"]
    return run(cmd, env, work)


# -- opencode -------------------------------------------------------------------------------------------------


def run_opencode(exe: Path, tmp_path: Path, fake: FakeModel, prompt: str) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "opencode-home"
    work = tmp_path / "opencode-work"
    config_dir = home / ".config" / "opencode"
    config_dir.mkdir(parents=True, exist_ok=True)
    work.mkdir(exist_ok=True)
    config: dict[str, Any] = json.loads(snippet("opencode", tmp_path / "data"))
    entry = config["mcp"]["tiermem"]
    entry["environment"] = {**entry.get("environment", {}), **SERVER_ENV}
    config.update(
        {
            "model": "fake/fake-model",
            "autoupdate": False,
            "share": "disabled",
            "provider": {
                "fake": {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "Fake",
                    "options": {"baseURL": f"{fake.url}/v1", "apiKey": "sk-fake"},
                    "models": {"fake-model": {"name": "Fake model", "tool_call": True}},
                }
            },
        }
    )
    (config_dir / "opencode.json").write_text(json.dumps(config, indent=2))
    # Offline, opencode would npm-install its plugin package into its config dir; an installed-looking one stops it.
    (config_dir / "node_modules").mkdir(exist_ok=True)
    (config_dir / "package.json").write_text(json.dumps({"dependencies": {"@opencode-ai/plugin": "*"}}))
    (config_dir / "package-lock.json").write_text(
        json.dumps(
            {
                "name": "opencode",
                "lockfileVersion": 3,
                "requires": True,
                "packages": {"": {"dependencies": {"@opencode-ai/plugin": "*"}}},
            }
        )
    )
    env = base_env(
        home,
        OPENCODE_DISABLE_MODELS_FETCH="1",
        OPENCODE_DISABLE_AUTOUPDATE="1",
        OPENCODE_DISABLE_LSP_DOWNLOAD="1",
        OPENCODE_DISABLE_DEFAULT_PLUGINS="1",
    )
    return run([str(exe), "run", "--format", "json", prompt], env, work)
