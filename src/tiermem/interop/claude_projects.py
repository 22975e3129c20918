"""Which project each of Claude Code's auto-memory folders belongs to, as tiermem's hooks name that project.

Claude Code (2.1.197, read from its binary) keeps a project's auto memory in
``<config dir>/projects/<name>/memory/``, where ``<name>`` is the project's path with every character but ``A-Z a-z
0-9`` turned into ``-`` (a name over 200 characters is cut there and given a hash), and the project's path is the
canonical root of the git repository the session started in (a worktree's is its main repository's), else the
directory itself. The name cannot be read back (``/a/b-c`` and ``/a/b/c`` give one name), so a folder is matched
against paths known to be projects: the working directories the hooks reported, the ``cwd`` of Claude Code's own
transcripts (``projects/<name>/*.jsonl``) and the project paths in its ``.claude.json``; each path gives itself, its
repository's root, the canonical root and its parents (``KnownPaths``: found once per sync, by folder name). A
folder's project is ``projects.project_of`` of the matching
path (what a hook in that project uses); no match, or matches in two projects, leaves the folder without one (its
files are then not stored: they would be recalled in every project). Standard library only.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path

from ..base.projects import project_of

MAX_NAME = 200  # Claude Code's limit on a sanitised path; longer ones are cut and get a hash of their own
TRANSCRIPT_LINES = 50  # lines of one transcript read for its cwd
_UNSAFE = re.compile(r"[^a-zA-Z0-9]")


def folder_name(path: str) -> str:
    """The name Claude Code gives the folder of ``path`` (without the hash it adds to a name over 200 characters)."""
    return _UNSAFE.sub("-", path)


def candidates(path: str) -> set[str]:
    """The paths a session working in ``path`` may have named its folder by: the path (as given and resolved), its
    repository's root (a worktree's being its main checkout's: ``project_of``), and each of their parents."""
    found: set[str] = set()
    if not os.path.isabs(path):
        return found
    for start in {path, os.path.realpath(path), project_of(path) or path}:
        here = start
        while True:
            found.add(here)
            parent = os.path.dirname(here)
            if parent == here:
                break
            here = parent
    return found


def recorded_paths(projects_dir: Path, config_file: Path | None, since: float = 0.0) -> list[str]:
    """Project paths Claude Code itself recorded in files changed after ``since`` (a time): the ``cwd`` of its
    transcripts and the keys of ``projects`` in its ``.claude.json``. A file that cannot be read adds nothing."""
    found: dict[str, None] = {}
    for transcript in sorted(projects_dir.glob("*/*.jsonl")):
        try:
            if transcript.stat().st_mtime < since:
                continue
            with transcript.open(encoding="utf-8", errors="replace") as lines:
                for n, line in enumerate(lines):
                    if n >= TRANSCRIPT_LINES:
                        break
                    cwd = _cwd(line)
                    if cwd:
                        found[cwd] = None
                        break
        except OSError:
            continue
    if config_file is not None:
        try:
            data = json.loads(config_file.read_text(encoding="utf-8")) if config_file.stat().st_mtime >= since else {}
        except (OSError, ValueError):
            data = {}
        listed = data.get("projects") if isinstance(data, dict) else None
        if isinstance(listed, dict):
            found.update((k, None) for k in listed if isinstance(k, str) and os.path.isabs(k))
    return list(found)


def _cwd(line: str) -> str | None:
    if '"cwd"' not in line:
        return None
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    cwd = entry.get("cwd") if isinstance(entry, dict) else None
    return cwd if isinstance(cwd, str) and os.path.isabs(cwd) else None


class KnownPaths:
    """The paths known to be projects, by the folder name Claude Code gives each of their candidates: built once for a
    sync (every path's candidates found once; ``project_for`` then looks a folder's name up)."""

    def __init__(self, paths: Iterable[str]) -> None:
        self._short: dict[str, set[str]] = {}  # a name of MAX_NAME characters or less: the whole name
        self._long: dict[str, set[str]] = {}  # a longer one: its first MAX_NAME characters (Claude Code adds a hash)
        for path in paths:
            for candidate in candidates(path):
                name = folder_name(candidate)
                if len(name) <= MAX_NAME:
                    self._short.setdefault(name, set()).add(candidate)
                else:
                    self._long.setdefault(name[:MAX_NAME], set()).add(candidate)

    def named(self, name: str) -> set[str]:
        """The known paths Claude Code names the folder ``name`` by: those whose ``folder_name`` is ``name``, or, cut
        to MAX_NAME characters, is the start of ``name`` before the ``-`` and hash Claude Code adds to a longer one."""
        if len(name) <= MAX_NAME:
            return self._short.get(name, set())
        if len(name) > MAX_NAME + 1 and name[MAX_NAME] == "-":
            return self._long.get(name[:MAX_NAME], set())
        return set()

    def project_for(self, name: str) -> tuple[str | None, str]:
        """(the project of the folder ``name``, "") or (None, why it has none)."""
        projects = {project for project in map(project_of, self.named(name)) if project is not None}
        if len(projects) == 1:
            return projects.pop(), ""
        if not projects:
            return None, "no project known to tiermem or Claude Code has this folder's name (a session there names it)"
        shown = ", ".join(sorted(projects)[:3])
        return None, f"its name fits several projects ({shown}): Claude Code shares this folder between them"
