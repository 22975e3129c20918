"""A real reverse proxy doing TLS in front of tiermem replicas: HAProxy on loopback (``python -m bench load --proxy``
and tests/test_proxy.py). Requests are spread round robin. Sticky (the default, for replicas that keep sessions): an
MCP session stays on the replica that opened it (a stick table learns each ``Mcp-Session-Id`` from the answer that
created it). ``sticky=False``, for stateless replicas (``http_stateless``): plain round robin, every request to the
next replica. Each answer names the replica that served it (header ``x-tiermem-replica``: r0, r1, ...). The
certificate is self-signed for 127.0.0.1, made with the ``openssl`` command."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

CONFIG = """global
    maxconn 2048
defaults
    mode http
    timeout connect 5s
    timeout client 300s
    timeout server 300s
    timeout http-request 30s
frontend mcp
    bind 127.0.0.1:{port} ssl crt {bundle}
    default_backend replicas
backend replicas
    balance roundrobin
    http-response set-header x-tiermem-replica %[srv_name]
{stick}{servers}
"""
# an MCP session stays on the replica that opened it: the session id it answered with picks it again
STICK = """    stick-table type string len 128 size 100k expire 30m
    stick on req.hdr(mcp-session-id)
    stick store-response res.hdr(mcp-session-id)
"""


def find(tool: str) -> str | None:
    """The program ``tool`` (Debian puts haproxy in /usr/sbin, often not on a user's PATH)."""
    return shutil.which(tool) or (f"/usr/sbin/{tool}" if Path(f"/usr/sbin/{tool}").exists() else None)


def self_signed(where: Path, openssl: str = "openssl") -> tuple[Path, Path]:
    """(certificate, certificate + key bundle for HAProxy), self-signed for 127.0.0.1."""
    key, cert = where / "key.pem", where / "cert.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert)]
        + ["-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )
    bundle = where / "bundle.pem"
    bundle.write_bytes(cert.read_bytes() + key.read_bytes())
    return cert, bundle


def start_haproxy(
    haproxy: str, where: Path, port: int, backends: list[int], *, sticky: bool = True
) -> tuple[subprocess.Popen[bytes], Path]:
    """(the HAProxy process, the certificate clients trust) for ``https://127.0.0.1:port`` over ``backends``;
    ``sticky``: keep each MCP session on its replica (a stick table), else plain round robin (stateless replicas)."""
    cert, bundle = self_signed(where, find("openssl") or "openssl")
    servers = "\n".join(f"    server r{r} 127.0.0.1:{p}" for r, p in enumerate(backends))
    config = where / "haproxy.cfg"
    config.write_text(
        CONFIG.format(port=port, bundle=bundle, stick=STICK if sticky else "", servers=servers), encoding="utf-8"
    )
    proc = subprocess.Popen([haproxy, "-db", "-f", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return proc, cert
