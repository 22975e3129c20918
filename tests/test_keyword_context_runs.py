"""``keyword_context.contexts`` over long runs of turns passing the context on (tool results, turns that said
nothing): the same contexts as it gave when each turn held its own tuple of the run so far, in linear space (a
tool-only run of 40,000 turns took 7 GB so), and ``recontext``'s check of the turns read again keeps its verdicts."""

from __future__ import annotations

import gc
import json
import random
import tracemalloc
from typing import Any

from tiermem.domain.archive import context_of, passes_on
from tiermem.domain.keyword_context import Checked, _runs, _same, _to_read, _unchanged, contexts

HEARTBEAT = json.dumps({"type": "heartbeat", "reason": "tool asked", "time": "now"})
CONTENTS = ["", "   ", HEARTBEAT, "hello there", "the ferry leaves at dawn", '{"status": "OK"}', "\n"]
ROLES = ["user", "assistant", "tool", "system"]


def _before(turns: list[dict[str, Any]]) -> dict[str, tuple[str, tuple[str, ...]]]:
    """``contexts`` as it was (each turn's turns a tuple of its own, copied from the one before): the reference."""
    conversations: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in turns:
        conversations.setdefault((r["agent_id"], r["conversation_id"]), []).append(r)
    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    for rows in conversations.values():
        previous, passing = "", False
        made_from: tuple[str, ...] = ()
        for r in sorted(rows, key=lambda r: (r["seq"], r["created_us"])):
            if passing:
                out[r["id"]] = (previous, made_from)
            passing = passes_on(r["role"], r["content"])
            previous = context_of(r["role"], r["content"], previous)
            made_from = (*made_from, r["id"]) if passing else (r["id"],)
    return out


def _turns(rnd: random.Random, n: int, passing: float) -> list[dict[str, Any]]:
    """``n`` turns of a few agents and conversations, in no order, seqs sometimes tied (then ordered by time)."""
    rows = []
    for i in range(n):
        says = rnd.random() > passing
        rows.append(
            {
                "id": f"m{i}",
                "agent_id": rnd.choice(["a1", "a2"]),
                "conversation_id": rnd.choice(["default", "c1", "c2"]),
                "seq": rnd.randrange(n // 2 + 1),
                "created_us": rnd.randrange(3),  # ties of seq and time too: kept in the order read
                "role": rnd.choice(["user", "assistant"]) if says else rnd.choice(ROLES),
                "content": rnd.choice(CONTENTS[3:5]) + f" {i}" if says else rnd.choice(CONTENTS),
            }
        )
    rnd.shuffle(rows)
    return rows


def test_contexts_are_as_they_were_on_varied_turns() -> None:
    rnd = random.Random(20261208)
    for case in range(300):
        turns = _turns(rnd, rnd.randrange(0, 60), passing=rnd.choice([0.0, 0.3, 0.7, 0.95, 1.0]))
        got = contexts(turns)
        assert {k: (c.text, tuple(c.turns)) for k, c in got.items()} == _before(turns), case
        for c in got.values():  # a sequence of ids like any other: sliced, indexed, compared
            ids = tuple(c.turns)
            assert c.turns == ids and len(c.turns) == len(ids) and c.turns[:2] == ids[:2]
            assert [c.turns[i] for i in range(-len(ids), len(ids))] == [*ids, *ids]


def _run(n: int) -> list[dict[str, Any]]:
    """A question, then ``n`` tool results (a run passing the context on), then an answer."""
    turns = [("user", "when does the ferry leave?"), *[("tool", '{"status": "OK"}')] * n, ("assistant", "at dawn")]
    return [
        {
            "id": f"m{i}",
            "agent_id": "a",
            "conversation_id": "default",
            "seq": i,
            "created_us": i,
            "role": r,
            "content": c,
        }
        for i, (r, c) in enumerate(turns)
    ]


def _ids_held(found: dict[str, Any]) -> int:
    """How many ids the contexts hold, each container (tuple, list) counted once however many contexts share it:
    the size of the structure, whatever its shape."""
    seen: set[int] = set()
    held, stack = 0, [c.turns for c in found.values()]
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, (str, int, type)):
            continue
        seen.add(id(o))
        if isinstance(o, (tuple, list)):
            held += len(o)
        else:
            stack.extend(gc.get_referents(o))
    return held


def test_a_long_run_is_held_in_linear_space() -> None:
    """Every turn after a run of n tool results is made from the run so far: n(n+1)/2 ids were held as tuples of
    their own (a run of 40,000: 7 GB); held shared, they are the conversation's n+2 ids."""
    n = 2000
    found = contexts(_run(n))
    assert len(found) == n  # the results after the first and the answer
    assert tuple(found[f"m{n + 1}"].turns) == tuple(f"m{i}" for i in range(n + 1))
    assert _ids_held(found) <= 2 * (n + 2)  # quadratic: 2,001,000

    def peak(k: int) -> int:
        turns = _run(k)
        tracemalloc.start()
        try:
            contexts(turns)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    small, large = peak(1000), peak(4000)  # four times the turns: four times the memory (quadratic: ~15 times)
    assert large < 8 * small, (small, large)


def test_recontexts_check_of_the_turns_read_again_keeps_its_verdicts() -> None:
    """``_unchanged`` (each run's turns compared once) leaves the same turns as comparing each turn's own turns did,
    whichever turns were forgotten or changed meanwhile."""
    rnd = random.Random(7)
    for case in range(200):
        turns = _turns(rnd, rnd.randrange(1, 50), passing=rnd.choice([0.3, 0.8, 1.0]))
        wanted = contexts(turns)
        first = {r["id"]: r for r in turns}
        now = {}
        for r in turns:
            fate = rnd.random()
            if fate < 0.05:
                continue  # forgotten meanwhile
            now[r["id"]] = {**r, "content": r["content"] + " (redacted)"} if fate < 0.1 else dict(r)
        batch = [t for t in wanted if rnd.random() < 0.7]
        expected = [t for t in batch if all(_same(first[i], now.get(i)) for i in (t, *wanted[t].turns))]
        runs = _runs([wanted[t].turns for t in batch])
        assert _unchanged(batch, wanted, runs, first, now) == expected, case
        # in batches, each reading again only what ``_to_read`` names (what an earlier batch checked taken as found
        # then, the turns standing still between): the same verdicts
        checked: Checked = {}
        got: list[str] = []
        size = rnd.randrange(1, 6)
        for start in range(0, len(batch), size):
            part = batch[start : start + size]
            runs = _runs([wanted[t].turns for t in part])
            read = _to_read(part, runs, checked)
            got += _unchanged(part, wanted, runs, first, {i: now[i] for i in read if i in now}, checked)
        assert got == expected, case
