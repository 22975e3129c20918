"""Secrets are never stored: the detector (every kind, exact spans, no false alarm on prose, code, ids), hook turns
stored redacted, a model's writes refused through a real MCP client (nothing written, the kind named, the secret
never echoed), imports redacted, `tiermem doctor --secrets` finding and redacting, and the setting that turns it off."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.client import Client

from tiermem.base.config import BlockSpec, Settings
from tiermem.base.errors import SecretError
from tiermem.domain import autorecall, secret_audit, secret_scan, secrets
from tiermem.domain.blocks import Rethink
from tiermem.domain.factory import open_memory

from .conftest import serve_in_process, text_of

AKIA = "AKIA" + "Q3EGRIBFXPN7WMT4"
ANTHROPIC = "sk-ant-api03-" + "Xq9_Lm2-Zt8rBv4Nc7Kd1Pw6Hy3Jf5Gs0Ae" * 2 + "AbCdEf12-QQ"
GHP = "ghp_" + "R8kT2mVx9QbL4nZc7Yw1Hd5Jf3Ps6Ge0Aa12"
GITHUB_PAT = (
    "github_pat_" + "11ABCDEFG0123456789abc" + "_" + "Zx8Vb7Nm6Lk5Jh4Gf3Ds2Aq1Wz9Xc8Vb7Nm6Lk5Jh4Gf3Ds2Aq1Wz9Xc8Vb7Nm"
)
OPENAI = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" * 3 + "T3BlbkFJ" + "Qw7eRt6yUi5oPa4sDf3g"
GOOGLE = "AIza" + "SyD3fG7hJ2kL9mN4pQ8rS1tU6vW0xY5zA3b"
SLACK = "xoxb-" + "2718281828-3141592653-" + "q7W9e2R4t6Y8u1I3o5P0a2S4"
STRIPE = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "9aQ3rT7uLk"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAq7BFUpkGp3+LQmlQYx2eqzDV+xeG8kx/sQFV18S5JK6mD0WJ\n"
    "k2QxNp4rV1sT8uYw3zA6bC9dE2fG5hJ8kL1mN4pQ7rS0tU3vW6xY9zA2bC5dE8fG\n-----END RSA PRIVATE KEY-----"
)
HF = "hf_" + "aB3cD4eF5gH6iJ7kL8mN9oP0qR1sT2uV3w"
AZURE = "AccountKey=" + "Zm9vYmFyYmF6cXV4" * 5 + "Zm9vYmFyYQ=="

# (text, kind, secret): the finding's span is exactly the secret's
CASES = [
    (f"export ANTHROPIC_API_KEY={ANTHROPIC}", "Anthropic API key", ANTHROPIC),
    (f"my key is {OPENAI} ok", "OpenAI API key", OPENAI),
    (f"token {GHP} for the repo", "GitHub token", GHP),
    (f"GH_TOKEN={GITHUB_PAT}", "GitHub token", GITHUB_PAT),
    (f"the access key id is {AKIA}.", "AWS access key", AKIA),
    (f"aws_secret_access_key = {AWS_SECRET}", "AWS secret access key", AWS_SECRET),
    (f"maps key {GOOGLE} fails", "Google API key", GOOGLE),
    (f"SLACK_BOT_TOKEN={SLACK}", "Slack token", SLACK),
    (f"stripe.api_key = '{STRIPE}'", "Stripe key", STRIPE),
    (f"curl -H 'Authorization: Bearer {JWT}'", "JSON web token", JWT),
    (f"here is the key:\n{PEM}\nthanks", "private key", PEM),
    (
        f'{{"type": "service_account", "private_key": "{PEM.replace(chr(10), chr(92) + "n")}", "x": 1}}',
        "private key",
        PEM.replace("\n", "\\n"),
    ),
    ("DATABASE_URL=postgres://app:S3cr3t!pw@db.internal:5432/prod", "password in a URL", "S3cr3t!pw"),
    ("# .env\nDB_HOST=localhost\nDB_PASSWORD=Tr0ub4dor&3\n", "secret", "Tr0ub4dor&3"),
    ('export JWT_SECRET="n8Xk2pQ7vL4mZ9wR"', "secret", "n8Xk2pQ7vL4mZ9wR"),
    (f"huggingface-cli login --token {HF}", "Hugging Face token", HF),
    (
        f"DefaultEndpointsProtocol=https;{AZURE};EndpointSuffix=core.windows.net",
        "Azure key",
        AZURE[len("AccountKey=") :],
    ),
    ("password = 'hunter22'", "secret", "hunter22"),
]

CLEAN = [
    "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
    "Melanie: That's great! By the way, what's the password to the Wi-Fi at the cafe? I forgot it again.",
    "The key to happiness is a good night's sleep; my secret is chamomile tea.",
    "uuid 123e4567-e89b-12d3-a456-426614174000 and commit 3f786850e387550fdab836ed7e6dc881de23001b",
    'sha = "3f786850e387550fdab836ed7e6dc881de23001b"; digest = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"',
    "def load(path):\n    token_limit = 4096\n    max_tokens = 100000\n    api_key = os.environ['API_KEY']\n    return path",
    "password = os.getenv('DB_PASSWORD')\nsecret = settings.secret\nPWD=/home/me/project",
    "Use postgres://user:password@localhost/db in the docs, and sk-learn is not a key.",
    "export ANTHROPIC_API_KEY=$ANTHROPIC_API_KEY; echo ${GITHUB_TOKEN}",
    "See https://example.com/a/b?c=d and git@github.com:acme/app.git, email bob@example.com",
    "The meeting is at 10:30 on 2023-05-08; call +1 555 0100. Base64 of hi is aGk=.",
]


@pytest.mark.parametrize(("text", "kind", "secret"), CASES, ids=[c[1] + str(i) for i, c in enumerate(CASES)])
def test_every_kind_is_found_with_its_exact_span_and_redacted(text: str, kind: str, secret: str) -> None:
    found = secrets.find(text)
    assert [(f.kind, text[f.start : f.end]) for f in found] == [(kind, secret)]
    redacted = secrets.redact(text)
    assert secret not in redacted.text and f"[redacted: {kind}]" in redacted.text
    assert redacted.text == text.replace(secret, f"[redacted: {kind}]")


@pytest.mark.parametrize("text", CLEAN)
def test_no_false_alarm_on_prose_code_ids_and_references(text: str) -> None:
    assert secrets.find(text) == []
    assert secrets.redact(text).text == text


def test_several_secrets_in_one_text_are_each_redacted_and_placed() -> None:
    text = f"first {AKIA}\nsecond line with {GHP}\n"
    found = secrets.find(text)
    assert [f.kind for f in found] == ["AWS access key", "GitHub token"]
    assert found[1].where(text) == f"line 2, characters 18-{17 + len(GHP)}"
    assert secrets.redact(text).text == "first [redacted: AWS access key]\nsecond line with [redacted: GitHub token]\n"


def test_a_payload_is_redacted_string_by_string_and_stays_json() -> None:
    payload = json.dumps({"tool_calls": [{"name": "archival_memory_insert", "arguments": {"content": f"key {GHP}"}}]})
    out = secrets.redact_json(payload)
    assert GHP not in out and json.loads(out)["tool_calls"][0]["arguments"]["content"] == "key [redacted: GitHub token]"


def test_a_quoted_credential_inside_json_text_and_tool_call_arguments_is_redacted() -> None:
    # Inside JSON text a quote is \": `PASSWORD="..."` is found in the string unescaped, not in the escaped text.
    command = 'export PASSWORD="Xk29vLq8zPm4Rt7w"'
    assert secrets.redact(command).text == 'export PASSWORD="[redacted: secret]"'
    out = secrets.redact_json(json.dumps({"command": command}))
    assert "Xk29vLq8zPm4Rt7w" not in out and json.loads(out) == {"command": 'export PASSWORD="[redacted: secret]"'}
    # a tool call's arguments are JSON text inside the payload's JSON: redacted as a document too
    call = {"id": "call_1", "name": "run", "arguments": json.dumps({"command": command})}
    out = secrets.redact_json(json.dumps({"tool_calls": [call]}))
    assert "Xk29vLq8zPm4Rt7w" not in out
    args = json.loads(json.loads(out)["tool_calls"][0]["arguments"])
    assert args == {"command": 'export PASSWORD="[redacted: secret]"'}
    _, found = secrets.redact_document(json.loads(json.dumps({"tool_calls": [call]})))
    assert found == [(("tool_calls", 0, "arguments", "command"), "secret")]
    # nothing found: the payload comes back as it was (the same text, its own formatting); nested too deep: as text
    clean = json.dumps({"tool_calls": [{**call, "arguments": '{"command":  "ls -la"}'}]})
    assert secrets.redact_json(clean) is clean
    deep = "[" * 5000
    assert secrets.redact_json(deep) == deep
    assert secrets.redact_json(json.dumps({"arguments": deep + " " + GHP})) == json.dumps(
        {"arguments": deep + " [redacted: GitHub token]"}
    )


def test_a_key_holding_a_credential_is_named_redacted_where_it_was_found() -> None:
    redacted, found = secrets.redact_document({"notes": {GHP: "x"}})
    assert redacted == {"notes": {"[redacted: GitHub token]": "x"}}
    assert found == [(("notes", "[redacted: GitHub token]"), "GitHub token")]


def test_hook_turns_are_stored_redacted(settings: Settings) -> None:
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    autorecall.log_turn(
        memory, agent, session="s1", turn="1", role="user", content=f"export ANTHROPIC_API_KEY={ANTHROPIC} then run it"
    )
    autorecall.log_turn(memory, agent, session="s1", turn="2", role="assistant", content=f"Saved {AKIA} for you.")
    stored = [m.content for m in memory.archive.rows.messages_of(agent)]
    assert sorted(stored) == sorted(
        [
            "export ANTHROPIC_API_KEY=[redacted: Anthropic API key] then run it",
            "Saved [redacted: AWS access key] for you.",
        ]
    )
    rows = memory.archive.rows.backup_rows("messages", vectors=False)
    assert not any(ANTHROPIC in str(r) or AKIA in str(r) for r in rows)


def test_with_the_setting_off_text_is_stored_as_given(settings: Settings) -> None:
    memory = open_memory(settings.model_copy(update={"secret_scan": "off"}))
    agent = memory.ensure_agent("default").id
    autorecall.log_turn(memory, agent, session="s1", turn="1", role="user", content=f"key {AKIA}")
    assert [m.content for m in memory.archive.rows.messages_of(agent)] == [f"key {AKIA}"]
    memory.edit(agent, "human", Rethink(f"aws {AKIA}", check_line_numbers=False))
    assert AKIA in memory.block(agent, "human").value


@pytest.mark.anyio
async def test_a_models_writes_of_a_secret_are_refused_and_write_nothing(settings: Settings) -> None:
    async with Client(serve_in_process(settings), cache=None) as c:
        calls = [
            ("memory_insert", {"label": "human", "new_string": f"AWS key {AKIA}"}),
            ("memory_rethink", {"label": "human", "new_memory": f"The user's token is {GHP}."}),
            ("memory_insert", {"label": "persona", "new_string": "password = 'hunter22'", "insert_line": 0}),
            ("archival_memory_insert", {"content": f"Deploy with export ANTHROPIC_API_KEY={ANTHROPIC}"}),
            (
                "conversation_log",
                {
                    "messages": [
                        {"role": "user", "content": "hi"},
                        {"role": "user", "content": "db: postgres://app:S3cr3t!pw@db/x"},
                    ]
                },
            ),
        ]
        for name, args in calls:
            result = await c.call_tool(name, args)
            text = text_of(result)
            assert result.is_error, (name, text)
            assert text.startswith("Refused:") and "Nothing was written" in text and ", characters " in text
            assert AKIA not in text and GHP not in text and ANTHROPIC not in text and "hunter22" not in text
            assert "S3cr3t" not in text
        assert "an AWS access key" in text_of(await c.call_tool(*calls[0]))
        assert "a password in a URL" in text_of(await c.call_tool(*calls[4]))
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    assert all(b.version == 1 for b in memory.blocks(agent))
    assert memory.archive.rows.passages_of(agent) == [] and memory.archive.rows.messages_of(agent) == []


def test_an_edit_that_keeps_a_secret_already_there_is_not_refused(settings: Settings) -> None:
    memory = open_memory(settings.model_copy(update={"secret_scan": "off"}))
    agent = memory.ensure_agent("default").id
    memory.edit(agent, "human", Rethink(f"aws {AKIA}", check_line_numbers=False))
    memory = open_memory(settings)
    memory.edit(agent, "human", Rethink(f"aws {AKIA}\nlikes tea", check_line_numbers=False))
    with pytest.raises(SecretError, match="a GitHub token"):
        memory.edit(agent, "human", Rethink(f"aws {AKIA}\n{GHP}", check_line_numbers=False))
    with pytest.raises(SecretError):
        memory.create_block(agent, BlockSpec(label="keys", value=f"stripe {STRIPE}"))
    imported = memory.import_block(agent, "block-imported-1", BlockSpec(label="imported", value=f"stripe {STRIPE}"))
    assert imported.value == "stripe [redacted: Stripe key]"


def test_doctor_finds_secrets_and_redact_rewrites_them(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    off = settings.model_copy(update={"secret_scan": "off"})
    memory = open_memory(off)
    agent = memory.ensure_agent("default").id
    memory.edit(agent, "human", Rethink(f"token {GHP}", check_line_numbers=False))
    memory.archive.insert(agent, f"the deploy key is {AKIA}")
    memory.archive.log_messages(
        agent,
        [
            {"role": "user", "content": f"export ANTHROPIC_API_KEY={ANTHROPIC}"},
            {"role": "assistant", "content": "Noted."},
        ],
    )
    audit = secret_audit.scan(open_memory(settings))
    # once per row: a passage's content (its searched text repeats it), a message's content, and the next turn's
    # searched text (it repeats the turn before it)
    assert audit.counts() == {"GitHub token": 1, "AWS access key": 1, "Anthropic API key": 2}
    assert secret_audit.doctor_secrets(settings) == 1
    out = capsys.readouterr().out
    assert (
        "block human" in out and "GitHub token" in out and GHP not in out and AKIA not in out and ANTHROPIC not in out
    )
    assert secret_audit.doctor_secrets(settings, redact_found=True, yes=True) == 1  # the replaced value: history
    out = capsys.readouterr().out
    assert "redacted" in out and "tiermem forget block human --agent default --version 2 --now" in out
    assert GHP not in out
    memory = open_memory(settings)
    assert memory.block(agent, "human").value == "token [redacted: GitHub token]"
    assert memory.history(agent, "human", limit=1)[0].actor == "doctor"
    rows = [str(r) for t in ("messages", "passages") for r in memory.archive.rows.backup_rows(t, vectors=False)]
    assert rows and not any(AKIA in r or ANTHROPIC in r for r in rows)
    left = secret_audit.scan(memory)
    assert left.rows == {} and left.blocks == {} and all("history" in f.where for f in left.found)


def test_doctor_names_the_history_it_cannot_redact_and_the_command_that_forgets_it(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    """A credential only in block history: `--redact --yes` cannot rewrite it, so it neither asks to be run again with
    the flags it was given nor exits 0; it names the `tiermem forget block` command, after which nothing is left."""
    from tiermem.cli.main import main

    memory = open_memory(settings.model_copy(update={"secret_scan": "off"}))
    agent = memory.ensure_agent("default").id
    memory.edit(agent, "human", Rethink(f"token {GHP}", check_line_numbers=False))
    memory.edit(agent, "human", Rethink("likes tea", check_line_numbers=False))
    memory.edit(agent, "human", Rethink("likes green tea", check_line_numbers=False))
    forget_it = "tiermem forget block human --agent default --version 2 --now"
    assert secret_audit.doctor_secrets(settings) == 1
    captured = capsys.readouterr()
    assert forget_it in captured.out and "--redact --yes" not in captured.err
    for redact_found, yes in ((True, True), (True, False)):
        assert secret_audit.doctor_secrets(settings, redact_found=redact_found, yes=yes) == 1
        captured = capsys.readouterr()
        assert forget_it in captured.out and "run again" not in captured.err and "redacted:" not in captured.out
    report = secret_audit.doctor_secrets(settings, as_json=True)
    assert report == 1 and json.loads(capsys.readouterr().out)["forget"] == [forget_it]
    argv = ["--data-dir", str(settings.resolved_data_dir()), "--embedding-model", "hashing"]
    assert main([*argv, *forget_it.split()[1:], "--yes"]) == 0
    capsys.readouterr()
    assert secret_audit.doctor_secrets(settings, redact_found=True, yes=True) == 0
    assert "none found" in capsys.readouterr().out


def test_doctor_secrets_from_the_command_line(settings: Settings) -> None:
    memory = open_memory(settings.model_copy(update={"secret_scan": "off"}))
    agent = memory.ensure_agent("default").id
    memory.archive.insert(agent, f"key {AKIA}")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "tiermem",
            "doctor",
            "--secrets",
            "--data-dir",
            str(settings.resolved_data_dir()),
            "--embedding-model",
            "hashing",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1 and "AWS access key: 1" in run.stdout and AKIA not in run.stdout + run.stderr


def test_doctor_redacts_a_folder_file_and_the_open_window_of_it(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file stored before the detector (here: with secret_scan off) is found and redacted: its text, its chunks and
    the window an agent has open of it."""
    from tiermem.domain.file_views import OpenRequest

    off = settings.model_copy(update={"secret_scan": "off"})
    memory = open_memory(off)
    agent = memory.ensure_agent("default").id
    memory.files.create_folder("ops")
    memory.files.upload("ops", "env.md", f"deploy with {AKIA} today\nthen check the logs\n".encode())
    memory.files.attach(agent, "ops")
    memory.open_files(agent, [OpenRequest("ops/env.md", None, None)])
    assert AKIA in memory.render_core(agent, with_metadata=False)
    assert secret_audit.doctor_secrets(settings) == 1
    assert "file ops/env.md" in capsys.readouterr().out
    assert secret_audit.doctor_secrets(settings, redact_found=True, yes=True) == 0
    memory = open_memory(settings)
    assert AKIA not in memory.files.text("ops", "env.md") and "[redacted: AWS access key]" in memory.files.text(
        "ops", "env.md"
    )
    assert AKIA not in memory.render_core(agent, with_metadata=False)  # the open window was cut again
    assert memory.grep_files(agent, AKIA, None, 0, None).startswith("No matches found")
    assert secret_audit.scan(memory).files == {}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_probe_matches_wherever_its_detector_does(data: st.DataObject) -> None:
    """A detector with a probe runs only on text the probe matches in (a fast scan for a literal): the probe must
    match in every text its pattern matches in, or a credential would be kept. Texts holding a match of the pattern
    are generated from the pattern itself, with text around it."""
    probed = [d for d in secret_scan.detectors() if d.probe is not None]
    assert {d.kind for d in probed} == {
        "GitHub token",
        "password in a URL",
        "password",  # "Password:" and the password on the next line
        "Artifactory token",
        "Discord bot token",
        "Telegram bot token",
        "payment card number",  # its digits run together or in groups
        "social security number",
    }  # a later detect-secrets with other patterns gets no probes: they are kept by their pattern's source
    d = data.draw(st.sampled_from(probed))
    text = data.draw(st.from_regex(d.pattern, fullmatch=False))
    assert d.pattern.search(text) is not None
    probe = d.probe
    assert probe is not None and probe.search(text) is not None, (d.kind, text)


def test_two_ids_joined_are_no_telegram_token() -> None:
    """A store's keys join two ids ("agent-...:block-..."): a run of digits, ":" and 35 id characters inside them is
    not a Telegram bot token (about 2% of such keys were read as one, so a backup of a store named some of its
    attachment rows as holding credentials); a token standing alone still is."""
    key = "agent-1feef95a-a134-4e38-aa93-794465860868:block-b1ad81ea-5960-408c-9042-e132334e4b4b"
    assert secrets.find(key) == []
    token = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw1"
    for text in (f"the bot token is {token}", f"TELEGRAM={token}", f'{{"token": "{token}"}}'):
        assert [f.kind for f in secrets.find(text)] == ["Telegram bot token"], text
