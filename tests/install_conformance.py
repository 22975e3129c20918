"""Install the official MCP conformance suite (and a Node 22 to run it) for ``tests/test_conformance.py``.

`python tests/install_conformance.py` (``.ci/run`` does it before the tests; the test does it too if needed).
npm installs ``@modelcontextprotocol/conformance`` and the ``node@22`` package into
``$MCP_CONFORMANCE_DIR`` (default ``~/.cache/tiermem/conformance-<version>``); nothing is installed
globally. Prints why and exits 0 when npm is missing or the install fails, so CI goes on and the test skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

VERSION = "0.1.16"
PACKAGES = [f"@modelcontextprotocol/conformance@{VERSION}", "node@22"]


def install_dir() -> Path:
    default = Path.home() / ".cache" / "tiermem" / f"conformance-{VERSION}"
    return Path(os.environ.get("MCP_CONFORMANCE_DIR", default))


def cli_path(root: Path) -> Path:
    return root / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"


def node_path(root: Path) -> str | None:
    """A Node >= 22 to run the suite: the one npm installed beside it, else the system's if new enough."""
    candidates = [str(root / "node_modules" / ".bin" / "node"), shutil.which("node")]
    for node in candidates:
        if not node or not Path(node).exists():
            continue
        try:
            out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            continue
        if out.startswith("v") and int(out[1:].split(".")[0]) >= 22:
            return node
    return None


def install() -> tuple[Path | None, str]:
    """(directory with the suite, "") when it is ready, else (None, why not)."""
    root = install_dir()
    if cli_path(root).exists() and node_path(root):
        return root, ""
    npm = shutil.which("npm")
    if npm is None:
        return None, "npm is not installed (the conformance suite is an npm package); install Node.js and npm to run it"
    root.mkdir(parents=True, exist_ok=True)
    cmd = [npm, "install", "--prefix", str(root), "--no-audit", "--no-fund", "--no-save", *PACKAGES]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"`npm install {' '.join(PACKAGES)}` could not run: {exc}"
    if done.returncode != 0 or not cli_path(root).exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return None, f"`npm install {' '.join(PACKAGES)}` failed (offline?): {' | '.join(tail)}"
    if node_path(root) is None:
        return None, "no Node >= 22 after installing node@22 (npm may have blocked its install script)"
    return root, ""


if __name__ == "__main__":
    where, why = install()
    print(
        f"conformance suite ready in {where}" if where else f"conformance suite not installed: {why}", file=sys.stderr
    )
