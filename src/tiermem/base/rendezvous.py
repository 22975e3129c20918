"""Where a running ``tiermem serve`` listens for hooks, and how a hook finds it: a private directory of Unix sockets.

A host such as Claude Code starts ``tiermem serve`` and runs its hooks as children of one process. The server listens
on ``<dir>/<key>.<host pid>.<server pid>.sock``, where ``key`` names the memory it serves (data directory and agent)
and the host pid is its parent's. A hook looks for sockets of the same key, trying first the servers whose host is one
of its own ancestors (the Claude Code session that runs it), then any other live one: every server with that key
writes to the same memory.

The directory is ``$XDG_RUNTIME_DIR/tiermem`` (per user, mode 0700 by the system), else
``$TMPDIR/tiermem-<uid>`` (``/tmp`` without ``TMPDIR``). It is
created 0700 and used only if it is a real directory (not a symlink) owned by this user that no one else can enter;
sockets are 0600 and the server also refuses a peer of another user (``SO_PEERCRED``, Linux). So no other user of the
machine can reach a server, or plant a socket a hook would talk to.

Standard library only: a hook process imports this and little else (it must answer in tens of milliseconds).
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from .errors import ConfigError

SOCKET_SUFFIX = ".sock"
MAX_SOCKET_PATH = 100  # bytes; AF_UNIX paths are limited to 104 (macOS) or 108 (Linux)
MAX_REQUEST = 8 << 20  # bytes: the most one hook request may be (its JSON line); a longer one is refused
# The hook's answer to a server's acknowledgement that came in time, when its request asks to confirm
# (``"confirm": true``): "still mine, do it" (``cli/hooks.py`` sends it, ``process/hookserver.py`` waits for it).
GO = {"go": True}


def runtime_dir() -> Path:
    """The per-user directory of hook sockets (not created here)."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base and Path(base).is_dir():
        return Path(base) / "tiermem"
    return _fallback_dir()


def _fallback_dir() -> Path:
    return Path(os.environ.get("TMPDIR") or "/tmp") / f"tiermem-{os.getuid()}"


def runtime_dirs() -> list[Path]:
    """Where a hook looks: ``runtime_dir()``, then the directory a server uses without ``XDG_RUNTIME_DIR``. A host
    may start its MCP servers with fewer environment variables than its hooks (Codex CLI passes a server a short
    list that leaves ``XDG_RUNTIME_DIR`` out), so the server listens in the second."""
    return list(dict.fromkeys([runtime_dir(), _fallback_dir()]))


def private_dir(create: bool, path: Path | None = None) -> Path:
    """``path`` (default ``runtime_dir()``), checked to be ours alone (created 0700 when ``create``); ConfigError when
    it is not."""
    path = path if path is not None else runtime_dir()
    if create:
        try:
            path.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"Cannot create the hook socket directory {path}: {exc}.") from exc
    try:
        info = path.lstat()
    except FileNotFoundError:
        raise ConfigError(f"No tiermem server has listened for hooks here yet ({path} does not exist).") from None
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"{path} is not a directory (a symlink or a file): hook sockets are not used. Remove it.")
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise ConfigError(
            f"{path} is owned by another user or open to others (mode {oct(info.st_mode & 0o777)}): "
            "hook sockets are not used. Remove it, or set XDG_RUNTIME_DIR to a private directory."
        )
    return path


def memory_key(data_dir: str | os.PathLike[str], agent: str) -> str:
    """Names the memory a server serves: its data directory (resolved) and agent."""
    resolved = os.path.realpath(os.path.expanduser(os.fspath(data_dir)))
    return hashlib.sha256(f"{resolved}\0{agent}".encode()).hexdigest()[:16]


def socket_name(key: str, host_pid: int, server_pid: int) -> str:
    return f"{key}.{host_pid}.{server_pid}{SOCKET_SUFFIX}"


def parse_name(name: str) -> tuple[str, int, int] | None:
    """(key, host pid, server pid) of a socket file name, or None if it is not one."""
    if not name.endswith(SOCKET_SUFFIX):
        return None
    parts = name[: -len(SOCKET_SUFFIX)].split(".")
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    return parts[0], int(parts[1]), int(parts[2])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive, but its socket would not be in our directory
    return True


def ancestors(pid: int | None = None) -> list[int]:
    """The chain of parent pids above ``pid`` (default: this process), nearest first, without pid 1."""
    out: list[int] = []
    current = os.getpid() if pid is None else pid
    for _ in range(64):
        parent = _parent(current)
        if parent is None or parent <= 1 or parent in out:
            break
        out.append(parent)
        current = parent
    return out


def _parent(pid: int) -> int | None:
    if pid == os.getpid():
        return os.getppid()
    fields = _stat(pid)  # None without /proc (macOS): only the direct parent is known
    try:
        return int(fields[1]) if fields else None
    except (IndexError, ValueError):
        return None


def candidates(directory: Path, key: str) -> list[Path]:
    """Sockets of live servers for ``key``: those whose host is an ancestor of this process first (nearest first),
    then the others, newest first."""
    found: list[tuple[int, float, Path]] = []
    lineage = ancestors()
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return []
    for entry in entries:
        parsed = parse_name(entry.name)
        if parsed is None or parsed[0] != key or not alive(parsed[2]):
            continue
        rank = lineage.index(parsed[1]) if parsed[1] in lineage else len(lineage)
        try:
            mtime = entry.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        found.append((rank, -mtime, Path(entry.path)))
    return [p for _, _, p in sorted(found)]


def starting_server(directory: Path | None, young: float = 10.0, lineage: list[int] | None = None) -> bool:
    """Whether a ``tiermem serve`` started by one of this process's ancestors (``lineage``, default ``ancestors()``)
    less than ``young`` seconds ago is running and has not opened its socket in ``directory`` yet (Linux, through
    /proc): a hook that finds no socket for its memory waits for it, since a host starts its servers and its first
    hooks together (a server opens its socket within a second of starting). A server that has its socket serves
    another memory, as does an older one without a socket: no wait. False where /proc is missing: no wait."""
    listening = set()
    try:
        for entry in os.scandir(directory) if directory is not None else ():
            parsed = parse_name(entry.name)
            if parsed is not None:
                listening.add(parsed[2])
    except OSError:
        pass
    lineage_set = set(ancestors() if lineage is None else lineage)
    try:
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        ticks = os.sysconf("SC_CLK_TCK")
        entries = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    except (OSError, ValueError):
        return False
    for name in entries:
        stat_fields = _stat(int(name))
        if stat_fields is None or int(stat_fields[1]) not in lineage_set or int(name) in listening:
            continue
        if uptime - int(stat_fields[19]) / ticks > young:  # field 22 (starttime), counted from after the name
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in argv and any(os.path.basename(a) == b"tiermem" for a in argv):
            return True
    return False


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, ...), or None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw.rsplit(")", 1)[1].split()
