"""``tiermem serve``'s listener for host hooks: the fast path of memory that works on its own.

A hook (``tiermem hook claude-code``) runs once per prompt, so it cannot start Python, LanceDB and the embedding model
from nothing. It asks the server the host already runs instead, over a Unix socket in a private directory
(``rendezvous.py``): one JSON request per connection, one JSON answer. The server answers from the memory it has
open:

- ``SessionStart`` (source startup, clear or compact): core memory, whole (Claude Code accepts 10,000 characters of
  hook context); nothing on ``resume`` (the earlier context is still there);
- ``UserPromptSubmit``: the prompt is logged to recall memory, and the memories relevant to it are returned (each
  shown counts as a use of it, once: when the prompt is logged, which a hook fired again does not do);
- ``Stop``: the assistant's final reply is logged (before the answer: the host may stop the server right after).

A request may name its ``host`` (claude-code, codex, gemini, opencode): the logged turn keeps it (its payload's
``host``), beside the session id (the conversation) and the time the hook reported it. A listener given ``sync``
(``serve`` wires Claude Code's auto memory: ``interop/auto_memory.py``) runs it before it answers ``SessionStart`` and
after it logs a reply.

A prompt's or reply's ``<private>`` spans are dropped before anything else (``quoting.drop_private``): they are neither
searched nor logged, and the logged turn keeps a mark in their place. Each turn carries its project (``cwd`` of the
hook input, resolved to its git repository: ``projects.project_of``; a ``cwd`` that is not an absolute path is bad
input, never "no project"), and a prompt recalls the memories of its own project and of none unless ``recall_scope`` is "all".
A lone surrogate in the text (a byte of the host's input that was not UTF-8) becomes U+FFFD (``valid_text``).

A turn is logged once however often its hook fires (``autorecall.log_turn``'s key: session, turn, role, text digest),
while the same words said again later are a new turn. The turn is the hook's ``prompt_id`` when the host sends one;
else its position in the session's transcript (the user prompts in it so far: a hook fired again sees the same
number, a later prompt a larger one); else (no transcript either) the same text in the same session and role within
``refire_window`` seconds is the same firing.

A request is one JSON line of at most ``MAX_REQUEST`` bytes; a longer one is refused with an error that says so (the
hook client checks before it sends). A request with ``"ack": true`` gets ``{"ack": true}`` as soon as it is read, before
the work, then its answer: the hook tells a stopped or hung server (no acknowledgement within seconds) from one that is
busy (a cold server's first answer loads the model). One that also has ``"confirm": true`` is done only once the hook
answers the acknowledgement with ``{"go": true}``, which it sends only when the acknowledgement came in time: a hook
that gave up on this server (stopped or hung, then resumed) has closed its end, maybe after asking another server, so
its request is dropped unanswered, neither logged nor searched (a turn is not logged twice, nor late after its reply).
A server that is shutting down refuses a request before it acknowledges it, with
``{"ok": false, "error": ..., "retry": true}``: nothing was done, and the hook asks the next server of the memory.
Bad input gets ``{"ok": false, "error": "bad hook request: ..."}``; a failure of tiermem itself is logged with its
traceback and answered as what it is.

Requests run in their own threads (``Memory`` is used from worker threads anyway); each counts as a request in
flight for the server's clean exit (``shutdown.py``), which closes the listener first.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import threading
import time
import uuid
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..base.errors import ShuttingDownError, TiermemError, ValidationError
from ..base.projects import project_of
from ..base.quoting import drop_private
from ..base.records import now, valid_text
from ..base.rendezvous import GO, MAX_REQUEST, MAX_SOCKET_PATH, memory_key, private_dir, socket_name
from ..domain import autorecall, briefing
from ..server.registry import label_editors

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from ..base.config import Settings
    from ..server.runtime import MemoryHandle
    from .shutdown import Shutdown

log = logging.getLogger(__name__)

SESSION_CONTEXT_CHARS = 9_500  # Claude Code passes up to 10,000 characters of hook context whole
READ_TIMEOUT = 10.0  # seconds a connected hook has to send its request
TAKEN = {"ack": True}  # sent at once to a hook that asks (``"ack": true``), before the work: "alive, working on it"
REFIRE_WINDOW = 10.0  # seconds: without a prompt id or a transcript, the same text again this soon is a re-fired hook


class HookListener:
    def __init__(
        self,
        handle: MemoryHandle,
        settings: Settings,
        tools: Collection[str],
        stop: Shutdown | None = None,
        *,
        refire_window: float = REFIRE_WINDOW,
        sync: Callable[[object], object] | None = None,
    ) -> None:
        self.handle = handle
        self.sync = sync  # run at a session's start (before core memory is read) and after each reply, given the hook's
        # working directory: see ``_synced``
        self._sync_guard = threading.Lock()
        self.stop = stop
        self.tools = list(tools)
        self.key = memory_key(settings.resolved_data_dir(), settings.agent)
        self.recall = autorecall.RecallSettings(
            settings.auto_recall_threshold,
            settings.auto_recall_limit,
            settings.auto_recall_max_chars,
            settings.recall_scope,
        )
        self.enabled_recall = settings.auto_recall
        self.dialect = settings.memory_tool_dialect
        self.path: Path | None = None
        self._sock: socket.socket | None = None
        self.refire_window = refire_window
        self._recent: dict[tuple[str, str, str], tuple[str, float]] = {}  # (session, role, text) -> (turn, when)
        self._recent_guard = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> Path | None:
        """Listen (in a daemon thread); the socket's path, or None when hooks cannot be served here (logged)."""
        try:
            directory = private_dir(create=True)
        except TiermemError as exc:
            log.warning("hooks cannot reach this server: %s", exc)
            return None
        path = directory / socket_name(self.key, os.getppid(), os.getpid())
        if len(os.fsencode(path)) > MAX_SOCKET_PATH:
            log.warning(
                "hooks cannot reach this server: the socket path %s is too long; set XDG_RUNTIME_DIR to a "
                "shorter directory",
                path,
            )
            return None
        path.unlink(missing_ok=True)  # left by an earlier process that had this pid
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket is created 0600, never briefly open to others
        try:
            sock.bind(os.fspath(path))
            sock.listen(16)
        except OSError as exc:
            sock.close()
            log.warning("hooks cannot reach this server: cannot listen on %s: %s", path, exc)
            return None
        finally:
            os.umask(old)
        self._sock, self.path = sock, path
        threading.Thread(target=self._accept, args=(sock,), name="tiermem-hooks", daemon=True).start()
        log.info("listening for hooks on %s", path)
        return path

    def close(self) -> None:
        """Stop accepting hooks and remove the socket at once (requests under way go on: ``Shutdown`` waits)."""
        sock, self._sock = self._sock, None
        if self.path is not None:
            self.path.unlink(missing_ok=True)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
            except OSError:
                pass
            sock.close()

    def _accept(self, sock: socket.socket) -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._connection, args=(conn,), name="tiermem-hook", daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as rfile:  # answers go out with ``_send``: no buffer left to flush at close
            self._serve(conn, rfile)

    # -- requests ----------------------------------------------------------------

    def _serve(self, conn: socket.socket, rfile: Any) -> None:
        if not _same_user(conn):
            log.warning("refused a hook connection from another user")
            return
        conn.settimeout(READ_TIMEOUT)
        try:
            line = rfile.readline(MAX_REQUEST + 1)
            too_long = len(line) > MAX_REQUEST
            if too_long:
                _drain(rfile)  # read to its end, so the hook is not cut off while it sends and can read the answer
            with self.stop.request() if self.stop is not None else nullcontext():  # the writes are done inside
                answer, then = (
                    (
                        _refused(
                            f"it is over {MAX_REQUEST:,} bytes, the most a hook request may be (a prompt "
                            "or reply that long is neither logged nor searched)"
                        ),
                        None,
                    )
                    if too_long
                    else self._answer_line(line, taken=lambda confirm: _taken(conn, rfile, confirm))
                )
                if answer is None:
                    return  # the hook gave up on this server before it took the request: nothing done
                _send(conn, answer)  # a hook gone by now does not stop its turn: it still happened
                if then is not None:  # a prompt is logged after the hook has its answer: the host is not kept waiting
                    self._then(then)
        except ShuttingDownError as exc:  # before anything was done: the hook may ask another server (``retry``)
            _send(conn, {"ok": False, "error": str(exc), "retry": True})
        except OSError as exc:
            log.info("a hook went away before its answer: %s", exc)

    @staticmethod
    def _then(then: Callable[[], object]) -> None:
        try:
            then()
        except TiermemError as exc:
            log.warning("a hook's turn could not be logged: %s", exc)
        except Exception:
            log.exception("a hook's turn could not be logged: tiermem failed")

    def _answer_line(
        self, line: bytes, taken: Callable[[bool], bool]
    ) -> tuple[dict[str, Any] | None, Callable[[], object] | None]:
        """The answer to one request line; ``taken`` is called first when the request asks for it (``"ack": true``:
        the hook then knows this server is alive and working on it, see ``cli/hooks.py``), told whether the request
        asks to confirm (``"confirm": true``); when it returns False (the hook gave up on this server), no answer
        (None) and nothing done."""
        if not line.strip():
            return _refused("it is empty (send one JSON object on one line)"), None
        try:
            request = json.loads(line)
        except ValueError as exc:  # UnicodeDecodeError included
            return _refused(f"not one JSON line ({exc})"), None
        except RecursionError:
            return _refused("its JSON is nested too deeply"), None
        if isinstance(request, dict) and request.get("ack") is True and not taken(request.get("confirm") is True):
            return None, None
        try:
            return self.answer(request)
        except TiermemError as exc:
            return {"ok": False, "error": str(exc)}, None
        except Exception as exc:
            log.exception("a hook request failed: tiermem failed on it")
            return {
                "ok": False,
                "error": f"tiermem failed on this hook request ({type(exc).__name__}: {exc}); the "
                "server's log (stderr) has the traceback",
            }, None

    def answer(self, request: object) -> tuple[dict[str, Any], Callable[[], object] | None]:
        """The answer to one hook request (``{"ok": true, "context": text}``, text maybe empty) and the write to do
        once it is sent (a prompt or reply to log), if any. Bad input raises ``ValidationError`` ("bad hook
        request: ...")."""
        if not isinstance(request, dict):
            raise _bad("the request is not a JSON object")
        if request.get("key") != self.key:
            raise ValidationError("this server serves another data directory or agent")
        event, data = request.get("event"), request.get("input")
        if not isinstance(event, str):
            raise _bad("`event` (the hook event's name, a string) is missing")
        if not isinstance(data, dict):
            raise _bad("`input` (the hook's input, a JSON object) is missing")
        session = data.get("session_id") or ""
        if not isinstance(session, str):
            raise _bad("`input.session_id` is not a string")
        session = valid_text(session)
        host = request.get("host")
        if host is not None and not isinstance(host, str):
            raise _bad("`host` (the host's name, a string) is not a string")
        host = None if host is None else valid_text(host)
        cwd = data.get("cwd")
        if cwd is not None and not (isinstance(cwd, str) and os.path.isabs(cwd)):
            raise _bad(
                "`input.cwd` is not an absolute path: the turn's project cannot be told (the hook client puts its "
                "own working directory there)"
            )
        if event == "SessionStart":
            if data.get("source") == "resume":
                return {"ok": True, "context": ""}, None
            self._synced(cwd)
            memory, agent_id = self.handle.live()
            core = briefing.instructions(
                memory.blocks(agent_id),
                self.tools,
                SESSION_CONTEXT_CHARS,
                editors=label_editors(self.dialect),
                dialect=self.dialect,
                directories=memory.directory_texts(agent_id),
            )
            return {"ok": True, "context": core}, None
        if event not in ("UserPromptSubmit", "Stop"):
            return {"ok": True, "context": ""}, None
        if not session:
            raise _bad("the hook input has no session_id")
        role: Literal["user", "assistant"] = "user" if event == "UserPromptSubmit" else "assistant"
        field = "prompt" if role == "user" else "last_assistant_message"
        text = data.get(field) or ""
        if not isinstance(text, str):
            raise _bad(f"`input.{field}` is not a string")
        text = drop_private(
            valid_text(text)
        )  # <private> spans go first: never searched, logged or kept, even in memory
        project = project_of(cwd)  # where the host works: its repository, else its directory (None without a cwd)
        at = now()
        memory, agent_id = self.handle.live()
        found = []
        if role == "user" and self.enabled_recall and text.strip():
            found = autorecall.recall(memory, agent_id, text, session=session, settings=self.recall, project=project)
        composed = autorecall.compose(found, self.recall.max_chars)
        answer = {"ok": True, "context": composed.text}
        if not text.strip():
            return answer, None
        turn = self.turn(data, session, role, text)

        def log() -> None:
            if autorecall.log_turn(
                memory, agent_id, session=session, turn=turn, role=role, content=text, at=at, project=project, host=host
            ):  # the first time this prompt is logged: what it was shown counts as used, once a prompt
                autorecall.count_uses(memory, agent_id, composed.shown)

        if role == "user":
            return answer, log  # logged once the hook has its answer: the prompt is not kept waiting
        # A reply is logged before the answer: a one-turn host (``codex exec``, ``claude -p``) stops its MCP servers
        # as soon as its Stop hook returns (measured with Codex: a reply logged after the answer was lost under load).
        log()
        return answer, lambda: self._synced(cwd)

    def _synced(self, cwd: object) -> None:
        """Run ``sync`` (Claude Code's auto memory kept in step with this memory, wired by ``serve``) with the hook's
        working directory (it names the project of an auto-memory folder), one at a time; a failure is logged, never
        the hook's."""
        if self.sync is None:
            return
        with self._sync_guard:
            try:
                self.sync(cwd)
            except Exception:
                log.exception("syncing Claude Code's auto memory failed")

    def turn(self, data: dict[str, Any], session: str, role: str, text: str) -> str:
        """What tells this turn from the same words said again in the session (see the module's docstring)."""
        prompt_id = data.get("prompt_id")
        if isinstance(prompt_id, str) and prompt_id:
            return valid_text(prompt_id)
        transcript = data.get("transcript_path")
        if isinstance(transcript, str) and transcript:
            count = prompts_in(Path(transcript))
            if count is not None:
                return f"transcript:{count}"
        moment = time.monotonic()
        with self._recent_guard:
            self._recent = {k: v for k, v in self._recent.items() if moment - v[1] < self.refire_window}
            key = (session, role, text)
            turn, _ = self._recent.setdefault(key, (f"received:{uuid.uuid4().hex}", moment))
            return turn


def prompts_in(transcript: Path) -> int | None:
    """How many user prompts a Claude Code transcript (JSON lines) holds: entries of type ``user`` that are not tool
    results, meta or compaction entries; 0 when the file does not exist yet (a session's first prompt), None when it
    cannot be read."""
    count = 0
    try:
        with transcript.open("rb") as f:
            for line in f:
                if b'"user"' not in line:
                    continue
                try:
                    entry = json.loads(line)
                except (ValueError, RecursionError):
                    continue
                if _is_prompt(entry):
                    count += 1
    except FileNotFoundError:
        return 0
    except OSError as exc:
        log.info("cannot read the transcript %s: %s", transcript, exc)
        return None
    return count


def _is_prompt(entry: object) -> bool:
    if not isinstance(entry, dict) or entry.get("type") != "user":
        return False
    if entry.get("isMeta") or entry.get("isSidechain") or entry.get("isCompactSummary"):
        return False
    message = entry.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return True
    return isinstance(content, list) and not any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    )


def _send(conn: socket.socket, answer: dict[str, Any]) -> None:
    """Write one answer line; a hook that has gone away (the host went on without it) is noted, not raised."""
    try:
        conn.sendall(json.dumps(answer).encode() + b"\n")
    except OSError as exc:
        log.info("a hook went away before its answer: %s", exc)


def _taken(conn: socket.socket, rfile: Any, confirm: bool) -> bool:
    """Acknowledge a request (``TAKEN``); with ``confirm``, whether the hook still wants it: it answers ``GO`` at once
    when the acknowledgement came within its wait (``cli/hooks.py``'s ``TAKE_TIMEOUT``). A hook that gave up on this
    server before (it was stopped or hung, and has resumed) has closed its end and may have asked another server: its
    request is dropped (noted), so a turn is neither logged twice nor after the fact."""
    _send(conn, TAKEN)
    if not confirm:
        return True
    try:
        line = rfile.readline(64)  # bounded by the connection's read timeout
    except OSError as exc:  # reset (the hook closed its end, the acknowledgement unread) or silent past the timeout
        line = b""
        log.info("a hook's confirmation could not be read: %s", exc)
    try:
        confirmed: bool = json.loads(line) == GO
    except ValueError:  # nothing (the hook closed its end) or not JSON
        confirmed = False
    if not confirmed:
        log.info(
            "a hook gave up on this server before it took the request (it was stopped or hung): dropped, nothing done"
        )
    return confirmed


def _drain(rfile: Any) -> None:
    """Read the rest of an over-long request and drop it (each read bounded by the read timeout)."""
    while True:
        chunk = rfile.readline(1 << 20)
        if not chunk or chunk.endswith(b"\n"):
            return


def _bad(what: str) -> ValidationError:
    return ValidationError(f"bad hook request: {what}")


def _refused(what: str) -> dict[str, Any]:
    return {"ok": False, "error": str(_bad(what))}


def _same_user(conn: socket.socket) -> bool:
    """The peer runs as this user (Linux ``SO_PEERCRED``); elsewhere the private directory is the guard."""
    option: int | None = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return True
    _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i")))
    return bool(uid == os.getuid())
