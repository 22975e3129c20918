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
come up in time, a server does not take the request within ``TAKE_TIMEOUT`` (stopped or hung) or does not answer
within its event's ``ANSWER_TIMEOUT``, a request fails), it prints nothing and exits 0, so the prompt goes through
unchanged, and says why on stderr and in ``$XDG_STATE_HOME/tiermem/hooks.log``. However many servers it tries, it
takes at most ``BUDGET`` s in all (under the time the host gives a hook); a server that is shutting down refuses the
request undone, and the next one is asked. A server that takes a request only
after the hook gave up on it (it resumed) drops it (``GO``); one that took it in time keeps it, answer or not. A
prompt or reply whose ``cwd`` is missing or not an absolute path is sent with the hook's own working directory (the
host runs it in the project). It imports only the standard library and ``rendezvous``: Python starts, one request
goes over a local socket, and the server does the work with what it has open.
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
from typing import TYPE_CHECKING, Any

from ..base.errors import ConfigError
from ..base.rendezvous import GO, MAX_REQUEST, candidates, memory_key, private_dir, runtime_dirs, starting_server

if TYPE_CHECKING:
    from collections.abc import Callable

EVENTS_WITH_CONTEXT = ("SessionStart", "UserPromptSubmit")
LOGGED_EVENTS = ("UserPromptSubmit", "Stop")  # their turn is logged with its project (the input's ``cwd``)
START_WAIT = 8.0  # seconds a hook waits for a server that is starting to open its socket
# A session's first hook may run before its host has even started its servers (Claude Code starts both at once;
# on a loaded machine the server's process can come second): SessionStart looks this long for one to appear
SESSION_GRACE = 3.0
# A server takes a request (connects, reads it, acknowledges it) in milliseconds, even while it loads its model: one
# that has not within TAKE_TIMEOUT is stopped or hung, and the hook gives up on it instead of keeping the host waiting.
TAKE_TIMEOUT = 3.0
# The hook's answer to an acknowledgement that came within TAKE_TIMEOUT (the request asks the server to wait for it:
# ``"confirm": true``). A server that acknowledges later (it was stopped or hung, then resumed) finds the hook gone
# without it and drops the request: the hook has given up on it, and may have asked another server meanwhile.
GO_LINE = json.dumps(GO).encode() + b"\n"
# Seconds for the answer once the server has the request. A cold server's first answer loads the store and the
# embedding model (measured 2-4 s on a quiet 2-core machine). A prompt or session start given up on loses only the
# context it would add (the server still logs the prompt); a reply must be logged before a one-turn host stops the
# server, so Stop waits longest. With START_WAIT, TAKE_TIMEOUT and Python's start, each stays under the 60 s setup
# gives every hook (Codex, Gemini CLI, opencode, Claude Code).
ANSWER_TIMEOUT = {"SessionStart": 15.0, "UserPromptSubmit": 15.0, "Stop": 45.0}
DEFAULT_ANSWER_TIMEOUT = 15.0
# Seconds the whole hook may take from its start, whatever servers it tries (each stopped or hung one costs up to
# TAKE_TIMEOUT): under the 60 s setup gives every hook, with Python's start. Every wait is cut to what is left of it.
BUDGET = 55.0
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
    """The hook, reading its input from ``stdin`` (default: the process's). Bytes that are not UTF-8 are kept as
    ``surrogateescape`` characters: a directory's name stays the directory's, and the server replaces them in text
    with U+FFFD (one bad byte does not cost the whole prompt)."""
    until = time.monotonic() + BUDGET
    try:
        stream: Any = stdin or getattr(sys.stdin, "buffer", sys.stdin)  # the process's bytes, where it has them
        raw = stream.read()
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8", "surrogateescape")
        data = json.loads(raw or "{}")
        if not isinstance(data, dict):
            raise ValueError("the hook input is not a JSON object")
    except (OSError, ValueError) as exc:
        _note(f"unreadable hook input: {exc}")
        return 0
    except RecursionError:
        _note("unreadable hook input: its JSON is nested too deeply to read")
        return 0
    named = str(data.get("hook_event_name") or "")  # the host's name for it: the output names it so
    event, data = adapt(host, named, data)
    if event in LOGGED_EVENTS and not _working_directory(data, event):
        return 0
    if event == "Stop" and not data.get("last_assistant_message") and host == "claude-code":
        data["last_assistant_message"] = _last_reply(data.get("transcript_path"))  # hosts older than the field
    try:
        key = memory_key(*_memory_of(data_dir, agent, config))
        request = {"v": 1, "key": key, "event": event, "input": data, "host": host, "ack": True, "confirm": True}
        size = len(json.dumps(request).encode())
        if size > MAX_REQUEST:
            _note(
                f"{event}: the hook input is {size:,} bytes, over the {MAX_REQUEST:,} a hook request may be: it "
                "is neither logged nor searched; the prompt goes through unchanged"
            )
            return 0
        within = ANSWER_TIMEOUT.get(event, DEFAULT_ANSWER_TIMEOUT)
        grace = SESSION_GRACE if event == "SessionStart" else 0.0
        answer = ask(key, request, wait=START_WAIT, answer_within=within, until=until, grace=grace)
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


def _working_directory(data: dict[str, Any], event: str) -> bool:
    """Make sure ``data["cwd"]`` is an absolute path: the turn's project is read from it, and a turn without one would
    be shared by every project. A host runs its hooks in the project's directory, so a ``cwd`` that is missing or not
    an absolute path is replaced by this process's own (and the hook says so). False when that cannot be read either:
    the turn is not sent."""
    cwd = data.get("cwd")
    if isinstance(cwd, str) and os.path.isabs(cwd):
        return True
    given = "has no cwd" if cwd is None else f"has a cwd that is not an absolute path ({json.dumps(cwd)[:200]})"
    try:
        here = os.getcwd()
    except OSError as exc:
        _note(
            f"{event}: the hook input {given}, and the hook's own working directory cannot be read ({exc}): the turn "
            "is neither logged nor searched (its project is unknown); the prompt goes through unchanged"
        )
        return False
    _note(f"{event}: the hook input {given}; the turn's project is taken from the hook's working directory, {here}")
    data["cwd"] = here
    return True


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


def ask(
    key: str,
    request: dict[str, Any],
    *,
    wait: float,
    answer_within: float = DEFAULT_ANSWER_TIMEOUT,
    until: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    grace: float = 0.0,
) -> dict[str, Any]:
    """Send ``request`` to a live server of ``key``; its answer. Waits up to ``wait`` s for one that is starting, up
    to ``TAKE_TIMEOUT`` s for a server to take the request (then tries the next; one shutting down is passed over at
    once), and ``answer_within`` s for the answer of the server that took it (then gives up: that server has the
    request). Nothing waits past ``until`` (a time of ``clock``; default ``BUDGET`` s from now): once it has come, no
    other server is tried. ``grace``: seconds it looks for a server even when none is starting (within ``wait``)."""
    until = clock() + BUDGET if until is None else until
    deadline = min(clock() + wait, until)
    looking = min(clock() + grace, deadline)
    tried: list[str] = []
    why = ""
    spent = False
    while not spent:
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
            if clock() >= until:
                spent = True
                break
            try:
                return _exchange(path, request, answer_within=answer_within, until=until, clock=clock)
            except OSError as exc:
                tried.append(f"{path.name}: {exc}")
        # a server that listens in one of the directories is not starting
        now = clock()
        if now >= deadline or (now >= looking and not all(starting_server(d) for d in (directories or [None]))):
            break
        time.sleep(0.05)
    if spent:
        raise Unavailable("no tiermem server answered before the hook's time ran out (" + "; ".join(tried[-3:]) + ")")
    if tried:
        raise Unavailable("no tiermem server answered (" + "; ".join(tried[-3:]) + ")")
    raise Unavailable(
        "no tiermem server is running for this memory (is tiermem registered with this host? "
        f"`tiermem setup HOST`){': ' + why if why else ''}"
    )


def _exchange(
    path: Path, request: dict[str, Any], *, answer_within: float, until: float, clock: Callable[[], float]
) -> dict[str, Any]:
    """One request to the server at ``path``, taken within ``TAKE_TIMEOUT`` s and answered within ``answer_within``
    s, neither past ``until``. OSError when it cannot be reached, does not take the request in time (the hook closes
    its end without ``GO``: the server drops the request if it takes it later), refuses it undone (it is shutting
    down: ``"retry": true``) or closes without a word; Unavailable when it took it but did not answer in time (no
    other server is asked: this one has it)."""
    take = min(TAKE_TIMEOUT, until - clock())
    taken_by = clock() + take

    def left(by: float) -> float:
        remaining = by - clock()
        if remaining <= 0:
            raise TimeoutError
        return remaining

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.settimeout(left(taken_by))  # connecting, sending and the acknowledgement: ``take`` s in all
            sock.connect(os.fspath(path))
            sock.settimeout(left(taken_by))
            sock.sendall(json.dumps(request).encode() + b"\n")
            sock.settimeout(left(taken_by))
        except TimeoutError:
            raise TimeoutError(
                f"the server did not take the request within {take:.3g} s (it is stopped or hung)"
            ) from None
        with sock.makefile("rb") as lines:
            try:
                raw = lines.readline()
                if not raw:  # closed without taking it (a server going away): it did nothing, the next is asked
                    raise ConnectionResetError("the server closed the connection without taking the request")
                first = _message(raw)
            except TimeoutError:
                raise TimeoutError(
                    f"the server did not take the request within {take:.3g} s (it is stopped or hung)"
                ) from None
            if first.get("retry") is True and first.get("ok") is False:  # refused undone: the next server is asked
                raise ConnectionRefusedError(f"the server refused the request undone: {first.get('error')}")
            if first.get("ack") is not True or "ok" in first:
                return first  # an answer (a server older than acknowledgements answers at once)
            try:
                sock.sendall(GO_LINE)  # in time: this server does it
            except OSError:  # it closed its end: one older than confirmations may have answered already, else it
                answered = lines.readline()  # never read GO and did nothing (the next server is asked)
                if not answered:
                    raise
                return _message(answered)
            answer = max(min(answer_within, until - clock()), 0.001)  # it has the request now: it gets what is left
            sock.settimeout(answer)
            try:
                return _message(lines.readline())
            except TimeoutError:
                raise Unavailable(f"the server took the request but did not answer within {answer:.3g} s") from None


def _message(line: bytes) -> dict[str, Any]:
    answer = json.loads(line or b"{}")
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
        lines = Path(transcript).read_text(encoding="utf-8", errors="replace").splitlines()
    except (OSError, ValueError):  # ValueError: a path with NUL or a lone surrogate
        return ""
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue
        message = entry.get("message") if isinstance(entry, dict) and entry.get("type") == "assistant" else None
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str) and content.strip():
            return content
        if not isinstance(content, list):
            continue
        texts = [
            b["text"]
            for b in content
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        ]
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
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # the log names the user's paths: theirs alone
        if path.exists() and path.stat().st_size > LOG_BYTES:
            path.replace(path.with_name(path.name + ".1"))
        private = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.fchmod(private, 0o600)  # a log an older tiermem made under the umask (0644) is made private too
        with open(private, "a", encoding="utf-8", errors="backslashreplace") as f:  # a path may hold undecodable bytes
            f.write(line + "\n")
    except OSError:
        pass  # stderr has it
