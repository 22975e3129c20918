"""``tiermem setup opencode``: register tiermem with opencode and install its plugin; ``--uninstall`` undoes it.

User scope (the default): ``mcp.tiermem`` in ``$XDG_CONFIG_HOME/opencode/opencode.json`` and the plugin
``$XDG_CONFIG_HOME/opencode/plugin/tiermem.js``; project scope: the project's ``opencode.json`` and
``.opencode/plugin/tiermem.js``. opencode has no command hooks; its plugins are JavaScript modules it loads from
those folders. The plugin setup writes is a thin adapter that runs ``tiermem hook opencode`` (the client every host
uses: it asks the running server over its socket and fails soft) at the moments the other hosts have hooks for:

- ``experimental.chat.system.transform`` (every model request): core memory, asked once per session, and the
  memories relevant to the session's latest prompt (kept by ``chat.message``; asked once per prompt, which logs it),
  added to the system prompt of each request. ``chat.message`` itself is too early to ask: opencode starts its MCP
  servers after it (measured: no server is listening yet when it runs for a session's first prompt).
- ``experimental.text.complete`` (a text part of the model's reply is complete; opencode waits for the plugin): the
  text logged as the reply. The ``session.idle`` event is too late: ``opencode run`` is already stopping its MCP
  servers when it reaches the plugin (measured). So a text the model writes before a tool call in the same turn is
  logged as a reply too.

The plugin file carries a first line that marks it as setup's; a ``tiermem.js`` without it (yours) is refused unless
``--force`` (kept by the record and put back by ``--uninstall``). Shared rules: ``hook_setup.py``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base.errors import ConfigError
from . import hook_setup as hs

TITLE = "opencode"
HOST = "opencode"
MARK = "// tiermem setup: written by `tiermem setup opencode`; `tiermem setup opencode --uninstall` removes it."
TIMEOUT_MS = 60_000

PLUGIN = """%(mark)s
// Memory that works on its own: core memory in the system prompt, each prompt and reply logged to tiermem, and the
// memories relevant to a prompt added to it. Each step runs `tiermem hook opencode` (JSON in, JSON out), which asks
// the tiermem server opencode runs and fails soft: without an answer the prompt goes through unchanged.
import { spawn } from "node:child_process";

const HOOK = %(hook)s;
const TIMEOUT_MS = %(timeout)d;

function ask(input) {
  return new Promise((resolve) => {
    let out = "";
    let child;
    try {
      child = spawn(HOOK[0], HOOK.slice(1), { stdio: ["pipe", "pipe", "ignore"] });
    } catch {
      resolve("");
      return;
    }
    const timer = setTimeout(() => child.kill(), TIMEOUT_MS);
    child.stdout.on("data", (chunk) => (out += chunk));
    child.on("error", () => resolve(""));
    child.on("close", () => {
      clearTimeout(timer);
      try {
        resolve(JSON.parse(out).hookSpecificOutput.additionalContext || "");
      } catch {
        resolve("");
      }
    });
    child.stdin.on("error", () => {});
    child.stdin.end(JSON.stringify(input));
  });
}

export const TiermemMemory = async ({ directory }) => {
  const core = new Map(); // session -> its core memory (a promise), asked once per session
  const prompts = new Map(); // session -> its latest prompt, and the memories found for it (a promise, asked once)
  return {
    "chat.message": async (input, output) => {
      const prompt = output.parts
        .filter((p) => p.type === "text" && !p.synthetic)
        .map((p) => p.text)
        .join("\\n");
      if (prompt.trim()) prompts.set(input.sessionID, { id: output.message.id, prompt, context: null });
    },
    "experimental.chat.system.transform": async (input, output) => {
      const session = input.sessionID;
      if (!session) return;
      if (!core.has(session)) {
        core.set(session, ask({ hook_event_name: "SessionStart", source: "startup", session_id: session, cwd: directory }));
      }
      const turn = prompts.get(session);
      if (turn && !turn.context) {
        turn.context = ask({
          hook_event_name: "UserPromptSubmit",
          session_id: session,
          prompt_id: turn.id,
          prompt: turn.prompt,
          cwd: directory,
        });
      }
      for (const context of [await core.get(session), turn ? await turn.context : ""]) {
        if (context) output.system.push(context);
      }
    },
    "experimental.text.complete": async (input, output) => {
      if (!output.text || !output.text.trim()) return;
      await ask({
        hook_event_name: "Stop",
        session_id: input.sessionID,
        prompt_id: input.partID,
        last_assistant_message: output.text,
        cwd: directory,
      });
    },
  };
};
"""


@dataclass(frozen=True)
class Plan:
    server: dict[str, Any]
    hook: str
    config_file: Path
    plugin_file: Path
    record_file: Path

    def plugin(self) -> str:
        import shlex

        return PLUGIN % {"mark": MARK, "hook": json.dumps(shlex.split(self.hook)), "timeout": TIMEOUT_MS}


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
    base = home if home is not None else Path.home()
    server = {"type": "local", "command": hs.serve_command(executable, data_dir, agent, serve_args), "enabled": True}
    if scope == "user":
        folder = Path(os.environ.get("XDG_CONFIG_HOME") or base / ".config") / "opencode"
        config, plugin = folder / "opencode.json", folder / "plugin" / "tiermem.js"
    else:
        root = (project or Path.cwd()).resolve()
        config, plugin = root / "opencode.json", root / ".opencode" / "plugin" / "tiermem.js"
    hook = hs.hook_command(executable, HOST, data_dir, agent)
    return Plan(server, hook, config, plugin, hs.record_file(base, HOST, config))


def entry(p: Plan) -> str:
    """The ``mcp`` entry alone (``tiermem config opencode -o FILE``)."""
    return json.dumps({"mcp": {hs.NAME: p.server}}, indent=2)


def also(p: Plan) -> str:
    """What setup writes besides the server entry (``tiermem config opencode -o FILE`` says so)."""
    return f"the plugin {p.plugin_file}"


def show(p: Plan) -> str:
    return "\n".join(
        [
            f"# {p.config_file}: mcp (merged)",
            json.dumps({"mcp": {hs.NAME: p.server}}, indent=2),
            f"# {p.plugin_file}: the plugin",
            p.plugin(),
        ]
    )


def _our_server(entry: object) -> bool:
    return (
        isinstance(entry, dict)
        and set(entry) == {"type", "command", "enabled"}
        and entry["type"] == "local"
        and hs.our_serve_command(entry["command"])
    )


def _plugin_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"Cannot read {path}: {exc}.") from exc


def install(p: Plan, *, force: bool = False) -> list[str]:
    jsonc = p.config_file.with_suffix(".jsonc")
    if jsonc.exists() and not p.config_file.exists():
        raise ConfigError(
            f"Your opencode configuration is {jsonc} (JSON with comments), which setup does not edit; add the "
            f"`mcp` entry `tiermem config opencode` prints to it, or rename it to {p.config_file.name}. "
            "Nothing was changed."
        )
    record = hs.Record.load(p.record_file)
    record.note_files(p.config_file, p.plugin_file)
    data = hs.read_json(p.config_file, TITLE)
    servers = hs.child(data, "mcp", p.config_file, record)
    plugin = p.plugin()
    current = _plugin_text(p.plugin_file)
    theirs = current is not None and not current.startswith(MARK)
    if theirs and not force:
        raise ConfigError(
            f"{p.plugin_file} exists and setup did not write it. Rename it, or run setup with --force to replace "
            "it (--uninstall puts it back). Nothing was changed."
        )
    changed, what = hs.put_server(
        servers, p.server, record, _our_server, path=p.config_file, force=force, how_to_remove="edit the file"
    )
    if theirs:
        record.data["plugin_before"] = current
    record.save()
    writes = [
        hs.json_write(p.config_file, data, changed, what, record, empty_goes=False),
        hs.Write(
            p.plugin_file, plugin, current != plugin, "plugin installed" + (" (yours replaced)" if theirs else "")
        ),
    ]
    return hs.apply(writes)


def uninstall(p: Plan) -> list[str]:
    record = hs.Record.load(p.record_file)
    data = hs.read_json(p.config_file, TITLE)
    servers = data.get("mcp")
    changed, what = hs.take_server(servers, record, _our_server) if isinstance(servers, dict) else (False, "")
    hs.drop_if_made(data, "mcp", p.config_file, record)
    writes = []  # the plugin first: its folder may be in the config file's, which goes once empty
    current = _plugin_text(p.plugin_file)
    if current is not None and current.startswith(MARK):
        before = record.data.get("plugin_before")
        _, folder = record.created(p.plugin_file)
        writes.append(
            hs.Write(p.plugin_file, before, True, "your plugin put back" if before else "plugin removed", folder)
            if before
            else hs.Write(p.plugin_file, None, True, "plugin removed", folder)
        )
    writes.append(hs.json_write(p.config_file, data, changed, what, record, empty_goes=True))
    lines = hs.apply(writes)
    record.forget()
    return lines
