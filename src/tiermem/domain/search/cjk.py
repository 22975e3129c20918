"""Text of the scripts written without spaces between words, for keyword search: overlapping bigrams.

Chinese and Japanese write words without spaces between them, and so do Thai, Lao, Burmese and Khmer (Korean writes
spaces, but its particles and endings are attached: "서울에서" is "서울" + "에서"). The full-text index splits text at
spaces and punctuation (LanceDB's ``simple`` tokenizer), so a clause of them is one token, never equal to a word asked
for, and dropped when longer than 40 characters. Without a dictionary (none is downloaded: tiermem runs offline), the
standard answer is the one Lucene's CJK analyzer gives: each run of these characters also written as its overlapping
bigrams ("特斯拉" -> "特斯 斯拉"), so a word of two or more characters matches wherever it occurs, whatever surrounds it.

Thai, Lao, Burmese and Khmer write a vowel sign or a tone mark as a code point of its own after the letter it sits on.
A unit of their bigrams is a letter with the marks after it ("ถั่ว": "ถั่" and "ว"), less the marks the index splits
words at (neither letters nor digits to it: tone marks, Burmese's asat and virama, Khmer's coeng): "แพ้ถั่ว" ->
"แพ พถั ถัว". Bigrams of code points would hold those marks, and the index would cut them into pieces of one letter that
match any text of the script ("พ้ถ" -> "พ", "ถ"); of code points without them, a vowel sign would pair with the next
letter ("ัว"). On 17 facts (ten in Thai, six in Lao, Khmer and Burmese) and 32 words asked, each form found every
fact asked for; the other facts matched: 64 by code points, 42 by code points without those marks, 32 by units. The
price: words that differ by a tone mark alone share their bigrams (ข่าว "news", ข้าว "rice", ขาว "white"); the vector
leg tells them apart. A word of one unit is not written alone (Chinese characters are): it is rarely a word of its own.

- ``keyword_text``: a row's keyword text, with the bigrams (and the single Chinese, Japanese or Korean characters, so
  that a one-character query matches too) on a last line after ``MARK``, and the letters or digits glued to those
  characters ("沪A12345" -> "a12345"); a text without such characters is returned unchanged (English rows are stored
  as before).
- ``keyword_query``: the keyword leg's query, the same way (bigrams only: a single character of a longer word matches
  too much).
- ``grams``: the words ``query.terms`` counts of one such word (coverage, the sittings' BM25); ``WORD``: a word there
  (``re``'s ``\\w`` leaves out those scripts' marks).
- ``lone``: a query's word of one Chinese, Japanese or Korean character, which a row's bigrams do not hold: the
  ranking's ``coverage`` looks for it in the row's text.
- ``word_count``: the ranker's ``length`` feature's word count (a Chinese or Japanese character counts half a word,
  a piece of Thai, Lao, Burmese or Khmer a word for every three letters begun: ``SEA_WORD_LETTERS``).
- ``base_of``: the text a keyword text was made from. A stored keyword text matching one of ``scripts`` and a line
  of bigrams (``records.KEYWORD_LINE``) that does not, or no line, predates their bigrams: ``tiermem doctor`` asks
  the store for those rows, ``tiermem optimize`` writes them anew.

Only the first ``MAX_CHARS`` characters of a text are written as bigrams, here and in ``query.terms``: a longer text's
further words count as whole runs, as before bigrams (its keyword text would otherwise be about six times its length,
and its terms a list of as many bigrams as it has characters: 1,000,000 characters took 1.9 s and 158 MB to write,
2.6 s to rank). ``MAX_CHARS`` is ``max_content_chars``' default: a row within the default limit is found by every word.
Pure functions over text; no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache

from ...base.records import KEYWORD_LINE

# Han (with the CJK extensions and compatibility ideographs), kana (with the half-width forms) and the iteration
# marks: written without spaces between words; Hangul (syllables and jamo) writes spaces between words.
_UNSPACED_CHARS = (
    "\u3005-\u3007\u3040-\u309f\u30a0-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    "\uff66-\uff9f\U00020000-\U0003134f"
)
_CJK = _UNSPACED_CHARS + "\uac00-\ud7a3\u1100-\u11ff\u3130-\u318f"
# Thai, Lao, Burmese (Myanmar) and Khmer, also written without spaces between words: their letters and digits, and
# their combining marks (vowel signs, tone marks: code points of their own, after the letter they sit on); not their
# punctuation (Thai "฿ ๏ ๚ ๛", Burmese "၊ ။", Khmer "។ ៕ ..."), which ends a run as a space does
_SEA_LETTERS = (
    "\u0e01-\u0e30\u0e32\u0e33\u0e40-\u0e46\u0e50-\u0e59\u0e81-\u0eb0\u0eb2\u0eb3\u0ebd-\u0ec6\u0ed0-\u0edf"
    "\u1000-\u102a\u103f-\u1049\u1050-\u1055\u105a-\u105d\u1061\u1065\u1066\u106e-\u1070\u1075-\u1081\u108e"
    "\u1090-\u1099\u1780-\u17b3\u17d7\u17dc\u17e0-\u17e9\u17f0-\u17f9"
)
_MARKS = (
    "\u0e31\u0e34-\u0e3a\u0e47-\u0e4e\u0eb1\u0eb4-\u0ebc\u0ec8-\u0ece\u102b-\u103e\u1056-\u1059\u105e-\u1060"
    "\u1062-\u1064\u1067-\u106d\u1071-\u1074\u1082-\u108d\u108f\u109a-\u109d\u17b4-\u17d3\u17dd"
)
# Of those marks, the ones the full-text index splits words at (neither letters nor digits to it: the tone marks,
# Burmese's dot below, virama and asat, Khmer's coeng and its signs): a bigram holding one would be indexed as two
# pieces of a letter or so each, which match any text of the script, so a bigram is written without them
_SPLITTING = "\u0e47-\u0e4c\u0e4e\u0eba\u0ec8-\u0ecc\u1037\u1039\u103a\u17b4\u17b5\u17c9-\u17d3\u17dd"
_SEA = _SEA_LETTERS + _MARKS
CHARACTERS = f"[{_CJK}{_SEA}]"  # a regular expression (Python's and LanceDB's) matching one such character
MAX_CHARS = 100_000  # the characters of a text written as bigrams (the rest: whole runs)
_RUN = re.compile(CHARACTERS + "+")
_CJK_RUN = re.compile(f"[{_CJK}]+")
_SEA_RUN = re.compile(f"[{_SEA}]+")
_PIECES = re.compile(f"([{_CJK}]+|[{_SEA}]+)")
_UNIT = re.compile(f"[^{_MARKS}][{_MARKS}]*|[{_MARKS}]+")  # a letter and the marks after it (or stray marks)
_SPLIT = re.compile(f"[{_SPLITTING}]")
_UNSPACED = re.compile(f"[{_UNSPACED_CHARS}]")
_SEA_LETTER = re.compile(f"[{_SEA_LETTERS}]")
# The letters (with the marks on them: ``_units``) of a Thai, Lao, Burmese or Khmer word, about: 3.2 in 45 Thai words
# of everyday sentences, 2.8 in Lao, 2.4 in Burmese and in Khmer (ten words each)
SEA_WORD_LETTERS = 3
# A word: word characters, and those scripts' marks, which ``re`` does not count as word characters ("แพ้ถั่ว" would
# be the words "แพ", "ถ" and "ว")
WORD, WORD_START = re.compile(f"[\\w{_SEA}]+"), re.compile(f"[\\w{_SEA}]*")

_LINE = KEYWORD_LINE  # the keyword text's last line of bigrams starts with it
MARK = _LINE.strip()  # "␟": no word character, never indexed


@cache
def scripts() -> tuple[str, ...]:
    """For each group of scripts, a regular expression (Python's and LanceDB's) that a keyword text's line of bigrams
    matches whenever the text's first ``MAX_CHARS`` characters do: a row whose text matches one and whose line does
    not (or that has no line) predates their bigrams. Chinese, Japanese and Korean: a character that is a word
    character (``WORD``), which the line holds alone: not a punctuation mark of the blocks ("・", "゠"), a combining or
    spacing sound mark ("゛", U+3099) or a code point unassigned in this Python's Unicode, all of them in ``CHARACTERS``
    but never on the line (a text holding one would be named forever, and written anew the same). Thai, Lao, Burmese
    and Khmer: two letters of one run, the marks between them (the line holds them as a bigram; a run of one letter
    is written as it is, so a row of those alone is named by neither). Built on first use (~0.07 s)."""
    word, unspaced = WORD.fullmatch, re.compile(f"[{_CJK}]").fullmatch
    spans: list[list[int]] = []
    for point in range(0x1100, 0x31350):  # the blocks of ``_CJK``
        if unspaced(chr(point)) and word(chr(point)):
            if spans and spans[-1][1] == point - 1:
                spans[-1][1] = point
            else:
                spans.append([point, point])
    cjk = "".join(chr(a) if a == b else f"{chr(a)}-{chr(b)}" for a, b in spans)
    return f"[{cjk}]", f"[{_SEA_LETTERS}][{_MARKS}]*[{_SEA_LETTERS}]"


def has_grams(text: str) -> bool:
    """Whether ``text`` holds a character of those scripts (Chinese, Japanese, Korean, Thai, Lao, Burmese, Khmer)."""
    return _RUN.search(text) is not None


def _units(run: str) -> list[str]:
    """The units of a run of Thai, Lao, Burmese or Khmer: each letter with the marks after it, the marks the index
    splits at left out ("แพ้ถั่ว" -> "แ พ ถั ว")."""
    return [v for v in (_SPLIT.sub("", u) for u in _UNIT.findall(run)) if v]


def grams(word: str, *, unigrams: bool = False) -> list[str]:
    """The pieces of one word (``WORD``) holding such characters: each run of them as its overlapping bigrams (of
    characters; of Thai, Lao, Burmese or Khmer, of ``_units``), a run of one as itself (with ``unigrams``, every
    Chinese, Japanese or Korean character as well), and the letters or digits glued to them as they are."""
    if len(word) > 1 and _CJK_RUN.fullmatch(word) is not None:  # the common case: one run of Chinese alone
        pairs = [word[i : i + 2] for i in range(len(word) - 1)]
        return pairs + list(word) if unigrams else pairs
    out: list[str] = []
    for piece in _PIECES.split(word):
        if not piece:
            continue
        if _RUN.fullmatch(piece) is None:
            out.append(piece)
            continue
        sea = _SEA_RUN.match(piece) is not None
        units: Sequence[str] = _units(piece) if sea else piece
        if len(units) == 1:
            out.append(units[0])
        else:
            out += [units[i] + units[i + 1] for i in range(len(units) - 1)]
            if unigrams and not sea:
                out += list(units)
    return out


def lone(word: str) -> bool:
    """Whether ``word`` (of ``query.terms``) is one Chinese, Japanese or Korean character: a word of its own ("猫",
    "개"), which ``keyword_text`` writes alone and the keyword leg matches inside a longer run, but which the terms of
    that run (its bigrams) do not hold."""
    return len(word) == 1 and _CJK_RUN.fullmatch(word) is not None


def _expanded(text: str, unigrams: bool) -> list[str]:
    """The pieces of the words of ``text``'s first ``MAX_CHARS`` characters that hold such characters."""
    return [g for w in WORD.findall(text[:MAX_CHARS]) if has_grams(w) for g in grams(w, unigrams=unigrams)]


def keyword_text(base: str) -> str:
    """The keyword-indexed text of ``base``: ``base`` itself when its first ``MAX_CHARS`` characters hold no character
    of those scripts; else ``base`` and a last line, after ``MARK``, of their runs' bigrams, the Chinese, Japanese and
    Korean characters alone and the letters or digits glued to them."""
    if not has_grams(base[:MAX_CHARS]):
        return base
    return f"{base}{_LINE}{' '.join(_expanded(base, unigrams=True))}"


def keyword_query(text: str) -> str:
    """The keyword leg's query for ``text``: ``text`` itself, and the bigrams of its words of those scripts (a word of
    one character or unit as itself) and the letters or digits glued to them (of its first ``MAX_CHARS`` characters)."""
    if not has_grams(text[:MAX_CHARS]):
        return text
    return f"{text} {' '.join(_expanded(text, unigrams=False))}"


def base_of(text: str) -> str:
    """The text a keyword text was made from (``keyword_text``'s last line taken off)."""
    base, line, _ = text.rpartition(_LINE)
    return base if line else text


def word_count(text: str) -> int:
    """How many words ``text`` holds: its pieces between spaces, and, for the scripts written without spaces, half a
    word for each Chinese or Japanese character (about two characters a word), and a piece holding letters of Thai,
    Lao, Burmese or Khmer as a word for each ``SEA_WORD_LETTERS`` of them begun (their marks count nothing; a piece
    with spaces between its words counts about as much as without). A text without them: ``len(text.split())``."""
    pieces = text.split()
    if not has_grams(text):
        return len(pieces)
    unspaced = len(text) - len(_UNSPACED.sub("", text))  # no list of the characters
    letters = (len(_SEA_LETTER.findall(p)) for p in pieces) if _SEA_LETTER.search(text) else ()
    more = sum((n - 1) // SEA_WORD_LETTERS for n in letters if n)  # ceil(n / 3) words, the piece itself one of them
    return len(pieces) + unspaced // 2 + more
