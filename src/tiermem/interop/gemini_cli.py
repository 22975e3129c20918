"""``tiermem setup gemini``: register tiermem with Gemini CLI and install its hooks; ``--uninstall`` undoes it.

One file: ``~/.gemini/settings.json`` (user scope, the default) or a project's ``.gemini/settings.json``
(``--scope project``). Setup adds ``mcpServers.tiermem`` (``trust: true``: ``gemini -p`` offers a server's tools only
when it is trusted) and one entry in each of ``hooks.SessionStart`` (core memory: Gemini puts it before the first
prompt), ``hooks.BeforeAgent`` (the prompt logged, relevant memories added to it) and ``hooks.AfterAgent`` (the
reply, ``prompt_response``, logged), each running ``tiermem hook gemini``. Gemini runs hooks with JSON on stdin and
reads JSON on stdout (the hook prints JSON or nothing). Shared rules: ``hook_setup.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import hook_setup as hs

TITLE = "Gemini CLI"
HOST = "gemini"
EVENTS = ("SessionStart", "BeforeAgent", "AfterAgent")
TIMEOUT_MS = 60_000  # the first prompt of a session may wait for the embedding model


@dataclass(frozen=True)
class Plan:
    server: dict[str, Any]
    hook: str
    settings_file: Path
    record_file: Path

    def hooks(self) -> dict[str, list[dict[str, Any]]]:
        entry = {"name": "tiermem", "type": "command", "command": self.hook, "timeout": TIMEOUT_MS}
        return {event: [{"hooks": [entry]}] for event in EVENTS}


def plan(
    executable: str,
    serve_args: list[str],
    *,
    data_dir: Path,
    agent: str,
    scope: str,
    home: Path | None = None,
    project: Path | None = None,
) -> Plan:
    command = hs.serve_command(executable, data_dir, agent, serve_args)
    server = {"command": command[0], "args": command[1:], "timeout": 30000, "trust": True}
    base = home if home is not None else Path.home()
    root = base if scope == "user" else (project or Path.cwd()).resolve()
    settings = root / ".gemini" / "settings.json"
    return Plan(
        server, hs.hook_command(executable, HOST, data_dir, agent), settings, hs.record_file(base, HOST, settings)
    )


def entry(p: Plan) -> str:
    """The ``mcpServers`` entry alone (``tiermem config gemini -o FILE``)."""
    return json.dumps({"mcpServers": {hs.NAME: p.server}}, indent=2)


def also(p: Plan) -> str:
    """What setup writes besides the server entry (``tiermem config gemini -o FILE`` says so)."""
    return f"the hooks in {p.settings_file}"


def show(p: Plan) -> str:
    return "\n".join(
        [
            f"# {p.settings_file}: mcpServers and hooks (merged; hooks added beside any you have)",
            json.dumps({"mcpServers": {hs.NAME: p.server}, "hooks": p.hooks()}, indent=2),
        ]
    )


def _our_server(entry: object) -> bool:
    return (
        isinstance(entry, dict)
        and set(entry) == {"command", "args", "timeout", "trust"}
        and hs.our_serve_command([entry["command"], *(entry["args"] if isinstance(entry["args"], list) else [None])])
    )


def _our_hook(entry: object) -> bool:
    if not isinstance(entry, dict) or set(entry) != {"hooks"} or not isinstance(entry["hooks"], list):
        return False
    handlers = entry["hooks"]
    return (
        len(handlers) == 1
        and isinstance(handlers[0], dict)
        and set(handlers[0]) == {"name", "type", "command", "timeout"}
        and handlers[0]["type"] == "command"
        and hs.our_hook_command(handlers[0]["command"], HOST)
    )


def install(p: Plan, *, force: bool = False) -> list[str]:
    record = hs.Record.load(p.record_file)
    record.note_files(p.settings_file)
    path = p.settings_file
    data = hs.read_json(path, TITLE)
    servers = hs.child(data, "mcpServers", path, record)
    changed, what = hs.put_server(
        servers, p.server, record, _our_server, path=path, force=force, how_to_remove="`gemini mcp remove tiermem`"
    )
    hooks = hs.child(data, "hooks", path, record)
    for event in EVENTS:
        if event not in hooks:
            record.add_made(f"{path}:hooks.{event}")
    hooked = hs.put_hooks(hooks, p.hooks(), _our_hook, path)
    record.save()
    what = f"{what}; hooks {', '.join(EVENTS)} installed" if hooked else what
    return hs.apply([hs.json_write(path, data, changed or hooked, what, record, empty_goes=False)])


def uninstall(p: Plan) -> list[str]:
    record = hs.Record.load(p.record_file)
    path = p.settings_file
    data = hs.read_json(path, TITLE)
    servers = data.get("mcpServers")
    changed, what = hs.take_server(servers, record, _our_server) if isinstance(servers, dict) else (False, "")
    hooks = data.get("hooks")
    made = {k.removeprefix(f"{path}:") for k in record.made}
    unhooked = isinstance(hooks, dict) and hs.take_hooks(hooks, _our_hook, made, "hooks")
    for key in ("mcpServers", "hooks"):
        hs.drop_if_made(data, key, path, record)
    what = "; ".join(w for w in (what if changed else "", "tiermem hooks removed" if unhooked else "") if w)
    lines = hs.apply([hs.json_write(path, data, changed or unhooked, what, record, empty_goes=True)])
    record.forget()
    return lines
