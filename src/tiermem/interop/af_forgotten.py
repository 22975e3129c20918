"""The forget record applied to an agent file's import (``agentfile.apply_plans``): the messages and archival passages
``tiermem forget`` removed here are left out of an ``.af`` import, with a note, as a backup's restore leaves them out
(``domain/forget_record.py``); ``--include-forgotten`` imports them and takes their keys out of the record.

An import gives its rows new ids, so a row of the file is matched by what it honestly is, never by its text:

- the row this import writes is the forgotten one: a message's id is derived from the file's bytes, its agent and the
  message's id in the file (``stable_id``) and its time is the file's ``created_at``, so the same file imported again
  (``--replace``, or after the agent was deleted) gives the forgotten message its id and time again; imported under
  another name (``--rename``), the ids an agent here imported from the same file gave it (``imported_before``);
- the file is tiermem's export and names the row it was made from: each message's ``tiermem.id`` and each passage's
  ``tiermem_id`` (written by exports from this release on) with its ``created_at`` are the forgotten row's id and
  time made.

Not matched: a passage of a file that carries no ``tiermem_id`` (a Letta file, an older tiermem export: passage ids
are new on every import), a message of another file whose ``id`` is not tiermem's, a message of a file imported under
another name once the agent it was first imported as was deleted or renamed, an agent forgotten whole (its rows have
no keys of their own), block versions, and the edits of ``forget --text`` (the keyword text of turns, a system prompt:
an agent file holds no keyword text, and the system prompt is the file's).

A forget running while the import does (another process, or the inspector) is not undone by it: the import reads the
record again once it has written (``forgotten_meanwhile``, as a backup's restore does) and forgets again each row it
wrote that the keys recorded since name, as ``tiermem forget`` forgets a row (the later turns' keyword text too).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..base.errors import NotFoundError
from ..base.records import stable_id, to_us
from ..domain.archive import parse_bound
from ..domain.forget_record import Left, key, note
from ..domain.forgetting import Target, forget

if TYPE_CHECKING:
    from ..domain.memory import Memory

AgentPlan = Any  # ``agentfile.AgentPlan`` (not imported: agentfile imports this module)


@dataclass
class Matched:
    """What of the file the record names: its keys, and per plan the file's ids of its messages and the positions of
    its passages."""

    keys: set[str] = field(default_factory=set)
    messages: dict[int, set[str]] = field(default_factory=dict)
    passages: dict[int, set[int]] = field(default_factory=dict)

    def count(self, what: str) -> int:
        return sum(len(x) for x in (self.messages if what == "messages" else self.passages).values())


def _created_us(value: Any) -> int | None:
    when = parse_bound(value, "created_at", end=False) if isinstance(value, str) and value else None
    return to_us(when) if when is not None else None


def imported_before(memory: Memory, plans: list[AgentPlan], digest: str) -> list[list[str]]:
    """Per plan, the agents here an import of the same file made from it under another name (``--rename``): an
    agent's id is derived from the file's bytes, the agent's id in the file and its name, so one agent read each."""
    agents = memory.core.list_agents()
    return [[a.id for a in agents if a.id == stable_id("agent", digest, p.file_id, a.name)] for p in plans]


def match(
    record: set[str],
    plans: list[AgentPlan],
    agent_ids: list[str],
    digest: str,
    earlier: list[list[str]] | None = None,
) -> Matched:
    """The rows of ``plans`` (each to be written as ``agent_ids``' agent; ``earlier``: per plan, the agents an
    import of the same file made under another name) the forget record names."""
    found = Matched()
    if not record:
        return found
    for n, (p, agent_id) in enumerate(zip(plans, agent_ids, strict=True)):
        agents = dict.fromkeys([agent_id, *(earlier[n] if earlier else [])])
        for m in p.messages:
            created = _created_us(m.get("timestamp"))
            if created is None:
                continue  # written at the time of the import: never a forgotten row
            ids = [*(stable_id("message", digest, a, m["file_id"]) for a in agents), *p.origins.get(m["file_id"], [])]
            hits = {key("message", i, created) for i in ids} & record
            if hits:
                found.keys |= hits
                found.messages.setdefault(n, set()).add(m["file_id"])
        for j, (_content, _tags, when) in enumerate(p.passages):
            origin = p.passage_origins[j] if j < len(p.passage_origins) else ""
            if origin and when is not None and (k := key("passage", origin, to_us(when))) in record:
                found.keys.add(k)
                found.passages.setdefault(n, set()).add(j)
    return found


def leave_out(plans: list[AgentPlan], found: Matched) -> None:
    """``plans`` without the rows ``found`` names: messages (out of the window too), passages, and their links."""
    for n, p in enumerate(plans):
        messages, passages = found.messages.get(n, set()), found.passages.get(n, set())
        if not messages and not passages:
            continue
        p.messages = [m for m in p.messages if m["file_id"] not in messages]
        p.in_context = [i for i in p.in_context if i not in messages]
        gone = messages | {p.passage_ids[j] for j in passages if p.passage_ids[j]}
        keep = [j for j in range(len(p.passages)) if j not in passages]
        p.passages = [p.passages[j] for j in keep]
        p.passage_ids = [p.passage_ids[j] for j in keep]
        p.passage_projects = [p.passage_projects[j] for j in keep] if p.passage_projects else p.passage_projects
        p.passage_origins = [p.passage_origins[j] for j in keep if j < len(p.passage_origins)]
        p.links = [(a, b, t) for a, b, t in p.links if a not in gone and b not in gone]


@dataclass
class Applied:
    """What ``apply`` did: its ``notes``, the keys to take out of the record once the import wrote them
    (``restored``: ``--include-forgotten``) and the ``record`` as it read it (``forgotten_meanwhile`` compares)."""

    notes: list[str]
    restored: set[str]
    record: set[str]


def apply(memory: Memory, plans: list[AgentPlan], agent_ids: list[str], digest: str, *, include: bool) -> Applied:
    """Leave out of ``plans`` what the forget record names (unless ``include``)."""
    record = memory.core.forgotten_keys()
    found = match(record, plans, agent_ids, digest, imported_before(memory, plans, digest) if record else None)
    if not found.keys:
        return Applied([], set(), record)
    if not include:
        leave_out(plans, found)
    said = Left(rows={}, counts={"passages": found.count("passages"), "messages": found.count("messages")})
    said.keys = found.keys
    return Applied(note(said, included=include), found.keys if include else set(), record)


def forgotten_meanwhile(
    memory: Memory,
    plans: list[AgentPlan],
    agent_ids: list[str],
    digest: str,
    record: set[str],
    passage_ids: list[list[str]],
) -> list[str]:
    """Forget again what the import of ``plans`` wrote (each as ``agent_ids``' agent; ``passage_ids``: per plan, the
    id each of its passages was written with) that a forget running meanwhile recorded: the keys in the record now
    and not in ``record`` (read when the import began). A note saying so, or none."""
    late = memory.core.forgotten_keys() - record
    if not late:
        return []
    found = match(late, plans, agent_ids, digest, imported_before(memory, plans, digest))
    counts = {"message(s)": 0, "passage row(s)": 0}
    for n, agent_id in enumerate(agent_ids):
        targets = [
            Target("message", agent_id, stable_id("message", digest, agent_id, m))
            for m in sorted(found.messages.get(n, ()))
        ]
        targets += [Target("passage", agent_id, passage_ids[n][j]) for j in sorted(found.passages.get(n, ()))]
        for target in targets:
            try:
                done = forget(memory, target)
            except NotFoundError:
                continue  # not there (nothing was done): the forget meanwhile took it already
            counts["message(s)"] += done.messages
            counts["passage row(s)"] += done.passages
    if not any(counts.values()):
        return []
    said = ", ".join(f"{n} {what}" for what, n in counts.items() if n)
    return [
        f"a forget ran while this import did: what it forgot and the import wrote was forgotten again ({said}; gone "
        "from search now, from the store's files at the next upkeep: `tiermem optimize`)"
    ]
