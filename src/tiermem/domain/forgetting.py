"""Forgetting that forgets: one operation that removes a passage, a message, past values of a block, a whole agent,
or every passage, message and block version holding a text, from search at once and from every file of the store.

What each storage part does (docs/ARCHITECTURE.md, "Forgetting"):

- recall and archival rows (LanceDB): deleted at once (gone from every search); the data fragments that held them
  are marked first (``store/purge.py``), and the purge writes the rest of each marked fragment again, builds the
  full-text index afresh, and removes every older table version with the files only it used. It runs at the next
  upkeep (a server's background upkeep, ``tiermem optimize``), or at once with ``now``. A turn's keyword text holds
  the turn before it: the turns after a forgotten one get theirs written again without it.
- block history (core state): the kept versions are stored afresh (``CoreStore.forget_versions``: no delta,
  checkpoint or base holds a forgotten value), and the core state is purged at once (``CoreStore.purge``: SQLite is
  vacuumed and its WAL truncated; on object storage the objects the old history used are deleted on the spot), when
  anything was forgotten.
- idempotency records whose stored result holds a forgotten text are deleted: the agent's own, or every agent's for
  a whole-store forget (no agent given).
- the forget record (``forget_record.py``): a key (a digest, no text) per passage row, message, block version and
  agent forgotten whole, written before it is deleted, so a restore of an older backup leaves it out.
- use records (``uses.py``): a forgotten passage's, message's or agent's are deleted, from this process's batch and
  from ``uses.sqlite3`` (overwritten on disk, its log truncated).

A text's forget takes every passage holding it: an archival insert stored in chunks whole, when its text holds it
across two chunks or more (``_passages_across_chunks``: a word cut into slices too) as when one chunk does.

Scope: a forget naming an agent stays within it, reads and reports nothing of another agent's: its rows, its blocks
(a block shared with others too: it is this agent's), its idempotency records, the files of the folders attached to
it (named, never changed), its link notes and system prompt. Only a whole-store forget (``Target.agent_id`` None: the
local CLI without ``--agent``) looks at every agent, and edits the folders' descriptions.

What it does not rewrite: a MemFS directory synced with the agent and its git history (the caller names them:
``interop/memfs_holders.py``), backups and exports already made, and what another process holds in memory.

Why this module is long: each kind of target (passage, message, block versions, agent, text) reaches every storage
part above, and a text's forget is their union within one scope; kept together so no part is missed for a kind.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..base.errors import ConflictError, NotFoundError, PurgeUnfinishedError, ValidationError
from ..base.records import Agent, Block, BlockVersion, to_us
from ..base.records import now as now_
from ..base.rejoin import Budget, held
from ..store import Filter
from . import forget_record, forget_restore
from .archive import context_of, passes_on, shape_message
from .blocks import Rethink
from .keyword_context import written_on

if TYPE_CHECKING:
    from .memory import Memory

Kind = Literal["passage", "message", "block", "agent", "text"]
KINDS: tuple[Kind, ...] = ("passage", "message", "block", "agent", "text")
SHOWN_TEXTS = 20  # forgotten texts kept for naming what still holds them (MemFS files, git history)
SHOWN_HOLDERS = 20  # names still holding a forgotten text, listed in the report (all of them in --json)


@dataclass(frozen=True)
class Target:
    """What to forget. ``passage`` / ``message``: ``ref`` is its id; ``block``: ``ref`` is its label and
    ``versions`` the past versions (None: every past version, the current one kept); ``agent``: the agent itself;
    ``text``: ``ref`` is the text, in ``agent_id``'s memory or every agent's (``agent_id`` None: the whole store, for
    the local CLI or an administrator). ``agent_id`` has no default: a forget for one agent stays within it (its
    rows, blocks, idempotency records, the files of the folders attached to it), so the scope is always said."""

    kind: Kind
    agent_id: str | None
    ref: str = ""
    versions: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Holder:
    """A name that holds a forgotten text, left as it is: a passage's tag or project, a message's project, a block's
    label. Hosts, filters and prompts refer to things by these names, so a forget does not edit them; ``fix`` is the
    command that removes it."""

    where: str  # "passage tag", "passage project", "message project", "block label"
    agent: str  # the agent's name (its id for rows of no agent)
    ref: str  # the passage or message id, or the block's label
    fix: str

    def line(self) -> str:
        return f"still held by the {self.where} of {self.ref} (agent {self.agent}), a name left as it is: {self.fix}"


@dataclass
class Forgotten:
    """What a forget did, and what still holds the text (``purged`` None: the store's files at the next upkeep;
    ``purge_unfinished``: why a purge asked for now did not finish, what was forgotten being gone from search)."""

    passages: int = 0
    messages: int = 0
    versions: int = 0
    agents: list[str] = field(default_factory=list)
    retexted: int = 0  # turns whose keyword text held a forgotten turn, written again without it
    requests: int = 0
    edited: list[str] = field(default_factory=list)  # blocks whose current value held the text: edited out
    notes: int = 0  # link notes that held the text: edited out
    prompts: list[str] = field(default_factory=list)  # agents whose system prompt held the text: edited out
    folder_texts: list[str] = field(default_factory=list)  # folders whose description or instructions held it
    files: list[str] = field(default_factory=list)  # "folder/file" of folder files holding it: named, not changed
    held: list[Holder] = field(default_factory=list)  # names holding it (tags, projects, labels): named, not changed
    texts: list[str] = field(default_factory=list)  # the forgotten texts (for naming what still holds them)
    # the forgotten passages' ids and their inserts' group ids (what a sync of files that stored them recorded)
    passage_ids: list[str] = field(default_factory=list)
    core: dict[str, int] = field(default_factory=dict)
    purged: dict[str, str] | None = None
    purge_unfinished: str | None = None

    def anything(self) -> bool:
        """True if something was forgotten or edited (else the store is left as it was: nothing to purge)."""
        return bool(
            self.passages
            or self.messages
            or self.versions
            or self.agents
            or self.retexted
            or self.requests
            or self.edited
            or self.notes
            or self.prompts
            or self.folder_texts
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "passages": self.passages,
            "messages": self.messages,
            "versions": self.versions,
            "agents": self.agents,
            "turns_retexted": self.retexted,
            "requests": self.requests,
            "blocks_edited": self.edited,
            "link_notes_edited": self.notes,
            "system_prompts_edited": self.prompts,
            "folders_edited": self.folder_texts,
            "folder_files_holding_it": self.files,
            "names_holding_it": [{"where": h.where, "agent": h.agent, "ref": h.ref, "fix": h.fix} for h in self.held],
            "core_purge": self.core,
            "store_purge": self.purged,
            "store_purge_unfinished": self.purge_unfinished,
            "files": "purged"
            if self.purged is not None
            else f"not purged yet: {self.purge_unfinished}"
            if self.purge_unfinished is not None
            else "at the next upkeep (tiermem optimize, or a server's background upkeep); --now does it at once"
            if self.anything()
            else "nothing to purge: nothing was found to forget",
        }

    def lines(self) -> list[str]:
        if not self.anything():  # what still holds it (names, folder files) is listed below
            out = ["nothing was found to forget"]
        else:
            out = [
                f"forgot {self.passages} passage row(s), {self.messages} message(s), {self.versions} block "
                f"version(s)" + (f", agent(s) {', '.join(self.agents)}" if self.agents else "")
            ]
        if self.edited:
            out.append(f"edited the text out of the current value of: {', '.join(self.edited)}")
        if self.notes:
            out.append(f"edited the text out of {self.notes} link note(s)")
        if self.prompts:
            out.append(f"edited the text out of the system prompt of: {', '.join(self.prompts)}")
        if self.folder_texts:
            out.append(
                f"edited the text out of the description or instructions of folder(s): {', '.join(self.folder_texts)}"
            )
        for name in self.files:
            out.append(
                f"still held by folder file {name}: a file is kept as uploaded; edit or remove it and upload it "
                "again (`tiermem folders upload`, `tiermem folders sync`), or delete its folder (`tiermem folders delete`)"
            )
        out += [h.line() for h in self.held[:SHOWN_HOLDERS]]
        if len(self.held) > SHOWN_HOLDERS:
            out.append(f"... and {len(self.held) - SHOWN_HOLDERS} more name(s) holding it (--json lists every one)")
        if self.retexted:
            out.append(f"rewrote the keyword text of {self.retexted} later turn(s) that quoted a forgotten one")
        if self.requests:
            out.append(f"deleted {self.requests} stored tool result(s) holding it")
        if self.anything():
            out.append(
                "core state purged: " + (", ".join(f"{k}: {v}" for k, v in self.core.items()) or "nothing to do")
            )
        if self.purge_unfinished is not None:
            out.append(f"store files not purged yet: {self.purge_unfinished}")
        elif self.purged is not None:
            out.append(
                "store files purged: "
                + (", ".join(f"{k}: {v}" for k, v in self.purged.items()) or "nothing was pending")
            )
        elif self.anything():  # else nothing is pending: the store's files are left as they were
            out.append(
                "gone from search now; from the store's files at the next upkeep (`tiermem optimize`), "
                "or now with --now"
            )
        return out


def forget(memory: Memory, target: Target, *, now: bool = False) -> Forgotten:
    """Forget ``target`` (see ``Target``); with ``now`` the store's files are purged before returning, else at the
    next upkeep. The core state is purged at once either way (a local file's ``VACUUM``, or object deletes), when
    anything was forgotten (a forget that matched nothing rewrites nothing). A purge asked for ``now`` that does not
    finish (other processes kept committing to the tables) leaves what was forgotten forgotten: the report says so
    (``Forgotten.purge_unfinished``; the caller fails with it) and the purge stays pending for the next upkeep."""
    if target.kind not in KINDS:
        raise ValidationError(f"Cannot forget a {target.kind!r}; forget one of: {', '.join(KINDS)}.")
    if target.kind != "text" and target.agent_id is None:
        raise ValidationError(f"Forgetting a {target.kind} needs its agent.")
    done = Forgotten()
    agent_id = target.agent_id or ""
    if target.kind == "passage":
        _passages(memory, done, _where(target))
        if not done.passages:
            raise _missing(target)
    elif target.kind == "message":
        _messages(memory, done, agent_id, _where(target), None)
        if not done.messages:
            raise _missing(target)
    elif target.kind == "block":
        _block(memory, done, agent_id, _ref(target, "block label"), target.versions)
    elif target.kind == "agent":
        agent = memory.core.get_agent(agent_id)
        done.texts += [b.value for b in memory.blocks(agent_id) if b.value][:SHOWN_TEXTS]
        with forget_restore.recorded(
            memory, [forget_record.agent_key(agent.id, to_us(agent.created_at))]
        ):  # restores skip it
            deleted = memory.delete_agent(agent_id, purge=False)  # purged below; its rows marked for the store's purge
        done.agents.append(agent.name)
        done.passages, done.messages, done.versions = deleted.passages, deleted.messages, deleted.block_versions
    else:
        _text(memory, done, target.agent_id, _ref(target, "text"))
    if done.anything():
        done.core = memory.core.purge()
    if now:
        try:
            done.purged = memory.archive.rows.purge()
        except PurgeUnfinishedError as exc:  # reported, not raised: the rows are gone already, and the caller still
            done.purge_unfinished = str(exc)  # names (or edits) what holds the text outside the store
    return done


def check_found(memory: Memory, target: Target) -> None:
    """Raise ``NotFoundError`` when ``target``, a passage or a message, is not in the agent's memory: what a
    command checks before asking whether to forget it (other kinds are checked by ``forget``, or by the caller)."""
    if target.kind in ("passage", "message") and not memory.archive.rows.rows_where(f"{target.kind}s", _where(target)):
        raise _missing(target)


def _where(target: Target) -> Filter:
    """The rows of a passage (by its id or its insert's group) or of a message (by its id), in the agent's memory."""
    if target.kind == "passage":
        return Filter(agent_id=target.agent_id or "", id_or_group=_ref(target, "passage id"))
    return Filter(agent_id=target.agent_id or "", ids=(_ref(target, "message id"),))


def _missing(target: Target) -> NotFoundError:
    if target.kind == "passage":
        return NotFoundError(
            f"No archival passage with id {target.ref!r}; nothing was forgotten. Ids come from "
            "`tiermem search --archival --json` or archival_memory_list."
        )
    return NotFoundError(
        f"No message with id {target.ref!r}; nothing was forgotten. Ids come from `tiermem search --recall --json` "
        "or conversation_search."
    )


def purge_pending(memory: Memory) -> bool:
    """True while forgotten rows may still be in the store's files."""
    return bool(memory.archive.rows.purge_pending())


def _ref(target: Target, what: str) -> str:
    if not isinstance(target.ref, str) or not target.ref:
        raise ValidationError(f"Give the {what} to forget.")
    return target.ref


def _passages(memory: Memory, done: Forgotten, where: Filter) -> None:
    rows = memory.archive.rows
    found = rows.rows_where("passages", where)
    if not found:
        return
    done.texts += [r["content"] for r in found][:SHOWN_TEXTS]
    groups = tuple({r["group_id"] for r in found if r.get("group_id")})
    done.passage_ids += [r["id"] for r in found] + list(groups)
    chunks = rows.rows_where("passages", Filter(group_ids=groups)) if groups else []  # recorded first: restores skip
    with forget_restore.recorded(memory, forget_record.row_keys("passage", [*found, *chunks])):
        done.passages += rows.forget("passages", Filter(ids=tuple(r["id"] for r in found)))
        if groups:  # every chunk of an insert goes with any of them (chunks overlap: a neighbour holds part of it)
            done.passages += rows.forget("passages", Filter(group_ids=groups))
    memory.uses.forget([r["id"] for r in found], groups=groups)  # and how it was used


def _passages_across_chunks(memory: Memory, done: Forgotten, agent_id: str | None, text: str) -> None:
    """Forget the archival inserts stored in chunks whose text holds ``text`` across two chunks or more (no one chunk
    holds it): the chunks of every insert of the scope stored in chunks are read in one scan (their text, never their
    vectors) and the insert's text is made again from them and looked in (``rejoin.held``: where the chunks leave a
    join open, the texts the embedder's chunker does not cut into them again are dropped, within a bound for each
    insert and one for the whole forget, ``rejoin.Budget``, past which the join is looked in every way). No part of
    the text is sure to be in one chunk (a word cut into slices, a CJK run, is cut with no overlap, anywhere in it),
    so the chunks are not first narrowed by a part of it."""
    chunked = memory.archive.rows.chunked("passages", Filter(agent_id=agent_id))
    chunk = memory.archive.embedder.chunk
    budget = Budget()  # one for the whole forget: past it, each insert's open joins are looked in every way
    holding = tuple(group for group, chunks in chunked.items() if held(chunks, text, chunk, budget))
    if holding:
        _passages(memory, done, Filter(agent_id=agent_id, group_ids=holding))


def _messages(memory: Memory, done: Forgotten, agent_id: str | None, where: Filter, text: str | None) -> None:
    """Forget the messages of ``where``; the later turns whose keyword text quotes one (or ``text``) get it anew.
    With ``text``: also the messages whose payload holds it in what the model wrote (``_model_texts``)."""
    rows = memory.archive.rows
    found = [r for r in rows.rows_where("messages", where) if text is None or text in r["content"]]
    if text is not None:
        held = {r["id"] for r in found}
        found += [
            r
            for r in rows.rows_where("messages", Filter(agent_id=agent_id, payload_holds=text))
            if r["id"] not in held and any(text in t for t in _model_texts(r.get("payload") or ""))
        ]
    if not found and text is None:
        return
    gone = {r["id"] for r in found}
    contents = [r["content"] for r in found]
    done.texts += [c for c in contents if c][:SHOWN_TEXTS]
    conversations = {(r["agent_id"], r["conversation_id"]) for r in found}
    if text is not None:  # turns quoting the text only in their keyword text (the turn before them held it)
        quoting = rows.rows_where("messages", Filter(agent_id=agent_id, containing=text))
        conversations |= {(r["agent_id"], r["conversation_id"]) for r in quoting}
    # the conversations read, the rows deleted and the later turns written anew under the lock every writer of keyword
    # texts made from other rows holds (``AgentRows.rewriting_texts``): none writes a forgotten turn back meanwhile,
    # and one under way reads again the turns it checked before (``AgentRows.changing_turns``)
    with rows.changing_turns():
        _forget_turns(memory, done, conversations, gone, [c for c in contents if c] + ([text] if text else []), text)


def _forget_turns(
    memory: Memory,
    done: Forgotten,
    conversations: set[tuple[str, str]],
    gone: set[str],
    needles: list[str],
    text: str | None,
) -> None:
    """Delete the messages ``gone`` and write anew the keyword text of the turns of ``conversations`` that quote one
    of them (or any of ``needles``)."""
    rows = memory.archive.rows
    before = {
        key: sorted(
            rows.rows_where("messages", Filter(agent_id=key[0], conversation_id=key[1])),
            key=lambda r: (r["seq"], r["created_us"]),
        )
        for key in conversations
    }
    if gone:
        dying = [r for turns in before.values() for r in turns if r["id"] in gone]
        with forget_restore.recorded(
            memory, forget_record.row_keys("message", dying)
        ):  # recorded first: restores skip them
            done.messages += rows.forget("messages", Filter(ids=tuple(gone)))
        memory.uses.forget(gone)
    changed = []
    for (agent, _conversation), turns in before.items():
        previous, after_gone = "", False
        for r in turns:
            if r["id"] in gone:
                after_gone = True  # the next turn's keyword text holds the start of this one (maybe not all of it)
                continue
            if after_gone or any(n in r["text"] for n in needles) or (text and text in previous):
                r["text"] = shape_message(r["content"], written_on(r), _without(previous, text))
                changed.append(r)
            passing = passes_on(r["role"], r["content"])  # a tool result passes a forgotten turn's start on too
            previous, after_gone = context_of(r["role"], r["content"], previous), after_gone and passing
        memory.archive.forget_turns(agent)
    with forget_restore.recorded(
        memory, forget_record.row_keys("retext", changed)
    ):  # a restore writes them as edited here
        rows.retext("messages", changed)
    done.retexted += len(changed)


# The payload keys holding what the model wrote, beside a message's content: its own text when the content is its
# send_message reply or nothing (an answer calling conversation_search; ``agent.llm.MODEL_TEXT``), its reasoning
_MODEL_TEXT_KEYS = ("model_text", "reasoning")


def _model_texts(payload: str) -> list[str]:
    """The texts a message's payload keeps of what the model wrote: its own text and reasoning (``_MODEL_TEXT_KEYS``)
    and the string values of its tool calls' inputs (a send_message reply, a memory tool's text); none when the
    payload is not a JSON object. Its structure (kinds, tool names, ids, signatures) is no text of the model's."""
    try:
        value = json.loads(payload) if payload else None
    except (ValueError, RecursionError):  # not JSON, or nested too deep to read: no text of the model's found
        return []
    if not isinstance(value, dict):
        return []
    out = [t for t in (value.get(k) for k in _MODEL_TEXT_KEYS) if isinstance(t, str)]
    todo = [c.get("input") for c in value.get("tool_calls") or [] if isinstance(c, dict)]
    while todo:
        v = todo.pop()
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            todo += v.values()
        elif isinstance(v, list):
            todo += v
    return out


def _without(previous: str, text: str | None) -> str:
    return previous.replace(text, "") if text else previous


def _block(memory: Memory, done: Forgotten, agent_id: str, label: str, versions: tuple[int, ...] | None) -> None:
    block = memory.block(agent_id, label)
    if versions is not None:
        for v in versions:
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v < block.version:
                current = (
                    f"; version {block.version} is the current value: edit the block, then forget it"
                    if v == block.version
                    else ""
                )
                raise ValidationError(
                    f"Block {block.label!r} has past versions 1 to {block.version - 1}; cannot "
                    f"forget version {v!r}{current}. Nothing was forgotten."
                )
    wanted = set(range(1, block.version)) if versions is None else set(versions)
    _forget_versions(memory, done, block, wanted, agent_id)


def _forget_versions(memory: Memory, done: Forgotten, block: Block, wanted: set[int], agent_id: str | None) -> None:
    """Forget these past versions of ``block``, and the idempotency records of ``agent_id`` (None: every agent's)
    holding what they alone held."""
    history = memory.core.history(block.id)
    gone = [v for v in history if v.version in wanted]
    if not gone:
        return
    done.texts += _spans(gone, [v for v in history if v.version not in wanted])[:SHOWN_TEXTS]
    with forget_restore.recorded(
        memory, [forget_record.version_key(v.block_id, v.version, to_us(v.created_at)) for v in gone]
    ):
        done.versions += memory.core.forget_versions(block.id, wanted)
    for t in done.texts[-SHOWN_TEXTS:]:
        done.requests += memory.core.forget_requests(t, agent_id=agent_id)


def _spans(gone: list[BlockVersion], kept: list[BlockVersion]) -> list[str]:
    """The lines of the forgotten values that no kept value has: what to look for in files and git history."""
    have = {line for v in kept for line in v.value.splitlines()}
    out: dict[str, None] = {}
    for v in gone:
        for line in v.value.splitlines():
            if line.strip() and line not in have:
                out[line] = None
    return list(out)


def _text(memory: Memory, done: Forgotten, agent_id: str | None, text: str) -> None:
    if len(text.strip()) < 3:
        raise ValidationError("Give at least 3 characters of text to forget (every row holding it is forgotten).")
    done.texts.append(text)
    _passages(memory, done, Filter(agent_id=agent_id, containing=text))
    _passages_across_chunks(memory, done, agent_id, text)
    _messages(memory, done, agent_id, Filter(agent_id=agent_id, containing=text), text)
    agents = [memory.core.get_agent(agent_id)] if agent_id is not None else memory.list_agents()
    seen: set[str] = set()
    for agent in agents:
        for block in memory.blocks(agent.id):
            if block.id in seen:
                continue
            seen.add(block.id)
            current = block
            if text in block.value:  # the current value too: the text is edited out, then that version forgotten
                current, edited = _edited_out(memory, agent.id, block, text)
                if edited:
                    done.edited.append(current.label)
            if text in current.description:
                current = memory.update_block(
                    agent.id, current.label, description=current.description.replace(text, ""), operation="forget"
                )
            holding = {
                v.version for v in memory.core.history(block.id) if v.version != current.version and _holds(v, text)
            }
            if holding:
                _forget_versions(memory, done, current, holding, agent_id)
    done.notes += memory.archive.links.forget_text(text, agent_id)
    for agent in agents:
        if text in agent.system:  # recorded first: a restore of an older copy keeps the prompt as edited here
            edited_us = to_us(now_())
            with forget_restore.recorded(
                memory, [forget_record.system_key(agent.id, to_us(agent.created_at), edited_us)]
            ):
                memory.set_agent_metadata(agent.id, {}, system=agent.system.replace(text, ""))
            done.prompts.append(agent.name)
    if agent_id is None:  # folders are shared: only a forget over every agent's memory edits them
        for folder in memory.files.folders():
            if text in folder.description or text in folder.instructions:
                memory.archive.rows.purge_old_copies("folders", (folder.id,))  # its old row leaves the files
                memory.files.update_folder(
                    folder.id,  # (by id: a name an older tiermem gave two folders is refused)
                    description=folder.description.replace(text, ""),
                    instructions=folder.instructions.replace(text, ""),
                )
                done.folder_texts.append(folder.name)
    names = {f.id: f.name for f in memory.files.folders()}
    attached = memory.files.seen(agent_id).folder_ids() if agent_id is not None else None  # only its own folders
    files = memory.archive.files.holding(text, folder_ids=attached)
    done.files += [f"{names.get(folder, folder)}/{name}" for folder, name in files]
    done.held += _names_holding(memory, agent_id, text, agents)
    done.requests += memory.core.forget_requests(text, agent_id=agent_id)
    done.texts = list(dict.fromkeys([text, *done.texts]))[:SHOWN_TEXTS]


def _names_holding(memory: Memory, agent_id: str | None, text: str, agents: list[Agent]) -> list[Holder]:
    """The tags and projects of the rows left, and the labels of the blocks, that hold ``text``."""
    names = {a.id: a.name for a in memory.list_agents()}
    rows = memory.archive.rows
    found: dict[tuple[str, str, str], Holder] = {}

    def add(where: str, agent: str, ref: str, fix: str) -> None:
        found.setdefault((where, agent, ref), Holder(where, agent, ref, fix))

    for r in rows.rows_where("passages", Filter(agent_id=agent_id, tag_holds=text)):
        if any(text in tag for tag in r.get("tags") or ()):
            ref, agent = r.get("group_id") or r["id"], names.get(r["agent_id"], r["agent_id"])
            fix = f"forget the passage: `tiermem forget passage {ref} --agent {shlex.quote(agent)}`"
            add("passage tag", agent, ref, fix)
    for table in ("passages", "messages"):
        kind = table[:-1]
        for r in rows.rows_where(table, Filter(agent_id=agent_id, project_holds=text)):
            ref = (r.get("group_id") or r["id"]) if kind == "passage" else r["id"]
            agent = names.get(r["agent_id"], r["agent_id"])
            fix = f"forget the {kind}: `tiermem forget {kind} {ref} --agent {shlex.quote(agent)}`"
            add(f"{kind} project", agent, ref, fix)
    seen: set[str] = set()
    for a in agents:
        for block in memory.blocks(a.id):
            if text in block.label and block.id not in seen:  # a shared block once, under its first agent
                seen.add(block.id)
                add(
                    "block label",
                    a.name,
                    block.label,
                    f"rename the block (`tiermem blocks set {shlex.quote(block.label)} --label NEW --agent {shlex.quote(a.name)}`), "
                    "then run this forget again: it forgets the past versions that carry the old label",
                )
    return list(found.values())


def _edited_out(memory: Memory, agent_id: str, block: Block, text: str, tries: int = 5) -> tuple[Block, bool]:
    """``block`` committed without ``text``, computed from the version it replaces: an edit another writer commits
    meanwhile is not overwritten (``ConflictError``: read again, under its label now, and edit out again), up to
    ``tries`` times. (The block as it stands, whether this call edited it: another writer may have taken the text
    out first.)"""
    attempt = 1
    while True:
        try:
            edited = memory.edit(
                agent_id,
                block.label,
                Rethink(block.value.replace(text, ""), operation="forget", check_line_numbers=False),
                actor="human",
                expected_version=block.version,
            )
            return edited, True
        except (ConflictError, NotFoundError):  # changed meanwhile, or renamed (its label is not found): read again
            if attempt == tries:
                raise
        attempt += 1
        fresh = memory.core.get_block(block.id)
        if fresh is None:
            raise NotFoundError(
                f"Block {block.label!r} was deleted while the text was being forgotten from it: run the forget again."
            )
        block = fresh
        if text not in block.value:
            return block, False


def _holds(v: BlockVersion, text: str) -> bool:
    return any(text in s for s in (v.value, v.label, v.description, v.operation))
