"""Writing a file so that a reader (another process, a host, a crash) sees the old file or the new one, never half
of one: the text goes to a temporary file beside the target, which is renamed over it (``os.replace`` is atomic
within a directory). The one place the project writes a file this way. And ``read_text_nofollow``: the one way a
file of a folder others write (MemFS directories, Claude Code's auto memory) is read, never through a symbolic link."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO


def write_atomically(
    path: Path,
    fill: Callable[[TextIO], object],
    *,
    mode: int | None = None,
    durable: bool = False,
    newline: str | None = None,
) -> None:
    """Write ``path`` with ``fill(file)`` through a temporary file in its directory renamed into place.

    ``mode``: the new file's permissions (None: those ``tempfile.mkstemp`` gives, owner read/write only).
    ``durable``: flush it to the disk before the rename (a crash right after leaves the new content, not an empty
    file). ``newline``: as ``open``'s (``""``: written as given). The directory must exist. On any failure,
    ``fill``'s included, the target is unchanged, the temporary file removed, and the error raised.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:40]}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline=newline) as f:
            fill(f)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomically(
    path: Path, text: str, *, mode: int | None = None, durable: bool = False, newline: str | None = None
) -> None:
    """``write_atomically`` of ``text``."""
    write_atomically(path, lambda f: f.write(text), mode=mode, durable=durable, newline=newline)


@contextmanager
def locked(path: Path, *, shared: bool = False) -> Iterator[None]:
    """An exclusive lock on the file ``path`` (created, with its directory, if missing) among this machine's
    processes, held inside; ``shared``: a shared lock (held by any number at once, never with an exclusive one). No
    lock where the system has no ``fcntl`` (not POSIX). ``OSError`` if it cannot be made."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextmanager
def locked_unless_held(path: Path, note: str | None) -> Iterator[str | None]:
    """The exclusive lock on the file ``path`` (which must be in an existing directory), taken without waiting.
    Inside: None when this process took it (``note`` is written in the file meanwhile, saying who holds it; None: a
    probe, which leaves the file as it is), else the note of the process that holds it (nothing is held then). A
    holder that dies lets go of it. Where the system has no ``fcntl`` (not POSIX): always None. ``OSError`` if the
    file cannot be made."""
    try:
        import fcntl
    except ImportError:
        yield None
        return
    with path.open("a+", encoding="utf-8") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            yield f.read(200).strip() or "a process that has not said who it is yet"
            return
        try:
            if note is not None:
                f.truncate(0)
                f.write(note)
                f.flush()
            yield None
        finally:
            if note is not None:
                f.truncate(0)
            fcntl.flock(f, fcntl.LOCK_UN)


class LinkedFileError(OSError):
    """``read_text_nofollow``: the path is a symbolic link (to something), so it was not read."""


class NotRegularFileError(OSError):
    """``read_text_nofollow``: the path is no regular file (a folder, a FIFO, a device), so it was not read."""


def read_text_nofollow(path: Path, *, newline: str | None = None) -> str:
    """The UTF-8 text of the regular file ``path``, never read through a symbolic link at its end: ``LinkedFileError``
    for a link (checked first, and again by opening with ``O_NOFOLLOW``: a link put in its place meanwhile is refused
    too), ``FileNotFoundError`` for a link to nothing (no file, as one removed), ``NotRegularFileError`` for anything
    but a regular file (opened without blocking, so a FIFO never hangs the reader). ``newline``: as ``open``'s
    (``""``: the line endings as they are). Other ``OSError``s and ``UnicodeDecodeError`` as reading raises them. The
    folders on the way are the caller's to check."""
    if path.is_symlink():
        if not path.exists():
            raise FileNotFoundError(errno.ENOENT, "a symbolic link to nothing", str(path))
        raise LinkedFileError(errno.ELOOP, "a symbolic link", str(path))
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LinkedFileError(errno.ELOOP, "a symbolic link", str(path)) from None
        raise
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        os.close(fd)
        raise
    if not regular:
        os.close(fd)
        raise NotRegularFileError(errno.EINVAL, "not a regular file", str(path))
    with open(fd, encoding="utf-8", newline=newline) as f:
        return f.read()
