"""``tiermem setup codex``: register tiermem with Codex CLI and install its hooks; ``--uninstall`` undoes it.

Codex reads ``config.toml`` and ``hooks.json`` from its home (``$CODEX_HOME``, else ``~/.codex``; user scope, the
default) or from a project's ``.codex/`` (``--scope project``; Codex loads it only for a project you trust). Setup
writes:

- ``hooks.json``: one entry in each of ``SessionStart`` (core memory in context), ``UserPromptSubmit`` (the prompt
  logged, relevant memories added: Codex gives them to the model as a developer message) and ``Stop`` (the reply,
  ``last_assistant_message``, logged), each running ``tiermem hook codex``; yours stay first.
- ``config.toml``: a block between ``# >>> tiermem setup`` and ``# <<< tiermem setup`` lines holding
  ``[mcp_servers.tiermem]``, and ``hooks = true`` under ``[features]`` (in your ``features``, marked with a comment,
  when you have one: TOML allows a table once; a ``[features]`` table, dotted ``features.x`` keys at the top or an
  inline ``features = { ... }``: ``_features``).
- the user's ``config.toml`` (both scopes): Codex runs a hook only once the user has trusted it; the trust is the
  hook's hash under ``[hooks.state."<hooks.json>:<event>:<group>:<handler>"]`` (``trusted_hash``, read from user
  config only). Setup writes the trust of its own three hooks (the hash Codex computes of the hook as configured),
  in a block of its own.

``--uninstall`` removes the blocks, its ``features`` line (putting back the one it replaced) and its hook entries,
leaving the file byte for byte as it was (line ends, indentation, a last line without a newline).
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


NO_NEWLINE = " (the file ended without a newline)"  # on the block's first line: uninstall takes the one it added


def _without_block(text: str, tag: str) -> str:
    """``text`` without setup's block and the blank line before it (and the newline setup added to a last line that
    had none): the text as it was before ``_with_block``."""
    pattern = re.compile(rf"\n?# >>> {re.escape(tag)}:([^\n]*)\n.*?# <<< {re.escape(tag)}\n?", re.DOTALL)
    kept, at = [], 0
    for found in pattern.finditer(text):
        before = text[at : found.start()]
        if found.group(1).endswith(NO_NEWLINE) and before.endswith("\n"):
            before = before[:-1]
        kept.append(before)
        at = found.end()
    return "".join(kept) + text[at:]


def _with_block(text: str, block: str) -> str:
    """``text`` as it is, a blank line and ``block`` at its end (``_without_block`` takes exactly these out)."""
    if not text:
        return block + "\n"
    if not text.endswith("\n"):
        first, rest = block.split("\n", 1)
        return text + "\n\n" + first + NO_NEWLINE + "\n" + rest + "\n"
    return text + "\n" + block + "\n"


def _lf(text: str) -> tuple[str, bool]:
    """``text`` with LF line ends, and whether they were all CRLF (then ``_as_written`` puts them back)."""
    if "\r\n" in text and text.count("\r\n") == text.count("\n"):
        return text.replace("\r\n", "\n"), True
    return text, False


def _as_written(text: str, crlf: bool) -> str:
    return text.replace("\n", "\r\n") if crlf else text


_ANY_HEADER = re.compile(r"^\s*\[")  # a table's or an array of tables' header (a key line never starts with [)
_FEATURES_KEY = re.compile(r"""^(\s*)(?:features|"features"|'features')\s*(\.|=)""")
_HOOKS_KEY = re.compile(r"""^(\s*)(?:hooks|"hooks"|'hooks')\s*=""")
_DOTTED_HOOKS_KEY = re.compile(r"""^(\s*)(?:features|"features"|'features')\s*\.\s*(?:hooks|"hooks"|'hooks')\s*=""")
_INLINE = re.compile(r"^(\s*)(features\s*=\s*\{)(.*)\}(\s*(?:#.*)?)$")
_MARKED = re.compile(
    rf"^(?P<indent>[ \t]*)(?:hooks = true|features\.hooks = true|features = \{{.*\}})  {re.escape(FEATURE_MARK)}"
    r"(?: \(was: (?P<was>.*)\))?(?P<cr>\r?)$"
)


def _marked(line: str, new: str) -> str:
    """``new`` in place of ``line`` (its indent and line end kept), marked with what it replaced."""
    body, cr = (line[:-1], "\r") if line.endswith("\r") else (line, "")
    indent = body[: len(body) - len(body.lstrip())]
    return f"{indent}{new}  {FEATURE_MARK} (was: {body[len(indent) :]}){cr}"


def _features(text: str, path: Path) -> tuple[str, bool]:
    """``text`` with ``features.hooks = true`` (marked ``# tiermem setup``), wherever its ``features`` table is: a
    ``[features]`` table, dotted ``features.x`` keys at the top, or an inline ``features = { ... }``; and whether
    ``text`` defines ``features`` at all (else setup's block adds a ``[features]`` table). TOML lets a table be
    defined once, so setup writes into yours. ConfigError for a form it cannot change safely, naming it."""
    parsed = _parse(text, path)
    features = parsed.get("features")
    if features is None:
        return text, False
    if not isinstance(features, dict):
        raise ConfigError(
            f"{path}: `features` is not a table ({type(features).__name__}); Codex reads its feature flags from the "
            "[features] table. Fix it, then run setup again. Nothing was changed."
        )
    if features.get("hooks") is True:
        return text, True  # yours, already on
    lines = text.split("\n")
    top = next((n for n, line in enumerate(lines) if _ANY_HEADER.match(line)), len(lines))
    table = next(
        (n for n, line in enumerate(lines) if (h := _HEADER.match(line)) and h.group(1).strip() == "features"), None
    )
    if table is not None:  # [features]: its hooks line replaced, or one added under the header
        end = next((n for n in range(table + 1, len(lines)) if _ANY_HEADER.match(lines[n])), len(lines))
        at = next((n for n in range(table + 1, end) if _HOOKS_KEY.match(lines[n])), None)
        if at is not None:
            lines[at] = _marked(lines[at], "hooks = true")
        else:
            lines.insert(table + 1, f"hooks = true  {FEATURE_MARK}")
        return _checked(text, "\n".join(lines), path, "[features] table"), True
    dotted = [n for n in range(top) if (k := _FEATURES_KEY.match(lines[n])) and k.group(2) == "."]
    if dotted:  # features.plugins = false, features.hooks = false at the top
        at = next((n for n in dotted if _DOTTED_HOOKS_KEY.match(lines[n])), None)
        if at is not None:
            lines[at] = _marked(lines[at], "features.hooks = true")
        else:
            lines.insert(dotted[-1] + 1, f"features.hooks = true  {FEATURE_MARK}")
        return _checked(text, "\n".join(lines), path, "dotted `features.` keys"), True
    inline = [n for n in range(top) if (k := _FEATURES_KEY.match(lines[n])) and k.group(2) == "="]
    if not inline:
        return text, False  # only [features.x] sub-tables: setup's block adds the [features] table
    found = _INLINE.match(lines[inline[0]].rstrip("\r")) if "hooks" not in features else None
    if found is None:
        raise ConfigError(
            f"{path} sets `features` as an inline table (`features = {{ ... }}`) that setup does not edit (it sets "
            "hooks already, or spans lines). Set `hooks = true` in it yourself (Codex runs hooks only then), or "
            "write it as a [features] table, then run setup again. Nothing was changed."
        )
    inner = found.group(3).strip().rstrip(",").strip()  # features = { plugins = false }: hooks = true added inside
    new = "features = {" + (f" {inner}, hooks = true }}" if inner else " hooks = true }")
    lines[inline[0]] = _marked(lines[inline[0]], new)
    return _checked(text, "\n".join(lines), path, "inline table `features = { ... }`"), True


def _checked(before: str, after: str, path: Path, form: str) -> str:
    """``after``, if it reads as ``before`` with ``features.hooks = true`` and nothing else changed."""
    wanted = _parse(before, path)
    wanted["features"] = {**wanted["features"], "hooks": True}
    try:
        same = tomllib.loads(after) == wanted
    except tomllib.TOMLDecodeError:
        same = False
    if not same:
        raise ConfigError(
            f"{path}: setup could not add `hooks = true` to your features ({form}) without changing something else. "
            "Set `hooks = true` there yourself (Codex runs hooks only then), then run setup again. Nothing was "
            "changed."
        )
    return after


def _without_features(text: str) -> str:
    """``text`` without setup's ``features`` line: an added one removed, a replaced one put back as it was."""
    out = []
    for line in text.split("\n"):
        found = _MARKED.match(line)
        if found:
            if found.group("was") is not None:
                out.append(found.group("indent") + found.group("was") + found.group("cr"))
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
    """The file's text exactly as it is (line ends included: what uninstall puts back is byte for byte)."""
    try:
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise ConfigError(f"Cannot read {path}: {exc}.") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path} is not UTF-8 text (byte {exc.start}); TOML files are UTF-8 (Codex cannot read it either). Fix "
            "it, then run setup again. Nothing was changed."
        ) from exc


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

    written = _read(p.config_file)
    current, crlf = _lf(written)
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
    with_features, has_table = _features(bare, p.config_file)
    lines = _server_lines(p.server) + ([] if has_table else ["", "[features]", "hooks = true"])
    trust = _trust_lines(p, hooks)
    same_file = p.user_config == p.config_file
    new = _with_block(with_features, _block(p.tag, lines + ([""] + trust if same_file else [])))
    parsed = _parse(new, p.config_file)
    if parsed.get("mcp_servers", {}).get("tiermem") != p.server or parsed.get("features", {}).get("hooks") is not True:
        raise ConfigError(f"{p.config_file}: setup's entries would not read back as written. Nothing was changed.")
    writes = [hs.Write(p.hooks_file, json.dumps(hooks_data, indent=2) + "\n", hooked, "hooks installed")]
    new = _as_written(new, crlf)
    writes.append(hs.Write(p.config_file, new, new != written, "MCP server tiermem and features.hooks", mode=0o600))
    if not same_file:
        user_written = _read(p.user_config)
        user, user_crlf = _lf(user_written)
        trusted = _with_block(_without_block(user, p.tag), _block(p.tag, trust))
        _parse(trusted, p.user_config)
        trusted = _as_written(trusted, user_crlf)
        writes.append(hs.Write(p.user_config, trusted, trusted != user_written, "the hooks trusted", mode=0o600))
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
        written = _read(path)
        current, crlf = _lf(written)
        bare = _bare(current, p)
        yours = record.data.get("server_before_text")
        if path == p.config_file and yours and bare != current:  # the table setup replaced (--force), put back
            bare = _with_block(bare, yours)
        bare = _as_written(bare, crlf)
        created, folder = record.created(path)
        if bare != written and created and not bare.strip():
            writes.append(hs.Write(path, None, True, "setup's block removed", folder))
        else:
            writes.append(hs.Write(path, bare, bare != written, "setup's block removed"))
    lines = hs.apply(writes)
    record.forget()
    return lines
