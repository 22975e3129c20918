"""Credentials said in a sentence, as detectors: "the password is ...", "I set my password to ...", a passphrase of
plain words, a password said in another language (``secret_shapes``), "use ... as the password", "Password:" with the
password alone on the next line, "my bank PIN is 4821", "the API key is ..." (a GPG key's id said as one aside).
Each a pattern with its kind; ``secret_scan`` runs them in their order (their rank)."""

from __future__ import annotations

import re

from . import secret_shapes as shapes
from .secret_detector import Detector
from .secret_values import said_foreign_password, said_key, said_password

# A password said in a sentence: the word, what it is for ("for the old staging database server"), "is" or "was",
# and the value: quoted (with spaces), or up to the next space (a sentence's closing punctuation aside). The bare
# value is read in one pass: each step takes a character that is no punctuation, or a whole run of punctuation
# (possessive) that more of the value follows; the run at its end is left to the look-ahead. No step can be taken two
# ways, and the group is atomic: a run of punctuation is never rescanned (a lazy value re-read the rest of the run at
# each of its characters: quadratic on "the password is a" and 20,000 dots).
_PASSWORD_WORD = r"(?<![A-Za-z])(?i:pass(?:word|wd|phrase|code)|pwd)"
_FOR_WHAT = r"(?:\s+(?i:for|to|of|on|at)(?:\s+\S{1,30}){1,6}?)?"
_IS = r"\s+(?i:is|was)\s*:?\s*"
_IS_OR_COLON = r"(?:" + _IS + r"|[ \t]*:[ \t]*)"  # "the API key is ...", "here's my api key: ..."
# a key's id, not the key: 16 hex digits (a GPG key's long id, an id a KMS shows) or 40 (a fingerprint), said with a
# cue that it is one: "GPG"/"PGP" before the key's name ("My GPG signing key: 3aa5c34371567bd2"), "key id",
# "fingerprint", "GPG", "PGP" or "OpenPGP" just after it ("... (KMS key id)", "... on keys.openpgp.org"), or, after a
# signing key's name, written as GPG prints one: "0x" first or upper case ("Signing key: 3AA5C34371567BD2"). Without
# one, hex after a key's name is the key ("the webhook signing key is 8f14e45f...", "the encryption key is
# 3aa5c34371567bd2"); a key of 128 bits has 32 digits or more
_ANY_KEY_ID = r"(?:0x)?(?:[0-9A-Fa-f]{16}|[0-9A-Fa-f]{40})(?![\w/+=-])"
_ID_CUE_AFTER = r"(?=[^\n]{0,40}?(?i:key[ _-]?id|fingerprint|gpg|pgp)(?![^\W_]))"
_KEY_ID = (
    r"(?:(?-i:(?:0x[0-9A-Fa-f]{16}|0x[0-9A-Fa-f]{40}|[0-9A-F]{16}|[0-9A-F]{40})(?![\w/+=-]))|(?:"
    + _ANY_KEY_ID
    + _ID_CUE_AFTER
    + r"))"
)
_SAID_VALUE = (
    r"(?:[\"\u201c]([^\"\u201d\n]{1,100})[\"\u201d]|'([^'\n]{1,100})'"
    r"|((?>(?:[^\s\"'\u201c.,;:)]|[.,;:)]++(?=[^\s\"'\u201c]))+))(?=[.,;:)]*+(?:\s|$)))"
)


def passwords() -> list[Detector]:
    """A password or a passphrase said after its word, in English and in other languages."""
    c = re.compile
    d = Detector

    return [
        d(  # "the password is correct-horse-battery-staple", "my github password was Sup3rS3cret!"
            "password",
            c(_PASSWORD_WORD + _FOR_WHAT + _IS + _SAID_VALUE),
            ("pass", "pwd"),
            group="value",
            check=said_password,
            per_line=True,
        ),
        d(  # "I set my password to Xk9vQ2mPz7!", "changed the root password to ..."
            "password",
            c(
                r"(?<![A-Za-z])(?i:set|setting|changed?|changing|reset|resetting|updated?|updating)"
                r"\s+(?:\S{1,30}\s+){0,3}?" + _PASSWORD_WORD + r"\s+(?i:to)\s+" + _SAID_VALUE
            ),
            ("pass", "pwd"),
            group="value",
            check=said_password,
            per_line=True,
        ),
        d(  # "my passphrase is correct horse battery staple": plain words up to the sentence's or the line's end
            "password",
            c(_PASSWORD_WORD + _FOR_WHAT + r"\s+(?i:is|was)(?:\s+|:[ \t]*)" + shapes.PASSPHRASE),  # "is:" too
            ("pass", "pwd"),
            group=1,
            check=shapes.said_passphrase,
            per_line=True,
        ),
        d(  # "mon mot de passe est ...", "das Passwort ist ...", "la contraseña es ...", "la password è ..."
            "password",
            c(shapes.FOREIGN_PASSWORD),
            shapes.FOREIGN_NEEDLES,
            group="value",
            check=said_foreign_password,
            names=True,
        ),
        d(  # "la clave es ...": Spanish's word for a key, or the crucial thing: a key's rules
            "secret",
            c(shapes.CLAVE),
            ("clave",),
            group="value",
            check=said_key,
            specific=False,
        ),
        d("password", c(shapes.CJK_PASSWORD), shapes.CJK_NEEDLES, group="value", check=said_foreign_password),
    ]


def labelled() -> list[Detector]:
    """A password given as one ("use ... as the password", "Password:" and the next line), a PIN, a key or a token
    said after its name."""
    c = re.compile
    d = Detector

    return [
        d(  # "use Xk9vQ2mPz7! as the password"
            "password",
            c(
                r"(?<![A-Za-z])(?i:use)\s+(?:[\"\u201c]([^\"\u201d\n]{1,100})[\"\u201d]|'([^'\n]{1,100})'|([^\s\"'\u201c]+))"
                r"\s+(?i:as)\s+(?:(?i:the|my|your|our|a|an)\s+)?(?:\S{1,30}\s+)?" + _PASSWORD_WORD + r"(?![A-Za-z])"
            ),
            ("pass", "pwd"),
            group="value",
            check=said_password,
            per_line=True,
        ),
        d(  # "Password:" on a line, the password alone on the next
            "password",
            c(
                r"(?i:password(?<!\S.{8})|passwd(?<!\S.{6})|passphrase(?<!\S.{10})|passcode(?<!\S.{8})|pwd(?<!\S.{3}))"
                r"[ \t]*:[ \t]*\r?\n[ \t]*(?:\"([^\"\n]{1,100})\"|'([^'\n]{1,100})'|([^\s\"']+))[ \t]*(?=\r?\n|\Z)"
            ),  # the word starts the line or follows a space, and leads the regex (a position-by-position start is slow)
            ("pass", "pwd"),
            group="value",
            check=lambda v: "://" not in v and said_password(v),  # "reset your password:\nhttps://..."
            probe=c(r":[ \t]*\r?\n"),
        ),
        d(  # "my bank PIN is 4821", "the pin code for the gate was 190872"
            "PIN",
            c(
                r"(?i:pin)(?<![A-Za-z]...)(?:\s+(?i:code|number))?"
                + _FOR_WHAT
                + _IS
                + r"[\"'\u201c]?(\d{4,12})(?!\d)(?![\w/.:-]\w)"
            ),
            ("pin ",),
            group=1,
        ),
        d(  # "the API key is 3f2a...", "my token is ...", "the client secret was ...": a random-looking value
            "secret",
            c(
                r"(?<![A-Za-z])(?i:(?:api|access|secret|private|auth|client|app|master)[ _-]?key"
                r"|(?:gpg|pgp)\s+(?:signing|encryption)[ _-]?key(?!" + _FOR_WHAT + _IS_OR_COLON + _ANY_KEY_ID + r")"
                r"|(?<!gpg )(?<!pgp )signing[ _-]?key(?!" + _FOR_WHAT + _IS_OR_COLON + _KEY_ID + r")"
                r"|(?<!gpg )(?<!pgp )encryption[ _-]?key(?!"
                + _FOR_WHAT
                + _IS_OR_COLON
                + _ANY_KEY_ID
                + _ID_CUE_AFTER
                + r")"
                r"|(?:(?:access|auth|api|bearer|refresh|session|personal\s+access)\s+)?token"
                r"|(?:(?:client|api|app|webhook)\s+)?secret)" + _FOR_WHAT + _IS_OR_COLON + _SAID_VALUE
            ),
            ("key", "token", "secret"),
            group="value",
            check=said_key,
            specific=False,
            per_line=True,
        ),
    ]
