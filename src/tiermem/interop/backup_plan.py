"""What a backup restore does to a store that already holds some of its agents, decided before anything is written.

A restore inserts the rows whose key is not stored yet. That is right where the store holds none of the backup's
agents and blocks, or holds them as the backup has them (a restore run again, or after an interruption), or further
along (the store's blocks went on from the backup's versions). It is wrong where the store and the backup hold one
agent, or one block, changed in different ways: the store's block would keep its value while the backup's versions
joined its history, and two agents would share a name. Those conflicts are:

- a store agent with the name of a backup agent but another id (another agent of the same name);
- an agent both hold (one id) whose name, system prompt or metadata differ, unless the store's row is a later change of
  the same agent (created at the same moment, updated since);
- a block both hold (one id) that differs at a version both have (label, value, limit, description, read-only), or of
  which the backup holds later versions than the store (its history would go on past the block's value).

A store agent in conflict is replaced (deleted with its blocks, messages, passages and use records, then restored
from the backup) when nothing of it would be lost:

- it is untouched: as tiermem made it, its row never changed, each of its blocks at its first version, no message,
  passage or conversation state. The ``default`` agent, which the first command on a new machine makes with the same
  ids in every store, is the usual one;
- or it is an earlier state of the backup's agent (``_earlier``): an older backup of the same store restored here and
  not changed since, then a newer one restored. Its row is the backup's agent's (created at the same moment) updated
  no later; each block it has is the backup's, its versions all in the backup's history as they are there; each of
  its messages, passages, conversation states and links made on purpose is in the backup. Only the use counts
  recorded here since give way to the backup's.

With ``--replace`` every agent in conflict is replaced. Otherwise the restore is refused, naming each conflict and
what to do.

Every other agent both hold (one id) is, by what the store holds of it:

- untouched here: replaced, as above (the ``default`` agent of a new machine, whose id is the same in every store);
- an earlier state of the backup's (``earlier``): brought up to it, the rows it lacks restored. A restore cannot
  tell a row added where the backup was made from one deleted here: an agent that was only deleted from (nothing
  added or edited here) is such an earlier state, and its deleted rows come back (what ``tiermem forget`` forgot
  is left out before the plan: ``domain/forget_record.py``); a note counts the rows each such agent gets back;
- made apart from the backup's (``merged``: created at another moment, such as the ``default`` agent of two
  machines that both used it): the backup's rows it lacks are added beside its own, with a note;
- taken further here (``kept``: created at the same moment, and something of it here is not in the backup: a block
  edited, a row or link added): kept as it is. The store holds it whole (a restore writes an agent's row last, so
  its row is there only once all of it is), and the restore writes nothing of it: not even the rows it lacks,
  forgotten or deleted here (or added where the backup was made since), which a note counts.

``--replace`` replaces the merged and kept agents too: the import then rolls each agent it holds back to the backup.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.errors import ValidationError

if TYPE_CHECKING:
    from ..domain.memory import Memory

CONTENT = ("label", "value", "limit", "description", "read_only")  # what makes two versions of a block the same
SHOWN = 6  # conflicts named in a refusal


@dataclass(frozen=True)
class Replaced:
    """A store agent a restore replaces, and why: ``untouched``, ``earlier`` (an earlier state of the backup's) or
    ``replace`` (``--replace``)."""

    row: Mapping[str, Any]
    why: str

    @property
    def id(self) -> str:
        return str(self.row["id"])


def agents_to_replace(
    memory: Memory,
    rows: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    path: Path,
    replace: bool,
    links: Collection[tuple[str, str]] = (),
) -> Plan:
    """The store's agents the restore of ``rows`` (a backup's, by table; ``links``: its links made on purpose)
    replaces: those in conflict with it that are untouched or an earlier state of the backup's, or every one in
    conflict with ``replace``; and those it keeps as they are (taken further here), or replaces too with
    ``replace``. A ``ValidationError`` naming the conflicts when any other remains; reads only."""
    agents = {str(r["id"]): r for r in _rows(memory, "agents")}
    owners: dict[str, set[str]] = {}
    for r in _rows(memory, "attachments"):
        owners.setdefault(str(r["block_id"]), set()).add(str(r["agent_id"]))
    blocks = {str(r["id"]): r for r in _rows(memory, "blocks")}
    history = _by_version(_rows(memory, "block_history"))
    theirs_history = _by_version(rows["block_history"])
    conflicts: dict[str | None, list[str]] = {}  # store agent (None: a block of no agent) -> what differs
    for theirs in rows["agents"]:
        for other in agents.values():
            if other["name"] == theirs["name"] and other["id"] != theirs["id"]:
                conflicts.setdefault(str(other["id"]), []).append(
                    f"it is another agent than the backup's {theirs['name']!r} (id {other['id']} here, "
                    f"{theirs['id']} in the backup)"
                )
        same = agents.get(str(theirs["id"]))
        if same is not None and _agent_differs(same, theirs):
            conflicts.setdefault(str(same["id"]), []).append(
                "its name, system prompt or metadata differ from the backup's"
            )
    theirs_blocks = {str(r["id"]): r for r in rows["blocks"]}
    for block_id in sorted(set(theirs_blocks) | set(theirs_history)):
        why = _history_differs(history.get(block_id, {}), theirs_history.get(block_id, {}))
        why = why or _block_differs(blocks.get(block_id), theirs_blocks.get(block_id))
        if why:
            label = (blocks.get(block_id) or theirs_blocks.get(block_id) or {}).get("label", block_id)
            holders: list[str | None] = [*sorted(owners.get(block_id, set()))] or [None]
            for owner in holders:
                conflicts.setdefault(owner, []).append(f"block {label!r}: {why}")
    backup_side = Theirs(rows, links, theirs_history)
    replaced: list[Replaced] = []
    for a in conflicts:
        if a not in agents:
            continue
        if _untouched(memory, agents[a]):
            replaced.append(Replaced(agents[a], "untouched"))
        elif _earlier(memory, agents[a], backup_side, history):
            replaced.append(Replaced(agents[a], "earlier"))
        elif replace:
            replaced.append(Replaced(agents[a], "replace"))
    refused = {a: why for a, why in conflicts.items() if a not in {r.id for r in replaced}}
    if refused:
        raise ValidationError(_refusal(path, refused, agents, replace))
    earlier = [r.id for r in replaced if r.why == "earlier"]
    ahead: list[str] = []  # kept as they are
    merged: list[str] = []  # another agent of the same id: the backup's rows it lacks are added
    for theirs in rows["agents"]:
        mine = agents.get(str(theirs["id"]))
        if mine is None or str(mine["id"]) in {r.id for r in replaced}:
            continue
        if mine["created_us"] == theirs["created_us"] and _earlier(memory, mine, backup_side, history):
            earlier.append(str(mine["id"]))  # the rows it lacks are added: it is brought up to the backup's
        elif _untouched(memory, mine):
            replaced.append(Replaced(mine, "untouched"))
        elif mine["created_us"] != theirs["created_us"]:
            merged.append(str(mine["id"]))
        else:
            ahead.append(str(mine["id"]))
    if not replace:
        return Plan(replaced, ahead, merged, earlier)
    replaced += [Replaced(agents[i], "replace") for i in ahead + merged]  # a rollback to the backup
    _refuse_shared(path, replaced, owners, blocks, theirs_blocks, agents)
    return Plan(replaced, [], [], earlier)


@dataclass(frozen=True)
class Plan:
    """What a restore does to the agents the store holds: ``replaced`` (deleted, then restored from the backup),
    ``kept`` (ids of agents taken further here than the backup has them: nothing of them is written), ``merged`` (ids
    of agents that share an id with the backup's but were made apart from it, such as the ``default`` agent each
    machine makes: the backup's rows they lack are added, as to any agent), and ``earlier`` (ids of agents judged an
    earlier state of the backup's, replaced or not: the rows the backup holds and they lack are restored)."""

    replaced: list[Replaced]
    kept: list[str]
    merged: list[str] = field(default_factory=list)
    earlier: list[str] = field(default_factory=list)


def _refuse_shared(
    path: Path,
    replaced: Sequence[Replaced],
    owners: Mapping[str, set[str]],
    blocks: Mapping[str, Mapping[str, Any]],
    theirs: Mapping[str, Mapping[str, Any]],
    agents: Mapping[str, Mapping[str, Any]],
) -> None:
    """A ``ValidationError`` when a rollback cannot be whole: a block of a replaced agent that the backup holds at
    another version is attached to an agent the restore keeps, so deleting the replaced agent keeps the block as it
    is here (the restore writes only what is missing)."""
    gone = {r.id for r in replaced}
    shared = []
    for block_id, mine in blocks.items():
        there = theirs.get(block_id)
        holders = owners.get(block_id, set())
        if there is None or not holders & gone or int(mine["version"]) == int(there["version"]):
            continue
        others = sorted(str(agents[a]["name"]) for a in holders - gone if a in agents)
        if others:
            shared.append(
                f"block {mine['label']!r} (version {mine['version']} here, {there['version']} in the backup) is "
                f"attached to {', '.join(repr(n) for n in others)} too"
            )
    if shared:
        raise ValidationError(
            f"{path} cannot roll the agents it holds back to the backup here: "
            + "; ".join(shared[:SHOWN])
            + ", which the backup does not replace, so the block would keep this data directory's version. Nothing "
            "was written. Restore into an empty data directory (`tiermem --data-dir NEW_DIR import "
            f"{path}`), or delete those agents here first (`tiermem agents delete NAME`)."
        )


def kept_note(memory: Memory, rows: Mapping[str, Sequence[Mapping[str, Any]]], kept_ids: Collection[str]) -> list[str]:
    """The note on the agents a restore kept as they are (``Plan.kept``), with how many rows of theirs the backup
    holds and this store does not were left out. Reads only."""
    if not kept_ids:
        return []
    core = _core_keys(memory)
    lacking = sum(_lacking(memory, rows, agent_id, core) for agent_id in kept_ids)
    left_out = (
        f"; {lacking} row(s) of theirs the backup holds and this data directory does not (forgotten or deleted here, "
        "or added where the backup was made after this data directory's copy) were left out"
        if lacking
        else ""
    )
    return [
        f"this data directory holds agent(s) {_names(rows, kept_ids)} already, changed here since the backup was "
        f"made: kept as they are, nothing of the backup's copy written{left_out}. To roll them back to the backup "
        "(losing the changes made here since), run the import again with --replace"
    ]


def merged_note(rows: Mapping[str, Sequence[Mapping[str, Any]]], merged_ids: Collection[str]) -> list[str]:
    """The note on the agents that share an id with the backup's and were made apart from them (``Plan.merged``)."""
    if not merged_ids:
        return []
    return [
        f"this data directory's agent(s) {_names(rows, merged_ids)} and the backup's share a name and id but were made "
        "apart (each machine makes its own 'default' agent): the backup's rows they lacked were added to them, and "
        "what they held here was kept. To have them as the backup has them instead, run the import again with "
        "--replace (losing what was made here)"
    ]


def restored_note(memory: Memory, rows: Mapping[str, Sequence[Mapping[str, Any]]], ids: Collection[str]) -> list[str]:
    """The note on the agents judged an earlier state of the backup's (``Plan.earlier``) that get rows back that this
    store lacks: a restore cannot tell a row forgotten here from one added where the backup was made. Reads only:
    call it before anything is written."""
    if not ids:
        return []
    core = _core_keys(memory)
    lacking = {agent_id: n for agent_id in ids if (n := _lacking(memory, rows, agent_id, core))}
    return [
        f"{n} row(s) of agent {_names(rows, [agent_id])} that this data directory did not hold were restored "
        "(added where the backup was made, or deleted here since; what `tiermem forget` forgot here is left out)"
        for agent_id, n in lacking.items()
    ]


def _core_keys(memory: Memory) -> dict[str, set[str]]:
    return {t: {str(r[k]) for r in _rows(memory, t)} for t, k in CORE_KEYS.items()}


def _lacking(
    memory: Memory, rows: Mapping[str, Sequence[Mapping[str, Any]]], agent_id: str, core: Mapping[str, set[str]]
) -> int:
    """How many of the agent's rows the backup holds (``keys_of``) this store does not (``core``: its core keys)."""
    here = dict(core)
    here["messages"] = {m.id for m in memory.archive.rows.messages_of(agent_id)}
    here["passages"] = {p.id for p in memory.archive.rows.passages_of(agent_id)}
    return sum(len(keys - here[t]) for t, keys in keys_of(rows, agent_id).items())


def _names(rows: Mapping[str, Sequence[Mapping[str, Any]]], ids: Collection[str]) -> str:
    return ", ".join(repr(str(r["name"])) for r in rows["agents"] if str(r["id"]) in ids)


CORE_KEYS = {"blocks": "id", "block_history": "key", "attachments": "key", "conversations": "key"}


def keys_of(rows: Mapping[str, Sequence[Mapping[str, Any]]], agent_id: str) -> dict[str, set[str]]:
    """The keys of the backup's rows of one agent, by table: its messages, passages, conversation states and
    attachments, and the blocks attached to it with their history (what a restore leaves out of a kept agent)."""
    blocks = {str(r["block_id"]) for r in rows["attachments"] if str(r["agent_id"]) == agent_id}
    out = {
        t: {str(r[k]) for r in rows[t] if str(r["agent_id"]) == agent_id}
        for t, k in (("messages", "id"), ("passages", "id"), ("conversations", "key"), ("attachments", "key"))
    }
    out["blocks"] = {str(r["id"]) for r in rows["blocks"] if str(r["id"]) in blocks}
    out["block_history"] = {str(r["key"]) for r in rows["block_history"] if str(r["block_id"]) in blocks}
    return out


def replaced_note(replaced: Iterable[Replaced]) -> list[str]:
    """One note per reason the restore replaced agents for."""
    by_why: dict[str, list[str]] = {}
    for r in replaced:
        by_why.setdefault(r.why, []).append(repr(str(r.row["name"])))
    notes = []
    if names := ", ".join(by_why.get("untouched", [])):
        notes.append(
            f"this data directory's agent(s) {names}, untouched since tiermem made them, were replaced by the backup's"
        )
    if names := ", ".join(by_why.get("earlier", [])):
        notes.append(
            f"this data directory's agent(s) {names} held an earlier state of the backup's (nothing the backup lacks), "
            "and were brought up to it (use counts recorded here since were replaced by the backup's)"
        )
    if names := ", ".join(by_why.get("replace", [])):
        notes.append(
            f"--replace: this data directory's agent(s) {names} (blocks, messages and passages included) were "
            "deleted and the backup's restored in their place: they are as the backup has them"
        )
    return notes


def _refusal(path: Path, refused: Mapping[str | None, list[str]], agents: Mapping[str, Any], replace: bool) -> str:
    named = {a: str(agents[a]["name"]) for a in refused if a is not None and a in agents}
    lines = [
        f"agent {named[a]!r}: {w}" if a in named else f"(attached to no agent) {w}"
        for a, why in refused.items()
        for w in why
    ]
    shown = "; ".join(lines[:SHOWN]) + (f"; and {len(lines) - SHOWN} more" if len(lines) > SHOWN else "")
    names = ", ".join(repr(n) for n in named.values())
    fix = f"restore into an empty data directory (`tiermem --data-dir NEW_DIR import {path}`)"
    if not replace and names:
        fix += (
            f", or run the import again with --replace to delete {names} here (blocks, messages and passages "
            "included) and restore the backup's in their place"
        )
    return (
        f"{path} cannot be restored into this data directory: it holds agents the backup holds too, changed "
        f"differently ({shown}). Restoring would mix the two histories, so nothing was written. To restore, {fix}."
    )


def _rows(memory: Memory, table: str) -> list[dict[str, Any]]:
    """A core table's rows as plain mappings (compared field by field with a backup's)."""
    return [dict(r) for r in memory.core.all_rows(table)]


def _by_version(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[int, Mapping[str, Any]]]:
    out: dict[str, dict[int, Mapping[str, Any]]] = {}
    for r in rows:
        out.setdefault(str(r["block_id"]), {})[int(r["version"])] = r
    return out


def _content(row: Mapping[str, Any]) -> tuple[object, ...]:
    return tuple(bool(row[f]) if f == "read_only" else row[f] for f in CONTENT)


def _metadata(row: Mapping[str, Any]) -> object:
    raw = row.get("metadata") or "{}"
    return json.loads(raw) if isinstance(raw, str) else raw


def _agent_differs(mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> bool:
    """The agent rows differ, and the store's is not a later change of the same agent's."""
    if (mine["name"], mine["system"], _metadata(mine)) == (theirs["name"], theirs["system"], _metadata(theirs)):
        return False
    later = mine["created_us"] == theirs["created_us"] and int(mine["updated_us"]) >= int(theirs["updated_us"])
    return not later


def _block_differs(mine: Mapping[str, Any] | None, theirs: Mapping[str, Any] | None) -> str:
    """Why the stored block and the backup's cannot both stand ('' when they can)."""
    if mine is None or theirs is None:
        return ""
    have, want = int(mine["version"]), int(theirs["version"])
    if have < want:
        return f"the backup holds versions up to {want}, this data directory up to {have}"
    if have == want and _content(mine) != _content(theirs):
        return f"version {have} differs from the backup's"
    return ""


def _history_differs(mine: Mapping[int, Mapping[str, Any]], theirs: Mapping[int, Mapping[str, Any]]) -> str:
    differ = sorted(v for v in set(mine) & set(theirs) if _content(mine[v]) != _content(theirs[v]))
    return f"version {differ[0]} differs from the backup's" if differ else ""


@dataclass
class Theirs:
    """The backup's side, indexed for ``_earlier``."""

    rows: Mapping[str, Sequence[Mapping[str, Any]]]
    links: Collection[tuple[str, str]]
    history: Mapping[str, Mapping[int, Mapping[str, Any]]]

    def agent(self, agent_id: str) -> Mapping[str, Any] | None:
        return next((r for r in self.rows["agents"] if str(r["id"]) == agent_id), None)

    def of(self, table: str, agent_id: str, field: str) -> dict[str, Mapping[str, Any]]:
        """The agent's rows of ``table`` by ``field``."""
        return {str(r[field]): r for r in self.rows[table] if str(r["agent_id"]) == agent_id}


def _earlier(
    memory: Memory,
    agent: Mapping[str, Any],
    theirs: Theirs,
    history: Mapping[str, Mapping[int, Mapping[str, Any]]],
) -> bool:
    """The store's agent is an earlier state of the backup's: everything of it here is in the backup, as it is there
    (its row and its blocks' versions no later than the backup's); replacing it loses nothing (the module's doc)."""
    agent_id = str(agent["id"])
    row = theirs.agent(agent_id)
    if row is None or agent["created_us"] != row["created_us"] or int(agent["updated_us"]) > int(row["updated_us"]):
        return False
    attached = theirs.of("attachments", agent_id, "block_id")
    blocks = {str(r["id"]): r for r in theirs.rows["blocks"]}
    for block in memory.core.get_blocks(memory.core.attached_block_ids(agent_id)):
        mine, there = history.get(block.id, {}), theirs.history.get(block.id, {})
        if block.id not in attached or block.id not in blocks or block.version > int(blocks[block.id]["version"]):
            return False
        if any(v not in there or _content(mine[v]) != _content(there[v]) for v in mine):
            return False
    conversations = theirs.of("conversations", agent_id, "key")
    for r in _rows(memory, "conversations"):
        if str(r["agent_id"]) == agent_id:
            there_row = conversations.get(str(r["key"]))
            if there_row is None or int(r["updated_us"]) > int(there_row["updated_us"]):
                return False
    rows = memory.archive.rows
    held = [m.id for m in rows.messages_of(agent_id)] + [p.id for p in rows.passages_of(agent_id)]
    backed = {**theirs.of("messages", agent_id, "id"), **theirs.of("passages", agent_id, "id")}
    if any(i not in backed for i in held):
        return False
    pairs = {frozenset(pair) for pair in theirs.links}
    return all(frozenset((link.source, link.target)) in pairs for link in memory.archive.links.among(held))


def _untouched(memory: Memory, agent: Mapping[str, Any]) -> bool:
    """The agent is as tiermem made it: its row never changed, each attached block at its first version with only its
    creation in its history, no message, passage or conversation state."""
    agent_id = str(agent["id"])
    if agent["created_us"] != agent["updated_us"]:
        return False
    for block in memory.core.get_blocks(memory.core.attached_block_ids(agent_id)):
        if block.version != 1 or [v.operation for v in memory.core.history(block.id)] != ["create"]:
            return False
    if any(str(r["agent_id"]) == agent_id for r in _rows(memory, "conversations")):
        return False
    messages, passages, _tags = memory.archive.counts(agent_id)
    return messages == 0 and passages == 0
