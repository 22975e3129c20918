"""Manual links (made on purpose: ``domain/links.py``) in exports and imports.

An export carries the links whose two ends it exports, each as ``{"a": ID, "b": ID, "note": TEXT}`` with the ids the
export gives the two memories (an agent file renumbers them; a backup keeps them); a link with an end left out is
not exported. An import checks their shape with the rest of the file before writing anything, then restores each
link between the rows it wrote, through ``Memory.link`` (both ends the agent's; the note's credential check), its
note redacted first as every imported text is. A file without links (written by an older tiermem) has none to
restore.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..base.errors import ValidationError
from ..domain.links import check_note

if TYPE_CHECKING:
    from ..domain.memory import Memory

JSON = dict[str, Any]


def exported_links(memory: Memory, file_ids: Mapping[str, str]) -> list[JSON]:
    """The manual links between two of the exported memories (``file_ids``: stored id -> its id in the export),
    oldest first, named by their ids in the export."""
    return [
        {"a": file_ids[link.source], "b": file_ids[link.target], "note": link.note}
        for link in memory.archive.links.among(file_ids)
    ]


def read_links(value: Any, where: str, known: Collection[str]) -> list[tuple[str, str, str]]:
    """The links of an export, checked: (id, id, note), each id one of ``known`` (the memories exported with them).
    None (an export without links) is no link; anything else malformed is refused, naming ``where``."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValidationError(f"{where}: the links must be a list of {{a, b, note}} objects.")
    out = []
    for n, item in enumerate(value):
        a, b = (item.get("a"), item.get("b")) if isinstance(item, dict) else (None, None)
        note = item.get("note", "") if isinstance(item, dict) else ""
        if not isinstance(a, str) or not isinstance(b, str) or not isinstance(note, str) or a == b:
            raise ValidationError(f"{where}: link {n} needs two different ids `a` and `b` and a text `note`.")
        for end in (a, b):
            if end not in known:
                raise ValidationError(f"{where}: link {n} names {end!r}, which is not a memory of the export.")
        check_note(note, f"note of link {n} in {where}")
        out.append((a, b, note))
    return out


def restore_links(
    memory: Memory, agent_id: str, links: Sequence[tuple[str, str, str]], new_ids: Mapping[str, str]
) -> int:
    """Link the imported memories (``new_ids``: id in the export -> stored id) as the export had them; a link already
    there is left as it is (an import run again restores nothing twice). Returns how many links were made."""
    made = 0
    for a, b, note in links:
        x, y = new_ids[a], new_ids[b]
        if memory.archive.links.has(x, y):
            continue
        memory.link(agent_id, x, y, memory.scrub(note))
        made += 1
    return made
