"""Letta Code (npm @letta-ai/letta-code) driven offline, for the tests and the benchmarks.

A throwaway HOME and LETTA_LOCAL_BACKEND_DIR, telemetry and updates off, the scripted Anthropic-compatible model
on loopback (``fake_anthropic``), and ``node_offline.cjs`` preloaded into every node process it starts: a
connection to anything but loopback is refused and written to ``net.log`` (``offline()`` checks it stayed empty).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from . import fake_anthropic as fa
from .install_hosts import install  # noqa: F401  (re-exported for the callers)

OFFLINE = Path(__file__).resolve().parent / "node_offline.cjs"


class LettaCode:
    """One offline Letta Code install (its own HOME), talking to the scripted model."""

    def __init__(self, exe: Path, home: Path, fake: fa.FakeAnthropic) -> None:
        self.exe, self.home, self.fake = exe, home, fake
        home.mkdir(parents=True, exist_ok=True)
        self.net_log = home / "net.log"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "LETTA", "TIERMEM"))}
        self.env.update(
            HOME=str(home),
            LETTA_LOCAL_BACKEND_DIR=str(home / "lc-local-backend"),
            LETTA_CODE_TELEM="0",
            DO_NOT_TRACK="1",
            DISABLE_AUTOUPDATER="1",
            NODE_OPTIONS=f"--require {OFFLINE}",
            TIERMEM_NET_LOG=str(self.net_log),
        )
        self.letta("connect", "anthropic", "sk-ant-fake", "--base-url", fake.url)

    def letta(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["node", str(self.exe), "--backend", "local", *args],
            env=self.env,
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
        return done

    def run(self, prompt: str, agent: str | None = None) -> dict[str, Any]:
        """One headless turn (a new agent, or ``agent``); its JSON result."""
        who = ["--agent", agent] if agent else ["--new-agent"]
        done = self.letta(*who, "--reflection-trigger", "off", "--no-skills", "-p", prompt, "--output-format", "json")
        result: dict[str, Any] = json.loads(done.stdout)
        assert not result["is_error"], result
        return result

    def memory_dir(self, agent: str) -> Path:
        return self.home / "lc-local-backend" / "memfs" / agent / "memory"

    def offline(self) -> bool:
        return not self.net_log.exists() or not self.net_log.read_text().strip()


def system_of(request: dict[str, Any]) -> str:
    system = request.get("system")
    return system if isinstance(system, str) else "".join(b.get("text", "") for b in system or [])


def tool_results(request: dict[str, Any]) -> list[str]:
    """The text of every tool result in a request's messages, oldest first."""
    out = []
    for message in request["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else []:
            if block.get("type") == "tool_result":
                content = block.get("content")
                out.append(content if isinstance(content, str) else "".join(c.get("text", "") for c in content or []))
    return out
