"""Protection for the network transports: a plain ASGI middleware in front of the MCP app.

- Bearer tokens (from settings or a tokens file), each naming the agents it may use; compared
  in constant time; 401 without a valid token, 403 when the token does not cover the served agent.
- DNS-rebinding protection: a request whose Host or Origin is not allowed gets 403.
- Request bodies larger than the limit get 413 before they reach the app.
- With ``ui_prefix`` (the memory inspector, ``tiermem.ui``): the page's static files (no memory in them) load
  without a token, so a browser can open the page; its API needs a token like ``/mcp``, and the agents the
  matched token covers travel to the app in ``scope["tiermem.agents"]`` (None: no tokens configured, every
  agent), which shows only those.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import ipaddress
import json
import socket
import tomllib
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base.errors import ConfigError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")


@dataclass(frozen=True)
class Token:
    digest: bytes  # sha256 of the secret: compared in constant time, never logged
    agents: frozenset[str]  # "*" allows every agent
    name: str = ""

    def allows(self, agent: str) -> bool:
        return "*" in self.agents or agent in self.agents


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8")).digest()


# Text that marks an example or placeholder token (the sample configs', docs' and common ones): never a real secret.
PLACEHOLDER_MARKS = (
    "replace",
    "example",
    "changeme",
    "change-me",
    "change_me",
    "placeholder",
    "your-token",
    "your_token",
    "yourtoken",
    "openssl",
    "<",
    ">",
    "...",
    "secret-here",
)
TOKEN_FIX = "generate one with `openssl rand -hex 32` (or `python -c 'import secrets; print(secrets.token_hex(32))'`)"


def make_tokens(entries: Iterable[dict[str, Any]], where: str) -> list[Token]:
    tokens = []
    for n, entry in enumerate(entries):
        secret = entry.get("token")
        agents = entry.get("agents", ["*"])
        if not isinstance(secret, str) or len(secret) < 16:
            raise ConfigError(f"{where}: token #{n + 1} must be a string of at least 16 characters; {TOKEN_FIX}.")
        if looks_like_placeholder(secret):
            raise ConfigError(
                f"{where}: token #{n + 1} ({secret[:24]}...) is a placeholder, not a secret: anyone who "
                f"read the example could use it. Replace it: {TOKEN_FIX}, put that in its place, and "
                "give the same value to your clients."
            )
        if isinstance(agents, str):
            agents = [agents]
        if not agents or not all(isinstance(a, str) and a for a in agents):
            raise ConfigError(f'{where}: token #{n + 1} needs `agents`, a list of agent names or ["*"].')
        tokens.append(Token(_digest(secret), frozenset(agents), str(entry.get("name", f"token-{n + 1}"))))
    return tokens


def looks_like_placeholder(secret: str) -> bool:
    """An example token: it carries placeholder words, or one character repeated."""
    lowered = secret.lower()
    return any(mark in lowered for mark in PLACEHOLDER_MARKS) or len(set(secret)) < 4


def secret_token(secret: str, name: str) -> Token:
    """A token for every agent from a secret this process made (``tiermem ui``, ``serve`` without tokens)."""
    return Token(_digest(secret), frozenset({"*"}), name)


def warn_if_readable(path: Path) -> None:
    """Say so on stderr when a file of secrets can be read by other users (as ssh does for keys)."""
    import sys

    try:
        mode = path.stat().st_mode
    except OSError:
        return  # reading it reports the problem
    if mode & 0o077:
        sys.stderr.write(
            f"tiermem: warning: {path} holds tokens and other users can read it (mode "
            f"{oct(mode & 0o777)}); run `chmod 600 {path}`\n"
        )


def write_private(path: Path, text: str) -> None:
    """Write a file that holds secrets: mode 0600 from its creation (an existing file is narrowed to 0600 first)."""
    import os

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)


def load_tokens_file(path: Path) -> list[Token]:
    """A TOML file with ``[[tokens]]`` tables: ``token = "..."``, ``agents = ["work"]``, optional ``name``."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"Cannot read the tokens file {path}: {exc}.") from exc
    return make_tokens(data.get("tokens", []), f"tokens file {path}")


def listen_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` and listening, or a ConfigError that says what holds the port and what to do."""
    bare = host.strip("[]")
    sock = socket.socket(socket.AF_INET6 if ":" in bare else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((bare, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"Port {port} on {host} is already in use (another `tiermem serve` or `tiermem ui`?). Choose another "
                f"with --port (or `port` in the config file), or stop the process holding it "
                f"(`ss -ltnp 'sport = :{port}'` names it)."
            ) from exc
        raise ConfigError(f"Cannot listen on {host}:{port}: {exc.strerror or exc}. Check --host and --port.") from exc
    return sock


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def default_allowed_hosts(bind: str, port: int) -> list[str]:
    hosts = [f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"]
    if not is_loopback(bind) and bind not in ("0.0.0.0", "::"):
        hosts.append(f"{bind}:{port}")
    return hosts


class Guard:
    def __init__(
        self,
        app: ASGIApp,
        *,
        agent: str,
        tokens: list[Token],
        allowed_hosts: list[str],
        allowed_origins: list[str],
        max_body_bytes: int,
        ui_prefix: str | None = None,
    ) -> None:
        self.app = app
        self.agent = agent
        self.tokens = tokens
        self.allowed_hosts = {h.lower() for h in allowed_hosts}
        self.allowed_origins = {o.lower().rstrip("/") for o in allowed_origins}
        self.max_body_bytes = max_body_bytes
        self.ui_prefix = ui_prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host = headers.get("host", "").lower()
        if host not in self.allowed_hosts:
            await _reply(
                send, 403, f"Host {host!r} is not allowed (DNS-rebinding protection). Add it to allowed_hosts."
            )
            return
        origin = headers.get("origin")
        if origin is not None and origin.lower().rstrip("/") not in self.allowed_origins:
            await _reply(send, 403, f"Origin {origin!r} is not allowed. Add it to allowed_origins.")
            return
        ui = self._ui_path(scope.get("path", ""))
        scope["tiermem.agents"] = None
        if self.tokens:
            token = self._match(headers.get("authorization", ""))
            if token is None and ui == "static" and scope.get("method") in ("GET", "HEAD"):
                pass  # the inspector's page itself: static files, no memory in them
            elif token is None:
                await _reply(
                    send, 401, "A valid bearer token is required.", {"www-authenticate": 'Bearer realm="tiermem"'}
                )
                return
            elif ui is not None:
                scope["tiermem.agents"] = token.agents  # the inspector shows only these agents
            elif not token.allows(self.agent):
                await _reply(send, 403, f"This token may not use agent {self.agent!r}.")
                return
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            await _reply(send, 413, f"Request body larger than {self.max_body_bytes} bytes.")
            return
        await self.app(scope, self._limited(receive), send)

    def _ui_path(self, path: str) -> str | None:
        """ "api" or "static" for a path of the inspector, else None."""
        prefix = self.ui_prefix
        if prefix is None or not (path == prefix or path.startswith(prefix + "/")):
            return None
        return "api" if path.startswith(prefix + "/api/") or path == prefix + "/api" else "static"

    def _match(self, header: str) -> Token | None:
        scheme, _, secret = header.partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            return None
        digest = _digest(secret.strip())
        found = None
        for token in self.tokens:  # compare against every token: timing says nothing about which matched
            if hmac.compare_digest(digest, token.digest):
                found = token
        return found

    def _limited(self, receive: Receive) -> Receive:
        seen = 0

        async def wrapped() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body_bytes:
                    raise BodyTooLarge(self.max_body_bytes)
            return message

        return wrapped


class BodyTooLarge(Exception):
    """A chunked body passed the limit; the connection is dropped."""


async def _reply(send: Send, status: int, text: str, extra: dict[str, str] | None = None) -> None:
    body = json.dumps({"error": text}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
