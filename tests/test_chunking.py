"""``holds_across``: whether a text cut by ``chunk_text`` holds a given text across its chunks (what forgetting a
text looks for in an archival insert stored in chunks)."""

from __future__ import annotations

import random

from tiermem.base.chunking import chunk_text, holds_across


def _pieces(word: str) -> int:
    return max(1, len(word.strip()) // 3)  # a word of 300 characters is 100 pieces: cut into slices


def _chunks(text: str) -> list[str]:
    return chunk_text(
        text, max_tokens=40, count=lambda t: sum(_pieces(w) for w in t.split()), sizes=lambda ws: list(map(_pieces, ws))
    )


def test_every_run_across_chunks_is_held_and_a_changed_one_is_not() -> None:
    """Words, and words cut into slices (no overlap, no whitespace at the cut): every run of the text no one chunk
    holds is held across them, whitespace compared as single spaces; the same run with one character changed is
    not (no join the chunks could have had makes it)."""
    rng = random.Random(5)
    checked = 0
    for _ in range(20):
        words = [
            "".join(rng.choice("abcdef") for _ in range(rng.choice((3, 5, 8, 200, 400))))
            for _ in range(rng.randint(20, 60))
        ]
        text = "".join(w + rng.choice((" ", "\n", "  ")) for w in words).strip()
        chunks = _chunks(text)
        assert len(chunks) > 1
        for _ in range(40):
            start = rng.randrange(len(text) - 3)
            run = text[start : start + rng.randint(3, 600)].strip()
            if len(run) < 3 or any(run in c for c in chunks):
                continue
            checked += 1
            assert holds_across(chunks, run), run
            assert holds_across(chunks, " ".join(run.split()).replace("\n", " "))
            at = len(run) // 2
            changed = run[:at] + "z" + run[at + 1 :]
            assert not holds_across(chunks, changed), changed
    assert checked > 150


def test_one_chunk_or_nothing_holds_nothing_across() -> None:
    assert not holds_across(["a whole text"], "whole")
    assert not holds_across([], "whole")
    assert not holds_across(["abc def", "def ghi"], "   ")
