"""moto's S3 server on loopback, with conditional writes made atomic as S3's are (for the object-storage tests).

moto checks ``If-Match`` / ``If-None-Match`` and then writes, in two steps with no lock between them, so under its
threaded server two PUTs conditional on the same ETag can both succeed; S3, GCS and Azure make the check and the
write one step. This server handles one write (PUT, POST, DELETE) at a time, reads concurrently. It is a fake at
the process edge; nothing of tiermem runs in it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.threaded_moto_server import MotoRequestHandler
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import BaseWSGIServer, make_server


def atomic_writes(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    lock = threading.Lock()

    def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") in ("PUT", "POST", "DELETE"):
            with lock:
                return list(app(environ, start_response))
        return app(environ, start_response)

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
