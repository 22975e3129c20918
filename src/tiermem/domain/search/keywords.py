"""Words as the keyword index reads them, so that what the ranking counts as a word of the query found in a row
(``ranking.coverage``) is what the keyword leg matched.

LanceDB's full-text index (``store.indexes``: ``FTS()`` with its defaults) splits text on what is not a letter or a
digit, lower-cases each token, stems it with the Snowball English stemmer and folds accented Latin letters to ASCII:
to it "peanuts" is "peanut", "meetings" "meeting", "named" "name", "München" "munchen" and "café" "cafe". ``forms``
does the same to words already split and lower-cased (``query.terms``): the same stemmer (``py_rust_stemmers`` wraps
the Rust crate the index's tokenizer uses), then the same folding, in the index's order. Pure functions; the stemmer is
loaded on first use.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from functools import cache, lru_cache
from typing import Any

from .query import STOPWORDS

# Latin letters that do not decompose into an ASCII letter and a mark (as the index's ASCII folding writes them)
_LETTERS = str.maketrans(
    {"ß": "ss", "æ": "ae", "œ": "oe", "ø": "o", "ł": "l", "đ": "d", "ð": "d", "þ": "th", "ı": "i", "ħ": "h", "ŧ": "t"}
)


def forms(words: Iterable[str]) -> set[str]:
    """The index's forms of lower-cased ``words`` (``query.terms``): each split where the index splits it (an
    underscore joins no word: "retry_backoff_ms" is "retry", "backoff" and "ms"), ``STOPWORDS`` left out, stemmed,
    folded."""
    return {form(part) for part in _parts(words)}


def written(words: Iterable[str]) -> set[str]:
    """Lower-cased ``words`` as written, but split and folded as the index splits and folds them (not stemmed):
    "München" and "Munchen" are one word, "peanut" and "peanuts" two."""
    return {fold(part) for part in _parts(words)}


def _parts(words: Iterable[str]) -> Iterable[str]:
    for word in words:
        for part in word.split("_"):
            if part and part not in STOPWORDS:
                yield part


@lru_cache(maxsize=65536)
def form(word: str) -> str:
    """One lower-cased word as the index stores it: stemmed, then its accented Latin letters folded to ASCII."""
    return fold(str(_stemmer().stem_word(word)))


def fold(word: str) -> str:
    """``word`` with its accented Latin letters written in ASCII ("münchen" -> "munchen", "straße" -> "strasse");
    letters of other scripts are kept as they are (the index folds Latin letters only)."""
    if word.isascii():
        return word
    out = []
    for ch in word.translate(_LETTERS):
        if ch.isascii() or not _latin(ch):
            out.append(ch)
            continue
        base = "".join(c for c in unicodedata.normalize("NFKD", ch) if not unicodedata.combining(c))
        out.append(base if base.isascii() and base else ch)
    return "".join(out)


def _latin(ch: str) -> bool:
    """Whether ``ch`` is a Latin letter beyond ASCII (Latin-1 Supplement to Latin Extended Additional)."""
    return 0xC0 <= ord(ch) <= 0x24F or 0x1E00 <= ord(ch) <= 0x1EFF


@cache
def _stemmer() -> Any:
    from py_rust_stemmers import SnowballStemmer

    return SnowballStemmer("english")
