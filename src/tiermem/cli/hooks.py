"""``tiermem hook HOST``: the command a host runs for its hooks (``tiermem setup HOST`` installs it).

Hosts: ``claude-code``; ``codex`` (Codex CLI: the same events and fields as Claude Code, its ``turn_id`` names the
turn); ``gemini`` (Gemini CLI: ``BeforeAgent`` is the prompt, ``AfterAgent`` the reply in ``prompt_response``, and a
prompt starts with the ``<hook_context>`` Gemini prepended from the session hook, which is cut off); ``opencode``
(the plugin setup installs sends Claude Code's events and fields). Every host gets the same output.

It reads the hook's input (JSON on stdin: ``hook_event_name``, ``session_id``, ``prompt`` ...), asks the ``tiermem
serve`` that serves the same memory (found through ``rendezvous.py``: normally the one this Claude Code session
started) and prints what Claude Code adds to the model's context:
``{"hookSpecificOutput": {"hookEventName": ..., "additionalContext": ...}}``, or nothing.

It fails soft: when no server answers (Claude Code is not running tiermem, the server is still starting and does not
come up in time, a request fails), it prints nothing and exits 0, so the prompt goes through unchanged, and says why
on stderr and in ``$XDG_STATE_HOME/tiermem/hooks.log``. It imports only the standard library and ``rendezvous``:
Python starts, one request goes over a local socket, and the server does the work with what it has open.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from ..base.errors import ConfigError
from ..base.rendezvous import MAX_REQUEST, candidates, memory_key, private_dir, runtime_dirs, starting_server

EVENTS_WITH_CONTEXT = ("SessionStart", "UserPromptSubmit")
START_WAIT = 8.0  # seconds a hook waits for a server that is starting to open its socket
ANSWER_TIMEOUT = 50.0  # seconds for an answer (the first prompt of a session may wait for the model to load)
LOG_BYTES = 1 << 20  # hooks.log is started again past this size (the previous one kept as hooks.log.1)


class Unavailable(Exception):
    """No server answered; the message says why."""


def run_hook(args: Any) -> int:
    """``tiermem hook HOST``: always exits 0 (a failing memory hook must never block or alter the prompt)."""
    return run(args.data_dir, args.agent, args.config, host=args.host)


def run(
    data_dir: str | os.PathLike[str] | None,
    agent: str | None,
    config: str | os.PathLike[str] | None = None,
    stdin: Any = None,
    host: str = "claude-code",
) -> int:
    """The hook, reading its input from ``stdin`` (default: the process's)."""
    try:
        raw = (stdin or sys.stdin).read()
        data = json.loads(raw or "{}")
        if not isinstance(data, dict):
            raise ValueError("the hook input is not a JSON object")
    except (OSError, ValueError) as exc:
        _note(f"unreadable hook input: {exc}")
        return 0
    named = str(data.get("hook_event_name") or "")  # the host's name for it: the output names it so
    event, data = adapt(host, named, data)
    if event == "Stop" and not data.get("last_assistant_message") and host == "claude-code":
        data["last_assistant_message"] = _last_reply(data.get("transcript_path"))  # hosts older than the field
    try:
        key = memory_key(*_memory_of(data_dir, agent, config))
        request = {"v": 1, "key": key, "event": event, "input": data, "host": host}
        size = len(json.dumps(request).encode())
        if size > MAX_REQUEST:
            _note(
                f"{event}: the hook input is {size:,} bytes, over the {MAX_REQUEST:,} a hook request may be: it "
                "is neither logged nor searched; the prompt goes through unchanged"
            )
            return 0
        answer = ask(key, request, wait=START_WAIT)
    except Unavailable as exc:
        _note(f"{event or 'hook'}: {exc}; the prompt goes through unchanged")
        return 0
    except Exception as exc:  # noqa: BLE001 - whatever went wrong, the prompt must go through unchanged
        _note(f"{event or 'hook'}: failed ({type(exc).__name__}: {exc}); the prompt goes through unchanged")
        return 0
    if not answer.get("ok"):
        _note(f"{event}: the server could not answer: {answer.get('error')}")
        return 0
    context = answer.get("context") or ""
    if context and event in EVENTS_WITH_CONTEXT:
        sys.stdout.write(json.dumps({"hookSpecificOutput": {"hookEventName": named, "additionalContext": context}}))
        sys.stdout.flush()
    return 0


GEMINI_EVENTS = {"BeforeAgent": "UserPromptSubmit", "AfterAgent": "Stop"}
GEMINI_CONTEXT = re.compile(r"\A\s*<hook_context>.*?</hook_context>\s*", re.DOTALL)


def adapt(host: str, event: str, data: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A host's hook input as Claude Code's event and fields (what the server reads). A transcript of a host other
    than Claude Code is not read (its format differs): the turn is named by the host's turn id where it has one."""
    if host == "claude-code":
        return event, data
    data = {k: v for k, v in data.items() if k != "transcript_path"}
    if host == "codex" and isinstance(data.get("turn_id"), str):
        data["prompt_id"] = data["turn_id"]  # the prompt and its reply share it
    if host == "gemini":
        event = GEMINI_EVENTS.get(event, event)
        if isinstance(data.get("prompt"), str):  # Gemini puts the session hook's context before the first prompt
            data["prompt"] = GEMINI_CONTEXT.sub("", data["prompt"], count=1)
        if event == "Stop":
            data["last_assistant_message"] = data.get("prompt_response") or ""
    return event, data


def ask(key: str, request: dict[str, Any], *, wait: float) -> dict[str, Any]:
    """Send ``request`` to a live server of ``key``; its answer. Waits up to ``wait`` s for one that is starting."""
    deadline = time.monotonic() + wait
    tried: list[str] = []
    why = ""
    while True:
        directories: list[Path | None] = []
        paths: list[Path] = []
        whys = []
        for place in runtime_dirs():
            try:
                directory = private_dir(create=False, path=place)
            except ConfigError as exc:
                whys.append(str(exc))
                continue
            directories.append(directory)
            paths += candidates(directory, key)
        why = whys[0] if whys and not directories else ""
        for path in paths:
            try:
                return _exchange(path, request)
            except OSError as exc:
                tried.append(f"{path.name}: {exc}")
        # a server that listens in one of the directories is not starting
        if time.monotonic() >= deadline or not all(starting_server(d) for d in (directories or [None])):
            break
        time.sleep(0.05)
    if tried:
        raise Unavailable("no tiermem server answered (" + "; ".join(tried[-3:]) + ")")
    raise Unavailable(
        "no tiermem server is running for this memory (is tiermem registered with this host? "
        f"`tiermem setup HOST`){': ' + why if why else ''}"
    )


def _exchange(path: Path, request: dict[str, Any]) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(ANSWER_TIMEOUT)
        sock.connect(os.fspath(path))
        sock.sendall(json.dumps(request).encode() + b"\n")
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
            if chunk.endswith(b"\n"):
                break
    answer = json.loads(b"".join(chunks) or b"{}")
    if not isinstance(answer, dict):
        raise OSError("the server's answer is not a JSON object")
    return answer


def _memory_of(
    data_dir: str | os.PathLike[str] | None, agent: str | None, config: str | os.PathLike[str] | None
) -> tuple[str | os.PathLike[str], str]:
    """The data directory and agent: as given (setup always gives both), else from the settings (slower)."""
    if data_dir is not None and agent is not None and config is None:
        return data_dir, agent
    from ..base.config import load_settings

    settings = load_settings(Path(config) if config else None, data_dir=data_dir, agent=agent)
    return str(settings.resolved_data_dir()), settings.agent


def _last_reply(transcript: object) -> str:
    """The text of the last assistant message in a Claude Code transcript (JSON lines), or ""."""
    if not isinstance(transcript, str) or not transcript:
        return ""
    try:
        lines = Path(transcript).read_text(encoding="utf-8").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        message = entry.get("message") if isinstance(entry, dict) and entry.get("type") == "assistant" else None
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str) and content.strip():
            return content
        texts = [b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text"]
        if any(t.strip() for t in texts):
            return "\n".join(t for t in texts if t.strip())
    return ""


def log_file() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "tiermem" / "hooks.log"


def _note(message: str) -> None:
    line = f"{datetime.now().isoformat(timespec='seconds')} tiermem hook: {message}"
    print(line, file=sys.stderr)
    path = log_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and path.stat().st_size > LOG_BYTES:
            path.replace(path.with_name(path.name + ".1"))
        with path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")
    except OSError:
        pass  # stderr has it
