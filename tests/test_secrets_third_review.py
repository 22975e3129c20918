"""Gaps a later review of the credential detector found, each with the ordinary text next to it: a number printed as a
card's after an order's label and a colon with the card's brand after it ("Order: 4111 ... (Visa)"), a run of digits
whose card word is more than three words back ("my card for the big family trip is 4111..."), a security code
misspelled ("ccv 123") or said with its word ("CVV code: 123") further than 40 characters on, all left in the clear;
a version's or a product's name after a key and a space ("v2Beta", "MySQL8") redacted with it; "use Tiger Lily"
after "the password is" read as a pointer to a password ("use Bitwarden") instead of a passphrase."""

from __future__ import annotations

import pytest

from tiermem.domain import secrets

from .test_secrets_review import _reads

CARD = "4111 1111 1111 1111"
RUN = "4111111111111111"
MC = "5555 5555 5555 4444"
PROJ = "sk-proj-" + "YYZYn9ZhyiA4uoRgnatmUdjAWtGSU8po-799NksnRH9ucAUsdMlHUvTCQCyEZDz_TddJ8HyS5SUkCnD8zRA9a9S"
SLACK = "xoxb-1234567890-1234567890-lqsajAIxNKu8iS2G8NPRVdD5"
STRIPE = "sk_live_nsGpWLuqIA1id6Vw5DQL05HA"

# (text, kind, secret): redacted, one finding, its span exactly the secret's
REDACTED = [
    # 1. a card's brand or the word "card" right after a number printed as a card's, after an order's label
    (f"Order: {CARD} (Visa)", "payment card number", CARD),
    (f"Order: {CARD} visa", "payment card number", CARD),
    (f"Order #{MC} - Mastercard", "payment card number", MC),
    (f"Invoice: {CARD}, my credit card", "payment card number", CARD),
    (f"Tracking number {CARD} amex", "payment card number", CARD),
    # 2. a card word four to seven words before a run of digits, in the same sentence
    (f"my card for the big family trip is {RUN}", "payment card number", RUN),
    (f"card that I use on trips: {RUN}", "payment card number", RUN),
    (f"Visa, the one with the blue logo: {RUN}", "payment card number", RUN),
    # 3. a security code misspelled "ccv", after an order's label
    (f"Order: {CARD} ccv 123", "payment card number", CARD),
    (f"Order: {CARD} and the ccv: 123", "payment card number", CARD),
    (f"Order: {CARD}\nCCV: 123", "payment card number", CARD),
    # 4. a code given with its word ("CVV code: 123") further than 40 characters after the number
    (f"Order: {CARD}, shipped to 221B Baker Street London, CVV code: 123", "payment card number", CARD),
    (
        f"Order number {CARD}, shipped to 221B Baker Street, London NW1 6XE, cvc number is 4421",
        "payment card number",
        CARD,
    ),
    (f"Tracking: {CARD}\nName: J. Doe\nCVV code: 123", "payment card number", CARD),
    # 6. two names after "use": a passphrase, not a pointer to one
    ("the password is use Tiger Lily", "password", "use Tiger Lily"),
    ("my passphrase is get Lucky Star", "password", "get Lucky Star"),
]

LEFT_ALONE = [
    # an order's number printed as a card's, a word after it naming no card, or a card word far after it
    f"Order: {CARD} (shipped)",
    f"Order: {CARD} (2 items, gift wrapped)",
    f"Tracking number: {CARD} (UPS)",
    f"Order #{MC} was delivered; we never ask for your card's security code by email",
    f"Order: {CARD} discovered missing at the depot",
    f"Invoice: {CARD} paid Monday",
    # a card word far back, but a sentence's end or another number's label between
    f"I lost my library card at the station. Order {RUN} shipped.",
    f"the card game we played last night; ticket {RUN}",
    f"my card was declined on the order number {RUN}",
    # "ccv" and a security code's word further than 40 characters on with no code given, a CSV export
    f"Order: {CARD}, shipped on Monday; the checkout asks for a CVV code",
    f"Order: {CARD}, CSV export attached",
    f"Ticket {CARD}: the customer on the phone asked us what a ccv is",
    # a pointer: one name after "use", or a name and the place
    "the password is use Bitwarden",
    "the password is use Bitwarden vault",
    "the password is ask Dave Smith",
]


@pytest.mark.parametrize(("text", "kind", "secret"), REDACTED, ids=[f"{c[1]}-{i}" for i, c in enumerate(REDACTED)])
def test_a_credential_the_review_found_left_in_the_clear_is_redacted(text: str, kind: str, secret: str) -> None:
    assert [(f.kind, text[f.start : f.end]) for f in secrets.find(text)] == [(kind, secret)]
    assert secret not in secrets.redact(text).text


@pytest.mark.parametrize("text", LEFT_ALONE)
def test_ordinary_text_next_to_them_is_left_alone(text: str) -> None:
    assert secrets.find(text) == []


# 5. a version's or a product's name after a key and a space, at its line's end or in the sentence: the key alone
@pytest.mark.parametrize("key", [PROJ, SLACK, STRIPE], ids=["openai", "slack", "stripe"])
@pytest.mark.parametrize("word", ["v2Beta", "MySQL8", "Python3", "v1Alpha"])
@pytest.mark.parametrize("tail", ["", " is the model", "\nnext line"], ids=["end", "sentence", "line"])
def test_a_name_after_a_key_and_a_space_is_not_redacted_with_it(key: str, word: str, tail: str) -> None:
    text = f"the key {key} {word}{tail}"
    assert [text[f.start : f.end] for f in secrets.find(text)] == [key]
    assert word in secrets.redact(text).text


def test_a_key_split_by_a_space_before_a_random_tail_is_still_redacted_whole() -> None:
    # the tails a name's shape leaves out are random: they part at almost every character
    for tail in ("tU9vW1x", "DQL05HAx9", "zRA9a9S"):
        text = f"stripe key {STRIPE} {tail}"
        assert [text[f.start : f.end] for f in secrets.find(text)] == [f"{STRIPE} {tail}"]


@pytest.mark.parametrize("tail", ["3XhSgmv", "Lom2Ef", "NDjEut", "g7pnkof", "QQ3ebd", "mlYaU", "5YNAwjp", "ArCT"])
def test_a_random_tail_after_a_key_and_a_space_is_not_taken_for_a_name(tail: str) -> None:
    # random tails of three parts at most with four letters in them (one in five of 5 to 8 characters): a name's
    # digits end it or follow a version's "v", and its words can be said
    text = f"stripe key {STRIPE} {tail}"
    assert [text[f.start : f.end] for f in secrets.find(text)] == [f"{STRIPE} {tail}"]
    assert tail not in secrets.redact(text).text


@pytest.mark.parametrize(
    "unit",
    [
        f"my card for the big family trip is {RUN} ",
        f"Order: {CARD} (Visa) ccv 123, CVV code: 123 ",
        f"the key {STRIPE} v2Beta ",
        "the password is use Tiger Lily\n",
    ],
    ids=["far-cue", "card-after", "name-after-key", "pointer"],
)
def test_the_new_rules_read_a_long_text_in_linear_time(monkeypatch: pytest.MonkeyPatch, unit: str) -> None:
    # each new look (a card word far back, a brand or a code after the number, a name after a key) reads a bounded
    # window around each match: ten times the text is read about ten times over (counted, not timed)
    short = _reads(monkeypatch, unit * 200)
    long = _reads(monkeypatch, unit * 2000)
    assert short > 200 * len(unit)
    assert long <= 12 * short
