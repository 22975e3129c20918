"""``rejoin.held``: whether an archival insert stored in chunks held a text, its text rebuilt from the chunks as the
chunker cut it; a join the chunks leave open (a cut's whitespace, an overlap a repeated run hides) is decided by
cutting the texts it may be again with the same chunker (what `forget --text` looks in)."""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import partial

import pytest

from tiermem.base.chunking import chunk_text
from tiermem.base.rejoin import _CHARS, _CHECKS, Budget, held
from tiermem.embedding.embedders import make_embedder


def _pieces(word: str) -> int:
    return max(1, len(word.strip()) // 3)  # a word of 100 characters is 33 pieces: more than the overlap keeps


def _chunks(text: str) -> list[str]:
    return chunk_text(
        text, max_tokens=40, count=lambda t: sum(_pieces(w) for w in t.split()), sizes=lambda ws: list(map(_pieces, ws))
    )


def _long(text: str) -> list[str]:
    """A window of 256 pieces: words of 100 characters (33 pieces) end a chunk with no overlap, words of 1,200 are
    cut into slices."""
    return chunk_text(
        text,
        max_tokens=256,
        count=lambda t: sum(_pieces(w) for w in t.split()),
        sizes=lambda ws: list(map(_pieces, ws)),
    )


def _by_words(text: str, window: int) -> list[str]:
    return chunk_text(text, max_tokens=window, count=lambda t: len(t.split()), sizes=lambda ws: [1] * len(ws))


def test_a_run_across_joins_a_repeated_word_leaves_open_is_held_as_the_text_has_it() -> None:
    """A word repeated past the overlap: consecutive chunks share runs of it of many lengths. The run the text has
    (the word as many times as it has it, between the words around it) is held across those joins, however long;
    the same run with the word once more or once less is not. (Repeated far longer, past what one insert's texts
    are cut again for, ``_CHECKS``, the joins stay open: every count is held, forgetting errs toward forgetting.)"""
    for repeats in (60, 100):
        text = " ".join([f"w{i}" for i in range(50)] + ["la"] * repeats + [f"v{i}" for i in range(50)])
        chunks = _by_words(text, 64)
        chunk = partial(_by_words, window=64)
        run = " ".join(["w49", *["la"] * repeats, "v0"])
        assert not any(run in c for c in chunks)
        assert held(chunks, run, chunk), repeats
        for n in (repeats - 1, repeats + 1, repeats // 2):
            assert not held(chunks, " ".join(["w49", *["la"] * n, "v0"]), chunk), (repeats, n)


def test_a_cut_with_no_overlap_is_held_with_its_own_whitespace_and_the_other_only_where_the_chunks_cannot_tell() -> (
    None
):
    """A long word (more pieces than the overlap) ends a chunk, or a word too long for the window is cut into
    slices: the next chunk shares nothing, and the whitespace the text had at the cut, or none, is not stored. Each
    cut's own join is held. The other join is held where a text having it is cut into the same chunks (the chunks
    cannot tell them apart: forgetting errs toward forgetting), and not where none is."""
    rng = random.Random(7)
    own_held = told = 0
    for _ in range(6):
        words = ["".join(rng.choice("abcdef") for _ in range(rng.choice((4, 8, 100, 110, 1200)))) for _ in range(25)]
        text = " ".join(words)
        chunks = _long(text)
        at = 0
        for before, after in zip(chunks, chunks[1:]):
            at = text.index(before, at)
            end = at + len(before)
            if not (text.startswith(after, end) or text.startswith(after, end + 1)):
                continue  # an overlap
            spaced = text[end] == " "
            left, right = before[-15:], after[:15]
            own, other = (f"{left} {right}", f"{left}{right}") if spaced else (f"{left}{right}", f"{left} {right}")
            assert own in text and other not in text
            assert held(chunks, own, _long), own
            own_held += 1
            flipped = text[:end] + text[end + 1 :] if spaced else text[:end] + " " + text[end:]
            if _long(flipped) == chunks:  # a text with the other join is cut into the same chunks
                assert held(chunks, other, _long), other
            told += not held(chunks, other, _long)
    assert own_held > 30 and told > 0


def test_every_run_across_chunks_is_held_and_a_changed_one_is_not() -> None:
    """Words, and words cut into slices, whitespace of several kinds: every run of the text no one chunk holds is
    held across them, whitespace compared as single spaces; the same run with one character changed is not."""
    rng = random.Random(5)
    checked = 0
    for _ in range(6):
        words = [
            "".join(rng.choice("abcdef") for _ in range(rng.choice((3, 5, 8, 200, 400))))
            for _ in range(rng.randint(20, 40))
        ]
        text = "".join(w + rng.choice((" ", "\n", "  ")) for w in words).strip()
        chunks = _chunks(text)
        for _ in range(25):
            start = rng.randrange(len(text) - 3)
            run = text[start : start + rng.randint(3, 600)].strip()
            if len(run) < 3 or any(run in c for c in chunks):
                continue
            checked += 1
            assert held(chunks, run, _chunks), run
            assert held(chunks, " ".join(run.split()), _chunks)
            at = len(run) // 2
            assert not held(chunks, run[:at] + "z" + run[at + 1 :], _chunks)
    assert checked > 60


def test_chunks_another_chunker_cut_are_looked_in_every_way_they_may_join() -> None:
    """Chunks the given chunker does not cut so (another model's, a store of an older tiermem): no join can be
    checked, so each one they may have is looked in, and forgetting errs toward forgetting."""
    text = " ".join(["w1", *["la"] * 100, "v1", *[f"x{i}" for i in range(40)]])
    chunks = _by_words(text, 64)
    other = partial(_by_words, window=50)
    assert held(chunks, " ".join(["w1", *["la"] * 100, "v1"]), other)
    assert not held(chunks, "nothing like it", other)


@pytest.fixture(scope="module")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], list[str]]:
    """The default model's chunker (its real window and tokenizer)."""
    return make_embedder("default", tmp_path_factory.mktemp("models")).chunk


def _repeated(word: str, reps: int, sep: str) -> str:
    return "The key, pasted again and again:\n" + sep.join([word] * reps)


def test_a_long_token_or_cjk_run_pasted_again_is_held_across_its_copies(minilm: Callable[[str], list[str]]) -> None:
    """A token or a CJK run of about 200 pieces pasted two to four times: each copy fills a chunk, neighbouring chunks
    are identical (they may share all of it, or be cut between with whitespace or none). The end of one copy and
    the start of the next are held; the same with one character changed is not."""
    rng = random.Random(1)
    token = "-".join(f"{rng.getrandbits(32):08x}" for _ in range(30))
    cjk = "".join(rng.choice("日本語中文字漢東京大阪都府県市町村") for _ in range(200))
    for word in (token, cjk):
        for reps in (2, 3, 4):
            for sep in ("\n", " "):
                chunks = minilm(_repeated(word, reps, sep))
                wanted = word[-16:] + " " + word[:16]
                assert len(chunks) >= reps and not any(wanted in " ".join(c.split()) for c in chunks)
                assert reps < 3 or any(a == b for a, b in zip(chunks, chunks[1:]))  # identical neighbours
                assert held(chunks, wanted, minilm), (word[:8], reps, sep)
                assert not held(chunks, word[-16:] + " X" + word[1:16], minilm), (word[:8], reps, sep)


def test_cutting_again_is_bounded_for_an_insert_and_for_a_forget(minilm: Callable[[str], list[str]]) -> None:
    """A long CJK run pasted many times leaves many joins open: what is cut again stays within the bound for one
    insert, and inserts sharing one forget's ``Budget`` stop cutting once it is spent; past either, the joins are
    looked in every way, so the text is still held (forgetting errs toward forgetting)."""
    rng = random.Random(1)
    cjk = "".join(rng.choice("日本語中文字漢東京大阪都府県市町村") for _ in range(700))
    chunks = minilm("note " + " ".join([cjk] * 6))
    wanted = cjk[-10:] + " " + cjk[:10]
    spent: list[int] = []

    def counted(text: str) -> list[str]:
        spent.append(len(text))
        return minilm(text)

    budget = Budget(chars=3 * _CHARS)
    each: list[int] = []  # the characters each insert cut again
    for n in range(5):
        before = len(spent)
        assert held(chunks, wanted, counted, budget), n
        assert len(spent) - before <= _CHECKS and sum(spent[before:]) <= _CHARS, n
        each.append(sum(spent[before:]))
    assert sum(spent) <= 3 * _CHARS and budget.chars >= 0 and budget.checks == len(spent)
    assert each[-1] < each[0], each  # the same insert, cut again less: the forget's budget ran out


def test_the_matcher_works_out_each_move_from_a_set_of_states_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Looking for a text across the joins reads each choice's ends character by character: a move from a set of
    states the matcher has been in is looked up, not worked out again (a text of few words repeats the same moves
    on every chunk), and the answer is the same."""
    import tiermem.base.rejoin as rejoin

    text = " ".join(["green tea", "black tea"] * 300)
    chunks = _chunks(text)
    assert len(chunks) > 20
    real = rejoin._step
    moves: list[tuple[int, str]] = []

    def counted(wanted: str, fail: list[int], q: int, ch: str) -> int:
        moves.append((q, ch))
        return real(wanted, fail, q, ch)

    monkeypatch.setattr(rejoin, "_step", counted)
    assert not held(chunks, "green tea green tea", _chunks)  # never twice in a row: every join is read
    assert held(chunks, "tea black tea green", _chunks)
    read = sum(len(c) for c in chunks)
    assert 0 < len(moves) < read // 10, (len(moves), read)  # 44,118 moves for 29,054 characters before
