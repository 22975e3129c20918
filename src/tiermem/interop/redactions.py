"""What an import redacted: each credential in a file's content is replaced by ``[redacted: KIND]`` as it enters
memory (``Memory.scrub``; docs/security.md), and the import report says where and how many, per kind, never the
secrets themselves. ``Redactions`` counts with the same finder the redaction uses (``secrets.find``), at the places
the import scrubs, and nothing when the store does not scan (``secret_scan`` off).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from ..domain import secrets


class Redactions:
    """Counts, per owner (an agent's or folder's name), place and kind: credentials in texts, or the messages
    holding one."""

    def __init__(self, scanning: bool) -> None:
        self.scanning = scanning
        self._texts: Counter[tuple[str, str, str]] = Counter()  # (owner, place, kind) -> credentials
        self._messages: Counter[tuple[str, str]] = Counter()  # (owner, kind) -> messages holding one

    def text(self, owner: str, place: str, text: object) -> None:
        """Count the credentials of ``text`` (a string; anything else holds none) as found at ``place``."""
        if self.scanning and isinstance(text, str) and text:
            for f in secrets.find(text):
                self._texts[(owner, place, f.kind)] += 1

    def document(self, owner: str, place: str, value: Any, skip: frozenset[str] = frozenset()) -> None:
        """Count the credentials of every string in a JSON value, each at its path under ``place``
        (``tools[web_lookup].source_code``: a list item is named by its ``name``, ``label`` or ``id``); paths in
        ``skip`` are left out (a copy of a text counted elsewhere)."""
        if not self.scanning:
            return
        if isinstance(value, str):
            if place not in skip:
                self.text(owner, place, value)
        elif isinstance(value, dict):
            for k, v in value.items():
                self.document(owner, f"{place}.{k}" if place else str(k), v, skip)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                name = next((v[k] for k in ("name", "label", "id") if isinstance(v, dict) and v.get(k)), i)
                self.document(owner, f"{place}[{name}]", v, skip)

    def message(self, owner: str, content: object, payload: object) -> None:
        """Count one message (its content and every string of its payload) once per kind it holds."""
        if not self.scanning:
            return
        kinds = {f.kind for f in secrets.find(content)} if isinstance(content, str) and content else set()
        kinds |= {kind for text in _strings(payload) for kind in (f.kind for f in secrets.find(text))}
        for kind in kinds:
            self._messages[(owner, kind)] += 1

    def notes(self) -> list[str]:
        """One note per owner, place and kind, with its count ("Wren: credentials redacted in the system prompt:
        GitHub token (1)")."""
        out = [
            f"{owner}: credentials redacted in {place}: {kind} ({n}), each now [redacted: {kind}]"
            for (owner, place, kind), n in self._texts.items()
        ]
        out += [
            f"{owner}: credentials redacted in messages: {kind} ({n} message{'s' if n > 1 else ''}), each now "
            f"[redacted: {kind}]"
            for (owner, kind), n in self._messages.items()
        ]
        return out


def _strings(payload: object) -> list[str]:
    """Every string of a JSON document given as text (the text itself when it is not JSON)."""
    if not isinstance(payload, str) or not payload:
        return []
    try:
        value = json.loads(payload)
    except ValueError:
        return [payload]
    found: list[str] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            found.append(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return found
