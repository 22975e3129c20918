"""An upload's chunks embedded a slice at a time, each file told how far its chunks are (``tiermem folders upload``
prints it: a 5 MB file is ~10,000 chunks, minutes on a loaded machine with the real model).

Without a listener the chunks of a batch are embedded in one call, as before. With one, ``SLICE`` chunks at a time,
in the batch's order, and after each slice the listener hears ``(file name, its chunks embedded, its chunks to
embed)`` for each file the slice held. A slice that comes back without vectors (the model still loading, or failing:
``ArchiveVectors.embed_rows`` logged why and started the backfill) ends it: the rest are stored without vectors too,
for the backfill, rather than waiting for the model once per slice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

Embedded = Callable[[str, int, int], None]  # (file name, its chunks embedded so far, its chunks to embed)
SLICE = 256  # chunks per embedding call while a listener is told (fastembed's batch: no slower than one call)


def embed_files(
    embed_rows: Callable[[list[dict[str, Any]]], None],
    files: Sequence[tuple[str, Sequence[dict[str, Any]]]],
    progress: Embedded | None,
) -> None:
    """Embed the chunk rows of ``files`` ((name, its chunk rows)) that have no vector yet (``row["vector"]`` None),
    with ``embed_rows`` (which sets ``row["vector"]``, or leaves it None when the model cannot embed now)."""
    todo = [(name, row) for name, rows in files for row in rows if row["vector"] is None]
    if progress is None:
        embed_rows([row for _, row in todo])
        return
    totals = Counter(name for name, _ in todo)
    done: Counter[str] = Counter()
    for at in range(0, len(todo), SLICE):
        part = todo[at : at + SLICE]
        embed_rows([row for _, row in part])
        if part[-1][1]["vector"] is None:  # not embedded now: the rest wait for the backfill
            return
        done.update(name for name, _ in part)
        for name in dict.fromkeys(name for name, _ in part):
            progress(name, done[name], totals[name])
