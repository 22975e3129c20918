"""What an import redacted: each credential in a file's content is replaced by ``[redacted: KIND]`` as it enters
memory (``Memory.scrub``; docs/security.md), and the import report says where and how many, per kind, never the
secrets themselves. ``Redactions`` counts with the same finders the redaction uses (``secrets.find`` for a text,
``secrets.redact_document`` for a JSON document), at the places the import scrubs, and nothing when the store does
not scan (``secret_scan`` off).
"""

from __future__ import annotations

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

    def document(
        self, owner: str, place: str, value: Any, skip: frozenset[str] = frozenset(), *, as_text: bool = False
    ) -> None:
        """Count the credentials of a JSON value as its redaction finds them (``secrets.redact_document``: in its
        strings, or told by their keys, ``{"password": "..."}``; ``as_text`` for metadata), each at its path under
        ``place`` (``tools[web_lookup].source_code``: a list item is named by its ``name``, ``label`` or ``id``);
        paths in ``skip``, and under them, are left out (a copy of a text counted elsewhere)."""
        if not self.scanning:
            return
        for path, kind in secrets.redact_document(value, as_text=as_text)[1]:
            where = _place(value, place, path)
            if not any(where == s or where.startswith((f"{s}.", f"{s}[")) for s in skip):
                self._texts[(owner, where, kind)] += 1

    def message(self, owner: str, content: object, payload: object) -> None:
        """Count one message (its content and its payload, as their redaction finds them) once per kind it holds."""
        if not self.scanning:
            return
        kinds = {f.kind for f in secrets.find(content)} if isinstance(content, str) and content else set()
        if isinstance(payload, str) and payload:
            found, in_text = secrets.find_in_json(payload)  # as ``secrets.redact_json`` redacts it
            kinds |= {kind for _, kind in found} | {f.kind for f in in_text}
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


def _place(value: Any, place: str, path: secrets.JsonPath) -> str:
    """``path`` in ``value`` written under ``place``: ``place.key``, ``place[NAME]`` for a list item (its ``name``,
    ``label`` or ``id``, else its position; redacted: the report never shows a credential)."""
    for step in path:
        if isinstance(value, list) and isinstance(step, int) and 0 <= step < len(value):
            item = value[step]
            name = next((item[k] for k in ("name", "label", "id") if isinstance(item, dict) and item.get(k)), step)
            place, value = f"{place}[{secrets.redact(str(name)).text}]", item  # a name holding one: redacted
        else:
            place = f"{place}.{step}" if place else str(step)
            value = value.get(step) if isinstance(value, dict) else None
    return place
