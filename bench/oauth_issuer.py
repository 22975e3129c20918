"""A minimal OAuth issuer on loopback for ``python -m bench load --oauth``: its metadata (RFC 8414) and JWKS, and
access tokens minted here for the benchmark's clients (RS256, a fresh key per run). Only what a resource server reads:
the real sign-in flow is exercised by tests/test_oauth.py against oidc-provider."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

KID = "bench-1"


class Issuer:
    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        public = {**json.loads(RSAAlgorithm.to_jwk(self._key.public_key())), "kid": KID, "alg": "RS256", "use": "sig"}
        documents = {
            "/.well-known/oauth-authorization-server": {"issuer": self.url, "jwks_uri": f"{self.url}/jwks"},
            "/jwks": {"keys": [public]},
        }

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                body = documents.get(self.path)
                data = json.dumps(body).encode() if body is not None else b"{}"
                self.send_response(200 if body is not None else 404)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def mint(
        self, audience: str, subject: str = "bench", seconds: int = 3600, scope: str = "memory:read memory:write"
    ) -> str:
        now = int(time.time())
        claims = {
            "iss": self.url,
            "sub": subject,
            "aud": audience,
            "iat": now,
            "exp": now + seconds,
            "scope": scope,
        }
        return jwt.encode(claims, self._key, algorithm="RS256", headers={"kid": KID, "typ": "at+jwt"})

    def close(self) -> None:
        self._server.shutdown()
