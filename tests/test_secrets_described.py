"""Ordinary text a reviewer found altered by the credential shapes of ``secret_shapes``, next to the credentials of
the same shape that stay redacted: prose describing a password ("the password is unique per user", "Password is
Bitwarden managed."); Spanish "clave", a key or the crucial thing ("la clave es COVID-19"); forms' labels and a
password's protection in other languages ("Passwort: vergessen?", "Le mot de passe est WPA2.", "密码是SHA256加密的");
ids and order numbers that pass Luhn's check (printed in a card's groups too), ticket and phone numbers of an SSN's
shape; an auth method's name in capitals (``DB_AUTH=SCRAM_SHA_256``); what is said of a password ("is generated
automatically every night", "is Unicode-aware", "is hashed: we store bcrypt digests")."""

from __future__ import annotations

import pytest

from tiermem.domain import secrets

# (text, kind, secret): still redacted, the finding's span exactly the secret's
REDACTED = [
    # 1. a passphrase: plain words, "correct" among them
    ("the password is correct horse battery staple", "password", "correct horse battery staple"),
    ("my password is purple monkey dishwasher", "password", "purple monkey dishwasher"),
    ("The password is hunter two", "password", "hunter two"),
    ("the password is admin admin", "password", "admin admin"),
    ("the passphrase is river candle orange tiger. ok?", "password", "river candle orange tiger"),
    ("the passphrase is orbit tangled wizard fuzzy", "password", "orbit tangled wizard fuzzy"),  # four: a passphrase
    ('The password is: "open sesame"', "password", "open sesame"),
    ("The password is: Xk9vQ2mPz7", "password", "Xk9vQ2mPz7"),
    # ... after "is:" bare too, and words ending as participles or adverbs do (diceware draws them as any other)
    ("password is: open sesame", "password", "open sesame"),
    ("the password is: purple monkey dishwasher.", "password", "purple monkey dishwasher"),
    ("my password is wicked quickly jumped", "password", "wicked quickly jumped"),
    ("the passphrase is tangled orbit wizard fuzzy", "password", "tangled orbit wizard fuzzy"),
    ("my passphrase is Bashfully Wicked Rocket Lemon", "password", "Bashfully Wicked Rocket Lemon"),
    # 2. Spanish: a password said so, or for what has one; a random-looking key after bare "clave"
    ("la clave del wifi es Secreto99", "password", "Secreto99"),
    ("la clave de acceso es Secreto99", "password", "Secreto99"),
    ("la clave secreta: Secreto99", "password", "Secreto99"),
    ("la clave wifi es Secreto99", "password", "Secreto99"),
    ("la clave de mi cuenta es Secreto99", "password", "Secreto99"),
    ("mi contraseña es Secreto99", "password", "Secreto99"),
    ("La clave es Xk9vQ2mPz7aB3cD4eF", "secret", "Xk9vQ2mPz7aB3cD4eF"),
    ("Clave: 'Xk9vQ2mPz7aB3cD4eF'", "secret", "Xk9vQ2mPz7aB3cD4eF"),
    # 3. other languages: a password with a question mark in it, one glued to a word
    ("das Passwort ist Geheim123?", "password", "Geheim123?"),
    ("Passwort des Admins ist admin123", "password", "admin123"),
    ("Mon mot de passe du wifi est MaBox2024 ok", "password", "MaBox2024"),
    ("Le mot de passe est WPA2Maison77.", "password", "WPA2Maison77"),
    ("密码是Mima12345，记住了", "password", "Mima12345"),
    ("Das Passwort ist Sonnenschein2024", "password", "Sonnenschein2024"),
    ("DB_PASSWORD=Geheim123?", "secret", "Geheim123?"),
    # 4. a card: printed in its groups (no cue needed), or run together after a word naming a card or a payment
    ("Call me at 4111 1111 1111 1111", "payment card number", "4111 1111 1111 1111"),
    ("order 1234 paid by card 4111 1111 1111 1111", "payment card number", "4111 1111 1111 1111"),
    ("order 1234, Visa 4111-1111-1111-1111", "payment card number", "4111-1111-1111-1111"),
    ("amex 3782 822463 10005", "payment card number", "3782 822463 10005"),
    ("my card number is 4111111111111111", "payment card number", "4111111111111111"),
    ("charge 6011111111111117 please", "payment card number", "6011111111111117"),
    ("Visa: 4532015112830366", "payment card number", "4532015112830366"),
    ("Kreditkartennummer: 4532015112830366", "payment card number", "4532015112830366"),
    ("mi tarjeta es 4532015112830366", "payment card number", "4532015112830366"),
    ("信用卡号4532015112830366", "payment card number", "4532015112830366"),
    ("カード番号は4532015112830366です", "payment card number", "4532015112830366"),
    # ... an SSN alone (a W-2 or a form writes it bare), or with its cue next to another label
    ("the W-2 form shows 536-22-1487 for her", "social security number", "536-22-1487"),
    ("536-22-1487", "social security number", "536-22-1487"),
    ("SSN number: 536-22-1487", "social security number", "536-22-1487"),
    ("case 4411, SSN 536-22-1487", "social security number", "536-22-1487"),
    # 5. a password in capitals with a digits tail given to a PASS or PW name
    ("DB_PASS=PROD_DB_2024", "secret", "PROD_DB_2024"),
    ("ADMIN_PW=PROD_DB_2024", "secret", "PROD_DB_2024"),
    ("BASIC_AUTH=Xk9vQ2mPz7", "secret", "Xk9vQ2mPz7"),
]

LEFT_ALONE = [
    # 1. prose describing a password
    "The password is unique per user.",
    "the password is plain text",
    "Password is Bitwarden managed.",
    "The password is: see Bitwarden.",
    "The password is per environment.",
    "The password is Keychain protected",
    "The password is environment specific",
    "The password is correct.",
    "the password was correct but login still failed.",
    "The password is top secret",
    "The password is SHA256 hashed",
    "the passphrase is stored encrypted",
    "The password is generated automatically every night.",
    "the password is randomly generated daily",
    "The password is extremely complicated.",
    "The password is obfuscated before storage.",
    "the passphrase is: see the team vault",
    # ... a word made of two, capitalised as a sentence starts; a participle before a colon
    "the password is Unicode-aware",
    "The password is Case-sensitive.",
    "set the password to Locale-aware",
    "the password is hashed: we store bcrypt digests",
    "The password was rotated: see the audit log.",
    # 2. Spanish "clave": the crucial thing, a table's key
    "La clave es COVID-19",
    "Una clave: UTF-8",
    "La clave es 1080p",
    "la clave de la tabla es user_id",
    "la clave de la tabla es user_id, única",
    "La clave es la comunicación entre los equipos. Clave: ABC123",
    "La clave es Madrid2024 pero no digas nada",
    "la clave es id_usuario",
    # 3. other languages: forms' labels, questions, protocols and algorithms
    "Passwort: vergessen?",
    "Contraseña: ¿olvidaste?",
    "Le mot de passe est WPA2.",
    "Das Passwort ist 2FA-geschützt.",
    "Das Passwort ist AES-256-verschlüsselt.",
    "La contraseña es SHA-256.",
    "密码是SHA256加密的",
    "密码为UTF8编码",
    "口令是OAuth2令牌",
    "パスワードはSHA256でハッシュ化されます",
    "Das Passwort ist erforderlich. La password è obbligatoria. A senha é criptografada com AES-256.",
    "Password: forgot?",
    # 4. ids, orders and tickets of a card's or an SSN's shape
    "Order id 4532015112830366 shipped",
    "id 4000000000000002",
    "order 5105105105105100",
    "tracking 4532015112830366 and 4532-015112-830366",
    # ... printed as a card is (4-4-4-4, Luhn-valid) after an order's, a parcel's, an invoice's or a ticket's label
    "order number 4111 1111 1111 1111",
    "Tracking number: 4111 1111 1111 1111 (DHL)",
    "invoice 4111-1111-1111-1111 is due",
    "ticket #4111 1111 1111 1111 closed",
    "Order #4111 1111 1111 1111 shipped",
    "Bestellnummer 4111 1111 1111 1111",
    "n° de commande 4111 1111 1111 1111",
    "número de pedido 4111 1111 1111 1111",
    "订单号 4111 1111 1111 1111",
    "ticket 201-55-4321 was closed",
    "tel 555-12-3456",
    "phone: 555-12-3456, fax 555-12-3457",
    "case no. 536-22-1487; order #536-22-1488; ref 536-22-1489",
    "Llámame al 555-12-3456 o al +34 612 345 678.",
    # 5. auth methods in capitals
    "DB_AUTH=SCRAM_SHA_256",
    '"auth": "SCRAM_SHA_256"',
    "AUTH=SASL_256",
    "SMTP_AUTH=LOGIN_V2",
    "KAFKA_AUTH=SASL_PLAIN\nPASS=NO_AUTH\nADMIN_PW=ADMIN_PW_2",
]


@pytest.mark.parametrize(("text", "kind", "secret"), REDACTED, ids=[c[0][:40] for c in REDACTED])
def test_a_credential_next_to_the_described_ones_stays_redacted(text: str, kind: str, secret: str) -> None:
    found = secrets.find(text)
    assert [(f.kind, text[f.start : f.end]) for f in found] == [(kind, secret)]
    start, end = found[0].start, found[0].end
    assert secrets.redact(text).text == f"{text[:start]}[redacted: {kind}]{text[end:]}"


@pytest.mark.parametrize("text", LEFT_ALONE)
def test_text_describing_a_password_or_naming_a_number_is_left_alone(text: str) -> None:
    assert secrets.find(text) == []
    assert secrets.redact(text).text == text


RUN = 200_000  # characters


def _run(unit: str) -> str:
    return unit * (RUN // len(unit) + 1)


ADVERSARIAL = [
    # runs of the new cues and labels, then one credential: each match reads a bounded window before it
    (_run("la clave de ") + "la clave es Xk9vQ2mPz7aB3cD4eF", "secret", "Xk9vQ2mPz7aB3cD4eF"),
    (_run("card a ") + "4532015112830366", "payment card number", "4532015112830366"),
    (_run("4532015112830366 ") + "card 4111111111111111", "payment card number", "4111111111111111"),
    (_run("ticket 201-55-4321 ") + "\n536-22-1487", "social security number", "536-22-1487"),
    (_run("Kreditkarte") + " 4532015112830366", "payment card number", "4532015112830366"),
]


@pytest.mark.parametrize(
    ("text", "kind", "secret"), ADVERSARIAL, ids=[f"{c[1]}-{i}" for i, c in enumerate(ADVERSARIAL)]
)
def test_a_long_run_of_a_new_cue_or_label_is_read_once(text: str, kind: str, secret: str) -> None:
    assert [(f.kind, text[f.start : f.end]) for f in secrets.find(text)] == [(kind, secret)]


def test_the_bench_clean_corpus_is_left_alone() -> None:
    # bench/secrets_clean.txt: a few hundred texts of ordinary prose about passwords in nine languages, ids, order,
    # ticket and phone numbers, code and config files with auth methods (``python -m bench secrets`` reports it)
    from bench.secrets import clean_texts

    texts = clean_texts()
    assert len(texts) > 250
    assert [(section, t) for section, t in texts if secrets.redact(t).text != t] == []
