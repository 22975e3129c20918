"""Secrets are never stored (`python -m bench secrets`): the detector's recall, its false positives, its cost.

- ``recall``: real-format credentials of 37 kinds (random characters in each format), each inside a realistic prompt
  sentence (``export ANTHROPIC_API_KEY=sk-ant-api03-...``), logged through the real ``autorecall.log_turn`` (the
  hook's path) into a real store; a credential counts as redacted when the stored message holds neither it nor a
  12-character piece of its middle or its end (a redaction that stops part way is a miss).
  Target >= 99%.
- ``false_positives``: the LoCoMo dev conversations' turns (``../shared/bench-data/locomo-dev.json``, only that
  file), each as the hooks would store it ("Speaker: text", plus an image's caption): the share altered by
  ``secrets.redact``. Target <= 0.5%. And ``clean_corpus`` (``bench/secrets_clean.txt``, written for this bench):
  ordinary text next to the credential shapes, in English, French, German, Spanish, Italian, Portuguese, Dutch,
  Japanese and Chinese (prose about passwords, Spanish "clave", forms' labels), ids, order, ticket and phone numbers,
  code and config files with auth methods (``DB_AUTH=SCRAM_SHA_256``): the texts altered. Target 0.
- ``cost``: ``secrets.find`` per text, each scanned anew (``secret_scan.forget``): LoCoMo turns, typical prompts (a paragraph, a code paste), a 100k-character
  text; p50/p95 in ms. The prompt hook's end-to-end p50 with the detector on is ``python -m bench hooks`` (the
  detector is on by default; ``TIERMEM_SECRET_SCAN=off python -m bench hooks`` for the figure without it).

    python -m bench secrets                 # 40 credentials per kind
    python -m bench secrets --per-kind 10
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import string
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from .common import save, stats
from .locomo import _data

ALNUM = string.ascii_letters + string.digits
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"
HEX = "0123456789abcdef"


def _r(rng: random.Random, chars: str, n: int) -> str:
    return "".join(rng.choice(chars) for _ in range(n))


def _jwt(rng: random.Random) -> str:
    def part(obj: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return (
        part({"alg": "HS256", "typ": "JWT"})
        + "."
        + part({"sub": _r(rng, HEX, 12), "iat": rng.randint(10**9, 2 * 10**9)})
        + "."
        + _r(rng, URLSAFE, 43)
    )


def _pem(rng: random.Random, label: str) -> str:
    body = "\n".join(_r(rng, B64, 64) for _ in range(6))
    return f"-----BEGIN {label}-----\n{body}\n-----END {label}-----"


# plain words a passphrase is made of (no word that says something about a password: "the password is in ...")
PASSPHRASE_WORDS = (
    "purple monkey dishwasher correct horse battery staple river candle orange tiger window garden silver rocket"
    " pepper cloud marble violin forest copper lemon canyon falcon velvet harbor pickle meadow walrus tundra"
).split()
# a password said in another language: the sentence by the secret's first character
FOREIGN_SENTENCES = (
    "mon mot de passe est {} pour le wifi",
    "das Passwort ist {}, bitte nicht weitergeben",
    "mi contraseña es {} y el usuario es ana",
    "la password è {} per il router",
    "minha senha é {} no banco",
    "mijn wachtwoord is {} voor de server",
    "パスワードは {} です",
    "密码是{}，别告诉别人",
)


def _card(rng: random.Random) -> str:
    """A Visa number (16 digits, its Luhn check digit right), printed in groups of four."""
    digits = [4] + [rng.randint(0, 9) for _ in range(14)]
    total = sum(d if n % 2 else (2 * d - 9 if 2 * d > 9 else 2 * d) for n, d in enumerate(reversed(digits)))
    digits.append((10 - total % 10) % 10)
    s = "".join(map(str, digits))
    return " ".join(s[i : i + 4] for i in range(0, 16, 4))


def _ssn(rng: random.Random) -> str:
    """A US social security number outside the ranges never issued (area 000, 666, 9xx; group 00; serial 0000)."""
    area = rng.choice([a for a in range(1, 900) if a != 666])
    return f"{area:03d}-{rng.randint(1, 99):02d}-{rng.randint(1, 9999):04d}"


SALT = ALNUM + "./"

# kind -> (make a secret, put it in a prompt); the kind is what the marker should say (informative, not scored)
Maker = Callable[[random.Random], str]
KINDS: dict[str, tuple[Maker, Callable[[str], str]]] = {
    "Anthropic API key": (
        lambda g: "sk-ant-api03-" + _r(g, URLSAFE, 93) + "AA",
        lambda s: f"export ANTHROPIC_API_KEY={s} and then run the tests again",
    ),
    "OpenAI project key": (
        lambda g: "sk-proj-" + _r(g, URLSAFE, 124) + "T3BlbkFJ" + _r(g, URLSAFE, 24),
        lambda s: f"my openai key is {s}, why does the client say 401?",
    ),
    "OpenAI legacy key": (
        lambda g: "sk-" + _r(g, ALNUM, 20) + "T3BlbkFJ" + _r(g, ALNUM, 20),
        lambda s: f'openai.api_key = "{s}"',
    ),
    "GitHub classic token": (
        lambda g: "ghp_" + _r(g, ALNUM, 36),
        lambda s: f"git clone https://github.com/acme/app using token {s} fails",
    ),
    "GitHub fine-grained token": (
        lambda g: "github_pat_" + _r(g, ALNUM, 22) + "_" + _r(g, ALNUM, 59),
        lambda s: f"GH_TOKEN={s} gh pr list",
    ),
    "AWS access key id": (
        lambda g: "AKIA" + _r(g, string.ascii_uppercase + string.digits, 16),
        lambda s: f"the access key id is {s}",
    ),
    "AWS secret access key": (lambda g: _r(g, B64, 40), lambda s: f"aws_secret_access_key = {s}"),
    "Google API key": (lambda g: "AIza" + _r(g, URLSAFE, 35), lambda s: f"Maps fails with key {s} on localhost"),
    "Slack bot token": (
        lambda g: f"xoxb-{g.randint(10**10, 10**12)}-{g.randint(10**10, 10**12)}-{_r(g, ALNUM, 24)}",
        lambda s: f"SLACK_BOT_TOKEN={s}",
    ),
    "Slack webhook": (
        lambda g: (
            f"https://hooks.slack.com/services/T{_r(g, string.ascii_uppercase + string.digits, 8)}"
            f"/B{_r(g, string.ascii_uppercase + string.digits, 10)}/{_r(g, ALNUM, 24)}"
        ),
        lambda s: f"post the alert to {s} please",
    ),
    "Stripe secret key": (lambda g: "sk_live_" + _r(g, ALNUM, 24), lambda s: f"stripe.api_key = '{s}'"),
    "Stripe test key": (lambda g: "sk_test_" + _r(g, ALNUM, 24), lambda s: f"use {s} for the staging checkout"),
    "JWT": (_jwt, lambda s: f"my session token is {s} and it expires tomorrow"),
    "RSA private key": (
        lambda g: _pem(g, "RSA PRIVATE KEY"),
        lambda s: f"here is the deploy key, can you fix the format?\n{s}\nthanks",
    ),
    "OpenSSH private key": (lambda g: _pem(g, "OPENSSH PRIVATE KEY"), lambda s: f"my ~/.ssh/id_ed25519:\n{s}"),
    "GCP service-account key": (
        lambda g: _pem(g, "PRIVATE KEY").replace("\n", "\\n"),
        lambda s: (
            '{"type": "service_account", "project_id": "acme-prod", "private_key_id": "'
            + "0" * 40
            + f'", "private_key": "{s}\\n", "client_email": "ci@acme.iam"}}'
        ),
    ),
    "password in a Postgres URL": (
        lambda g: _r(g, ALNUM + "!*", 16),
        lambda s: f"DATABASE_URL is postgres://app:{s}@db.internal:5432/prod",
    ),
    "password in a Redis URL": (
        lambda g: _r(g, ALNUM, 20),
        lambda s: f"connect to redis://default:{s}@cache.example.com:6379/0",
    ),
    ".env password": (
        lambda g: _r(g, ALNUM + "!#%", 14),
        lambda s: f"# .env\nDB_HOST=localhost\nDB_PASSWORD={s}\nDB_PORT=5432",
    ),
    ".env API key": (lambda g: _r(g, HEX, 32), lambda s: f"I put MAILGUN_API_KEY={s} in the env file"),
    ".env secret": (lambda g: _r(g, URLSAFE, 48), lambda s: f'export JWT_SECRET="{s}"'),
    "Azure storage key": (
        lambda g: _r(g, B64, 86) + "==",
        lambda s: f"DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={s};EndpointSuffix=core.windows.net",
    ),
    "Hugging Face token": (lambda g: "hf_" + _r(g, ALNUM, 34), lambda s: f"huggingface-cli login --token {s}"),
    "SendGrid key": (
        lambda g: "SG." + _r(g, URLSAFE, 22) + "." + _r(g, URLSAFE, 43),
        lambda s: f"the sendgrid key {s} was rotated",
    ),
    "npm token": (lambda g: "npm_" + _r(g, ALNUM, 36), lambda s: f"//registry.npmjs.org/:_authToken={s}"),
    "passphrase in a sentence": (
        lambda g: " ".join(g.choice(PASSPHRASE_WORDS) for _ in range(4)),
        lambda s: f"the wifi passphrase is {s}. Write it down somewhere safe",
    ),
    "password in another language": (
        lambda g: _r(g, string.ascii_letters, 8) + _r(g, string.digits, 3),
        lambda s: FOREIGN_SENTENCES[ord(s[0]) % len(FOREIGN_SENTENCES)].format(s),
    ),
    "payment card number": (_card, lambda s: f"charge my card {s}, expiry 04/29"),
    "US social security number": (_ssn, lambda s: f"the W-2 form shows {s} for her"),
    "htpasswd line": (lambda g: f"$apr1${_r(g, SALT, 8)}${_r(g, SALT, 22)}", lambda s: f"# .htpasswd\nadmin:{s}\n"),
    "bcrypt hash": (lambda g: "$2b$12$" + _r(g, SALT, 53), lambda s: f"the users table has {s} for bob"),
    "key wrapped across lines": (
        lambda g: (lambda k: k[:30] + g.choice(("\n", "\n  ", " ")) + k[30:])(
            "sk-ant-api03-" + _r(g, URLSAFE, 93) + "AA"
        ),
        lambda s: f"the key from the console, pasted as it wrapped:\n{s}\nstill 401",
    ),
    "base64 secret after a key's name": (
        lambda g: _r(g, B64, 43) + "=",
        lambda s: f"here's the signing key: {s} (rotated today)",
    ),
    "passphrase after a colon": (
        lambda g: " ".join(g.choice([*PASSPHRASE_WORDS, "wicked", "quickly", "jumped", "tangled"]) for _ in range(3)),
        lambda s: f"the door password is: {s}",
    ),
    ".env short name, capitals": (
        lambda g: f"{_r(g, string.ascii_uppercase, 4)}_{_r(g, string.ascii_uppercase, 3)}_{_r(g, string.digits, 4)}",
        lambda s: f"DB_HOST=db\nDB_PASS={s}\n",
    ),
    # new kinds after the others: the others' random draws (the seed's sequence) stay as they were
    "key wrapped inside a JSON string": (
        lambda g: (lambda k, at: k[:at] + g.choice(("\\n", "\\r\\n")) + k[at:])(
            g.choice(("sk-ant-api03-" + _r(g, URLSAFE, 93) + "AA", "sk-proj-" + _r(g, URLSAFE, 64))),
            g.randint(24, 60),
        ),
        lambda s: '{"role": "user", "content": "my config has api_key: ' + s + '\\nand it still says 401"}',
    ),
    "card after an order's label, its security code far after it": (
        _card,
        lambda s: f"Order number {s}, please ship it to 221B Baker Street, London NW1 6XE, CVV 123",
    ),
    "card after an order's label, its brand after it": (_card, lambda s: f"Order: {s} (Visa)"),
    "card as a run of digits, its card word far before it": (
        lambda g: _card(g).replace(" ", ""),
        lambda s: f"my card for the big family trip is {s}, can you book it?",
    ),
    "card after an order's label, its security code misspelled": (_card, lambda s: f"Order: {s} ccv 123"),
    "card after an order's label, its code far after it with its word": (
        _card,
        lambda s: f"Order: {s}, shipped to 221B Baker Street, London NW1 6XE, CVV code: 123",
    ),
    "key then a version's name after a space": (
        lambda g: "sk_live_" + _r(g, ALNUM, 24),
        lambda s: f"the stripe key {s} v2Beta",
    ),
    "passphrase starting with a pointer's verb": (
        lambda g: "use " + " ".join(g.choice(PASSPHRASE_WORDS).capitalize() for _ in range(2)),
        lambda s: f"the wifi password is {s}",
    ),
}


def credentials(per_kind: int, seed: int = 43) -> list[tuple[str, str, str]]:
    """(kind, secret, prompt) for ``per_kind`` random credentials of each kind."""
    rng = random.Random(seed)
    out = []
    for kind, (make, sentence) in KINDS.items():
        for _ in range(per_kind):
            secret = make(rng)
            out.append((kind, secret, sentence(secret)))
    return out


def locomo_turns() -> list[str]:
    """Every turn of the dev split as the hooks would store a pasted turn: "Speaker: text" (+ the image caption)."""
    turns = []
    for sample in json.loads(_data().read_text()):
        for key, session in sample["conversation"].items():
            if key.startswith("session_") and isinstance(session, list):
                for t in session:
                    caption = f" [image: {t['blip_caption']}]" if t.get("blip_caption") else ""
                    turns.append(f"{t['speaker']}: {t['text']}{caption}")
    return turns


def recall(per_kind: int) -> dict[str, object]:
    from tiermem.base.config import load_settings
    from tiermem.domain import autorecall
    from tiermem.domain.factory import open_memory

    with tempfile.TemporaryDirectory() as tmp:
        memory = open_memory(load_settings(data_dir=Path(tmp), embedding_model="hashing", optimize_every=0))
        agent = memory.ensure_agent("default").id
        items = credentials(per_kind)
        for n, (_, _, prompt) in enumerate(items):
            autorecall.log_turn(memory, agent, session="bench-secrets", turn=f"p{n}", role="user", content=prompt)
        stored = [m.content for m in memory.archive.rows.messages_of(agent)]
    joined = "\n\x00\n".join(stored)
    missed: dict[str, int] = {}
    for kind, secret, _ in items:
        if secret in joined or any(w in joined for w in _pieces(secret)):
            missed[kind] = missed.get(kind, 0) + 1
    caught = len(items) - sum(missed.values())
    return {
        "credentials": len(items),
        "kinds": len(KINDS),
        "redacted_before_storage": caught,
        "recall": round(caught / len(items), 4),
        "missed_by_kind": missed,
        "target": ">= 0.99",
    }


def _pieces(secret: str, width: int = 12) -> list[str]:
    """Pieces of a credential that must not survive its redaction either (a redaction that stops part way, as one
    that kept a JWT's signature did, leaves them): 12 characters from its middle and from its end, skipping a PEM
    armour line or whitespace (left around a redacted key as written)."""
    if len(secret) < 2 * width:
        return []
    spans = (secret[len(secret) // 2 - width // 2 :][:width], secret[-width:])
    return [p for p in spans if "-----" not in p and not any(c.isspace() for c in p)]


CLEAN_CORPUS = Path(__file__).with_name("secrets_clean.txt")


def clean_texts(path: Path = CLEAN_CORPUS) -> list[tuple[str, str]]:
    """(section, text) of the clean corpus: a "=== prose: ..." section is one text a line, a "=== file: ..." one
    text whole (its lines up to the next section), an "=== about: ..." line is none."""
    texts: list[tuple[str, str]] = []
    section, kind, body = "", "", []

    def flush() -> None:
        if kind == "file" and "\n".join(body).strip():
            texts.append((section, "\n".join(body).strip("\n") + "\n"))

    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("=== "):
            flush()
            kind, _, section = line[4:].partition(": ")
            body = []
        elif kind == "prose" and line.strip():
            texts.append((section, line))
        elif kind == "file":
            body.append(line)
    flush()
    return texts


def false_positives() -> dict[str, object]:
    from tiermem.domain import secrets

    turns = locomo_turns()
    altered = [(t, [f.kind for f in secrets.redact(t).findings]) for t in turns if secrets.redact(t).findings]
    clean = clean_texts()
    changed = [(section, t, secrets.redact(t)) for section, t in clean if secrets.redact(t).text != t]
    return {
        "turns": len(turns),
        "altered": len(altered),
        "share": round(len(altered) / len(turns), 5),
        "examples": [kinds for _, kinds in altered[:5]],
        "target": "<= 0.005",
        "clean_corpus": {
            "texts": len(clean),
            "lines": sum(t.count("\n") + (not t.endswith("\n")) for _, t in clean),
            "altered": len(changed),
            "examples": [
                {"section": section, "text": t[:100], "kinds": [f.kind for f in r.findings]}
                for section, t, r in changed[:10]
            ],
            "target": 0,
        },
    }


def cost() -> dict[str, object]:
    from tiermem.domain import secret_scan, secrets

    secrets.find("warm up: sk-ant-api03-" + "x" * 40)
    turns = locomo_turns()
    prompt = (
        "Can you refactor load_settings so the TOML layer is read once? It reads the packaged default.toml and "
        "the user's file, then the environment (TIERMEM_ prefix), and I keep getting a KeyError on 'data_dir' "
        "when the tests run in parallel. Here is the traceback and the function:\n"
    )
    code = Path(__file__).read_text()[:8000]
    out: dict[str, object] = {}
    for name, texts, repeat in (
        ("locomo_turn", turns, 1),
        ("prompt_paragraph", [prompt], 300),
        ("prompt_with_8k_code", [prompt + code], 50),
        ("text_100k", ["\n".join(turns)[:100_000]], 10),
    ):
        samples = []
        for _ in range(repeat):
            for t in texts:
                secret_scan.forget()  # a scan, not the findings remembered of the text scanned before
                t0 = time.perf_counter()
                secrets.find(t)
                samples.append(time.perf_counter() - t0)
        s = stats(samples)
        out[name] = {"chars": max(len(t) for t in texts), "p50_ms": s["p50_ms"], "p95_ms": s["p95_ms"]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench secrets")
    parser.add_argument("--per-kind", type=int, default=40)
    args, _ = parser.parse_known_args([a for a in sys.argv[1:] if a != "secrets"])
    result = {"recall": recall(args.per_kind), "false_positives": false_positives(), "cost": cost()}
    print(json.dumps(result, indent=2))
    save("secrets", result)


if __name__ == "__main__":
    main()
