"""Deadlines of an object store's requests, for those the configuration leaves out.

LanceDB and the core state's obstore are both the Rust ``object_store`` crate, whose client waits up to 30 s for a
request and retries a failed one for up to 180 s (LanceDB: 10 times), and LanceDB tries a listing (every operation
starts with one) 6 times over. An endpoint that accepts connections and never answers (a hung store, a stalled
proxy) held a command for 11 minutes and a tool call for 3 to 12, far past the ~60 s a host waits. With these
defaults a request that gets no answer fails after ``READ_TIMEOUT``, a failed request is retried only while
``RETRY_SECONDS`` have not passed since it started (throttling answers and refused connections come back fast and
are retried), so one LanceDB operation gives up within ~35 s and a core-state request within ~5 s.

``read_timeout`` runs from the request's start until the store's first byte back, so it also bounds the upload of a
request's body, however steadily its bytes flow (measured: an 8 MB PUT at 1 MB/s fails after ~7 s): a 5 MB part
(LanceDB's multipart size) needs ~8 Mbit/s up. The ``object_store`` client has no per-byte or per-upload deadline, and
one client serves a connection's reads and writes, so the commands that upload much and that no host waits for
(``BULK_COMMANDS``: import, reembed, optimize, folders) give LanceDB ``BULK_READ_TIMEOUT`` instead, and
``BULK_TIMEOUT`` as the whole request's ``timeout`` (the client's own is 30 s, which would cut the longer
``read_timeout`` short) (``for_bulk``): a 5 MB part then needs ~0.7 Mbit/s, and a hung store holds such a command for
minutes, not seconds. A server's background upkeep compacts on tables opened with them too
(``Connection.upkeep_tables``), its calls' tables keeping the server's. Only LanceDB's store takes them
(``Settings.lance_storage_options``): the core state's requests (and the renewals of leases) keep a server's
deadlines. LanceDB work under a lease (a store's creation, a write under ``Connection.exclusive``, an upkeep) may
outlast the lease's seconds: every lease is renewed while held (``core/lease.py``). A slower link, or a store that is
slow to answer, raises them (``read_timeout`` and ``timeout``) under ``[storage_options]``; a setting given there, or
as the environment variable of the same name in capitals (which LanceDB reads too), is never replaced.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import timedelta

from .errors import ConfigError

READ_TIMEOUT = "5s"  # no byte for this long: the request failed
CONNECT_TIMEOUT = "5s"  # the TCP (and TLS) connection
RETRY_SECONDS = 4  # client_retry_timeout: a failed request is retried until this long after it started
BULK_READ_TIMEOUT = "60s"  # ``for_bulk``: a 5 MB part's upload at ~0.7 Mbit/s
BULK_TIMEOUT = "120s"  # ``for_bulk``: the whole request (above BULK_READ_TIMEOUT, so it does not cut it short)
BULK_COMMANDS = ("import", "reembed", "optimize", "folders")
DEFAULTS = {
    "connect_timeout": CONNECT_TIMEOUT,
    "read_timeout": READ_TIMEOUT,
    "client_retry_timeout": str(RETRY_SECONDS),
}
# LanceDB's own retry settings (its object store takes them from storage_options); obstore takes them as retry_config
RETRY_KEYS = ("client_max_retries", "client_retry_timeout")
DOCS = "docs/configuration.md#deadlines"


def _given(options: Mapping[str, str], key: str) -> bool:
    return key in options or key.upper() in os.environ


def with_deadlines(uri: str, options: Mapping[str, str] | None) -> dict[str, str] | None:
    """``options`` (the ``storage_options`` of the object store at ``uri``) with the deadlines above for those not
    given; unchanged (None when empty) for a directory or ``memory://``, which make no requests. A ``timeout`` given
    (the whole request's) keeps ``read_timeout`` out: it would cut that allowance short. Raises ``ConfigError`` for
    a retry setting that is not a whole number (LanceDB would ignore it silently)."""
    given = dict(options or {})
    retries(given)  # checked before anything is opened
    if not _requests(uri):
        return given or None
    out = dict(given)
    for key, value in DEFAULTS.items():
        if key == "read_timeout" and _given(given, "timeout"):
            continue
        if not _given(given, key):
            out[key] = value
    return out


def _requests(uri: str) -> bool:
    """Whether the store at ``uri`` makes requests (not a directory, ``file://`` or ``memory://``)."""
    return "://" in uri and uri.split("://", 1)[0].lower() not in ("file", "memory")


def for_bulk(uri: str | None, options: Mapping[str, str] | None) -> dict[str, str]:
    """``options`` with the longer deadlines of the commands that upload whole data files and that no host waits for
    (``BULK_COMMANDS``), for LanceDB's store at ``uri``: ``timeout`` = ``BULK_TIMEOUT`` unless it is given, and
    ``read_timeout`` = ``BULK_READ_TIMEOUT`` unless it (or ``timeout``) is given. Never for the core state's
    requests, which run under short leases (``Settings.lance_storage_options``)."""
    out = dict(options or {})
    if uri is None or not _requests(uri):
        return out
    timeout_given = _given(out, "timeout")
    if not timeout_given:
        out["timeout"] = BULK_TIMEOUT
    if not _given(out, "read_timeout") and not timeout_given:
        out["read_timeout"] = BULK_READ_TIMEOUT
    return out


def retries(options: Mapping[str, str]) -> dict[str, int | timedelta]:
    """The retry settings of ``options`` as obstore's ``retry_config`` takes them (``max_retries``,
    ``retry_timeout``); only those given."""
    config: dict[str, int | timedelta] = {}
    for key, name in zip(RETRY_KEYS, ("max_retries", "retry_timeout"), strict=True):
        if key not in options:
            continue
        text = str(options[key]).strip()
        if not text.isdigit():
            raise ConfigError(
                f"storage_options.{key} = {options[key]!r} is not a whole number of "
                f'{"retries" if name == "max_retries" else "seconds"}: write it as, e.g., "{DEFAULTS.get(key, "3")}" '
                f"(see {DOCS})."
            )
        config[name] = int(text) if name == "max_retries" else timedelta(seconds=int(text))
    return config
