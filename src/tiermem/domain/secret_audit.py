"""``tiermem doctor --secrets``: credentials already stored (before ``secret_scan``, or with it off), found and, on
request, redacted.

``scan`` reads every block (its current value and every version of its history), every message (content, the
searched text, which repeats the previous turn, the payload, checked as it is redacted: a tool call's id is no
credential, and the project), every archival passage (with its tags
and project) and every file of a folder (its text and its name),
and reports each finding's kind and where it is (agent, block / message / passage / file id, line and characters),
never the secret. ``redact`` rewrites what it found: a block's value as a new version by the actor "doctor", message
and passage rows in place (re-embedded). Older versions keep the text until it is purged: the store's older table
versions (``tiermem optimize`` drops them after ``version_retention_seconds``) and files (fix the source, then sync or
upload it again). A block's history is never rewritten in place: its past versions holding a credential (and, once a
value is redacted, the version it replaced) are named with the ``tiermem forget block`` command that removes them,
and the command exits 1 while any is left.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..base.errors import TiermemError
from ..base.quoting import printable
from . import secrets
from .blocks import Rethink
from .search.cjk import base_of, keyword_text

if TYPE_CHECKING:
    from ..base.config import Settings
    from .memory import Memory

PURGE_NOTE = (
    "Older copies still hold the text until they are purged: the store's superseded table versions (dropped by the "
    "next upkeep or `tiermem optimize` once older than version_retention_seconds); a synced folder's source files "
    "still hold it (fix them, or the next sync brings the text back)."
)


@dataclass(frozen=True)
class Version:
    """One version of a block: what ``tiermem forget block LABEL --agent AGENT --version N`` removes."""

    agent: str  # the name of an agent the block is attached to
    label: str
    block_id: str
    number: int


@dataclass(frozen=True)
class Found:
    agent: str  # agent name ("" for folder files, which belong to no agent)
    where: str  # "block human", "block human, version 3", "message <id>", "passage <id>", "file <folder>/<name>"
    kinds: tuple[str, ...]
    places: str  # "an AWS access key (line 2, characters 8-27)"
    fixable: bool  # redact() rewrites it (a current block value, a message, a passage)
    version: Version | None = None  # a block's: its current version, or the past one (not fixable) it is in


@dataclass
class Audit:
    found: list[Found] = field(default_factory=list)
    blocks: dict[tuple[str, str], str] = field(default_factory=dict)  # (agent id, label) -> redacted value
    block_ids: dict[tuple[str, str], str] = field(default_factory=dict)  # (agent id, label) -> block id, of ``blocks``
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # table -> redacted rows
    files: dict[str, str] = field(default_factory=dict)  # folder file id -> its redacted text
    # folder file id -> (folder id, folder name, file name) of a file whose name holds a credential: ``redact``
    # deletes it (by its folder's id: a name an older tiermem left to two folders is refused)
    named_files: dict[str, tuple[str, str, str]] = field(default_factory=dict)

    def counts(self) -> Counter[str]:
        return Counter(kind for f in self.found for kind in f.kinds)


def _note(
    audit: Audit,
    agent: str,
    where: str,
    text: str,
    *,
    fixable: bool,
    version: Version | None = None,
    seen: list[str] | None = None,
) -> bool:
    """Whether ``text`` holds a credential; each is noted in ``audit``, but one ``seen`` already holds (a row's
    credentials found so far: its content's, repeated in its searched text and that text's line of bigrams) is noted
    once (``seen`` gets those found)."""
    found = secrets.find(text)
    new = found
    if seen is not None:
        new = []
        for f in found:
            secret = text[f.start : f.end]
            if not any(secret in earlier for earlier in seen):
                new.append(f)
                seen.append(secret)
    if new:
        kinds = tuple(f.kind for f in new)
        audit.found.append(Found(agent, where, kinds, secrets.describe(text, new), fixable, version))
    return bool(found)


def _note_payload(audit: Audit, agent: str, where: str, payload: str) -> bool:
    """``_note`` of a message's payload, checked as it is redacted (``secrets.redact_json``): a credential in a string
    of it, or told by its key, named by its path; a random-looking string (a tool call's id, a reasoning signature) is
    an id, which ``redact`` would leave as it is. Text that is not JSON is checked as text."""
    found, in_text = secrets.find_in_json(payload)
    if in_text:
        return _note(audit, agent, where, payload, fixable=True)
    if found:
        kinds = tuple(kind for _, kind in found)
        audit.found.append(Found(agent, where, kinds, secrets.describe_paths(found), True))
    return bool(found)


def scan(memory: Memory) -> Audit:
    """Every credential stored in ``memory``: blocks with their history, messages, passages, folder files."""
    audit = Audit()
    agents = {a.id: a.name for a in memory.list_agents()}
    seen: set[str] = set()
    for agent_id, name in agents.items():
        for block in memory.blocks(agent_id):
            current = Version(name, block.label, block.id, block.version)
            if _note(audit, name, f"block {block.label}", block.value, fixable=True, version=current):
                audit.blocks[(agent_id, block.label)] = secrets.redact(block.value).text
                audit.block_ids[(agent_id, block.label)] = block.id
            if block.id in seen:
                continue
            seen.add(block.id)
            for version in memory.core.history(block.id):
                if version.version != block.version:
                    _note(
                        audit,
                        name,
                        f"block {block.label}, version {version.version} (history)",
                        version.value,
                        fixable=False,
                        version=Version(name, block.label, block.id, version.version),
                    )
    rows = memory.archive.rows
    for table, kind in (("messages", "message"), ("passages", "passage")):
        for row in rows.backup_rows(table, vectors=False):
            _scan_row(audit, agents.get(row["agent_id"], row["agent_id"]), table, kind, row)
    files = memory.archive.files
    folders = {f.id: f.name for f in files.folders()}
    listing = files.listing()
    texts = files.texts([f.id for f in listing])
    for stored in listing:
        text = texts.get(stored.id, "")
        folder = folders.get(stored.folder_id, stored.folder_id)
        shown = secrets.redact(f"{folder}/{stored.name}").text  # a name holding a credential is never echoed
        if _note(audit, "", f"file {shown} (its name)", stored.name, fixable=True):
            audit.named_files[stored.id] = (stored.folder_id, folder, stored.name)
        elif _note(audit, "", f"file {shown}", text, fixable=True):
            audit.files[stored.id] = secrets.redact(text).text
    return audit


def _scan_row(audit: Audit, agent: str, table: str, kind: str, row: dict[str, Any]) -> None:
    """A message's or a passage's texts (content, searched text, payload), its project and a passage's tags; a row
    holding a credential is kept in ``audit.rows`` redacted (its vector dropped: it is embedded again). The searched
    text repeats the content (and a message's, the turn before it): a credential found in both is noted once, at the
    content (the searched text is redacted too)."""
    fields = ["content", "text"] + (["payload"] if table == "messages" else [])
    texts = {f: str(row.get(f) or "") for f in fields}
    names = {"text": "searched text"}
    hit = False
    seen: list[str] = []  # a credential in the content and the searched text is counted once
    for f in fields:
        where = f"{kind} {row['id']} ({names.get(f, f)})"
        if f == "payload":
            hit = _note_payload(audit, agent, where, texts[f]) or hit
        else:
            hit = _note(audit, agent, where, texts[f], fixable=True, seen=seen) or hit
    project = row.get("project")
    if isinstance(project, str) and _note(audit, agent, f"{kind} {row['id']} (project)", project, fixable=True):
        hit = True
    tags = [str(t) for t in row.get("tags") or ()]
    for n, tag in enumerate(tags):
        hit = _note(audit, agent, f"{kind} {row['id']} (tag {n + 1})", tag, fixable=True) or hit
    if not hit:
        return
    redacted: dict[str, Any] = {
        f: secrets.redact_json(texts[f]) if f == "payload" else secrets.redact(texts[f]).text for f in fields
    }
    # the keyword text's bigrams line made again from the redacted text (letters glued to Chinese, Japanese or Korean
    # characters are written there apart: a credential glued to them would otherwise stay, unrecognised)
    redacted["text"] = secrets.redact(keyword_text(secrets.redact(base_of(texts["text"])).text)).text
    if isinstance(project, str):
        redacted["project"] = secrets.redact(project).text
    if table == "passages":
        redacted["tags"] = [secrets.redact(t).text for t in tags]
    audit.rows.setdefault(table, []).append({**row, **redacted, "vector": None})


@dataclass
class Redacted:
    """What ``redact`` did: one line per thing, the blocks given a redacted version, the places it could not fix."""

    lines: list[str] = field(default_factory=list)
    blocks: set[str] = field(default_factory=set)  # block ids
    failed: int = 0


def redact(memory: Memory, audit: Audit) -> Redacted:
    """Rewrite what ``scan`` found: block values as new versions by "doctor", message and passage rows in place
    (re-embedded), folder files' texts; a folder file whose name holds a credential is deleted (a file's name is its
    id's source: it cannot be renamed in place)."""
    done = Redacted()
    for (agent_id, label), value in audit.blocks.items():
        try:
            memory.edit(
                agent_id, label, Rethink(value, operation="doctor:redact", check_line_numbers=False), actor="doctor"
            )
            done.lines.append(f"block {label} of agent {agent_id}: redacted as a new version")
            done.blocks.add(audit.block_ids[(agent_id, label)])
        except TiermemError as exc:
            done.lines.append(f"block {label} of agent {agent_id}: NOT redacted: {exc}")
            done.failed += 1
    for table, table_rows in audit.rows.items():
        for start in range(0, len(table_rows), 256):
            batch = table_rows[start : start + 256]
            memory.archive.vectors.embed_rows(batch)
            memory.archive.rows.rewrite_rows(table, batch)
        done.lines.append(f"{table}: {len(table_rows)} row(s) redacted")
    for file_id, text in audit.files.items():
        try:
            name = memory.files.replace_text(file_id, text)
            done.lines.append(f"file {name}: redacted (its chunks and the agents' open windows cut again)")
        except TiermemError as exc:
            done.lines.append(f"file {file_id}: NOT redacted: {exc}")
            done.failed += 1
    for file_id, (folder_id, folder, name) in audit.named_files.items():
        shown = secrets.redact(f"{folder}/{name}").text
        try:
            memory.files.delete_files(folder_id, [name])
            done.lines.append(
                f"file {shown}: deleted (a name cannot be redacted in place: rename the source file without the "
                "credential and upload it again)"
            )
        except TiermemError as exc:
            done.lines.append(f"file {shown} ({file_id}): NOT deleted: {secrets.redact(str(exc)).text}")
            done.failed += 1
    return done


def past_versions(audit: Audit, done: Redacted | None) -> list[Version]:
    """The block versions left holding a credential: the past ones found, and (after ``redact``) the current
    values it replaced, which are past versions now."""
    return [
        f.version
        for f in audit.found
        if f.version is not None and (not f.fixable or (done is not None and f.version.block_id in done.blocks))
    ]


def forget_commands(versions: list[Version]) -> list[str]:
    """One ``tiermem forget block`` command per block, naming its versions."""
    by_block: dict[str, tuple[Version, set[int]]] = {}
    for v in versions:
        by_block.setdefault(v.block_id, (v, set()))[1].add(v.number)
    return [
        f"tiermem forget block {shlex.quote(v.label)} --agent {shlex.quote(v.agent)} "
        + " ".join(f"--version {n}" for n in sorted(numbers))
        + " --now"
        for v, numbers in by_block.values()
    ]


def doctor_secrets(settings: Settings, *, redact_found: bool = False, yes: bool = False, as_json: bool = False) -> int:
    """``tiermem doctor --secrets [--redact [--yes]]``: report, redact what can be in place (``--redact --yes``) and
    name the commands that forget the block versions holding credentials. Exits 1 while credentials are left."""
    from .factory import open_memory

    memory = open_memory(settings, start_embedder=redact_found and yes)
    audit = scan(memory)
    fixable = sum(f.fixable for f in audit.found)
    done = redact(memory, audit) if fixable and redact_found and yes else None
    commands = forget_commands(past_versions(audit, done))
    left = bool(commands) or (fixable > 0 and (done is None or done.failed > 0))
    if as_json:
        print(json.dumps(_report(audit, done, commands), indent=2))
        return 1 if left else 0
    if not audit.found:
        print("secrets: none found in blocks (with their history), messages, passages or folder files (or their names)")
        return 0
    counts = audit.counts()
    print(
        f"secrets: {len(audit.found)} place(s) hold credentials: "
        + ", ".join(f"{kind}: {n}" for kind, n in counts.most_common())
    )
    for f in audit.found:
        print(printable(f"  {('agent ' + f.agent + ': ') if f.agent else ''}{f.where}: {f.places}"))
    if done is not None:
        print("redacted:")
        print(printable("\n".join(f"  {line}" for line in done.lines)))
        print(PURGE_NOTE)
    elif fixable:
        ask = "Nothing was changed: run again with --redact --yes" if redact_found else "Run"
        if not redact_found:
            ask += " `tiermem doctor --secrets --redact --yes`"
        print(
            f"{ask} to redact the {fixable} place(s) that can be redacted in place (current block values, messages, "
            "passages, folder files; a folder file whose name holds a credential is deleted).",
            file=sys.stderr,
        )
    if commands:
        after = " (the values it replaced are past versions now)" if done is not None and done.blocks else ""
        print(
            f"Block history is never rewritten in place{after}: forget the past versions that hold credentials with"
            + ("" if len(commands) == 1 else " these commands")
            + ":"
        )
        print(printable("\n".join(f"  {c}" for c in commands)))
    if done is None and any(f.fixable and f.version for f in audit.found):
        print("Redacting a block's value keeps the old one as a past version: that run names it to forget too.")
    return 1 if left else 0


def _report(audit: Audit, done: Redacted | None, commands: list[str]) -> dict[str, Any]:
    return {
        "found": len(audit.found),
        "by_kind": dict(audit.counts()),
        "where": [
            {"agent": f.agent, "where": f.where, "kinds": list(f.kinds), "places": f.places, "redactable": f.fixable}
            for f in audit.found
        ],
        "redacted": done.lines if done is not None else [],
        "forget": commands,
        **({"note": PURGE_NOTE} if done is not None else {}),
    }
