"""Gaps a fourth look at the credential detector found: a number printed as a card's after a form's bare label and a
colon ("Tracking: 4111 ...") read as a card; a key wrapped inside a JSON string (a literal ``\\n`` escape in it) left
its second half in the clear; a key split by a space before a short tail kept the tail; a security code further
than 40 characters after an order's number printed as a card's not seen. Each with the ordinary text next to it."""

from __future__ import annotations

import pytest

from tiermem.domain import secrets

CARD = "4111 1111 1111 1111"
MC = "5555 5555 5555 4444"

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
]


@pytest.mark.parametrize(("text", "secret"), REDACTED, ids=[c[0][:40] for c in REDACTED])
def test_a_credential_is_redacted(text: str, secret: str) -> None:
    found = secrets.find(text)
    assert [text[f.start : f.end] for f in found] == [secret]
    assert secret not in secrets.redact(text).text


@pytest.mark.parametrize("text", LEFT_ALONE)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert secrets.find(text) == []
