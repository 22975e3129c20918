"""Credential shapes found by a later sweep, each with its exact span, and the ordinary text next to them that stays
untouched: private key blocks whose armor has headers and a blank line (PGP, an encrypted PEM key), whole to their
END line or, cut short, to the end of their base64 lines; and `tiermem doctor --secrets` redacting such a stored
block whole."""

from __future__ import annotations

import pytest

from tiermem.base.config import Settings
from tiermem.domain import secret_audit, secrets
from tiermem.domain.factory import open_memory

B1 = "lQOYBGVxYzQBCADGk3Jx9mQ2pV7sL8wN4tR1yU6iO0pA3sD5fG7hJ9kL2zX4cV6b"
B2 = "N8mQ1wE3rT5yU7iO9pA2sD4fG6hJ8kL0zX3cV5bN7mQ9wE1rT3yU5iO7pA0sD2fG"
PGP = (
    "-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: GnuPG v2\nComment: mine\n\n"
    f"{B1}\n{B2}\n=Ab3d\n-----END PGP PRIVATE KEY BLOCK-----"
)
ENCRYPTED_PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,3F17F5316E2BAC89E0A3D3A7B5B8E2F1\n"
    f"\n{B1}\n{B2}\n-----END RSA PRIVATE KEY-----"
)

# (text, kind, secret): the finding's span is exactly the secret's
CASES = [
    # 1. a private key block whole, its armor headers and the blank line after them inside
    (f"my gpg key is\n{PGP}\nthanks", "private key", PGP),
    (f"key:\n{PGP.replace(chr(10), chr(13) + chr(10))}\r\n", "private key", PGP.replace("\n", "\r\n")),
    (f"{ENCRYPTED_PEM}\n\nthat one", "private key", ENCRYPTED_PEM),
    ("-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n" + B1 + "\n-----END PGP PRIVATE KEY BLOCK-----", "private key", None),
    # cut short (no END line): the headers, the blank line and the base64 lines, up to a line cut with "..."
    (f"{PGP.split('=Ab3d')[0]}=Ab3d\n\nthanks, bye", "private key", PGP.split("\n=Ab3d")[0] + "\n=Ab3d"),
    (
        f"{ENCRYPTED_PEM.split(B2)[0]}{B2}\nand the rest is lost",
        "private key",
        ENCRYPTED_PEM.split("\n" + B2)[0] + "\n" + B2,
    ),
    (
        f"-----BEGIN PRIVATE KEY-----\n{B1}\n{B2[:20]}...\nrest",
        "private key",
        f"-----BEGIN PRIVATE KEY-----\n{B1}\n{B2[:20]}...",
    ),
    (
        f'{{"k": "-----BEGIN PRIVATE KEY-----\\n{B1}\\n{B2}", "x": 1}}',
        "private key",
        f"-----BEGIN PRIVATE KEY-----\\n{B1}\\n{B2}",
    ),
    (f"-----BEGIN PRIVATE KEY----- {B1} {B2} was all I had", "private key", f"-----BEGIN PRIVATE KEY----- {B1} {B2}"),
]

CLEAN = [
    "A PGP key block ends with its END line, after a checksum line such as =Ab3d.",
]


@pytest.mark.parametrize(("text", "kind", "secret"), CASES, ids=[f"{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_a_credential_of_a_new_shape_is_found_whole_and_redacted(text: str, kind: str, secret: str | None) -> None:
    secret = text if secret is None else secret
    found = secrets.find(text)
    assert [(f.kind, text[f.start : f.end]) for f in found] == [(kind, secret)]
    start, end = found[0].start, found[0].end
    assert secrets.redact(text).text == f"{text[:start]}[redacted: {kind}]{text[end:]}"


@pytest.mark.parametrize("text", CLEAN)
def test_ordinary_text_next_to_them_is_not_flagged(text: str) -> None:
    assert secrets.find(text) == []


def test_a_key_block_before_another_is_not_run_into_it() -> None:
    # cut short, the first key ends with its base64 lines: the prose between the two blocks stays
    text = f"-----BEGIN PRIVATE KEY-----\n{B1}\n\nprose here\n{ENCRYPTED_PEM}\nok"
    assert secrets.redact(text).text == "[redacted: private key]\n\nprose here\n[redacted: private key]\nok"


def test_doctor_redacts_a_stored_private_key_block_whole(settings: Settings) -> None:
    memory = open_memory(settings.model_copy(update={"secret_scan": "off"}))
    agent = memory.ensure_agent("default").id
    memory.archive.insert(agent, f"my gpg key is\n{PGP}")
    memory.archive.insert(agent, f"and my old ssh key:\n{ENCRYPTED_PEM}")
    audit = secret_audit.scan(open_memory(settings))
    assert audit.counts() == {"private key": 4}  # each passage's content and its searched text
    assert secret_audit.doctor_secrets(settings, redact_found=True, yes=True) == 0
    rows = [str(r) for r in open_memory(settings).archive.rows.backup_rows("passages", vectors=False)]
    assert len(rows) == 2 and not any(B1 in r or B2 in r or "Ab3d" in r for r in rows), rows
