"""Credentials in a JSON document: each string and each key redacted as text, then the document read whole as its
JSON text, where a key says what its value is (``{"password": "..."}``); a tool call's arguments (JSON in a string)
as a document of their own. ``redact_json`` for a stored payload, ``redact_document`` for a parsed value,
``find_in_json`` for what they would redact, ``json_path`` for where a character of such a text is."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from .secret_scan import Finding, find, marker, redact


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
