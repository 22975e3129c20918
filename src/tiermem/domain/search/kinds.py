"""The searchable kinds (recall's turns, archival passages, folders' file chunks) and how each differs: one profile
each, read by ``Archive``'s one search path instead of switches on the table's name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .pool import LEG_DEPTH
from .ranking import (
    DEFAULT_CALIBRATION,
    DEFAULT_RANKER,
    PASSAGE_CALIBRATION,
    PASSAGE_RANKER,
    Calibration,
    Ranker,
)

Table = Literal["messages", "passages", "file_chunks"]


@dataclass(frozen=True)
class Kind:
    """What a search of one kind of row does its own way.

    ``table``: where its rows are; ``ranker`` and ``calibration``: how its pool is ordered and a hit's relevance
    judged; ``deep``: each leg reads LEG_DEPTH rows, not only the pool's (measured on turns); ``speakers``: its rows
    may be written as ``"Name: ..."``, so the speakers' labels are learnt from them and left out of the vector's
    query; ``turns``: its rows are conversation turns: logged by role (the roles' names come from the agent's blocks),
    ranked with the agent's sittings (``sittings``), shown with their role and conversation (else with their tags);
    ``stated``: its rows are facts that may open with the date they are about ("On 8 May 2023: ..."), and the ranker
    places them in time by it (``ranking.stated``), and a row is about the name it opens with (``subjects``: the
    ranker's ``speaker`` feature reads it; both measured by ``python -m bench locomo --archival``). Every kind with
    ``speakers`` also leaves the names the agent's blocks give (``Memory.speaker_names``) out of the vector's query."""

    table: Table
    ranker: Ranker
    calibration: Calibration
    deep: bool
    speakers: bool
    turns: bool
    stated: bool = False
    subjects: bool = False

    def depth(self, pool: int) -> int:
        """How many rows each leg reads for a pool of ``pool`` candidates."""
        return max(pool, LEG_DEPTH) if self.deep else pool


MESSAGES = Kind("messages", DEFAULT_RANKER, DEFAULT_CALIBRATION, deep=True, speakers=True, turns=True)
# Passages are ranked by their own ranker and calibration, placed in time by the date they open with, a fact's date
# standing for its sitting (``ranking._stated_ranks``; ``python -m bench locomo --archival``).
PASSAGES = Kind(
    "passages", PASSAGE_RANKER, PASSAGE_CALIBRATION, deep=False, speakers=True, turns=False, stated=True, subjects=True
)
FILE_CHUNKS = Kind("file_chunks", DEFAULT_RANKER, DEFAULT_CALIBRATION, deep=False, speakers=False, turns=False)
KINDS: dict[str, Kind] = {k.table: k for k in (MESSAGES, PASSAGES, FILE_CHUNKS)}
