"""Credential shapes a reviewer found stored unredacted, each with its exact span, and the ordinary text next to them
that stays untouched: a passphrase of several plain words after "the password is"; a password said in French,
German, Spanish, Italian, Portuguese, Dutch, Japanese or Chinese; payment card numbers (Luhn-valid, an issuer's
prefix and length) and US social security numbers; password hashes (``htpasswd`` lines, ``crypt(3)``, bcrypt,
argon2); a short secret name given a password in capitals (``DB_PASS=PROD_DB_2024``). And each new pattern read in
one pass over 200 KB of its cue, digits or punctuation."""

from __future__ import annotations

import pytest

from tiermem.base.config import Settings
from tiermem.domain import autorecall, secrets
from tiermem.domain.factory import open_memory

BCRYPT = "$2y$10$.vGA1O9wmRjrwAVXD98HNOgsNpDczlqm3Jq7KnEd1rVAGv3Fykk1a"
SHA512_CRYPT = "$6$saltsalt$8iYtNHxjWRl.NF6oNZ5tF.iKFlQREaXBLlSmZKP6dy9l5z3vsooWNW0/GZ6Nej73/TFug6pIPSqbJoCT6dfnj."  # openssl passwd -6 -salt saltsalt hunter2
APR1 = "$apr1$r31abc$9Jkj.j8HVOL01mfaWTSls1"  # openssl passwd -apr1 -salt r31abc hunter2
MD5_CRYPT = "$1$abc$9dV135Rc3U8Xbm2DxadgF0"
SHA256_CRYPT = "$5$abc$aw8kcfRnzkuA1XFRzd1AgTNuyzM2RdMYKc3X22kKYc0"
HTPASSWD_SHA = "{SHA}87u9ZqY9S/F0eUBXjsPQEDUw4h0="  # base64 of SHA-1("hunter2")
ARGON2 = "$argon2id$v=19$m=65536,t=3,p=4$c29tZXNhbHQ$RdescudvJCsgt3ub+b+dWRWJTmaaJObG"

# (text, kind, secret): the finding's span is exactly the secret's
CASES = [
    # 1. a passphrase of plain words after an explicit cue, up to the sentence's, the clause's or the line's end
    ("my passphrase is correct horse battery staple", "password", "correct horse battery staple"),
    ("the wifi password is purple monkey dishwasher", "password", "purple monkey dishwasher"),
    ("the wifi password is purple monkey dishwasher. See you at 8!", "password", "purple monkey dishwasher"),
    ("The password for the shed was Blue Kettle 42\nthanks", "password", "Blue Kettle 42"),
    ("the password is purple monkey dishwasher and the user is bob", "password", "purple monkey dishwasher"),
    ('password is: "open sesame"', "password", "open sesame"),  # after "is:" quoted (a label's one value bare)
    # 2. a password said in another language: the value after the cue
    ("mon mot de passe est Soleil2024!", "password", "Soleil2024!"),
    ("le mot de passe du wifi est « Soleil2024 »", "password", "Soleil2024"),
    ("Mot de passe : Soleil2024", "password", "Soleil2024"),
    ("mein Passwort ist Geheim123", "password", "Geheim123"),
    ("Das WLAN-Passwort für das Büro lautet Geheim123.", "password", "Geheim123"),
    ("Kennwort: 'Geheim 123'", "password", "Geheim 123"),
    ("mi contraseña es Secreto99", "password", "Secreto99"),
    ("la clave del wifi es Secreto99", "password", "Secreto99"),
    ("la password è Segreto88", "password", "Segreto88"),
    ("la parola d'ordine è Segreto88", "password", "Segreto88"),
    ("minha senha é Segredo77", "password", "Segredo77"),
    ("mijn wachtwoord is Geheim66", "password", "Geheim66"),
    ("パスワードは Himitsu55 です", "password", "Himitsu55"),
    ("パスワード：「Himitsu55」", "password", "Himitsu55"),
    ("密码是Mima12345，记住了", "password", "Mima12345"),
    ("WiFi的密码: Mima12345", "password", "Mima12345"),
    # 3. payment card numbers (Luhn-valid, an issuer's prefix and length) and US social security numbers
    ("my card is 4111 1111 1111 1111 exp 12/27", "payment card number", "4111 1111 1111 1111"),
    ("card 5555-5555-5555-4444, cvv 123", "payment card number", "5555-5555-5555-4444"),
    ("amex 3782 822463 10005", "payment card number", "3782 822463 10005"),
    ("charge 6011111111111117 please", "payment card number", "6011111111111117"),
    ("SSN 536-22-1487 on file", "social security number", "536-22-1487"),
    ("my social security number is 123-45-6789", "social security number", "123-45-6789"),
    ("her SSN: 536 22 1487", "social security number", "536 22 1487"),
    ("ssn#536221487", "social security number", "536221487"),
    # 4. password hashes: htpasswd lines (the user stays), crypt(3), bcrypt, argon2
    (f"admin:{APR1}", "password hash", APR1),
    (f"alice:{HTPASSWD_SHA}", "password hash", HTPASSWD_SHA),
    (f"hash is {BCRYPT} in the users table", "password hash", BCRYPT),
    (f"root:{SHA512_CRYPT}:19000:0:99999:7:::", "password hash", SHA512_CRYPT),
    (f"bob:{MD5_CRYPT}", "password hash", MD5_CRYPT),
    (f"x {SHA256_CRYPT} y", "password hash", SHA256_CRYPT),
    (f'"hash": "{ARGON2}"', "password hash", ARGON2),
    # 5. a short secret name given a password in capitals with a digits tail (no constant's name)
    ("DB_PASS=PROD_DB_2024", "secret", "PROD_DB_2024"),
    ('{"db_pass": "PROD_DB_2024"}', "secret", "PROD_DB_2024"),
]

CLEAN = [
    # said about a password, not a passphrase
    "Fill in the password field, then press enter. The password field is required.",
    "the password is in the drawer; the password is the same as before; the password is too short",
    "the password is written down somewhere. The password was changed yesterday evening.",
    "My password is my dog's name. The password is case sensitive. the passphrase is 12 characters long",
    "The password is hard to remember and easy to guess. The password was reset by IT.",
    "the wifi password is on the fridge, the wifi password is posted at the front desk",
    "the password is purple monkey dishwasher staple horse battery correct extra words here",
    "Password: Forgot your password? Reset password",
    # said about a password in other languages
    "le mot de passe est trop court; das Passwort ist falsch; la contraseña es incorrecta; la senha é obrigatória",
    "La clave es la paciencia. Palabras clave: GPT4, IA. Das Kennwort: siehe oben",
    "パスワードは変更しました。密码错误，请重试。密码是什么？",
    # numbers that are no card and no social security number
    "Your order number is 4000123412341233, thanks for shopping",
    "Order #2024051812345678 shipped on 2024-05-18 at 14:32; invoice 1234 5678 9012 3456 is due.",
    "Call me at +1 415 555 0132 or 415-555-0132, or +44 20 7946 0958; fax 0044 20 7946 0958",
    "ISBN 978-0-306-40615-7 and ISBN-13 9780306406157, ISBN-10 0-306-40615-2",
    "Between 2019-2023 we sold 1,234,567 units; timestamp 1700000000000 ms; version 4.11.1111.1111",
    "Meeting at 10:30, March 3rd 2024; 3 kids, 2 dogs; I ran 5 miles in 42 minutes.",
    "build 2024-05-1234; SKU 000-12-3456, 900-12-3456, 666-12-3456, 536-00-1487 and 536-22-0000",
    "the sample card is 078-05-1120; see 123-45-6789 in the form's example",
    "the SSN field is empty; Social Security is a program; SSN: unknown",
    "Bitcoin block 840000; hash 00000000000000000002a7c4c1e48d76c5a37902165a270156b7a8d72728a054",
    # dollars, braces and code
    "Price was $25 or $2.50; costs $1 each; the {sha} prefix; $6 and $5 tips; echo $2$1",
    'password = os.environ["DB_PASS"]\npassword: str = Field(...)\ndef check(password: str) -> bool:',
    # placeholders and constants' names stay
    "DB_PASS=YOUR_API_KEY_HERE\nDB_PASS=<password>\nDB_PASS=xxx\nDB_PASS=changeme\nPASS=NO_AUTH\nADMIN_PW=ADMIN_PW_2",
]


@pytest.mark.parametrize(("text", "kind", "secret"), CASES, ids=[f"{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_a_credential_of_a_new_shape_is_found_whole_and_redacted(text: str, kind: str, secret: str) -> None:
    found = secrets.find(text)
    assert [(f.kind, text[f.start : f.end]) for f in found] == [(kind, secret)]
    start, end = found[0].start, found[0].end
    assert secrets.redact(text).text == f"{text[:start]}[redacted: {kind}]{text[end:]}"


@pytest.mark.parametrize("text", CLEAN)
def test_ordinary_text_next_to_them_is_not_flagged(text: str) -> None:
    assert secrets.find(text) == []


def test_a_passphrase_told_in_a_turn_is_stored_redacted(settings: Settings) -> None:
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    turn = "the wifi password is purple monkey dishwasher, and my card is 4111 1111 1111 1111"
    autorecall.log_turn(memory, agent, session="s1", turn="1", role="user", content=turn)
    assert [m.content for m in memory.archive.rows.messages_of(agent)] == [
        "the wifi password is [redacted: password], and my card is [redacted: payment card number]"
    ]


RUN = 200_000  # characters: a pattern that rescans a run per character of it would take many minutes on this


def _run(unit: str) -> str:
    return unit * (RUN // len(unit) + 1)  # whole units: the last one is a cue


ADVERSARIAL = [
    # runs of each cue, then one credential
    (_run("the password is ") + "purple monkey dishwasher", "password", "purple monkey dishwasher"),
    (_run("password is purple monkey a b c d e f g ") + "\nmy passphrase is open sesame", "password", "open sesame"),
    (_run("Passwort für das WLAN ist ") + " Geheim123", "password", "Geheim123"),
    (_run("mot de passe : ") + " Soleil2024", "password", "Soleil2024"),
    (_run("密码是") + "Mima12345", "password", "Mima12345"),
    (_run("SSN ") + ": 536-22-1487", "social security number", "536-22-1487"),
    # runs of digits, digit groups, dollars and punctuation
    (_run("1") + " 4111 1111 1111 1111", "payment card number", "4111 1111 1111 1111"),
    (_run("4111 ").replace("4111 4111", "1111 4111") + " 536-22-1487", "social security number", "536-22-1487"),
    (_run("123-45-") + " " + BCRYPT, "password hash", BCRYPT),
    (_run("$2y$10$") + " " + APR1, "password hash", APR1),
    ("{SHA}" + _run("A") + f" {BCRYPT}", "password hash", BCRYPT),
]


@pytest.mark.parametrize(
    ("text", "kind", "secret"), ADVERSARIAL, ids=[f"{c[1]}-{i}" for i, c in enumerate(ADVERSARIAL)]
)
def test_a_long_run_of_a_cue_digits_or_punctuation_is_read_once(text: str, kind: str, secret: str) -> None:
    # each new pattern takes each step one way only: 200 KB of a cue or of digits is read as fast as any text (the
    # suite's timeout guards); only the credential after the run is found
    assert [(f.kind, text[f.start : f.end]) for f in secrets.find(text)] == [(kind, secret)]
