"""Credentials the detector once let through (found by exploratory testing), each with its exact span, and the
ordinary text next to them that stays untouched: a JWT's signature, short URL passwords, passwords on command
lines, Google OAuth access and refresh tokens, keys glued to the text before them, keys with zero-width characters
inside, keys pasted in pieces (a line break or a space after their prefix), ``.env`` names abbreviated (``DB_PASS``, ``DB_PASS_PROD``); and a refused write judged by whole credentials,
not by substrings."""

from __future__ import annotations

import pytest

from tiermem.base.config import Settings
from tiermem.base.errors import SecretError
from tiermem.domain import secrets
from tiermem.domain.blocks import Rethink
from tiermem.domain.factory import open_memory

from .test_secrets import AKIA, ANTHROPIC, GHP, JWT

JWT_HEADER_PAYLOAD = JWT.rsplit(".", 1)[0]
GOOGLE_OAUTH = "ya29." + "a0AfH6SMBx3kQ9vL2mZ7wR4pT8yU1iO5eA6sD0fG3hJ9kL2zX5cV8bN1mQ4wE7rT0yU3iO6pA9sD2fG5hJ8kL1zX4c"
GOOGLE_REFRESH = "1//0" + "gLx7Qm2Zt8rBv4Nc7Kd1Pw6Hq9Sj3Uy5Te0Fa2Gb4Hc6Jd8Ke1Lf3Mg5Nh7Pi9Qj2Rk4Sl6Tm8Un1Vo3Wp5Xq7Y"
GITLAB_DEPLOY = "gldt-" + "Hq7Lm2Zt8rBv4Nc7Kd1Pw6"  # a format only detect-secrets' plugin knows
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLKEY"  # 40 characters, as AWS makes them
SLACK = "xoxb-1234567890-1234567890-Hq7Lm2Zt8rBv4Nc7Kd1Pw6Xy"
BASE64 = "q8ZbV3nR0xLk7PmW2sTy9HdF4gJcA6eU1oNiXvBq+/Kz5w=="
ZERO_WIDTH = ("\u200b", "\u200c", "\u200d", "\u2060", "\ufeff")

# (text, kind, secret): the finding's span is exactly the secret's
CASES = [
    # 1. a JWT whole: header, payload and signature
    (f"t {JWT}", "JSON web token", JWT),
    (f"token {JWT}.", "JSON web token", JWT),  # the sentence's full stop is not a segment
    (f"unsigned {JWT_HEADER_PAYLOAD} here", "JSON web token", JWT_HEADER_PAYLOAD),
    # 2. a URL's password, whatever its length
    ("mysql://root:rootpw@localhost/db", "password in a URL", "rootpw"),
    ("ftp://bob:guest@files.example.com/", "password in a URL", "guest"),
    ("redis://:1234@cache:6379/0", "password in a URL", "1234"),
    ("amqp://app:pw9@queue/", "password in a URL", "pw9"),
    # 3. a password on a command line
    ("curl -u admin:S3cretPassw0rd https://api.example.com/", "password on a command line", "S3cretPassw0rd"),
    ("curl --user admin:hunter2 https://x.example.com", "password on a command line", "hunter2"),
    ('curl -X POST \\\n  -u "deploy:rootpw" \\\n  https://x.example.com', "password on a command line", "rootpw"),
    ("mysql -u root -pMyS3cretPwd shop", "password on a command line", "MyS3cretPwd"),
    ("mysqldump -u root -proot shop > dump.sql", "password on a command line", "root"),
    ("mysql --password=rootpw shop", "password on a command line", "rootpw"),
    ("pg_dump --password S3cretPassw0rd shop", "password on a command line", "S3cretPassw0rd"),
    ("sshpass -p S3cretPassw0rd ssh deploy@host", "password on a command line", "S3cretPassw0rd"),
    ("redis-cli -h cache -a hunter2 ping", "password on a command line", "hunter2"),
    ("PGPASSWORD=S3cretPassw0rd psql -h db", "secret", "S3cretPassw0rd"),
    # 4. a Google OAuth access token
    (f"Authorization token {GOOGLE_OAUTH} expired", "Google OAuth access token", GOOGLE_OAUTH),
    (f'{{"refresh_token": "{GOOGLE_REFRESH}", "scope": "email"}}', "Google OAuth refresh token", GOOGLE_REFRESH),
    (f"refresh with {GOOGLE_REFRESH}.", "Google OAuth refresh token", GOOGLE_REFRESH),
    # 5. keys glued to what comes before them
    (f"key_{ANTHROPIC}", "Anthropic API key", ANTHROPIC),
    (f"x{ANTHROPIC}", "Anthropic API key", ANTHROPIC),
    (f"1{ANTHROPIC}", "Anthropic API key", ANTHROPIC),
    (f"x_{GHP}", "GitHub token", GHP),
    (f"x{GHP}", "GitHub token", GHP),
    (f"{GHP}_tail", "GitHub token", GHP),
    (f"x_{AKIA}", "AWS access key", AKIA),
    (f"clone with {GITLAB_DEPLOY} then", "GitLab token", GITLAB_DEPLOY),
    # 6. keys pasted in pieces: wrapped after their prefix (a terminal's width), split by a space
    (f"my key is {ANTHROPIC[:24]}\n{ANTHROPIC[24:]}", "Anthropic API key", f"{ANTHROPIC[:24]}\n{ANTHROPIC[24:]}"),
    (
        f"key:\n  {ANTHROPIC[:40]}\n  {ANTHROPIC[40:]}\nthanks",
        "Anthropic API key",
        f"{ANTHROPIC[:40]}\n  {ANTHROPIC[40:]}",
    ),
    (f"token {GHP[:20]}\n{GHP[20:]} works", "GitHub token", f"{GHP[:20]}\n{GHP[20:]}"),
    (f"token {GHP[:20]} {GHP[20:]} works", "GitHub token", f"{GHP[:20]} {GHP[20:]}"),
    (f"{SLACK[:30]}\r\n{SLACK[30:]}", "Slack token", f"{SLACK[:30]}\r\n{SLACK[30:]}"),
    # 7. .env names abbreviated
    ("DB_PASS=anothersecretPW987", "secret", "anothersecretPW987"),
    ("ADMIN_PW=Adm1nPassw0rd", "secret", "Adm1nPassw0rd"),
    ("DB_PASS_PROD=anothersecretPW987", "secret", "anothersecretPW987"),
    ("# .env\nDB_HOST=db\nADMIN_PW_2=Adm1nPassw0rd\n", "secret", "Adm1nPassw0rd"),
    ("BASIC_AUTH=deploy:pass123", "secret", "deploy:pass123"),
    ('{"db_pass": "anothersecretPW987"}', "secret", "anothersecretPW987"),
    ("X-API-KEY: abcd1234efgh5678", "secret", "abcd1234efgh5678"),
    # 8. a random-looking value after a key's or a token's name and a colon
    (f"here's my api key: {BASE64}", "secret", BASE64),
    (f"the signing key for staging:  {BASE64}.", "secret", BASE64),
    (f"the signing key is /{BASE64[1:]}", "secret", f"/{BASE64[1:]}"),  # base64 starting with "/": no path
    # 8. said in words: a password in a sentence, an AWS secret key after the word "secret" or its access key
    ("the password is correct-horse-battery-staple", "password", "correct-horse-battery-staple"),
    ("password is Tr0ub4dor&3xyz.", "password", "Tr0ub4dor&3xyz"),
    ("my github password is Sup3rS3cret!", "password", "Sup3rS3cret!"),
    ('The passphrase for the backup disk was "s3cr3t sauce"', "password", "s3cr3t sauce"),
    ("the door passcode is 4821", "password", "4821"),
    (f"aws secret key: {AWS_SECRET}", "AWS secret access key", AWS_SECRET),
]

CLEAN = [
    "the password is required",
    "My password is wrong. The password was changed; the passport is ABC12345; password is the same as before.",
    "Passwords are stored hashed; the password to the wifi is on the fridge.",
    "the secret is in commit 3f2a9c1e0b4d5f6a7b8c9d0e1f2a3b4c5d6e7f80",
    "secret sauce: base64 dGhpcyBpcyBhIHRlc3Qgb2YgYmFzZTY0IGVuY29kaW5n",
    "Show your passport at the gate, then pass security.",
    "I pass the test every time; she passed hers too.",
    "The sky-ant farm sells sky-ant-colony kits.",
    "Notes in task-proj-management-dashboard-2024-final and risk_test_calculationsForUser1.",
    "See https://example.com/a:b@c for the path syntax.",
    # URL placeholders
    "postgres://user:pass@localhost/db, mysql://root:${DB_PASS}@db/x, redis://:***@cache, amqp://u:xxx@q",
    "ftp://anonymous:guest@ftp.example.org/pub and ftp://anonymous:me%40example.com@ftp.example.org/",
    # command lines without a password
    "mysql -u root -p shop",  # -p alone prompts
    "docker run -u 1000:1000 --user 1000:1000 image",
    'curl --user-agent "Mozilla/5.0 (X11: Linux)" -u "$USER:$PASS" https://x.example.com',
    "Use --password to set it, or --no-password to skip.",
    "sshpass -e ssh -p 2222 deploy@host",
    # .env-like names that are not secrets
    "--- PASS: TestSomethingLong (0.00s)",
    "n_pass = n_total_2\nBYPASS=cache_layer_1\nNO_AUTH = 'NO_AUTH'",
    "DB_PASS=changeme\nDB_PASS=$DB_PASS\nDB_PW=short",
    "DB_PASS_PROD=${DB_PASS_PROD}\nBYPASS_PROD=cache_layer_1\nNO_AUTH_TEST = 'NO_AUTH_TEST'",
    "1//0 is undefined; x = 1//0 + 2; see https://example.com/1//0/page",
    '{"skip_auth": skip_auth, "x-api-key": self.api_key}\nclient(token=self.token)',
    # a key's prefix named in prose, the next word after a space or on the next line
    "hf_hub download then\nAKIA keys, sk-proj- keys, ghp_ tokens are 40 characters\nlong; xoxb- tokens\nare bots'",
    # a bare random string with no key's name before it: a hash, an id, data
    f"the checksum {BASE64} matches; api key: see the vault",
    "the API key is /Volumes/Data2024/Backups/Keys; the access token: /api/v1/Users/12345/Tokens",
]


@pytest.mark.parametrize(("text", "kind", "secret"), CASES, ids=[f"{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_a_credential_once_missed_is_found_whole_and_redacted(text: str, kind: str, secret: str) -> None:
    found = secrets.find(text)
    assert [(f.kind, text[f.start : f.end]) for f in found] == [(kind, secret)]
    start, end = found[0].start, found[0].end
    assert secrets.redact(text).text == f"{text[:start]}[redacted: {kind}]{text[end:]}"
    with pytest.raises(SecretError) as refused:
        secrets.refuse(text, "the test")
    assert secret not in str(refused.value)


@pytest.mark.parametrize("text", CLEAN)
def test_ordinary_text_next_to_them_is_not_flagged(text: str) -> None:
    assert secrets.find(text) == []


@pytest.mark.parametrize(
    "text",
    [f"token {GHP}\nthanks", f"token {GHP} Thanks", f"token {GHP}\n2024", f"{SLACK} 2024 was rotated", f"{SLACK}\nOK"],
)
def test_a_whole_key_is_not_joined_to_the_word_after_it(text: str) -> None:
    # a break is inside a key only while the key is shorter than its format (a piece of letters and digits, or with
    # a capital inside it, after it), or, for a format of no fixed length, when the piece after it looks random
    key = GHP if GHP in text else SLACK
    assert [text[f.start : f.end] for f in secrets.find(text)] == [key]


def test_an_aws_secret_key_after_its_access_key_is_found_with_it() -> None:
    text = f"my aws keys: {AKIA} {AWS_SECRET}"
    assert [(f.kind, text[f.start : f.end]) for f in secrets.find(text)] == [
        ("AWS access key", AKIA),
        ("AWS secret access key", AWS_SECRET),
    ]


def test_a_jwt_is_redacted_with_its_signature() -> None:
    assert secrets.redact(f"t {JWT}").text == "t [redacted: JSON web token]"
    assert secrets.redact(f"Bearer {JWT}").text == "Bearer [redacted: JSON web token]"


@pytest.mark.parametrize("invisible", ZERO_WIDTH, ids=[f"U+{ord(c):04X}" for c in ZERO_WIDTH])
def test_a_key_with_an_invisible_character_inside_is_found_and_placed_on_the_text(invisible: str) -> None:
    hidden = ANTHROPIC[:20] + invisible + ANTHROPIC[20:]
    text = f"x{invisible}y key {hidden} and {GHP[:10]}{invisible}{GHP[10:]}."
    found = secrets.find(text)
    assert [(f.kind, text[f.start : f.end]) for f in found] == [
        ("Anthropic API key", hidden),
        ("GitHub token", GHP[:10] + invisible + GHP[10:]),
    ]
    assert secrets.redact(text).text == f"x{invisible}y key [redacted: Anthropic API key] and [redacted: GitHub token]."


def test_a_new_copy_of_a_credential_is_refused_though_its_text_was_there() -> None:
    # held inside a longer token (the detector takes the whole run): sent alone, it is a new credential
    secrets.refuse(f"old {GHP}Zz9 kept", "the test", before=f"old {GHP}Zz9")
    with pytest.raises(SecretError, match="a GitHub token"):
        secrets.refuse(f"old {GHP}Zz9\nnew {GHP}", "the test", before=f"old {GHP}Zz9")
    # a second copy of one already there
    secrets.refuse(f"aws {AKIA}\nlikes tea", "the test", before=f"aws {AKIA}")
    with pytest.raises(SecretError, match=r"an AWS access key \(line 2"):
        secrets.refuse(f"aws {AKIA}\nagain {AKIA}", "the test", before=f"aws {AKIA}")
    # the same key, stored with an invisible character inside, is the key already there
    hidden = AKIA[:4] + "\u200b" + AKIA[4:]
    secrets.refuse(f"aws {AKIA}", "the test", before=f"aws {hidden}")


def test_a_block_holding_a_key_inside_a_longer_token_refuses_the_key_alone(settings: Settings) -> None:
    memory = open_memory(settings.model_copy(update={"secret_scan": "off"}))
    agent = memory.ensure_agent("default").id
    memory.edit(agent, "human", Rethink(f"token {GHP}Zz9", check_line_numbers=False))
    memory = open_memory(settings)
    with pytest.raises(SecretError, match="a GitHub token"):
        memory.edit(agent, "human", Rethink(f"token {GHP}Zz9\nclean {GHP}", check_line_numbers=False))
    assert memory.block(agent, "human").value == f"token {GHP}Zz9"


def test_an_edit_of_a_long_text_is_judged_as_a_whole_scan_would() -> None:
    """An edit of a long block is scanned around what changed (``secrets._changed``): a credential the edit makes,
    its cue far from the end, next to it or split by the edit, is refused, named at its place in the whole text; one
    held before and kept is not; a key block begun far above is read whole."""
    filler = "".join(f"note {n}: the garden needs water on day {n % 7}\n" for n in range(900))  # ~40 KB
    assert len(filler) > 20_000
    # an append that completes a sentence naming a password
    before = filler + "the wifi password is"
    with pytest.raises(SecretError, match=r"line 901"):
        secrets.refuse(before + " Tr0ub4dor&3xyz", "the test", before=before)
    # the value on the line after a "Password:" line already there
    before = filler + "Password:\n"
    with pytest.raises(SecretError, match=r"line 902"):
        secrets.refuse(before + "Tr0ub4dor&3xyz\n", "the test", before=before)
    # a credential written in the middle of the text, and one that was there before, far above, kept
    middle = len(filler) // 2
    held = f"aws {AKIA}\n" + filler
    edited = held[:middle] + f"\nnew token {GHP}\n" + held[middle:]
    with pytest.raises(SecretError, match="a GitHub token") as refused:
        secrets.refuse(edited, "the test", before=held)
    assert "AWS" not in str(refused.value)
    secrets.refuse(held + "likes tea\n", "the test", before=held)
    # a second copy, far from the first, is new, as in a whole scan
    with pytest.raises(SecretError, match="an AWS access key"):
        secrets.refuse(held + f"again {AKIA}\n", "the test", before=held)
    # a private key block begun far above the append that ends it
    key = "-----BEGIN RSA PRIVATE KEY-----\n" + "".join("MIIEowIBAAKCAQEAq" + "x" * 47 + "\n" for _ in range(30))
    before = key + filler
    with pytest.raises(SecretError, match="private key"):
        secrets.refuse(before + "-----END RSA PRIVATE KEY-----\n", "the test", before=before)
    # the window and a whole scan agree on every change made at every place of a long text
    for at in range(0, len(filler), 997):
        for piece in (f" {GHP} ", " Password:\n", " likes tea ", f"{AKIA[:10]}"):
            text = filler[:at] + piece + filler[at:]
            window = [(f.kind, f.start, f.end) for f in secrets._new(text, filler)]
            whole = [(f.kind, f.start, f.end) for f in secrets._new_whole(text, filler)]
            assert window == whole, (at, piece)
