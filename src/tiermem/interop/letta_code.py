"""Letta Code, both ways: find an agent's memory directory, wire it to a tiermem agent, keep them in step.

``tiermem setup letta-code`` resolves the Letta Code agent's memory directory (``--agent-dir``, or
``--letta-agent ID`` under ``$LETTA_LOCAL_BACKEND_DIR/memfs/<id>/memory``, default
``~/.letta/lc-local-backend``, then ``~/.letta/agents/<id>/memory``), creates the tiermem agent (no
default blocks: its memory is that directory), runs the first sync and says how to keep both in
step: a host configuration whose server has the ``sync`` setting, or ``tiermem sync DIR --watch``.

``LiveSync`` is what ``tiermem serve`` runs when ``sync`` is set: a thread that syncs whenever
either side changes, for as long as the server runs.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.errors import ValidationError
from .memfs import LINK_WHY, path_of
from .memfs_git import Repo
from .memfs_sync import recorded_agent, sync_memfs, watch_memfs

if TYPE_CHECKING:
    from ..domain.memory import Memory
    from ..server.runtime import MemoryHandle

log = logging.getLogger("tiermem.sync")
_AGENT_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def letta_home() -> Path:
    return Path.home() / ".letta"  # Letta Code keeps memory under the home directory itself (not $LETTA_HOME)


def local_backend_dir() -> Path:
    return Path(os.environ.get("LETTA_LOCAL_BACKEND_DIR") or letta_home() / "lc-local-backend")


def agent_dirs() -> dict[str, Path]:
    """Letta Code agent id -> its memory directory, for every agent on this machine (local backend first)."""
    found: dict[str, Path] = {}
    for base in (local_backend_dir() / "memfs", letta_home() / "agents"):
        if base.is_dir():
            for child in sorted(base.iterdir()):
                if (child / "memory").is_dir() and child.name not in found:
                    found[child.name] = child / "memory"
    return found


def resolve_agent_dir(agent_dir: Path | None, letta_agent: str | None) -> Path:
    """The memory directory to wire: given, found by agent id, or the only one on this machine."""
    if agent_dir is not None:
        root = agent_dir.expanduser()
        if not root.is_dir():
            where = local_backend_dir() / "memfs" / "<agent-id>" / "memory"
            raise ValidationError(
                f"{root} is not a directory; give a Letta Code agent's memory directory, with "
                f"the local backend {where}."
            )
        return root
    known = agent_dirs()
    if letta_agent is not None:
        if letta_agent not in known:
            raise ValidationError(
                f"No memory directory for the Letta Code agent {letta_agent!r} under "
                f"{local_backend_dir() / 'memfs'} or {letta_home() / 'agents'}. Agents found: "
                f"{', '.join(known) or 'none'}. Give the directory with --agent-dir."
            )
        return known[letta_agent]
    if len(known) == 1:
        return next(iter(known.values()))
    raise ValidationError(
        "Name the Letta Code agent to wire: --letta-agent ID ("
        + (
            f"agents found: {', '.join(known)}"
            if known
            else f"none found under {local_backend_dir() / 'memfs'} or {letta_home() / 'agents'}"
        )
        + ") or --agent-dir DIR."
    )


def default_agent_name(root: Path) -> str | None:
    """The tiermem agent a directory goes with: the one it was synced with, else its Letta Code agent id."""
    recorded = recorded_agent(root)
    if recorded:
        return recorded
    parent = root.resolve().parent.name if root.name == "memory" else ""
    return parent if parent.startswith("agent-") and _AGENT_NAME.match(parent) else None


def setup(memory: Memory, root: Path, agent: str) -> dict[str, Any]:
    """Create the tiermem agent for ``root`` (without default blocks) if needed and run the first sync."""
    repo = Repo.find(root)
    report: dict[str, Any] = {
        "directory": str(root),
        "agent": agent,
        "letta_code_repository": bool(repo and repo.agent_repo),
    }
    if repo is None or not repo.agent_repo:
        report["warning"] = (
            f"{root} is not a Letta Code agent's memory repository (no Letta Code hook in it); it is "
            "synced as a plain MemFS directory."
        )
    existed = memory.core.find_agent(agent) is not None
    memory.ensure_agent(agent, blocks=())
    synced = sync_memfs(memory, agent, root)
    report["created_agent"] = not existed
    report["sync"] = {k: v for k, v in synced.items() if v not in ([], "", None) and k not in ("agent", "directory")}
    return report


class LiveSync:
    """``tiermem serve`` with ``sync``: keeps ``root`` and the served agent in step in a background thread."""

    def __init__(
        self,
        handle: MemoryHandle,
        agent: str,
        root: Path,
        interval: float,
        *,
        start_wait: float = 5.0,
        data_dir: Path | None = None,
    ) -> None:
        self.handle, self.agent, self.root, self.interval = handle, agent, root, interval
        # the command that settles a conflict by hand (the server's own store)
        words = ["tiermem", "sync", str(root), "--agent", agent]
        self.settle = shlex.join([*words, *(["--data-dir", str(data_dir)] if data_dir is not None else [])])
        self.start_wait = start_wait  # a server opens its memory after the handshake; sync starts by then at the latest
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tiermem-sync", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        waited = 0.0
        while not self.handle.started and waited < self.start_wait and not self._stop.is_set():
            self._stop.wait(0.05)
            waited += 0.05
        try:
            memory, _ = self.handle.get()
        except Exception as exc:  # the server reports a failed opening to its client; here, the log says it once
            log.exception("sync of %s not started: %s", self.root, exc)
            return
        log.info("keeping %s and agent %r in step", self.root, self.agent)
        try:
            watch_memfs(
                memory,
                self.agent,
                self.root,
                interval=self.interval,
                on_report=self._report,
                keep_going=lambda: not self._stop.is_set(),
                wait=self._stop.wait,
                on_error=lambda exc: log.warning("sync of %s: %s", self.root, exc),
            )
        except Exception as exc:  # a sync thread that dies says why, once
            log.exception("sync of %s stopped: %s", self.root, exc)

    def _report(self, report: dict[str, Any]) -> None:
        """What a pass did, at INFO; what a person must settle (a conflict, a file refused or skipped), at WARNING."""
        for line in report["conflicts"]:
            label, why = line.split(": ", 1) if ": " in line else (line, "")
            log.warning(
                "sync of %s: conflict in %s: %s; both are left as they are until settled: `%s --prefer file` keeps "
                "the file, `%s --prefer store` keeps the block",
                self.root,
                self.root / path_of(label),
                why,
                self.settle,
                self.settle,
            )
        for key in ("rejected", "skipped"):
            for line in report[key]:
                if LINK_WHY not in line:
                    log.warning("sync of %s: %s: %s", self.root, key, line)
        changed = {
            k: v
            for k, v in report.items()
            if v not in ([], "", None)
            and k not in ("format", "agent", "directory", "layout", "waiting", "conflicts", "rejected", "skipped")
        }
        if changed:
            log.info(
                "sync %s: %s",
                self.root,
                "; ".join(f"{k}: {', '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in changed.items()),
            )
