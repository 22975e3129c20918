"""The use records of a backup (``backup.py``, format 5): each agent's uses of the memories the backup holds
(``core/uses.py``), written after the links and checked, record by record and against the backup's rows, on restore."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.errors import ValidationError
from ..core.uses import KINDS as USE_KINDS
from ..core.uses import Use

if TYPE_CHECKING:
    from ..domain.memory import Memory


def backup_uses(memory: Memory) -> list[Use]:
    """The use records a backup holds: each agent's (``UseCounter.by_agent``, this process's batch included) of a
    memory that exists (a record left by a memory forgotten meanwhile is not carried), by agents that exist."""
    agents = {a.id for a in memory.core.list_agents()}
    found = [u for u in memory.uses.by_agent() if u.agent_id in agents]
    alive = memory.existing({u.id: u.kind for u in found}) if found else set()
    return sorted((u for u in found if u.id in alive), key=lambda u: (u.agent_id, u.kind, u.id))


def use_row(use: Use) -> dict[str, Any]:
    return {
        "id": use.id,
        "kind": use.kind,
        "agent_id": use.agent_id,
        "count": use.count,
        "last_us": use.last_us,
        "heat": use.heat,
    }


def use_of(path: Path, n: int, row: Any) -> Use:
    """A ``use`` record's row, checked field by field."""
    fields = ("id", "kind", "agent_id", "count", "last_us", "heat")
    ok = (
        isinstance(row, dict)
        and set(row) == set(fields)
        and all(isinstance(row[f], str) and row[f] for f in ("id", "agent_id"))
        and row["kind"] in USE_KINDS
        and all(isinstance(row[f], int) and not isinstance(row[f], bool) for f in ("count", "last_us"))
        and isinstance(row["heat"], (int, float))
        and not isinstance(row["heat"], bool)
    )
    if not ok or row["count"] < 1 or row["last_us"] < 0 or not 0 <= row["heat"] < float("inf"):
        raise ValidationError(
            f"{path}:{n}: a use record must be {{{', '.join(fields)}}} with a kind of {', '.join(USE_KINDS)}, a count "
            "of at least 1 and a heat of 0 or more; the backup is damaged. Nothing was written."
        )
    return Use(row["id"], row["kind"], row["agent_id"], row["count"], row["last_us"], float(row["heat"]))


def check_uses(path: Path, uses: list[Use], rows: dict[str, list[dict[str, Any]]]) -> None:
    """Each use record is of an agent and a memory the backup holds."""
    agents = {str(r["id"]) for r in rows["agents"]}
    held = {
        kind: {str(r["id"]) for r in rows[table]}
        for kind, table in (("passage", "passages"), ("message", "messages"), ("block", "blocks"), ("file", "files"))
    }
    for use in uses:
        if use.agent_id not in agents or use.id not in held.get(use.kind, set()):
            what = f"agent {use.agent_id}" if use.agent_id not in agents else f"{use.kind} {use.id}"
            raise ValidationError(
                f"{path}: a use record names {what}, which the backup does not hold; the backup is damaged. Nothing "
                "was written."
            )
