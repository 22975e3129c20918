"""The forget record at work (``forget_record.py`` makes its keys and reads a backup by them): a forget's keys
recorded around the deletion or edit they stand for (``recorded``), and what a restore does beyond leaving rows out:
the keyword text of the turns a forget wrote again made again from the backup's turns left (``retext``), the system
prompts as a forget left them (``systems_here``), and what a forget running during the restore recorded forgotten
again after it (``forgotten_meanwhile``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..base.records import from_us
from ..store import Filter
from .archive import context_of, shape_message
from .forget_record import Left, agent_key, row_keys, system_edits, version_key

if TYPE_CHECKING:
    from .memory import Memory


@contextmanager
def recorded(memory: Memory, keys: list[str]) -> Iterator[None]:
    """``keys`` in the forget record while the block runs, the deletion or edit they stand for (recorded first: a
    restore running meanwhile leaves it out); taken out again when it fails, so the record names no row still here."""
    if not keys:
        yield
        return
    memory.core.record_forgotten(keys)
    try:
        yield
    except BaseException:
        memory.core.unrecord_forgotten(keys)
        raise


def systems_here(memory: Memory, record: set[str]) -> dict[str, str]:
    """The system prompt of each agent here, when ``record`` holds a forget's edit of one (else none are read)."""
    return {a.id: a.system for a in memory.core.list_agents()} if system_edits(record) else {}


def retext(left: Left) -> None:
    """``left.rows``' messages with the keyword text of those a forget wrote again (``left.retexted``) made again."""
    if left.retexted:
        left.rows["messages"] = _retext(left.rows["messages"], left.retexted)


def _retext(messages: list[dict[str, Any]], retexted: set[str]) -> list[dict[str, Any]]:
    """``messages`` with the keyword text of ``retexted`` made again from the turns before them in ``messages`` (the
    forgotten ones left out already), as the forget made it."""
    conversations = {(r["agent_id"], r["conversation_id"]) for r in messages if r["id"] in retexted}
    texts: dict[str, str] = {}
    for agent, conversation in conversations:
        turns = [r for r in messages if (r["agent_id"], r["conversation_id"]) == (agent, conversation)]
        previous = ""
        for r in sorted(turns, key=lambda r: (int(r["seq"]), int(r["created_us"]))):
            if r["id"] in retexted:
                texts[str(r["id"])] = shape_message(r["content"], from_us(int(r["created_us"])), previous)
            previous = context_of(r["role"], r["content"], previous)
    return [{**r, "text": texts[r["id"]]} if r["id"] in texts else r for r in messages]


def forgotten_meanwhile(memory: Memory, rows: Mapping[str, Sequence[dict[str, Any]]], late: set[str]) -> list[str]:
    """Forget again what a restore of ``rows`` wrote back that a forget running meanwhile recorded (``late``: the keys
    recorded since the restore read the record): those messages, passages and block versions, and agents forgotten
    whole. A note saying so, or none."""
    gone: dict[str, int] = {}
    here = {a.id for a in memory.core.list_agents()}
    for r in rows["agents"]:
        if agent_key(str(r["id"]), int(r["created_us"])) in late and str(r["id"]) in here:
            memory.delete_agent(str(r["id"]), purge=False)
            gone["agent(s)"] = gone.get("agent(s)", 0) + 1
    for table, kind in (("passages", "passage"), ("messages", "message")):
        ids = tuple(str(r["id"]) for r, k in zip(rows[table], row_keys(kind, rows[table]), strict=True) if k in late)
        if ids:
            gone[table] = memory.archive.rows.forget(table, Filter(ids=ids))
    versions: dict[str, set[int]] = {}
    for r in rows["block_history"]:
        if version_key(str(r["block_id"]), int(r["version"]), int(r["created_us"])) in late:
            versions.setdefault(str(r["block_id"]), set()).add(int(r["version"]))
    for block_id, wanted in versions.items():
        gone["block versions"] = gone.get("block versions", 0) + memory.core.forget_versions(block_id, wanted)
    if not any(gone.values()):
        return []
    memory.core.purge()
    counts = ", ".join(f"{n} {what}" for what, n in gone.items() if n)
    return [
        f"a forget ran while this restore did: what it forgot and the restore wrote back was forgotten again ({counts})"
    ]
