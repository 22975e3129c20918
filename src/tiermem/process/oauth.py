"""OAuth 2.1 resource server for the network transports (the MCP authorization specification).

With ``oauth_issuer`` and ``public_url`` set, ``netguard.Guard`` accepts, besides the static bearer tokens, access
tokens the authorization server at ``oauth_issuer`` issued for this server:

- ``ResourceServer.metadata_document`` is this server's Protected Resource Metadata (RFC 9728), served at
  ``/.well-known/oauth-protected-resource/<path>`` (and at the root well-known path, for older clients);
- ``ResourceServer.verify`` checks a token locally when it is a JWT (a signature by a key of the issuer's JWKS, found
  through the issuer's metadata, cached, fetched again for an unknown key id at most every ``JWKS_REFETCH_SECONDS``;
  ``iss``, ``aud`` = this server's canonical URI (RFC 8707), ``exp``, ``nbf``, an allowed asymmetric algorithm,
  never ``none`` nor an HMAC one; ``typ``, when present, that of an access token; a non-blank ``sub``), or asks the
  issuer's introspection endpoint (RFC 7662) with ``oauth_introspect``;
- a failed call to the issuer (metadata, JWKS, introspection) is remembered: for ``ISSUER_BACKOFF_SECONDS`` (doubling
  on each further failure, up to ``ISSUER_BACKOFF_MAX_SECONDS``) tokens that need the issuer get ``IssuerUnavailable``
  (503) without asking it again, so requests cannot make the server hammer an issuer that is down; the failure is
  logged once per back-off;
- ``READ_SCOPE`` is needed for any request, ``WRITE_SCOPE`` for a tool that changes memory (the guard answers 403
  ``insufficient_scope`` naming the scope, RFC 6750 §3.1);
- ``ResourceServer.agent_for`` decides which agent a principal's request uses (its own, or a shared one).

Its settings, checked, are ``oauth_settings.OAuthSettings``.

The token is never sent anywhere but the issuer's introspection endpoint (no passthrough), and never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

import anyio
import httpx
import jwt
from mcp.server.auth.provider import AccessToken
from mcp.shared.auth import ProtectedResourceMetadata

from .netguard import AuthorityUnavailable, Send
from .oauth_claims import LEEWAY_SECONDS, Refused, check_introspected, check_subject, check_type
from .oauth_settings import READ_SCOPE, SCOPES, USER_AGENT_PREFIX, WRITE_SCOPE, OAuthSettings

log = logging.getLogger(__name__)
_T = TypeVar("_T")

JWKS_MAX_AGE_SECONDS = 3600.0  # keys fetched this long ago are fetched again before the next use
JWKS_REFETCH_SECONDS = 30.0  # an unknown key id fetches the JWKS again at most this often
HTTP_TIMEOUT = 10.0
VERIFIED_CACHE = 4096  # verified JWTs remembered (the most recently used)
VERIFIED_SECONDS = 300.0  # ... for at most this long (a key the issuer withdrew stops being trusted within it)
ISSUER_BACKOFF_SECONDS = 2.0  # after a failed call the issuer is not asked again for this long ...
ISSUER_BACKOFF_MAX_SECONDS = 60.0  # ... doubled on each further failure up to this, and reset by a success


class IssuerUnavailable(AuthorityUnavailable):
    """The authorization server's metadata, keys or introspection endpoint cannot be reached: the guard answers 503,
    not 401 (the token may be fine)."""


@dataclass
class _Keys:
    by_kid: dict[str, jwt.PyJWK] = field(default_factory=dict)
    unnamed: list[jwt.PyJWK] = field(default_factory=list)  # keys without a kid
    fetched_at: float = float("-inf")


class ResourceServer:
    """Verifies access tokens for this server (the SDK's ``TokenVerifier`` protocol: ``verify_token``)."""

    read_scope = READ_SCOPE
    write_scope = WRITE_SCOPE

    def __init__(self, settings: OAuthSettings, *, client: httpx.AsyncClient | None = None) -> None:
        self.settings = settings
        self._client = client
        self._issuer_metadata: dict[str, Any] | None = None
        self._keys = _Keys()
        self._last_refetch = float("-inf")
        self._lock = anyio.Lock()
        self._down_until = float("-inf")  # the issuer failed: not asked again before then (monotonic)
        self._down_for = 0.0  # the current back-off (0: the last call succeeded)
        self._down_reason = ""
        # JWTs verified lately (sha256 of the token -> its principal, when verified): a client sends one token with
        # many requests, and an RSA verification costs the event loop ~0.2-1 ms each time
        self._verified: OrderedDict[bytes, tuple[AccessToken, float]] = OrderedDict()

    # -- what the guard serves and says -------------------------------------------------------------------------

    @property
    def metadata_url(self) -> str:
        return self.settings.metadata_url

    def metadata_paths(self) -> frozenset[str]:
        """The paths the PRM document is served at: RFC 9728's (with the resource's path) and the root one."""
        return frozenset({urlsplit(self.metadata_url).path, "/.well-known/oauth-protected-resource"})

    def metadata_document(self) -> bytes:
        doc = ProtectedResourceMetadata.model_validate(  # from strings: the model keeps a path-less issuer exact
            {
                "resource": self.settings.resource,
                "authorization_servers": [self.settings.issuer],
                "scopes_supported": list(SCOPES),
                "resource_name": "tiermem",
            }
        )
        return doc.model_dump_json(exclude_none=True).encode()

    async def send_metadata(self, send: Send, method: str) -> None:
        """The answer at a metadata path: the document (GET, HEAD), or the CORS preflight's (OPTIONS)."""
        cors = [
            (b"access-control-allow-origin", b"*"),
            (b"access-control-allow-methods", b"GET, OPTIONS"),
            (b"access-control-allow-headers", b"mcp-protocol-version"),
        ]
        if method == "OPTIONS":
            await send({"type": "http.response.start", "status": 204, "headers": cors})
            await send({"type": "http.response.body", "body": b""})
            return
        document = self.metadata_document()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(document)).encode()),
            (b"cache-control", b"public, max-age=3600"),
            *cors,
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": document if method != "HEAD" else b""})

    def challenge(self, error: str | None = None, description: str | None = None, scope: str | None = None) -> str:
        """A ``WWW-Authenticate`` value: always ``resource_metadata`` (MCP), the error and the scopes asked for."""
        parts = []
        if error:
            parts.append(f'error="{error}"')
        if description:
            parts.append(f'error_description="{description}"')
        parts.append(f'scope="{scope or " ".join(SCOPES)}"')
        parts.append(f'resource_metadata="{self.metadata_url}"')
        return "Bearer " + ", ".join(parts)

    # -- verification ------------------------------------------------------------------------------------------

    async def verify_token(self, token: str) -> AccessToken | None:
        """The token's principal and scopes, or None when it is not valid for this server (the reason is logged at
        debug level, the token never). Raises IssuerUnavailable when the issuer cannot be asked."""
        try:
            if self.settings.introspect:
                return await self._introspect(token)
            digest = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
            remembered = self._remembered(digest)
            if remembered is not None:
                return remembered
            access = await self._verify_jwt(token)
            self._verified[digest] = (access, time.monotonic())
            if len(self._verified) > VERIFIED_CACHE:
                self._verified.popitem(last=False)
            return access
        except jwt.PyJWTError as exc:
            log.debug("access token refused: %s", exc)
            return None
        except Refused as exc:
            log.debug("access token refused: %s", exc)
            return None

    def _remembered(self, digest: bytes) -> AccessToken | None:
        """A token verified less than VERIFIED_SECONDS ago and not expired since (the same answer a new check gives:
        its signature, issuer and audience do not change; its expiry is checked again here)."""
        entry = self._verified.get(digest)
        if entry is None:
            return None
        access, when = entry
        expired = access.expires_at is not None and access.expires_at + LEEWAY_SECONDS < time.time()
        if expired or time.monotonic() - when > VERIFIED_SECONDS:
            del self._verified[digest]
            return None
        self._verified.move_to_end(digest)
        return access

    async def _verify_jwt(self, token: str) -> AccessToken:
        header = jwt.get_unverified_header(token)
        alg = header.get("alg")
        if alg not in self.settings.algorithms:
            raise Refused(f"algorithm {alg!r} is not allowed")
        check_type(header)
        key = await self._key(header.get("kid"), alg)
        claims = jwt.decode(
            token,
            key=key,
            algorithms=[alg],
            audience=self.settings.audience,
            issuer=self.settings.issuer,
            leeway=LEEWAY_SECONDS,
            options={"require": ["exp", "iss", "aud", "sub"], "verify_signature": True},
        )
        check_subject(claims)
        return self._access_token(token, claims)

    async def _key(self, kid: Any, alg: str) -> jwt.PyJWK:
        keys = await self._jwks(force=False)
        found = self._pick(keys, kid, alg)
        if found is None:
            # key rotation: an unknown kid fetches the keys again, at most every JWKS_REFETCH_SECONDS
            if time.monotonic() - self._last_refetch >= JWKS_REFETCH_SECONDS:
                self._last_refetch = time.monotonic()
                keys = await self._jwks(force=True)
                found = self._pick(keys, kid, alg)
        if found is None:
            raise Refused(f"no key {kid!r} for {alg} in the issuer's JWKS")
        return found

    @staticmethod
    def _pick(keys: _Keys, kid: Any, alg: str) -> jwt.PyJWK | None:
        if isinstance(kid, str):
            candidate = keys.by_kid.get(kid)
        elif kid is None and len(keys.by_kid) + len(keys.unnamed) == 1:
            candidate = next(iter([*keys.by_kid.values(), *keys.unnamed]))
        else:
            candidate = None
        if candidate is None:
            return None
        key_alg = candidate._jwk_data.get("alg")
        if key_alg is not None and key_alg != alg:
            return None  # a key published for one algorithm is not used with another
        return candidate

    async def _jwks(self, *, force: bool) -> _Keys:
        async with self._lock:
            if not force and time.monotonic() - self._keys.fetched_at < JWKS_MAX_AGE_SECONDS:
                return self._keys
            self._keys = await self._ask_issuer(self._fetch_keys)
            return self._keys

    async def _ask_issuer(self, ask: Callable[[], Awaitable[_T]]) -> _T:
        """``ask()``, unless the issuer failed less than the back-off ago (then IssuerUnavailable at once); a failure
        starts or doubles the back-off and is logged (once per back-off, not per request), a success ends it."""
        started = time.monotonic()
        if self._down_until > started:
            wait = self._down_until - started
            raise IssuerUnavailable(f"{self._down_reason} (not asked again for {wait:.0f} s)", wait)
        try:
            result = await ask()
        except IssuerUnavailable as exc:
            if self._down_until <= started:  # not already recorded by a call that failed meanwhile
                self._down_for = min(ISSUER_BACKOFF_MAX_SECONDS, self._down_for * 2 or ISSUER_BACKOFF_SECONDS)
                self._down_until = time.monotonic() + self._down_for
                self._down_reason = str(exc)
                log.warning(
                    "cannot check access tokens: %s; tokens that need the authorization server get 503 for %.0f s",
                    exc,
                    self._down_for,
                )
            exc.retry_after = max(0.0, self._down_until - time.monotonic())
            raise
        self._down_for = 0.0
        return result

    async def _fetch_keys(self) -> _Keys:
        """The issuer's signing keys, fetched from the ``jwks_uri`` of its metadata."""
        meta = await self._metadata()
        uri = meta.get("jwks_uri")
        if not isinstance(uri, str):
            raise IssuerUnavailable(f"the metadata of {self.settings.issuer} has no jwks_uri")
        data = await self._get_json(uri)
        keys = _Keys(fetched_at=time.monotonic())
        for entry in data.get("keys", []) if isinstance(data, dict) else []:
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig" or entry.get("kty") == "oct":
                continue  # encryption keys, and symmetric keys (never published; never trusted)
            try:
                key = jwt.PyJWK(entry)
            except jwt.PyJWTError as exc:
                log.debug("skipping a key of the issuer's JWKS: %s", exc)
                continue
            if isinstance(entry.get("kid"), str):
                keys.by_kid[entry["kid"]] = key
            else:
                keys.unnamed.append(key)
        return keys

    async def _metadata(self) -> dict[str, Any]:
        """The issuer's metadata (RFC 8414, else OpenID Connect Discovery), fetched once; its ``issuer`` must be
        the configured one exactly."""
        if self._issuer_metadata is not None:
            return self._issuer_metadata
        issuer = self.settings.issuer
        parts = urlsplit(issuer)
        origin, path = f"{parts.scheme}://{parts.netloc}", parts.path.rstrip("/")
        tried = []
        for url in (
            f"{origin}/.well-known/oauth-authorization-server{path}",
            f"{origin}/.well-known/openid-configuration{path}",
            f"{origin}{path}/.well-known/openid-configuration",
        ):
            tried.append(url)
            try:
                data = await self._get_json(url)
            except _NotFound:
                continue
            if not isinstance(data, dict) or data.get("issuer") != issuer:
                raise IssuerUnavailable(
                    f"{url} names issuer {data.get('issuer') if isinstance(data, dict) else None!r}, not {issuer!r}: "
                    "check oauth_issuer (it must match the issuer's own value exactly)"
                )
            self._issuer_metadata = data
            return data
        raise IssuerUnavailable(f"no authorization server metadata at {', '.join(tried)}")

    async def _get_json(self, url: str) -> Any:
        try:
            async with self._http() as client:
                response = await client.get(url, headers={"accept": "application/json"})
        except httpx.HTTPError as exc:
            raise IssuerUnavailable(f"cannot reach {url}: {exc}") from exc
        if response.status_code == 404:
            raise _NotFound(url)
        if response.status_code != 200:
            raise IssuerUnavailable(f"{url} answered {response.status_code}")
        try:
            return response.json()
        except json.JSONDecodeError as exc:
            raise IssuerUnavailable(f"{url} did not answer JSON") from exc

    def _http(self) -> Any:
        """One client for the process's life (made on first use, on the server's event loop): introspection asks
        on every request, and a kept connection to the issuer spares a TCP and TLS handshake each time."""
        from contextlib import nullcontext

        if self._client is None:
            self._client = httpx.AsyncClient(timeout=HTTP_TIMEOUT, follow_redirects=False)
        return nullcontext(self._client)

    async def _introspect(self, token: str) -> AccessToken:
        return await self._ask_issuer(lambda: self._introspect_once(token))

    async def _introspect_once(self, token: str) -> AccessToken:
        meta = await self._metadata()
        endpoint = meta.get("introspection_endpoint")
        if not isinstance(endpoint, str):
            raise IssuerUnavailable(f"oauth_introspect is set but {self.settings.issuer} has no introspection_endpoint")
        auth = httpx.BasicAuth(self.settings.client_id or "", self.settings.client_secret or "")
        try:
            async with self._http() as client:
                response = await client.post(
                    endpoint,
                    data={"token": token, "token_type_hint": "access_token"},
                    auth=auth,
                    headers={"accept": "application/json"},
                )
        except httpx.HTTPError as exc:
            raise IssuerUnavailable(f"cannot reach {endpoint}: {exc}") from exc
        if response.status_code == 400:  # a token it will not look at (oidc-provider: a JWT): not one it vouches for
            raise Refused(f"the introspection endpoint refused it: {response.text[:200]}")
        if response.status_code != 200:
            raise IssuerUnavailable(f"{endpoint} answered {response.status_code} (check oauth_client_id/secret)")
        try:
            claims = response.json()
        except json.JSONDecodeError as exc:
            raise IssuerUnavailable(f"{endpoint} did not answer JSON") from exc
        claims = check_introspected(claims, self.settings.issuer, self.settings.audience)
        return self._access_token(token, claims)

    def _access_token(self, token: str, claims: dict[str, Any]) -> AccessToken:
        scope = claims.get("scope", claims.get("scp", ""))
        scopes = scope.split() if isinstance(scope, str) else [s for s in scope if isinstance(s, str)]
        client_id = claims.get("client_id", claims.get("azp", ""))
        exp = claims.get("exp")
        return AccessToken(
            token=token,
            client_id=str(client_id or ""),
            scopes=scopes,
            expires_at=int(exp) if isinstance(exp, int | float) else None,
            resource=self.settings.resource,
            subject=str(claims["sub"]),
            claims={"iss": self.settings.issuer, **{k: v for k, v in claims.items() if k != "scope"}},
        )

    def principal(self, token: AccessToken) -> tuple[Any, Any]:
        """``scope["user"]`` and ``scope["auth"]`` as the SDK's bearer middleware sets them: its transports bind each
        session to the principal that opened it (another principal gets "Session not found")."""
        from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
        from starlette.authentication import AuthCredentials

        return AuthenticatedUser(token), AuthCredentials(token.scopes)

    # -- which agents a principal may use ------------------------------------------------------------------------

    def own_agent(self, token: AccessToken) -> str:
        """The user's own agent: its name is made from the subject (readable) and a hash of issuer and subject
        (distinct for distinct subjects, whatever characters they hold)."""
        subject = token.subject or ""
        readable = re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")[:32] or "user"
        digest = hashlib.sha256(f"{self.settings.issuer}\0{subject}".encode()).hexdigest()[:12]
        return f"{USER_AGENT_PREFIX}{readable}-{digest}"

    def agents_for(self, token: AccessToken) -> frozenset[str]:
        """Every agent the token's user may use: its own, and the shared ones naming its subject or a group of it."""
        who = {token.subject or ""} | {f"group:{g}" for g in self.groups_of(token)}
        return frozenset(
            {self.own_agent(token), *(name for name, members in self.settings.shared_agents if who & members)}
        )

    def agent_for(self, token: AccessToken, requested: str | None) -> str | None:
        """The agent a request uses: ``requested`` (``?agent=``) if the user may use it, else None; the user's own
        agent when it asks for none. Decided from the token and the settings alone, never the store, and compared in
        constant time: the answer says nothing of which agents exist."""
        if not requested:
            return self.own_agent(token)
        found = None
        wanted = requested.encode("utf-8", "replace")
        for name in sorted(self.agents_for(token)):
            if hmac.compare_digest(name.encode(), wanted):
                found = name
        return found

    def groups_of(self, token: AccessToken) -> frozenset[str]:
        """The groups the token's ``groups_claim`` names (a list of strings, or one space-separated string)."""
        value = (token.claims or {}).get(self.settings.groups_claim)
        if isinstance(value, str):
            return frozenset(value.split())
        if isinstance(value, list):
            return frozenset(v for v in value if isinstance(v, str))
        return frozenset()


class _NotFound(Exception):
    pass
