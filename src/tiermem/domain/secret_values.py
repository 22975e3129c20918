"""What a value a detector finds must be to be a secret: no reference or placeholder (``$VAR``, ``<key>``,
``os.environ[...]``), no variable's name, no constant's, no plain word; a password said in a sentence no word made of
two nor a method's name; a key said in words random-looking. ``secret_scan`` and the detector tables apply them."""

from __future__ import annotations

import base64
import re

from . import secret_shapes as shapes

_CONSTANT = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")


def letters_and_digits(s: str) -> bool:
    return any(ch.isdigit() for ch in s) and any(ch.isalpha() for ch in s)


# A value that stands for a secret kept elsewhere or in a variable: a reference (``$VAR``, ``${VAR}``, ``os.environ``,
# a shell's command substitution, `` `cat ~/.pw` `` (a command: a space or ``$(`` inside its backticks; a code span's
# `` `Xk9vQ2mPz7a` `` is read inside, ``secret_scan._trim``), a secret manager's: 1Password's ``op://``, Vault's ``vault:``, AWS's
# ARNs, Azure Key Vault's ``@Microsoft.KeyVault(``), a placeholder (``<key>``, ``YOUR_KEY``, ``OPENAI_KEY_HERE``), a
# call, a subscript or an attribute access (``genai.Client(``, ``request.headers[``, ``settings.api_key``)
_PLACEHOLDER = re.compile(
    r"^(?:[${<\[(/~]|`[^`]*(?:\s|\$\()|\w*_here$"
    r"|%\(|%\w+%$|%[a-z]$|\?+$|\./|\*+$|x+$|\.{3}|your|<|changeme$|example|placeholder|redacted|none$"
    r"|null$|true$|false$|undefined$|os\.environ|process\.env|getenv|env\(|secret$|password$|"
    r"\*\*\*|test$|dummy|xxx|[\w.]+\(|[a-z_]\w*(?:\.[a-z_]\w*)+[)\]}]*$"
    r"|(?:[a-z_]+|[a-z_]\w*(?:\.[a-z_]\w*)+)\["
    r"|op://|vault:|arn:aws:(?:secretsmanager|ssm):|@Microsoft\.KeyVault\()",
    re.IGNORECASE,
)
# what stands for a password in examples and docs ("user:pass@host", "-u user:token")
_PASSWORD_WORDS = frozenset(
    ("pass", "passwd", "pwd", "pw", "pword", "passphrase", "mypass", "mypassword", "secret", "token", "key", "apikey")
    + ("api_key", "user", "username", "foo", "bar", "baz", "foobar")
)


def not_placeholder(value: str) -> bool:
    """A value that is a reference (``$VAR``, ``${VAR}``, ``os.environ[...]``), a placeholder (``<your key>``,
    ``xxx``, ``...``) or a plain word is not a secret; anything else at least 4 characters long is."""
    v = value.strip()
    if len(v) < 4 or _PLACEHOLDER.match(v) or "[redacted:" in v or "..." in v or "\u2026" in v:
        return False
    if v.replace(".", "").replace("-", "").replace("_", "").isdigit():  # a number: max_tokens = 100000
        return False
    return not (v.isalpha() and len(v) < 12)  # a plain word: "the secret: surprise" (but "hunter22" is caught)


def not_placeholder_nor_question(value: str) -> bool:
    """A value (``not_placeholder``) that is no question: "Password: forgot?" is a form's label."""
    return not_placeholder(value) and not shapes.question(value)


# A variable's name as code writes it: snake_case or camelCase starting with a lower-case letter (``api_key``,
# ``apiKey``, ``_api_key``), or a constant's in capitals (``LETTA_API_KEY``); a letter last (``Password1``,
# ``MyApiKey2024``, ``PROD_DB_2024``: a password's digits tail, no name)
_VARIABLE = re.compile(r"_*(?:[a-z][A-Za-z0-9_]*|[A-Z][A-Z0-9_]*)(?<=[A-Za-z])")
_NAME_PARTS = re.compile(r"[A-Z]{2,}(?![a-z])|[A-Z]?[a-z]+")
_SECRET_WORDS = frozenset(
    ("key", "keys", "secret", "secrets", "token", "tokens", "pass", "password", "passwd", "passphrase", "pwd")
    + ("credential", "credentials", "auth", "apikey")
)


def names_a_secret(value: str) -> bool:
    """A variable's or an environment variable's name (``_VARIABLE``) that says it holds a secret (``api_key``,
    ``consumer_secret``, ``apiKey``, ``LETTA_API_KEY``, ``GITHUB_TOKEN``): code or a reference that names one, when it
    is not in quotes (``secret_scan._spans``: a quoted literal is a value). Each of its words has two letters or more (a random
    string of letters does not part so); ``ABCDEFGH_IJKLMNOP`` names nothing."""
    if _VARIABLE.fullmatch(value) is None:
        return False
    parts = _NAME_PARTS.findall(value)
    return all(len(p) >= 2 for p in parts) and any(p.lower() in _SECRET_WORDS for p in parts)


def not_constant_name(value: str) -> bool:
    """A value (``not_placeholder``) that is not a constant's name in capitals (``NO_AUTH``, ``SCRAM_SHA_256``)."""
    return not_placeholder(value) and _CONSTANT.fullmatch(value.strip()) is None


def not_constant(value: str) -> bool:
    """A value (``not_placeholder``) that is not a constant's name (``NO_AUTH``, ``USER_PASS``, ``ADMIN_PW_2``):
    capitals joined by "_", ending with a letter or naming a secret; ``PROD_DB_2024`` (a digits tail, no secret's
    word) is a password in capitals."""
    v = value.strip()
    if not not_placeholder(v):
        return False
    if _CONSTANT.fullmatch(v) is None:
        return True
    return not (v[-1].isalpha() or any(p.lower() in _CONSTANT_WORDS for p in v.split("_")))


_CONSTANT_WORDS = frozenset(("pass", "pw", "pwd", "auth", "key", "token", "secret", "password", "passwd"))


def quoted(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` is a string literal: in a pair of quotes (a code span's backticks are code)."""
    return 0 < start and end < len(text) and text[start - 1] == text[end] and text[end] in "\"'"


def looks_random(value: str) -> bool:
    """A value shaped like a secret rather than like words, a name or a URL: one token of letters and digits."""
    return letters_and_digits(value) and not any(ch.isspace() for ch in value) and "://" not in value


def mixed_case_and_digits(s: str) -> bool:
    """A random key's shape: upper and lower case letters and digits (a git hash, a word run together: not)."""
    return any(ch.isdigit() for ch in s) and any(ch.isupper() for ch in s) and any(ch.islower() for ch in s)


# A word made of words, as prose writes it ("case-sensitive", "space-separated", "up-to-date"): no password (a
# passphrase of four, "correct-horse-battery-staple", is one). Capitalised, as a sentence starts, it is one only with a
# word joining its two ("Up-to-date", "Salt-and-pepper"), a describing word second ("Unicode-aware",
# "Case-sensitive", "Machine-generated", "Time-based", "Two-factor", "Non-expiring"), or a word first that makes a
# describing compound ("One-time", "Built-in", "Self-service", "Top-secret", "Military-grade"): "Summer-breeze",
# "Sommer-regen", "Verano-azul", "Soleil-bleu" are passwords
_COMPOUND_WORD = re.compile(
    r"[a-z]+-(?:(?:to|of|a|an|the|and|or|in|on|for|by|at)-)?[a-z]+"
    r"|[A-Z][a-z]*-(?:(?:to|of|a|an|the|and|or|in|on|for|by|at)-[a-z]+"
    r"|(?:aware|sensitive|insensitive|agnostic|based|only|safe|proof|protected|specific|wide|free|friendly"
    r"|compatible|compliant|dependent|independent|driven|enabled|encoded|readable|like|style|level|side"
    r"|factor|platform|source|service|entropy|text|secret|trivial|random|grade|use|user|bound|known|empty"
    r"|lowercase|uppercase|reversible|secure|heavy|ish|time|strength|length|case"
    r"|[a-z]{2,}ed|[a-z]{3,}ing))"
    r"|(?:One|Two|Three|Non|Never|Well|Built|Multi|Cross|Open|Self|Low|High|Plain|Top|Semi|Single|Per|Device|Time"
    r"|Hardware|Military|Bank|Enterprise|Industry|All|Ultra|Auto|Ever|Pre|Org|Short|Long|Half|Fully|Anti|Post"
    r"|Super|Extra|Double|Triple)-[a-z]+"
)


def said_password(value: str) -> bool:
    """A password said in a sentence ("the password is ..."): not a placeholder, not a plain word ("is required",
    "was wrong") nor one made of two ("case-sensitive"); digits alone are one (a passcode) from 4 on."""
    v = value.strip()
    if v.isdigit():
        return len(v) >= 4
    return (
        given_password(v)
        and not_placeholder(v)
        and _COMPOUND_WORD.fullmatch(v) is None
        and not shapes.names_a_method(v)  # "the password is SHA256 hashed", "Le mot de passe est WPA2."
    )


def said_foreign_password(value: str) -> bool:
    """A password said in another language (``said_password``) that is no question ("Passwort: vergessen?" is a
    form's label) nor a word describing one ("Das Passwort ist erforderlich", "A senha é criptografada")."""
    return said_password(value) and not shapes.question(value) and not shapes.describes_a_password(value)


# A part of a value that is a lower-case word ("base64-encoded", "ERC20-compatible", "live_mode"): prose, not a key
_WORD_PART = re.compile(r"(?:^|[-_.])[a-z]{4,}(?:[-_.]|$)")


def said_key(value: str) -> bool:
    """A key or token said in a sentence ("the API key is ..."): random-looking (letters and digits, 16 or more
    characters, no part of it a lower-case word), not a placeholder."""
    v = value.strip()
    placeholder = not not_placeholder(v) and not shapes.random_base64(v)  # "/q2bAf...": base64, not a path
    return len(v) >= 16 and letters_and_digits(v) and not placeholder and _WORD_PART.search(v) is None


def basic_credentials(value: str) -> bool:
    """An HTTP Basic header's value: base64 of "user:password", its password a credential (``given_password``)."""
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True).decode()
    except ValueError:  # not base64, or not text
        return False
    user, colon, password = decoded.partition(":")
    return bool(colon) and decoded.isprintable() and given_password(password)


def given_password(value: str) -> bool:
    """A password given as one (a URL's userinfo, a command's ``-p``) is a credential whatever its length or shape
    ("rootpw", "guest", "1234"), but for a reference or a placeholder (``$PASS``, ``<password>``, ``pass``, ``***``)."""
    v = value.strip()
    if not v or v.lower() in _PASSWORD_WORDS or _PLACEHOLDER.match(v):
        return False
    return "[redacted:" not in v and "..." not in v and "\u2026" not in v
