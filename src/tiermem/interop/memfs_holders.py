"""What still holds a forgotten text outside the store: MemFS directories synced with the agent (their files) and
the git history around them. ``tiermem forget`` names them; it never rewrites a directory Letta Code owns, nor
git history (that takes a history rewrite and a force-push the user decides on)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from .memfs_git import Repo
from .memfs_sync import recorded_agent

MOST_FILES = 2_000  # files looked at per directory
MOST_BYTES = 4 << 20  # bytes read per file


def synced_directories(agent_names: Iterable[str], extra: Sequence[Path] = ()) -> list[Path]:
    """Directories a sync record ties to one of ``agent_names`` (the configured ``sync`` directory, Letta Code's
    agent directories on this machine, and ``extra``: every one given is looked at, recorded or not)."""
    from .letta_code import agent_dirs

    names = set(agent_names)
    found: dict[Path, None] = {p.expanduser().resolve(): None for p in extra if p.expanduser().is_dir()}
    for root in agent_dirs().values():
        if recorded_agent(root) in names:
            found[root.resolve()] = None
    return list(found)


def holders(roots: Sequence[Path], texts: Sequence[str]) -> list[str]:
    """One line per place under ``roots`` still holding one of ``texts``: a file, or a repository's history."""
    needles = [t for t in dict.fromkeys(texts) if t.strip()]
    out: list[str] = []
    if not needles:
        return out
    for root in roots:
        files = [p for p in sorted(root.rglob("*"))[:MOST_FILES] if p.is_file() and ".git" not in p.parts]
        for p in files:
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
