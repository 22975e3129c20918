"""The resource server's key handling (process/oauth.py): JWKS cached, fetched again for an unknown key id (key
rotation) at most every JWKS_REFETCH_SECONDS, the issuer's metadata checked. The issuer is an HTTP transport that
answers as one would (the network edge); the whole flow against a real authorization server is in test_oauth.py."""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from tiermem.base.errors import ConfigError
from tiermem.process.oauth import IssuerUnavailable, ResourceServer
from tiermem.process.oauth_settings import canonical_resource, from_settings

pytestmark = pytest.mark.anyio
ISSUER = "https://auth.example.com/realms/main"
RESOURCE = "https://memory.example.com/mcp"


class Issuer:
    """An authorization server's metadata and JWKS, with the keys it publishes changeable (rotation)."""

    def __init__(self) -> None:
        self.keys: dict[str, Any] = {}
        self.jwks_fetches = 0
        self.metadata_issuer = ISSUER
        self.down = False  # every answer a 500
        self.calls = 0

    def add_rsa(self, kid: str) -> Any:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.keys[kid] = (key, {**json.loads(RSAAlgorithm.to_jwk(key.public_key())), "kid": kid, "use": "sig"})
        return key

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.calls += 1
        if self.down:
            return httpx.Response(500)
        if path == "/.well-known/oauth-authorization-server/realms/main":
            return httpx.Response(
                200, json={"issuer": self.metadata_issuer, "jwks_uri": "https://auth.example.com/jwks"}
            )
        if path == "/jwks":
            self.jwks_fetches += 1
            return httpx.Response(200, json={"keys": [jwk for _, jwk in self.keys.values()]})
        return httpx.Response(404)

    def token(self, kid: str, key: Any = None, alg: str = "RS256", **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": ISSUER, "aud": RESOURCE, "sub": "alice", "exp": now + 60, "scope": "memory:read", **claims}
        return jwt.encode(body, key if key is not None else self.keys[kid][0], algorithm=alg, headers={"kid": kid})


def server(issuer: Issuer) -> ResourceServer:
    settings = from_settings(issuer=ISSUER, public_url="https://memory.example.com", path="/mcp")
    assert settings is not None
    return ResourceServer(settings, client=httpx.AsyncClient(transport=httpx.MockTransport(issuer.handle)))


async def test_keys_cached_and_rotated() -> None:
    issuer = Issuer()
    issuer.add_rsa("k1")
    rs = server(issuer)
    for _ in range(5):
        access = await rs.verify_token(issuer.token("k1"))
        assert access is not None and access.subject == "alice" and access.scopes == ["memory:read"]
    assert issuer.jwks_fetches == 1  # cached
    issuer.add_rsa("k2")  # the issuer rotates: a token signed with the new key fetches the keys again
    assert await rs.verify_token(issuer.token("k2")) is not None
    assert issuer.jwks_fetches == 2
    # a key id nobody publishes: one more fetch would be allowed only after JWKS_REFETCH_SECONDS
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    for _ in range(3):
        assert await rs.verify_token(issuer.token("k9", key=stranger)) is None
    assert issuer.jwks_fetches == 2  # rate-limited: unknown key ids cannot make us hammer the issuer


async def test_key_algorithm_and_kind_checked() -> None:
    issuer = Issuer()
    issuer.add_rsa("k1")
    ec_key = ec.generate_private_key(ec.SECP256R1())
    issuer.keys["e1"] = (ec_key, {**json.loads(ECAlgorithm.to_jwk(ec_key.public_key())), "kid": "e1", "alg": "ES256"})
    issuer.keys["enc"] = (None, {**issuer.keys["k1"][1], "kid": "enc", "use": "enc"})
    rs = server(issuer)
    assert await rs.verify_token(issuer.token("e1", alg="ES256")) is not None
    assert await rs.verify_token(issuer.token("e1", key=issuer.keys["k1"][0])) is None  # RS256 under an ES256 key
    assert await rs.verify_token(issuer.token("enc", key=issuer.keys["k1"][0])) is None  # an encryption key
    assert await rs.verify_token(issuer.token("k1", alg="RS512")) is None  # not in oauth_algorithms
    assert await rs.verify_token(issuer.token("k1", sub=None)) is None  # no subject: whose memory?


async def test_issuer_metadata_must_name_the_issuer() -> None:
    issuer = Issuer()
    issuer.add_rsa("k1")
    issuer.metadata_issuer = "https://evil.example.com"
    with pytest.raises(IssuerUnavailable, match="names issuer"):
        await server(issuer).verify_token(issuer.token("k1"))


def test_settings_checked() -> None:
    assert canonical_resource("https://Memory.Example.com/", "/mcp") == RESOURCE
    assert canonical_resource("https://memory.example.com/mcp", "/mcp") == RESOURCE
    assert canonical_resource("https://memory.example.com/tenant", "/mcp") == "https://memory.example.com/tenant/mcp"
    assert from_settings(issuer=None, public_url=None, path="/mcp") is None
    with pytest.raises(ConfigError, match="public_url"):
        from_settings(issuer=ISSUER, public_url=None, path="/mcp")
    with pytest.raises(ConfigError, match="https"):
        from_settings(issuer="http://auth.example.com", public_url="https://m.example.com", path="/mcp")
    with pytest.raises(ConfigError, match="HS256"):
        from_settings(issuer=ISSUER, public_url="https://m.example.com", path="/mcp", algorithms=["HS256"])
    with pytest.raises(ConfigError, match="none"):
        from_settings(issuer=ISSUER, public_url="https://m.example.com", path="/mcp", algorithms=["none"])
    with pytest.raises(ConfigError, match="client credentials"):
        from_settings(issuer=ISSUER, public_url="https://m.example.com", path="/mcp", introspect=True)


def test_agents_of_a_principal() -> None:
    """Own agents distinct per subject whatever its characters; shared ones by subject or group; nothing else."""
    from mcp.server.auth.provider import AccessToken

    settings = from_settings(
        issuer=ISSUER,
        public_url="https://memory.example.com",
        path="/mcp",
        shared_agents={"team": ["group:eng", "carol"], "ops": ["group:ops"]},
    )
    assert settings is not None
    rs = ResourceServer(settings)

    def principal(sub: str, groups: list[str] | None = None) -> AccessToken:
        claims = {"groups": groups} if groups is not None else {}
        return AccessToken(token="t", client_id="c", scopes=[], subject=sub, claims=claims)

    alice, bob = principal("alice", ["eng"]), principal("bob")
    assert rs.own_agent(alice).startswith("user-alice-") and rs.own_agent(alice) != rs.own_agent(bob)
    assert rs.own_agent(principal("a/b")) != rs.own_agent(principal("a.b"))  # same readable part, other subjects
    assert rs.agents_for(alice) == {rs.own_agent(alice), "team"}
    assert rs.agents_for(principal("carol")) == {rs.own_agent(principal("carol")), "team"}
    assert rs.agents_for(bob) == {rs.own_agent(bob)}
    assert rs.agent_for(alice, None) == rs.own_agent(alice) and rs.agent_for(alice, "team") == "team"
    for asked in ("ops", rs.own_agent(alice), "default", "*", "team "):
        assert rs.agent_for(bob, asked) is None
    for bad in ({"*": ["x"]}, {"user-x": ["x"]}, {"team": [""]}):
        with pytest.raises(ConfigError, match="oauth_shared_agents"):
            from_settings(issuer=ISSUER, public_url="https://m.example.com", path="/mcp", shared_agents=bad)


async def test_verified_tokens_remembered_until_they_expire() -> None:
    """A token checked once is not checked again (one JWKS fetch, the same principal), until its expiry passes."""
    from tiermem.process.oauth import LEEWAY_SECONDS

    issuer = Issuer()
    issuer.add_rsa("k1")
    rs = server(issuer)
    token = issuer.token("k1", exp=int(time.time()) - LEEWAY_SECONDS + 2)  # valid for about two more seconds
    first = await rs.verify_token(token)
    assert first is not None and await rs.verify_token(token) is first
    await anyio.sleep(3)  # not a timing assertion: the token's expiry must have passed by then
    assert await rs.verify_token(token) is None
    assert await rs.verify_token(token + "x") is None  # another string is checked afresh (a bad signature)


async def test_a_failed_issuer_is_not_asked_again_at_once() -> None:
    """A failed fetch is remembered for a back-off (IssuerUnavailable, with the seconds to wait, without calling
    again); past it the issuer is asked again, and once it answers, tokens pass."""
    from tiermem.process.oauth import ISSUER_BACKOFF_SECONDS

    issuer = Issuer()
    issuer.add_rsa("k1")
    issuer.down = True
    rs = server(issuer)
    for _ in range(5):
        with pytest.raises(IssuerUnavailable, match="answered 500") as caught:
            await rs.verify_token(issuer.token("k1"))
        assert caught.value.retry_after is not None and 0 < caught.value.retry_after <= ISSUER_BACKOFF_SECONDS
    assert issuer.calls == 1
    issuer.down = False
    await anyio.sleep(ISSUER_BACKOFF_SECONDS + 0.5)  # not a timing assertion: the back-off must have passed by then
    assert await rs.verify_token(issuer.token("k1")) is not None
    assert issuer.calls == 3  # the metadata and the keys
