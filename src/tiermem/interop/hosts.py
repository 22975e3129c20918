"""Ready-to-paste host configuration, with this machine's paths filled in (``tiermem config HOST``).

The files under ``configs/`` are the same snippets with placeholder paths.
"""

from __future__ import annotations

import json
import secrets
import shlex
import shutil
import sys
from pathlib import Path

from ..base.errors import ValidationError

HOSTS = {
    "claude-desktop": "Claude Desktop: merge into claude_desktop_config.json (macOS: ~/Library/Application Support/Claude/, "
    "Windows: %APPDATA%\\Claude\\), then restart Claude Desktop",
    "claude-code": "Claude Code: run this command",
    "cursor": "Cursor: merge into ~/.cursor/mcp.json (or .cursor/mcp.json in a project)",
    "vscode": "VS Code: save as .vscode/mcp.json in your workspace (or add to your user mcp.json)",
    "codex": "Codex CLI: add to ~/.codex/config.toml (archival_memory_delete and the memory tool, which can delete "
    "blocks, still ask for approval; block edits are versioned and revertible, so they run under any policy)",
    "gemini": "Gemini CLI: merge into ~/.gemini/settings.json (`trust: true` lets Gemini call tiermem's tools without "
    "asking each time, and `gemini -p` offers them only then: block edits are versioned and revertible; "
    "remove it to confirm each call)",
    "opencode": "opencode: merge into ~/.config/opencode/opencode.json (or opencode.json in a project)",
    "http": "streamable HTTP with a bearer token: save as tiermem-http.toml, run `tiermem serve --config tiermem-http.toml`, "
    "and give clients the URL and the token shown in the comments",
}


SECRET_HOSTS = frozenset({"http"})  # snippets that carry a live token (written with mode 0600)


def executable() -> str:
    """The absolute path of the `tiermem` command of this installation (hosts often lack the user's PATH)."""
    beside = Path(sys.executable).with_name("tiermem")
    if beside.exists():
        return str(beside)
    return shutil.which("tiermem") or "tiermem"


def snippet(
    host: str,
    *,
    data_dir: Path,
    agent: str,
    agent_loop: bool = False,
    port: int = 8765,
    extra_env: dict[str, str] | None = None,
) -> str:
    command = executable()
    args = ["serve", "--agent", agent] + (["--agent-loop"] if agent_loop else [])
    env = {"TIERMEM_DATA_DIR": str(data_dir), **(extra_env or {})}
    if agent_loop:
        env["ANTHROPIC_API_KEY"] = "sk-ant-..."  # placeholder: without a key the agent uses the host's model (sampling)
    if host == "claude-desktop" or host == "cursor":
        return json.dumps({"mcpServers": {"tiermem": {"command": command, "args": args, "env": env}}}, indent=2)
    if host == "vscode":
        return json.dumps(
            {"servers": {"tiermem": {"type": "stdio", "command": command, "args": args, "env": env}}}, indent=2
        )
    if host == "claude-code":
        flags = " ".join(f"-e {shlex.quote(f'{k}={v}')}" for k, v in env.items())
        return f"claude mcp add tiermem --scope user {flags} -- {shlex.quote(command)} {' '.join(args)}"
    if host == "codex":
        return "\n".join(
            [
                "[mcp_servers.tiermem]",
                f"command = {json.dumps(command)}",
                f"args = {json.dumps(args)}",
                "env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + " }",
                "startup_timeout_sec = 30",
                "required = true  # wait for tiermem before the first turn, so its tools and memory are in it",
            ]
        )
    if host == "gemini":
        return json.dumps(
            {
                "mcpServers": {
                    "tiermem": {"command": command, "args": args, "env": env, "timeout": 30000, "trust": True}
                }
            },
            indent=2,
        )
    if host == "opencode":
        return json.dumps(
            {
                "$schema": "https://opencode.ai/config.json",
                "mcp": {"tiermem": {"type": "local", "command": [command, *args], "environment": env, "enabled": True}},
            },
            indent=2,
        )
    if host == "http":
        token = secrets.token_hex(32)
        return "\n".join(
            [
                "# tiermem over streamable HTTP: tiermem serve --config tiermem-http.toml",
                f"# Clients connect to http://127.0.0.1:{port}/mcp with the header  Authorization: Bearer {token}",
                '# To serve other machines, set host to this machine\'s LAN address (e.g. "192.168.1.20"), or to',
                '# "0.0.0.0" (every interface) and list the Host names clients use, with the port, in allowed_hosts',
                f'# (e.g. allowed_hosts = ["192.168.1.20:{port}"]; any other Host is refused with 403), and put TLS in',
                "# front (a reverse proxy).",
                'transport = "http"',
                'host = "127.0.0.1"',
                f"port = {port}",
                f"data_dir = {json.dumps(str(data_dir))}",
                f'auth_tokens = [{{ name = "client", token = "{token}", agents = [{json.dumps(agent)}] }}]',
            ]
        )
    raise ValidationError(f"Unknown host {host!r}; use one of {', '.join(HOSTS)}.")
