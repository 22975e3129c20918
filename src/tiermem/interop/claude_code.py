"""``tiermem setup claude-code``: register tiermem with Claude Code and install its hooks; ``--uninstall`` undoes it.

User scope (the default) applies to every project directory: the MCP server ``tiermem`` goes in ``~/.claude.json``
(top-level ``mcpServers``, where ``claude mcp add --scope user`` puts servers) and the hooks in
``~/.claude/settings.json``. Project scope (``--scope project``) writes the project's ``.mcp.json`` and
``.claude/settings.json`` (shared with whoever checks the project out), and approves the server for this user in
``.claude/settings.local.json`` (``enabledMcpjsonServers``), so Claude Code does not ask.

Everything written names the ``tiermem`` that ran setup by absolute path (a virtual environment is often not on a
host's PATH) and spells out the data directory and agent, so the server and the hooks agree on the memory they use.
The hooks (``tiermem hook claude-code``): ``SessionStart`` (core memory in context), ``UserPromptSubmit`` (the prompt
logged, relevant memories added), ``Stop`` (the reply logged). Setup is idempotent (a second run changes nothing)
and ``--uninstall`` removes exactly these entries, leaving everything else in the files as it was. Files are
replaced atomically (written beside, then renamed) with their permissions kept.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..base.errors import ConfigError
from ..base.files import write_text_atomically

if TYPE_CHECKING:
    from ..base.config import Settings

NAME = "tiermem"
HOOK_EVENTS = ("SessionStart", "UserPromptSubmit", "Stop")
SESSION_SOURCES = "startup|clear|compact"  # on resume the earlier context is still there: nothing to add
HOOK_TIMEOUT = 60  # seconds Claude Code gives a hook (the first prompt of a session may wait for the model)
Scope = Literal["user", "project"]


@dataclass(frozen=True)
class Plan:
    """What setup writes: the MCP server entry and the hook command, and the files they go in."""

    server: dict[str, Any]
    hook_command: str
    servers_file: Path  # ~/.claude.json or <project>/.mcp.json
    settings_file: Path  # ~/.claude/settings.json or <project>/.claude/settings.json
    approval_file: Path | None  # <project>/.claude/settings.local.json (project scope)

    def hooks(self) -> dict[str, list[dict[str, Any]]]:
        entry = {"type": "command", "command": self.hook_command, "timeout": HOOK_TIMEOUT}
        return {event: [{"matcher": SESSION_SOURCES, "hooks": [entry]} if event == "SessionStart" else {"hooks": [entry]}]
                for event in HOOK_EVENTS}


def plan(executable: str, serve_args: list[str], *, data_dir: Path, agent: str, scope: Scope,
         home: Path | None = None, project: Path | None = None) -> Plan:
    """``serve_args``: options for ``tiermem serve`` beyond the data directory and agent (config, tools, ...)."""
    if not Path(executable).is_absolute():
        raise ConfigError(f"Cannot find the absolute path of the tiermem command (got {executable!r}); run setup "
                          "with the tiermem of your installation, e.g. /path/to/venv/bin/tiermem setup claude-code.")
    memory = ["--data-dir", str(data_dir), "--agent", agent]
    server = {"type": "stdio", "command": executable, "args": ["serve", *memory, *serve_args], "env": {},
              "alwaysLoad": True}  # Claude Code waits for it, so its tools and instructions are in the first request
    hook = shlex.join([executable, "hook", "claude-code", *memory])
    if scope == "user":
        base = home if home is not None else Path.home()
        return Plan(server, hook, base / ".claude.json", base / ".claude" / "settings.json", None)
    root = (project or Path.cwd()).resolve()
    return Plan(server, hook, root / ".mcp.json", root / ".claude" / "settings.json",
                root / ".claude" / "settings.local.json")


def show(p: Plan) -> str:
    """What setup would write, file by file (``tiermem config claude-code``)."""
    parts = [f"# {p.servers_file}: mcpServers", json.dumps({NAME: p.server}, indent=2),
             f"# {p.settings_file}: hooks (added beside any you have)", json.dumps(p.hooks(), indent=2)]
    if p.approval_file is not None:
        parts += [f"# {p.approval_file}: enabledMcpjsonServers", json.dumps([NAME])]
    return "\n".join(parts)


@dataclass
class _Edit:
    path: Path
    data: dict[str, Any]
    changed: bool
    what: str


def install(p: Plan) -> list[str]:
    """Write the plan; one line per file saying what changed (or that nothing did). Every file is read and checked
    before any is written, so a broken file changes nothing."""
    servers = _read(p.servers_file)
    listed = _object(servers, "mcpServers", p.servers_file)
    before = listed.get(NAME)
    listed[NAME] = p.server
    edits = [_Edit(p.servers_file, servers, before != p.server,
                   "MCP server tiermem " + ("added" if before is None else "updated"))]
    settings = _read(p.settings_file)
    hooks = _object(settings, "hooks", p.settings_file)
    changed = False
    for event, entries in p.hooks().items():
        current = hooks.get(event, [])
        if not isinstance(current, list):
            raise ConfigError(f"{p.settings_file}: hooks.{event} is not a list; fix the file, then run setup again. "
                              "Nothing was changed.")
        wanted = [e for e in current if not _ours(e)] + entries
        if wanted != current:
            hooks[event] = wanted
            changed = True
    edits.append(_Edit(p.settings_file, settings, changed, "hooks " + ", ".join(HOOK_EVENTS) + " installed"))
    if p.approval_file is not None:
        local = _read(p.approval_file)
        enabled = local.setdefault("enabledMcpjsonServers", [])
        if not isinstance(enabled, list):
            raise ConfigError(f"{p.approval_file}: `enabledMcpjsonServers` is not a list; fix the file, then run "
                              "setup again. Nothing was changed.")
        missing = NAME not in enabled
        if missing:
            enabled.append(NAME)
        edits.append(_Edit(p.approval_file, local, missing, "server tiermem approved for this user"))
    return [_write(e) for e in edits]


def uninstall(p: Plan) -> list[str]:
    """Remove what ``install`` adds (the tiermem server entry, tiermem's hooks, the approval); nothing else."""
    servers = _read(p.servers_file)
    listed = servers.get("mcpServers")
    ours = isinstance(listed, dict) and _our_server(listed.get(NAME))
    if ours and isinstance(listed, dict):
        del listed[NAME]
        if not listed:
            del servers["mcpServers"]
    edits = [_Edit(p.servers_file, servers, ours, "MCP server tiermem removed")]
    settings = _read(p.settings_file)
    hooks = settings.get("hooks")
    changed = False
    if isinstance(hooks, dict):
        for event in list(hooks):
            entries = hooks[event]
            if not isinstance(entries, list):
                continue
            kept = [e for e in entries if not _ours(e)]
            if kept != entries:
                changed = True
                if kept:
                    hooks[event] = kept
                else:
                    del hooks[event]
        if changed and not hooks:
            del settings["hooks"]
    edits.append(_Edit(p.settings_file, settings, changed, "tiermem hooks removed"))
    if p.approval_file is not None:
        local = _read(p.approval_file)
        enabled = local.get("enabledMcpjsonServers")
        present = isinstance(enabled, list) and NAME in enabled
        if present and isinstance(enabled, list):
            enabled.remove(NAME)
            if not enabled:
                del local["enabledMcpjsonServers"]
        edits.append(_Edit(p.approval_file, local, present, "approval of tiermem removed"))
    return [_write(e) for e in edits]


def _object(data: dict[str, Any], key: str, path: Path) -> dict[str, Any]:
    value = data.setdefault(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: `{key}` is not an object; fix the file, then run setup again. Nothing was changed.")
    return value


def _ours(entry: object) -> bool:
    """A hook matcher entry whose commands are all tiermem's hook (any installation's)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("hooks"), list) or not entry["hooks"]:
        return False
    return all(isinstance(h, dict) and _our_hook_command(str(h.get("command", ""))) for h in entry["hooks"])


def _our_hook_command(command: str) -> bool:
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    return len(words) >= 3 and os.path.basename(words[0]) == "tiermem" and words[1:3] == ["hook", "claude-code"]


def _our_server(entry: object) -> bool:
    if not isinstance(entry, dict):
        return False
    args = entry.get("args")
    return (os.path.basename(str(entry.get("command", ""))) == "tiermem" and isinstance(args, list)
            and bool(args) and args[0] == "serve")


def _read(path: Path) -> dict[str, Any]:
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
        raise ConfigError(f"{path} is not valid JSON ({exc}); fix it (Claude Code cannot read it either), then run "
                          "setup again. Nothing was changed.") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} does not hold a JSON object; fix it, then run setup again. Nothing was changed.")
    return data


def _write(edit: _Edit) -> str:
    path, data = edit.path, edit.data
    if not edit.changed:
        return f"{path}: unchanged"
    if not data:  # nothing of the user's is left (uninstall emptied a file setup had created): no file at all
        path.unlink(missing_ok=True)
        if path.parent.name == ".claude" and not any(path.parent.iterdir()):
            path.parent.rmdir()
        return f"{path}: {edit.what} (the file is empty now, so it was removed)"
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600 if path.name == ".claude.json" else 0o644
    write_text_atomically(path, json.dumps(data, indent=2) + "\n", mode=mode, durable=True)
    return f"{path}: {edit.what}"


def setup_command(settings: Settings, args: Any, *, dry_run: bool) -> int:
    """``tiermem setup claude-code`` (``--uninstall``), and ``tiermem config claude-code`` (``dry_run``: print only)."""
    from .hosts import executable

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
    the_plan = plan(executable(), serve_args, data_dir=settings.resolved_data_dir().expanduser().resolve(),
                    agent=settings.agent, scope=args.scope, project=getattr(args, "project_dir", None))
    if dry_run:
        print(show(the_plan))
        return 0
    for line in uninstall(the_plan) if args.uninstall else install(the_plan):
        print(line)
    if not args.uninstall:
        print("Start a new Claude Code session: core memory is in context, each prompt and reply is logged, and "
              "relevant memories are added to prompts. Undo with `tiermem setup claude-code --uninstall"
              + (" --scope project`." if args.scope == "project" else "`."))
    return 0
