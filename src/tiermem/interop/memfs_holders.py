"""What still holds a forgotten text outside the store: MemFS directories synced with the agent (their files) and
the git history around them. ``tiermem forget`` names them; it never rewrites a directory Letta Code owns, nor
git history (that takes a history rewrite and a force-push the user decides on)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..base.errors import TiermemError
from ..base.files import locked, write_text_atomically
from .memfs_git import Repo
from .memfs_sync import recorded_agent

REGISTRY = "memfs-synced.json"  # in the data directory: the directories ``tiermem sync DIR`` synced with its agents
MOST_FILES = 2_000  # files looked at per directory
MOST_BYTES = 4 << 20  # bytes read per file


def _registry(data_dir: Path) -> Path:
    return data_dir / REGISTRY


def _read_registry(data_dir: Path) -> dict[str, str]:
    """Directory -> agent name, as ``remember_synced`` kept them (none when the file is missing or unreadable: it is
    a list of places to look, never needed for a sync)."""
    try:
        data = json.loads(_registry(data_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    dirs = data.get("directories") if isinstance(data, dict) else None
    return {str(k): str(v) for k, v in dirs.items()} if isinstance(dirs, dict) else {}


def remember_synced(data_dir: Path, agent_name: str, root: Path) -> None:
    """Note in the data directory that ``root`` is synced with ``agent_name`` (``tiermem sync DIR``), so
    ``tiermem forget`` names the directory's files and history when they still hold a forgotten text."""
    path = _registry(data_dir)
    key = str(root.expanduser().resolve())
    with locked(path.with_name(path.name + ".lock")):
        dirs = _read_registry(data_dir)
        if dirs.get(key) == agent_name:
            return
        dirs[key] = agent_name
        write_text_atomically(path, json.dumps({"directories": dict(sorted(dirs.items()))}, indent=1) + "\n")


def synced_directories(
    agent_names: Iterable[str], extra: Sequence[Path] = (), data_dir: Path | None = None
) -> list[Path]:
    """Directories a sync record ties to one of ``agent_names``: the configured ``sync`` directory, Letta Code's
    agent directories on this machine, those ``tiermem sync DIR`` synced with this data directory (``data_dir``:
    ``remember_synced``), and ``extra`` (every one given is looked at, recorded or not)."""
    from .letta_code import agent_dirs

    names = set(agent_names)
    found: dict[Path, None] = {p.expanduser().resolve(): None for p in extra if p.expanduser().is_dir()}
    candidates = [*agent_dirs().values(), *(Path(p) for p in (_read_registry(data_dir) if data_dir else {}))]
    for root in candidates:
        try:
            if root.is_dir() and recorded_agent(root) in names:
                found[root.resolve()] = None
        except TiermemError:  # an unreadable sync record: not a directory tiermem can say it synced
            continue
    return list(found)


def holders(roots: Sequence[Path], texts: Sequence[str]) -> list[str]:
    """One line per place under ``roots`` still holding one of ``texts``: a file, or a repository's history."""
    needles = [t for t in dict.fromkeys(texts) if t.strip()]
    out: list[str] = []
    if not needles:
        return out
    for root in roots:
        for p in _files(root):
            try:
                data = p.read_bytes()[:MOST_BYTES].decode("utf-8", "replace")
            except OSError:
                continue
            if any(n in data for n in needles):
                out.append(f"{p}: the file still holds it (a synced MemFS file: edit it, or sync after the edit)")
        repo = Repo.find(root)
        if repo is not None:
            commits = _commits(repo.git, repo.root, needles)
            if commits:
                shown = ", ".join(commits[:5]) + (" ..." if len(commits) > 5 else "")
                out.append(
                    f"{repo.root}: git history holds it in {len(commits)} commit(s) ({shown}); tiermem does not "
                    "rewrite history (git filter-repo, then expire the reflog and gc, removes it)"
                )
    return out


def _files(root: Path) -> list[Path]:
    """The files under ``root`` (at most ``MOST_FILES``), outside ``.git``; symbolic links are never followed (the
    sync never reads or writes through them: the text they lead to is not the directory's)."""
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):  # a linked folder is listed, never entered
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file():
                continue
            out.append(path)
            if len(out) >= MOST_FILES:
                return out
    return out


def _commits(git: str, root: Path, needles: Sequence[str]) -> list[str]:
    found: dict[str, None] = {}
    for needle in needles[:20]:
        line = next((x for x in needle.splitlines() if x.strip()), "")[:200]
        try:
            done = subprocess.run(
                [git, "-C", str(root), "log", "--all", "--format=%h", "-S", line],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        for h in done.stdout.split():
            found[h] = None
    return list(found)
