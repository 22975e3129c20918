"""The turn before each message, as its keyword text holds it, made right in rows an earlier tiermem logged.

A message's keyword text holds the turn before it (``archive.shape_message``), where a turn that passes the context on
(a tool result, a turn that said nothing: ``archive.passes_on``) gives the next the last thing said before it
(``archive.context_of``). tiermem before schema version 3 gave it the turn just before, whatever it was: an answer
after a tool search held up to 4,000 characters of what the search returned, and was found for words only the result
held. ``recontext`` (run by ``tiermem optimize``) writes anew the keyword text of each message that follows a turn
passing the context on, from its conversation's turns as they are stored; a row already right is not written, and a
store once done is marked (``schemas.KEYWORD_CONTEXT``; new stores are created marked), so later runs read nothing.
A tiermem that wrote such rows reads schema version 2 at most, so it cannot write to a marked store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..base.records import from_us
from .archive import context_of, passes_on, shape_message

if TYPE_CHECKING:
    from .archive import Archive


def contexts(turns: Sequence[dict[str, Any]]) -> dict[str, str]:
    """The context (``shape_message``'s ``previous``) of each of ``turns`` (``AgentRows.turns``) that follows a turn
    passing the context on, by id: its conversation's turns in their order (seq, then time), as forgetting reads them
    (``forgetting._messages``). The other turns' keyword texts hold the turn just before them, as they always did."""
    conversations: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in turns:
        conversations.setdefault((r["agent_id"], r["conversation_id"]), []).append(r)
    out: dict[str, str] = {}
    for rows in conversations.values():
        previous, passing = "", False
        for r in sorted(rows, key=lambda r: (r["seq"], r["created_us"])):
            if passing:
                out[r["id"]] = previous
            passing = passes_on(r["role"], r["content"])
            previous = context_of(r["role"], r["content"], previous)
    return out


def recontext(archive: Archive) -> int:
    """Write anew the keyword text of the messages whose context ``contexts`` gives, where it differs from what is
    stored; then mark the store. Returns the rows written (none once the store is marked)."""
    if archive.rows.keyword_contexts_settled():
        return 0
    wanted = contexts(archive.rows.turns())

    def text_of(row: dict[str, Any]) -> str:
        return shape_message(row["content"], from_us(row["created_us"]), wanted[row["id"]])

    written = archive.rows.set_keyword_texts(list(wanted), text_of)
    archive.rows.settle_keyword_contexts()
    return written
