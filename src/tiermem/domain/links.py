"""Links: memories that complete each other, and a search that returns each hit with what it links to.

Two kinds of link:

- **sitting** (recall turns, automatic): the turns logged just before and after a turn in its sitting (the turns of
  one conversation less than an hour apart: ``search.sittings``). They are derived from the rows each time, never
  stored: they cost nothing when a turn is written, survive export and import as the turns do, and go with a
  forgotten turn at once.
- **manual** (any two memories: recall turns, archival passages): made on purpose (``tiermem links add``, the
  ``memory_links`` tool). Stored as one row of the store's meta table each, ``link:<id> <id>`` (the two ids in
  sorted order: a link has no direction), so every storage backend holds them and no table is migrated; forgetting
  either memory deletes the row (``AgentRows.forget``, the one path every deletion of a turn or passage takes).

Measured on the LoCoMo dev split (``python -m bench locomo --links``): similarity links (nearest neighbours above a
cosine threshold) and shared-name links added less evidence at the token budget than sitting links did, so they are
not made (docs/links.md).

Pure: ``expand`` (the ranked hits, each followed by the memories it links to, cut to the token budget) and the
records; the links made on purpose are read and written by ``archive_links.ManualLinks``, a memory's neighbourhood
is gathered by ``Archive.neighbourhood``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from ..base.errors import ValidationError
from ..base.records import Hit, check_text
from .tokens import EncodingName, count_tokens

LinkKind = Literal["sitting", "manual"]
PREFIX = "link:"
OVERHEAD = 8  # tokens counted per result beside its content (as ``tokens.fit_to_budget``)


@dataclass(frozen=True)
class Link:
    source: str
    target: str
    kind: LinkKind
    note: str = ""


def link_key(a: str, b: str) -> str:
    x, y = sorted((a, b))
    return f"{PREFIX}{x} {y}"


def link_ends(key: str) -> tuple[str, str]:
    a, b = key[len(PREFIX) :].split(" ", 1)
    return a, b


def link_at(value: str) -> str:
    try:
        return str(json.loads(value).get("at", ""))
    except (ValueError, AttributeError):
        return ""


def link_note(value: str) -> str:
    try:
        return str(json.loads(value).get("note", ""))
    except (ValueError, AttributeError):
        return ""


def expand(
    hits: Sequence[Hit],
    linked: Mapping[str, Sequence[Hit]],
    budget: int,
    encoding: EncodingName = "cl100k_base",
) -> tuple[list[Hit], bool]:
    """The hits in rank order, each followed by the memories it links to (``linked``: hit id -> linked memories,
    nearest first) that are not shown already, as long as they fit in ``budget`` tokens (content plus ``OVERHEAD``
    each); a linked memory carries ``linked_to`` (the hit's id) and the hit's relevance. The first hit is kept even
    if it alone exceeds the budget (as ``fit_to_budget``). Returns (results, whether any hit was left out)."""
    out: list[Hit] = []
    seen: set[str] = set()
    used = 0
    for hit in hits:
        if hit.id in seen:
            continue
        cost = count_tokens(hit.content, encoding) + OVERHEAD
        if used + cost > budget and out:
            return out, True
        out.append(hit)
        seen.add(hit.id)
        used += cost
        for other in linked.get(hit.id, ()):
            if other.id in seen:
                continue
            cost = count_tokens(other.content, encoding) + OVERHEAD
            if used + cost > budget:
                continue  # a shorter link may still fit; the next hit is tried all the same
            out.append(replace(other, linked_to=hit.id, relevance=hit.relevance))
            seen.add(other.id)
            used += cost
    return out, False


@dataclass(frozen=True)
class Neighbourhood:
    """A memory and the memories it links to, one hop: what ``tiermem links ID`` and the inspector draw (every link),
    and ``memory_links show`` gives a model (``page``: the links that fit the search's token budget)."""

    center: Hit
    table: str  # messages | passages
    links: list[tuple[Link, Hit]]
    total: int | None = None  # a page (``page``): how many links the memory has; ``links`` are those from ``offset``
    offset: int = 0
    note: str = ""  # a page that leaves links out says how many and how to see them

    def page(self, budget: int, offset: int = 0, encoding: EncodingName = "cl100k_base") -> Neighbourhood:
        """The links from ``offset`` on (in order: the sitting's, then those made on purpose, oldest first) that fit
        in ``budget`` tokens beside the memory: the memory's content first, then each link's content and note, plus
        ``OVERHEAD`` each (as a search's results are counted: ``search_token_budget``). At least one link is given
        (as a search keeps its first hit), so paging always moves on; a page that leaves links out says how many and
        the ``offset`` that shows the next (``note``)."""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValidationError(f"offset must be a whole number >= 0, got {offset!r}.")
        total = len(self.links)
        if offset and offset >= total:
            raise ValidationError(
                f"offset {offset} is past the last link: {self.center.id} has {total} link(s); give an offset below "
                f"{total} (0 shows the first)."
            )
        used = count_tokens(self.center.content, encoding) + OVERHEAD
        kept: list[tuple[Link, Hit]] = []
        for link, hit in self.links[offset:]:
            cost = count_tokens(hit.content, encoding) + count_tokens(link.note, encoding) + OVERHEAD
            if used + cost > budget and kept:
                break
            kept.append((link, hit))
            used += cost
        after = offset + len(kept)
        note = ""
        if offset or after < total:
            note = f"Links {offset + 1}-{after} of {total}" if kept else f"No links (of {total})"
            note += f" shown, within the {budget}-token budget."
            if after < total:
                note += (
                    f" {total - after} more not shown: memory_links show with offset={after} shows the next"
                    f" (the user sees them all with `tiermem links {self.center.id}`)."
                )
        return replace(self, links=kept, total=total, offset=offset, note=note)

    def as_dict(self) -> dict[str, object]:
        def node(h: Hit, table: str) -> dict[str, object]:
            return {
                "id": h.id,
                "kind": "recall" if table == "messages" else "archival",
                "timestamp": h.created_at.isoformat(timespec="seconds"),
                "role": h.role,
                "content": h.content,
            }

        out: dict[str, object] = {
            "memory": node(self.center, self.table),
            "links": [
                {"link": link.kind, "note": link.note, **node(h, "messages" if h.role else "passages")}
                for link, h in self.links
            ],
        }
        if self.total is not None:  # a page: where it is among the memory's links
            out.update({"total": self.total, "offset": self.offset})
            next_offset = self.offset + len(self.links)
            out["next_offset"] = next_offset if next_offset < self.total else None
        if self.note:
            out["note"] = self.note
        return out


NOTE_MAX_CHARS = 1_000  # a note says why two memories belong together: a sentence or two, drawn beside the link
_LINE_BREAKS = "\t\n\r"  # the control characters a note may hold


def check_note(note: object, name: str = "note") -> str:
    """``note`` if it is a storable link note: text (``check_text``: no NUL, valid Unicode), at most
    ``NOTE_MAX_CHARS``, no control character but tabs and line breaks (a note is drawn in a terminal and a page)."""
    advice = (
        f"a link's note holds at most {NOTE_MAX_CHARS} (say in a sentence why the two memories belong together; "
        "store longer text as an archival passage and link to it)."
    )
    text = check_text(note, name, NOTE_MAX_CHARS, advice)
    bad = next((c for c in text if (ord(c) < 32 or 127 <= ord(c) < 160) and c not in _LINE_BREAKS), None)
    if bad is not None:
        raise ValidationError(f"The {name} contains the control character {bad!r}; remove it.")
    return text
