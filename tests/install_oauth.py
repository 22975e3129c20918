"""Install a real authorization server and a real OAuth MCP client for ``tests/test_oauth.py``.

`python tests/install_oauth.py` (``.ci/run`` does it before the tests; the test does it too if needed). npm installs,
pinned, ``oidc-provider`` (the OAuth 2.1 / OpenID server the tests run on loopback), ``@modelcontextprotocol/sdk``
(the MCP TypeScript SDK, whose OAuth client signs in) and ``node@22`` (oidc-provider supports Node 22 and later) into
``$TIERMEM_OAUTH_DIR`` (default ``~/.cache/tiermem/oauth-<versions>``); nothing is installed globally. The scripts the
tests run (``tests/oauth/*.mjs``) are copied beside them, so their imports resolve there. Prints why and exits 0 when
npm is missing or the install fails, so CI goes on and the tests skip with that reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

OIDC_PROVIDER = "9.13.3"
MCP_SDK = "1.32.2"
PACKAGES = [f"oidc-provider@{OIDC_PROVIDER}", f"@modelcontextprotocol/sdk@{MCP_SDK}", "node@22"]
SCRIPTS = Path(__file__).resolve().parent / "oauth"


def install_dir() -> Path:
    default = Path.home() / ".cache" / "tiermem" / f"oauth-{OIDC_PROVIDER}-{MCP_SDK}"
    return Path(os.environ.get("TIERMEM_OAUTH_DIR", default))


def _ready(root: Path) -> bool:
    modules = root / "node_modules"
    return (modules / "oidc-provider" / "package.json").exists() and (
        modules / "@modelcontextprotocol" / "sdk" / "package.json"
    ).exists()


def node_path(root: Path) -> str | None:
    """A Node >= 20.19 (ES modules loaded by require): the one npm installed beside the packages, else the system's."""
    for node in (str(root / "node_modules" / ".bin" / "node"), shutil.which("node")):
        if not node or not Path(node).exists():
            continue
        try:
            out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            continue
        parts = out.lstrip("v").split(".")
        if out.startswith("v") and (int(parts[0]), int(parts[1])) >= (20, 19):
            return node
    return None


def install() -> tuple[Path | None, str]:
    """(directory with the packages and the scripts, "") when ready, else (None, why not)."""
    root = install_dir()
    if not _ready(root):
        npm = shutil.which("npm")
        if npm is None:
            return None, "npm is not installed (oidc-provider and the MCP TypeScript SDK are npm packages)"
        root.mkdir(parents=True, exist_ok=True)
        cmd = [npm, "install", "--prefix", str(root), "--no-audit", "--no-fund", "--no-save", *PACKAGES]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.SubprocessError) as exc:
            return None, f"`npm install {' '.join(PACKAGES)}` could not run: {exc}"
        if done.returncode != 0 or not _ready(root):
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            return None, f"`npm install {' '.join(PACKAGES)}` failed (offline?): {' | '.join(tail)}"
    if node_path(root) is None:
        return None, "no Node >= 20.19 (nor the node@22 package npm should have installed)"
    for script in SCRIPTS.glob("*.mjs"):
        shutil.copyfile(script, root / script.name)
    return root, ""


if __name__ == "__main__":
    where, why = install()
    print(
        f"OAuth test servers ready in {where}" if where else f"OAuth test servers not installed: {why}", file=sys.stderr
    )
