"""The name a core-memory block gives its subject: the user's in ``human``, the agent's own in ``persona``.

Hosts log turns by role (``user`` / ``assistant``) without names, while questions name people ("What did
Caroline research?"); search maps a name in the query to the role whose block carries it. Pure text rules:
"Name: Caroline", "The user's name is Caroline", "My name is Sam", "I am Sam", "Call me Sam", "Caroline is ...".
"""

from __future__ import annotations

import re

_NAME = r"(?P<name>[A-Z][\w'-]*(?:[ \t]+[A-Z][\w'-]*)?)"
_RULES = (
    re.compile(r"^[ \t*_-]*(?:full[ \t]+|first[ \t]+|preferred[ \t]+)?name[ \t*_]*[:=-][ \t*_]*" + _NAME, re.I | re.M),
    re.compile(r"\b(?i:name(?:'s| is))[ \t]+" + _NAME),
    re.compile(r"\b(?i:I am|I'm|call me|goes by|called|named)[ \t]+" + _NAME),
    re.compile(r"\A\s*" + _NAME + r"[ \t]+(?:is|was|has|works|lives|likes|loves|prefers)\b"),
)
_NOT_NAMES = {
    "the",
    "a",
    "an",
    "i",
    "my",
    "user",
    "human",
    "assistant",
    "agent",
    "unknown",
    "not",
    "none",
    "n/a",
    "he",
    "she",
    "they",
    "this",
    "that",
    "it",
    "you",
    "we",
}


def name_in(text: str) -> str | None:
    """The first name-like phrase ``text`` gives as its subject's name, else None."""
    for rule in _RULES:
        for m in rule.finditer(text):
            words = m.group("name").split()
            while words and words[-1].lower() in _NOT_NAMES:
                words.pop()
            if words and words[0].lower() not in _NOT_NAMES:
                return " ".join(words)
    return None
