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
HTTP_FILE = "tiermem-http.toml"  # the name `tiermem config http` suggests (its -o FILE: that one)


def host_note(host: str, written: Path | None = None) -> str:
    """What to do with ``tiermem config HOST``'s snippet; for ``http`` written with -o, the command names that file."""
    if host == "http" and written is not None:
        return (
            f"streamable HTTP with a bearer token: run `tiermem serve --config {shlex.quote(str(written))}`, and give "
            "clients the URL and the token shown in its comments"
        )
    return HOSTS[host]


SECRET_HOSTS = frozenset({"http"})  # snippets that carry a live token (written with mode 0600)


def show_or_write(host: str, preview: str, entry: str, output: Path | None, also: str) -> int:
    """``tiermem config HOST`` for a host ``tiermem setup`` configures: what setup would write, file by file, on
    stdout (each file's part after a ``# path`` line); with ``-o FILE``, the MCP server entry alone in FILE (valid
    JSON, or TOML for Codex: nothing else in it; ``-o -``: on stdout), and on stderr what setup writes besides."""
    if output is None:
        print(
            f"# what `tiermem setup {host}` writes, file by file (each after its `# path` line); "
            f"`tiermem config {host} -o FILE` writes the MCP server entry alone, as a file of its own",
            file=sys.stderr,
            flush=True,
        )
        print(preview)
        return 0
    from .commands import output_file

    target = output_file(str(output))
    if target is None:  # -o -: the entry alone on stdout
        print(entry)
        return 0
    try:
        target.write_text(entry + "\n", encoding="utf-8")
    except OSError as exc:
        raise ValidationError(f"Cannot write {target}: {exc}. Give another path to -o.") from exc
    print(
        f"wrote {target}: the MCP server entry alone; `tiermem setup {host}` also writes {also} "
        f"(`tiermem config {host}` without -o shows it all)",
        file=sys.stderr,
    )
    return 0


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
    config_file: str = HTTP_FILE,
) -> str:
    """``config_file``: for ``http``, the file the snippet is saved as (its first comment runs it)."""
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
                f"# tiermem over streamable HTTP: tiermem serve --config {shlex.quote(config_file)}",
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
