"""moto's S3 server on loopback, with conditional writes made atomic as S3's are (for the object-storage tests).

moto checks ``If-Match`` / ``If-None-Match`` and then writes, in two steps with no lock between them, so under its
threaded server two PUTs conditional on the same ETag can both succeed; S3, GCS and Azure make the check and the
write one step. This server handles one write (PUT, POST, DELETE) at a time, and reads concurrently with each other
but not during a write (moto makes a new object visible before it has computed its ETag from the object's buffer,
and a GET reading the buffer meanwhile can answer an empty body; S3 serves the old object or the new one whole).
It is a fake at the process edge; nothing of tiermem runs in it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from moto.moto_server.threaded_moto_server import MotoRequestHandler
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import BaseWSGIServer, make_server


class ReadWriteLock:
    """Many readers or one writer; a waiting writer holds new readers back."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False
        self._waiting = 0

    @contextmanager
    def reading(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._writing and not self._waiting)
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextmanager
    def writing(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            self._cond.wait_for(lambda: not self._writing and not self._readers)
            self._waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()


def atomic_writes(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    lock = ReadWriteLock()

    def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") in ("PUT", "POST", "DELETE"):
            with lock.writing():
                return list(app(environ, start_response))
        with lock.reading():
            return list(app(environ, start_response))

    return wsgi


class S3Server:
    def __init__(self, port: int) -> None:
        app = atomic_writes(DomainDispatcherApplication(create_backend_app))
        self._server: BaseWSGIServer = make_server("127.0.0.1", port, app, True, request_handler=MotoRequestHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="moto-s3", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
