"""The credential formats detect-secrets lacks, as detectors: vendors' keys (Anthropic, OpenAI, GitHub, Google,
Slack, Stripe, Hugging Face, npm, GitLab), private key blocks (PEM, PGP, PuTTY), AWS secret keys outside quotes,
payment card and social security numbers and password hashes (``secret_numbers``, ``secret_shapes``), ``.netrc``
entries, passwords in code, in URLs and on command lines, Basic and bearer tokens, Azure keys, Discord webhooks and
``.env``-style assignments. Each a pattern with its kind; ``secret_scan`` runs them in their order (their rank)."""

from __future__ import annotations

import re
from collections.abc import Callable

from . import secret_numbers as numbers
from . import secret_shapes as shapes
from .secret_detector import Detector
from .secret_values import (
    basic_credentials,
    given_password,
    letters_and_digits,
    mixed_case_and_digits,
    not_constant,
    not_constant_name,
    not_placeholder,
    not_placeholder_nor_question,
)

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
# digits last or not; a PASS or PW name's is a constant's only when it ends with a letter (``not_constant``).
_PASS_NAMES = r"PASS(?<![A-Za-z]PASS)|PW(?<![A-Za-z]PW)"
_AUTH_NAMES = r"AUTH(?<![A-Za-z]AUTH)"
_ENV_SHORT = r"(?:NAMES)" + _ENV_SUFFIX + r" ?=(?!=)"
_ENV_SHORT_KEY = r"(?i:NAMES)[\"']\s*:\s*([\"'])([^\"'\n]{4,})\1"
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
# A password given to a command, within that one command (a line, or lines joined by "\"): the value alone, quoted
# or not (group 2)
_SAME_COMMAND = r"(?:[^\n;|&]|&(?!&)|\\\n){0,400}?\s"
_ARGUMENT = r"([\"']?)([^\s\"']+)\1"


def keys() -> list[Detector]:
    """Vendors' keys, private key blocks and AWS secret keys."""
    c = re.compile
    d = Detector

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
            check=letters_and_digits,
        ),
        d(
            "OpenAI API key",
            c(_NOT_GLUED + r"sk-[A-Za-z0-9]{32,}(?![A-Za-z0-9_\-])"),
            ("sk-",),
            check=letters_and_digits,
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
            check=letters_and_digits,
        ),
        d(
            "Google OAuth refresh token",
            c(_NOT_GLUED + r"1//0[0-9A-Za-z_\-]{40,}(?![0-9A-Za-z_\-])"),
            ("1//0",),
            check=letters_and_digits,
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
            check=mixed_case_and_digits,
            per_line=True,
        ),
    ]


def numbers_and_hashes() -> list[Detector]:
    """Payment card and US social security numbers (``secret_numbers``), password hashes (``secret_shapes``)."""
    c = re.compile
    d = Detector

    return [
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
    ]


def given() -> list[Detector]:
    """Passwords given in ``.netrc`` entries, code, URLs and command lines; Basic and bearer tokens, Azure keys, Discord
    webhooks, ``.env``-style assignments."""
    c = re.compile
    d = Detector

    def command_line(
        pattern: str,
        needles: tuple[str, ...],
        *,
        check: Callable[[str], bool] = given_password,
        min_chars: int = 1,
        names: bool = False,
    ) -> Detector:
        """A password given to a command: its value is group 2 (``_ARGUMENT``'s), a password's rules by default."""
        return d(
            "password on a command line", c(pattern), needles, group=2, check=check, min_chars=min_chars, names=names
        )

    return [
        d(  # a .netrc entry: "machine api.example.com login bob password ..." (on one line or several)
            "password",
            c(
                r"(?:machine(?<!\wmachine)\s+\S+|default(?<!\wdefault))\s+login\s+\S+(?:\s+account\s+\S+)?\s+password\s+"
                r"([\"']?)([^\s\"']+)\1"
            ),
            ("login",),
            group=2,
            check=given_password,
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
            check=given_password,
            min_chars=1,
        ),
        d(  # "Authorization: Basic dXNlcjpw...": base64 of "user:password"
            "Basic auth credential",
            c(r"(?i:basic)(?<!\w.....)\s+([A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])"),
            ("basic",),
            group=1,
            check=basic_credentials,
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
            check=given_password,
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
            check=not_placeholder,
            min_chars=Detector.min_chars,
            names=True,
        ),
        d(
            "bearer token",
            c(r"(?i:\bbearer)\s+([A-Za-z0-9_\-.=~+/]{20,})"),
            ("bearer",),
            group=1,
            check=letters_and_digits,
            specific=False,
        ),
        d(
            "secret",
            c(_ENV_NAME + r"[\"']?\s*[:=]" + _ENV_VALUE),
            _ENV_NEEDLES,
            group="value",
            check=not_placeholder_nor_question,
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
                (_PASS_NAMES, ("pass", "pw"), not_constant),
                (_AUTH_NAMES, ("auth",), not_constant_name),
            )
            for pattern, ends, group in (
                (_ENV_SHORT + _ENV_VALUE, ("=", " =", "_"), "value"),
                (_ENV_SHORT_KEY, ('"', "'"), 2),
            )
        ),
    ]
