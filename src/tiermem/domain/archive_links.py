"""``ManualLinks``: the links made on purpose between two memories, one row of the store's meta table each.

The row's key is ``link:<id> <id>`` (the two ids in sorted order: a link has no direction), its value JSON: the
agent, a note, when. Meta rows exist on every storage backend and need no migration: a store of any age holds none
until a link is made. ``AgentRows.forget`` deletes the links of every turn or passage it deletes.

No link outlives its memory when one process links a memory while another forgets it. Each side writes first and
reads after, each read at the newest version (on a local store every read is; on object storage they ask for it):

- the linker (``Memory.link``): checks both ends, writes the link (W), then checks both ends again (C); an end gone by
  then has its links removed, and the call fails;
- the forget (``AgentRows.forget``): deletes the rows (D), then reads the links again and deletes those of the
  deleted rows (R); it also deletes the links it finds before D, so that a crash between the two leaves none.

Every commit is atomic and a read at the newest version sees every commit finished before it began. If C begins
after D has finished, C finds the end gone and the linker removes its link. Otherwise C began before D finished;
W finished before C began, so before D finished, so before R began: R finds the link and removes it. Either way the
link goes (sometimes by both: the second deletion finds nothing). What an interruption between the steps can still
leave, ``tiermem doctor`` reports (``AgentRows.dangling_links``) and ``tiermem optimize`` removes.
"""

from __future__ import annotations

import json
from collections.abc import Collection

from ..base.errors import ValidationError
from ..base.records import now
from ..store import Filter, Store
from .links import PREFIX, Link, check_note, link_at, link_ends, link_key, link_note


class ManualLinks:
    """The links made on purpose, as meta rows of one store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._cache: tuple[int, dict[str, str]] | None = None  # (meta table version, link rows)

    def _rows(self, *, latest: bool = False) -> dict[str, str]:
        """The link rows, read again only when the meta table changed (a search asks on every call). ``latest``: read
        at the meta table's newest version, whatever was cached (object storage may otherwise answer from a check of
        the version made moments ago)."""
        if latest:
            return {
                r["key"]: r["value"] for r in self.store.conn.rows("meta", latest=True) if r["key"].startswith(PREFIX)
            }
        version = self.store.conn.version("meta")
        if self._cache is None or self._cache[0] != version:
            self._cache = (version, {k: v for k, v in self.store.conn.meta().items() if k.startswith(PREFIX)})
        return dict(self._cache[1])

    def add(self, agent_id: str, a: str, b: str, note: str = "") -> Link:
        if a == b:
            raise ValidationError("A memory cannot link to itself: give two different ids.")
        check_note(note)
        value = json.dumps({"agent": agent_id, "note": note, "at": now().isoformat()})
        self.store.conn.set_meta(link_key(a, b), value)
        return Link(a, b, "manual", note)

    def remove(self, a: str, b: str) -> bool:
        """Delete the link between ``a`` and ``b``; False when there was none. Its row's fragment is marked for the
        purge first, as a forgotten memory's links are (its note leaves the store's files at the next upkeep, or at
        once with ``forget --now``), and it is deleted by key: the deletion's filter, which the meta table keeps in
        its transaction and manifest files, names the two ids, not the note."""
        key = link_key(a, b)
        if key not in self._rows():
            return False
        where = Filter(keys=(key,))
        self.store.purge.mark("meta", where)
        self.store.rows.delete("meta", where)
        return True

    def of(self, ids: Collection[str]) -> dict[str, list[Link]]:
        """Each of ``ids`` -> its manual links (source: that id), oldest first."""
        wanted = set(ids)
        out: dict[str, list[Link]] = {}
        for key, value in sorted(self._rows().items(), key=lambda kv: link_at(kv[1])):
            a, b = link_ends(key)
            note = link_note(value)
            if a in wanted:
                out.setdefault(a, []).append(Link(a, b, "manual", note))
            if b in wanted:
                out.setdefault(b, []).append(Link(b, a, "manual", note))
        return out

    def among(self, ids: Collection[str]) -> list[Link]:
        """The links whose two ends are both among ``ids``, each once (source: the smaller id), oldest first: what an
        export carries (a link with an end left out of it is not exported)."""
        wanted = set(ids)
        out = []
        for key, value in sorted(self._rows().items(), key=lambda kv: link_at(kv[1])):
            a, b = link_ends(key)
            if a in wanted and b in wanted:
                out.append(Link(a, b, "manual", link_note(value)))
        return out

    def every(self) -> list[Link]:
        """Every link made on purpose, each once (source: the smaller id), oldest first."""
        return [
            Link(*link_ends(k), "manual", link_note(v))
            for k, v in sorted(self._rows().items(), key=lambda kv: link_at(kv[1]))
        ]

    def has(self, a: str, b: str) -> bool:
        """Whether ``a`` and ``b`` are linked on purpose (an import restores a link once)."""
        return link_key(a, b) in self._rows()

    def forget(self, ids: Collection[str], *, latest: bool = False) -> int:
        """Delete every manual link of any of ``ids`` (the memories are being forgotten); returns how many. The meta
        table's fragments holding them are marked for the purge first (their notes leave its files with it).
        ``latest``: the links read at the meta table's newest version (the pass after the rows went)."""
        gone = set(ids)
        if not gone:
            return 0
        keys = tuple(k for k in self._rows(latest=latest) if gone & set(link_ends(k)))
        if keys:  # by key: the deletion's filter holds no note (see ``remove``)
            self.store.purge.mark("meta", Filter(keys=keys))
            self.store.rows.delete("meta", Filter(keys=keys))
        return len(keys)

    def forget_text(self, text: str, agent_id: str | None) -> int:
        """Take ``text`` out of the note of every link (of ``agent_id``, or every agent's) whose note holds it: the
        link stays, its old row's fragment is marked for the purge; returns how many notes changed."""
        changed = 0
        for key, value in self._rows().items():
            note = link_note(value)
            data = json.loads(value)
            if text not in note or (agent_id is not None and data.get("agent") != agent_id):
                continue
            self.store.purge.mark("meta", Filter(entries=((key, value),)))
            self.store.conn.set_meta(key, json.dumps({**data, "note": note.replace(text, "")}))
            changed += 1
        return changed

    def any(self) -> bool:
        """Whether any link was made on purpose (a deletion then looks for its rows' links)."""
        return bool(self._rows())
