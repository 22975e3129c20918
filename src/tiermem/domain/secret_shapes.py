"""Credential shapes that are not tokens: a passphrase of several words said after "the password is", a password
said in another language, payment card and US social security numbers, and password hashes (``htpasswd`` lines,
``crypt(3)`` and bcrypt). Each is a pattern and a check here; ``secrets`` runs them with its other detectors.

Every pattern takes each step one way only (disjoint character classes, bounded repeats): a run of the cue, of
digits or of punctuation is read in one pass (``tests/test_secrets_more.py`` reads 200 KB of each).
"""

from __future__ import annotations

import math
import re
from collections import Counter

# -- a passphrase of several words: "my passphrase is correct horse battery staple" -------------------------------

# Words that say something about a password rather than being part of one ("the password is in the drawer", "is
# the same as before", "is too short", "is 12 characters long"): a run of words holding one is no passphrase.
_NOT_PASSPHRASE = (
    "a an the this that these those there here it its my your his her our their me you him us them i we they he she"
    " is was are were be been being am not no never always still just only also too very really quite so now then"
    " again already yet ever in on at to of for with without from by about into onto over under above below behind"
    " near inside outside up down out off same different as like than because since though although while when"
    " where what which who whom how why all any some something nothing anything everything somewhere nowhere"
    " anywhere one do does did done have has had will would can could should must may might shall going gonna"
    " supposed and or but if unless until either neither nor required needed wrong incorrect invalid expired weak"
    " strong secure insecure long short sensitive case new old easy hard simple stored saved written hidden shown"
    " set reset changed encrypted hashed missing lost forgotten characters character chars letters letter digits"
    " digit numbers number symbols words word minimum maximum least most more less enough much many field"
    " required optional mandatory blank empty"
    # what a password is like, where it is kept, whom it is for: "unique per user", "plain text", "environment
    # specific", "see Bitwarden", "top secret" ("correct" is not one: "correct horse battery staple" is a passphrase,
    # and a run saying a password is correct has another word of these or ends at "but": "is correct but ...")
    " see per plain text unique specific user users environment environments account accounts team everyone nobody"
    " default shared personal private public secret temporary random different valid"
    # prepositions and quantifiers a predicate goes on with ("is obfuscated before storage", "is rotated every night")
    " before after during via through across within upon against between among around beyond toward towards every"
    " each once twice"
).split()
# the cue's verb is followed by a predicate, not a passphrase, when its first word is a gerund ("is expiring soon") or
# an irregular participle ("is kept offline")
_PREDICATE = re.compile(r"\w{2,}ing$|(?:given|taken|known|gone|kept|left|sent|told|made|put|found)$", re.I)
_NOT_PASSPHRASE_WORDS = frozenset(_NOT_PASSPHRASE)
# The words, up to 8, each a plain word or a number (the first a word) separated by one space, ending the sentence,
# the line or the clause (a conjunction after them: "... dishwasher and the user is bob"). A word is taken whole
# (possessive: never re-read shorter), and the conjunctions are the only words the pattern itself stops at; the rest of
# ``_NOT_PASSPHRASE`` is ``said_passphrase``'s to check (a set's look-up, not an alternation tried at every word).
_CONJUNCTION = r"(?i:and|but|so|or|then|because|which|though|if|when|while)(?![^\W_])"
# nor a cue's word: a phrase never runs into the next cue ("the password is the password is ..."), so a phrase the
# check turns down leaves the next cue to be read
_CUE_WORD = r"(?i:pass(?:word|wd|phrase|code)|pwd)(?![^\W_])"
_WORD = r"(?!" + _CONJUNCTION + r"|" + _CUE_WORD + r")(?:[^\W\d_]{1,40}+|\d{1,12}+)"
PASSPHRASE = (
    r"((?=[^\W\d_])" + _WORD + r"(?: " + _WORD + r"){1,7}+)"
    r"(?=[.!?;,:)]+(?:\s|$)|[ \t]*(?:\r?\n|$)|\s+" + _CONJUNCTION + r")"
)
PASSPHRASE_WORDS = (2, 8)


# What is said of a password (``said_passphrase``): what is done to it, and how, how often or how likely ("hashed",
# "rotated monthly", "automatically generated", "likely compromised"). A run starting with one, or of three words
# or fewer holding one, is a predicate. Another word ending like a participle or an adverb is a passphrase's word
# ("wicked quickly jumped", "tangled orbit wizard fuzzy": diceware draws them as often as any), but in a run of two
# ("Bitwarden managed", "extremely complicated": too short a passphrase to tell from a predicate).
_SAID_OF_A_PASSWORD = frozenset(
    # done to it
    "hashed salted peppered encrypted decrypted encoded decoded stored saved cached logged printed displayed masked"
    " obscured obfuscated redacted generated autogenerated created chosen picked selected rotated changed updated"
    " renewed refreshed expired revoked disabled enabled locked unlocked blocked managed protected synced synchronized"
    " leaked compromised exposed stolen breached guessed cracked checked validated verified accepted rejected ignored"
    " truncated limited restricted enforced configured defined derived computed signed wrapped sealed scrambled"
    " randomized assigned issued provided supplied emailed texted delivered distributed typed entered pasted copied"
    " autofilled prefilled remembered unchanged unused used reused recycled outdated hardcoded embedded included"
    " attached labeled labelled marked noted documented recorded listed mistyped misspelled capitalized padded"
    " trimmed complicated shared required needed known written hidden shown forgotten"
    # how, how often, how likely
    " automatically randomly securely safely properly correctly incorrectly manually locally remotely centrally"
    " separately individually uniquely strongly weakly poorly badly daily weekly monthly yearly nightly hourly annually"
    " quarterly regularly periodically likely probably possibly definitely certainly clearly obviously apparently"
    " supposedly usually typically normally generally currently actually really truly fully partially completely"
    " totally entirely extremely fairly reasonably relatively incredibly ridiculously insanely highly recently newly"
    " freshly previously originally initially temporarily permanently only".split()
)
# a word ending as a participle or an adverb does ("-eed" is a word's own ending: "speed")
_PARTICIPLE = re.compile(r"\w{3,}(?<![eE])(?:ed|ED)$|\w{3,}(?:ly|LY)$")
_SHORT_RUN = 3


def said_passphrase(value: str) -> bool:
    """A passphrase said after "the password is": two to eight words, none of them one that says something about a
    password (``_NOT_PASSPHRASE``), the first no gerund nor irregular participle ("is kept offline"), no predicate
    said of a password (``_SAID_OF_A_PASSWORD``: "is changed weekly", "is stored encrypted"), and no two words one
    of them a participle or an adverb ("is Bitwarden managed")."""
    words = value.split()
    lowered = [w.lower() for w in words]
    return (
        PASSPHRASE_WORDS[0] <= len(words) <= PASSPHRASE_WORDS[1]
        and _PREDICATE.match(words[0]) is None
        and lowered[0] not in _SAID_OF_A_PASSWORD
        and not (len(words) <= _SHORT_RUN and any(w in _SAID_OF_A_PASSWORD for w in lowered))
        and not (len(words) == 2 and any(_PARTICIPLE.match(w) for w in words))
        and not any(w in _NOT_PASSPHRASE_WORDS for w in lowered)
    )


# -- what a password is protected by, or a question: "Le mot de passe est WPA2.", "Passwort: vergessen?" -----------

# protocols, algorithms and encodings a sentence says a password is protected, hashed or sent with: no password
# (written without "-", "." or "_", lower case)
_METHODS = frozenset(
    "wep wpa wpa2 wpa3 wpapsk wpa2psk md4 md5 sha sha1 sha2 sha3 sha224 sha256 sha384 sha512 sha3256 sha3512 ntlm"
    " ntlmv2 aes aes128 aes192 aes256 des 3des rsa rsa2048 rsa4096 ecdsa ed25519 hmac hmacsha256 pbkdf2 bcrypt scrypt"
    " argon2 argon2id argon2i yescrypt 2fa mfa otp totp hotp u2f fido2 webauthn tls ssl tls12 tls13 ssl3 https ssh"
    " oauth oauth1 oauth2 oidc saml saml2 sso ldap ldaps kerberos sasl scram scramsha1 scramsha256 radius eap peap"
    " utf8 utf16 utf32 ascii base32 base64 hex x509".split()
)


def names_a_method(value: str) -> bool:
    """A protocol's, an algorithm's or an encoding's name (``_METHODS``): "WPA2", "SHA-256", "OAuth2", "UTF-8", or
    one joined to a word by "-" ("2FA-geschützt", "AES-256-encrypted"), is what protects a password, not one."""

    def method(part: str) -> bool:
        return re.sub(r"[-._ ]", "", part).lower() in _METHODS

    if method(value):
        return True
    return any(
        method(value[:n]) and value[n + 1 :].replace("-", "").isalpha() for n, ch in enumerate(value) if ch == "-"
    )


# words describing a password in the other languages, long enough to pass for one (a plain word under 12 letters is
# no password anyway): "erforderlich", "obbligatoria", "criptografada"; and their shorter kin
_DESCRIBING_ABROAD = frozenset(
    # German
    "erforderlich notwendig obligatorisch falsch ungültig abgelaufen verschlüsselt gespeichert geschützt vergessen"
    " richtig korrekt sicher unsicher geändert zurückgesetzt gesperrt unbekannt identisch benutzerspezifisch"
    " individuell verschieden unterschiedlich"
    # French
    " obligatoire requis incorrect incorrecte invalide expiré expirée chiffré chiffrée stocké stockée protégé protégée"
    " oublié sécurisé sécurisée différent différente identique confidentiel confidentielle personnel personnelle"
    " facultatif optionnel modifié réinitialisé"
    # Spanish
    " obligatoria obligatorio incorrecta incorrecto inválida inválido caducada caducado cifrada cifrado encriptada"
    " encriptado guardada almacenada protegida segura distinta diferente personal opcional requerida necesaria"
    # Italian
    " obbligatoria obbligatorio sbagliata errata scaduta cifrata criptata salvata memorizzata protetta sicura diversa"
    " uguale personale opzionale richiesta necessaria"
    # Portuguese
    " obrigatória obrigatório incorreta incorreto expirada criptografada criptografado armazenada protegida"
    " diferente pessoal necessária"
    # Dutch
    " verplicht onjuist ongeldig verlopen versleuteld opgeslagen beveiligd veilig persoonlijk optioneel vereist"
    " verschillend".split()
)


def describes_a_password(value: str) -> bool:
    """A value said after a password's word in another language that is a word describing it (``_DESCRIBING_ABROAD``):
    "Das Passwort ist erforderlich", "La password è obbligatoria", "A senha é criptografada com AES-256"."""
    words = value.split()
    return bool(words) and words[0].strip(".,;:!?¡¿").lower() in _DESCRIBING_ABROAD


def question(value: str) -> bool:
    """A value that asks ("vergessen?", "¿olvidaste?", "oublié ?"): a word or two and a question mark, or an opening
    "¿": a form's label ("Passwort: vergessen?"), not a password ("Geheim123?" is one: digits in it)."""
    v = value.strip()
    return v.startswith("\u00bf") or (v.endswith(("?", "\uff1f")) and v.rstrip("?\uff1f ").replace(" ", "").isalpha())


# -- a password said in another language: "mon mot de passe est ...", "das Passwort ist ...", "密码是 ..." ----------

# The word for a password in French, German, Spanish, Italian, Portuguese and Dutch, not glued to a letter before it
# ("WLAN-Passwort" is one). Spanish "clave" alone is a key, or the crucial thing ("la clave es la constancia", "la
# clave de la tabla es user_id", "la clave es COVID-19"): a password when said so ("clave de acceso", "clave
# secreta", "clave de usuario", "clave wifi") or for what has one ("la clave del wifi", "de mi cuenta"); else it is
# a key, random-looking (``CLAVE``). Each pattern here starts with a character or a set of them, the regex engine's
# fast scan, and looks behind it for what it must not follow
_CLAVE_FOR = (
    r"(?:wi-?fi|router|m[oó]dem|red|internet|correo|e-?mail|cuenta|banco|usuario|admin\w{0,8}|servidor|tarjeta"
    r"|cajero|app|aplicaci[oó]n|celular|m[oó]vil|tel[eé]fono|computadora|ordenador|port[aá]til|pc)(?![^\W_])"
)
_LATIN_CUE = (
    r"[mpkcswMPKCSW](?<![^\W\d_].)(?i:(?<=m)ot\s+de\s+passe|(?<=p)asswort|(?<=k)ennwort|(?<=c)ontrase(?:ña|na)"
    r"|(?<=c)lave(?:\s+(?:de\s+acceso|secreta|de\s+usuario|wi-?fi)(?![^\W_])"
    r"|(?=\s+(?:del?|de\s+(?:la|mi|tu|su|nuestra))\s+" + _CLAVE_FOR + r"))"
    r"|(?<=p)arola\s+d['\u2019]ordine|(?<=s)enha|(?<=w)achtwoord)"
)
# what it is for: "du wifi", "für das WLAN", "del router", "do banco", "van de server", "per il wifi"
_LATIN_FOR = (
    r"(?:\s+(?i:de|du|des|pour|für|fur|vom|von|zum|zur|del|para|do|da|dos|das|van|voor|per|di|della|dello|dell)"
    r"(?:\s+[^\s:]{1,30}){1,4}?)?"
)
# "est", "ist", "lautet", "es", "è", "é", ... or a colon
_LATIN_IS = (
    r"(?:\s+(?i:est|était|etait|ist|lautet|war|es|era|è|e'|é|is|was)(?![^\W_])[ \t]*[:\uff1a]?|[ \t]*[:\uff1a])[ \t]*"
)
# Italian (and Portuguese) say "password" too: after its own verb only ("password is", "password:" are English's,
# read by ``secrets``' own detectors)
_ITALIAN = r"[pP](?<![^\W\d_].)(?i:(?<=p)assword)" + _LATIN_FOR + r"\s+(?i:è|e'|é|era)(?![^\W_])[ \t]*[:\uff1a]?[ \t]*"
# the value is no cue's word: "Passwort ist Passwort ist Geheim123" leaves the second cue to be read
_NOT_A_CUE = (
    r"(?!(?i:mot\s+de\s+passe|passwort|kennwort|contrase|clave|password|parola\s+d|senha|wachtwoord)(?![^\W_]))"
)
_QUOTED = r"(?:[\"\u201c\u201e\u00ab\u300c]\s?([^\"\u201c\u201d\u00bb\u300d\n]{1,100}?)\s?[\"\u201d\u201c\u00bb\u300d]|'([^'\n]{1,100})')"
# A bare value as ``secrets._SAID_VALUE`` reads it: each step a character no punctuation, or a possessive run of
# punctuation that more of the value follows; the run at its end is left out
_LATIN_BARE = (
    r"((?>(?:[^\s\"'\u201c\u201e\u00ab\u300c.,;)]|[.,;)]++(?=[^\s\"'\u201c\u201e\u00ab\u300c]))+))(?=[.,;)]*+(?:\s|$))"
)
_LATIN_VALUE = _NOT_A_CUE + r"(?:" + _QUOTED + r"|" + _LATIN_BARE + r")"  # what follows a cue and its verb
FOREIGN_PASSWORD = r"(?:" + _LATIN_CUE + _LATIN_FOR + _LATIN_IS + r"|" + _ITALIAN + r")" + _LATIN_VALUE
# Spanish "clave" alone: what it is, "es" or a colon, and the value (a key's rules: random-looking, 16 or more)
CLAVE = (
    r"[cC](?<![^\W\d_].)(?i:(?<=c)lave(?<!palabra clave)(?<!palabras clave))(?![^\W_])"
    + _LATIN_FOR
    + _LATIN_IS
    + _LATIN_VALUE
)
# Japanese and Chinese: the word, "は"/"是"/"为" or a colon, and the value in quotes or as a run of ASCII (the
# sentence goes on in its own script, with no space: "密码是Mima12345，记住")
_CJK_CUE = r"(?:パスワード|暗証番号|密码|密碼|口令)"
_CJK_IS = r"[ \t]*(?:(?:は|是|为|為)[ \t]*[:\uff1a]?|[:\uff1a])[ \t]*"
_ASCII_VALUE = r"([A-Za-z0-9!#$%&*+\-/=?@^_~]+(?:[.,;:)]+[A-Za-z0-9!#$%&*+\-/=?@^_~]+)*)"
CJK_PASSWORD = _CJK_CUE + _CJK_IS + r"(?:" + _QUOTED + r"|" + _ASCII_VALUE + r")"
FOREIGN_NEEDLES = (
    "mot de passe",
    "passwort",
    "kennwort",
    "contrase",
    "clave",
    "password",
    "parola d",
    "senha",
    "wachtwoord",
)
CJK_NEEDLES = ("パスワード", "暗証番号", "密码", "密碼", "口令")

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
_CARD_CUE = re.compile(
    r"(?i:(?<![^\W\d_])(?:cards?|cc|ccn|pan|visa|master\s?card|amex|american\s+express|discover|jcb|diners"
    r"|maestro|union\s?pay|credit|debit|payments?|pay|paid|charged?|billing|tarjeta|carte|carta|cart[ãa]o|cb"
    r"|[^\W\d_]*card(?:s|number|nummer|no|nr)?|[^\W\d_]*(?:karte|kaart)[^\W\d_]*)(?![^\W\d_])"
    + _BETWEEN
    + r"|(?:カード|卡)\w{0,4}[^\w\n]*\Z)"
)


def card_cue(before: str) -> bool:
    """Whether the text before a number (up to ``BEFORE`` characters of its line) ends with a word naming a card or
    a payment and at most three words after it."""
    return _CARD_CUE.search(before) is not None


# what a number printed as a card is (4-4-4-4) is besides, said before it: an order's, a parcel's, an invoice's or a
# ticket's number ("order number 4111 1111 1111 1111", "Sendungsnummer", "n° de commande"), then up to three words
_NOT_A_CARD = re.compile(
    r"(?i:(?<![^\W\d_])(?:orders?|tracking|invoices?|tickets?|booking|reservation|confirmation|shipment|parcel"
    r"|package|delivery|consignment|waybill|serial|sku|po|ref|reference|case|claim|rma|pedido|factura|env[ií]o"
    r"|seguimiento|commande|facture|colis|suivi|bestell\w{0,8}|rechnung\w{0,8}|sendung\w{0,8}|auftrag\w{0,8}"
    r"|ordine|fattura|spedizione|encomenda|fatura|rastreio|bestelling|factuur|zending)(?![^\W\d_])"
    + _BETWEEN
    + r"|(?:注文|订单|訂單|快递|運單|运单|追跡)\w{0,4}[^\w\n]*\Z)"
)


def printed_card_label(before: str) -> bool:
    """Whether the text before a number printed as a card's (up to ``BEFORE`` characters of its line) leaves it a
    card's: no label of another number ends it (``_NOT_A_CARD``: "order", "tracking", "invoice", "ticket"), or a word
    naming a card or a payment does ("order paid by card")."""
    return _NOT_A_CARD.search(before) is None or card_cue(before)


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


# -- password hashes: htpasswd lines, crypt(3), bcrypt, argon2 ----------------------------------------------------

_SALT = r"[./0-9A-Za-z]"
PASSWORD_HASH = (
    r"[$\x7b](?<![\w$][$\x7b])(?:"  # "$" or "{" first (a fast scan), then what it follows
    r"(?<=\$)(?:apr1|1)\$" + _SALT + r"{1,8}\$" + _SALT + r"{22}"  # MD5-crypt, Apache's apr1
    r"|(?<=\$)[56]\$(?:rounds=\d{1,9}\$)?" + _SALT + r"{1,16}\$(?:" + _SALT + r"{86}|" + _SALT + r"{43})"  # SHA-crypt
    r"|(?<=\$)2[abxy]?\$\d{2}\$" + _SALT + r"{53}"  # bcrypt
    r"|(?<=\$)y\$" + _SALT + r"{1,12}\$" + _SALT + r"{1,86}\$" + _SALT + r"{43}"  # yescrypt
    r"|(?<=\$)argon2(?:id|i|d)\$v=\d{1,3}\$m=\d{1,9},t=\d{1,4},p=\d{1,3}\$[A-Za-z0-9+/]{8,}\$[A-Za-z0-9+/]{16,}"
    r"|(?<=\x7b)(?i:ssha|sha)\}[A-Za-z0-9+/]{27,100}={0,2}"  # htpasswd's SHA-1, LDAP's salted SHA
    r")(?![./0-9A-Za-z$])"
)
HASH_NEEDLES = (
    "$1$",
    "$apr1$",
    "$5$",
    "$6$",
    "$2$",
    "$2a$",
    "$2b$",
    "$2x$",
    "$2y$",
    "$y$",
    "$argon2",
    "{sha}",
    "{ssha}",
)


# -- a random base64 string: a key said after its name ("the signing key: /q2bAfRPL7QQ...Mgg=") ------------------

_BASE64 = re.compile(r"[A-Za-z0-9+/]{20,}={0,2}")
_BASE64_ENTROPY = 4.5  # bits a character: detect-secrets' limit for base64 strings (a path's words stay under it)


def random_base64(value: str) -> bool:
    """A random string of base64 (20 characters or more, upper and lower case and digits, above ``_BASE64_ENTROPY``),
    though it starts with "/" as a path does: "/q2bAfRPL7QQLX++5ptOUNPXKTPUhPl4nHyukpz0Mgg=" is a key, not a path."""
    if _BASE64.fullmatch(value) is None or value.isalnum():
        return False
    if not (any(c.isupper() for c in value) and any(c.islower() for c in value) and any(c.isdigit() for c in value)):
        return False
    counts = Counter(value)
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values()) > _BASE64_ENTROPY
