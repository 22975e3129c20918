"""``tiermem serve``'s listener for host hooks: the fast path of memory that works on its own.

A hook (``tiermem hook claude-code``) runs once per prompt, so it cannot start Python, LanceDB and the embedding model
from nothing. It asks the server the host already runs instead, over a Unix socket in a private directory
(``rendezvous.py``): one JSON request per connection, one JSON answer. The server answers from the memory it has
open:

- ``SessionStart`` (source startup, clear or compact): core memory, whole (Claude Code accepts 10,000 characters of
  hook context); nothing on ``resume`` (the earlier context is still there);
- ``UserPromptSubmit``: the prompt is logged to recall memory, and the memories relevant to it are returned;
- ``Stop``: the assistant's final reply is logged.

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
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..domain import autorecall, briefing
from ..base.errors import ShuttingDownError, TiermemError, ValidationError
from ..base.records import now
from ..base.rendezvous import MAX_SOCKET_PATH, memory_key, private_dir, socket_name
from .registry import label_editors

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from ..base.config import Settings
    from .runtime import MemoryHandle
    from .shutdown import Shutdown

log = logging.getLogger(__name__)

MAX_REQUEST = 8 << 20  # bytes; a prompt is at most a few hundred KB
SESSION_CONTEXT_CHARS = 9_500  # Claude Code passes up to 10,000 characters of hook context whole
READ_TIMEOUT = 10.0  # seconds a connected hook has to send its request


class HookListener:
    def __init__(self, handle: MemoryHandle, settings: Settings, tools: Collection[str],
                 stop: Shutdown | None = None) -> None:
        self.handle = handle
        self.stop = stop
        self.tools = list(tools)
        self.key = memory_key(settings.resolved_data_dir(), settings.agent)
        self.recall = autorecall.RecallSettings(settings.auto_recall_threshold, settings.auto_recall_limit,
                                                settings.auto_recall_max_chars)
        self.enabled_recall = settings.auto_recall
        self.dialect = settings.memory_tool_dialect
        self.path: Path | None = None
        self._sock: socket.socket | None = None

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
            log.warning("hooks cannot reach this server: the socket path %s is too long; set XDG_RUNTIME_DIR to a "
                        "shorter directory", path)
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
        """Stop accepting hooks and remove the socket at once (requests under way go on: ``Shutdown`` waits for them)."""
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
        with conn, conn.makefile("rb") as rfile, conn.makefile("wb") as wfile:
            self._serve(conn, rfile, wfile)

    # -- requests ----------------------------------------------------------------

    def _serve(self, conn: socket.socket, rfile: Any, wfile: Any) -> None:
        if not _same_user(conn):
            log.warning("refused a hook connection from another user")
            return
        conn.settimeout(READ_TIMEOUT)
        try:
            line = rfile.readline(MAX_REQUEST + 1)
            with self.stop.request() if self.stop is not None else nullcontext():  # the writes are done inside
                answer, then = self._answer_line(line)
                wfile.write(json.dumps(answer).encode() + b"\n")
                wfile.flush()
                if then is not None:
                    then()  # the turn is logged after the hook has its answer: Claude Code is not kept waiting
        except ShuttingDownError as exc:
            wfile.write(json.dumps({"ok": False, "error": str(exc)}).encode() + b"\n")
        except OSError as exc:
            log.info("a hook went away before its answer: %s", exc)
        except TiermemError as exc:
            log.warning("a hook's turn could not be logged: %s", exc)

    def _answer_line(self, line: bytes) -> tuple[dict[str, Any], Callable[[], object] | None]:
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise ValueError("not a JSON object")
            return self.answer(request)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            return {"ok": False, "error": f"bad hook request: {exc}"}, None
        except TiermemError as exc:
            return {"ok": False, "error": str(exc)}, None

    def answer(self, request: dict[str, Any]) -> tuple[dict[str, Any], Callable[[], object] | None]:
        """The answer to one hook request (``{"ok": true, "context": text}``, text maybe empty) and the write to do
        once it is sent (a prompt or reply to log), if any."""
        if request.get("key") != self.key:
            raise ValidationError("this server serves another data directory or agent")
        event = request["event"]
        data = request["input"]
        session = str(data.get("session_id") or "")
        memory, agent_id = self.handle.get()
        if event == "SessionStart":
            if data.get("source") == "resume":
                return {"ok": True, "context": ""}, None
            core = briefing.instructions(memory.blocks(agent_id), self.tools, SESSION_CONTEXT_CHARS,
                                         editors=label_editors(self.dialect), dialect=self.dialect)
            return {"ok": True, "context": core}, None
        if event not in ("UserPromptSubmit", "Stop"):
            return {"ok": True, "context": ""}, None
        if not session:
            raise ValidationError("the hook input has no session_id")
        at, turn = now(), str(data.get("prompt_id") or "")
        role: Literal["user", "assistant"] = "user" if event == "UserPromptSubmit" else "assistant"
        text = str((data.get("prompt") if role == "user" else data.get("last_assistant_message")) or "")
        found = []
        if role == "user" and self.enabled_recall and text.strip():
            found = autorecall.recall(memory, agent_id, text, session=session, settings=self.recall)
        answer = {"ok": True, "context": autorecall.render(found, self.recall.max_chars)}
        if not text.strip():
            return answer, None
        return answer, lambda: autorecall.log_turn(memory, agent_id, session=session, turn=turn, role=role,
                                                   content=text, at=at)


def _same_user(conn: socket.socket) -> bool:
    """The peer runs as this user (Linux ``SO_PEERCRED``); elsewhere the private directory is the guard."""
    option: int | None = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return True
    _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i")))
    return bool(uid == os.getuid())
