"""Numbers that are credentials: payment card numbers (an issuer's prefix and length, Luhn's check, printed in a
card's groups or after a word naming a card) and US social security numbers, each told from the numbers of the same
shape that are not (an order's, a ticket's, a phone's, by the label before it). Each is a pattern and a check here;
``secrets`` runs them with its other detectors.

Every pattern takes each step one way only (disjoint character classes, bounded repeats): a run of digits or of
punctuation is read in one pass (``tests/test_secrets_more.py`` reads 200 KB of each).
"""

from __future__ import annotations

import re

# -- payment card and US social security numbers -------------------------------------------------------------------

# 13 to 19 digits, run together or in the groups cards are printed in (4-4-4-4[-3], Amex's 4-6-5, Diners' 4-6-4),
# one separator throughout (a space or a dash), standing alone (no digit, dash or letter glued on, no "+" before:
# a phone number). Ids, order and tracking numbers are runs of digits too, and one in ten of those starting with 4 to
# 6 passes the issuers' and Luhn's checks: a run (or a grouping cards are not printed in) is a card's number after a
# word naming one only (``card_cue``); a card's printed grouping (``PRINTED_CARD``) is one without
PAYMENT_CARD = (  # glued to a Chinese or Japanese word too ("卡号4111...": no spaces in those scripts)
    r"\d(?<![^\W\u3040-\u30ff\u3400-\u9fff]\d)(?<![+\-.,/]\d)(?:\d{12,18}|\d{3}([ -])\d{4}\1\d{4}\1\d{4}(?:\1\d{1,3})?|\d{3}([ -])\d{6}\2\d{4,5})"
    r"(?![^\W\u3040-\u30ff\u3400-\u9fff]|-|[.,/]\d)"
)
PRINTED_CARD = (
    r"\d(?<![\w+\-.,/]\d)(?:\d{3}([ -])\d{4}\1\d{4}\1\d{4}(?:\1\d{3})?|\d{3}([ -])\d{6}\2\d{4,5})"
    r"(?![\w\-]|[.,/]\d)"
)
# how far before a number its cue or label is looked for: the characters before it on its line, up to this many
BEFORE = 60
# a word naming a card or a payment, then up to three words (none starting with a digit) before the number: "card",
# "my Visa is", "charge", "credit card number:", "tarjeta", "carte bancaire", "Kreditkartennummer", "カード番号",
# "信用卡号"
_BETWEEN = r"(?:[^\w\n]+[^\W\d]\w{0,30}){0,3}[^\w\n]*\Z"
# ... or up to seven words in the same sentence (no ".", "!", "?" or ";" between them): "my card for the big family
# trip is", "the Visa I use for travel:"; but for another number's label right before the number (``_NOT_A_CARD``)
_FAR_BETWEEN = r"(?:[^\w\n.!?;]+[^\W\d]\w{0,30}){4,7}[^\w\n]*\Z"
_CARD_WORD = (
    r"(?<![^\W\d_])(?:cards?|cc|ccn|pan|visa|master\s?card|amex|american\s+express|discover|jcb|diners"
    r"|maestro|union\s?pay|credit|debit|payments?|pay|paid|charged?|billing|tarjeta|carte|carta|cart[ãa]o|cb"
    r"|[^\W\d_]*card(?:s|number|nummer|no|nr)?|[^\W\d_]*(?:karte|kaart)[^\W\d_]*)(?![^\W\d_])"
)
_CARD_CUE = re.compile(r"(?i:" + _CARD_WORD + _BETWEEN + r"|(?:カード|卡)\w{0,4}[^\w\n]*\Z)")
_FAR_CARD_CUE = re.compile(r"(?i:" + _CARD_WORD + _FAR_BETWEEN + r")")


def card_cue(before: str) -> bool:
    """Whether the text before a number (up to ``BEFORE`` characters of its line) ends with a word naming a card or
    a payment and at most three words after it, or at most seven in its sentence with no other number's label
    (``_NOT_A_CARD``: "order number") right before the number."""
    return _CARD_CUE.search(before) is not None or (
        _FAR_CARD_CUE.search(before) is not None and _NOT_A_CARD.search(before) is None
    )


# what a number printed as a card is (4-4-4-4) is besides: an order's, a parcel's, an invoice's, a ticket's or a
# tracking number, its label right before it ("order number 4111 1111 1111 1111", "Order #4111 ...", "invoice 4111-...",
# "Tracking number: ...", "Bestellnummer", "n° de commande", "número de pedido", "订单号"): the label, a number's word
# after it ("number", "no.", "#", "id") then "is" or a colon, or the label alone then a space or "#"; or the number's
# word first ("número de pedido"). No other word between them: "paid for the order with 4111 ...", "the order: 4111
# ...", "Claim reimbursement to 4111 ...", "Reference: 4111 ..." are cards
_LABEL = (
    r"(?:orders?|tracking|invoices?|tickets?|parcels?|shipments?|consignments?|waybills?|po|purchase\s+orders?"
    r"|pedidos?|commandes?|facturas?|factures?|fatturas?|faturas?|ordine|encomendas?|env[ií]os?|suivi|colis"
    r"|spedizione|seguimiento|rastreio|bestellung|rechnung|sendung|auftrag|bestelling|factuur|zending"
    r"|заказ\w{0,2}|посылк\w{0,2}|отправлени\w{0,2})"
)
_NUMBER_WORDS = r"numbers?|no\.?|nr\.?|num\.?|#|id|n[º°o]\.?|nummer|n[uú]mero|num[ée]ro|номер|№"
_NUMBER_WORD = r"(?:" + _NUMBER_WORDS + r")"
# a booking's, a reservation's or a confirmation's number only with its number's word ("booking ref 5105 ..."): bare,
# "Confirmation 4111 ...", "hotel reservation: 5555 ..." are cards
_BOOKING = r"(?:booking|reservation|confirmation)[ \t]*(?:ref\.?|reference|code|" + _NUMBER_WORDS + r")"
# a bare label then a colon is a form's field ("Tracking: 4111 ...", "Order: ...", "| Invoice: ...", "**Parcel:** ...",
# "DHL tracking: ..."): at its line's start, after a separator or after a name (a carrier's); after a word of a
# sentence ("Use this for the order: 4111 ...", "my order: ...") the number is a card
_FIELD = (
    r"(?:\A|[|;,(\[{•>\-])[ \t*_]*"
    r"(?:(?!(?i:the|this|that|these|my|your|our|his|her|their|its|for|with|use|pay|paid|an?|to|on|of|in|by|from)"
    r"[ \t])[A-Z][\w&\-]{1,15}[ \t]+)?"
)
_NOT_A_CARD = re.compile(
    r"(?i:(?<![^\W\d_])(?:"
    + _LABEL
    + r"[ \t]*#?[ \t]*"  # "order 4111 ...", "Order #4111 ..."
    + r"|"
    + _LABEL
    + r"[ \t]*"
    + _NUMBER_WORD
    + r"(?:[ \t]+(?:is|was|es|est|ist|é|è))?[ \t]*[:#]?[ \t]*"  # "order number is: ", "Pedido nº "
    + r"|"
    + _BOOKING
    + r"(?:[ \t]+(?:is|was))?[ \t]*[:#]?[ \t]*"
    + r"|"
    + _NUMBER_WORD
    + r"[ \t]+(?:(?:de|da|do|del|di|d')[ \t]*)?"
    + _LABEL
    + r"[ \t]*:?[ \t]*"  # "número de pedido ", "Numéro de suivi : ", "Номер заказа "
    + r"|(?:bestell|auftrags|rechnungs|sendungs|order|bestel|paket|tracking|lieferschein)(?:nummer|nr\.?)[ \t]*:?[ \t]*"
    + r"|sendungsverfolgung[ \t]*:?[ \t]*"
    + r")\Z|(?:注文|订单|訂單|快递|運單|运单|追跡)\w{0,4}[^\w\n]*\Z)"
    + r"|"
    + _FIELD
    + r"(?i:"
    + _LABEL
    + r")[*_]*[ \t]*:[ \t]*[*_]*[ \t]*\Z"
)
# a card's expiry date or security code after the number ("4111 ... exp 12/27 cvv 123"): a card, whatever its label
_CARD_EXPIRY = re.compile(
    r"(?i:(?<![^\W\d_])(?:exp(?:iry|ires|iration)?|valid\s+(?:thru|through|until)"
    r"|vence|vencimiento|caducidad|expiration|ablauf|g[üu]ltig|scadenza)(?![^\W\d_])"
    r"|(?<!\d)(?:0[1-9]|1[0-2])[ \t]*/[ \t]*(?:\d{2}|20\d{2})(?!\d))"
)
# its name, or its common misspelling ("ccv")
_SECURITY_CODE = r"(?i:(?<![^\W\d_])(?:cvv2?|cvc2?|ccv2?|csc|security\s+code)(?![^\W\d_]))"
_CARD_CODE = re.compile(_SECURITY_CODE)
# ... further on, the code itself after its name ("CVV 123", "cvc: 4421", "CVV code: 123", "ccv number is 123"):
# "the checkout asks for a CVV" is not one
_CODE_WORD = r"(?i:[ \t]+(?:code|number|no\.?|#))?"
_CARD_CODE_GIVEN = re.compile(
    _SECURITY_CODE + _CODE_WORD + r"[ \t]*(?i:is[ \t]+)?[:=#]?[ \t]*\d{3,4}(?![\w\-]|[.,/]\d)"
)
# how far after a number printed as a card its expiry date or its security code's name is looked for (a date further
# on is the order's: "order 4111 ..., shipped 12/24"), and its security code given (anywhere on the line up to this
# far: "Order number 4111 ..., shipped to 221B Baker Street, London, CVV 123")
EXPIRY_AFTER = 40
AFTER = 160


# a card's expiry or security code as a form's field of its own on one of the two lines after the number
# ("Order: 4111 ...\nExp: 12/27\nCVV: 123"): the number was the card's, whatever its label
_FIELD_AFTER = re.compile(
    r"(?i:[ \t*_|>\-]*(?:exp(?:iry|ires|iration)?(?:[ \t]+date)?|valid\s+(?:thru|through|until)|expiration"
    r"|cvv2?|cvc2?|ccv2?|csc|security\s+code)(?![^\W\d_])(?:[ \t]+(?:code|number))?[ \t*_]*[:=#]?[ \t*_]*\d)"
)
FIELD_LINES = 2


# a card's brand or the word "card" right after the number, at most two words between ("4111 ... (Visa)", "... visa
# debit", "... - Mastercard", "..., my credit card"): a card, whatever its label; a payment's word is not one there
# ("Order: 4111 ... paid Monday" is an order's)
_CARD_AFTER = re.compile(
    r"(?i:[^\w\n]{0,3}(?:[^\W\d_]{1,30}[^\w\n]{1,3}){0,2}?"
    r"(?:visa|master\s?card|amex|american\s+express|discover|jcb|diners|maestro|union\s?pay|cards?|tarjeta|carte"
    r"|karte)(?![^\W\d_]))"
)


def printed_card_label(before: str, after: str) -> bool:
    """Whether a number printed as a card's, with the text before it (up to ``BEFORE`` characters of its line) and
    after it (``AFTER`` characters: the rest of its line, and the lines after it), is a card's: no label of another
    number right before it (``_NOT_A_CARD``: "order number", "tracking number:", "invoice #", "Bestellnummer"), or a
    word naming a card or a payment before it ("order paid by card"), or an expiry date or a security code's name
    right after it ("exp 12/27", "CVC", within ``EXPIRY_AFTER`` characters, read whole), or a card's brand or the word
    "card" right after it ("(Visa)", ``_CARD_AFTER``), or a security code given after it on its line ("CVC 737",
    "CVV code: 123"), or an expiry or a security code given as a field of its own on one of the
    ``FIELD_LINES`` lines after it ("Exp: 12/27", "CVV: 123")."""
    line, *following = after.split("\n", FIELD_LINES + 1)
    return (
        _NOT_A_CARD.search(before) is None
        or card_cue(before)
        or _within(_CARD_EXPIRY, line, EXPIRY_AFTER)
        or _within(_CARD_CODE, line, EXPIRY_AFTER)
        or _CARD_CODE_GIVEN.search(line) is not None
        or _within_match(_CARD_AFTER, line, EXPIRY_AFTER)
        or any(_FIELD_AFTER.match(field) for field in following[:FIELD_LINES])
    )


def _within_match(pattern: re.Pattern[str], after: str, limit: int) -> bool:
    """Whether ``pattern`` matches at the start of ``after`` and ends within its first ``limit`` characters."""
    m = pattern.match(after)
    return m is not None and m.end() <= limit


def _within(pattern: re.Pattern[str], after: str, limit: int) -> bool:
    """Whether ``pattern`` matches within the first ``limit`` characters of ``after``, read whole: a word the limit
    cuts ("expected", "cvcs") is not read as its first letters ("exp", "cvc")."""
    m = pattern.search(after)
    return m is not None and m.end() <= limit


# the issuers' prefixes and lengths: Visa, Mastercard, Amex, Discover, JCB, Diners, UnionPay, Maestro
_ISSUERS = (
    (re.compile(r"4"), (13, 16, 19)),
    (re.compile(r"5[1-5]|222[1-9]|22[3-9]|2[3-6]|27[01]|2720"), (16,)),
    (re.compile(r"3[47]"), (15,)),
    (re.compile(r"6011|65|64[4-9]"), (16, 19)),
    (re.compile(r"35(?:2[89]|[3-8])"), (16, 17, 18, 19)),
    (re.compile(r"3(?:0[0-5]|[689])"), (14, 16)),
    (re.compile(r"62"), (16, 17, 18, 19)),
    (re.compile(r"5[06-9]|6[0-9]"), (13, 14, 15, 16, 17, 18, 19)),
)


def card_number(value: str) -> bool:
    """A payment card's number: an issuer's prefix and length, and its Luhn check digit right."""
    digits = value.replace(" ", "").replace("-", "")
    if not any(prefix.match(digits) and len(digits) in lengths for prefix, lengths in _ISSUERS):
        return False
    total = 0
    for n, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if n % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


# NNN-NN-NNNN standing alone (a W-2, a form, a table write it bare) but for after another number's label: "ticket
# 201-55-4321", "tel 555-12-3456", "order #", "case no." (``ssn_label``); after "SSN" or "social security (number)" also with spaces or run together
SSN = r"\d(?<![\w\-.,/+]\d)\d{2}-\d{2}-\d{4}(?![\w\-]|[.,/]\d)"
SAID_SSN = (
    r"[sS](?<![^\W\d_].)(?i:(?<=s)sn|(?<=s)ocial\s+security(?:\s+(?:number|no\.?|#))?)(?:\s+(?i:is|was))?\s*[:#]?\s*"
    r"(\d{3}([ -]?)\d{2}\2\d{4})(?![\w\-]|[.,/]\d)"
)
SSN_NEEDLES = ("ssn", "social security")
# numbers the Social Security Administration published (an advertisement's, a wallet's sample): examples, not one's
_SSN_EXAMPLES = frozenset(("078051120", "123456789", "219099999"))


# what numbers of that shape are besides: a label, then up to three words (none starting with a digit)
_OTHER_NUMBER = re.compile(
    r"(?i:(?:(?<![^\W\d_])(?:tickets?|tel|t[eé]l[eé]fono|t[eé]l[eé]phone|telefon|phone|ph|mobile|cell|fax|call|text"
    r"|orders?|invoices?|case|ref|reference|id|ids|no|nr|num|number|room|part|sku|po|account|acct|tracking|booking"
    r"|confirmation|serial|model|build|version|ext|issue|bug|item|code|zip|patient|member|policy|claim|batch|lot"
    r"|pedido|factura|commande|facture|bestellung|rechnung|ll[aá]mame|llama|llamar|m[oó]vil|celular|whatsapp"
    r"|appelez|appelle|portable|chiamami|chiama|cellulare|ligue|liga|bel|bellen|anrufen|ruf|handy)(?![^\W\d_])"
    r"|#|n[º°])" + _BETWEEN + r")"
)
_SSN_CUE = re.compile(r"(?i:ssn|social\s+security)")


def ssn_label(before: str) -> bool:
    """Whether the text before ``NNN-NN-NNNN`` (up to ``BEFORE`` characters of its line) leaves it a social security
    number: no other number's label ends it ("ticket", "tel", "order #", "case no."), or "SSN" is in it."""
    return _OTHER_NUMBER.search(before) is None or _SSN_CUE.search(before) is not None


def ssn(value: str, *, said: bool = False) -> bool:
    """A US social security number: no area 000, 666 or 900-999, no group 00, no serial 0000; alone, not one of the
    published examples (said after "SSN", it is the person's)."""
    digits = value.replace("-", "").replace(" ", "")
    area, group, serial = digits[:3], digits[3:5], digits[5:]
    if area in ("000", "666") or area[0] == "9" or group == "00" or serial == "0000":
        return False
    return said or digits not in _SSN_EXAMPLES
