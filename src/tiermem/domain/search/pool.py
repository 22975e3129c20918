"""The pool a search ranks: how deep each leg reads, and which of the rows the legs found are ranked.

Recall (the conversation log): each leg reads its best LEG_DEPTH rows, not only the pool's 40. The pool is still the
rows either leg ranks within the pool size, plus the deeper rows of the query's best sittings (``sittings``): the
best one, or the BEST_SITTINGS_SEVERAL best for a question about several things (``Query.asks_several``: its evidence
is spread over sittings). Every candidate keeps its rank and score in both legs down to LEG_DEPTH (a turn the keyword
leg ranks 7th and the vector leg 60th is no longer "not found" by the vector leg). Pure; no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .query import Query
from .ranking import Candidate, Context

LEG_DEPTH, BEST_SITTINGS, BEST_SITTINGS_SEVERAL = 100, 1, 3
# A row a leg ranks deeper than the pool (within LEG_DEPTH) also joins it when it was logged within NEIGHBOURS turns of
# a pooled row in the same sitting (what was said just before or after a match: the question a turn answers, the
# answer to it, the rest of one exchange); measured by ``python -m bench locomo``.
NEIGHBOURS = 2
# The pool a search ranks: POOL_PER_HIT candidates per hit asked for, at least MIN_POOL (40 for a top-10 search).
POOL_PER_HIT, MIN_POOL = 4, 40


@dataclass(frozen=True)
class Pool:
    """What a search ranks: the query's analysis, the candidates both legs found, and the context the ranker reads."""

    query: Query
    candidates: list[Candidate]
    context: Context


def pool_size(limit: int) -> int:
    """The candidates a search of ``limit`` results ranks."""
    return max(limit * POOL_PER_HIT, MIN_POOL)


def pooled(query: Query, candidates: Sequence[Candidate], pool: int, context: Context) -> list[Candidate]:
    """The candidates a search ranks: those either leg ranks within ``pool``; those of the query's best sittings
    (``context.sittings``; BEST_SITTINGS of them, BEST_SITTINGS_SEVERAL for a question about several things) that a
    leg ranks deeper; and those a leg ranks deeper that were logged within NEIGHBOURS turns of one of the former in
    the same sitting. Each keeps both legs' ranks."""
    best = BEST_SITTINGS_SEVERAL if query.asks_several else BEST_SITTINGS
    sittings = context.sittings

    def kept(c: Candidate) -> bool:
        if (c.vector_rank or pool + 1) <= pool or (c.fts_rank or pool + 1) <= pool:
            return True
        rank = sittings.rank_of(c.found.conversation_id, c.found.created_us) if sittings else None
        return rank is not None and rank <= best

    chosen = [kept(c) for c in candidates]
    if sittings is not None and not all(chosen):
        places = [sittings.position(c.found.conversation_id, c.found.created_us, c.found.seq) for c in candidates]
        near = {
            (p[0], p[1] + step)
            for p, k in zip(places, chosen)
            if k and p is not None
            for step in range(-NEIGHBOURS, NEIGHBOURS + 1)
        }
        chosen = [k or p in near for p, k in zip(places, chosen)]
    return [c for c, k in zip(candidates, chosen) if k]
