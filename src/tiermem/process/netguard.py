"""Protection for the network transports: a plain ASGI middleware in front of the MCP app.

- Bearer tokens (from settings or a tokens file), each naming the agents it may use; compared
  in constant time; 401 without a valid token, 403 when the token does not cover the served agent.
- DNS-rebinding protection: a request whose Host or Origin is not allowed gets 403.
- Request bodies larger than the limit get 413 before they reach the app (a chunked body, which names no length, is
  read here up to the limit and handed on whole).
- CORS for the allowed origins (``cors``): their preflights are answered without a token, and every answer to them
  (401s included) lets their pages read it. Other origins get 403, no CORS header.
- A request with more than one ``Authorization`` header gets 400 ``invalid_request`` (which one counts is
  ambiguous).
- A WebSocket handshake gets 403: nothing here speaks WebSocket, so none reaches an app unchecked.
- With ``ui_prefix`` (the memory inspector, ``tiermem.ui``): the page's static files (no memory in them) load
  without a token, so a browser can open the page; its API needs a token like ``/mcp``, and the agents the
  matched token covers travel to the app in ``scope["tiermem.agents"]`` (None: no tokens configured, every
  agent), which shows only those.
- With ``oauth`` (``oauth.ResourceServer``): access tokens of the configured authorization server too, besides the
  static tokens. Its Protected Resource Metadata is served without a token; every 401 carries
  ``WWW-Authenticate: Bearer resource_metadata=...``; a request needs the read scope, a call of a tool not in
  ``read_only_tools`` (and a write through the inspector's API) the write scope, else 403 ``insufficient_scope``.
  The token's principal travels in ``scope["user"]`` / ``scope["auth"]`` as the SDK's bearer middleware puts it
  (its transports bind a session to the principal that opened it); a static token's too (``principal``: one made
  from the token's digest), so its sessions are bound to it likewise.

Why this module is long: the guard is one ordered pass over a request (Host, the metadata, Origin and CORS, one
Authorization header, static tokens or OAuth with its scopes, the body limit), and the static tokens' configuration
(their files, placeholders refused, the listening socket) sits beside the tokens it checks.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import ipaddress
import json
import math
import socket
import tomllib
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..base.errors import ConfigError
from . import cors

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")
UNAVAILABLE = "The authorization server cannot be reached right now to check the token; try again shortly."


class TokenAuthority(Protocol):
    """What the guard needs of an OAuth resource server (``oauth.ResourceServer``)."""

    read_scope: str
    write_scope: str

    async def verify_token(self, token: str) -> Any: ...  # an SDK ``AccessToken``, or None

    def challenge(self, error: str | None = None, description: str | None = None, scope: str | None = None) -> str: ...

    def metadata_paths(self) -> frozenset[str]: ...

    async def send_metadata(self, send: Send, method: str) -> None: ...  # the answer at a metadata path

    def agents_for(self, token: Any) -> frozenset[str]: ...

    def agent_for(self, token: Any, requested: str | None) -> str | None: ...

    def principal(self, token: Any) -> tuple[Any, Any]: ...  # scope["user"], scope["auth"] as the SDK sets them


class AuthorityUnavailable(Exception):
    """The authorization server cannot be asked about a token (503: the token may be fine). The message is for the
    log (it names the issuer's URLs and the error), never for the client; ``retry_after``: the seconds until the
    authority will be asked again, when known (``Retry-After``)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class Token:
    digest: bytes  # sha256 of the secret: compared in constant time, never logged
    agents: frozenset[str]  # "*" allows every agent
    name: str = ""

    def allows(self, agent: str) -> bool:
        return "*" in self.agents or agent in self.agents

    @property
    def owner(self) -> str:
        """Who holds this token, as the sessions it opens are bound to: derived from its digest (never the token, and
        distinct for distinct tokens even when their names are the same)."""
        return hashlib.sha256(b"tiermem session owner\0" + self.digest).hexdigest()[:32]


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
    """The tokens of ``entries`` (``name``, ``token``, ``agents``: each names the agents it may use, ``["*"]`` every
    one; no default, and no other key: ``config.token_entry_problem``), or ``ConfigError`` naming the entry."""
    entries = list(entries)
    problem = tokens_problem(entries)
    if problem is not None:
        raise ConfigError(f"{where}: {problem}.")
    tokens = []
    for n, entry in enumerate(entries):
        agents = entry["agents"]
        agents = [agents] if isinstance(agents, str) else agents
        tokens.append(Token(_digest(entry["token"]), frozenset(agents), str(entry.get("name", f"token-{n + 1}"))))
    return tokens


def tokens_problem(entries: Iterable[object]) -> str | None:
    """What is wrong with the first bad entry of ``entries`` (naming the entry, never its secret), or None. Checked
    when a server takes its tokens (``make_tokens``) and, for the settings' own tokens, when the settings are loaded
    (the CLI's ``SETTING_CHECKS``)."""
    from ..base.config import token_entry_problem

    for n, entry in enumerate(entries):
        problem = token_entry_problem(entry)
        if problem is not None:
            return f"{_named(n, entry)}: {problem}"
        assert isinstance(entry, dict)  # (token_entry_problem refuses anything else)
        problem = secret_problem(entry.get("token"), _named(n, entry))
        if problem is not None:
            return problem
        agents = entry["agents"]
        if isinstance(agents, str):
            agents = [agents]
        if not agents or not all(isinstance(a, str) and a for a in agents):
            return f'{_named(n, entry)} needs `agents`, a list of agent names or ["*"]'
    return None


def secret_problem(secret: object, label: str) -> str | None:
    """What makes ``secret`` unfit as a bearer token (too short, an example's placeholder, a character no HTTP client
    can send), saying what to do, with ``label`` naming it ("token #1", "the token"); None when it is fit."""
    if not isinstance(secret, str) or len(secret) < 16:
        return f"{label} must be a string of at least 16 characters; {TOKEN_FIX}"
    if looks_like_placeholder(secret):
        return (
            f"{label} ({secret[:24]}...) is a placeholder, not a secret: anyone who read the example could use it. "
            f"Replace it: {TOKEN_FIX}, put that in its place, and give the same value to your clients"
        )
    if not all("!" <= c <= "~" for c in secret):
        return (
            f"{label} has characters other than visible ASCII (letters, digits and punctuation; no spaces, no "
            "accented letters): HTTP clients send headers as ASCII, so no client could present it. "
            f"Replace it: {TOKEN_FIX}"
        )
    return None


def _named(n: int, entry: object) -> str:
    """A token's entry as an error names it: its number, and its name when it has one (never its secret)."""
    name = entry.get("name") if isinstance(entry, dict) else None
    return f"token #{n + 1}" + (f" ({name!r})" if isinstance(name, str) else "")


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
    other = [key for key in data if key != "tokens"]
    if other:  # `[[token]]`: no token at all, not the ones meant
        raise ConfigError(
            f"The tokens file {path} has `{other[0]}`, which is not a table of a tokens file: write each token as a "
            "[[tokens]] table (name, token, agents)."
        )
    entries = data.get("tokens", [])
    if not isinstance(entries, list):
        raise ConfigError(f"The tokens file {path}: `tokens` must be [[tokens]] tables (name, token, agents).")
    return make_tokens(entries, f"tokens file {path}")


def listen_socket(host: str, port: int, *, choose: str = "--port (or `port` in the config file)") -> socket.socket:
    """A socket bound to ``host:port`` and listening, or a ConfigError that says what holds the port and what to do
    (``choose``: how this command takes another port)."""
    bare = host.strip("[]")
    # proto IPPROTO_TCP, not 0: asyncio turns Nagle off (TCP_NODELAY) only on accepted sockets that say they are TCP;
    # without it a response's body waits for the client's delayed ACK of its headers (+40 ms on every answer)
    family = socket.AF_INET6 if ":" in bare else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((bare, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"Port {port} on {host} is already in use (another `tiermem serve` or `tiermem ui`?). Choose another "
                f"with {choose}, or stop the process holding it "
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


def url_host(host: str) -> str:
    """``host`` as a URL and a ``Host`` header write it: an IPv6 address in brackets (``[::1]``)."""
    bare = host.strip("[]")
    return f"[{bare}]" if ":" in bare else bare


def shown_host(bind: str) -> str:
    """The host of the URLs a server bound to ``bind`` prints: a wildcard or ``localhost`` as the loopback address."""
    bare = bind.strip("[]")
    if bare in ("0.0.0.0", "localhost"):
        return "127.0.0.1"
    return "[::1]" if bare == "::" else url_host(bare)


def default_allowed_hosts(bind: str, port: int) -> list[str]:
    """The ``Host`` values a server bound to ``bind`` answers by itself: the local names, and the bound address (a
    loopback alias such as 127.0.0.2 too), bracketed when IPv6."""
    hosts = [f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"]
    own = f"{url_host(bind)}:{port}"
    if bind.strip("[]") not in ("0.0.0.0", "::") and own not in hosts:
        hosts.append(own)
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
        oauth: TokenAuthority | None = None,
        read_only_tools: frozenset[str] = frozenset(),
        public_paths: frozenset[str] = frozenset(),
        principal: Callable[[Token], tuple[Any, Any]] | None = None,
    ) -> None:
        """``oauth``: also accept that authority's access tokens; ``read_only_tools``: the tools its tokens may call
        with the read scope alone (any other tool needs the write scope); ``public_paths``: paths a GET or HEAD
        reaches without a token, as the inspector's page does (``tiermem ui``'s redirect from ``/`` to it, its
        ``/favicon.ico``: nothing of memory); ``principal``: ``scope["user"]`` and ``scope["auth"]`` for a request
        with a static token, so the SDK's transports bind each session to the token that opened it (another token
        gets "Session not found"), as they do for OAuth principals."""
        self.app = app
        self.agent = agent
        self.tokens = tokens
        self.allowed_hosts = {h.lower() for h in allowed_hosts}
        self.allowed_origins = {o.lower().rstrip("/") for o in allowed_origins}
        self.max_body_bytes = max_body_bytes
        self.ui_prefix = ui_prefix
        self.oauth = oauth
        self.read_only_tools = read_only_tools
        self.public_paths = public_paths
        self.principal = principal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self.app(scope, receive, send)
            return  # no WebSocket scope reaches here (connections.py serves none); were one to, no app would see it
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if "websocket" in headers.get("upgrade", "").lower():  # a handshake the server did not upgrade (connections.py)
            await _reply(send, 403, WEBSOCKET_REFUSED)
            return
        host = headers.get("host", "").lower()
        if host not in self.allowed_hosts:
            await _reply(
                send, 403, f"Host {host!r} is not allowed (DNS-rebinding protection). Add it to allowed_hosts."
            )
            return
        if self.oauth is not None and scope.get("path", "") in self.oauth.metadata_paths():
            await self.oauth.send_metadata(send, scope.get("method", "GET"))
            return  # public metadata, fetched by clients of any origin (CORS): no token, nothing of memory
        origin = headers.get("origin")
        if origin is not None:
            if origin.lower().rstrip("/") not in self.allowed_origins:
                await _reply(send, 403, f"Origin {origin!r} is not allowed. Add it to allowed_origins.")
                return
            if cors.is_preflight(scope.get("method", ""), headers):
                await cors.preflight(send, origin)  # browsers send no token on a preflight; it reads nothing
                return
            send = cors.with_cors(send, origin)
        if sum(1 for name, _ in scope.get("headers", []) if name.lower() == b"authorization") > 1:
            await self._ambiguous(send)
            return
        ui = self._ui_path(scope.get("path", ""))
        public = scope.get("method") in ("GET", "HEAD") and (ui == "static" or scope.get("path") in self.public_paths)
        scope["tiermem.agents"] = None
        token = self._match(headers.get("authorization", "")) if self.oauth is not None or self.tokens else None
        if token is not None and self.principal is not None:
            scope["user"], scope["auth"] = self.principal(token)
        if self.oauth is not None:
            if token is None:
                checked = await self._oauth(scope, receive, send, headers, ui, public)
                if checked is None:
                    return
                receive = checked
            elif ui is not None:
                scope["tiermem.agents"] = token.agents
            elif not token.allows(self.agent):
                await _reply(send, 403, f"This token may not use agent {self.agent!r}.")
                return
        elif self.tokens:
            if token is None and public:
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
        if "transfer-encoding" in headers or (length is not None and int(length) > 0):
            # read here, up to the limit (a chunked body names no length to check): the app gets a whole body, and a
            # client that goes away halfway (or is cut off by http_body_timeout) ends here, not in the app's traceback
            body = await self._read_body(receive, send)
            if body is None:
                return
            receive = replay_body(body, receive)
        await self.app(scope, receive, send)

    async def _ambiguous(self, send: Send) -> None:
        """400 for a request with several ``Authorization`` headers (RFC 6750 ``invalid_request``)."""
        text = "Send one Authorization header, not several."
        if self.oauth is not None:
            challenge = self.oauth.challenge("invalid_request", "Send one Authorization header")
        else:
            challenge = 'Bearer realm="tiermem", error="invalid_request"'
        await _reply(send, 400, text, {"www-authenticate": challenge})

    async def _oauth(
        self, scope: Scope, receive: Receive, send: Send, headers: dict[str, str], ui: str | None, public: bool
    ) -> Receive | None:
        """A request without a static token, under OAuth: the receive to go on with (the body replayed when it was
        read to see which tools it calls), or None when it was answered (401, 403, 503)."""
        authority = self.oauth
        assert authority is not None
        scheme, _, secret = headers.get("authorization", "").partition(" ")
        secret = secret.strip() if scheme.lower() == "bearer" else ""
        if not secret:
            if public:
                return receive  # the inspector's page itself: static files, no memory in them
            await _reply(send, 401, "A valid bearer token is required.", {"www-authenticate": authority.challenge()})
            return None
        try:
            access = await authority.verify_token(secret)
        except AuthorityUnavailable as exc:  # the details are in the log (oauth.py); callers learn only this
            later = {"retry-after": str(max(1, math.ceil(exc.retry_after)))} if exc.retry_after else {}
            await _reply(send, 503, UNAVAILABLE, later)
            return None
        if access is None:
            challenge = authority.challenge("invalid_token", "The access token is not valid for this server")
            await _reply(send, 401, "The access token is not valid for this server.", {"www-authenticate": challenge})
            return None
        scope["user"], scope["auth"] = authority.principal(access)
        if authority.read_scope not in access.scopes:
            await self._insufficient(send, authority.read_scope)
            return None
        if ui is None:
            from urllib.parse import parse_qs

            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            agent = authority.agent_for(access, (query.get("agent") or [None])[0])
            if agent is None:  # the same answer whether that agent exists or not
                await _reply(send, 403, "This token may not use the agent asked for (?agent=).")
                return None
            scope["tiermem.agent"] = agent  # its own MCP server answers (server/tenants.py)
        if ui is not None:
            scope["tiermem.agents"] = authority.agents_for(access)  # the inspector shows the user's agents only
            if scope.get("method") not in ("GET", "HEAD", "OPTIONS") and authority.write_scope not in access.scopes:
                await self._insufficient(send, authority.write_scope)
                return None
            return receive
        if scope.get("method") != "POST" or authority.write_scope in access.scopes:
            return receive
        body = await self._read_body(receive, send)
        if body is None:
            return None
        if _calls_tool_outside(body, self.read_only_tools):
            await self._insufficient(send, authority.write_scope)
            return None
        return replay_body(body, receive)

    async def _insufficient(self, send: Send, needed: str) -> None:
        assert self.oauth is not None
        wanted = " ".join(dict.fromkeys([self.oauth.read_scope, needed]))
        challenge = self.oauth.challenge("insufficient_scope", f"This request needs the scope {needed}", wanted)
        await _reply(
            send, 403, f"insufficient_scope: this request needs the scope {needed}.", {"www-authenticate": challenge}
        )

    async def _read_body(self, receive: Receive, send: Send) -> bytes | None:
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None  # the client went away
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.max_body_bytes:
                await _reply(send, 413, f"Request body larger than {self.max_body_bytes} bytes.")
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

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


def _calls_tool_outside(body: bytes, allowed: frozenset[str]) -> bool:
    """Whether the JSON-RPC message (or batch) ``body`` calls a tool not in ``allowed``, read by both JSON parsers the
    SDK's transports use (the standard library's and pydantic's: where they differ, either reading counts). A body
    neither can read is refused too (fail closed: a read-only token has no use for it)."""
    import pydantic_core

    readings = []
    for parse in (json.loads, pydantic_core.from_json):
        try:
            readings.append(parse(body))
        except (ValueError, UnicodeDecodeError, RecursionError):
            continue
    if not readings:
        return True
    for data in readings:
        for message in data if isinstance(data, list) else [data]:
            if isinstance(message, dict) and message.get("method") == "tools/call":
                params = message.get("params")
                name = params.get("name") if isinstance(params, dict) else None
                if name not in allowed:
                    return True
    return False


def replay_body(body: bytes, receive: Receive) -> Receive:
    """A receive that gives ``body`` (already read) first, then what the client sends next (its disconnect)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


WEBSOCKET_REFUSED = "WebSocket is not served here; MCP clients use /mcp (or /sse) over HTTP."


def error_body(text: str) -> bytes:
    """The JSON body of every answer the HTTP layer refuses with itself (the guard, the connection limits)."""
    return json.dumps({"error": text}).encode()


async def _reply(send: Send, status: int, text: str, extra: dict[str, str] | None = None) -> None:
    body = error_body(text)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
