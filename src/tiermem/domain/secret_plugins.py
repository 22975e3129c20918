"""detect-secrets' plugins, configured explicitly, plugin by plugin: its regex plugins run with ``finditer`` for
exact spans, its keyword plugin's quoted-assignment patterns, and its base64 entropy plugin on quoted strings of 20+
characters with letters and digits above its entropy limit (the hex one would flag quoted git SHAs and digests;
Subresource Integrity digests are left alone). Its IP-address plugin is left out (an address is not a credential);
its private-key, basic-auth and JWT plugins are replaced by ``secret_formats``'s. Imported on first use only."""

from __future__ import annotations

import re
from typing import Any

from .secret_detector import Detector
from .secret_values import letters_and_digits, not_placeholder_nor_question

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


def plugin_detectors() -> list[Detector]:
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
    out: list[Detector] = []
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
                Detector(
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
        Detector(
            _KINDS["JSON Web Token"],
            re.compile(r"eyJ[A-Za-z0-9_=-]+\.[A-Za-z0-9_=-]+(?:\.\.?[A-Za-z0-9_+/=-]+){0,3}"),
            ("eyj",),
            check=lambda token: is_jwt(".".join(token.split(".")[:2])),  # header and payload: JSON in base64
        )
    )  # header.payload.signature (a JWE's five segments too), each redacted: the signature is what proves it
    for pattern, group in keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP.items():
        out.append(
            Detector(
                _KINDS["Secret Keyword"],
                pattern,
                _KEYWORD_NEEDLES,
                group=group,
                check=not_placeholder_nor_question,
                specific=False,
                per_line=True,
                names=True,
                # the name first (its keyword group 1), or last: "value" == my_password
                name_group=1 if pattern.pattern.startswith(f"({keyword.DENYLIST[0]}") else pattern.groups,
            )
        )
    entropy = high_entropy_strings.Base64HighEntropyString(limit=_ENTROPY_LIMIT)
    out.append(
        Detector(
            _KINDS["Base64 High Entropy String"],
            entropy.regex,
            ("'", '"'),
            group=2,
            specific=False,
            check=lambda s: (
                len(s) >= _ENTROPY_MIN_CHARS
                and letters_and_digits(s)
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
    ``secret_scan._trim``."""
    return 0 if plugin in _WHOLE_MATCH else pattern.groups
