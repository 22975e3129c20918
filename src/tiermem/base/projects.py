"""Which project a host is working in: the git repository around its working directory, else the directory.

Captured turns carry it (``autorecall``), so memories of one repository are not recalled into another's work. Found
by walking up from the directory to the nearest one holding a ``.git`` entry; no git process is run. A linked
worktree of a repository (``git worktree add``: its ``.git`` is a file naming ``<main>/.git/worktrees/<name>``, whose
``commondir`` names the repository's git directory) is the repository's project, the directory of its main checkout;
a submodule (a ``.git`` file without ``commondir``) is a repository of its own. A second clone, or a checkout moved
elsewhere, is another project: the path is the name. Standard library only.
"""

from __future__ import annotations

import os
import re

from .records import valid_text

_CORE_WORKTREE = re.compile(rb"^\s*worktree\s*=\s*(.+?)\s*$")


def project_of(directory: object) -> str | None:
    """The project of ``directory`` (a host's working directory): the root of the git repository it is in (of its
    main checkout for a linked worktree), else the directory itself, as a normalised absolute path (symlinks
    resolved). None when ``directory`` is not an absolute path (a hook input without ``cwd``). A name that is not
    valid UTF-8 (undecodable bytes, kept as ``surrogateescape`` characters) comes back with those bytes written
    ``\\xNN``: storable text, one name per directory."""
    if not isinstance(directory, str) or not directory or "\x00" in directory or not os.path.isabs(directory):
        return None
    try:
        os.fsencode(directory)
    except UnicodeEncodeError:  # a lone surrogate no file name can hold: no such directory
        return _storable(directory)
    start = os.path.realpath(directory)
    here = start
    while True:
        if os.path.lexists(os.path.join(here, ".git")):
            return _storable(_main_checkout(here))
        parent = os.path.dirname(here)
        if parent == here:
            return _storable(start)
        here = parent


def _main_checkout(root: str) -> str:
    """``root`` (a directory holding ``.git``), or, when it is a linked worktree, its repository's main checkout (the
    directory of the common git directory; that directory itself for a bare repository)."""
    try:
        with open(os.path.join(root, ".git"), "rb") as f:  # a directory raises IsADirectoryError: a main checkout
            first = f.read(4096).split(b"\n", 1)[0]
        if not first.startswith(b"gitdir:"):
            return root
        gitdir = os.path.join(root, os.fsdecode(first[len(b"gitdir:") :].strip()))
        with open(os.path.join(gitdir, "commondir"), "rb") as f:  # missing: a submodule, a repository of its own
            common = os.path.realpath(os.path.join(gitdir, os.fsdecode(f.read().strip())))
    except OSError:
        return root
    if os.path.basename(common) == ".git":
        return os.path.dirname(common)
    return _configured_worktree(common) or common


def _configured_worktree(gitdir: str) -> str | None:
    """``core.worktree`` of a git directory not named ``.git`` (a submodule's, under ``.git/modules/``), resolved."""
    try:
        with open(os.path.join(gitdir, "config"), "rb") as f:
            lines = f.read(1 << 16).splitlines()
    except OSError:
        return None
    section = b""
    for line in lines:
        stripped = line.strip()
        if stripped.startswith(b"["):
            section = stripped.strip(b"[]").strip().lower()
            continue
        found = _CORE_WORKTREE.match(line)
        if section == b"core" and found:
            return os.path.realpath(os.path.join(gitdir, os.fsdecode(found.group(1).strip(b'"'))))
    return None


def _storable(path: str) -> str:
    """``path`` as text every store takes: bytes that are not UTF-8 written ``\\xNN``, other lone surrogates U+FFFD."""
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        pass
    try:
        return os.fsencode(path).decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return valid_text(path)


def named_project(name: str | None) -> str | None:
    """A project as a tool names it: a local directory is resolved as a hook's (``project_of``: a repository's
    subdirectory names the repository); any other name is used as given. None or blank: no project."""
    if name is None or not name.strip():
        return None
    name = name.strip()
    if os.path.isabs(name) and os.path.isdir(name):
        return project_of(name)
    return name
