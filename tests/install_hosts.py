"""Install the real MCP hosts the host tests drive: Claude Code, Codex CLI, Gemini CLI, opencode, Letta Code.

`python tests/install_hosts.py [NAME ...]` (``.ci/run`` runs it before the tests; a test calls ``install(name)``
itself when its host is missing). Each host is an npm package at a pinned version, installed into its own folder
``$TIERMEM_HOSTS_DIR/<name>-<version>`` (default ``~/.cache/tiermem/hosts``); nothing is installed globally.
Best effort: when npm is missing or an install fails, this prints why and exits 0, and the tests that need that
host skip with the same reason.

Letta Code's package does not install with ``npm install`` (two optional packages are missing from the registry):
it is fetched with ``npm pack``, unpacked, and ``ws`` installed beside it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Host:
    name: str
    package: str
    version: str
    bin: str  # the executable, relative to the install folder
    packed: bool = False  # npm pack + unpack instead of npm install (Letta Code)
    extra: tuple[str, ...] = ()  # more packages installed beside it


HOSTS: dict[str, Host] = {
    h.name: h
    for h in (
        Host("claude-code", "@anthropic-ai/claude-code", "2.1.197", "node_modules/.bin/claude"),
        Host("codex", "@openai/codex", "0.169.0", "node_modules/.bin/codex"),
        Host("gemini", "@google/gemini-cli", "0.61.0", "node_modules/.bin/gemini"),
        Host("opencode", "opencode-ai", "1.18.33", "node_modules/.bin/opencode"),
        Host("letta-code", "@letta-ai/letta-code", "0.32.18", "package/letta.js", packed=True, extra=("ws",)),
    )
}


def hosts_dir() -> Path:
    return Path(os.environ.get("TIERMEM_HOSTS_DIR", Path.home() / ".cache" / "tiermem" / "hosts"))


def install_dir(host: Host) -> Path:
    return hosts_dir() / f"{host.name}-{host.version}"


def executable(host: Host) -> Path:
    return install_dir(host) / host.bin


def _run(cmd: list[str], cwd: Path) -> str:
    """ "" when ``cmd`` succeeded, else the last lines it printed."""
    try:
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=900, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"`{' '.join(cmd)}` could not run: {exc}"
    if done.returncode != 0:
        tail = " / ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        return f"`{' '.join(cmd)}` failed (exit {done.returncode}): {tail}"
    return ""


def install(name: str) -> tuple[Path | None, str]:
    """(the host's executable, "") when it is ready, else (None, why not)."""
    host = HOSTS[name]
    exe = executable(host)
    if exe.exists():
        return exe, ""
    npm = shutil.which("npm")
    if npm is None:
        return None, f"npm is not installed ({host.package} is an npm package); install Node.js and npm to run it"
    root = install_dir(host)
    root.mkdir(parents=True, exist_ok=True)
    npm_install = [npm, "install", "--prefix", str(root), "--no-audit", "--no-fund", "--no-save"]
    if host.packed:
        why = _run([npm, "pack", f"{host.package}@{host.version}", "--pack-destination", str(root)], root)
        if why:
            return None, why
        tarballs = sorted(root.glob("*.tgz"))
        if not tarballs:
            return None, f"`npm pack {host.package}@{host.version}` left no tarball in {root}"
        with tarfile.open(tarballs[-1]) as tar:
            tar.extractall(root, filter="data")
        why = _run([*npm_install, *host.extra], root)
    else:
        why = _run([*npm_install, f"{host.package}@{host.version}", *host.extra], root)
    if why:
        return None, why
    if not exe.exists():
        return None, f"{host.package}@{host.version} installed, but {exe} is missing"
    return exe, ""


def main(argv: list[str]) -> int:
    for name in argv or list(HOSTS):
        if name not in HOSTS:
            print(f"install_hosts: unknown host {name!r}; known: {', '.join(HOSTS)}", file=sys.stderr)
            return 2
        exe, why = install(name)
        print(f"install_hosts: {name}: {exe if exe else 'not installed: ' + why}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
