"""Credentials in text: found, redacted, or refused, so memory never becomes a second copy of a secret.

``find(text)`` returns each credential's exact character span and a kind a person understands ("AWS access key").
``redact(text)`` replaces each span with ``[redacted: KIND]``. ``refuse(text, where)`` raises ``SecretError``
naming the kind and where it is (line, characters), never the secret itself. ``redact_json``, ``redact_document``
and ``find_in_json`` do the same for a JSON document (``secret_json``).

The detector is the maintained PyPI ``detect-secrets``: its plugins run in process on the text (no network, no baseline
files, no verification; configured explicitly, plugin by plugin, in ``secret_plugins``), plus the well-known formats it
lacks (``secret_formats``: Anthropic and current OpenAI keys, fine-grained GitHub tokens, Google API keys and OAuth
access and refresh tokens, PEM and PGP private key blocks, AWS secret keys outside quotes, ``.env``-style assignments,
passwords on command lines and in ``.netrc`` entries, Basic and bearer tokens, payment card and social security
numbers, password hashes), credentials said in a sentence (``secret_said``: passwords, passphrases of several words,
passwords said in other languages, PINs, keys after their name); a few of its own are replaced (JWTs, passwords in
URLs). Vendor keys are found glued to the text before them where their prefix is distinctive, with invisible
characters inside, and in pieces (``secret_joins``). A value given to a secret's name that names one instead (a
variable or an environment variable's name outside quotes, a call, a subscript, a shell's command, a secret manager's
reference) is no secret (``secret_values``), and a span never takes the code's punctuation after a bare value
(``secret_scan``, which runs the detectors). AWS's documentation's example keys are left alone. False positives are
measured on LoCoMo's turns (``python -m bench secrets``).

Pure and fast: nothing is imported or compiled until the first call (``secret_scan.detectors``, cached); a typical
prompt takes well under a millisecond, 100k characters a few milliseconds (a cheap prefilter skips most detectors).
This module is the face the rest of tiermem imports (``from . import secrets``): what a caller uses, and ``refuse``
with its scan of an edit around what changed.
"""

from __future__ import annotations

from collections import Counter

from ..base.errors import SecretError
from .secret_json import JsonPath, find_in_json, json_path, redact_document, redact_json
from .secret_scan import VISIBLE, Finding, Redacted, find, marker, prepare, redact

__all__ = [
    "Finding",
    "JsonPath",
    "Redacted",
    "describe",
    "describe_paths",
    "find",
    "find_in_json",
    "json_path",
    "marker",
    "prepare",
    "redact",
    "redact_document",
    "redact_json",
    "refuse",
]


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
    held = Counter(before[f.start : f.end].translate(VISIBLE) for f in find(before))
    new: list[Finding] = []
    for f in found:
        secret = text[f.start : f.end].translate(VISIBLE)
        if held[secret] > 0:
            held[secret] -= 1
        else:
            new.append(f)
    return new
