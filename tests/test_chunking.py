"""``chunk_text`` as ``rejoin.held`` reads it back: whether a text cut by ``chunk_text`` holds a given text across its
chunks (what forgetting a text looks for in an archival insert stored in chunks), and the runs two chunks share
(``_borders``). Every run of a text of long words and slices, and a word repeated past the overlap, are tested in
``test_rejoin.py``."""

from __future__ import annotations

import random
from functools import partial

from tiermem.base.chunking import _borders, _borders_read, chunk_text, estimate_sizes, estimate_tokens
from tiermem.base.rejoin import held


def _pieces(word: str) -> int:
    return max(1, len(word.strip()) // 3)  # a word of 300 characters is 100 pieces: cut into slices


def _chunks(text: str) -> list[str]:
    return chunk_text(
        text, max_tokens=40, count=lambda t: sum(_pieces(w) for w in t.split()), sizes=lambda ws: list(map(_pieces, ws))
    )


def test_no_chunks_or_no_text_hold_nothing() -> None:
    assert not held([], "whole", _chunks)
    assert not held(["abc def", "def ghi"], "   ", _chunks)


def _word_count(text: str) -> int:
    return len(text.split())


def _one_each(words: list[str]) -> list[int]:
    return [1] * len(words)


_GREEK = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau".split()


def _made_up(chunks: list[str], rng: random.Random) -> list[str]:
    """Texts joining the end of a chunk and the start of the next as no cut made them: no overlap, with a space or
    none, or the overlap taken twice (what a wrong join would hold)."""
    out = []
    for before, after in zip(chunks, chunks[1:]):
        tail, head = before.split(), after.split()
        for _ in range(4):
            left = " ".join(tail[-rng.randint(1, 4) :])
            right = " ".join(head[: rng.randint(1, 4)])
            out += [f"{left} {right}", f"{left}{right}", f"{rng.choice(tail)} {left} {right}"]
        for k in range(1, min(len(before), len(after))):  # every run they share, the overlap or one by chance
            if before.endswith(after[:k]):
                out += [before[-k - rng.randint(1, 30) :] + after[k : k + rng.randint(1, 30)] for _ in range(3)]
    return out


def test_a_text_made_up_across_a_join_is_not_held() -> None:
    """Consecutive chunks share their overlap (whole words): a text joining them as if they did not, or at another
    run they share by chance (a text of few distinct words repeats many), is in no text the chunker could have cut
    into them, and is not held; the text's own runs across the same chunks are."""
    rng = random.Random(11)
    checked = 0
    for size, window, words, sizes in [
        (200, 64, _GREEK, "bytes"),
        (600, 256, _GREEK[:13], "bytes"),
        (400, 40, _GREEK[:5], "words"),
        (300, 100, _GREEK, "bytes"),
        (500, 60, _GREEK[:3], "words"),
        (900, 50, _GREEK[:2], "words"),
        (2000, 256, _GREEK[:4], "bytes"),
    ] * 3:
        text = " ".join(rng.choice(words) for _ in range(size))
        if sizes == "bytes":
            chunk = partial(chunk_text, max_tokens=window, count=estimate_tokens, sizes=estimate_sizes, overhead=2)
        else:
            chunk = partial(chunk_text, max_tokens=window, count=_word_count, sizes=_one_each)
        chunks = chunk(text)
        assert len(chunks) > 2
        for made in _made_up(chunks, rng):
            if made not in text:
                checked += 1
                assert not held(chunks, made, chunk), (size, window, made)
    assert checked > 2000


def test_every_run_of_a_text_of_distinct_words_is_held() -> None:
    """Words that do not repeat: every overlap is told apart, and each run of the text is held, across any number of
    chunks."""
    rng = random.Random(3)
    for size, window in [(300, 64), (800, 256), (120, 40)]:
        words = [f"{rng.choice(_GREEK)}{n}" for n in range(size)]
        text = "".join(w + rng.choice((" ", "\n", "  ")) for w in words).strip()
        chunk = partial(chunk_text, max_tokens=window, count=estimate_tokens, sizes=estimate_sizes, overhead=2)
        chunks = chunk(text)
        assert len(chunks) > 2
        for _ in range(100):
            at = rng.randrange(size - 2)
            run = " ".join(words[at : at + rng.randint(2, 120)])
            assert held(chunks, run, chunk), run


def test_the_runs_two_chunks_share_are_the_same_found_either_way() -> None:
    """``_borders`` looks for the runs by ``str.find`` and reads a text repeating them through (``_borders_read``):
    both find the same runs, in texts repeating a few characters or words many times and in texts that do not."""
    rng = random.Random(4)
    shared = 0
    for _ in range(3000):
        alphabet = rng.choice(["ab", "abc", "a ", "ab ", "abcdefghij "])
        unit = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6)))
        base = unit * rng.randint(1, 60) + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        before = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20))) + base
        after = base[rng.randint(0, len(base)) :] + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        found = _borders(before, after)
        assert found == _borders_read(before, after), (before, after)
        shared += bool(found)
    assert shared > 2000
