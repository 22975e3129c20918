"""Credential shapes that are not tokens: a passphrase of several words said after "the password is", a password
said in another language, payment card and US social security numbers, and password hashes (``htpasswd`` lines,
``crypt(3)`` and bcrypt). Each is a pattern and a check here; ``secrets`` runs them with its other detectors.

Every pattern takes each step one way only (disjoint character classes, bounded repeats): a run of the cue, of
digits or of punctuation is read in one pass (``tests/test_secrets_more.py`` reads 200 KB of each).
"""

from __future__ import annotations

import re

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
).split()
# the cue's verb is followed by a predicate, not a passphrase, when its first word is a participle or an adverb
_PREDICATE = re.compile(r"\w{2,}(?:ed|ing|ly)$|(?:given|taken|known|gone|kept|left|sent|told|made|put|found)$", re.I)
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


def said_passphrase(value: str) -> bool:
    """A passphrase said after "the password is": two to eight words, none of them one that says something about a
    password (``_NOT_PASSPHRASE``), the first no participle or adverb ("is written down somewhere", "is changed
    weekly")."""
    words = value.split()
    return (
        PASSPHRASE_WORDS[0] <= len(words) <= PASSPHRASE_WORDS[1]
        and _PREDICATE.match(words[0]) is None
        and not any(w.lower() in _NOT_PASSPHRASE_WORDS for w in words)
    )


# -- a password said in another language: "mon mot de passe est ...", "das Passwort ist ...", "密码是 ..." ----------

# The word for a password in French, German, Spanish, Italian, Portuguese and Dutch, not glued to a letter before it
# ("WLAN-Passwort" is one); Spanish "palabra clave" is a keyword. Each pattern here starts with a character or a set
# of them, the regex engine's fast scan, and looks behind it for what it must not follow
_LATIN_CUE = (
    r"[mpkcswMPKCSW](?<![^\W\d_].)(?i:(?<=m)ot\s+de\s+passe|(?<=p)asswort|(?<=k)ennwort|(?<=c)ontrase(?:ña|na)"
    r"|(?<=c)lave(?<!palabra clave)(?<!palabras clave)(?:\s+de\s+acceso)?|(?<=p)arola\s+d['\u2019]ordine"
    r"|(?<=s)enha|(?<=w)achtwoord)"
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
FOREIGN_PASSWORD = (
    r"(?:"
    + _LATIN_CUE
    + _LATIN_FOR
    + _LATIN_IS
    + r"|"
    + _ITALIAN
    + r")"
    + _NOT_A_CUE
    + r"(?:"
    + _QUOTED
    + r"|"
    + _LATIN_BARE
    + r")"
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
# a phone number)
PAYMENT_CARD = (
    r"\d(?<![\w+\-.,/]\d)(?:\d{12,18}|\d{3}([ -])\d{4}\1\d{4}\1\d{4}(?:\1\d{1,3})?|\d{3}([ -])\d{6}\2\d{4,5})"
    r"(?![\w\-]|[.,/]\d)"
)
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


# NNN-NN-NNNN standing alone; after "SSN" or "social security (number)" also with spaces or run together
SSN = r"\d(?<![\w\-.,/+]\d)\d{2}-\d{2}-\d{4}(?![\w\-]|[.,/]\d)"
SAID_SSN = (
    r"[sS](?<![^\W\d_].)(?i:(?<=s)sn|(?<=s)ocial\s+security(?:\s+(?:number|no\.?|#))?)(?:\s+(?i:is|was))?\s*[:#]?\s*"
    r"(\d{3}([ -]?)\d{2}\2\d{4})(?![\w\-]|[.,/]\d)"
)
SSN_NEEDLES = ("ssn", "social security")
# numbers the Social Security Administration published (an advertisement's, a wallet's sample): examples, not one's
_SSN_EXAMPLES = frozenset(("078051120", "123456789", "219099999"))


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
