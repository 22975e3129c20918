"""The OAuth resource server's settings, checked (``from_settings``): the issuer, this server's canonical URI (RFC 8707)
and audience, the algorithms accepted, introspection, the groups claim and the shared agents. ``oauth.py`` uses them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from mcp.server.auth.routes import build_resource_metadata_url

from ..base.errors import ConfigError

READ_SCOPE = "memory:read"
WRITE_SCOPE = "memory:write"
SCOPES = (READ_SCOPE, WRITE_SCOPE)

# Asymmetric algorithms only: an HMAC one would let whoever holds a public key of the JWKS sign tokens; "none" signs
# nothing.
SAFE_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA", "Ed25519"}
)
DEFAULT_ALGORITHMS = ("RS256", "PS256", "ES256", "EdDSA")
USER_AGENT_PREFIX = "user-"  # a signed-in user's own agent: user-<readable subject>-<hash of issuer and subject>


@dataclass(frozen=True)
class OAuthSettings:
    """What turns the resource server on (from ``Settings``; see ``from_settings``)."""

    issuer: str
    resource: str  # this server's canonical URI: the PRM's ``resource`` and the audience tokens must carry
    audience: str  # usually ``resource``; ``oauth_audience`` for issuers that cannot put a URL there
    algorithms: tuple[str, ...] = DEFAULT_ALGORITHMS
    introspect: bool = False
    client_id: str | None = None  # this server's credentials at the introspection endpoint
    client_secret: str | None = None
    groups_claim: str = "groups"
    # agent name -> who may use it besides nobody: subjects, and groups written "group:<name>"
    shared_agents: tuple[tuple[str, frozenset[str]], ...] = ()

    @property
    def metadata_url(self) -> str:
        return str(build_resource_metadata_url(_url(self.resource)))


def canonical_resource(public_url: str, path: str) -> str:
    """This server's canonical URI (RFC 8707 §2, MCP "Canonical Server URI"): ``public_url`` with the endpoint's path
    (``/mcp``, ``/sse``) appended unless it already ends with it; lower-case scheme and host, no fragment, no trailing
    slash."""
    parts = urlsplit(public_url.strip())
    if parts.scheme.lower() not in ("https", "http") or not parts.netloc:
        raise ConfigError(
            f"public_url must be an absolute https URL such as https://memory.example.com, not {public_url!r}."
        )
    if parts.query or parts.fragment:
        raise ConfigError(f"public_url must not carry a query or a fragment: {public_url!r}.")
    base = parts.path.rstrip("/")
    if not base.endswith(path):
        base += path
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{base}"


def from_settings(
    *,
    issuer: str | None,
    public_url: str | None,
    path: str,
    audience: str | None = None,
    algorithms: list[str] | None = None,
    introspect: bool = False,
    client_id: str | None = None,
    client_secret: str | None = None,
    groups_claim: str = "groups",
    shared_agents: dict[str, list[str]] | None = None,
) -> OAuthSettings | None:
    """The resource server's settings, None when OAuth is off; a ConfigError for half or unsafe settings."""
    if not issuer and not public_url:
        return None
    if not issuer or not public_url:
        missing = "oauth_issuer (TIERMEM_OAUTH_ISSUER)" if not issuer else "public_url (TIERMEM_PUBLIC_URL)"
        raise ConfigError(
            f"OAuth needs both oauth_issuer and public_url; {missing} is missing. Set it, or unset the other to serve "
            "with static bearer tokens only."
        )
    resource = canonical_resource(public_url, path)
    for name, url in (("oauth_issuer", issuer), ("public_url", resource)):
        parts = urlsplit(url)
        if parts.scheme != "https" and not _loopback(parts.hostname or ""):
            raise ConfigError(f"{name} must be an https URL (plain http only on loopback): {url!r}.")
    algs = tuple(algorithms or DEFAULT_ALGORITHMS)
    unsafe = [a for a in algs if a not in SAFE_ALGORITHMS]
    if unsafe:
        raise ConfigError(
            f"oauth_algorithms: {', '.join(unsafe)} not allowed; use asymmetric ones ({', '.join(sorted(SAFE_ALGORITHMS))})."
        )
    if introspect and not (client_id and client_secret):
        raise ConfigError(
            "oauth_introspect needs this server's client credentials at the issuer: oauth_client_id and "
            "oauth_client_secret (TIERMEM_OAUTH_CLIENT_SECRET)."
        )
    shared = []
    for name, members in (shared_agents or {}).items():
        if isinstance(members, str):
            members = [members]
        if not name or not all(isinstance(m, str) and m for m in members):
            raise ConfigError(
                f'oauth_shared_agents: {name!r} needs a list of subjects and "group:<name>" entries, e.g. '
                '{ team = ["group:engineering", "alice@example.com"] }.'
            )
        if name == "*" or name.startswith(USER_AGENT_PREFIX):
            raise ConfigError(
                f"oauth_shared_agents: {name!r} is '*' or starts with {USER_AGENT_PREFIX!r} (kept for users' own "
                "agents); choose another name."
            )
        shared.append((name, frozenset(members)))
    return OAuthSettings(
        shared_agents=tuple(shared),
        issuer=issuer,
        resource=resource,
        audience=audience or resource,
        algorithms=algs,
        introspect=introspect,
        client_id=client_id,
        client_secret=client_secret,
        groups_claim=groups_claim,
    )


def _loopback(host: str) -> bool:
    import ipaddress

    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url(text: str) -> Any:
    from pydantic import AnyHttpUrl

    return AnyHttpUrl(text)
