"""What was forgotten, kept so that a backup made before the forget does not bring it back.

Every forget (``forgetting.forget``: the CLI, the inspector) adds to the core's forget record
(``CoreStore.record_forgotten``), before it deletes anything, one key per thing it removes: each passage row
(every chunk of an insert), each message, each block version, and an agent forgotten whole (its rows are its
own). A key is the SHA-256 of the thing's kind, id and the moment it was made (``created_us``): the record holds
no text, and a thing made again with the same id (the ``default`` agent, made with the same id on every machine;
a block of its) at another moment is not taken for the forgotten one.

A restore of a backup (``interop/backup.py``) leaves out what the record names (``left_out``): those rows, and an
agent forgotten whole with everything of its own; a block whose value in the backup is a forgotten version is
restored at its newest version the backup holds that is not forgotten (left out, with its attachments, if none is).
A forget ``--text`` also EDITS rows: the keyword text of the turns after a forgotten message (it quotes the turn
before it) and an agent's system prompt. Those edits are recorded too: ``retext_key`` per message rewritten,
``system_key`` per system prompt edited (the digest of the agent's id and creation time, and the moment of the forget,
in the clear: when the backup's copy predates it). A restore writes a recorded message with its keyword text made again
from the backup's turns left before it (``forget_restore.retext``), and an agent whose backup copy predates a forget's edit of its
system prompt with the system prompt it has here (``systems``); an agent deleted here since gets the default system
prompt instead of the backup's (``default_system``; named in ``Left.prompts``): the record holds no text to take out
of the backup's, and forgetting errs toward forgetting. (Nor does it hold a digest of the forgotten text: one short
text's digest is tried against every candidate text quickly, a phone number's in seconds.)
``--include-forgotten`` restores them and takes their keys out of the record (an agent forgotten whole: the keys of
its rows restored too). A backup (format 6 on) carries the record's keys (``FORGOTTEN`` records, digests only), and a restore without
``--include-forgotten`` adds them to the target's record before it writes anything, so an older backup restored there
later leaves out what was forgotten where the newer one was made. Deletions (``archival_memory_delete``,
``agents delete``) are not recorded: a restore brings back what was deleted, as a backup is for.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.uses import Use


def key(kind: str, ident: str, created_us: int) -> str:
    return hashlib.sha256(f"{kind}\x1f{ident}\x1f{int(created_us)}".encode()).hexdigest()


def is_key(value: object) -> bool:
    """A key of the record: a 64-character hex digest, or one, ``@`` and a time (``system_key``)."""
    if not isinstance(value, str):
        return False
    digest, at, when = value.partition("@")
    hexdigits = set("0123456789abcdef")
    return len(digest) == 64 and set(digest) <= hexdigits and (not at or when.isdigit())


def row_keys(kind: str, rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """The keys of passage or message rows (``kind``: "passage" or "message")."""
    return [key(kind, str(r["id"]), int(r["created_us"])) for r in rows]


def version_key(block_id: str, version: int, created_us: int) -> str:
    return key("version", f"{block_id}:{int(version)}", created_us)


def agent_key(agent_id: str, created_us: int) -> str:
    return key("agent", agent_id, created_us)


def retext_key(message_id: str, created_us: int) -> str:
    """A message whose keyword text a forget wrote again (it quoted a forgotten turn)."""
    return key("retext", message_id, created_us)


def system_key(agent_id: str, created_us: int, forgot_us: int) -> str:
    """An agent whose system prompt a forget edited at ``forgot_us`` (kept in the clear: a restore compares it with
    the backup's copy of the agent)."""
    return f"{key('system', agent_id, created_us)}@{int(forgot_us)}"


def system_edits(record: set[str]) -> dict[str, int]:
    """The system prompt keys of ``record``: digest -> the latest forget that edited it."""
    out: dict[str, int] = {}
    for k in record:
        digest, at, when = k.partition("@")
        if at and when.isdigit():
            out[digest] = max(out.get(digest, 0), int(when))
    return out


@dataclass
class Left:
    """What a restore leaves out of a backup because it was forgotten here: ``rows`` is the backup without it."""

    rows: dict[str, list[dict[str, Any]]]
    agents: list[str] = field(default_factory=list)  # names of the agents forgotten whole
    counts: dict[str, int] = field(default_factory=dict)  # passages, messages, block versions (of other agents)
    keys: set[str] = field(default_factory=set)  # the record's keys the backup holds
    edits: set[str] = field(default_factory=set)  # the record's keys of rows a forget edited, the backup holds
    retexted: set[str] = field(default_factory=set)  # ids of the messages whose keyword text a forget wrote again
    gone: set[str] = field(default_factory=set)  # ids of the messages, passages and blocks left out
    prompts: list[str] = field(default_factory=list)  # agents restored with the default system prompt (``_edited``)

    def anything(self) -> bool:
        return bool(self.keys)


def left_out(
    rows: Mapping[str, Sequence[dict[str, Any]]],
    record: set[str],
    systems: Mapping[str, str] | None = None,
    default_system: str = "",
) -> Left:
    """The backup's ``rows`` without what ``record`` (the core's forget record) names, and with the rows a forget
    edited as it left them (``systems``: the system prompt of each agent here; an agent not here gets
    ``default_system``; without ``systems``, the system prompts are left as they are); see the module's docstring."""
    out = {t: list(found) for t, found in rows.items()}
    if not record:
        return Left(out)
    left = Left(out)
    agents = {str(r["id"]) for r in rows["agents"] if agent_key(str(r["id"]), int(r["created_us"])) in record}
    if agents:
        left.keys |= {agent_key(str(r["id"]), int(r["created_us"])) for r in rows["agents"] if str(r["id"]) in agents}
        left.agents = sorted(str(r["name"]) for r in rows["agents"] if str(r["id"]) in agents)
        _without_agents(out, agents, left)
    for table, kind in (("passages", "passage"), ("messages", "message")):
        keys = row_keys(kind, out[table])
        dropped = {str(r["id"]) for r, k in zip(out[table], keys, strict=True) if k in record}
        left.keys |= {k for k in keys if k in record}
        left.gone |= dropped
        left.counts[table] = len(dropped)
        out[table] = [r for r in out[table] if str(r["id"]) not in dropped]
    history = [
        (r, version_key(str(r["block_id"]), int(r["version"]), int(r["created_us"]))) for r in out["block_history"]
    ]
    forgotten = {str(r["key"]) for r, k in history if k in record}
    left.keys |= {k for _r, k in history if k in record}
    left.counts["block versions"] = len(forgotten)
    out["block_history"] = [r for r, _k in history if str(r["key"]) not in forgotten]
    if forgotten:
        _roll_back_blocks(out, forgotten, left)
    # after the forgotten turns are left out: the rest is made again without
    _edited(out, record, left, systems, default_system)
    return left


def _edited(
    out: dict[str, list[dict[str, Any]]],
    record: set[str],
    left: Left,
    systems: Mapping[str, str] | None,
    default_system: str,
) -> None:
    """The rows of ``out`` a forget edited, as it left them: see the module's docstring."""
    edits = system_edits(record)
    agents = []
    for r in out["agents"]:
        digest = key("system", str(r["id"]), int(r["created_us"]))
        if digest in edits:
            left.edits.add(f"{digest}@{edits[digest]}")
            if systems is not None and int(r["updated_us"]) < edits[digest]:  # the backup's predates the forget's edit
                here = systems.get(str(r["id"]))
                if here is None:  # deleted here since: no text to edit the forgotten one out of the backup's with
                    left.prompts.append(str(r["name"]))
                r = {**r, "system": default_system if here is None else here, "updated_us": edits[digest]}
        agents.append(r)
    out["agents"] = agents
    retexted = {str(r["id"]) for r in out["messages"] if retext_key(str(r["id"]), int(r["created_us"])) in record}
    if retexted:
        left.edits |= {retext_key(str(r["id"]), int(r["created_us"])) for r in out["messages"] if r["id"] in retexted}
        left.retexted = retexted  # their keyword text made again: ``forget_restore.retext``


def restored_keys(rows: Mapping[str, Sequence[dict[str, Any]]], record: set[str]) -> set[str]:
    """The keys of ``record`` a restore of every one of ``rows`` (``--include-forgotten``) takes out: an agent
    forgotten whole's, and those of its own rows forgotten before it, as every other's."""
    agents = {agent_key(str(r["id"]), int(r["created_us"])) for r in rows["agents"]} & record
    left = left_out(rows, record - agents)
    return agents | left.keys | left.edits


def _without_agents(out: dict[str, list[dict[str, Any]]], agents: set[str], left: Left) -> None:
    """``out`` without everything of ``agents``: their messages, passages, conversation states and attachments, and
    the blocks attached to none of the backup's other agents, with their history."""
    others = {str(r["block_id"]) for r in out["attachments"] if str(r["agent_id"]) not in agents}
    theirs = {str(r["block_id"]) for r in out["attachments"] if str(r["agent_id"]) in agents} - others
    for table in ("messages", "passages"):
        left.gone |= {str(r["id"]) for r in out[table] if str(r["agent_id"]) in agents}
    left.gone |= theirs
    for table in ("messages", "passages", "conversations", "attachments"):
        out[table] = [r for r in out[table] if str(r["agent_id"]) not in agents]
    out["blocks"] = [r for r in out["blocks"] if str(r["id"]) not in theirs]
    out["block_history"] = [r for r in out["block_history"] if str(r["block_id"]) not in theirs]
    out["agents"] = [r for r in out["agents"] if str(r["id"]) not in agents]


def _roll_back_blocks(out: dict[str, list[dict[str, Any]]], forgotten: set[str], left: Left) -> None:
    """A block whose value is a forgotten version: at its newest version kept (the history rows left), or left out
    with its attachments when every version the backup holds of it is forgotten."""
    newest: dict[str, dict[str, Any]] = {}
    for r in out["block_history"]:
        if str(r["block_id"]) not in newest or int(r["version"]) > int(newest[str(r["block_id"])]["version"]):
            newest[str(r["block_id"])] = r
    blocks, dropped = [], set()
    for b in out["blocks"]:
        if f"{b['id']}:{b['version']}" not in forgotten:
            blocks.append(b)
        elif (v := newest.get(str(b["id"]))) is not None:
            fields = ("label", "value", "limit", "description", "read_only", "version")
            blocks.append({**b, **{f: v[f] for f in fields}, "updated_us": v["created_us"]})
        else:
            dropped.add(str(b["id"]))
    out["blocks"] = blocks
    out["attachments"] = [r for r in out["attachments"] if str(r["block_id"]) not in dropped]
    left.gone |= dropped


def of_the_rest(left: Left, links: list[Any], uses: list[Use]) -> dict[str, Any]:
    """The backup's ``links`` (as read: checked later) and ``uses``, but those of what ``left`` leaves out."""
    gone, agents = left.gone, {str(r["id"]) for r in left.rows["agents"]}
    kept = [x for x in links if not (isinstance(x, dict) and (x.get("a") in gone or x.get("b") in gone))]
    return {"links": kept, "uses": [u for u in uses if u.id not in gone and u.agent_id in agents]}


def note(left: Left, *, included: bool) -> list[str]:
    """What a restore said of the forgotten things the backup holds: left out (how to have them), or restored."""
    if not left.anything():
        return []
    names = {"passages": "passage row(s)", "messages": "message(s)", "block versions": "block version(s)"}
    parts = [f"{n} {names[what]}" for what, n in left.counts.items() if n]
    if left.agents:
        parts.append(f"agent(s) {', '.join(repr(a) for a in left.agents)} (forgotten whole, with all of theirs)")
    what = ", ".join(parts)
    if included:
        return [
            f"--include-forgotten: restored what was forgotten here: {what}; taken out of the forget record (a later "
            "restore brings it back too; forget it again to forget it)"
        ]
    return [
        f"left out what was forgotten here (`tiermem forget`): {what}. To restore it too, run the import again with "
        "--include-forgotten"
    ]


def prompts_note(left: Left) -> list[str]:
    """What a restore said of the agents it gave the default system prompt (``Left.prompts``), or nothing."""
    if not left.prompts:
        return []
    names = ", ".join(repr(a) for a in sorted(left.prompts))
    return [
        f"agent(s) {names}: the backup's system prompt predates a `tiermem forget --text` that edited the text out of "
        "it here, and the agent was deleted since: restored with the default system prompt instead (the forget record "
        "holds no text to edit out of the backup's). Set it again with `tiermem agents set NAME --system TEXT`, or "
        "run the import again with --include-forgotten to restore the backup's as it is"
    ]
