"""Every host snippet under configs/ parses and starts tiermem correctly; smithery.yaml is valid and its
command function (run by node, as Smithery does) maps to real settings; `tiermem config HOST` prints
snippets with this machine's paths."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from tiermem.base.config import Settings, load_settings
from tiermem.base.errors import ConfigError
from tiermem.process.netguard import make_tokens

from .conftest import PYTHON, ROOT
from .test_transports import server_env

CONFIGS = ROOT / "configs"


def plan_section(text: str, n: int = 0) -> str:
    """The ``n``th file's part of what ``tiermem config HOST`` prints for a host setup writes to (each part after a
    ``# /path/to/file...`` line)."""
    parts, current = [], None
    for line in text.splitlines():
        if line.startswith("# /"):
            current = []
            parts.append(current)
        elif current is not None:
            current.append(line)
    return "\n".join(parts[n])


def _server_entry(data: dict) -> dict:
    servers = data.get("mcpServers") or data.get("servers") or data.get("mcp") or data.get("mcp_servers")
    assert isinstance(servers, dict) and "tiermem" in servers
    entry = dict(servers["tiermem"])
    if isinstance(entry.get("command"), list):  # opencode: the command and its arguments in one list
        entry["command"], entry["args"] = entry["command"][0], entry["command"][1:]
    if "environment" in entry:
        entry["env"] = entry.pop("environment")
    return entry


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.json")))
def test_json_snippets_start_the_server(name: str) -> None:
    entry = _server_entry(json.loads((CONFIGS / name).read_text()))
    if entry.get("type") == "http":
        assert entry["url"].endswith("/mcp") and entry["headers"]["Authorization"].startswith("Bearer ")
        return
    assert Path(entry["command"]).name == "tiermem" and entry["args"][0] == "serve"
    from tiermem.cli.main import build_parser

    build_parser().parse_args(entry["args"])  # every flag exists
    for key in entry.get("env", {}):
        assert key == "ANTHROPIC_API_KEY" or key.removeprefix("TIERMEM_").lower() in Settings.model_fields


def test_codex_snippet_starts_the_server() -> None:
    from tiermem.cli.main import build_parser

    entry = _server_entry(tomllib.loads((CONFIGS / "codex_config.toml").read_text()))
    assert Path(entry["command"]).name == "tiermem" and entry["required"] is True
    build_parser().parse_args(entry["args"])


def test_toml_snippets_load_as_settings(tmp_path: Path) -> None:
    for path in CONFIGS.glob("*.toml"):
        if path.name == "codex_config.toml":
            continue  # Codex's own config, not tiermem's
        tomllib.loads(path.read_text())
        settings = load_settings(path)
        assert settings.transport in ("stdio", "http", "sse")
        assert "0.0.0.0" not in path.read_text()  # the samples never suggest listening on every interface
    client = json.loads((CONFIGS / "http_client_mcp.json").read_text())
    server = load_settings(CONFIGS / "http_server.toml")
    assert _server_entry(client)["headers"]["Authorization"] == f"Bearer {server.auth_tokens[0]['token']}"


def test_the_sample_placeholder_token_is_refused_with_the_fix(tmp_path: Path) -> None:
    """`tiermem serve --config configs/http_server.toml` as shipped: the placeholder is not a secret."""
    done = subprocess.run(
        [
            PYTHON,
            "-m",
            "tiermem",
            "serve",
            "--config",
            str(CONFIGS / "http_server.toml"),
            "--data-dir",
            str(tmp_path / "d"),
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=server_env(tmp_path),
        timeout=60,
    )
    assert done.returncode == 1 and "placeholder" in done.stderr and "openssl rand -hex 32" in done.stderr, done.stderr
    assert not (tmp_path / "d").exists()  # refused before anything was opened
    for example in ("your-token-here-0123", "changeme-changeme-123", "<paste your token here>", "a" * 40):
        with pytest.raises(ConfigError, match="placeholder"):
            make_tokens([{"token": example, "agents": ["*"]}], "auth_tokens")


def test_claude_code_line() -> None:
    lines = [x for x in (CONFIGS / "claude_code.sh").read_text().splitlines() if x.startswith("tiermem ")]
    assert [shlex.split(x)[:3] for x in lines] == [["tiermem", "setup", "claude-code"]] * len(lines) and lines
    from tiermem.cli.main import build_parser

    for line in lines:  # each line parses as the command it shows
        build_parser().parse_args(shlex.split(line)[1:])


SMITHERY_ENV = """
const fn = eval(process.argv[1]);  // with -e, argv[1] is the first argument after the script
process.stdout.write(JSON.stringify(fn(JSON.parse(process.argv[2]))));
"""


def test_the_tools_are_described_as_the_registry_has_them() -> None:
    """default.toml's `tools` comment (the settings reference is made from it) and smithery.yaml name the default
    preset's items and every group with its tools, as the registry has them (a group added there shows up here)."""
    import re
    from collections import Counter

    from tiermem.base.config import default_config_text
    from tiermem.cli.docgen import _key_of
    from tiermem.server.registry import PRESETS, TOOL_GROUPS

    text = default_config_text()
    comment = " ".join(
        line.lstrip("# ") for line in text.split('\ntools = ["default"]')[0].split("\n\n")[-1].splitlines()
    )
    default = re.search(r'"default" = ([^:]+):', comment)
    assert default and default.group(1).split(", ") == list(PRESETS["default"])
    groups = comment.split("Groups: ", 1)[1]
    described = {m[1]: tuple(m[2].split(":")[0].split(", ")) for m in re.finditer(r"(\w+) \(([^)]*)\)", groups)}
    assert described == TOOL_GROUPS
    assert "every group but agent" in comment and PRESETS["all"] == tuple(g for g in TOOL_GROUPS if g != "agent")
    keys = (_key_of(line.strip()) for line in text.splitlines() if not line.startswith("[["))  # tables: one each
    twice = Counter(k for k in keys if k in Settings.model_fields)
    assert [k for k, n in twice.items() if n > 1] == []  # a setting's block is written (or shown as an example) once
    smithery = yaml.safe_load((ROOT / "smithery.yaml").read_text())["startCommand"]["configSchema"]["properties"]
    listed = smithery["tools"]["description"].split(": ", 1)[1].rstrip(".").split(", ")
    assert listed == [*PRESETS, *(g for g in TOOL_GROUPS if g != "agent")]  # agent: the agentLoop option


def test_smithery_yaml() -> None:
    doc = yaml.safe_load((ROOT / "smithery.yaml").read_text())
    start = doc["startCommand"]
    assert start["type"] == "stdio"
    schema = start["configSchema"]
    assert schema["type"] == "object"
    types = {"string": str, "boolean": bool, "integer": int}
    for name, prop in schema["properties"].items():
        assert prop["type"] in types and prop.get("description"), name
        if "default" in prop:
            assert isinstance(prop["default"], types[prop["type"]]), name
    for key, value in start["exampleConfig"].items():
        assert isinstance(value, types[schema["properties"][key]["type"]])
    # Smithery fills in defaults: a default model would be set for every user, and a data directory built with
    # another model then refused (default.toml: leave it unset)
    assert "default" not in schema["properties"]["embeddingModel"]
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    config = {"agent": "work", "dataDir": "/tmp/x", "tools": "minimal", "agentLoop": True, "anthropicApiKey": "k"}
    out = subprocess.run(
        [node, "-e", SMITHERY_ENV, start["commandFunction"], json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result = json.loads(out.stdout)
    assert result["command"] == "tiermem" and result["args"] == ["serve"]
    assert result["env"] == {
        "TIERMEM_AGENT": "work",
        "TIERMEM_DATA_DIR": "/tmp/x",
        "TIERMEM_TOOLS": "minimal",
        "TIERMEM_AGENT_LOOP": "true",
        "ANTHROPIC_API_KEY": "k",
    }
    for key in result["env"]:
        assert key == "ANTHROPIC_API_KEY" or key.removeprefix("TIERMEM_").lower() in Settings.model_fields
    empty = subprocess.run(
        [node, "-e", SMITHERY_ENV, start["commandFunction"], "{}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(empty.stdout)["env"] == {}  # nothing set: the defaults apply


@pytest.mark.parametrize(
    "host", ["claude-desktop", "claude-code", "cursor", "vscode", "codex", "gemini", "opencode", "http"]
)
def test_tiermem_config_prints_this_machines_paths(tmp_path: Path, host: str) -> None:
    done = subprocess.run(
        [PYTHON, "-m", "tiermem", "config", host, "--agent", "work", "--data-dir", str(tmp_path / "d")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=server_env(tmp_path),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    if host == "claude-code":  # what `tiermem setup claude-code` would write (tests/test_setup_claude_code.py)
        server = json.loads(out.split("\n# ", 1)[0].split("\n", 1)[1])["tiermem"]
        assert Path(server["command"]).is_absolute() and Path(server["command"]).exists()
        assert server["args"] == ["serve", "--data-dir", str(tmp_path / "d"), "--agent", "work"]
    elif host == "http":
        settings = load_settings(_write(tmp_path, out))
        assert settings.transport == "http" and settings.auth_tokens[0]["agents"] == ["work"]
        assert len(make_tokens(settings.auth_tokens, "auth_tokens")) == 1
    elif host in ("codex", "gemini", "opencode"):  # what `tiermem setup HOST` would write (test_setup_hosts.py)
        first = plan_section(out)
        entry = _server_entry(tomllib.loads(first) if host == "codex" else json.loads(first))
        assert Path(entry["command"]).is_absolute() and Path(entry["command"]).exists()
        assert entry["args"] == ["serve", "--data-dir", str(tmp_path / "d"), "--agent", "work"]
    else:
        entry = _server_entry(json.loads(out))
        assert Path(entry["command"]).exists() and entry["args"] == ["serve", "--agent", "work"]
        assert entry["env"]["TIERMEM_DATA_DIR"] == str(tmp_path / "d")


@pytest.mark.parametrize("host", ["claude-code", "codex", "gemini", "opencode"])
def test_tiermem_config_o_writes_the_server_entry_alone(tmp_path: Path, host: str) -> None:
    """For a host `tiermem setup` configures, -o FILE writes the MCP server entry as a valid file of its own (not
    the file-by-file preview, on stdout), the same entry setup writes, and says what setup writes besides."""
    written = tmp_path / "out"
    done = subprocess.run(
        [PYTHON, "-m", "tiermem", "config", host, "--agent", "work", "--data-dir", str(tmp_path / "d")]
        + ["-o", str(written)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=server_env(tmp_path),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and done.stdout == "", done.stderr
    assert f"wrote {written}" in done.stderr and f"tiermem setup {host}` also writes" in done.stderr
    text = written.read_text()
    entry = _server_entry(tomllib.loads(text) if host == "codex" else json.loads(text))
    assert Path(entry["command"]).is_absolute()
    assert entry["args"] == ["serve", "--data-dir", str(tmp_path / "d"), "--agent", "work"]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "http.toml"
    path.write_text(text)
    return path
