"""``tiermem setup codex``: register tiermem with Codex CLI and install its hooks; ``--uninstall`` undoes it.

Codex reads ``config.toml`` and ``hooks.json`` from its home (``$CODEX_HOME``, else ``~/.codex``; user scope, the
default) or from a project's ``.codex/`` (``--scope project``; Codex loads it only for a project you trust). Setup
writes:

- ``hooks.json``: one entry in each of ``SessionStart`` (core memory in context), ``UserPromptSubmit`` (the prompt
  logged, relevant memories added: Codex gives them to the model as a developer message) and ``Stop`` (the reply,
  ``last_assistant_message``, logged), each running ``tiermem hook codex``; yours stay first.
- ``config.toml``: a block between ``# >>> tiermem setup`` and ``# <<< tiermem setup`` lines holding
  ``[mcp_servers.tiermem]``, and ``hooks = true`` under ``[features]`` (in your ``[features]`` table, marked with a
  comment, when you have one: TOML allows a table once).
- the user's ``config.toml`` (both scopes): Codex runs a hook only once the user has trusted it; the trust is the
  hook's hash under ``[hooks.state."<hooks.json>:<event>:<group>:<handler>"]`` (``trusted_hash``, read from user
  config only). Setup writes the trust of its own three hooks (the hash Codex computes of the hook as configured),
  in a block of its own.

``--uninstall`` removes the blocks, its ``features`` line (putting back the one it replaced) and its hook entries.
A ``[mcp_servers.tiermem]`` of yours (written by hand, or from an earlier ``tiermem config codex``) is replaced only
with ``--force`` and put back by ``--uninstall``. Shared rules: ``hook_setup.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base.errors import ConfigError
from . import hook_setup as hs

TITLE = "Codex"
HOST = "codex"
EVENTS = {"SessionStart": "session_start", "UserPromptSubmit": "user_prompt_submit", "Stop": "stop"}
TIMEOUT = 60  # seconds
FEATURE_MARK = "# tiermem setup"
_HEADER = re.compile(r"^\s*\[([^\[\]]+)\]\s*(#.*)?$")


@dataclass(frozen=True)
class Plan:
    server: dict[str, Any]
    hook: str
    config_file: Path  # where the server goes: ~/.codex/config.toml or <project>/.codex/config.toml
    hooks_file: Path  # beside it
    user_config: Path  # where the trust goes (the same file at user scope)
    record_file: Path

    @property
    def tag(self) -> str:
        return f"tiermem setup ({self.hooks_file})"

    def hooks(self) -> dict[str, list[dict[str, Any]]]:
        entry = {"type": "command", "command": self.hook, "timeout": TIMEOUT}
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
    base = home if home is not None else Path.home()
    command = hs.serve_command(executable, data_dir, agent, serve_args)
    server = {"command": command[0], "args": command[1:], "startup_timeout_sec": 30, "required": True}
    env_home = os.environ.get("CODEX_HOME")  # Codex canonicalises it (the hooks' trust keys hold the path it uses)
    codex_home = Path(env_home).resolve() if env_home else base / ".codex"
    folder = codex_home if scope == "user" else (project or Path.cwd()).resolve() / ".codex"
    hook = hs.hook_command(executable, HOST, data_dir, agent)
    config = folder / "config.toml"
    return Plan(
        server, hook, config, folder / "hooks.json", codex_home / "config.toml", hs.record_file(base, HOST, config)
    )


def trusted_hash(event: str, entry: dict[str, Any]) -> str:
    """The hash Codex gives a command hook (``hooks/src/engine/discovery.rs``: the normalised hook, as canonical
    JSON with sorted keys, SHA-256), which ``trusted_hash`` must equal for the hook to run."""
    handler = entry["hooks"][0]
    identity: dict[str, Any] = {
        "event_name": EVENTS[event],
        "hooks": [{"type": "command", "command": handler["command"], "timeout": handler["timeout"], "async": False}],
    }
    if entry.get("matcher") is not None:
        identity["matcher"] = entry["matcher"]
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)  # a TOML basic string


def _server_lines(server: dict[str, Any]) -> list[str]:
    return ["[mcp_servers.tiermem]", *(f"{k} = {_toml(v)}" for k, v in server.items())]


def _trust_lines(p: Plan, hooks: dict[str, Any]) -> list[str]:
    lines = []
    for event in EVENTS:
        for group, entry in enumerate(hooks.get(event, [])):
            if _our_hook(entry):
                key = f"{p.hooks_file}:{EVENTS[event]}:{group}:0"
                lines += [f"[hooks.state.{_toml(key)}]", f"trusted_hash = {_toml(trusted_hash(event, entry))}"]
    return lines


def _block(tag: str, lines: list[str]) -> str:
    return "\n".join([f"# >>> {tag}: `tiermem setup codex --uninstall` removes this block", *lines, f"# <<< {tag}"])


def _without_block(text: str, tag: str) -> str:
    pattern = re.compile(rf"\n?# >>> {re.escape(tag)}:[^\n]*\n.*?# <<< {re.escape(tag)}\n?", re.DOTALL)
    return pattern.sub("\n", text).rstrip("\n") + ("\n" if text.strip() else "")


def _with_block(text: str, block: str) -> str:
    body = text.rstrip("\n")
    return (body + "\n\n" if body else "") + block + "\n"


def _features(text: str) -> tuple[str, bool]:
    """``text`` with ``hooks = true`` in its ``[features]`` table (marked); whether it has such a table at all."""
    lines = text.split("\n")
    table = None
    for n, line in enumerate(lines):
        header = _HEADER.match(line)
        if header:
            if table is not None:
                break
            if header.group(1).strip() == "features":
                table = n
            continue
        if table is not None and re.match(r"^\s*hooks\s*=", line):
            if re.match(r"^\s*hooks\s*=\s*true\s*(#.*)?$", line):
                return text, True  # yours, already on
            lines[n] = f"hooks = true  {FEATURE_MARK} (was: {line.strip()})"
            return "\n".join(lines), True
    if table is None:
        return text, False
    lines.insert(table + 1, f"hooks = true  {FEATURE_MARK}")
    return "\n".join(lines), True


def _without_features(text: str) -> str:
    out = []
    for line in text.split("\n"):
        found = re.match(rf"^hooks = true  {re.escape(FEATURE_MARK)}(?: \(was: (.*)\))?$", line)
        if found:
            if found.group(1):
                out.append(found.group(1))
            continue
        out.append(line)
    return "\n".join(out)


def _parse(text: str, path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"{path} is not valid TOML ({exc}); fix it (Codex cannot read it either), then run setup again. "
            "Nothing was changed."
        ) from exc


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise ConfigError(f"Cannot read {path}: {exc}.") from exc


def _our_hook(entry: object) -> bool:
    if not isinstance(entry, dict) or set(entry) != {"hooks"} or not isinstance(entry["hooks"], list):
        return False
    handlers = entry["hooks"]
    return (
        len(handlers) == 1
        and isinstance(handlers[0], dict)
        and set(handlers[0]) == {"type", "command", "timeout"}
        and handlers[0]["type"] == "command"
        and handlers[0]["timeout"] == TIMEOUT
        and hs.our_hook_command(handlers[0]["command"], HOST)
    )


def _bare(text: str, p: Plan) -> str:
    """``text`` as it was before setup: its blocks and its ``features`` line taken out."""
    return _without_features(_without_block(text, p.tag))


def entry(p: Plan) -> str:
    """The ``[mcp_servers.tiermem]`` table alone (``tiermem config codex -o FILE``), without setup's markers."""
    return "\n".join(_server_lines(p.server))


def also(p: Plan) -> str:
    """What setup writes besides the server entry (``tiermem config codex -o FILE`` says so)."""
    return f"features.hooks, the hooks in {p.hooks_file} and their trust in {p.user_config}"


def show(p: Plan) -> str:
    parts = [f"# {p.config_file}", _block(p.tag, [*_server_lines(p.server), "", "[features]", "hooks = true"])]
    parts += [f"# {p.hooks_file}: hooks (added after any you have)", json.dumps({"hooks": p.hooks()}, indent=2)]
    parts += [f"# {p.user_config}: the hooks' trust (written once the hooks are in place: positions count)"]
    parts += [_block(p.tag, _trust_lines(p, p.hooks()))]
    return "\n".join(parts)


def install(p: Plan, *, force: bool = False) -> list[str]:
    record = hs.Record.load(p.record_file)
    record.note_files(p.config_file, p.hooks_file, p.user_config)
    hooks_data = hs.read_json(p.hooks_file, TITLE)
    hooks = hs.child(hooks_data, "hooks", p.hooks_file, record)
    for event in EVENTS:
        if event not in hooks:
            record.add_made(f"{p.hooks_file}:hooks.{event}")
    hooked = hs.put_hooks(hooks, p.hooks(), _our_hook, p.hooks_file)

    current = _read(p.config_file)
    bare = _bare(current, p)
    if "tiermem" in _parse(bare, p.config_file).get("mcp_servers", {}):
        yours, bare = _take_table(bare)
        if not force or not yours or "tiermem" in _parse(bare, p.config_file).get("mcp_servers", {}):
            raise ConfigError(
                f"{p.config_file} already has [mcp_servers.tiermem], which setup did not write. Rename or remove it "
                "(`codex mcp remove tiermem`), or run setup with --force to replace it (--uninstall puts it back). "
                "Nothing was changed."
            )
        record.data["server_before_text"] = yours
    with_features, has_table = _features(bare)
    lines = _server_lines(p.server) + ([] if has_table else ["", "[features]", "hooks = true"])
    trust = _trust_lines(p, hooks)
    same_file = p.user_config == p.config_file
    new = _with_block(with_features, _block(p.tag, lines + ([""] + trust if same_file else [])))
    parsed = _parse(new, p.config_file)
    if parsed.get("mcp_servers", {}).get("tiermem") != p.server or parsed.get("features", {}).get("hooks") is not True:
        raise ConfigError(f"{p.config_file}: setup's entries would not read back as written. Nothing was changed.")
    writes = [hs.Write(p.hooks_file, json.dumps(hooks_data, indent=2) + "\n", hooked, "hooks installed")]
    writes.append(hs.Write(p.config_file, new, new != current, "MCP server tiermem and features.hooks", mode=0o600))
    if not same_file:
        user = _read(p.user_config)
        trusted = _with_block(_without_block(user, p.tag), _block(p.tag, trust))
        _parse(trusted, p.user_config)
        writes.append(hs.Write(p.user_config, trusted, trusted != user, "the hooks trusted", mode=0o600))
    record.save()
    lines = hs.apply(writes)
    if not same_file and not _trusted(_parse(_read(p.user_config), p.user_config), p.config_file.parent.parent):
        root = p.config_file.parent.parent
        lines.append(
            f"Note: Codex loads {p.config_file.parent} only in a project you trust (measured: otherwise neither the "
            f"server nor the hooks load). Run `codex` in {root} once and trust it, or add "
            f'[projects.{_toml(str(root))}] trust_level = "trusted" to {p.user_config}.'
        )
    return lines


def _take_table(text: str) -> tuple[str, str]:
    """(the ``[mcp_servers.tiermem]`` table and its sub-tables as written, ``text`` without them)."""
    taken: list[str] = []
    kept: list[str] = []
    inside = False
    lines = text.split("\n")
    for line in lines:
        header = _HEADER.match(line)
        if header:
            name = header.group(1).strip().replace('"', "")
            inside = name == "mcp_servers.tiermem" or name.startswith("mcp_servers.tiermem.")
        (taken if inside else kept).append(line)
    return "\n".join(taken).strip("\n"), "\n".join(kept)


def _trusted(user: dict[str, Any], root: Path) -> bool:
    projects = user.get("projects", {})
    return any(
        isinstance(entry, dict)
        and entry.get("trust_level") == "trusted"
        and (root == Path(path) or Path(path) in root.parents)
        for path, entry in projects.items()
    )


def uninstall(p: Plan) -> list[str]:
    record = hs.Record.load(p.record_file)
    writes = []
    hooks_data = hs.read_json(p.hooks_file, TITLE)
    hooks = hooks_data.get("hooks")
    made = {k.removeprefix(f"{p.hooks_file}:") for k in record.made}
    unhooked = isinstance(hooks, dict) and hs.take_hooks(hooks, _our_hook, made, "hooks")
    hs.drop_if_made(hooks_data, "hooks", p.hooks_file, record)
    writes.append(hs.json_write(p.hooks_file, hooks_data, unhooked, "tiermem hooks removed", record, empty_goes=True))
    for path in dict.fromkeys([p.config_file, p.user_config]):
        current = _read(path)
        bare = _bare(current, p)
        yours = record.data.get("server_before_text")
        if path == p.config_file and yours and bare != current:  # the table setup replaced (--force), put back
            bare = _with_block(bare, yours)
        created, folder = record.created(path)
        if bare != current and created and not bare.strip():
            writes.append(hs.Write(path, None, True, "setup's block removed", folder))
        else:
            writes.append(hs.Write(path, bare, bare != current, "setup's block removed"))
    lines = hs.apply(writes)
    record.forget()
    return lines
