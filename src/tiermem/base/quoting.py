"""Text a person marked private, and stored text quoted back to a model as data.

``<private>...</private>`` spans (any letter case, several, nested; an unclosed ``<private>`` runs to the end of the
text) are what a person asked not to be remembered: ``drop_private`` puts ``PRIVATE_MARK`` in each one's place before
a turn is logged, so the conversation still reads and nothing of the span is kept; ``without_private`` removes them
with no mark (the text a recall searches with).

``neutral`` makes stored text safe to quote inside a frame of tags: ``&``, ``<`` and ``>`` become ``&amp;``, ``&lt;``
and ``&gt;``, so a stored ``</memory>`` or ``<system>`` is shown, never parsed, and cannot close the frame it is quoted
in. Standard library only.
"""

from __future__ import annotations

import re

PRIVATE_MARK = "[private: not kept]"
_TAG = re.compile(r"<\s*(/?)\s*private\b[^<>]*>", re.IGNORECASE)


def _spans(text: str) -> list[tuple[int, int, bool]]:
    """The private spans of ``text`` as (start, end, True), tags included: outermost spans only (a nested span is
    inside its parent's); a closing tag with no span open is (start, end, False): the tag alone goes."""
    spans: list[tuple[int, int, bool]] = []
    depth, start = 0, 0
    for tag in _TAG.finditer(text):
        if not tag.group(1):  # <private>
            if depth == 0:
                start = tag.start()
            depth += 1
        elif depth:  # </private>
            depth -= 1
            if depth == 0:
                spans.append((start, tag.end(), True))
        else:  # a stray </private>
            spans.append((tag.start(), tag.end(), False))
    if depth:
        spans.append((start, len(text), True))  # unclosed: everything after it is private
    return spans


def drop_private(text: str, mark: str = PRIVATE_MARK) -> str:
    """``text`` with each private span replaced by ``mark`` (a stray closing tag removed); unchanged without any."""
    if "<" not in text or not _TAG.search(text):
        return text
    parts: list[str] = []
    at = 0
    for start, end, private in _spans(text):
        parts.append(text[at:start])
        if private:
            parts.append(mark)
        at = end
    parts.append(text[at:])
    return "".join(parts)


def without_private(text: str) -> str:
    """``text`` with every private span removed, leaving no mark (what a search for it may use)."""
    return drop_private(text, "")


def has_private(text: str) -> bool:
    return bool(_TAG.search(text))


def neutral(text: str) -> str:
    """``text`` with ``&``, ``<`` and ``>`` escaped: no markup in it can open or close a tag around it."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def attribute(value: str) -> str:
    """``value`` as the double-quoted value of an attribute: ``neutral``, with ``"`` escaped too."""
    return '"' + neutral(value).replace('"', "&quot;") + '"'
