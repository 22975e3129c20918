"""Gaps a fourth look at the credential detector found: a number printed as a card's after a form's bare label and a
colon ("Tracking: 4111 ...") read as a card; a key wrapped inside a JSON string (a literal ``\\n`` escape in it) left
its second half in the clear; a key split by a space before a short tail kept the tail; a security code further
than 40 characters after an order's number printed as a card's not seen. Each with the ordinary text next to it."""

from __future__ import annotations

import pytest

from tiermem.domain import secrets

CARD = "4111 1111 1111 1111"
MC = "5555 5555 5555 4444"
ANTHROPIC = "sk-ant-api03-" + ("Xq9Lm2Zt8rBv4Nc7Kd1Pw6Hy3Jf5Gs0Ae" * 3)[:91] + "WXAA"  # 95 after the prefix
PROJ = "sk-proj-" + "YYZYn9ZhyiA4uoRgnatmUdjAWtGSU8po-799NksnRH9ucAUsdMlHUvTCQCyEZDz_TddJ8HyS5SUkCnD8zRA9a9S"
SLACK = "xoxb-1234567890-1234567890-lqsajAIxNKu8iS2G8NPRVdD5"
GHP = "ghp_z63FfkCzJr4i0B3JrTAwR4y9ojfljoQoaF1L"


def wrapped(key: str, width: int, escape: str = "\\n") -> str:
    """``key`` wrapped at ``width`` characters as a string's text holds it: each break an escape, not a line break."""
    return escape.join(key[i : i + width] for i in range(0, len(key), width))


# (text, secret): redacted, one finding, its span exactly the secret's
REDACTED = [
    # a. a card after a word naming a card, a sentence's word, or with its expiry, its security code after it
    (f"Card: {CARD}", CARD),
    (f"Payment: {CARD}", CARD),
    (f"Use this for the order: {CARD}", CARD),
    (f"my order: {CARD}", CARD),
    (f"The order: {CARD}", CARD),
    (f"Tracking: {CARD} exp 12/27", CARD),
    (f"Order: {CARD} cvv 123", CARD),
    (f"Visa order: {CARD}", CARD),
    # b. a key wrapped inside a JSON or a code string: its breaks a literal "\\n" or "\\r\\n" escape
    ('{"key": "' + wrapped(ANTHROPIC, 40) + '"}', wrapped(ANTHROPIC, 40)),
    ('{"key": "' + wrapped(ANTHROPIC, 40, "\\r\\n") + '", "n": 1}', wrapped(ANTHROPIC, 40, "\\r\\n")),
    ('{"token": "' + wrapped(PROJ, 30) + '"}', wrapped(PROJ, 30)),
    ('{"env": "the bot token ' + wrapped(SLACK, 40) + '\\nDEBUG=1"}', wrapped(SLACK, 40)),
    ("token = '" + wrapped(GHP, 20) + "'", wrapped(GHP, 20)),
    ('echo "' + PROJ[:50] + "\\n" + PROJ[50:] + '\\nnext line"', PROJ[:50] + "\\n" + PROJ[50:]),
    # ... a tail whose parts look like words' by their lengths ("Ihsrdxqqg"), none a word: six consonants in a row
    (
        '{"content": "api_key: sk-proj-KU7Ex6rbDRJ7rIxPtfkCqSPZyt8129k0ri74zN\\n3czZZG90qryuRIhsrdxqqgF24-\\nand 401"}',
        "sk-proj-KU7Ex6rbDRJ7rIxPtfkCqSPZyt8129k0ri74zN\\n3czZZG90qryuRIhsrdxqqgF24-",
    ),
    (
        "api_key: sk-proj-KU7Ex6rbDRJ7rIxPtfkCqSPZyt8129k0ri74zN\n3czZZG90qryuRIhsrdxqqgF24-\nand 401",
        "sk-proj-KU7Ex6rbDRJ7rIxPtfkCqSPZyt8129k0ri74zN\n3czZZG90qryuRIhsrdxqqgF24-",
    ),
]

LEFT_ALONE = [
    # a. an order's, a parcel's, an invoice's, a ticket's or a tracking number after a form's bare label and a colon
    f"Tracking: {CARD}",
    f"Order: {CARD}",
    f"Invoice: {MC}",
    f"Ticket: {CARD}",
    f"  - Invoice: {CARD.replace(' ', '-')} due",
    f"**Tracking:** {CARD}",
    f"DHL tracking: {CARD}",
    f"Status: shipped | Parcel: {CARD}",
    f"Shipment: {MC} (2 boxes)",
    f"Pedido: {CARD}",
    # b. a prefix named in a string, a word after an escaped break
    '{"note": "ghp_\\nfoo"}',
    '{"note": "use xoxb-\\nSales tokens"}',
    '{"note": "sk-proj-\\nReport2024Q3"}',
]


@pytest.mark.parametrize(("text", "secret"), REDACTED, ids=[c[0][:40] for c in REDACTED])
def test_a_credential_is_redacted(text: str, secret: str) -> None:
    found = secrets.find(text)
    assert [text[f.start : f.end] for f in found] == [secret]
    assert secret not in secrets.redact(text).text


# d. a security code anywhere after a number printed as a card's on its line, whatever the label before it
@pytest.mark.parametrize(
    ("text", "card"),
    [
        (f"Order number {CARD}, shipped to 221B Baker Street, London NW1 6XE, CVV 123", CARD),
        (f"Order #{CARD} for the blue sofa, delivery on Tuesday morning, security code 737", CARD),
        (f"Tracking: {MC} (the parcel to Lyon, two boxes, signed for) cvc 4421", MC),
    ],
)
def test_a_security_code_far_after_a_labelled_number_makes_it_a_card(text: str, card: str) -> None:
    assert [(f.kind, text[f.start : f.end]) for f in secrets.find(text)] == [("payment card number", card)]


# d. a date or an expiry's word further than 40 characters after it is the order's
@pytest.mark.parametrize(
    "text",
    [
        f"Order number {CARD} shipped on Tuesday; delivery expected 12/24 at the front desk",
        f"Order {CARD}, shipped to the office on Tuesday; the return window expires in 30 days",
        # ... and a security code's name far after it, no code given: the text is about one
        f"Ticket {CARD}: the customer asks why the checkout page wants a CVV",
        f"Order #{CARD} was delivered; we never ask for your card's security code by email",
        # ... a word the 40 characters cut is read whole: "expected" is no "exp", "cvcs" no "cvc"
        f"Order {CARD} shipped to the office on a Tuesday, expected Friday",
        f"Order {CARD} shipped to the office on a Tuesday, cvcs are never asked",
    ],
)
def test_a_date_far_after_a_labelled_number_leaves_it_alone(text: str) -> None:
    assert secrets.find(text) == []


# c. a key of no fixed length split by a space before a short tail, in a sentence: the tail is the key's
@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (f"my key is {PROJ[:-7]} {PROJ[-7:]} and it fails", f"{PROJ[:-7]} {PROJ[-7:]}"),
        (f"SLACK_BOT {SLACK[:-6]} {SLACK[-6:]} (the bot's)", f"{SLACK[:-6]} {SLACK[-6:]}"),
        ("stripe key sk_live_nsGpWLuqIA1id6Vw5 DQL05HAx9 is live", "sk_live_nsGpWLuqIA1id6Vw5 DQL05HAx9"),
        (f"try {PROJ[:-9]}  {PROJ[-9:]}, it fails", f"{PROJ[:-9]}  {PROJ[-9:]}"),
    ],
)
def test_a_key_split_before_a_short_tail_is_redacted_whole(text: str, secret: str) -> None:
    assert [text[f.start : f.end] for f in secrets.find(text)] == [secret]


# c. a word after a key on its line, shaped as names and versions are, is the sentence's: the key alone is redacted
@pytest.mark.parametrize(
    "word",
    [
        "thanks",
        "base64",
        "sha256",
        "GPT4o",
        "x86_64",
        "iPhone15",
        "GPT4Turbo",
        "H100s",
        "2024",
        "v2",
        "OAuth2",
        "B07XJ8C8F5",
        "A1B2C3",
    ],
)
def test_a_word_after_a_key_is_not_joined_to_it(word: str) -> None:
    text = f"my key is {PROJ} {word} encoded"
    assert [text[f.start : f.end] for f in secrets.find(text)] == [PROJ]


# b. the words after a key wrapped in a string are the string's: the key alone is redacted
@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('{"msg": "token ' + SLACK + '\\nthanks"}', SLACK),
        ('{"a": "' + SLACK[:30] + "\\n" + SLACK[30:] + '\\nHello world"}', SLACK[:30] + "\\n" + SLACK[30:]),
        ('{"a": "' + PROJ + '\\nThanks"}', PROJ),
    ],
)
def test_a_key_in_a_string_is_not_joined_to_the_next_line(text: str, key: str) -> None:
    assert [text[f.start : f.end] for f in secrets.find(text)] == [key]


@pytest.mark.parametrize("text", LEFT_ALONE)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert secrets.find(text) == []


@pytest.mark.parametrize(
    "text",
    [
        f"Order: {CARD}\nExp: 12/27\nCVV: 123",
        f"Invoice: {CARD}\nExpiry 12/27",
        f"Tracking: {MC}\nName: J. Doe\nCVC: 4421",
        f"| Order: {CARD}\n| **Expiration date:** 12/27",
    ],
)
def test_a_card_whose_expiry_or_code_is_a_field_on_the_next_lines_is_redacted(text: str) -> None:
    """A form's label before the number does not leave it in the clear when the card's expiry or security code is a
    field of its own on one of the two lines after it (a review found these kept after the bare-label rule)."""
    found = secrets.find(text)
    assert [text[f.start : f.end] for f in found if f.kind == "payment card number"] == [text.split(": ")[1][:19]]


@pytest.mark.parametrize(
    "text",
    [
        f"Order: {CARD}\nShipped: 12/27\nTotal: $40",
        f"Tracking: {CARD}\nExpected delivery: Friday",
        f"Order: {CARD}\n\n\nCVV: 123",  # three lines on: another field's
        f"Order: {CARD} shipped\nexpiry of the return window: 30 days",
    ],
)
def test_an_orders_number_with_other_fields_on_the_next_lines_is_left_alone(text: str) -> None:
    assert [f for f in secrets.find(text) if f.kind == "payment card number"] == []
