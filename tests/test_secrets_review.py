"""What a review of the credential detector's change for keys in pieces, keys named with a colon, passphrases after
"is:" and order numbers printed as cards found it had broken, each with the ordinary text next to it: a capitalised
two-word password ("my password is Summer-breeze") caught again while "Unicode-aware" stays; a card after a broad
label ("Reference:", "paid for the order with", an expiry after it) redacted again while an order's, a parcel's, an
invoice's, a ticket's or a tracking number stays; a key joined to the next word or the next setting ("s3BucketName",
"Auth0Domain=...") no more; descriptions of a password ("is invalidated server side") and pointers to one ("is: ask
Dave"), GPG key ids ("Signing key: 3AA5C34371567BD2") left alone; a long hyphenated value read in linear time."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tiermem.domain import (
    secret_formats,
    secret_joins,
    secret_json,
    secret_numbers,
    secret_plugins,
    secret_said,
    secret_scan,
    secret_shapes,
    secret_values,
    secrets,
)

SLACK = "xoxb-1234567890-1234567890-lqsajAIxNKu8iS2G8NPRVdD5"
PROJ = "sk-proj-" + "YYZYn9ZhyiA4uoRgnatmUdjAWtGSU8po-799NksnRH9ucAUsdMlHUvTCQCyEZDz_TddJ8HyS5SUkCnD8zRA9a9S"
STRIPE = "sk_live_nsGpWLuqIA1id6Vw5DQL05HA"
GHP = "ghp_z63FfkCzJr4i0B3JrTAwR4y9ojfljoQoaF1L"
ANTHROPIC = "sk-ant-api03-" + ("Xq9Lm2Zt8rBv4Nc7Kd1Pw6Hy3Jf5Gs0Ae" * 3)[:91] + "WXAA"  # 95 after the prefix
CARD = "4111 1111 1111 1111"

# (text, kind, secret): redacted, the finding's span exactly the secret's
REDACTED = [
    # 1. a password of two words joined by "-", the first capitalised
    ("my password is Summer-breeze", "password", "Summer-breeze"),
    ("the wifi password is Sunflower-garden", "password", "Sunflower-garden"),
    ("my password was Hunter-two", "password", "Hunter-two"),
    ("my passcode is Summer-breeze", "password", "Summer-breeze"),
    ("la contraseña es Verano-azul", "password", "Verano-azul"),
    ("das Passwort ist Sommer-regen", "password", "Sommer-regen"),
    ("mot de passe: Soleil-bleu", "password", "Soleil-bleu"),
    ("set the password to Summer-breeze", "password", "Summer-breeze"),
    ("use Summer-breeze as the password", "password", "Summer-breeze"),
    ("Password: Purple-monkey", "secret", "Purple-monkey"),
    ("my password is Winter-is-coming", "password", "Winter-is-coming"),
    # 2. a card after a broad label, a payment's word between, or its expiry or security code after it
    (f"Use this for the order: {CARD} exp 12/27 cvv 123", "payment card number", CARD),
    (f"I paid for the order with {CARD}", "payment card number", CARD),
    ("hotel reservation: 5555 5555 5555 4444, exp 03/27, CVC 737", "payment card number", "5555 5555 5555 4444"),
    (f"Reference: {CARD}", "payment card number", CARD),
    (f"Claim reimbursement to {CARD}", "payment card number", CARD),
    (f"Pagué el pedido con {CARD}", "payment card number", CARD),
    (f"pizza order, number is {CARD} exp 09/26", "payment card number", CARD),
    (f"for the booking use {CARD} exp 01/28", "payment card number", CARD),
    ("reservation guaranteed with 5555 5555 5555 4444 exp 03/27", "payment card number", "5555 5555 5555 4444"),
    ("the package deal, billed to 4111-1111-1111-1111", "payment card number", "4111-1111-1111-1111"),
    (f"commande payée avec {CARD}", "payment card number", CARD),
    (f"Serial {CARD}", "payment card number", CARD),
    (f"Confirmation {CARD}", "payment card number", CARD),
    (f"case {CARD}", "payment card number", CARD),
    (f"Ref. {CARD}", "payment card number", CARD),
    (f"order number {CARD} exp 11/26", "payment card number", CARD),  # an expiry after it: a card whatever its label
    # 4. a passphrase of words ending as participles or adverbs do, no word saying where or when after them
    ("my password is wicked quickly jumped", "password", "wicked quickly jumped"),
    ("the passphrase is tangled orbit wizard fuzzy", "password", "tangled orbit wizard fuzzy"),
    ("my passphrase is Bashfully Wicked Rocket Lemon", "password", "Bashfully Wicked Rocket Lemon"),
    # 5. a key's name and a colon, a key not an id
    ("encryption key: AES256GCM2024KEYV2", "secret", "AES256GCM2024KEYV2"),
    ("signing key: MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", "secret", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"),
    ("Token: 7d3f9c2a1b8e4f6d", "secret", "7d3f9c2a1b8e4f6d"),
    # 7. a key's tail wrapped to the next line: 4 to 7 characters of a key of no fixed length, capitals alone
    (f"export TOKEN={SLACK[:-4]}\n{SLACK[-4:]}\nthanks", "Slack token", f"{SLACK[:-4]}\n{SLACK[-4:]}"),
    (f"export TOKEN={SLACK[:-7]} {SLACK[-7:]}\nthanks", "Slack token", f"{SLACK[:-7]} {SLACK[-7:]}"),
    (f"export TOKEN={PROJ[:-5]}\n{PROJ[-5:]}\nthanks", "OpenAI API key", f"{PROJ[:-5]}\n{PROJ[-5:]}"),
    (f"key {ANTHROPIC[:-4]}\n{ANTHROPIC[-4:]} ok", "Anthropic API key", f"{ANTHROPIC[:-4]}\n{ANTHROPIC[-4:]}"),
    (f"xoxb-\n{SLACK[5:]}", "Slack token", f"xoxb-\n{SLACK[5:]}"),  # wrapped right after its prefix
]

LEFT_ALONE = [
    # 1. a word made of two, capitalised as a sentence starts: a describing word second, or a word joining them
    "the password is Unicode-aware",
    "the password is Case-sensitive",
    "The password is Machine-generated.",
    "the password is Time-based",
    "the password is Up-to-date",
    "The password is Salt-and-pepper protected",
    # 2. an order's, a parcel's, an invoice's, a ticket's or a tracking number, its label right before it
    "Your order #4532 0151 1283 0366 has shipped!",
    "Ihre Bestellung 4532 0151 1283 0366 wurde versandt.",
    "Pedido nº 4532-0151-1283-0366 confirmado",
    "Numéro de suivi : 4532 0151 1283 0366",
    "Invoice no. 4532 0151 1283 0366 attached",
    "tracking id 4532 0151 1283 0366",
    "PO number 4532 0151 1283 0366",
    "order id is 4532 0151 1283 0366",
    "Your Amazon order 4532 0151 1283 0366 has shipped",
    "Your order number is: 4532 0151 1283 0366",
    "Ticket 4532 0151 1283 0366 resolved",
    "注文番号 4532 0151 1283 0366",
    "Номер заказа 4532 0151 1283 0366",
    "order 4532 0151 1283 0366 and order 5555 5555 5555 4444",
    "Bestellnr. 4532 0151 1283 0366",
    "Sendungsverfolgung: 4532 0151 1283 0366",
    "Auftragsnummer: 4532 0151 1283 0366",
    "Rechnungsnummer: 4532 0151 1283 0366",
    "Numero ordine 4532 0151 1283 0366",
    "Número da encomenda 4532 0151 1283 0366",
    "Ordernummer 4532 0151 1283 0366",
    "Bestelnummer 4532 0151 1283 0366",
    "your booking reference 4532 0151 1283 0366",
    "confirmation code: 4532 0151 1283 0366",
    # 3. a prefix named in prose, a word after it
    "xoxb- Sales2024Q3 channel",
    "ghp_abc123 GitHub2 Actions3 Runner4 Linux5 X64 v2 OK",
    "sk-proj- GPT4o mini",
    "glpat- Q3Report2024",
    "hf_ tokens H100 GPUs",
    # 4. what is done to a password, and where or when
    "The password is invalidated server side.",
    "The password is invalidated server side",
    "The password is compared server side",
    "The password is persisted server side.",
    "The password is overwritten immediately afterwards.",
    "The password is propagated cluster wide.",
    "the password is rendered client side.",
    "the password is compared byte wise",
    "The password is invalidated immediately afterwards",
    "The password is instantly invalidated server side",
    # 5. a pointer to a password, after "is" or "is:"; a key's id after a signing or an encryption key's name
    "the password is ask Dave",
    "the password is check Slack",
    "password is: ask Dave",
    "The password is: check Slack",
    "the passphrase is: ask Dave",
    "Das Passwort ist: frag Dave",
    "the password is: see Bitwarden",
    "My signing key: 0x3AA5C34371567BD2",
    "Signing key: 3AA5C34371567BD2",
    "My GPG signing key: 3AA5C34371567BD2",
    "signing key: 4AEE18F83AFDEB23 (ed25519)",
    "the signing key is 3AA5C34371567BD2",
    "gpg --list-secret-keys shows signing key: 3AA5C34371567BD2 [expires: 2027]",
    "encryption key: ABCDEF0123456789 (KMS key id)",
    "the signing key fingerprint: 9F3C1A2B4D5E6F708192A3B4C5D6E7F8091A2B3C",
]


@pytest.mark.parametrize(("text", "kind", "secret"), REDACTED, ids=[c[0][:40] for c in REDACTED])
def test_a_credential_the_change_let_through_is_redacted(text: str, kind: str, secret: str) -> None:
    found = secrets.find(text)
    assert [(f.kind, text[f.start : f.end]) for f in found] == [(kind, secret)]
    assert secret not in secrets.redact(text).text


@pytest.mark.parametrize("text", LEFT_ALONE)
def test_ordinary_text_the_change_redacted_is_left_alone(text: str) -> None:
    assert secrets.find(text) == []


# 3. a key, then the next word or the next setting: the key alone is redacted
@pytest.mark.parametrize(
    ("text", "key"),
    [
        (f"slack:\n  botToken: {SLACK}\n  s3BucketName: reports\n", SLACK),
        (f"SLACK_BOT_TOKEN={SLACK}\nAuth0Domain=acme.eu.auth0.com\n", SLACK),
        (f"OPENAI_API_KEY={PROJ}\nMaxTokens4o=4096\n", PROJ),
        (f"stripe:\n  secretKey: {STRIPE}\n  webhookPath2: /hooks/stripe\n", STRIPE),
        (f"I rotated {STRIPE} after the iPhone15Pro launch", STRIPE),
        (f"{SLACK}\nOAuth2Client is next", SLACK),
        (f"slack_token: {SLACK}\noauth2ClientId: abc", SLACK),
        (f"SLACK_BOT={SLACK}\nDb2Password=x", SLACK),
        (f"OPENAI={PROJ}\nHttp2Server=on", PROJ),
        (f"stripe {STRIPE} iPhone15Pro arrived", STRIPE),
        (f"stripe {STRIPE}\nMyApp2024 release", STRIPE),
        (f"{PROJ} GPT4Turbo worked", PROJ),
        (f"{SLACK} XyZ12345abc", SLACK),
        (f"token {GHP}\nThanks", GHP),
    ],
    ids=lambda v: v.split("\n")[-1][:30] if "\n" in v.strip() else v[-30:],
)
def test_a_key_is_not_joined_to_the_next_word_or_setting(text: str, key: str) -> None:
    assert [text[f.start : f.end] for f in secrets.find(text)] == [key]
    assert secrets.redact(text).text == text.replace(key, f"[redacted: {secrets.find(text)[0].kind}]")


def test_across_a_break_only_the_joined_tokens_finding_is_kept() -> None:
    # the .env value goes on after the key without the break (".prod/x"): the key's own span is the one kept
    text = f"SLACK_BOT_TOKEN={SLACK[:30]}\n{SLACK[30:]}.prod/x"
    assert [text[f.start : f.end] for f in secrets.find(text)] == [f"{SLACK[:30]}\n{SLACK[30:]}"]


class _Reads:
    """Characters the secret detector's regular expressions are handed, counted: a deterministic measure of its
    work in place of a clock (a shared machine's timings flake). Each call on a module's compiled pattern or
    through its ``re`` counts the characters it may read: the text from where it starts for a scan, the matched
    characters (or one) for a match at a place. Work done again for each part of a long value (a quadratic read)
    shows as a hundred times the count for ten times the text."""

    def __init__(self) -> None:
        self.count = 0

    def scanned(self, string: object, pos: int = 0, endpos: int | None = None) -> None:
        if isinstance(string, str):
            self.count += max(1, min(len(string), endpos if endpos is not None else len(string)) - pos)

    def matched(self, found: re.Match[str] | None, pos: int = 0) -> None:
        self.count += max(1, found.end() - pos) if found is not None else 1


class _CountedPattern:
    def __init__(self, pattern: re.Pattern[str], reads: _Reads) -> None:
        self._pattern, self._reads = pattern, reads

    def __getattr__(self, name: str) -> object:
        return getattr(self._pattern, name)

    def match(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        found = self._pattern.match(string, pos, endpos)
        self._reads.matched(found, pos)
        return found

    def fullmatch(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        found = self._pattern.fullmatch(string, pos, endpos)
        self._reads.matched(found, pos)
        return found

    def search(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        self._reads.scanned(string, pos, endpos)
        return self._pattern.search(string, pos, endpos)

    def finditer(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> Iterator[re.Match[str]]:
        self._reads.scanned(string, pos, endpos)
        return self._pattern.finditer(string, pos, endpos)

    def findall(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> list[Any]:
        self._reads.scanned(string, pos, endpos)
        return self._pattern.findall(string, pos, endpos)

    def sub(self, repl: Any, string: str, count: int = 0) -> str:
        self._reads.scanned(string)
        return self._pattern.sub(repl, string, count)

    def split(self, string: str, maxsplit: int = 0) -> list[str]:
        self._reads.scanned(string)
        return self._pattern.split(string, maxsplit)


class _CountedRe:
    """A module's ``re`` whose module-level calls (``re.sub(r"[-._ ]", "", part)``) are counted."""

    def __init__(self, reads: _Reads) -> None:
        self._reads = reads

    def __getattr__(self, name: str) -> object:
        attr = getattr(re, name)
        if name in {"match", "fullmatch", "search", "finditer", "findall", "sub", "subn", "split"}:

            def counted(*args: Any, **kwargs: Any) -> Any:
                self._reads.scanned(args[2] if name in {"sub", "subn"} else args[1])
                return attr(*args, **kwargs)

            return counted
        return attr


_MODULES = (
    secrets,
    secret_scan,
    secret_json,
    secret_values,
    secret_formats,
    secret_said,
    secret_plugins,
    secret_joins,
    secret_numbers,
    secret_shapes,
)


def _reads(monkeypatch: pytest.MonkeyPatch, text: str) -> int:
    """The characters ``secrets.find(text)`` hands its modules' regular expressions (see ``_Reads``)."""
    reads = _Reads()
    secret_scan.forget()  # a text scanned before is answered without a pattern read
    with monkeypatch.context() as patch:
        for module in _MODULES:
            if hasattr(module, "re"):  # the face (``secrets``) runs no pattern of its own
                patch.setattr(module, "re", _CountedRe(reads))
            for name, value in vars(module).items():
                if isinstance(value, re.Pattern):
                    patch.setattr(module, name, _CountedPattern(value, reads))
        secrets.find(text)
    return reads.count


def test_a_long_hyphenated_value_after_the_password_is_read_in_linear_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # "Abc-Abc-...": each "-" once looked at for a method's name before it ("AES-256-encrypted") took the whole
    # value again (120,000 characters: two minutes). Ten times the text is read about ten times over now (a hundred
    # times before): the characters the regular expressions are handed are counted, not timed
    short = _reads(monkeypatch, "the password is " + "-".join(["Abc"] * 3000))
    long = _reads(monkeypatch, "the password is " + "-".join(["Abc"] * 30000))
    assert short > 3000 * 4  # the count sees the value at all
    assert long <= 12 * short


# A second review: passphrases the description and pointer rules let through, hex keys taken for GPG ids, and
# capitalised describing compounds redacted
SECOND_REDACTED = [
    # a word ending in "-en" or "-ly" first, a word any sentence may end with after it: a passphrase
    ("my passphrase is butterfly kisses forever", "butterfly kisses forever"),
    ("my passphrase is kitchen garden online", "kitchen garden online"),
    ("the password is golden sunset forever", "golden sunset forever"),
    ("the password is chicken dinner later", "chicken dinner later"),
    ("the password is frozen forever", "frozen forever"),
    ("the password is family picnic tomorrow", "family picnic tomorrow"),
    # a pointer's verb first, but no name nor place after it: a passphrase
    ("the password is find nemo 2003", "find nemo 2003"),
    ("the password is look both ways", "look both ways"),
    ("the password is get lucky tonight", "get lucky tonight"),
    ("the password is use tiger lily", "use tiger lily"),
    # hex after a signing or an encryption key's name with no cue that it is a GPG or KMS id: the key
    (
        "the webhook signing key is 8f14e45fceea167a5a36dedd4bea2543bea25431",
        "8f14e45fceea167a5a36dedd4bea2543bea25431",
    ),
    ("the encryption key is 3aa5c34371567bd2", "3aa5c34371567bd2"),
    ("the signing key is 3aa5c34371567bd2 and rotates", "3aa5c34371567bd2"),
    # two words joined by "-", the first capitalised, no describing compound
    ("my password is Summer-breeze", "Summer-breeze"),
    ("das Passwort ist Sommer-regen", "Sommer-regen"),
    ("la contraseña es Verano-azul", "Verano-azul"),
    ("mot de passe: Soleil-bleu", "Soleil-bleu"),
    ("the password is Blue-Elephant", "Blue-Elephant"),
]

SECOND_LEFT_ALONE = [
    # a pointer: a verb and a name, a tool or a place
    "the password is ask Dave",
    "the password is: check Slack",
    "The password is: see Bitwarden.",
    "the password is in 1Password",
    "the password is check vault",
    "the password is ask Dave Smith",
    # what a system does to it, and where or when
    "The password is overwritten immediately afterwards.",
    "The password is propagated cluster wide.",
    "the password is compared byte wise",
    "The password is invalidated server side.",
    # a GPG or KMS key's id, said as one
    "My GPG signing key: 3aa5c34371567bd2",
    "My GPG signing key is 3AA5C34371567BD2 on keys.openpgp.org.",
    "the signing key is 3aa5c34371567bd2 (gpg key id)",
    "encryption key: abcdef0123456789 (KMS key id)",
    "pub rsa4096/3AA5C34371567BD2 2019-01-01",
] + [
    f"{cue} {word}."
    for word in (
        "One-time Two-factor Non-expiring Never-expiring Well-known Built-in Multi-factor Device-bound Time-bound"
        " Cross-platform Open-source Self-service Low-entropy High-entropy Plain-text Top-secret Non-trivial"
        " Semi-random Military-grade Single-use Per-user Hardware-bound Non-empty All-lowercase Non-reversible"
        " Ultra-secure Auto-rotating Ever-changing Bank-grade"
    ).split()
    for cue in ("The password is", "Das Passwort ist")
]


@pytest.mark.parametrize(("text", "secret"), SECOND_REDACTED, ids=[c[0][:40] for c in SECOND_REDACTED])
def test_a_credential_the_second_review_found_let_through_is_redacted(text: str, secret: str) -> None:
    assert [text[f.start : f.end] for f in secrets.find(text)] == [secret]
    assert secret not in secrets.redact(text).text


@pytest.mark.parametrize("text", SECOND_LEFT_ALONE)
def test_ordinary_text_the_second_review_found_redacted_is_left_alone(text: str) -> None:
    assert secrets.find(text) == []


def test_a_run_of_vendor_prefixes_is_read_in_linear_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # "xoxb-xoxb-...": each prefix read the rest of the run as its token's body (200 KB: 13 s); a prefix inside a
    # run already read is skipped now. Ten times the text is read about ten times over (counted, not timed)
    short = _reads(monkeypatch, "xoxb-" * 4000)
    long = _reads(monkeypatch, "xoxb-" * 40000)
    assert short > 4000 * 5  # the count sees the run at all
    assert long <= 12 * short
