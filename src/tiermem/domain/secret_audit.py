"""``tiermem doctor --secrets``: credentials already stored (before ``secret_scan``, or with it off), found and, on
request, redacted.

``scan`` reads every block (its current value and every version of its history), every message (content, the
searched text, which repeats the previous turn, and the payload), every archival passage and every file of a folder,
and reports each finding's kind and where it is (agent, block / message / passage / file id, line and characters),
never the secret. ``redact`` rewrites what it found: a block's value as a new version by the actor "doctor", message
and passage rows in place (re-embedded). Older versions keep the text until it is purged: a block's history, the
store's older table versions (``tiermem optimize`` drops them after ``version_retention_seconds``) and files (fix the
source, then sync or upload it again).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..base.errors import TiermemError
from . import secrets
from .blocks import Rethink

if TYPE_CHECKING:
    from ..base.config import Settings
    from .memory import Memory

PURGE_NOTE = (
    "Older copies still hold the text until they are purged: block history (`tiermem forget` removes a "
    "block's past values), the store's superseded table versions (dropped by the next upkeep or `tiermem "
    "optimize` once older than version_retention_seconds); a synced folder's source files still hold it (fix "
    "them, or the next sync brings the text back)."
)


@dataclass(frozen=True)
class Found:
    agent: str  # agent name ("" for folder files, which belong to no agent)
    where: str  # "block human", "block human, version 3", "message <id>", "passage <id>", "file <folder>/<name>"
    kinds: tuple[str, ...]
    places: str  # "an AWS access key (line 2, characters 8-27)"
    fixable: bool  # redact() rewrites it (a current block value, a message, a passage)


@dataclass
class Audit:
    found: list[Found] = field(default_factory=list)
    blocks: dict[tuple[str, str], str] = field(default_factory=dict)  # (agent id, label) -> redacted value
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # table -> redacted rows
    files: dict[str, str] = field(default_factory=dict)  # folder file id -> its redacted text

    def counts(self) -> Counter[str]:
        return Counter(kind for f in self.found for kind in f.kinds)


def _note(audit: Audit, agent: str, where: str, text: str, *, fixable: bool) -> bool:
    found = secrets.find(text)
    if found:
        audit.found.append(Found(agent, where, tuple(f.kind for f in found), secrets.describe(text, found), fixable))
    return bool(found)


def scan(memory: Memory) -> Audit:
    """Every credential stored in ``memory``: blocks with their history, messages, passages, folder files."""
    audit = Audit()
    agents = {a.id: a.name for a in memory.list_agents()}
    seen: set[str] = set()
    for agent_id, name in agents.items():
        for block in memory.blocks(agent_id):
            if _note(audit, name, f"block {block.label}", block.value, fixable=True):
                audit.blocks[(agent_id, block.label)] = secrets.redact(block.value).text
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
                    )
    rows = memory.archive.rows
    for table, kind in (("messages", "message"), ("passages", "passage")):
        for row in rows.backup_rows(table, vectors=False):
            fields = ["content", "text"] + (["payload"] if table == "messages" else [])
            texts = {f: str(row.get(f) or "") for f in fields}
            hit = False
            for f in fields:
                hit = (
                    _note(
                        audit,
                        agents.get(row["agent_id"], row["agent_id"]),
                        f"{kind} {row['id']} ({'searched text' if f == 'text' else f})",
                        texts[f],
                        fixable=True,
                    )
                    or hit
                )
            if hit:
                redacted = {
                    f: secrets.redact_json(texts[f]) if f == "payload" else secrets.redact(texts[f]).text
                    for f in fields
                }
                audit.rows.setdefault(table, []).append({**row, **redacted, "vector": None})
    files = memory.archive.files
    folders = {f.id: f.name for f in files.folders()}
    listing = files.listing()
    texts = files.texts([f.id for f in listing])
    for stored in listing:
        text = texts.get(stored.id, "")
        if _note(
            audit, "", f"file {folders.get(stored.folder_id, stored.folder_id)}/{stored.name}", text, fixable=True
        ):
            audit.files[stored.id] = secrets.redact(text).text
    return audit


def redact(memory: Memory, audit: Audit) -> list[str]:
    """Rewrite what ``scan`` found: block values as new versions by "doctor", message and passage rows in place
    (re-embedded); one line per thing done."""
    done: list[str] = []
    for (agent_id, label), value in audit.blocks.items():
        try:
            memory.edit(
                agent_id, label, Rethink(value, operation="doctor:redact", check_line_numbers=False), actor="doctor"
            )
            done.append(f"block {label} of agent {agent_id}: redacted as a new version")
        except TiermemError as exc:
            done.append(f"block {label} of agent {agent_id}: NOT redacted: {exc}")
    for table, table_rows in audit.rows.items():
        for start in range(0, len(table_rows), 256):
            batch = table_rows[start : start + 256]
            memory.archive.vectors.embed_rows(batch)
            memory.archive.rows.rewrite_rows(table, batch)
        done.append(f"{table}: {len(table_rows)} row(s) redacted")
    for file_id, text in audit.files.items():
        try:
            name = memory.files.replace_text(file_id, text)
            done.append(f"file {name}: redacted (its chunks and the agents' open windows cut again)")
        except TiermemError as exc:
            done.append(f"file {file_id}: NOT redacted: {exc}")
    return done


def doctor_secrets(settings: Settings, *, redact_found: bool = False, yes: bool = False, as_json: bool = False) -> int:
    """``tiermem doctor --secrets [--redact [--yes]]``: report (exit 1 when something is found and left), redact."""
    from .factory import open_memory

    memory = open_memory(settings, start_embedder=redact_found and yes)
    audit = scan(memory)
    done = redact(memory, audit) if audit.found and redact_found and yes else []
    counts = audit.counts()
    if as_json:
        print(
            json.dumps(
                {
                    "found": len(audit.found),
                    "by_kind": dict(counts),
                    "where": [
                        {
                            "agent": f.agent,
                            "where": f.where,
                            "kinds": list(f.kinds),
                            "places": f.places,
                            "redactable": f.fixable,
                        }
                        for f in audit.found
                    ],
                    "redacted": done,
                    **({"note": PURGE_NOTE} if done else {}),
                },
                indent=2,
            )
        )
    else:
        if not audit.found:
            print("secrets: none found in blocks (with their history), messages, passages or folder files")
            return 0
        print(
            f"secrets: {len(audit.found)} place(s) hold credentials: "
            + ", ".join(f"{kind}: {n}" for kind, n in counts.most_common())
        )
        for f in audit.found:
            print(f"  {('agent ' + f.agent + ': ') if f.agent else ''}{f.where}: {f.places}")
        if done:
            print("redacted:")
            print("\n".join(f"  {line}" for line in done))
            print(PURGE_NOTE)
        elif redact_found:
            print("Nothing was changed: run again with --redact --yes to rewrite them.", file=sys.stderr)
        else:
            print("Redact them with `tiermem doctor --secrets --redact --yes`.", file=sys.stderr)
    return 0 if done or not audit.found else 1
