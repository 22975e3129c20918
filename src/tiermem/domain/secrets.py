"""Credentials in text: found, redacted, or refused, so memory never becomes a second copy of a secret.

``find(text)`` returns each credential's exact character span and a kind a person understands ("AWS access key").
``redact(text)`` replaces each span with ``[redacted: KIND]``. ``refuse(text, where)`` raises ``SecretError``
naming the kind and where it is (line, characters), never the secret itself.

The detector is the maintained PyPI ``detect-secrets``: its plugins run in process on the text (no network, no baseline
files, no verification; configured explicitly below, plugin by plugin), plus the well-known formats it lacks (Anthropic
and current OpenAI keys, fine-grained GitHub tokens, Google API keys and OAuth access and refresh tokens, PEM and PGP
private key blocks, AWS secret keys outside quotes, ``.env``-style assignments, passwords on command lines and in
``.netrc`` entries, Basic and bearer tokens, credentials said in a sentence, and the shapes that are no tokens in
``secret_shapes``: passphrases of several words, passwords said in other languages, payment card and social security
numbers, password hashes); a few of its own are replaced (JWTs, passwords in URLs). Vendor keys are found glued to the
text before them where their prefix is distinctive, with invisible characters inside, and in pieces (``secret_joins``).
Its high-entropy plugins are noisy on prose and code: only the base64 one is used, on quoted strings of 20+ characters
with letters and digits above its entropy limit (the hex one would flag quoted git SHAs and digests; Subresource
Integrity digests are left alone). Its IP-address plugin is left out (an address is not a credential), and so are AWS's
documentation's example keys. A value given to a secret's name that names one instead (a variable or an environment
variable's name outside quotes, a call, a subscript, a shell's command, a secret manager's reference) is no secret, and
a span never takes the code's punctuation after a bare value. False positives are measured on LoCoMo's turns (``python
-m bench secrets``).

Pure and fast: nothing is imported or compiled until the first call (``_detectors``, cached); a typical prompt
takes well under a millisecond, 100k characters a few milliseconds (a cheap prefilter skips most detectors).

Why this module is long: most of it is the detector table: detect-secrets' plugins configured one by one and the
credential formats it lacks, each a pattern with its kind; ``find``, ``redact`` and ``refuse`` over them are short.
"""

from __future__ import annotations

import base64
import functools
import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..base.errors import SecretError
from . import secret_joins as joins
from . import secret_numbers as numbers
from . import secret_shapes as shapes


@dataclass(frozen=True)
class Finding:
    kind: str  # what a person calls it: "AWS access key", "password in a URL"
    start: int  # the secret's span in the text: text[start:end]
    end: int

    def where(self, text: str) -> str:
        """Line and characters of the span in ``text`` (1-based), e.g. "line 3, characters 8-47"."""
        line = text.count("\n", 0, self.start) + 1
        column = self.start - (text.rfind("\n", 0, self.start) + 1) + 1
        return f"line {line}, characters {column}-{column + self.end - self.start - 1}"


@dataclass(frozen=True)
class Redacted:
    text: str  # the text with each finding replaced by its marker
    findings: list[Finding]  # spans in the original text


def marker(kind: str) -> str:
    return f"[redacted: {kind}]"


@dataclass(frozen=True)
class _Detector:
    kind: str
    pattern: re.Pattern[str]
    needles: tuple[str, ...]  # lower-case; text holding none of them is skipped (a str search, much cheaper)
    group: int | str = 0  # the group holding the secret (0: the whole match)
    check: Callable[[str], bool] | None = None  # a further test of the secret (a JWT decodes, entropy, ...)
    specific: bool = True  # a format of its own; a generic one (keyword, entropy) loses a tie on kind
    per_line: bool = False  # run on the lines holding a needle only (assignment patterns: slow on long prose)
    probe: re.Pattern[str] | None = None  # matches inside every match of ``pattern``: text it misses is skipped
    min_chars: int = 4  # a shorter secret is not one (but a password given as one: its own check decides)
    name_group: int = 0  # the group of the keyword in the name a value is given to (``_names_no_secret``), 0: none
    names: bool = False  # a bare value (not in quotes) that names a secret is code or a reference (``_names_a_secret``)
    lines: bool = False  # its secret spans lines (a key block); else, in JSON text, it ends at an escaped "\n"
    # a test of the text before the secret on its line (up to ``numbers.BEFORE`` characters): a cue it needs ("card"),
    # or a label it must not follow ("ticket", "tel")
    before: Callable[[str], bool] | None = None
    # a test of the text before it and after it on its line (up to ``numbers.BEFORE`` and ``numbers.AFTER``)
    around: Callable[[str, str], bool] | None = None


# -- detect-secrets: its plugins, configured explicitly ---------------------------------------------------------

# detect-secrets' secret_type -> the kind we report
_KINDS = {
    "AWS Access Key": "AWS access key",
    "Artifactory Credentials": "Artifactory token",
    "Azure Storage Account access key": "Azure storage key",
    "Cloudant Credentials": "Cloudant credentials",
    "Discord Bot Token": "Discord bot token",
    "GitHub Token": "GitHub token",
    "GitLab Token": "GitLab token",
    "IBM Cloud IAM Key": "IBM Cloud IAM key",
    "IBM COS HMAC Credentials": "IBM COS HMAC secret",
    "JSON Web Token": "JSON web token",
    "Mailchimp Access Key": "Mailchimp key",
    "NPM tokens": "npm token",
    "OpenAI Token": "OpenAI API key",
    "PyPI Token": "PyPI token",
    "SendGrid API Key": "SendGrid API key",
    "Slack Token": "Slack token",
    "SoftLayer Credentials": "SoftLayer key",
    "Square OAuth Secret": "Square OAuth secret",
    "Stripe Access Key": "Stripe key",
    "Telegram Bot Token": "Telegram bot token",
    "Twilio API Key": "Twilio API key",
    "Secret Keyword": "secret",
    "Base64 High Entropy String": "high-entropy secret",
}
_ENTROPY_LIMIT = 4.5  # detect-secrets' default for base64 strings
_ENTROPY_MIN_CHARS = 20
# A digest of public content, not a secret: Subresource Integrity's ``sha512-<base64>`` (npm's package-lock.json
# ``"integrity"``, a ``<script integrity=...>``)
_INTEGRITY = re.compile(r"sha(?:1|256|384|512)-[A-Za-z0-9+/]+={0,2}$")


def _plugin_detectors() -> list[_Detector]:
    """detect-secrets' regex plugins, each pattern run with ``finditer`` for exact spans (its ``analyze_string``
    yields values, not positions), its keyword plugin's quoted-assignment patterns, and its base64 entropy plugin."""
    from detect_secrets.plugins import (
        artifactory,
        aws,
        azure_storage_key,
        cloudant,
        discord,
        github_token,
        gitlab_token,
        high_entropy_strings,
        ibm_cloud_iam,
        ibm_cos_hmac,
        jwt,
        keyword,
        mailchimp,
        npm,
        openai,
        pypi_token,
        sendgrid,
        slack,
        softlayer,
        square_oauth,
        stripe,
        telegram_token,
        twilio,
    )

    plugins: list[Any] = [
        aws.AWSKeyDetector,
        artifactory.ArtifactoryDetector,
        azure_storage_key.AzureStorageKeyDetector,
        cloudant.CloudantDetector,
        discord.DiscordBotTokenDetector,
        github_token.GitHubTokenDetector,
        gitlab_token.GitLabTokenDetector,
        ibm_cloud_iam.IbmCloudIamDetector,
        ibm_cos_hmac.IbmCosHmacDetector,
        mailchimp.MailchimpDetector,
        npm.NpmDetector,
        openai.OpenAIDetector,
        pypi_token.PypiTokenDetector,
        sendgrid.SendGridDetector,
        slack.SlackDetector,
        softlayer.SoftlayerDetector,
        square_oauth.SquareOAuthDetector,
        stripe.StripeDetector,
        telegram_token.TelegramBotTokenDetector,
        twilio.TwilioKeyDetector,
    ]  # left out: private_key (header lines only: ours takes the whole block), ip_public (not a credential),
    # basic_auth (ours sees the scheme and the user too: anonymous FTP's public convention), jwt (its pattern ends
    # lazily, stopping before the signature: ours takes every segment, with its plugin's validity test)
    out: list[_Detector] = []
    for plugin in plugins:
        kind = _KINDS[plugin.secret_type]
        for n, pattern in enumerate(plugin.denylist):
            needles, per_line = _PLUGIN_NEEDLES.get(plugin.__name__, ((), False))
            if isinstance(needles, list):  # one tuple per pattern
                needles = needles[n]
            probe = _probe(pattern)
            if plugin.__name__ in _BOUNDED:
                pattern = re.compile(rf"(?<![0-9A-Za-z_-])(?:{pattern.pattern})(?![0-9A-Za-z_-])", pattern.flags)
            out.append(
                _Detector(
                    kind,
                    pattern,
                    needles,
                    group=_secret_group(plugin.__name__, pattern),
                    per_line=per_line,
                    probe=probe,
                )
            )
    is_jwt = jwt.JwtTokenDetector.is_formally_valid
    out.append(
        _Detector(
            _KINDS["JSON Web Token"],
            re.compile(r"eyJ[A-Za-z0-9_=-]+\.[A-Za-z0-9_=-]+(?:\.\.?[A-Za-z0-9_+/=-]+){0,3}"),
            ("eyj",),
            check=lambda token: is_jwt(".".join(token.split(".")[:2])),  # header and payload: JSON in base64
        )
    )  # header.payload.signature (a JWE's five segments too), each redacted: the signature is what proves it
    for pattern, group in keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP.items():
        out.append(
            _Detector(
                _KINDS["Secret Keyword"],
                pattern,
                _KEYWORD_NEEDLES,
                group=group,
                check=_not_placeholder_nor_question,
                specific=False,
                per_line=True,
                names=True,
                # the name first (its keyword group 1), or last: "value" == my_password
                name_group=1 if pattern.pattern.startswith(f"({keyword.DENYLIST[0]}") else pattern.groups,
            )
        )
    entropy = high_entropy_strings.Base64HighEntropyString(limit=_ENTROPY_LIMIT)
    out.append(
        _Detector(
            _KINDS["Base64 High Entropy String"],
            entropy.regex,
            ("'", '"'),
            group=2,
            specific=False,
            check=lambda s: (
                len(s) >= _ENTROPY_MIN_CHARS
                and _letters_and_digits(s)
                and _INTEGRITY.match(s) is None
                and entropy.calculate_shannon_entropy(s) > _ENTROPY_LIMIT
            ),
        )
    )
    return out


# Probes of detect-secrets' patterns whose needles most text holds (by the pattern's source: a pattern changed by a
# later detect-secrets gets none, and is run as before). Each starts with a literal, which the regex engine finds by
# a fast scan, and matches inside every match of its pattern (tests/test_secrets.py generates matches to check).
_PROBES = {
    r'(?:\s|=|:|"|^)AP[\dABCDEF][a-zA-Z0-9]{8,}(?:\s|"|$)': r"AP[\dABCDEF][a-zA-Z0-9]{8}",  # Artifactory
    r"\d{8,10}:[0-9A-Za-z_-]{35}": r":(?<=\d{8}:)[0-9A-Za-z_-]{35}",  # Telegram
    r"[MNO][a-zA-Z\d_-]{23,25}\.[a-zA-Z\d_-]{6}\.[a-zA-Z\d_-]{27}": r"\.[a-zA-Z\d_-]{6}\.[a-zA-Z\d_-]{27}",  # Discord
}


def _probe(pattern: re.Pattern[str]) -> re.Pattern[str] | None:
    source = _PROBES.get(pattern.pattern)
    return None if source is None else re.compile(source, pattern.flags)


_ASSIGNED = ("key", "pwd", "pw", "pass", "token")  # the words of detect-secrets' assignment patterns


def _joined(prefixes: tuple[str, ...], words: tuple[str, ...]) -> tuple[str, ...]:
    """Each prefix joined to each word as detect-secrets' assignment patterns allow: directly, by "_" or by "-",
    with an optional "api" between."""
    return tuple(
        p + sep + api + w
        for p in prefixes
        for sep in ("", "_", "-")
        for api in ("", "api", "api_", "api-")
        for w in words
    )


# its keyword plugin's words (``api_?key``, ``password``, ...)
_KEYWORD_NEEDLES = (
    _joined(("api", "auth", "service", "account", "db", "database", "priv", "private", "client"), ("key",))
    + _joined(("db", "database", "key"), ("pass",))
    + ("password", "passwd", "pwd", "secret", "contrase")
)
# detect-secrets plugin -> (needles, whether it runs per line) or (one tuple of needles per pattern, per line)
_PLUGIN_NEEDLES: dict[str, tuple[tuple[str, ...] | list[tuple[str, ...]], bool]] = {
    "AWSKeyDetector": ([("a3t", "abia", "acca", "akia", "asia"), ("aws",)], False),
    "ArtifactoryDetector": ([("akc",), ("ap",)], False),
    "AzureStorageKeyDetector": (("accountkey=",), False),
    "CloudantDetector": ([_joined(("cl", "clou", "cloudant"), _ASSIGNED)] * 2 + [("cloudant.com",)] * 2, True),
    "DiscordBotTokenDetector": ((".",), False),
    "GitHubTokenDetector": (("gh",), False),
    "GitLabTokenDetector": (("gl", "gr1348941"), False),
    "IbmCloudIamDetector": (_ASSIGNED, True),
    "IbmCosHmacDetector": (("secret",), True),
    "MailchimpDetector": (("-us",), False),
    "NpmDetector": (("_authtoken",), False),
    "OpenAIDetector": (("t3blbkfj",), False),
    "PypiTokenDetector": (("pypi-",), False),
    "SendGridDetector": (("sg.",), False),
    "SlackDetector": ([("xox",), ("hooks.slack.com",)], False),
    "SoftlayerDetector": ([_joined(("sl", "softlayer"), _ASSIGNED), ("api.softlayer.com",)], True),
    "SquareOAuthDetector": (("sq0csp-",), False),
    "StripeDetector": (("k_live_",), False),
    "TelegramBotTokenDetector": ((":",), False),
    "TwilioKeyDetector": ([("ac",), ("sk",)], False),
}


# detect-secrets plugins whose unanchored patterns match inside longer runs of token characters: a Telegram token is
# digits, ":" and 35 characters, and "agent-...0868:block-b1ad81ea-5960-..." (two ids joined, as a store's keys are)
# holds that shape; the token stands alone (nothing of its alphabet glued to either end).
_BOUNDED = ("TelegramBotTokenDetector",)

# detect-secrets plugins whose patterns capture a part of the token (its prefix: ``(ghp|gho|...)_``), not the secret
_WHOLE_MATCH = ("GitHubTokenDetector", "GitLabTokenDetector")


def _secret_group(plugin: str, pattern: re.Pattern[str]) -> int:
    """The group of a detect-secrets pattern that holds the secret: its last capturing group when it has any (its
    assignment patterns capture the value alone), else the whole match; the whole match for the token formats whose
    groups are parts of the token. Artifactory's patterns include a delimiter on each side: those are trimmed by
    ``_trim``."""
    return 0 if plugin in _WHOLE_MATCH else pattern.groups


# -- the formats detect-secrets lacks ------------------------------------------------------------------------------

_B64 = r"A-Za-z0-9+/"
# A vendor's prefix distinctive enough (``sk-ant-api03-``, ``ghp_``, ``xoxb-``, ``glpat-``) is found glued to
# anything before it (``key_sk-ant-...``, ``1ghp_...``); a short or word-like one (``sk-``, ``hf_``, ``AIza``,
# ``sk_test_``) only after a character that is not a letter or digit (``_``, ``=``, ``:``, a quote, a space): "task-"
# or "risk_test_" are words.
_NOT_GLUED = r"(?<![A-Za-z0-9])"
# A variable named for a secret (``DB_PASSWORD``, ``GITHUB_TOKEN``, ``api_key``, ``x-api-key``), ending with the word
# (or a version or stage suffix): ``MAX_TOKENS`` or ``TOKEN_LIMIT`` are not secrets. The pattern starts at the word
# (a name's prefix would be tried at every position of the text); the secret is the value alone.
_ENV_SUFFIX = r"(?:_\d+|_(?:PROD|DEV|TEST|LIVE|VALUE))?"
_ENV_NAME = (
    r"(?i:(?:SECRET(?:[_-]?KEY)?(?:[_-]?BASE)?|PASSWORD|PASSWD|PASSPHRASE|PWD|TOKEN|API[_-]?KEY|"
    r"ACCESS[_-]?KEY|PRIVATE[_-]?KEY|CREDENTIALS?|AUTH[_-]?KEY|SIGNING[_-]?KEY|ENCRYPTION[_-]?KEY|MASTER[_-]?KEY|DSN)"
    + _ENV_SUFFIX
    + r")(?![A-Za-z0-9_])"
)
# The short names (``DB_PASS``, ``ADMIN_PW``, ``BASIC_AUTH``) are words of prose, logs and code too ("--- PASS:
# TestParse", ``n_pass = n_total``, "bypass", ``NO_AUTH = "NO_AUTH"``): they count as a whole name or its last part,
# in upper case assigned by "=" (``.env``, a shell: at most one space before it, so the needles can hold the "="), or
# in any case as a quoted key given a quoted value (``"db_pass": "..."``); a constant's name as value is no secret.
# Assigned, a short name takes the suffixes a long one does (``DB_PASS_PROD=``, ``ADMIN_PW_2=``).
# An AUTH name's value in capitals is a method's name (``SCRAM_SHA_256``, ``SASL_256``, ``LOGIN_V2``): a constant's,
# digits last or not; a PASS or PW name's is a constant's only when it ends with a letter (``_not_constant``).
_PASS_NAMES = r"PASS(?<![A-Za-z]PASS)|PW(?<![A-Za-z]PW)"
_AUTH_NAMES = r"AUTH(?<![A-Za-z]AUTH)"
_ENV_SHORT = r"(?:NAMES)" + _ENV_SUFFIX + r" ?=(?!=)"
_ENV_SHORT_KEY = r"(?i:NAMES)[\"']\s*:\s*([\"'])([^\"'\n]{4,})\1"
_CONSTANT = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
_ENV_VALUE = r"\s*(?:\"([^\"\n]{4,})\"|'([^'\n]{4,})'|([^\s\"';,]{6,}))"
_ENV_NEEDLES = ("secret", "pass", "pwd", "token", "key", "credential", "dsn")
# A private key block, PEM or PGP armor: from its BEGIN line to its END line (its armor headers, "Proc-Type:",
# "DEK-Info:", "Version:", and the blank line after them inside), another block's BEGIN line aside. Without an END
# line (cut short): the armor headers, the blank line and the run of base64 lines after them, up to a line cut with
# "..." (and tokens of 16 or more characters on the BEGIN line's own line: a key pasted on one line). Lines end with
# "\n", "\r\n", or "\\n" (a key inside JSON text, ``"private_key": "-----BEGIN ...\\n..."``).
_KEY_LINE_END = r"(?:\r?\n|(?:\\r)?\\n)"
_KEY_LINE = _KEY_LINE_END + r"[ \t]*[A-Za-z0-9+/=]+"
_PRIVATE_KEY = (
    r"-----BEGIN[A-Z0-9 ]{0,30} PRIVATE KEY(?: BLOCK)?-----"
    r"(?:(?:[^-]|-(?!----BEGIN[A-Z0-9 ]{0,30} PRIVATE KEY))*?-----END[A-Z0-9 ]{0,30} PRIVATE KEY(?: BLOCK)?-----"
    r"|(?:[ \t]+[A-Za-z0-9+/=]{16,}(?![^\s\\\"']))*"  # on the BEGIN line
    r"(?:" + _KEY_LINE_END + r"[ \t]*[A-Za-z][A-Za-z0-9-]*:[^\r\n\\\"]*)*"  # armor headers
    r"(?:" + _KEY_LINE_END + r"[ \t]*(?=" + _KEY_LINE_END + r"))?"  # the blank line after them
    r"(?:" + _KEY_LINE + r"[ \t]*(?=" + _KEY_LINE_END + r"|[\"']|\Z))*"  # the body's lines
    r"(?:" + _KEY_LINE + r"(?:\.{2,}|\u2026))?)"  # a line cut short
)
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
# A password given to a command, within that one command (a line, or lines joined by "\"): the value alone, quoted
# or not (group 2)
_SAME_COMMAND = r"(?:[^\n;|&]|&(?!&)|\\\n){0,400}?\s"
_ARGUMENT = r"([\"']?)([^\s\"']+)\1"


def _own_detectors() -> list[_Detector]:
    c = re.compile
    d = _Detector

    def command_line(
        pattern: str,
        needles: tuple[str, ...],
        *,
        check: Callable[[str], bool] = _password,
        min_chars: int = 1,
        names: bool = False,
    ) -> _Detector:
        """A password given to a command: its value is group 2 (``_ARGUMENT``'s), a password's rules by default."""
        return d(
            "password on a command line", c(pattern), needles, group=2, check=check, min_chars=min_chars, names=names
        )

    return [
        d(
            "Anthropic API key",
            c(r"sk-ant-(?:api|admin|oat|ort)\d{2}-[A-Za-z0-9_\-]{20,}|" + _NOT_GLUED + r"sk-ant-[A-Za-z0-9_\-]{32,}"),
            ("sk-ant-",),
        ),
        d(
            "OpenAI API key",
            c(_NOT_GLUED + r"sk-(?:proj|svcacct|admin|None)-[A-Za-z0-9_\-]{20,}"),
            ("sk-",),
            check=_letters_and_digits,
        ),
        d(
            "OpenAI API key",
            c(_NOT_GLUED + r"sk-[A-Za-z0-9]{32,}(?![A-Za-z0-9_\-])"),
            ("sk-",),
            check=_letters_and_digits,
        ),
        d(
            "GitHub token",
            c(r"gh[pousr]_[A-Za-z0-9]{30,}(?![A-Za-z0-9])|github_pat_[A-Za-z0-9_]{22,}"),
            ("gh",),
            probe=c(r"g(?:h[pousr]_[A-Za-z0-9]{30}|ithub_pat_[A-Za-z0-9_]{22})"),
        ),
        d("Google API key", c(_NOT_GLUED + r"AIza[0-9A-Za-z_\-]{35}(?![0-9A-Za-z_\-])"), ("aiza",)),
        d("Google OAuth client secret", c(r"GOCSPX-[A-Za-z0-9_\-]{28}(?![A-Za-z0-9_\-])"), ("gocspx-",)),
        d(
            "Google OAuth access token",
            c(_NOT_GLUED + r"ya29\.[0-9A-Za-z_\-]{30,}"),
            ("ya29.",),
            check=_letters_and_digits,
        ),
        d(
            "Google OAuth refresh token",
            c(_NOT_GLUED + r"1//0[0-9A-Za-z_\-]{40,}(?![0-9A-Za-z_\-])"),
            ("1//0",),
            check=_letters_and_digits,
        ),
        d("Slack token", c(r"xox[abposre]-[A-Za-z0-9\-]{10,}|xapp-\d-[A-Za-z0-9\-]{10,}"), ("xox", "xapp-")),
        d("Stripe key", c(_NOT_GLUED + r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"), ("k_live_", "k_test_")),
        d("Hugging Face token", c(_NOT_GLUED + r"hf_[A-Za-z0-9]{30,}(?![A-Za-z0-9])"), ("hf_",)),
        d("npm token", c(_NOT_GLUED + r"npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])"), ("npm_",)),
        d("GitLab token", c(r"glpat-[A-Za-z0-9_\-]{20,}"), ("glpat-",)),
        d("private key", c(_PRIVATE_KEY), ("private key",), lines=True),
        d(
            "private key",
            c(r"PuTTY-User-Key-File-\d:(?:.|\n)*?(?:Private-MAC: [0-9a-f]+|\Z)"),
            ("putty-user-key",),
            lines=True,
        ),
        d(
            "AWS secret access key",
            c(
                r"(?i:aws_?secret_?access_?key|aws_?secret_?key|secret_?access_?key)"
                r"[\"']?\s*[:=]\s*[\"']?([" + _B64 + r"]{40})(?![" + _B64 + r"])"
            ),
            ("secret",),
            group=1,
            per_line=True,
        ),
        d(  # said in words: "secret wJalr...", "AKIA... wJalr..." (an access key's pair follows it)
            "AWS secret access key",
            c(
                r"(?:(?i:secret)|(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16})[^\n]{0,40}?"
                r"(?<![" + _B64 + r"])([" + _B64 + r"]{40})(?![" + _B64 + r"=])"
            ),
            ("secret", "a3t", "akia", "asia", "abia", "acca"),
            group=1,
            check=_mixed_case_and_digits,
            per_line=True,
        ),
        d(  # "the password is correct-horse-battery-staple", "my github password was Sup3rS3cret!"
            "password",
            c(_PASSWORD_WORD + _FOR_WHAT + _IS + _SAID_VALUE),
            ("pass", "pwd"),
            group="value",
            check=_said_password,
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
            check=_said_password,
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
            check=_said_foreign_password,
            names=True,
        ),
        d(  # "la clave es ...": Spanish's word for a key, or the crucial thing: a key's rules
            "secret",
            c(shapes.CLAVE),
            ("clave",),
            group="value",
            check=_said_key,
            specific=False,
        ),
        d("password", c(shapes.CJK_PASSWORD), shapes.CJK_NEEDLES, group="value", check=_said_foreign_password),
        d(
            "payment card number",
            c(numbers.PRINTED_CARD),
            (),
            check=numbers.card_number,
            probe=c(r"\d{4}[ -]\d{4}"),
            around=numbers.printed_card_label,  # "order number 4111 1111 1111 1111" is an order's
        ),
        d(  # a run of digits, or another grouping: after a word naming a card ("card", "visa", "charge", "tarjeta")
            "payment card number",
            c(numbers.PAYMENT_CARD),
            (),
            check=numbers.card_number,
            probe=c(r"\d{4}[ -]?\d{4}"),
            before=numbers.card_cue,
        ),
        d(
            "social security number",
            c(numbers.SSN),
            (),
            check=numbers.ssn,
            probe=c(r"\d-\d\d-\d"),
            before=numbers.ssn_label,
        ),
        d(
            "social security number",
            c(numbers.SAID_SSN),
            numbers.SSN_NEEDLES,
            group=1,
            check=lambda v: numbers.ssn(v, said=True),
        ),
        d("password hash", c(shapes.PASSWORD_HASH), shapes.HASH_NEEDLES),
        d(  # "use Xk9vQ2mPz7! as the password"
            "password",
            c(
                r"(?<![A-Za-z])(?i:use)\s+(?:[\"\u201c]([^\"\u201d\n]{1,100})[\"\u201d]|'([^'\n]{1,100})'|([^\s\"'\u201c]+))"
                r"\s+(?i:as)\s+(?:(?i:the|my|your|our|a|an)\s+)?(?:\S{1,30}\s+)?" + _PASSWORD_WORD + r"(?![A-Za-z])"
            ),
            ("pass", "pwd"),
            group="value",
            check=_said_password,
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
            check=lambda v: "://" not in v and _said_password(v),  # "reset your password:\nhttps://..."
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
            check=_said_key,
            specific=False,
            per_line=True,
        ),
        d(  # a .netrc entry: "machine api.example.com login bob password ..." (on one line or several)
            "password",
            c(
                r"(?:machine(?<!\wmachine)\s+\S+|default(?<!\wdefault))\s+login\s+\S+(?:\s+account\s+\S+)?\s+password\s+"
                r"([\"']?)([^\s\"']+)\1"
            ),
            ("login",),
            group=2,
            check=_password,
            min_chars=1,
        ),
        d(  # requests' auth=("bob", "..."), HTTPBasicAuth("bob", "...")
            "password",
            c(
                r"(?:auth(?<!\wauth)\s*=\s*\(|HTTP(?:Basic|Digest|Proxy)Auth\()\s*([\"'])[^\"'\n]*\1\s*,\s*"
                r"([\"'])([^\"'\n]+)\2\s*\)"
            ),
            ("auth=", "auth =", "auth("),
            group=3,
            check=_password,
            min_chars=1,
        ),
        d(  # "Authorization: Basic dXNlcjpw...": base64 of "user:password"
            "Basic auth credential",
            c(r"(?i:basic)(?<!\w.....)\s+([A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])"),
            ("basic",),
            group=1,
            check=_basic_credentials,
        ),
        d(
            "Discord webhook",
            c(
                r"https?://(?:(?:ptb|canary)\.)?discord(?:app)?\.com/api/(?:v\d+/)?webhooks/\d{17,20}/"
                r"[A-Za-z0-9_\-]{60,68}(?![A-Za-z0-9_\-])"
            ),
            ("discord",),
        ),
        d(
            "Azure key",
            c(r"\b(?:AccountKey|SharedAccessKey|SharedAccessSignature)=([A-Za-z0-9+/=%]{32,})"),
            ("accountkey=", "sharedaccess"),
            group=1,
        ),
        d(
            "Azure client secret",
            c(
                r"(?<![A-Za-z0-9_~.\-])[A-Za-z0-9_~.\-]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}"
                r"(?![A-Za-z0-9_~.\-])"
            ),
            ("q~",),
        ),
        d(
            "password in a URL",
            c(
                # anonymous FTP's conventional password (RFC 1635: "guest", "anonymous", an email address) is public
                r"\b(?!(?i:ftps?)://(?i:anonymous):(?:guest|anonymous|[^\s/\"'<>]*(?:@|%40)[^\s/\"'<>]*)@)"
                r"[A-Za-z][A-Za-z0-9+.\-]{1,20}://[^\s:/@\"'<>]{0,100}:([^\s@/\"'<>]{1,200})@[A-Za-z0-9\[]"
            ),
            ("://",),
            group=1,
            check=_password,
            probe=c(r"://[^\s:/@\"'<>]{0,100}:[^\s@/\"'<>]{1,200}@[A-Za-z0-9\[]"),
            min_chars=1,
        ),
        command_line(
            r"curl\b" + _SAME_COMMAND + r"(?:-u|--user|-U|--proxy-user)(?:\s+|=)?([\"']?)[^\s:\"']*:([^\s\"']+)\1",
            ("curl",),
        ),
        command_line(  # -p alone prompts for it; "-p dbname" names a database
            r"(?:mysql(?:dump|admin|import|show|check)?|mariadb(?:-dump|-admin)?)\b" + _SAME_COMMAND + "-p" + _ARGUMENT,
            ("mysql", "mariadb"),
        ),
        # sshpass's options come first: a later -p is the command's
        command_line(r"sshpass(?:\s+-v)*\s+-p\s*" + _ARGUMENT, ("sshpass",)),
        command_line(  # "docker login -u bob -p ..." ("--password-stdin" reads it from elsewhere)
            r"(?:docker|podman|buildah|skopeo|nerdctl)\s+login\b"
            + _SAME_COMMAND
            + r"(?:-p|--password)(?:\s+|=)"
            + _ARGUMENT,
            ("login",),
        ),
        command_line(r"redis-cli\b" + _SAME_COMMAND + r"(?:-a|--pass)\s+" + _ARGUMENT, ("redis-cli",)),
        command_line(r"--(?!no-)(?:[a-z]+-)*pass(?:word|wd|phrase)?=" + _ARGUMENT, ("-pass",)),
        command_line(  # "--password VALUE": prose too ("set --password to ..."): a value's rules
            r"--(?!no-)(?:[a-z]+-)*pass(?:word|wd|phrase)?\s+([\"']?)([^\s\"'-][^\s\"']*)\1",
            ("-pass",),
            check=_not_placeholder,
            min_chars=_Detector.min_chars,
            names=True,
        ),
        d(
            "bearer token",
            c(r"(?i:\bbearer)\s+([A-Za-z0-9_\-.=~+/]{20,})"),
            ("bearer",),
            group=1,
            check=_letters_and_digits,
            specific=False,
        ),
        d(
            "secret",
            c(_ENV_NAME + r"[\"']?\s*[:=]" + _ENV_VALUE),
            _ENV_NEEDLES,
            group="value",
            check=_not_placeholder_nor_question,
            specific=False,
            per_line=True,
            names=True,
        ),
        *(
            d(
                "secret",
                c(pattern.replace("NAMES", names, 1)),
                tuple(name + end for name in short for end in ends),
                group=group,
                check=check,
                specific=False,
                per_line=True,
                names=True,
            )
            for names, short, check in (
                (_PASS_NAMES, ("pass", "pw"), _not_constant),
                (_AUTH_NAMES, ("auth",), _not_constant_name),
            )
            for pattern, ends, group in (
                (_ENV_SHORT + _ENV_VALUE, ("=", " =", "_"), "value"),
                (_ENV_SHORT_KEY, ('"', "'"), 2),
            )
        ),
    ]


# The generic assignment's value is one of three alternatives (double-quoted, single-quoted, bare)
_VALUE_GROUPS = (1, 2, 3)


def _letters_and_digits(s: str) -> bool:
    return any(ch.isdigit() for ch in s) and any(ch.isalpha() for ch in s)


# A value that stands for a secret kept elsewhere or in a variable: a reference (``$VAR``, ``${VAR}``, ``os.environ``,
# a shell's command substitution, `` `cat ~/.pw` `` (a command: a space or ``$(`` inside its backticks; a code span's
# `` `Xk9vQ2mPz7a` `` is read inside, ``_trim``), a secret manager's: 1Password's ``op://``, Vault's ``vault:``, AWS's
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


def _not_placeholder(value: str) -> bool:
    """A value that is a reference (``$VAR``, ``${VAR}``, ``os.environ[...]``), a placeholder (``<your key>``,
    ``xxx``, ``...``) or a plain word is not a secret; anything else at least 4 characters long is."""
    v = value.strip()
    if len(v) < 4 or _PLACEHOLDER.match(v) or "[redacted:" in v or "..." in v or "\u2026" in v:
        return False
    if v.replace(".", "").replace("-", "").replace("_", "").isdigit():  # a number: max_tokens = 100000
        return False
    return not (v.isalpha() and len(v) < 12)  # a plain word: "the secret: surprise" (but "hunter22" is caught)


def _not_placeholder_nor_question(value: str) -> bool:
    """A value (``_not_placeholder``) that is no question: "Password: forgot?" is a form's label."""
    return _not_placeholder(value) and not shapes.question(value)


# A variable's name as code writes it: snake_case or camelCase starting with a lower-case letter (``api_key``,
# ``apiKey``, ``_api_key``), or a constant's in capitals (``LETTA_API_KEY``); a letter last (``Password1``,
# ``MyApiKey2024``, ``PROD_DB_2024``: a password's digits tail, no name)
_VARIABLE = re.compile(r"_*(?:[a-z][A-Za-z0-9_]*|[A-Z][A-Z0-9_]*)(?<=[A-Za-z])")
_NAME_PARTS = re.compile(r"[A-Z]{2,}(?![a-z])|[A-Z]?[a-z]+")
_SECRET_WORDS = frozenset(
    ("key", "keys", "secret", "secrets", "token", "tokens", "pass", "password", "passwd", "passphrase", "pwd")
    + ("credential", "credentials", "auth", "apikey")
)


def _names_a_secret(value: str) -> bool:
    """A variable's or an environment variable's name (``_VARIABLE``) that says it holds a secret (``api_key``,
    ``consumer_secret``, ``apiKey``, ``LETTA_API_KEY``, ``GITHUB_TOKEN``): code or a reference that names one, when it
    is not in quotes (``_spans``: a quoted literal is a value). Each of its words has two letters or more (a random
    string of letters does not part so); ``ABCDEFGH_IJKLMNOP`` names nothing."""
    if _VARIABLE.fullmatch(value) is None:
        return False
    parts = _NAME_PARTS.findall(value)
    return all(len(p) >= 2 for p in parts) and any(p.lower() in _SECRET_WORDS for p in parts)


def _not_constant_name(value: str) -> bool:
    """A value (``_not_placeholder``) that is not a constant's name in capitals (``NO_AUTH``, ``SCRAM_SHA_256``)."""
    return _not_placeholder(value) and _CONSTANT.fullmatch(value.strip()) is None


def _not_constant(value: str) -> bool:
    """A value (``_not_placeholder``) that is not a constant's name (``NO_AUTH``, ``USER_PASS``, ``ADMIN_PW_2``):
    capitals joined by "_", ending with a letter or naming a secret; ``PROD_DB_2024`` (a digits tail, no secret's
    word) is a password in capitals."""
    v = value.strip()
    if not _not_placeholder(v):
        return False
    if _CONSTANT.fullmatch(v) is None:
        return True
    return not (v[-1].isalpha() or any(p.lower() in _CONSTANT_WORDS for p in v.split("_")))


_CONSTANT_WORDS = frozenset(("pass", "pw", "pwd", "auth", "key", "token", "secret", "password", "passwd"))


def _quoted(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` is a string literal: in a pair of quotes (a code span's backticks are code)."""
    return 0 < start and end < len(text) and text[start - 1] == text[end] and text[end] in "\"'"


def _looks_random(value: str) -> bool:
    """A value shaped like a secret rather than like words, a name or a URL: one token of letters and digits."""
    return _letters_and_digits(value) and not any(ch.isspace() for ch in value) and "://" not in value


def _mixed_case_and_digits(s: str) -> bool:
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


def _said_password(value: str) -> bool:
    """A password said in a sentence ("the password is ..."): not a placeholder, not a plain word ("is required",
    "was wrong") nor one made of two ("case-sensitive"); digits alone are one (a passcode) from 4 on."""
    v = value.strip()
    if v.isdigit():
        return len(v) >= 4
    return (
        _password(v)
        and _not_placeholder(v)
        and _COMPOUND_WORD.fullmatch(v) is None
        and not shapes.names_a_method(v)  # "the password is SHA256 hashed", "Le mot de passe est WPA2."
    )


def _said_foreign_password(value: str) -> bool:
    """A password said in another language (``_said_password``) that is no question ("Passwort: vergessen?" is a
    form's label) nor a word describing one ("Das Passwort ist erforderlich", "A senha é criptografada")."""
    return _said_password(value) and not shapes.question(value) and not shapes.describes_a_password(value)


# A part of a value that is a lower-case word ("base64-encoded", "ERC20-compatible", "live_mode"): prose, not a key
_WORD_PART = re.compile(r"(?:^|[-_.])[a-z]{4,}(?:[-_.]|$)")


def _said_key(value: str) -> bool:
    """A key or token said in a sentence ("the API key is ..."): random-looking (letters and digits, 16 or more
    characters, no part of it a lower-case word), not a placeholder."""
    v = value.strip()
    placeholder = not _not_placeholder(v) and not shapes.random_base64(v)  # "/q2bAf...": base64, not a path
    return len(v) >= 16 and _letters_and_digits(v) and not placeholder and _WORD_PART.search(v) is None


def _basic_credentials(value: str) -> bool:
    """An HTTP Basic header's value: base64 of "user:password", its password a credential (``_password``)."""
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True).decode()
    except ValueError:  # not base64, or not text
        return False
    user, colon, password = decoded.partition(":")
    return bool(colon) and decoded.isprintable() and _password(password)


def _password(value: str) -> bool:
    """A password given as one (a URL's userinfo, a command's ``-p``) is a credential whatever its length or shape
    ("rootpw", "guest", "1234"), but for a reference or a placeholder (``$PASS``, ``<password>``, ``pass``, ``***``)."""
    v = value.strip()
    if not v or v.lower() in _PASSWORD_WORDS or _PLACEHOLDER.match(v):
        return False
    return "[redacted:" not in v and "..." not in v and "\u2026" not in v


# -- running them ----------------------------------------------------------------------------------------------------


@functools.cache
def _detectors() -> tuple[_Detector, ...]:
    """Every detector, ours first (a tie on a span is named by the more specific kind); built on first use."""
    return tuple(_own_detectors() + _plugin_detectors())


def prepare() -> None:
    """Build the detectors now (their imports take ~0.1 s once): a server does it in the background at start."""
    _detectors()


# AWS's documentation's example keys (``AKIAIOSFODNN7EXAMPLE``, ``wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY``, and
# their like): published, so no credential, whichever detector takes them (a real key ends so by no chance)
_AWS_EXAMPLE = re.compile(r"(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{9}EXAMPLE|[A-Za-z0-9/+]{30}EXAMPLEKEY")


def _spans(text: str, d: _Detector, json_text: bool) -> Iterator[tuple[int, int]]:
    for m in d.pattern.finditer(text):
        if d.group == "value":
            group = next((g for g in _VALUE_GROUPS if m.group(g) is not None), 0)
        else:
            group = d.group if isinstance(d.group, int) and m.group(d.group) is not None else 0
        start, end = m.span(group)
        if json_text and not d.lines:
            end = _line_end(text, start, end)
        start, end = _trim(text, start, end, json_text)
        if end - start < d.min_chars:
            continue
        value = text[start:end]
        if d.check is not None and not d.check(value):
            continue
        if d.before is not None and not d.before(_before(text, start)):
            continue
        if d.around is not None and not d.around(_before(text, start), _after(text, end)):
            continue
        if d.names and _names_a_secret(value) and not _quoted(text, start, end):
            continue
        if d.name_group and _names_no_secret(text, *m.span(d.name_group)) and not _looks_random(value):
            continue
        if _AWS_EXAMPLE.fullmatch(text, start, end):
            continue
        yield start, end


def _before(text: str, start: int) -> str:
    """The text before ``start`` on its line, up to ``numbers.BEFORE`` characters (looked for within them only: a
    long line's matches each read as much)."""
    window = max(0, start - numbers.BEFORE)
    newline = text.rfind("\n", window, start)
    return text[newline + 1 if newline >= 0 else window : start]


def _after(text: str, end: int) -> str:
    """The text after ``end``, up to ``numbers.AFTER`` characters (its line and what follows it)."""
    return text[end : end + numbers.AFTER]


# The last word of a name that holds something about a secret, not the secret: ``api_key_source``, ``password_url``,
# ``secretName`` (detect-secrets' keyword patterns take any name starting with the word: ``password_secure``); a
# random-looking value given to it is a secret all the same (``secret_env = "Xk9vQ2mPz7a"``)
_ABOUT_A_SECRET = frozenset(
    ("source", "name", "names", "id", "ids", "url", "uri", "path", "file", "env", "var", "field", "header", "type")
    + ("length", "len", "policy", "prompt", "label", "hint", "required", "enabled", "format", "version", "count")
    + ("size", "limit", "expiry", "expires", "provider", "manager", "mode", "strength", "min", "max", "setting")
    + ("settings", "description", "help", "placeholder", "error", "message", "regex", "pattern")
)


def _names_no_secret(text: str, start: int, end: int) -> bool:
    """Whether the name around the keyword ``text[start:end]`` (the run of word characters holding it) ends with a
    word saying it holds something about a secret (``_ABOUT_A_SECRET``)."""
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_"):
        start -= 1
    while end < len(text) and (text[end].isalnum() or text[end] == "_"):
        end += 1
    parts = re.findall(r"[A-Z]{2,}(?![a-z])|[A-Z]?[a-z]+|\d+", text[start:end])
    return len(parts) > 1 and parts[-1].lower() in _ABOUT_A_SECRET


def _trim(text: str, start: int, end: int, json_text: bool) -> tuple[int, int]:
    """A span without the delimiters, quotes and whitespace some patterns include around the secret, and inside the
    backticks of a code span (`` `Xk9vQ2mPz7a` ``); a shell's command substitution (`` `cat ~/.pw` ``, spaces inside)
    is taken whole, to its closing backtick on the line, for the checks to see a reference (``_PLACEHOLDER``)."""
    while start < end and text[start] in " \t\r\n=:\"'":
        start += 1
    while end > start and text[end - 1] in " \t\r\n\"'":
        end -= 1
    if text.startswith("AccountKey=", start):  # detect-secrets' Azure pattern includes the name
        start += len("AccountKey=")
    if 0 < start < end and text[start - 1] == "`" != text[start]:
        start -= 1  # a value in backticks (detect-secrets' patterns take a backtick for a quote): read as one
    if start < end and text[start] == "`":
        line_end = text.find("\n", start)
        close = text.find("`", start + 1, len(text) if line_end < 0 else line_end)
        inside = text[start + 1 : close] if close > start else ""
        if close < 0 or any(ch.isspace() for ch in inside) or "$(" in inside:
            return start, max(end, close + 1)  # a command, or a lone backtick: the checks decide
        if close + 1 >= end:
            return start + 1, min(end, close)  # a code span: its inside (a shorter match ends inside it)
    return start, _closed(text, start, end, json_text)


_ESCAPED_BREAK = re.compile(r"(?<!\\)(?:\\\\)*\\[nrt]")  # JSON's "\n", "\r", "\t" (not an escaped backslash's "n")


def _line_end(text: str, start: int, end: int) -> int:
    """The end of a span that stops at an escaped line break or tab inside it, in JSON text (a document read whole,
    ``_json_text``): a value on one line of a string ends where the line does (``api_key=api_key)\\n\\n    # Set
    up``). In other text a backslash and an "n" are two characters of a value (``DB_PASSWORD=Zq8\\nvN3m``)."""
    if "\\" not in text[start:end]:
        return end
    m = _ESCAPED_BREAK.search(text, start, end)
    return end if m is None else m.end() - 2


_OPENERS = {")": "(", "]": "[", "}": "{"}


def _closed(text: str, start: int, end: int, json_text: bool) -> int:
    """The end of the span ``text[start:end]`` without the punctuation after a bare value that closes what came before
    it: a call's ``)`` (``Client(api_key=VALUE)``), a ``]`` or ``}`` opened on its line before it (each closer taken
    off closes one of them), and a code span's closing backtick (``--pass VALUE` ``: a shell's word holds no lone
    backtick). The value and its line are counted once (a count per closer taken off was quadratic on a run of them);
    the line is read back no further than the value is long and 1,000 characters more."""
    last = text[end - 1] if end > start else ""
    if last != "`" and last not in _OPENERS:
        return end
    value = Counter(ch for ch in text[start:end] if ch in "`()[]{}")
    line_start = max(text.rfind("\n", 0, start) + 1, start - (end - start) - 1000)
    escaped = text.rfind("\\n", line_start, start) if json_text else -1  # from its last escaped line break
    if escaped >= 0:
        line_start = escaped + 2
    line = Counter(ch for ch in text[line_start:start] if ch in "()[]{}")
    while end > start:
        last = text[end - 1]
        opener = _OPENERS.get(last)
        if last == "`" and value["`"] % 2:
            value["`"] -= 1
        elif opener is not None and value[last] > value[opener] and line[opener] > line[last]:
            value[last] -= 1
            line[opener] -= 1
        else:
            break
        end -= 1
    return end


# Every word the per-line detectors' needles contain one of: the lines holding none are skipped by all of them
_LINE_WORDS = re.compile(r"key|pass|pw|auth|secret|token|contrase|credential|dsn|softlayer|cloudant")


def _candidate_lines(text: str, lowered: str) -> list[tuple[int, str, str]]:
    """(offset, line, lowered line) of each line holding one of ``_LINE_WORDS``, found in one pass."""
    out: list[tuple[int, str, str]] = []
    end = -1
    for m in _LINE_WORDS.finditer(lowered):
        if m.start() <= end:
            continue  # still on the line just taken
        start = text.rfind("\n", 0, m.start()) + 1
        end = text.find("\n", m.start())
        end = len(text) if end < 0 else end
        out.append((start, text[start:end], lowered[start:end]))
    return out


@functools.cache
def _needle_pattern(needles: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(n) for n in sorted(needles, key=len, reverse=True)))


def _line_spans(
    lines: list[tuple[int, str, str]],
    d: _Detector,
    chosen: dict[tuple[str, ...], list[tuple[int, str]]],
    json_text: bool,
) -> Iterator[tuple[int, int]]:
    """``d`` run on each candidate line holding one of its needles (detect-secrets' assignment patterns assume one
    line, and are slow over long prose); ``chosen`` keeps the lines of each set of needles (detectors share them)."""
    if d.needles not in chosen:
        pattern = _needle_pattern(d.needles)
        chosen[d.needles] = [(offset, line) for offset, line, lowered in lines if pattern.search(lowered)]
    for offset, line in chosen[d.needles]:
        for start, stop in _spans(line, d, json_text):
            yield offset + start, offset + stop


# Characters that show as nothing: inside a key they hide it from every pattern ("sk-ant-\u200bapi03-...")
_INVISIBLE = "\u00ad\u200b\u200c\u200d\u2060\u2061\u2062\u2063\u2064\ufeff"
_VISIBLE = str.maketrans("", "", _INVISIBLE)


def find(text: str) -> list[Finding]:
    """The credentials in ``text``, in order, as exact non-overlapping spans; overlapping findings are merged into
    one span named by its most specific kind. Text holding invisible characters is also scanned without them, and
    text holding a vendor's token in pieces without the breaks inside it (``secret_joins``: a finding across a break
    only inside the token), each finding placed back on the original text (its span takes the invisible characters,
    or the break, inside it)."""
    json_text = _json_text(text)
    raw = _raw(text, json_text)
    if not text.isascii() and any(ch in text for ch in _INVISIBLE):  # a str search each: cheaper than a regex
        raw += _without(text, [i for i, ch in enumerate(text) if ch not in _INVISIBLE], json_text)
    gaps, tokens = joins.pieces(text)
    if gaps:  # a finding without the breaks is one when it takes one, inside a joined token (not the next setting)
        kept = joins.kept(text, gaps)
        raw += [
            f
            for f in _without(text, kept, json_text)
            if joins.joined(kept, f[0], f[1]) and joins.within(tokens, f[0], f[1])
        ]
    if not raw:
        return []
    raw.sort()
    merged: list[tuple[int, int, int, str]] = []
    for start, end, rank, kind in raw:
        if merged and start < merged[-1][1]:
            s, e, r, k = merged[-1]
            best_rank, best_kind = min((r, k), (rank, kind))
            merged[-1] = (s, max(e, end), best_rank, best_kind)
        else:
            merged.append((start, end, rank, kind))
    return [Finding(kind, start, end) for start, end, _, kind in merged]


def _without(text: str, kept: list[int], json_text: bool) -> list[tuple[int, int, int, str]]:
    """The findings in the text of ``text``'s characters at ``kept``, placed back on ``text``."""
    shown = "".join(text[i] for i in kept)
    return [(kept[start], kept[end - 1] + 1, rank, kind) for start, end, rank, kind in _raw(shown, json_text)]


def _json_text(text: str) -> bool:
    """Whether ``text`` is a JSON document's text (a payload, metadata, a document ``redact_document`` reads whole,
    its strings' line breaks written as they are or not), whose ``\\n`` is an escaped line break (``_line_end``):
    only there; checked only when it holds a backslash."""
    if "\\" not in text or text.lstrip()[:1] not in ("{", "[", '"'):
        return False
    try:
        json.loads(text, strict=False)  # strict=False: a string's line breaks written as they are (``_spanned``)
    except (ValueError, RecursionError):  # not JSON, or nested too deep to read: text
        return False
    return True


def _raw(text: str, json_text: bool) -> list[tuple[int, int, int, str]]:
    """Every detector's spans in ``text``, unmerged: (start, end, rank (a lower one names the kind), kind)."""
    if len(text) < 8:
        return []
    lowered = text.lower()  # the same length but for a few characters (İ): those texts are lowered one by one
    if len(lowered) != len(text):
        lowered = "".join(ch.lower() if len(ch.lower()) == 1 else ch for ch in text)
    lines: list[tuple[int, str, str]] | None = None
    chosen: dict[tuple[str, ...], list[tuple[int, str]]] = {}
    held: dict[str, bool] = {}  # needle -> in the text (detectors share needles: each is looked for once)

    def holds(needle: str) -> bool:
        if needle not in held:
            held[needle] = needle in lowered
        return held[needle]

    raw: list[tuple[int, int, int, str]] = []
    for rank, d in enumerate(_detectors()):
        if d.per_line:
            lines = _candidate_lines(text, lowered) if lines is None else lines
            spans = _line_spans(lines, d, chosen, json_text)
        elif d.needles and not any(map(holds, d.needles)):
            continue
        elif d.probe is not None and d.probe.search(text) is None:
            continue
        else:
            spans = _spans(text, d, json_text)
        for start, end in spans:
            raw.append((start, end, rank if d.specific else rank + 10_000, d.kind))
    return raw


def redact(text: str) -> Redacted:
    """``text`` with each credential replaced by ``[redacted: KIND]``."""
    found = find(text)
    if not found:
        return Redacted(text, [])
    parts: list[str] = []
    at = 0
    for f in found:
        parts += [text[at : f.start], marker(f.kind)]
        at = f.end
    parts.append(text[at:])
    return Redacted("".join(parts), found)


def redact_json(payload: str, *, as_text: bool = False) -> str:
    """A JSON document with every credential in it redacted (``redact_document``: a stored message's payload, tool
    calls and their arguments; an agent's metadata, ``as_text``); text that is not JSON, or nests too deep to walk, is
    redacted as text. Returned as it is unless a credential is found: its strings are checked unescaped first (inside
    JSON text a quote is ``\\"``, hiding ``PASSWORD="..."``), and the text as a whole (what a key tells)."""
    if not payload:
        return payload
    try:
        value = json.loads(payload)
        in_text = bool(find(payload))  # what a key tells ({"password": "..."}) is found in the text as a whole
        if not in_text and not any(map(find, _strings(value))):
            return payload
        redacted, found = redact_document(value, as_text=as_text)
        if not found and not (as_text and in_text):  # as text: found in its escapes, which the text anew lacks
            return payload
        return json.dumps(redacted, ensure_ascii=False)
    except (ValueError, RecursionError):  # not JSON, or nested too deep to walk: redacted as text
        return redact(payload).text


def _strings(value: Any) -> Iterator[str]:
    """Every string of a parsed JSON value, keys too, unescaped; those of a string holding a JSON document (a tool
    call's arguments) too. Walked without recursion."""
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, str):
            yield v
            nested = _nested(v)
            if nested is not None:
                todo.append(nested)
        elif isinstance(v, dict):
            todo += [k for k in v if isinstance(k, str)]
            todo += v.values()
        elif isinstance(v, list):
            todo += v


def _nested(text: str) -> Any:
    """The JSON object or array a string holds (a tool call's arguments), else None."""
    if text.lstrip()[:1] not in ("{", "["):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested too deep: its text is redacted as text
        return None
    return value if isinstance(value, dict | list) else None


JsonPath = tuple[str | int, ...]  # where a string is in a JSON value: its keys and list positions from the top
_ENTROPY = "high-entropy secret"  # the kind of a random-looking quoted string (``Base64HighEntropyString``)


def redact_document(value: Any, *, as_text: bool = False) -> tuple[Any, list[tuple[JsonPath, str]]]:
    """A JSON value (parsed) with every credential in it redacted, and where each one was with its kind (a key's
    path ends with the key). Each string, and each key, is redacted as text; then the document is read whole as its
    JSON text (``json.dumps(value, ensure_ascii=False)``), where a key says what its value is (``{"password":
    "..."}``, ``{"AWS_SECRET_ACCESS_KEY": "..."}``): a string value a credential found there overlaps (else a key) is
    replaced whole by the credential's marker, until that text holds none. In that text every string is quoted: a
    random-looking one (a tool call's id) is taken for a high-entropy secret only ``as_text``, for a document stored
    and checked as its JSON text (an agent's metadata, which ``find`` then finds nothing in). Otherwise a string's
    line breaks are written as line breaks, not ``\\n``: the text's lines are its strings' (a line of code in a tool's
    source is read as that line, not run into the next one)."""
    found: list[tuple[JsonPath, str]] = []
    out = _redact_strings(value, (), found, as_text)
    for _ in range(16):  # each round replaces a string with a marker; a handful of rounds is already unusual
        text, leaves = _spanned(out, lines=not as_text)
        hits = [f for f in find(text) if as_text or f.kind != _ENTROPY]
        if not hits:
            break
        todo: dict[tuple[JsonPath, bool], str] = {}
        for f in hits:
            over = [(path, key) for start, end, path, key in leaves if start < f.end and f.start < end]
            for place in [p for p in over if not p[1]] or over:
                todo.setdefault(place, f.kind)
        changed = False
        # values first, then keys deepest first: renaming a key does not move what was replaced under it
        for (path, key), kind in sorted(todo.items(), key=lambda item: (item[0][1], -len(item[0][0]))):
            before = out
            out = _replace(out, path, key, marker(kind))
            if out is not before:  # a key is named as it is now: the report never shows it
                found.append(((*path[:-1], marker(kind)) if key else path, kind))
                changed = True
        if not changed:
            break
    return out, found


def json_path(text: str, at: int) -> JsonPath | None:
    """The path of the string of a JSON text (written as ``json.dumps(value, ensure_ascii=False)`` writes it) that
    character ``at`` is in; None when the text is not such JSON or ``at`` is in no string."""
    try:
        spanned, leaves = _spanned(json.loads(text))
    except (ValueError, RecursionError):
        return None
    if spanned != text:
        return None
    return next((path for start, end, path, _ in leaves if start <= at < end), None)


def _redact_strings(value: Any, path: JsonPath, found: list[tuple[JsonPath, str]], as_text: bool) -> Any:
    if isinstance(value, str):
        nested = _nested(value)
        if nested is not None:  # JSON in a string (a tool call's arguments): redacted as a document, with its keys
            try:
                inner, inner_found = redact_document(nested, as_text=as_text)
            except RecursionError:  # nested too deep to walk: redacted as text below
                inner_found = []
            if inner_found:
                found += [((*path, *p), kind) for p, kind in inner_found]
                return json.dumps(inner, ensure_ascii=False)
        r = redact(value)
        found += [(path, f.kind) for f in r.findings]
        return r.text
    if isinstance(value, list):
        return [_redact_strings(v, (*path, i), found, as_text) for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if isinstance(k, str):
                r = redact(k)
                key = r.text
                found += [((*path, key), f.kind) for f in r.findings]  # named redacted: the report never shows it
            else:
                key = k
            out[key] = _redact_strings(v, (*path, key), found, as_text)
        return out
    return value


_LINE_BREAK = re.compile(r"(\r\n|\r|\n)")


def _spanned(value: Any, *, lines: bool = False) -> tuple[str, list[tuple[int, int, JsonPath, bool]]]:
    """``json.dumps(value, ensure_ascii=False)`` and the span of each string in it: (start, end, path, is a key);
    ``lines``: each string's line breaks written as they are, not escaped."""
    parts: list[str] = []
    leaves: list[tuple[int, int, JsonPath, bool]] = []
    at = 0

    def put(s: str) -> None:
        nonlocal at
        parts.append(s)
        at += len(s)

    def string(s: str, path: JsonPath, key: bool) -> None:
        start = at
        if lines and ("\n" in s or "\r" in s):
            pieces = _LINE_BREAK.split(s)  # text, a break, text, ...: each text escaped, each break as it is
            put(
                '"'
                + "".join(p if n % 2 else json.dumps(p, ensure_ascii=False)[1:-1] for n, p in enumerate(pieces))
                + '"'
            )
        else:
            put(json.dumps(s, ensure_ascii=False))
        leaves.append((start, at, path, key))

    def walk(v: Any, path: JsonPath) -> None:
        if isinstance(v, str):
            string(v, path, False)
        elif isinstance(v, dict):
            put("{")
            for i, (k, x) in enumerate(v.items()):
                put(", " if i else "")
                if isinstance(k, str):
                    string(k, (*path, k), True)
                else:  # not from JSON text: written as json.dumps writes it
                    put(json.dumps({k: None})[1 : -len(": null}")])
                put(": ")
                walk(x, (*path, k))
            put("}")
        elif isinstance(v, list):
            put("[")
            for i, x in enumerate(v):
                put(", " if i else "")
                walk(x, (*path, i))
            put("]")
        else:
            put(json.dumps(v))

    walk(value, ())
    return "".join(parts), leaves


def _replace(value: Any, path: JsonPath, key: bool, new: str) -> Any:
    """``value`` with the string at ``path`` (the key itself when ``key``) replaced by ``new``; the same object when it
    is ``new`` already."""
    if not path:
        return value if value == new else new
    head, rest = path[0], path[1:]
    if isinstance(value, dict) and head in value:
        if key and not rest:
            if head == new:
                return value
            return {(new if k == head else k): v for k, v in value.items()}
        inner = _replace(value[head], rest, key, new)
        return value if inner is value[head] else {**value, head: inner}
    if isinstance(value, list) and isinstance(head, int) and 0 <= head < len(value):
        inner = _replace(value[head], rest, key, new)
        return value if inner is value[head] else [*value[:head], inner, *value[head + 1 :]]
    return value


def describe(text: str, found: list[Finding], *, limit: int = 3) -> str:
    """ "an AWS access key (line 2, characters 8-27) and a GitHub token (...)": kinds and places, never secrets."""
    return _listed([(f.kind, f.where(text)) for f in found], limit)


def describe_paths(found: list[tuple[JsonPath, str]], *, limit: int = 3) -> str:
    """ "a GitHub token (at tool_calls.0.function.arguments)": the kinds and paths ``redact_document`` gives."""
    return _listed([(kind, "at " + (".".join(map(str, path)) or "its top")) for path, kind in found], limit)


def _listed(found: list[tuple[str, str]], limit: int) -> str:
    named = [f"{_article(kind)} {kind} ({place})" for kind, place in found[:limit]]
    if len(found) > limit:
        named.append(f"{len(found) - limit} more")
    return named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]


def find_in_json(payload: str) -> tuple[list[tuple[JsonPath, str]], list[Finding]]:
    """What ``redact_json`` redacts in ``payload`` (a stored message's payload): the path and kind of each credential
    of a JSON document (``redact_document``: in its strings, or told by their keys), or the findings of text that is
    not JSON or nests too deep to walk, redacted as text; both empty when it holds none. A random-looking string of a
    document (a tool call's id, a reasoning signature) is an id, not a credential."""
    if not payload or redact_json(payload) == payload:
        return [], []
    try:
        found = redact_document(json.loads(payload))[1]
    except (ValueError, RecursionError):  # not JSON, or nested too deep to walk: redacted as text
        found = []
    return (found, []) if found else ([], find(payload))


def _article(kind: str) -> str:
    return "an" if kind[:1].lower() in "aeiou" or kind.startswith(("npm", "IBM")) else "a"


def refuse(text: str, where: str, *, before: str = "") -> None:
    """Raise ``SecretError`` when ``text`` holds a credential that ``before`` (the text it replaces) did not: the
    error names each kind and where it is in ``where`` (e.g. "the new value of block 'human'"), and what to do.
    A credential counts as held before when ``before`` holds it as a finding as many times (not as a part of a
    longer text: a key glued to a word before it, then sent alone, is a new one; a second copy of a key too)."""
    found = _new(text, before) if before else find(text)
    if not found:
        return
    raise SecretError(
        f"Refused: {where} would store {describe(text, found)}. Nothing was written. Keep credentials out of memory: "
        'store a description or a reference instead (for example "the deploy key is in the DEPLOY_KEY environment '
        'variable" or "see ~/.aws/credentials"), or remove the secret and send the rest again.'
    )


# An edit of a long text (an append to a block of 50 KB) is scanned around what changed, not whole: the part both
# texts share before and after the change was scanned when it was written. ``_MARGIN`` characters each side, out to
# whole lines, hold whatever a credential's cue and value need (a "Password:" line and the next); a text with a
# private key's BEGIN line (a block spans thousands of characters) or a JSON document (read whole) is scanned whole.
_WINDOWED_FROM, _MARGIN = 8_000, 2_000


def _shared_ends(a: str, b: str) -> tuple[int, int]:
    """The lengths of the prefix and the suffix ``a`` and ``b`` share (not overlapping), by halving: C-speed."""
    n = min(len(a), len(b))
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if a[:mid] == b[:mid] else (lo, mid - 1)
    prefix, room = lo, n - lo
    lo, hi = 0, room
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if a[len(a) - mid :] == b[len(b) - mid :] else (lo, mid - 1)
    return prefix, lo


def _changed(text: str, before: str) -> tuple[int, int, int] | None:
    """Where ``text`` differs from ``before``, with the margin: (start, end in ``text``, end in ``before``); None
    when both are to be scanned whole."""
    if len(text) < _WINDOWED_FROM or "-----BEGIN" in text or text.lstrip()[:1] in ("{", "["):
        return None
    prefix, suffix = _shared_ends(text, before)
    start = text.rfind("\n", 0, max(0, prefix - _MARGIN)) + 1
    end = text.find("\n", min(len(text), len(text) - suffix + _MARGIN))
    end = len(text) if end < 0 else end
    if start == 0 and end == len(text):
        return None
    return start, end, end - (len(text) - len(before))


def _new(text: str, before: str) -> list[Finding]:
    """The findings in ``text`` beyond those in ``before``, each secret compared whole (invisible characters aside)."""
    window = _changed(text, before)
    if window is None:
        return _new_whole(text, before)
    start, end, before_end = window
    found = _new_whole(text[start:end], before[start:before_end])
    return [Finding(f.kind, f.start + start, f.end + start) for f in found]


def _new_whole(text: str, before: str) -> list[Finding]:
    found = find(text)
    if not found:
        return []
    held = Counter(before[f.start : f.end].translate(_VISIBLE) for f in find(before))
    new: list[Finding] = []
    for f in found:
        secret = text[f.start : f.end].translate(_VISIBLE)
        if held[secret] > 0:
            held[secret] -= 1
        else:
            new.append(f)
    return new
