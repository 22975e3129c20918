"""Chinese, Japanese and Korean text for keyword search: overlapping character bigrams.

These scripts write words without spaces between them (Korean writes spaces, but its particles and endings are
attached: "서울에서" is "서울" + "에서"). The full-text index splits text at spaces and punctuation (LanceDB's
``simple`` tokenizer), so a clause of them is one token, never equal to a word asked for, and dropped when longer than
40 characters. Without a dictionary (none is downloaded: tiermem runs offline), the standard answer is the one
Lucene's CJK analyzer gives: each run of these characters also written as its overlapping bigrams ("特斯拉" ->
"特斯 斯拉"), so a word of two or more characters matches wherever it occurs, whatever surrounds it.

- ``keyword_text``: a row's keyword text, with the bigrams (and the single characters, so that a one-character query
  matches too) on a last line after ``MARK``, and the letters or digits glued to those characters ("沪A12345" ->
  "a12345"); a text without such characters is returned unchanged (English rows are stored as before).
- ``keyword_query``: the keyword leg's query, the same way (bigrams only: a single character of a longer word matches
  too much).
- ``grams``: the words ``query.terms`` counts of one such word (coverage, the sittings' BM25).
- ``word_count``: the ranker's ``length`` feature's word count (a Chinese or Japanese character counts half a word).
- ``base_of``: the text a keyword text was made from. A stored keyword text holding such a character (``CHARACTERS``)
  and no line of bigrams (``records.KEYWORD_LINE``) predates this: ``tiermem doctor`` asks the store for those rows,
  ``tiermem optimize`` writes them anew.

Only the first ``MAX_CHARS`` characters of a text are written as bigrams, here and in ``query.terms``: a longer text's
further words count as whole runs, as before bigrams (its keyword text would otherwise be about six times its length,
and its terms a list of as many bigrams as it has characters: 1,000,000 characters took 1.9 s and 158 MB to write,
2.6 s to rank). ``MAX_CHARS`` is ``max_content_chars``' default: a row within the default limit is found by every word.
Pure functions over text; no I/O.
"""

from __future__ import annotations

import re

from ...base.records import KEYWORD_LINE

# Han (with the CJK extensions and compatibility ideographs), kana (with the half-width forms) and the iteration
# marks: written without spaces between words; Hangul (syllables and jamo) writes spaces between words.
_UNSPACED_CHARS = (
    "\u3005-\u3007\u3040-\u309f\u30a0-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    "\uff66-\uff9f\U00020000-\U0003134f"
)
_CJK = _UNSPACED_CHARS + "\uac00-\ud7a3\u1100-\u11ff\u3130-\u318f"
CHARACTERS = f"[{_CJK}]"  # a regular expression (Python's and LanceDB's) matching one such character
MAX_CHARS = 100_000  # the characters of a text written as bigrams (the rest: whole runs)
_RUN = re.compile(f"[{_CJK}]+")
_PIECES = re.compile(f"([{_CJK}]+)")
_UNSPACED = re.compile(f"[{_UNSPACED_CHARS}]")
_WORD = re.compile(r"\w+")

_LINE = KEYWORD_LINE  # the keyword text's last line of bigrams starts with it
MARK = _LINE.strip()  # "␟": no word character, never indexed


def has_cjk(text: str) -> bool:
    """Whether ``text`` holds a Chinese, Japanese or Korean character."""
    return _RUN.search(text) is not None


def grams(word: str, *, unigrams: bool = False) -> list[str]:
    """The pieces of one word (a run of word characters) holding such characters: each run of them as its overlapping
    bigrams (a run of one as itself; with ``unigrams``, every character as well), and the letters or digits glued to
    them as they are."""
    if len(word) > 1 and _RUN.fullmatch(word) is not None and not unigrams:  # the common case: one run alone
        return [word[i : i + 2] for i in range(len(word) - 1)]
    out: list[str] = []
    for piece in _PIECES.split(word):
        if not piece:
            continue
        if _RUN.fullmatch(piece) is None:
            out.append(piece)
        elif len(piece) == 1:
            out.append(piece)
        else:
            out += [piece[i : i + 2] for i in range(len(piece) - 1)]
            if unigrams:
                out += list(piece)
    return out


def _expanded(text: str, unigrams: bool) -> list[str]:
    """The pieces of the words of ``text``'s first ``MAX_CHARS`` characters that hold such characters."""
    return [g for w in _WORD.findall(text[:MAX_CHARS]) if has_cjk(w) for g in grams(w, unigrams=unigrams)]


def keyword_text(base: str) -> str:
    """The keyword-indexed text of ``base``: ``base`` itself when its first ``MAX_CHARS`` characters hold no Chinese,
    Japanese or Korean character; else ``base`` and a last line, after ``MARK``, of those characters' bigrams, the
    characters and the letters or digits glued to them."""
    if not has_cjk(base[:MAX_CHARS]):
        return base
    return f"{base}{_LINE}{' '.join(_expanded(base, unigrams=True))}"


def keyword_query(text: str) -> str:
    """The keyword leg's query for ``text``: ``text`` itself, and the bigrams of its Chinese, Japanese or Korean words
    (a word of one character as itself) and the letters or digits glued to them (of its first ``MAX_CHARS``
    characters)."""
    if not has_cjk(text[:MAX_CHARS]):
        return text
    return f"{text} {' '.join(_expanded(text, unigrams=False))}"


def base_of(text: str) -> str:
    """The text a keyword text was made from (``keyword_text``'s last line taken off)."""
    base, line, _ = text.rpartition(_LINE)
    return base if line else text


def word_count(text: str) -> int:
    """How many words ``text`` holds: its pieces between spaces, and half a word for each Chinese or Japanese
    character (written without spaces; about two characters a word). A text without them: ``len(text.split())``."""
    words = len(text.split())
    if not has_cjk(text):
        return words
    return words + (len(text) - len(_UNSPACED.sub("", text))) // 2  # no list of the characters
