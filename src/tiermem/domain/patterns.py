"""The terms that rise in a period of the timeline (seed 000's "patterns"): pure functions over texts.

A period's items are compared with the other items of the range by the log-odds ratio with an informative
Dirichlet prior (Monroe, Colaresi and Quinn 2008, "Fightin' Words"): how much more often items of the period hold a
word than the other items do, as a z-score, so a word every period uses does not rise and a rare word needs a few
items before it does. Each item counts a word once; stopwords and very common conversational words are left out,
names kept (shown with their capital).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .search.query import STOPWORDS

MIN_RISING = 2  # items of the period that must hold a word before it can rise
PRIOR = 100.0  # the prior's total size, spread over the words as the whole range uses them
_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*[A-Za-z]")
# Words too common in conversation to say what a period was about (beside search/query.py's STOPWORDS)
_COMMON = frozenset(
    """like just really get got also one would know think yeah okay oh well thing things much many make made going
way even still want wanted let lot lots good great thanks thank sure right yes now then time day today see see
said says say something anything everything back new sounds sound glad hey hi hello feel feeling""".split()
)


@dataclass(frozen=True)
class Term:
    """A word that rises in a period: how many of the period's items hold it, and its z-score."""

    term: str
    count: int
    score: float

    def as_dict(self) -> dict[str, Any]:
        return {"term": self.term, "count": self.count, "score": round(self.score, 3)}


def words_of(text: str) -> dict[str, str]:
    """The words of ``text`` a period's terms are counted in, each once: lower-cased key -> the form first seen
    (a name keeps its capital). Stopwords, very common conversational words and words under three letters are
    left out."""
    out: dict[str, str] = {}
    for m in _WORD.finditer(text):
        word = m.group(0).strip("'-")
        key = word.lower()
        if len(key) < 3 or key in STOPWORDS or key in _COMMON or key.endswith("'s") and key[:-2] in STOPWORDS:
            continue
        key = key.removesuffix("'s")
        form = word.removesuffix("'s")
        if key not in out or (out[key].islower() and not form.islower()):
            out[key] = form
    return out


@dataclass
class Bag:
    """The words of some items: in how many items each occurs, and the forms it was written in."""

    counts: Counter[str] = field(default_factory=Counter)
    forms: dict[str, Counter[str]] = field(default_factory=dict)

    def add(self, doc: dict[str, str]) -> None:
        self.counts.update(doc.keys())
        for key, form in doc.items():
            self.forms.setdefault(key, Counter())[form] += 1


def bag_of(docs: Iterable[dict[str, str]]) -> Bag:
    out = Bag()
    for doc in docs:
        out.add(doc)
    return out


def rising_terms(inside: Sequence[dict[str, str]], outside: Sequence[dict[str, str]], most: int = 10) -> list[Term]:
    """The words whose share of ``inside``'s items is highest against ``outside``'s (each a document's
    ``words_of``): ``rising`` over their bags."""
    return rising(bag_of(inside), bag_of(outside).counts, most)


def rising(inside: Bag, outside: Counter[str], most: int = 10) -> list[Term]:
    """The words whose share of the ``inside`` items is highest against the ``outside`` items' (a word's count: the
    items holding it): the log-odds ratio with an informative Dirichlet prior, as a z-score (Monroe et al. 2008).
    With nothing outside to compare with, the words most of the items hold."""
    a, b = inside.counts, outside
    if most <= 0 or not a:
        return []

    def shown(key: str) -> str:
        return inside.forms[key].most_common(1)[0][0]

    n_a, n_b = sum(a.values()), sum(b.values())
    if not n_b:
        ranked = sorted((k for k in a if a[k] >= MIN_RISING), key=lambda k: (-a[k], k))
        return [Term(shown(k), a[k], 0.0) for k in ranked[:most]]
    total = n_a + n_b
    scored = []
    for key, y_a in a.items():
        if y_a < MIN_RISING:
            continue
        y_b = b.get(key, 0)
        alpha = PRIOR * (y_a + y_b) / total
        inner = math.log((y_a + alpha) / (n_a + PRIOR - y_a - alpha))
        outer = math.log((y_b + alpha) / (n_b + PRIOR - y_b - alpha))
        z = (inner - outer) / math.sqrt(1 / (y_a + alpha) + 1 / (y_b + alpha))
        if z > 0:
            scored.append((z, key))
    scored.sort(key=lambda s: (-s[0], s[1]))
    return [Term(shown(k), a[k], z) for z, k in scored[:most]]
