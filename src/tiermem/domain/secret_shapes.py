"""Credential shapes that are not tokens: a passphrase of several words said after "the password is", a password
said in another language, and password hashes (``htpasswd`` lines, ``crypt(3)`` and bcrypt); payment card and US
social security numbers are ``secret_numbers``'s. Each is a pattern and a check here; ``secrets`` runs them with its
other detectors.

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
# A run starting with a word shaped as a participle or an adverb ("-ed", "-ly": "invalidated", "instantly"), or an
# irregular participle ("overwritten"), that goes on with words telling where or when a system does it is a
# description too ("is invalidated server side", "is propagated cluster wide", "is compared byte wise", "is
# overwritten immediately afterwards"). Not "-en" nor words any sentence may end with ("forever", "later", "online"):
# "golden sunset forever", "kitchen garden online", "butterfly kisses forever" are passphrases
_DONE_SHAPE = re.compile(r"\w{3,}(?<![eE])(?:ed|ED)$|\w{3,}(?:ly|LY)$")
_IRREGULAR_DONE = frozenset(
    "overwritten rewritten written hidden forgotten stolen broken chosen taken given driven proven shown thrown"
    " withdrawn overridden".split()
)
# where or when, as a system does it: "server side", "cluster wide", "byte wise" (a word before "side", "wide" or
# "wise"), or one of these
_WHERE_OR_WHEN = frozenset(
    "immediately afterwards afterward beforehand instantly automatically upstream downstream inline serverside"
    " clientside".split()
)
_SIDE_WIDE_WISE = frozenset("side sides wide wise".split())
# A pointer to a password ("the password is ask Dave", "is: check Slack", "see Bitwarden"): one of these verbs, then
# only a name (a capitalised word: a person, a tool, a place) or the place it is kept ("check vault"), one or two
# words. "find nemo 2003", "look both ways", "get lucky tonight", "use tiger lily" are passphrases. A verb of a
# thing to take ("use", "get", "grab", "find", "read", "look") takes one name ("use Bitwarden") or a name and the
# place ("use Bitwarden vault"): two names after it are a passphrase ("use Tiger Lily"); a person's two names
# follow a verb of asking ("ask Dave Smith")
_POINTER = frozenset(
    "ask check see use look find contact call email ping message dm consult refer request get grab read".split()
)
_THING_POINTER = frozenset("use look find get grab read".split())
_KEPT_IN = frozenset(
    "vault vaults manager wiki doc docs email slack bitwarden lastpass keychain keepass team admin admins it"
    " confluence notion sharepoint".split()
)


def _pointer(words: list[str]) -> bool:
    """A verb telling to go and ask for a password, then a name or a place it is kept: "ask Dave", "check Slack",
    "use Bitwarden" (a thing's verb: one name, or a name and a place, ``_THING_POINTER``)."""
    rest = words[1:]
    verb = words[0].lower()
    return (
        verb in _POINTER
        and 1 <= len(rest) <= 2
        and all((w[0].isupper() and w.isalpha()) or w.lower() in _KEPT_IN for w in rest)
        and (verb not in _THING_POINTER or len(rest) == 1 or rest[-1].lower() in _KEPT_IN)
    )


def _where_or_when(lowered: list[str]) -> bool:
    """Words telling where or when a system does something to a password: "server side", "immediately"."""
    return any(w in _WHERE_OR_WHEN or (w in _SIDE_WIDE_WISE and n > 0) for n, w in enumerate(lowered))


def said_passphrase(value: str) -> bool:
    """A passphrase said after "the password is": two to eight words, none of them one that says something about a
    password (``_NOT_PASSPHRASE``), the first no gerund nor irregular participle ("is kept offline"), no predicate
    said of a password (``_SAID_OF_A_PASSWORD``: "is changed weekly", "is stored encrypted"), no pointer to one
    ("is ask Dave": a verb of ``_POINTER`` and a name), no participle or adverb first with words saying where or when
    a system does it after it ("is invalidated server side", ``_WHERE_OR_WHEN``), and no two words one of them a participle or an adverb ("is
    Bitwarden managed")."""
    words = value.split()
    lowered = [w.lower() for w in words]
    return (
        PASSPHRASE_WORDS[0] <= len(words) <= PASSPHRASE_WORDS[1]
        and _PREDICATE.match(words[0]) is None
        and lowered[0] not in _SAID_OF_A_PASSWORD
        and not _pointer(words)
        and not ((_DONE_SHAPE.match(words[0]) or lowered[0] in _IRREGULAR_DONE) and _where_or_when(lowered[1:]))
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


_LONGEST_METHOD = max(map(len, _METHODS))  # written with a separator between each of its characters at most


def names_a_method(value: str) -> bool:
    """A protocol's, an algorithm's or an encoding's name (``_METHODS``): "WPA2", "SHA-256", "OAuth2", "UTF-8", or
    one joined to a word by "-" ("2FA-geschützt", "AES-256-encrypted"), is what protects a password, not one."""

    def method(part: str) -> bool:
        return re.sub(r"[-._ ]", "", part).lower() in _METHODS

    if method(value):
        return True
    # a method's name is short: only the "-" within its length of the start are tried (each a look at the rest):
    # linear in the value's length ("Abc-Abc-Abc-..." of 120,000 characters)
    head = value[: _LONGEST_METHOD * 2]
    return any(
        method(value[:n]) and value[n + 1 :].replace("-", "").isalpha() for n, ch in enumerate(head) if ch == "-"
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
# A bare value as ``secret_said._SAID_VALUE`` reads it: each step a character no punctuation, or a possessive run of
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
