"""OAuth 2.1 over real HTTP on loopback: a real authorization server, a real OAuth MCP client, hostile tokens.

The authorization server is npm ``oidc-provider`` (``tests/oauth/provider.mjs``), the client the MCP TypeScript SDK's
OAuth client (``tests/oauth/client.mjs``), both installed by ``tests/install_oauth.py`` (the tests skip, saying why,
without npm). The provider signs with a key made here, so the hostile tokens below are signed by the issuer's own
key unless the attack is the signature itself.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from jwt.algorithms import RSAAlgorithm
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from .conftest import text_of
from .install_oauth import install, node_path
from .test_transports import HTTP_TOKEN, free_port, serving, wait_for_port

pytestmark = pytest.mark.anyio
KID = "test-key-1"
CLIENT_REDIRECT = "http://127.0.0.1:9/callback"  # client.mjs's (it takes the code from the redirect itself)
RS_CLIENT = "tiermem-rs"
RS_SECRET = "rs-secret-5c1e0a9b7d3f42e8"
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@dataclass
class Authority:
    issuer: str
    key: rsa.RSAPrivateKey
    root: Path  # where npm installed the packages and the scripts
    node: str
    opaque: Path  # the resources (JSON list) the provider gives opaque access tokens, which it can introspect
    client_document: str  # the URL of a client ID metadata document (https, on loopback)


@dataclass
class Served:
    url: str  # the MCP endpoint, also the canonical URI tokens must name
    port: int


def _private_jwk(key: rsa.RSAPrivateKey, kid: str) -> dict[str, Any]:
    jwk = json.loads(RSAAlgorithm.to_jwk(key))
    jwk.update(kid=kid, alg="RS256", use="sig")
    return jwk


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Authority]:
    root, why = install()
    if root is None:
        pytest.skip(f"OAuth test servers unavailable: {why}")
    node = node_path(root)
    assert node is not None
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    port = free_port()
    config = tmp_path_factory.mktemp("as") / "provider.json"
    document, cert, stop_documents = _client_documents(config.parent)
    config.write_text(
        json.dumps(
            {
                "port": port,
                "jwks": {"keys": [_private_jwk(key, KID)]},
                "rs_client_id": RS_CLIENT,
                "rs_client_secret": RS_SECRET,
                "groups": {"alice": ["team"]},
                "opaque_file": str(config.parent / "opaque.json"),
                "cimd": True,
            }
        )
    )
    proc = subprocess.Popen(
        [node, "provider.mjs", str(config)],
        cwd=root,
        env={**os.environ, "NODE_EXTRA_CA_CERTS": str(cert)},  # it fetches the client documents over https
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for_port(port, proc)  # type: ignore[arg-type]
        yield Authority(f"http://127.0.0.1:{port}", key, root, node, config.parent / "opaque.json", document)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        stop_documents()


def _client_documents(where: Path) -> tuple[str, Path, Any]:
    """(URL of a client ID metadata document, the certificate its https server uses, stop) on loopback: a client
    that registers nowhere, its id the document's URL (the MCP specification's preferred registration)."""
    import datetime
    import ssl
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from ipaddress import IPv4Address

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.serialization import NoEncryption, PrivateFormat
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(IPv4Address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = where / "documents-cert.pem", where / "documents-key.pem"
    cert_path.write_bytes(cert.public_bytes(Encoding.PEM))
    key_path.write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    port = free_port()
    url = f"https://127.0.0.1:{port}/oauth/tiermem-test-client.json"
    body = json.dumps(
        {
            "client_id": url,
            "client_name": "tiermem oauth test (metadata document)",
            "redirect_uris": [CLIENT_REDIRECT],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }
    ).encode()

    class Documents(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            found = self.path == "/oauth/tiermem-test-client.json"
            self.send_response(200 if found else 404)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body) if found else 0))
            self.end_headers()
            if found:
                self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Documents)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return url, cert_path, server.shutdown


def _serve(tmp_path: Path, authority: Authority, **env: str) -> Iterator[Served]:
    port = free_port()
    with serving(
        tmp_path,
        "http",
        port,
        TIERMEM_DATA_DIR=str(tmp_path / "data"),
        TIERMEM_OAUTH_ISSUER=authority.issuer,
        TIERMEM_PUBLIC_URL=f"http://127.0.0.1:{port}",
        TIERMEM_HTTP_TOKEN=HTTP_TOKEN,  # static tokens keep working beside OAuth
        **env,
    ):
        yield Served(f"http://127.0.0.1:{port}/mcp", port)


@pytest.fixture(scope="module")
def served(authority: Authority, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """tiermem checking JWT access tokens locally."""
    yield from _serve(tmp_path_factory.mktemp("jwt"), authority)


@pytest.fixture(scope="module")
def introspecting(authority: Authority, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """tiermem asking the issuer's introspection endpoint about every token (opaque ones: oidc-provider introspects
    no JWT)."""
    for served in _serve(
        tmp_path_factory.mktemp("introspect"),
        authority,
        TIERMEM_OAUTH_INTROSPECT="true",
        TIERMEM_OAUTH_CLIENT_ID=RS_CLIENT,
        TIERMEM_OAUTH_CLIENT_SECRET=RS_SECRET,
    ):
        authority.opaque.write_text(json.dumps([served.url]))
        yield served


def mint(
    authority: Authority, served: Served, *, key: Any = None, header: dict[str, Any] | None = None, **claims: Any
) -> str:
    """An access token as the issuer makes them (signed with its key), with ``claims`` changed."""
    now = int(time.time())
    body = {
        "iss": authority.issuer,
        "sub": "alice",
        "aud": served.url,
        "iat": now,
        "exp": now + 300,
        "scope": "memory:read memory:write",
        "client_id": "some-client",
        "jti": f"j{time.monotonic_ns()}",
    }
    body.update(claims)
    body = {k: v for k, v in body.items() if v is not None}
    return jwt.encode(
        body, key or authority.key, algorithm="RS256", headers={"kid": KID, "typ": "at+jwt", **(header or {})}
    )


def post(served: Served, token: str | None, message: dict[str, Any] | None = None) -> httpx.Response:
    headers = dict(HEADERS)
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    return httpx.post(served.url, headers=headers, content=json.dumps(message or INIT), timeout=60)


def _b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def run_client(
    authority: Authority, served: Served, user: str, scopes: str | None = None, **env: str
) -> dict[str, Any]:
    args = [authority.node, "client.mjs", served.url, user, *([scopes] if scopes else [])]
    done = subprocess.run(
        args, cwd=authority.root, capture_output=True, text=True, timeout=240, env={**os.environ, **env}
    )
    lines = done.stdout.strip().splitlines()
    assert lines, f"client.mjs printed nothing: {done.stderr[-2000:]}"
    report: dict[str, Any] = json.loads(lines[-1])
    assert done.returncode == 0 and "failure" not in report, report.get("failure", done.stderr[-2000:])
    return report


def test_resource_metadata_and_challenge(authority: Authority, served: Served) -> None:
    """RFC 9728 metadata at the path the MCP specification names (and the root one); every 401 points to it."""
    meta_url = f"http://127.0.0.1:{served.port}/.well-known/oauth-protected-resource/mcp"
    for url in (meta_url, f"http://127.0.0.1:{served.port}/.well-known/oauth-protected-resource"):
        meta = httpx.get(url, timeout=30)
        assert meta.status_code == 200 and meta.headers["access-control-allow-origin"] == "*"
        assert meta.json()["resource"] == served.url
        assert meta.json()["authorization_servers"] == [authority.issuer]  # exactly the issuer, no slash added
        assert meta.json()["scopes_supported"] == ["memory:read", "memory:write"]
    missing = post(served, None)
    assert missing.status_code == 401
    assert f'resource_metadata="{meta_url}"' in missing.headers["www-authenticate"]
    assert 'scope="memory:read memory:write"' in missing.headers["www-authenticate"]
    assert post(served, mint(authority, served)).status_code == 200  # the control: a good token passes
    assert post(served, HTTP_TOKEN).status_code == 200  # and a static token still does


def test_typescript_sdk_signs_in_and_refreshes(authority: Authority, served: Served) -> None:
    """The MCP TypeScript SDK's OAuth client against oidc-provider: discovery from the 401, registration,
    authorization code with PKCE and the resource indicator, token, tool calls, then a refresh."""
    report = run_client(authority, served, "alice")
    requests = report["requests"]
    assert requests[:4] == [
        "POST /mcp 401",
        "GET /.well-known/oauth-protected-resource/mcp 200",
        "GET /.well-known/oauth-authorization-server 200",
        "POST /reg 201",  # dynamic client registration
    ]
    asked = httpx.URL(report["authorizationUrl"]).params
    assert asked["resource"] == served.url and asked["scope"] == "memory:read memory:write"
    assert asked["code_challenge_method"] == "S256" and asked["code_challenge"]
    assert report["iss"] == authority.issuer  # RFC 9207
    claims = jwt.decode(report["firstToken"], options={"verify_signature": False})
    assert claims["aud"] == served.url and claims["sub"] == "alice" and claims["iss"] == authority.issuer
    assert report["scope"] == "memory:read memory:write" and report["hasRefresh"]
    assert "archival_memory_insert" in report["tools"]
    assert report["insert"]["ok"], report["insert"]
    assert report["search"]["ok"] and "blue pot" in report["search"]["text"]
    # the refresh: a 401 for the spoiled token, then a new access token from the refresh token, then tools again
    assert requests.count("POST /token 200") == 2 and report["tokenSaves"] == 2
    assert report["refreshedToken"] != report["firstToken"] and report["afterRefresh"] == len(report["tools"])


def test_hostile_tokens_refused(authority: Authority, served: Served) -> None:
    now = int(time.time())
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    good = mint(authority, served)
    head, payload, signature = good.split(".")
    flipped = signature[:-4] + ("AAAA" if signature[-4:] != "AAAA" else "BBBB")
    public_pem = authority.key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    hostile = {
        "expired": mint(authority, served, iat=now - 7200, exp=now - 3600),
        "not yet valid": mint(authority, served, nbf=now + 3600),
        "no expiry": mint(authority, served, exp=None),
        "wrong audience": mint(authority, served, aud="http://127.0.0.1:1/mcp"),
        "audience of another path": mint(authority, served, aud=served.url + "/other"),
        "no audience": mint(authority, served, aud=None),
        "wrong issuer": mint(authority, served, iss="http://127.0.0.1:2"),
        "alg none": _b64({"alg": "none", "typ": "at+jwt", "kid": KID}) + "." + payload + ".",
        "alg none, no signature part": _b64({"alg": "none", "kid": KID}) + "." + payload,
        "tampered payload": head
        + "."
        + _b64({**jwt.decode(good, options={"verify_signature": False}), "sub": "bob"})
        + "."
        + signature,
        "tampered signature": f"{head}.{payload}.{flipped}",
        "unknown key id": mint(authority, served, key=other_key, header={"kid": "rotated-away"}),
        "known key id, other key": mint(authority, served, key=other_key),
        "HS256 with the public key": _hs256(jwt.decode(good, options={"verify_signature": False}), public_pem),
        "not a JWT": "x" * 40,
    }
    for name, token in hostile.items():
        answer = post(served, token)
        assert answer.status_code == 401, (name, answer.status_code, answer.text)
        assert "resource_metadata=" in answer.headers["www-authenticate"], name
    assert post(served, good).status_code == 200


def test_token_types_and_subjects(authority: Authority, served: Served) -> None:
    """A JWT typed as an access token passes: RFC 9068's at+jwt, and plain JWT or none, as Auth0, Keycloak, Entra and
    oidc-provider type theirs; a token of another type, or naming no one in sub, is refused."""
    for typ in ("at+jwt", "application/at+jwt", "AT+JWT", "JWT", None):
        answer = post(served, mint(authority, served, header={"typ": typ}))
        assert answer.status_code == 200, (typ, answer.status_code, answer.text)
    refused = {
        "logout token": mint(authority, served, header={"typ": "logout+jwt"}),
        "DPoP proof": mint(authority, served, header={"typ": "dpop+jwt"}),
        "ID-JAG": mint(authority, served, header={"typ": "oauth-id-jag+jwt"}),
        "typ not a string": mint(authority, served, header={"typ": 5}),
        "empty sub": mint(authority, served, sub=""),
        "blank sub": mint(authority, served, sub="  "),
    }
    for name, token in refused.items():
        answer = post(served, token)
        assert answer.status_code == 401, (name, answer.status_code, answer.text)
        assert 'error="invalid_token"' in answer.headers["www-authenticate"], name


def test_browser_host_reads_the_challenge(served: Served) -> None:
    """A browser-based MCP host on an allowed origin: its preflight (no token) is answered, and it can read the 401's
    WWW-Authenticate, which is how it finds the authorization server."""
    origin = f"http://127.0.0.1:{served.port}"  # allowed by default
    asking = {
        "origin": origin,
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization",
    }
    preflight = httpx.options(served.url, headers=asking, timeout=30)
    assert preflight.status_code == 204 and preflight.headers["access-control-allow-origin"] == origin
    refused = httpx.post(served.url, headers={**HEADERS, "origin": origin}, content=json.dumps(INIT), timeout=30)
    assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == origin
    assert "www-authenticate" in refused.headers["access-control-expose-headers"]
    assert "resource_metadata=" in refused.headers["www-authenticate"]


def test_two_authorization_headers_refused(authority: Authority, served: Served) -> None:
    good = mint(authority, served)
    for pair in (("Bearer junk", f"Bearer {good}"), (f"Bearer {good}", "Bearer junk"), (f"Bearer {good}",) * 2):
        headers = [*HEADERS.items(), *(("authorization", value) for value in pair)]
        answer = httpx.post(served.url, headers=headers, content=json.dumps(INIT), timeout=30)
        assert answer.status_code == 400, answer.text
        challenge = answer.headers["www-authenticate"]
        assert 'error="invalid_request"' in challenge and "resource_metadata=" in challenge


def test_issuer_down_is_not_hammered(tmp_path: Path) -> None:
    """While the issuer's metadata cannot be fetched, tokens get 503, and requests (here with self-signed tokens of
    random key ids, no sign-in needed) do not make the server call the issuer each time: a failure is remembered for a
    back-off. The 503 tells callers nothing of the issuer's URLs or the error; the log does, once per back-off."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    calls: list[str] = []

    class Failing(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            calls.append(self.path)
            self.send_response(500)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    issuer_port, port = free_port(), free_port()
    failing = ThreadingHTTPServer(("127.0.0.1", issuer_port), Failing)
    threading.Thread(target=failing.serve_forever, daemon=True).start()
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        with serving(
            tmp_path,
            "http",
            port,
            TIERMEM_DATA_DIR=str(tmp_path / "data"),
            TIERMEM_OAUTH_ISSUER=f"http://127.0.0.1:{issuer_port}",
            TIERMEM_PUBLIC_URL=f"http://127.0.0.1:{port}",
        ):
            answers = []
            for n in range(20):
                claims = {"sub": "x", "aud": url, "iss": f"http://127.0.0.1:{issuer_port}", "exp": time.time() + 60}
                token = jwt.encode(claims, stranger, algorithm="RS256", headers={"kid": f"k{n}"})
                answers.append(
                    httpx.post(url, headers={**HEADERS, "authorization": f"Bearer {token}"}, content=json.dumps(INIT))
                )
    finally:
        failing.shutdown()
    assert {a.status_code for a in answers} == {503}
    assert 1 <= len(calls) < 5, calls  # 20 requests, a few back-offs at most (2 s, then 4 s, ...)
    for answer in answers:
        assert str(issuer_port) not in answer.text and "500" not in answer.text, answer.text
        assert "cannot be reached right now" in answer.text
        assert int(answer.headers["retry-after"]) >= 1
    log = (tmp_path / "server.log").read_text()
    assert log.count("cannot check access tokens") == len(calls), log[-3000:]  # logged once per call, not per request


def _hs256(claims: dict[str, Any], secret: bytes) -> str:
    """An HMAC-signed token whose secret is the issuer's public key (the algorithm-confusion attack), made by hand
    since PyJWT refuses to use a PEM key as an HMAC secret."""
    import hashlib
    import hmac

    signing = _b64({"alg": "HS256", "typ": "at+jwt", "kid": KID}) + "." + _b64(claims)
    mac = hmac.new(secret, signing.encode(), hashlib.sha256).digest()
    return signing + "." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


async def test_read_only_scope_cannot_write(authority: Authority, served: Served) -> None:
    reader = mint(authority, served, scope="memory:read")
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "archival_memory_insert", "arguments": {"content": "x"}},
    }
    refused = post(served, reader, call)
    assert refused.status_code == 403
    challenge = refused.headers["www-authenticate"]
    assert 'error="insufficient_scope"' in challenge and 'scope="memory:read memory:write"' in challenge
    assert "resource_metadata=" in challenge and "memory:write" in refused.text
    batch = post(served, reader, [INIT, call])  # type: ignore[arg-type]
    assert batch.status_code == 403
    # a name given twice is read as the transport reads it (the last one), by both its parsers; a body no parser
    # reads is refused
    headers = {**HEADERS, "authorization": f"Bearer {reader}"}

    def called(first: str, last: str) -> bytes:
        return (
            b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "%s", "name": "%s", '
            b'"arguments": {"content": "x", "query": "x"}}}' % (first.encode(), last.encode())
        )

    write_last = httpx.post(served.url, headers=headers, content=called("archival_memory_search", "memory_insert"))
    assert write_last.status_code == 403
    read_last = httpx.post(served.url, headers=headers, content=called("memory_insert", "archival_memory_search"))
    assert read_last.status_code != 403  # past the guard (the transport wants a session: 400)
    assert httpx.post(served.url, headers=headers, content=b"{not json").status_code == 403
    assert post(served, mint(authority, served, scope="memory:write"), INIT).status_code == 403  # read is needed too
    assert post(served, mint(authority, served, scope="profile"), INIT).status_code == 403
    # read tools and resources work with the read scope alone
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {reader}"}, timeout=60)
    async with Client(streamable_http_client(served.url, http_client=http), cache=None) as client:
        found = await client.call_tool("archival_memory_search", {"query": "anything"})
        assert not found.is_error, text_of(found)
        core = await client.read_resource("memory://core")
        assert core.contents
        with pytest.raises(Exception, match="error response|403"):  # the Python client names no status
            await client.call_tool("memory_insert", {"label": "human", "new_str": "nope", "insert_line": 0})


def test_typescript_sdk_with_a_client_id_metadata_document(authority: Authority, served: Served) -> None:
    """The registration the MCP specification (2025-11-25) prefers: the client's id is the https URL of its metadata
    document, which the authorization server fetches; nothing is registered."""
    report = run_client(authority, served, "dora", CLIENT_METADATA_URL=authority.client_document)
    assert not any(r.startswith("POST /reg") for r in report["requests"]), report["requests"]
    assert report["clientId"] == authority.client_document
    assert httpx.URL(report["authorizationUrl"]).params["client_id"] == authority.client_document
    assert report["insert"]["ok"] and report["search"]["ok"], report
    assert report["refreshedToken"] != report["firstToken"]  # refresh works for it too


def test_typescript_sdk_with_read_only_consent(authority: Authority, served: Served) -> None:
    """A user who consents to memory:read only gets a token that lists and searches but cannot write."""
    report = run_client(authority, served, "carol", "memory:read")
    assert report["scope"] == "memory:read"
    assert report["search"]["ok"]
    assert not report["insert"]["ok"] and "403" in report["insert"].get("error", "") + report["insert"].get("text", "")


def test_revoked_token_refused_with_introspection(authority: Authority, introspecting: Served) -> None:
    report = run_client(authority, introspecting, "alice")
    assert report["insert"]["ok"], report["insert"]
    token = report["refreshedToken"]
    assert token.count(".") != 2  # opaque: the introspection endpoint decides
    assert post(introspecting, token).status_code == 200
    revoked = httpx.post(
        f"{authority.issuer}/token/revocation",
        data={"token": token, "client_id": report["clientId"], "token_type_hint": "access_token"},
        timeout=30,
    )
    assert revoked.status_code == 200
    replay = post(introspecting, token)
    assert replay.status_code == 401 and "resource_metadata=" in replay.headers["www-authenticate"]
    # the issuer's own signature is not enough under introspection: a token it does not know is inactive
    assert post(introspecting, mint(authority, introspecting)).status_code == 401
    assert post(introspecting, HTTP_TOKEN).status_code == 200  # static tokens keep working


# -- many users kept apart -----------------------------------------------------------------------------------------

SECRET = "zebra-quartz-4417"  # what alice stores; nothing bob receives may contain it


@pytest.fixture(scope="module")
def shared(authority: Authority, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """tiermem with a shared agent "team" for the group "team" (alice is in it, bob is not)."""
    yield from _serve(
        tmp_path_factory.mktemp("users"), authority, TIERMEM_OAUTH_SHARED_AGENTS='{"team": ["group:team"]}'
    )


def user_client(served: Served, token: str, agent: str | None = None, **kw: Any) -> Client:
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=60)
    url = served.url + (f"?agent={agent}" if agent else "")
    return Client(streamable_http_client(url, http_client=http), cache=None, **kw)


def probe_arguments(tool: dict[str, Any], label: str, ident: str, query: str) -> dict[str, Any]:
    """Arguments that aim ``tool`` at another user's things: their block label, passage id, words (``query`` goes
    only where a tool searches: what bob writes never holds alice's words, so finding them means a leak)."""
    special: dict[str, dict[str, Any]] = {
        "conversation_log": {"messages": [{"role": "user", "content": "bob asks where the vault is"}]},
        "open_files": {"file_requests": [{"file_name": f"{label}/notes.md"}]},
        "memory": {"command": "view", "path": f"/memories/{label}"},
        "memory_apply_patch": {"label": label, "patch": f"@@\n-{query}\n+x\n"},
        "memory_revert": {"label": label, "version": 1},
        "memory_insert": {"label": label, "new_string": "x", "insert_line": 0},
        "memory_replace": {"label": label, "old_string": query, "new_string": "x"},
    }
    if tool["name"] in special:
        return special[tool["name"]]
    args: dict[str, Any] = {}
    schema = tool.get("inputSchema") or {}
    for name in schema.get("required", []):
        prop = schema.get("properties", {}).get(name, {})
        kind = prop.get("type")
        if name == "label":
            args[name] = label
        elif name == "id":
            args[name] = ident
        elif kind == "integer":
            args[name] = 1
        elif name in ("query", "pattern", "old_string", "old_content"):
            args[name] = query
        elif kind == "array":
            args[name] = ["bob's probe"]
        else:
            args[name] = "bob's probe"
    return args


@pytest.mark.filterwarnings("ignore:resources/(un)?subscribe is removed")  # bob listens the legacy way too
async def test_users_kept_apart(authority: Authority, shared: Served) -> None:
    """alice and bob on one server: bob aims every tool, resource and prompt at alice's things (her block label,
    her passage id, her words, her agent by name) more than 1,000 times; nothing of hers reaches him, and what he gets
    for her things is what he gets for things that never existed."""
    alice = mint(authority, shared, sub="alice", groups=["team"])
    bob = mint(authority, shared, sub="bob")

    async with user_client(shared, alice) as a:
        r = await a.call_tool("memory_insert", {"label": "human", "new_string": f"alice: {SECRET}", "insert_line": 0})
        assert not r.is_error, text_of(r)
        r = await a.call_tool("memory", {"command": "create", "path": "/memories/alice-notes", "file_text": SECRET})
        assert not r.is_error, text_of(r)
        inserted = await a.call_tool("archival_memory_insert", {"content": f"the vault code is {SECRET}"})
        passage = inserted.structured_content["ids"][0]  # type: ignore[index]
        r = await a.call_tool("conversation_log", {"messages": [{"role": "user", "content": f"remember {SECRET}"}]})
        assert not r.is_error, text_of(r)
        # alice also writes to the shared agent
        async with user_client(shared, alice, agent="team") as team:
            r = await team.call_tool("archival_memory_insert", {"content": "team standup at nine"})
            assert not r.is_error, text_of(r)

    leaks: list[str] = []
    attempts = 0
    secrets_of_alice = [SECRET, "alice-notes", passage, "standup"]

    def check(what: str, text: str) -> None:
        for secret in secrets_of_alice:
            if secret in text:
                leaks.append(f"{what}: {secret!r} in {text[:200]!r}")

    never_id = passage[:-6] + "000000" if passage[-6:] != "000000" else passage[:-6] + "111111"
    bob_notes: list[str] = []

    async def bob_heard(message: Any) -> None:
        root = getattr(message, "root", message)
        if getattr(root, "method", None):
            bob_notes.append(f"{root.method} {getattr(getattr(root, 'params', None), 'uri', '')}")

    async with user_client(shared, bob, mode="legacy", message_handler=bob_heard) as b:
        await b.subscribe_resource("memory://core")
        await b.subscribe_resource("memory://blocks/human")
        tools = [t.model_dump(by_alias=True) for t in (await b.list_tools()).tools]
        assert {"memory_insert", "archival_memory_search", "memory"} <= {t["name"] for t in tools}
        while attempts < 1000:
            for tool in tools:
                for label, ident in (("alice-notes", passage), ("zz-never-label", never_id)):
                    args = probe_arguments(tool, label, ident, SECRET)
                    try:
                        result = await b.call_tool(tool["name"], args)
                        answer = text_of(result) + json.dumps(result.structured_content or {})
                    except Exception as exc:  # a protocol error is an answer too: it must not tell either
                        answer = str(exc)
                    attempts += 1
                    check(f"tool {tool['name']}", answer.replace(label, "<label>").replace(ident, "<id>"))
                    if label == "alice-notes":
                        theirs = answer.replace(label, "<label>").replace(ident, "<id>")
                    else:
                        mine = answer.replace(label, "<label>").replace(ident, "<id>")
                        if _normalized(theirs) != _normalized(mine):
                            leaks.append(
                                f"tool {tool['name']} answers differently for alice's things: {theirs[:300]!r} vs {mine[:300]!r}"
                            )
            for uri in ("memory://core", "memory://archival", "memory://blocks/human"):
                contents = await b.read_resource(uri)
                attempts += 1
                check(f"resource {uri}", json.dumps([c.model_dump(mode="json") for c in contents.contents]))
            listed = json.dumps([r.model_dump(mode="json") for r in (await b.list_resources()).resources])
            attempts += 1
            check("resources/list", listed)
            check("prompt memory_system", json.dumps((await b.get_prompt("memory_system", {})).model_dump(mode="json")))
            attempts += 1
            # her block by name, as a resource and as a prompt: the answer for a label that never existed
            answers: dict[str, list[str]] = {}
            for label in ("alice-notes", "zz-never-label"):
                for name, ask in (
                    ("resource", lambda label=label: b.read_resource(f"memory://blocks/{label}")),
                    ("prompt", lambda label=label: b.get_prompt("memory_block", {"label": label})),
                ):
                    try:
                        answer = json.dumps((await ask()).model_dump(mode="json"))
                    except Exception as exc:
                        answer = str(exc)
                    attempts += 1
                    answer = answer.replace(label, "<label>")
                    check(f"{name} memory_block", answer)
                    answers.setdefault(name, []).append(_normalized(answer))
            for name, pair in answers.items():
                if pair[0] != pair[1]:
                    leaks.append(f"{name} answers differently for alice's block: {pair}")
        check("notifications", " ".join(bob_notes))
        assert not any("memory://" in n for n in bob_notes), bob_notes  # alice's edits told bob nothing

    # bob names alice's agent, or the shared one he is not in: the same refusal as for an agent that does not exist
    alice_agent = authority_agent(authority, "alice")
    answers = set()
    for agent in (alice_agent, "team", "no-such-agent", "default"):
        refused = post_agent(shared, bob, agent)
        attempts += 1
        assert refused.status_code == 403, (agent, refused.status_code)
        answers.add(refused.text)
    assert len(answers) == 1
    # alice's session is hers: bob presenting its id gets "Session not found", as for any unknown session
    opened = post(shared, alice)
    session = opened.headers["mcp-session-id"]
    hijack = httpx.post(
        shared.url,
        headers={**HEADERS, "authorization": f"Bearer {bob}", "mcp-session-id": session},
        content=json.dumps({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}),
        timeout=30,
    )
    assert hijack.status_code == 404
    # the inspector shows bob his agents only, and alice's agent is refused as any other
    ui = f"http://127.0.0.1:{shared.port}/ui/api"
    listed_agents = httpx.get(f"{ui}/agents", headers={"authorization": f"Bearer {bob}"}, timeout=30)
    assert listed_agents.status_code == 200
    check("inspector agents", listed_agents.text)
    assert alice_agent not in listed_agents.text and "team" not in listed_agents.text
    for agent in (alice_agent, "team"):
        peek = httpx.get(f"{ui}/agent", params={"agent": agent}, headers={"authorization": f"Bearer {bob}"}, timeout=30)
        attempts += 1
        assert peek.status_code in (403, 404), peek.status_code
        check("inspector agent", peek.text.replace(agent, "<agent>"))

    # alice's things are all still there, and bob wrote nothing into them
    async with user_client(shared, alice) as a:
        core = (await a.read_resource("memory://core")).contents[0].text  # type: ignore[union-attr]
        assert SECRET in core and "alice-notes" in core
        found = await a.call_tool("archival_memory_search", {"query": "vault code"})
        assert SECRET in text_of(found)
    assert attempts >= 1000 and leaks == [], leaks[:5]


def _normalized(text: str) -> str:
    """An answer without what differs between any two calls: ids, versions, times, counts of attempts."""
    import re

    text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<uuid>", text)
    text = re.sub(r"\d{4}-\d\d-\d\dT[\d:.+Z-]+", "<time>", text)
    return re.sub(r"\d+", "<n>", text)


def authority_agent(authority: Authority, subject: str) -> str:
    """The name tiermem gives a user's own agent (process/oauth.py: ResourceServer.own_agent)."""
    from mcp.server.auth.provider import AccessToken

    from tiermem.process.oauth import ResourceServer
    from tiermem.process.oauth_settings import from_settings

    settings = from_settings(issuer=authority.issuer, public_url="http://127.0.0.1:1", path="/mcp")
    assert settings is not None
    return ResourceServer(settings).own_agent(AccessToken(token="", client_id="", scopes=[], subject=subject))


def post_agent(served: Served, token: str, agent: str) -> httpx.Response:
    return httpx.post(
        served.url,
        params={"agent": agent},
        headers={**HEADERS, "authorization": f"Bearer {token}"},
        content=json.dumps(INIT),
        timeout=30,
    )


async def test_shared_agent_for_its_group(authority: Authority, shared: Served) -> None:
    """carol, in group "team", reads what alice wrote to the shared agent; her own agent is apart from it."""
    carol = mint(authority, shared, sub="carol", groups=["team"])
    async with user_client(shared, carol, agent="team") as team:
        found = await team.call_tool("archival_memory_search", {"query": "standup"})
        assert "standup at nine" in text_of(found)
    async with user_client(shared, carol) as own:
        found = await own.call_tool("archival_memory_search", {"query": "standup"})
        assert "standup at nine" not in text_of(found)
