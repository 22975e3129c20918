"""A moto S3 server on loopback that counts the requests it serves, by kind, and whose conditional writes are
atomic as S3's are.

    python -m bench.moto_counting PORT

``GET /__requests__`` answers the counts so far as JSON ({"GET": n, "PUT": n, "LIST": n, ...}; itself not counted).
A request for one object's bytes is GET (a 304 included), a listing is LIST. Loopback only; runs until killed.

moto checks ``If-Match`` / ``If-None-Match`` and then writes, in two steps with no lock between them, so under its
threaded server two PUTs conditional on the same ETag can both succeed (seen here: an acknowledged append lost in
a 60 s run). S3, GCS and Azure make the check and the write one step; so does this server, by handling one
write (PUT, POST, DELETE) at a time. Reads stay concurrent with each other but not with a write: moto makes a new
object visible before it has computed its ETag from the object's buffer, and a GET reading that buffer meanwhile
answered an empty body (seen here: "The stored block is not valid JSON" once in a 40 s run); S3 serves the old
object or the new one whole.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.threaded_moto_server import MotoRequestHandler
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server

from tests.moto_s3 import ReadWriteLock

COUNTS: Counter[str] = Counter()
LOCK = threading.Lock()
WRITES = ReadWriteLock()


def counting(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == "/__requests__":
            with LOCK:
                body = json.dumps(dict(COUNTS)).encode()
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        kind = environ.get("REQUEST_METHOD", "?")
        if kind == "GET" and "list-type" in environ.get("QUERY_STRING", ""):
            kind = "LIST"
        with LOCK:
            COUNTS[kind] += 1
        if kind in ("PUT", "POST", "DELETE"):
            with WRITES.writing():
                return list(app(environ, start_response))
        with WRITES.reading():
            return list(app(environ, start_response))

    return wsgi


def main() -> None:
    port = int(sys.argv[1])
    app = DomainDispatcherApplication(create_backend_app)
    make_server("127.0.0.1", port, counting(app), True, request_handler=MotoRequestHandler).serve_forever()


if __name__ == "__main__":
    main()
