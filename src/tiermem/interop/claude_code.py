"""``tiermem setup claude-code``: register tiermem with Claude Code and install its hooks; ``--uninstall`` undoes it.

User scope (the default) applies to every project directory: the MCP server ``tiermem`` goes in ``~/.claude.json``
(top-level ``mcpServers``, where ``claude mcp add --scope user`` puts servers) and the hooks in
``~/.claude/settings.json``. Project scope (``--scope project``) writes the project's ``.mcp.json`` and
``.claude/settings.json`` (shared with whoever checks the project out), and approves the server for this user in
``.claude/settings.local.json`` (``enabledMcpjsonServers``), so Claude Code does not ask.

Everything written names the ``tiermem`` that ran setup by absolute path (a virtual environment is often not on a
host's PATH) and spells out the data directory and agent, so the server and the hooks agree on the memory they use.
The hooks (``tiermem hook claude-code``): ``SessionStart`` (core memory in context), ``UserPromptSubmit`` (the prompt
logged, relevant memories added), ``Stop`` (the reply logged). Files are replaced atomically (written beside, then
renamed) with their permissions kept.

Setup changes only what is its own, and ``--uninstall`` undoes exactly that:

- Setup's own entries are recognised by their shape: the ``tiermem`` server entry exactly as setup writes it (any
  installation's path, data directory, agent, options) and hook entries exactly as setup writes them. A ``tiermem``
  server entry of another shape (yours) is not replaced unless ``--force``; the hook entries of yours, tiermem ones
  included, are never touched, and setup's go after them in each event (a re-run leaves them where they are).
- Setup keeps a record of what it changed (``$XDG_STATE_HOME/tiermem/setup/``: the files, folder and keys it
  created, the server entry it replaced, whether it added the approval). Uninstall puts back the entry it replaced,
  removes the approval only if setup added it, and removes a file or key only if setup created it and nothing is
  left in it. Without the record
  (deleted, or setup ran on another machine) uninstall removes setup's entries and leaves the approval and the files.
- Setup is idempotent (a second run changes nothing).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..base.errors import ConfigError
from ..base.files import write_text_atomically
from .auto_memory import directory
from .auto_memory_admin import adopt, unpoint, withdraw
from .hook_setup import put_hooks, read_json, take_hooks

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
    record_file: Path  # what setup changed, for --uninstall: $XDG_STATE_HOME/tiermem/setup/claude-code-<digest>.json
    auto_memory: Path | None = (
        None  # user scope: tiermem's side of the auto-memory sync (<data dir>/auto-memory/<agent>)
    )
    home: Path | None = None  # where Claude Code's own auto-memory folders are (~/.claude/projects/*/memory)

    def hooks(self) -> dict[str, list[dict[str, Any]]]:
        entry = {"type": "command", "command": self.hook_command, "timeout": HOOK_TIMEOUT}
        return {
            event: [{"matcher": SESSION_SOURCES, "hooks": [entry]} if event == "SessionStart" else {"hooks": [entry]}]
            for event in HOOK_EVENTS
        }


def plan(
    executable: str,
    serve_args: list[str],
    *,
    data_dir: Path,
    agent: str,
    scope: Scope,
    home: Path | None = None,
    project: Path | None = None,
) -> Plan:
    """``serve_args``: options for ``tiermem serve`` beyond the data directory and agent (config, tools, ...)."""
    if not Path(executable).is_absolute():
        raise ConfigError(
            f"Cannot find the absolute path of the tiermem command (got {executable!r}); run setup "
            "with the tiermem of your installation, e.g. /path/to/venv/bin/tiermem setup claude-code."
        )
    memory = ["--data-dir", str(data_dir), "--agent", agent]
    server = {
        "type": "stdio",
        "command": executable,
        "args": ["serve", *memory, *serve_args],
        "env": {},
        "alwaysLoad": True,
    }  # Claude Code waits for it, so its tools and instructions are in the first request
    hook = shlex.join([executable, "hook", "claude-code", *memory])
    base = home if home is not None else Path.home()
    state = Path(os.environ.get("XDG_STATE_HOME") or base / ".local" / "state") / "tiermem" / "setup"
    files: tuple[Path, Path, Path | None]
    if scope == "user":
        files = (base / ".claude.json", base / ".claude" / "settings.json", None)
    else:
        root = (project or Path.cwd()).resolve()
        files = (root / ".mcp.json", root / ".claude" / "settings.json", root / ".claude" / "settings.local.json")
    digest = hashlib.sha256(str(files[0]).encode()).hexdigest()[:16]
    shared = directory(data_dir, agent) if scope == "user" else None
    return Plan(server, hook, files[0], files[1], files[2], state / f"claude-code-{digest}.json", shared, base)


def entry(p: Plan) -> str:
    """The MCP server entry alone, as a file of its own (``tiermem config claude-code -o FILE``): a project's
    ``.mcp.json``, or what goes under ``mcpServers`` in ~/.claude.json."""
    return json.dumps({"mcpServers": {NAME: p.server}}, indent=2)


def show(p: Plan) -> str:
    """What setup would write, file by file (``tiermem config claude-code``)."""
    parts = [
        f"# {p.servers_file}: mcpServers",
        json.dumps({NAME: p.server}, indent=2),
        f"# {p.settings_file}: hooks (added beside any you have)",
        json.dumps(p.hooks(), indent=2),
    ]
    if p.approval_file is not None:
        parts += [f"# {p.approval_file}: enabledMcpjsonServers", json.dumps([NAME])]
    if p.auto_memory is not None and p.home is not None:
        parts += [
            f"# {p.home / '.claude' / 'projects'}/*/memory: Claude Code's auto memory, each project's kept in step "
            f"with tiermem within its project (block files tiermem-*.md and MEMORY.md lines added; recorded in "
            f"{p.auto_memory})"
        ]
    return "\n".join(parts)


@dataclass
class _Edit:
    path: Path
    data: dict[str, Any]
    changed: bool
    what: str
    created: bool = False  # setup created the file (by the record): uninstall may remove it once it is empty
    folder_created: bool = False  # and its folder (.claude): removed too once it is empty


def install(p: Plan, *, force: bool = False) -> list[str]:
    """Write the plan; one line per file saying what changed (or that nothing did). Every file is read and checked
    before any is written, so a broken file, or a ``tiermem`` server of yours (without ``force``), changes nothing."""
    record = _read_record(p)
    files = record.setdefault("files", {})
    for path in (p.servers_file, p.settings_file, p.approval_file):
        if path is not None and str(path) not in files:
            files[str(path)] = {"created": not path.exists(), "folder_created": not path.parent.exists()}
    made = set(record.get("made", []))  # the keys setup added (an emptied one goes on uninstall; yours stay)
    servers = _read(p.servers_file)
    if "mcpServers" not in servers:
        made.add("mcpServers")
    listed = _object(servers, "mcpServers", p.servers_file)
    before = listed.get(NAME)
    ours = before is None or before == record.get("server_wrote") or _setup_server(before)
    if not ours and not force:
        shown = json.dumps({k: before.get(k) for k in ("command", "args")} if isinstance(before, dict) else before)
        raise ConfigError(
            f"{p.servers_file} already has an MCP server `tiermem` that setup did not write ({shown}). "
            "Rename or remove it (`claude mcp remove tiermem`), or run setup with --force to replace it "
            "(--uninstall puts it back). Nothing was changed."
        )
    if not ours:
        record["server_before"] = before  # yours: uninstall puts it back
    listed[NAME] = p.server
    record["server_wrote"] = p.server
    edits = [
        _Edit(
            p.servers_file,
            servers,
            before != p.server,
            "MCP server tiermem "
            + ("added" if before is None else "updated" if ours else "replaced (--force; --uninstall puts yours back)"),
        )
    ]
    settings = _read(p.settings_file)
    if "hooks" not in settings:
        made.add("hooks")
    hooks = _object(settings, "hooks", p.settings_file)
    planned = p.hooks()
    made.update(f"hooks.{event}" for event in planned if event not in hooks)
    changed = put_hooks(hooks, planned, _setup_hook, p.settings_file)  # yours as they were, ours after them
    what = "hooks " + ", ".join(HOOK_EVENTS) + " installed"
    if unpointed := unpoint(settings, record, p.auto_memory):  # an earlier setup's: one folder for every project
        changed, what = True, f"{what}; {unpointed}"
    edits.append(_Edit(p.settings_file, settings, changed, what))
    if p.approval_file is not None:
        local = _read(p.approval_file)
        if "enabledMcpjsonServers" not in local:
            made.add("enabledMcpjsonServers")
        enabled = local.setdefault("enabledMcpjsonServers", [])
        if not isinstance(enabled, list):
            raise ConfigError(
                f"{p.approval_file}: `enabledMcpjsonServers` is not a list; fix the file, then run "
                "setup again. Nothing was changed."
            )
        missing = NAME not in enabled
        if missing:
            enabled.append(NAME)
            record["approval_added"] = True
        edits.append(_Edit(p.approval_file, local, missing, "server tiermem approved for this user"))
    record["made"] = sorted(made)
    _write_record(p, record)  # first: a setup that stops half-way can still be undone
    return [_write(e) for e in edits]


def uninstall(p: Plan) -> list[str]:
    """Remove what ``install`` added (its server entry, its hooks, the approval it added) and put back the server
    entry it replaced; nothing else. A file setup created goes once nothing is left in it."""
    record = _read_record(p)
    known = bool(record)
    files = record.get("files", {})
    added = set(record.get("made", []))  # keys setup added: removed once empty (without a record: kept, empty)

    def made(path: Path) -> dict[str, bool]:
        facts = files.get(str(path), {})
        return {"created": bool(facts.get("created")), "folder_created": bool(facts.get("folder_created"))}

    servers = _read(p.servers_file)
    listed = servers.get("mcpServers")
    current = listed.get(NAME) if isinstance(listed, dict) else None
    ours = current is not None and (current == record.get("server_wrote") or _setup_server(current))
    what = "MCP server tiermem removed"
    if ours and isinstance(listed, dict):
        if record.get("server_before") is not None:
            listed[NAME] = record["server_before"]
            what = "MCP server tiermem: yours put back"
        else:
            del listed[NAME]
            if not listed and "mcpServers" in added:
                del servers["mcpServers"]
    edits = [_Edit(p.servers_file, servers, ours, what, **made(p.servers_file))]
    settings = _read(p.settings_file)
    hooks = settings.get("hooks")
    changed = False
    if isinstance(hooks, dict):
        changed = take_hooks(hooks, _setup_hook, added, "hooks")
        if changed and not hooks and "hooks" in added:
            del settings["hooks"]
    what = "tiermem hooks removed"
    if unpointed := unpoint(settings, record, p.auto_memory):
        changed, what = True, f"{what}; {unpointed}"
    edits.append(_Edit(p.settings_file, settings, changed, what, **made(p.settings_file)))
    lines = []
    if p.approval_file is not None:
        local = _read(p.approval_file)
        enabled = local.get("enabledMcpjsonServers")
        present = isinstance(enabled, list) and NAME in enabled
        approved_by_setup = bool(record.get("approval_added"))
        if present and approved_by_setup and isinstance(enabled, list):
            enabled.remove(NAME)
            if not enabled and "enabledMcpjsonServers" in added:
                del local["enabledMcpjsonServers"]
        elif present and not known:
            lines.append(f"{p.approval_file}: approval of tiermem kept (no record of this setup, so it may be yours)")
        edits.append(
            _Edit(
                p.approval_file,
                local,
                present and approved_by_setup,
                "approval of tiermem removed",
                **made(p.approval_file),
            )
        )
    lines = [_write(e) for e in edits] + lines
    p.record_file.unlink(missing_ok=True)
    return lines


def _object(data: dict[str, Any], key: str, path: Path) -> dict[str, Any]:
    value = data.setdefault(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: `{key}` is not an object; fix the file, then run setup again. Nothing was changed.")
    return value


def _setup_hook(entry: object) -> bool:
    """A hook matcher entry exactly as setup writes it (any installation's tiermem, data directory and agent)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("hooks"), list) or len(entry["hooks"]) != 1:
        return False
    if set(entry) - {"matcher"} != {"hooks"} or entry.get("matcher", SESSION_SOURCES) != SESSION_SOURCES:
        return False
    hook = entry["hooks"][0]
    return (
        isinstance(hook, dict)
        and set(hook) == {"type", "command", "timeout"}
        and hook["type"] == "command"
        and hook["timeout"] == HOOK_TIMEOUT
        and _our_hook_command(str(hook["command"]))
    )


def _our_hook_command(command: str) -> bool:
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    return (
        len(words) == 7
        and os.path.isabs(words[0])
        and os.path.basename(words[0]) == "tiermem"
        and words[1:4] == ["hook", "claude-code", "--data-dir"]
        and words[5] == "--agent"
    )


def _setup_server(entry: object) -> bool:
    """A server entry exactly as setup writes it (any installation's tiermem, data directory, agent and options)."""
    if not isinstance(entry, dict) or set(entry) != {"type", "command", "args", "env", "alwaysLoad"}:
        return False
    args, command = entry["args"], entry["command"]
    return (
        entry["type"] == "stdio"
        and entry["env"] == {}
        and entry["alwaysLoad"] is True
        and isinstance(command, str)
        and os.path.isabs(command)
        and os.path.basename(command) == "tiermem"
        and isinstance(args, list)
        and len(args) >= 5
        and args[:2] == ["serve", "--data-dir"]
        and args[3] == "--agent"
    )


def _read_record(p: Plan) -> dict[str, Any]:
    """What an earlier setup of these files changed ({} when there is no record, or it is unreadable)."""
    try:
        data = json.loads(p.record_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and data.get("servers_file") == str(p.servers_file) else {}


def _write_record(p: Plan, record: dict[str, Any]) -> None:
    record["servers_file"] = str(p.servers_file)
    _replace(p.record_file, record, 0o600)


def _read(path: Path) -> dict[str, Any]:
    """The JSON object in ``path`` ({} when the file is missing or empty): ``hook_setup.read_json``."""
    return read_json(path, "Claude Code")


def _write(edit: _Edit) -> str:
    path, data = edit.path, edit.data
    if not edit.changed:
        return f"{path}: unchanged"
    if not data and edit.created:  # uninstall emptied a file setup had created: no file at all
        path.unlink(missing_ok=True)
        if edit.folder_created and not any(path.parent.iterdir()):
            path.parent.rmdir()
        return f"{path}: {edit.what} (setup had created the file and nothing is left in it, so it was removed)"
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600 if path.name == ".claude.json" else 0o644
    _replace(path, data, mode)
    return f"{path}: {edit.what}"


def _replace(path: Path, data: dict[str, Any], mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, json.dumps(data, indent=2) + "\n", mode=mode, durable=True)


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
    the_plan = plan(
        executable(),
        serve_args,
        data_dir=settings.resolved_data_dir().expanduser().resolve(),
        agent=settings.agent,
        scope=args.scope,
        project=getattr(args, "project_dir", None),
    )
    if dry_run:
        from .hosts import show_or_write

        also = f"the hooks in {the_plan.settings_file}"
        return show_or_write("claude-code", show(the_plan), entry(the_plan), getattr(args, "output", None), also)
    for line in uninstall(the_plan) if args.uninstall else install(the_plan, force=bool(getattr(args, "force", False))):
        print(line)
    if the_plan.auto_memory is not None and the_plan.home is not None:
        if args.uninstall:
            for line in withdraw(the_plan.auto_memory):
                print(line)
        else:
            print(adopt(settings, the_plan.auto_memory, the_plan.home))
    if not args.uninstall:
        print(
            "Start a new Claude Code session: core memory is in context, each prompt and reply is logged, and "
            "relevant memories are added to prompts. Undo with `tiermem setup claude-code --uninstall"
            + (" --scope project`." if args.scope == "project" else "`.")
        )
    return 0
