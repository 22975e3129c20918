"""What an access token must say to pass (``oauth.ResourceServer``): its JOSE type, its subject, and the claims an
introspection answer (RFC 7662) must hold. A token that fails raises ``Refused`` (401 ``invalid_token``; the reason
is logged at debug level, never told to the client).
"""

from __future__ import annotations

import time
from typing import Any

LEEWAY_SECONDS = 30  # clock skew allowed on exp and nbf
# The JOSE header ``typ`` of an access token: RFC 9068's ``at+jwt``, and plain ``JWT``, which Auth0, Keycloak, Entra
# and oidc-provider put on access tokens (or no typ at all); refusing it would refuse those issuers. Compared without
# case and without the optional "application/" (RFC 7515 4.1.9). An ID token (also ``JWT``) is refused by the
# audience: its ``aud`` is the client's id, not this server.
ACCESS_TOKEN_TYPES = frozenset({"at+jwt", "jwt"})


class Refused(Exception):
    """The token is not valid for this server (the message says why, for the log)."""


def check_type(header: dict[str, Any]) -> None:
    """The JWT's ``typ``, when it has one, is an access token's (not e.g. a logout, DPoP or ID-JAG token's)."""
    typ = header.get("typ")
    if typ is None:
        return
    if not isinstance(typ, str) or typ.strip().lower().removeprefix("application/") not in ACCESS_TOKEN_TYPES:
        raise Refused(f"type {typ!r} is not an access token's")


def check_subject(claims: dict[str, Any]) -> None:
    """A token names a user: a non-blank string ``sub`` (the tokens without one would all share one agent)."""
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject.strip():
        raise Refused("no subject (sub is missing, blank or not a string)")


def check_introspected(claims: Any, issuer: str, audience: str) -> dict[str, Any]:
    """The introspection endpoint's answer, when it vouches for the token for this server: active, of ``issuer``
    (when it says), for ``audience``, in its time, with a subject."""
    if not isinstance(claims, dict) or claims.get("active") is not True:
        raise Refused("inactive (expired, revoked or unknown)")
    if "iss" in claims and claims["iss"] != issuer:
        raise Refused(f"issuer {claims['iss']!r}")
    aud = claims.get("aud")
    audiences = aud if isinstance(aud, list) else [aud] if isinstance(aud, str) else []
    if audience not in audiences:
        raise Refused(f"audience {aud!r}")
    now = time.time()
    exp, nbf = claims.get("exp"), claims.get("nbf")
    if isinstance(exp, int | float) and exp + LEEWAY_SECONDS < now:
        raise Refused("expired")
    if isinstance(nbf, int | float) and nbf - LEEWAY_SECONDS > now:
        raise Refused("not yet valid")
    check_subject(claims)
    return claims
