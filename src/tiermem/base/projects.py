"""Which project a host is working in: the git repository around its working directory, else the directory.

Captured turns carry it (``autorecall``), so memories of one repository are not recalled into another's work. Found
by walking up from the directory to the nearest one holding a ``.git`` entry (a directory, or the file of a worktree
or submodule); no git process is run. Standard library only.
"""

from __future__ import annotations

import os


def project_of(directory: object) -> str | None:
    """The project of ``directory`` (a host's working directory): the root of the git repository it is in, else the
    directory itself, as a normalised absolute path (symlinks resolved). None when ``directory`` is not an absolute
    path (a hook input without ``cwd``)."""
    if not isinstance(directory, str) or not directory or "\x00" in directory or not os.path.isabs(directory):
        return None
    start = os.path.realpath(directory)
    here = start
    while True:
        if os.path.lexists(os.path.join(here, ".git")):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return start
        here = parent


def named_project(name: str | None) -> str | None:
    """A project as a tool names it: a local directory is resolved as a hook's (``project_of``: a repository's
    subdirectory names the repository); any other name is used as given. None or blank: no project."""
    if name is None or not name.strip():
        return None
    name = name.strip()
    if os.path.isabs(name) and os.path.isdir(name):
        return project_of(name)
    return name
