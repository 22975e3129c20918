"""What ``tiermem setup codex|gemini|opencode`` share: the hook command, the record of what setup changed, and edits of
JSON settings files that touch only setup's own entries.

The design is ``claude_code.py``'s: everything written names the ``tiermem`` that ran setup by absolute path and
spells out the data directory and agent; setup's own entries are recognised by their shape (the ``tiermem`` server
entry as setup writes it, hook entries whose one command is ``<abs>/tiermem hook HOST --data-dir D --agent A``), so a
re-run changes nothing and ``--uninstall`` removes exactly them; a ``tiermem`` server entry of another shape (yours)
is replaced only with ``--force`` and put back by ``--uninstall``. The record (``$XDG_STATE_HOME/tiermem/setup/``)
says which files, folders and keys setup created, so uninstall removes a file only if setup created it and nothing
is left in it. Files are replaced atomically with their permissions kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.errors import ConfigError
from ..base.files import write_text_atomically

if TYPE_CHECKING:
    from ..base.config import Settings

NAME = "tiermem"


def hook_command(executable: str, host: str, data_dir: Path, agent: str) -> str:
    return shlex.join([executable, "hook", host, "--data-dir", str(data_dir), "--agent", agent])


def our_hook_command(command: object, host: str) -> bool:
    """``command`` is a hook command as setup writes it for ``host`` (any installation, data directory and agent)."""
    if not isinstance(command, str):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    return (
        len(words) == 7
        and os.path.isabs(words[0])
        and os.path.basename(words[0]) == "tiermem"
        and words[1:4] == ["hook", host, "--data-dir"]
        and words[5] == "--agent"
    )


def serve_command(executable: str, data_dir: Path, agent: str, serve_args: list[str]) -> list[str]:
    return [executable, "serve", "--data-dir", str(data_dir), "--agent", agent, *serve_args]


def our_serve_command(words: object) -> bool:
    """A ``tiermem serve`` command line as setup writes it (any installation, data directory, agent, options)."""
    return (
        isinstance(words, list)
        and len(words) >= 6
        and all(isinstance(w, str) for w in words)
        and os.path.isabs(words[0])
        and os.path.basename(words[0]) == "tiermem"
        and words[1:3] == ["serve", "--data-dir"]
        and words[4] == "--agent"
    )


def state_dir(home: Path) -> Path:
    return Path(os.environ.get("XDG_STATE_HOME") or home / ".local" / "state") / "tiermem" / "setup"


def record_file(home: Path, host: str, anchor: Path) -> Path:
    return state_dir(home) / f"{host}-{hashlib.sha256(str(anchor).encode()).hexdigest()[:16]}.json"


@dataclass
class Record:
    """What setup changed in one set of files (read at install and uninstall, written before any file)."""

    path: Path
    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> Record:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}
        return cls(path, data if isinstance(data, dict) else {})

    @property
    def known(self) -> bool:
        return bool(self.data)

    def note_files(self, *paths: Path) -> None:
        """Remember, the first time, whether each file and its folder existed before setup."""
        files = self.data.setdefault("files", {})
        for path in paths:
            if str(path) not in files:
                files[str(path)] = {"created": not path.exists(), "folder_created": not path.parent.exists()}

    def created(self, path: Path) -> tuple[bool, bool]:
        facts = self.data.get("files", {}).get(str(path), {})
        return bool(facts.get("created")), bool(facts.get("folder_created"))

    @property
    def made(self) -> set[str]:
        return set(self.data.get("made", []))

    def add_made(self, key: str) -> None:
        self.data["made"] = sorted(self.made | {key})

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(self.path, json.dumps(self.data, indent=2) + "\n", mode=0o600, durable=True)

    def forget(self) -> None:
        self.path.unlink(missing_ok=True)


def read_json(path: Path, host: str) -> dict[str, Any]:
    """The JSON object in ``path`` ({} when the file is missing or empty)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"Cannot read {path}: {exc}.") from exc
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path} is not valid JSON ({exc}); fix it ({host} cannot read it either), then run setup again. "
            "Nothing was changed."
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} does not hold a JSON object; fix it, then run setup again. Nothing was changed.")
    return data


def child(data: dict[str, Any], key: str, path: Path, record: Record | None = None) -> dict[str, Any]:
    """``data[key]``, an object (created, and noted in the record as setup's, when missing)."""
    if key not in data and record is not None:
        record.add_made(f"{path}:{key}")
    value = data.setdefault(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: `{key}` is not an object; fix the file, then run setup again. Nothing was changed.")
    return value


def put_server(
    servers: dict[str, Any],
    entry: dict[str, Any],
    record: Record,
    ours: Callable[[object], bool],
    *,
    path: Path,
    force: bool,
    how_to_remove: str,
) -> tuple[bool, str]:
    """Put setup's ``tiermem`` entry in ``servers``; (changed, what). A ``tiermem`` entry of yours is refused unless
    ``force`` (then kept in the record, for uninstall to put back)."""
    before = servers.get(NAME)
    mine = before is None or before == record.data.get("server_wrote") or ours(before)
    if not mine and not force:
        raise ConfigError(
            f"{path} already has an MCP server `tiermem` that setup did not write. Rename or remove it "
            f"({how_to_remove}), or run setup with --force to replace it (--uninstall puts it back). "
            "Nothing was changed."
        )
    if not mine:
        record.data["server_before"] = before
    servers[NAME] = entry
    record.data["server_wrote"] = entry
    what = "added" if before is None else "updated" if mine else "replaced (--force; --uninstall puts yours back)"
    return before != entry, f"MCP server tiermem {what}"


def take_server(servers: dict[str, Any], record: Record, ours: Callable[[object], bool]) -> tuple[bool, str]:
    """Remove setup's ``tiermem`` entry (putting back the one it replaced); (changed, what)."""
    current = servers.get(NAME)
    if current is None or not (current == record.data.get("server_wrote") or ours(current)):
        return False, "no MCP server tiermem of setup's"
    if record.data.get("server_before") is not None:
        servers[NAME] = record.data["server_before"]
        return True, "MCP server tiermem: yours put back"
    del servers[NAME]
    return True, "MCP server tiermem removed"


def put_hooks(hooks: dict[str, Any], planned: dict[str, list[Any]], ours: Callable[[object], bool], path: Path) -> bool:
    """Setup's entries after yours in each event (a re-run leaves them where they are); whether anything changed."""
    changed = False
    for event, entries in planned.items():
        current = hooks.get(event, [])
        if not isinstance(current, list):
            raise ConfigError(
                f"{path}: hooks.{event} is not a list; fix the file, then run setup again. Nothing was changed."
            )
        if [e for e in current if ours(e)] == entries:
            continue
        hooks[event] = [e for e in current if not ours(e)] + entries
        changed = True
    return changed


def take_hooks(hooks: dict[str, Any], ours: Callable[[object], bool], made: set[str], prefix: str) -> bool:
    """Remove setup's entries from every event; an event list setup created goes once empty."""
    changed = False
    for event in list(hooks):
        entries = hooks[event]
        if not isinstance(entries, list):
            continue
        kept = [e for e in entries if not ours(e)]
        if kept != entries:
            changed = True
            if kept or f"{prefix}.{event}" not in made:
                hooks[event] = kept
            else:
                del hooks[event]
    return changed


def drop_if_made(data: dict[str, Any], key: str, path: Path, record: Record) -> None:
    """Remove ``data[key]`` when it is empty and setup created it."""
    if key in data and not data[key] and f"{path}:{key}" in record.made:
        del data[key]


@dataclass
class Write:
    """One file's new text (None: remove the file, setup created it and nothing is left)."""

    path: Path
    text: str | None
    changed: bool
    what: str
    folder_created: bool = False
    mode: int = 0o644


def json_write(
    path: Path, data: dict[str, Any], changed: bool, what: str, record: Record, *, empty_goes: bool
) -> Write:
    created, folder = record.created(path)
    if changed and empty_goes and not data and created:
        return Write(path, None, True, what, folder)
    return Write(path, json.dumps(data, indent=2) + "\n", changed, what)


def apply(writes: list[Write]) -> list[str]:
    lines = []
    for w in writes:
        if not w.changed:
            lines.append(f"{w.path}: unchanged")
            continue
        if w.text is None:
            w.path.unlink(missing_ok=True)
            if w.folder_created and w.path.parent.exists() and not any(w.path.parent.iterdir()):
                w.path.parent.rmdir()
            lines.append(
                f"{w.path}: {w.what} (setup had created the file and nothing is left in it, so it was removed)"
            )
            continue
        mode = w.path.stat().st_mode & 0o777 if w.path.exists() else w.mode
        w.path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(w.path, w.text, mode=mode, durable=True)
        lines.append(f"{w.path}: {w.what}")
    return lines


def serve_args_of(settings: Settings, args: Any) -> list[str]:
    """Options for ``tiermem serve`` beyond the data directory and agent, as given to setup."""
    serve_args: list[str] = []
    if settings.config is not None:
        serve_args += ["--config", str(Path(settings.config).expanduser().resolve())]
    if getattr(args, "embedding_model", None):
        serve_args += ["--embedding-model", args.embedding_model]
    if getattr(args, "tools", None):
        serve_args += ["--tools", args.tools]
    if getattr(args, "agent_loop", None):
        serve_args.append("--agent-loop")
    if getattr(args, "mcp_apps", None):
        serve_args.append("--mcp-apps")
    return serve_args
