"""Drive the real Claude Code (npm ``@anthropic-ai/claude-code``) offline, for host tests.

``ClaudeCode`` gives it a throwaway ``HOME`` and working directory, an Anthropic-compatible server on loopback
(``tests/fake_anthropic.py``, which records every request: assert on what Claude Code sent the model), and proxy
variables pointing at a loopback catcher that refuses and records any request meant for another host (none is
expected). ``run(prompt, ...)`` runs one ``claude -p`` turn and returns its JSON result. Share one instance across the
assertions of a test module: each ``claude -p`` costs a couple of seconds.

    with ClaudeCode(exe, tmp_path) as cc:
        result = cc.run("hello", "--mcp-config", str(config), "--strict-mcp-config")
        first = cc.fake.requests[0]
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from . import fake_anthropic as fa
from .conftest import PYTHON, ROOT
from .install_hosts import install

QUIET = {  # no telemetry, update checks or error reports: nothing but the model API (on loopback) is reached
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
}


def claude_code() -> tuple[Path | None, str]:
    """(the ``claude`` executable, "") or (None, why it is missing): tests skip with the reason."""
    if shutil.which("node") is None:
        return None, "node is not installed (Claude Code runs on Node.js)"
    return install("claude-code")


class Catcher:
    """A loopback HTTP proxy that refuses every request and records where it was going."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        catcher = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _refuse(self) -> None:
                catcher.seen.append(f"{self.command} {self.path}")
                self.send_response(403)
                self.send_header("content-length", "0")
                self.end_headers()

            do_GET = do_POST = do_PUT = do_HEAD = do_CONNECT = _refuse

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> Catcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


class ClaudeCode:
    """One throwaway Claude Code installation: HOME, a working directory, the fake model API and the catcher."""

    def __init__(self, exe: Path, root: Path, *, reply: fa.Scripted | None = None) -> None:
        self.exe = exe
        self.home = root / "home"
        self.workdir = root / "project"
        # Unix socket paths are short (108 bytes): the runtime directory lives under /tmp, not under pytest's tmp_path.
        self.runtime_dir = Path(tempfile.mkdtemp(prefix="tmcc-"))
        self.fake = fa.FakeAnthropic(default=reply if reply is not None else fa.text("Noted."))
        self.catcher = Catcher()
        for d in (self.home, self.workdir):
            d.mkdir(parents=True, exist_ok=True)
        self.runtime_dir.chmod(0o700)

    def tiermem(self, *args: str) -> str:
        """A tiermem command in the throwaway HOME's environment (none of the user's config or data); its stdout."""
        done = subprocess.run(
            [PYTHON, "-m", "tiermem", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=self.env(),
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of every ``claude`` run (and so of the MCP servers and hooks it starts)."""
        node = Path(shutil.which("node") or "/usr/bin/node").parent
        env = {
            "PATH": f"{node}:/usr/bin:/bin",
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "ANTHROPIC_BASE_URL": self.fake.url,
            "ANTHROPIC_API_KEY": "sk-ant-test",
            "HTTP_PROXY": self.catcher.url,
            "HTTPS_PROXY": self.catcher.url,
            "NO_PROXY": "127.0.0.1,localhost",
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "XDG_DATA_HOME": str(self.home / ".local" / "share"),
            "XDG_STATE_HOME": str(self.home / ".local" / "state"),
            "XDG_RUNTIME_DIR": str(self.runtime_dir),
            "PYTHONPATH": str(ROOT / "src"),  # this checkout's tiermem, in the commands and in the hooks setup writes
            **QUIET,
        }
        env.update(extra)
        if urlparse(env["ANTHROPIC_BASE_URL"]).hostname not in ("127.0.0.1", "localhost"):
            raise ValueError(f"refusing a model API that is not on loopback: {env['ANTHROPIC_BASE_URL']}")
        return env

    def run(self, prompt: str, *args: str, timeout: float = 120, **env: str) -> dict[str, Any]:
        """One non-interactive turn (``claude -p PROMPT --output-format json ARGS``); its JSON result."""
        done = subprocess.run(
            [str(self.exe), "-p", prompt, "--output-format", "json", *args],
            cwd=self.workdir,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        try:
            result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            raise AssertionError(
                f"claude -p printed no JSON result (exit {done.returncode}):\n"
                f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
            ) from None
        result["_stderr"] = done.stderr
        return result

    def command(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Another ``claude`` command (``mcp list``, ...) in the same HOME."""
        return subprocess.run(
            [str(self.exe), *args],
            cwd=self.workdir,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def system_text(self, request: dict[str, Any]) -> str:
        """Everything a request told the model outside the conversation: system prompt and system messages."""
        parts = [b.get("text", "") for b in request.get("system") or [] if isinstance(b, dict)]
        if isinstance(request.get("system"), str):
            parts.append(request["system"])
        for m in request.get("messages", []):
            content = m.get("content")
            texts = (
                [content]
                if isinstance(content, str)
                else [b.get("text", "") for b in content or [] if isinstance(b, dict)]
            )
            if m.get("role") == "system" or any("<system-reminder>" in t for t in texts):
                parts += texts
        return "\n".join(parts)

    def __enter__(self) -> ClaudeCode:
        self.fake.__enter__()
        self.catcher.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.catcher.__exit__()
        self.fake.__exit__()
        shutil.rmtree(self.runtime_dir, ignore_errors=True)

    def mcp_config(self, *server_args: str, name: str = "tiermem", always_load: bool = True) -> Path:
        """A ``--mcp-config`` file that starts this checkout's ``tiermem serve`` with ``server_args``."""
        from .conftest import PYTHON

        entry: dict[str, Any] = {"command": PYTHON, "args": ["-m", "tiermem", "serve", *server_args]}
        if always_load:
            entry["alwaysLoad"] = True
        path = self.workdir.parent / f"mcp-{name}.json"
        path.write_text(json.dumps({"mcpServers": {name: entry}}))
        return path


def tool_definitions(request: dict[str, Any], server: str = "tiermem") -> list[dict[str, Any]]:
    """The tools of MCP server ``server`` in a request, as Claude Code sent them to the model."""
    return [t for t in request.get("tools", []) if t.get("name", "").startswith(f"mcp__{server}__")]


def definition_chars(tools: list[dict[str, Any]]) -> int:
    """Name + description + input schema (compact JSON) of each tool: what the tool list costs a request."""
    return sum(
        len(t["name"]) + len(t.get("description", "")) + len(json.dumps(t["input_schema"], separators=(",", ":")))
        for t in tools
    )
