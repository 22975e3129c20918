"""Credential shapes found by a later sweep, each with its exact span, and the ordinary text next to them that stays
untouched: private key blocks whose armor has headers and a blank line (PGP, an encrypted PEM key), whole to their
END line or, cut short, to the end of their base64 lines; passwords said in more ways ("I set my password to ...",
"Password:" and the value on the next line, a PIN), keys and tokens said in a sentence, `docker login -p`, `.netrc`
entries, HTTP Basic headers, requests' ``auth=(user, password)``, Discord webhooks; and the ordinary text once taken
for one (a compound word after "password is", a Subresource Integrity digest, AWS's documentation's example keys),
and the code and references of Letta's public agent files (a variable, a call, a subscript, an environment variable's
name, 1Password's `op://`), the punctuation next to a value kept. And `tiermem doctor --secrets` redacting a stored
private key block whole, and checking a message's payload as it is redacted (a tool call's id is no credential)."""

from __future__ import annotations

import json

import pytest
from mcp.client import Client

from tiermem.base.config import Settings
from tiermem.domain import secret_audit, secrets
from tiermem.domain.factory import open_memory

from .conftest import serve_in_process, text_of

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
DISCORD_WEBHOOK = f"https://discord.com/api/webhooks/123456789012345678/{B1[:60]}x{B2[:7]}"

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
    # 2. passwords said in more ways
    ("the password for the old staging database server is Xk9vQ2mPz7!", "password", "Xk9vQ2mPz7!"),
    ("I set my password to Xk9vQ2mPz7! yesterday", "password", "Xk9vQ2mPz7!"),
    ("changed the root password to Xk9vQ2mPz7.", "password", "Xk9vQ2mPz7"),
    ('reset the wifi passphrase to "blue kettle 42"', "password", "blue kettle 42"),
    ("use Xk9vQ2mPz7! as the password", "password", "Xk9vQ2mPz7!"),
    ("use 'hunter22' as your new password", "password", "hunter22"),
    ("Username:\nbob\nPassword:\nXk9vQ2mPz7Lq\n", "password", "Xk9vQ2mPz7Lq"),
    ("  passcode:\r\n  4821\r\nthanks", "password", "4821"),
    ("my bank PIN is 4821", "PIN", "4821"),
    ("the pin code for the gate was 190872.", "PIN", "190872"),
    # 3. keys, tokens and secrets said in a sentence: a random-looking value
    ("the API key is 3f2a9c8b7d6e5f4a3b2c1d0e9f8a7b6c", "secret", "3f2a9c8b7d6e5f4a3b2c1d0e9f8a7b6c"),
    ("my token is Zq8vN3mPz7Lk2Jh5Xy.", "secret", "Zq8vN3mPz7Lk2Jh5Xy"),
    ("the client secret is Zq8vN3mPz7Lk2Jh5Xy", "secret", "Zq8vN3mPz7Lk2Jh5Xy"),
    ("the access token for the staging API was Zq8vN3mPz7Lk2Jh5Xy", "secret", "Zq8vN3mPz7Lk2Jh5Xy"),
    # 4. command lines, files and code
    ("docker login -u bob -p Zq8vN3mPz7Lk registry.example.com", "password on a command line", "Zq8vN3mPz7Lk"),
    ("podman login --password=Zq8vN3mPz7Lk quay.io", "password on a command line", "Zq8vN3mPz7Lk"),
    ("machine api.example.com login bob password Zq8vN3mPz7Lk", "password", "Zq8vN3mPz7Lk"),
    ("machine api.example.com\n  login bob\n  password hunter2\n", "password", "hunter2"),
    (
        "curl -H 'Authorization: Basic dXNlcjpYazl2UTJtUHo3THE=' https://x",
        "Basic auth credential",
        "dXNlcjpYazl2UTJtUHo3THE=",
    ),
    ('requests.get(url, auth=("bob", "Zq8vN3mPz7Lk"))', "password", "Zq8vN3mPz7Lk"),
    ("HTTPBasicAuth('bob', 'hunter2')", "password", "hunter2"),
    (f"post to {DISCORD_WEBHOOK} now", "Discord webhook", DISCORD_WEBHOOK),
    # 5. a value next to code's punctuation: the punctuation is not the value's, and stays
    ("client = genai.Client(api_key=Zq8vN3mPz7Lk2Jh5)", "secret", "Zq8vN3mPz7Lk2Jh5"),
    ("cfg = {'token': x, 'db': [DB_PASSWORD=Zq8vN3mPz7Lk]}", "secret", "Zq8vN3mPz7Lk"),
    ("run `mysql -u root -pZq8vN3mPz7Lk` first", "password on a command line", "Zq8vN3mPz7Lk"),
    ("camsnap add --user bob --pass Zq8vN3mPz7Lk`", "password on a command line", "Zq8vN3mPz7Lk"),
    # a name's suffix that is a secret's word or a stage: still a secret's name
    ('password_secure = "Zq8vN3mPz7Lk"', "secret", "Zq8vN3mPz7Lk"),
    ('if ("Zq8vN3mPz7Lk" == my_password) {}', "secret", "Zq8vN3mPz7Lk"),
    # a value shaped like a name but no name: random capitals, words run together with underscores
    ("API_KEY=X9K2_PQ7Z_M3N4", "secret", "X9K2_PQ7Z_M3N4"),
    ("DB_PASSWORD=correct_horse_battery_staple", "secret", "correct_horse_battery_staple"),
    # a quoted literal is a value, never a name; a bare word with a digits tail, or capitals naming no secret, no name
    ('password="SuperSecret123"', "secret", "SuperSecret123"),
    ("PASSWORD=Password1", "secret", "Password1"),
    ("password=Password2024", "secret", "Password2024"),
    ('password = "MyPassword1"', "secret", "MyPassword1"),
    ("password: 'TopSecret2024'", "secret", "TopSecret2024"),
    ("export API_KEY=MyApiKey2024", "secret", "MyApiKey2024"),
    ('secret_key = "DjangoSecretKey"', "secret", "DjangoSecretKey"),
    ("DB_PASSWORD=PROD_DB_2024", "secret", "PROD_DB_2024"),
    ('password="CORRECT_HORSE_BATTERY"', "secret", "CORRECT_HORSE_BATTERY"),
    ('password = "my_password"', "secret", "my_password"),
    ("API_TOKEN=ABCDEFGH_IJKLMNOP_QRSTUV", "secret", "ABCDEFGH_IJKLMNOP_QRSTUV"),
    # a name saying it holds something about a secret, given a random-looking value: a secret all the same
    ('secret_env = "Xk9vQ2mPz7!"', "secret", "Xk9vQ2mPz7!"),
    ('PASSWORD_ENV="Xk9vQ2mPz7!"', "secret", "Xk9vQ2mPz7!"),
    ('password_hint="Xk9vQ2mPz7!"', "secret", "Xk9vQ2mPz7!"),
    ('password_name="Xk9vQ2mPz7!"', "secret", "Xk9vQ2mPz7!"),
    # a value in a code span's backticks is read inside them (a command in backticks is a reference)
    ("the password is `Xk9vQ2mPz7a`", "password", "Xk9vQ2mPz7a"),
    ("set --password `Xk9vQ2mPz7a` on the cli", "password on a command line", "Xk9vQ2mPz7a"),
    ('password = "`Xk9vQ2mPz7a`"', "secret", "Xk9vQ2mPz7a"),
    ("password = `Xk9vQ2mPz7a`", "secret", "Xk9vQ2mPz7a"),
]

CLEAN = [
    "A PGP key block ends with its END line, after a checksum line such as =Ab3d.",
    # words after "password is": a compound word is no password (a passphrase of four words is one)
    "Reminder: the Wi-Fi password is case-sensitive, so type it carefully.",
    "Bank portal tip: the passphrase is space-separated words chosen by the user.",
    "the password is up-to-date; the passcode was out-of-date",
    # a digest of public content, and AWS's documentation's example keys
    '"integrity": "sha512-K3tL8oEnNh4n1g6Hb0Wn2kz9Y7S6yTjH8Qm4UuXoQ2WvR2gNq5h8dV3mFq1o1H3sIt5y9h0Bxq3wHn6A6w4ZtUQ=="',
    '<script integrity="sha384-oqVuAfXRKap7fdgcCY5uykM6+R9GqQ8K/uxy9rx7HNQlGYl1kPzQho1wx4JwY8wC">',
    "AKIAIOSFODNN7EXAMPLE\nwJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    'AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE\nAWS_SECRET_ACCESS_KEY="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"',
    # said in a sentence, but no password, key or PIN
    "I set my password to something stronger; I changed my password to the one we agreed on.",
    "Reset the password to default, then set the passcode to expire in 30 days.",
    "Use your birthday as the password? Use it as the password. Use this as the passphrase.",
    "the password for the wifi at the cafe is on the fridge; the password for my old account at the bank is lost",
    "the token is expired, my token is invalid now, the API key is in the vault, the secret is out.",
    "the access token was revoked; the client secret is stored in Vault; the session token is abc123.",
    "my token is ERC20-compatible, the API key is base64-encoded, the secret is sha256-hashed before storage.",
    "the token is 12 characters long; the API key is YOUR_API_KEY; my token is <token>",
    "my pin is in my wallet; the pin is 3 inches long; the PIN was 2024-05-08? Pinterest is 2015 old",
    "Password:\nChanged yesterday\nPassword:\nrequired\nPassword:\n\nNext\nPassword:\n********",
    "Reset your password:\nhttps://example.com/reset?x=1",
    # code, headers and commands without one
    'requests.get(url, auth=(user, password)); auth=("user", "pass"); HTTPBasicAuth("user", "password")',
    "He did basic training in 2010; basic authentication is weak; Authorization: Basic realm",
    "docker login -u bob --password-stdin registry.example.com; docker login registry -p $PASS",
    "the machine learning password is weak",
    "https://discord.com/channels/123456789012345678/987654321098765432",
    # code and references from Letta's public agent files (lettabot.af, void.af, lettabot-builder.af,
    # letta_max_messages.af): a variable, a call, a subscript, an environment variable's name, a secret manager's
    # reference, a placeholder
    "client = genai.Client(api_key=api_key)",
    '"X-Goog-Api-Key": api_key,\n"Content-Type": "application/json", "Api-Key": api_key, "X-Pinecone-API-Version"',
    "app = FirecrawlApp(api_key=firecrawl_api_key)\nopenai_client = openai.OpenAI(api_key=openai_key) if openai_key",
    "secret = request.headers['X-Secret']\ntoken = config[\"token\"]",
    "client_secret=consumer_secret,\nresource_owner_secret=access_token_secret\n)",
    "- API key in secrets: `LETTA_API_KEY` (user must add this)",
    'apiKey: "OPENAI_KEY_HERE"',
    'export DB_PASSWORD="op://app-prod/db/password"',
    '- `export DB_PASSWORD="op://app-prod/db/password"`\nDB_PASSWORD=vault:secret/data/db#password',
    "camsnap add --name kitchen --host 192.168.0.10 --user user --pass pass`",
    '"api_key_source": "system_settings",',
    'cfg = {"api_key": api_key}; TOKEN=GITHUB_TOKEN; token = access_token; password_hint: "your pet\'s name"',
    # code naming a secret, an environment variable's name, a name about a secret given words, a shell's command
    'password=myPassword; apiKey = openaiApiKey; "api_key_env": "OPENAI_API_KEY", password_length = "12"',
    "the password is `cat ~/.pw`; DB_PASSWORD=`pass show db`; export DB_PASSWORD=`$(op read x)`",
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
    secrets.refuse(text, "the test")  # a write of it is not refused


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
    assert audit.counts() == {"private key": 2}  # each passage's content (its searched text repeats it: once)
    assert secret_audit.doctor_secrets(settings, redact_found=True, yes=True) == 0
    rows = [str(r) for r in open_memory(settings).archive.rows.backup_rows("passages", vectors=False)]
    assert len(rows) == 2 and not any(B1 in r or B2 in r or "Ab3d" in r for r in rows), rows


# Letta's tools' source and skills' files, kept in an agent file's documents (read whole as their JSON text, where a
# line break is "\n"): each line is read as a line, not run into the next one
LETTA_SOURCES = [
    "    # Initialise client\n    client = genai.Client(api_key=api_key)\n\n    # Set up output",
    "            resource_owner_key=access_token,\n            resource_owner_secret=access_token_secret\n        )\n",
    "- Add camera: `camsnap add --name kitchen --host 192.168.0.10 --user user --pass pass`\n\nCommon commands\n",
    "- API key in secrets: `LETTA_API_KEY` (user must add this)\n\n\n## Releases\n- npm publish: tracked in #174;\n",
]


@pytest.mark.parametrize("source", LETTA_SOURCES)
@pytest.mark.parametrize("as_text", [False, True])
def test_code_in_a_json_document_is_read_line_by_line(source: str, as_text: bool) -> None:
    doc = {"tools": [{"name": "t", "source_code": source}]}
    assert secrets.redact_document(doc, as_text=as_text) == (doc, [])
    assert secrets.find(json.dumps(doc, ensure_ascii=False)) == []  # the text a document is stored and checked as


def test_a_value_in_json_text_ends_at_its_escaped_line_break() -> None:
    text = json.dumps({"env": "DB_PASSWORD=Zq8vN3mPz7Lk\nDB_PORT=5432", "cmd": "mysql -pZq8vN3mPz7Lk\tdb"})
    assert [text[f.start : f.end] for f in secrets.find(text)] == ["Zq8vN3mPz7Lk"] * 2
    doc, found = secrets.redact_document({"src": "f(api_key=api_key)\nx = 1\npassword = 'Zq8vN3mPz7Lk'\n"})
    assert doc == {"src": "f(api_key=api_key)\nx = 1\npassword = '[redacted: secret]'\n"} and found == [
        (("src",), "secret")
    ]


def test_in_plain_text_a_backslash_and_an_n_are_part_of_a_value() -> None:
    # Only JSON text writes a line break as "\n": elsewhere they are two characters of the secret, taken whole
    ghp = "ghp_abc\\nDEF1234567890abcdefghijklmnopqrstuvwxyz"
    for text, secret in [("DB_PASSWORD=Zq8\\nvN3mPz7Lk", "Zq8\\nvN3mPz7Lk"), (f"GITHUB_TOKEN={ghp} ok", ghp)]:
        assert [text[f.start : f.end] for f in secrets.find(text)] == [secret]
        # the same text as a JSON document's: the backslash written "\\", no line break (the test above: one is)
        as_json = json.dumps({"env": text})
        assert [as_json[f.start : f.end] for f in secrets.find(as_json)] == [json.dumps(secret)[1:-1]]


@pytest.mark.anyio
async def test_a_models_write_of_code_or_a_reference_naming_a_secret_is_not_refused(settings: Settings) -> None:
    # What the refusal itself asks for ("store a description or a reference instead") is stored as given.
    texts = [
        "To call Gemini: client = genai.Client(api_key=api_key)",
        'Our 1Password ref is export DB_PASSWORD="op://app-prod/db/password"',
    ]
    async with Client(serve_in_process(settings), cache=None) as c:
        for text in texts:
            result = await c.call_tool("archival_memory_insert", {"content": text})
            assert not result.is_error, text_of(result)
        result = await c.call_tool("memory_insert", {"label": "human", "new_string": "camsnap add --pass pass`"})
        assert not result.is_error, text_of(result)
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    assert sorted(p.content for p in memory.archive.rows.passages_of(agent)) == sorted(texts)
    assert memory.block(agent, "human").value.endswith("camsnap add --pass pass`")


# Letta Code's ids: an Anthropic reasoning signature and a toolu_ tool-call id, random-looking but no credential
SIGNATURE = (
    "EtYCCkYIChgCKkCc9sF+VJwjjfbdESXDLni5hKJGFSiUkCwl+FS55TmNnev1IrMvQfZf4alBLtd0OZxvmBsEAsYq8X0hJj3BmG69EgycIORj"
    "HEC3vhA/qYQaDNGyiEHMyPQUZhyfeSIw14VHe3CcSTqIjeCqJltqVycGEmSBi/YaU7KeDQvk5FFpoTXiFkLYljPWtxs"
)
CALL = "toolu_01U6oBrCiQWoHsUAxq3hiDEp"
GHP = "ghp_" + "R8kT2mVx9QbL4nZc7Yw1Hd5Jf3Ps6Ge0Aa12"


def test_doctor_checks_a_payload_as_it_is_redacted_its_ids_and_signatures_no_credential(settings: Settings) -> None:
    # A payload as an agent file's import logs it: tool-call ids and reasoning signatures are kept (structural), a
    # credential in a tool call's arguments is not. doctor reports only what --redact would change.
    memory = open_memory(settings.model_copy(update={"secret_scan": "off"}))
    agent = memory.ensure_agent("default").id
    call = {"id": CALL, "type": "function", "function": {"name": "Bash", "arguments": json.dumps({"cmd": "ls"})}}
    ids = json.dumps({"kind": "assistant", "tool_calls": [call], "letta": {"signature": SIGNATURE}})
    result = json.dumps({"kind": "tool_result", "tool_call_id": CALL, "letta": {"tool_call_id": CALL}})
    leaked = {
        **call,
        "function": {"name": "Bash", "arguments": json.dumps({"cmd": f"gh auth login --with-token {GHP}"})},
    }
    holding = json.dumps({"kind": "assistant", "tool_calls": [leaked], "letta": {"signature": SIGNATURE}})
    logged = memory.archive.log_messages(
        agent,
        [
            {"role": "assistant", "content": "Reading it.", "payload": ids},
            {"role": "tool", "content": "# Readme", "payload": result},
            {"role": "assistant", "content": "Logging in.", "payload": holding},
        ],
    )
    audit = secret_audit.scan(open_memory(settings))
    assert [(f.where, f.kinds, f.places) for f in audit.found] == [
        (
            f"message {logged[2].id} (payload)",
            ("GitHub token",),
            "a GitHub token (at tool_calls.0.function.arguments.cmd)",
        )
    ]
    assert secret_audit.doctor_secrets(settings, redact_found=True, yes=True) == 0
    payloads = {
        r["id"]: r["payload"] for r in open_memory(settings).archive.rows.backup_rows("messages", vectors=False)
    }
    assert payloads[logged[0].id] == ids and payloads[logged[1].id] == result
    kept = json.loads(payloads[logged[2].id])
    assert kept["letta"]["signature"] == SIGNATURE and kept["tool_calls"][0]["id"] == CALL
    assert json.loads(kept["tool_calls"][0]["function"]["arguments"]) == {
        "cmd": "gh auth login --with-token [redacted: GitHub token]"
    }
    assert secret_audit.scan(open_memory(settings)).found == []


def test_doctor_checks_a_payload_that_is_not_json_as_text(settings: Settings) -> None:
    memory = open_memory(settings.model_copy(update={"secret_scan": "off"}))
    agent = memory.ensure_agent("default").id
    memory.archive.log_messages(agent, [{"role": "user", "content": "hi", "payload": f"raw {GHP} and '{SIGNATURE}'"}])
    found = secret_audit.scan(open_memory(settings)).found
    assert [(f.where.split(" (")[1], f.kinds) for f in found] == [("payload)", ("GitHub token", "high-entropy secret"))]


RUN = 200_000  # characters: a pattern that rescans a run per character of it would take many minutes on this
ADVERSARIAL = [
    # a bare value said in a sentence, then a long run of punctuation that no space ends
    ("the api key is a" + "." * RUN + "x; the password is Xk9vQ2mPz7!", "password", "Xk9vQ2mPz7!"),
    ("the password is a" + "." * RUN + "x and my token is Zq8vN3mPz7Lk2Jh5Xy", "secret", "Zq8vN3mPz7Lk2Jh5Xy"),
    ("I set my password to a" + "." * RUN + "x. use Xk9vQ2mPz7! as the password", "password", "Xk9vQ2mPz7!"),
    # a bare value, then a long run of closers each opened before it on its line
    ("(" * RUN + " DB_PASSWORD=Zq8vN3mPz7Lk" + ")" * RUN, "secret", "Zq8vN3mPz7Lk"),
]


@pytest.mark.parametrize(("text", "kind", "secret"), ADVERSARIAL, ids=["api-key", "password", "set-to", "closers"])
def test_a_long_run_of_punctuation_is_read_once(text: str, kind: str, secret: str) -> None:
    # The value patterns take each step one way only (a possessive run of punctuation, an atomic group), and the
    # closers are counted in one pass: 200 KB of them is read as fast as any other text (the suite's timeout guards)
    assert [(f.kind, text[f.start : f.end]) for f in secrets.find(text)] == [(kind, secret)]
