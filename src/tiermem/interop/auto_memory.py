"""Claude Code's auto memory and tiermem as one: a directory both keep, synced both ways.

Claude Code (2.1.197, measured) keeps its own memory in a directory (``autoMemoryDirectory``, else
``~/.claude/projects/<project>/memory/``): one Markdown file per fact with frontmatter (``name``, ``description``,
``metadata.type``), written by the model with its Write tool, and ``MEMORY.md``, an index of one line per file
(``- [Title](file.md) — hook``), which is the only part loaded into context at session start (the files are read on
demand). ``tiermem setup claude-code`` points ``autoMemoryDirectory`` at ``<data dir>/auto-memory/<agent>/`` and
``sync`` keeps it and tiermem in step (the server runs it on hook events: at a session's start, before core memory is
given, and after each reply):

- each of Claude Code's files (any ``*.md`` but ``MEMORY.md`` and tiermem's own) is an archival passage of tiermem,
  tagged ``claude-auto-memory`` and its name, so every host finds it (``archival_memory_search``, and the prompt
  hooks' recall); a file changed replaces its passage, a file removed removes it;
- each core block is a file ``tiermem-<label>.md`` (frontmatter, the value as body) with a line in ``MEMORY.md``
  that carries the block's start, so a block edit made anywhere is in what Claude Code loads next session; a block
  file Claude Code's model edits becomes the block's new value (a block is never written from a file it did not
  change);
- ``MEMORY.md`` keeps every line of Claude Code's; tiermem's lines (those linking ``tiermem-*.md``) go first and are
  rewritten each sync.

What sync wrote last is kept in ``.tiermem-sync.json`` in the directory (each file's digest and passage id, each
block file's digest), so it tells an edit on either side from its own writes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.files import write_text_atomically
from ..base.quoting import drop_private

if TYPE_CHECKING:
    from ..base.config import Settings
    from ..domain.memory import Memory

log = logging.getLogger(__name__)

INDEX = "MEMORY.md"
STATE = ".tiermem-sync.json"
OWN = "tiermem-"  # tiermem's block files
TAG = "claude-auto-memory"
HOOK_CHARS = 150  # of a block's value in its MEMORY.md line
_OWN_LINE = re.compile(r"^\s*-\s*\[[^\]]*\]\(tiermem-[^)]*\.md\)")


def directory(data_dir: Path, agent: str) -> Path:
    return data_dir / "auto-memory" / agent


@dataclass
class Synced:
    imported: int = 0  # Claude Code's files stored (new or changed)
    removed: int = 0  # passages of files that are gone
    blocks_written: int = 0  # block files (re)written
    blocks_edited: int = 0  # blocks changed from their files


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def split(text: str) -> tuple[dict[str, str], str]:
    """(frontmatter fields, body) of a memory file; nested keys flattened (``metadata.type`` -> ``type``)."""
    if not text.startswith("---"):
        return {}, text
    end = text.find("\n---", 3)
    if end < 0:
        return {}, text
    fields = {}
    for line in text[3:end].splitlines():
        key, sep, value = line.strip().partition(":")
        if sep and value.strip():
            fields[key.strip()] = value.strip().strip("\"'")
    return fields, text[end + 4 :].lstrip("\n")


def _block_file(label: str, description: str, value: str) -> str:
    about = " ".join(description.split()) or f"tiermem core memory block {label}"
    return (
        f"---\nname: {OWN}{label}\ndescription: tiermem core memory, block {label}: {about}\n"
        f"metadata:\n  type: user\n---\n\n{value.rstrip()}\n"
    )


def _index_line(label: str, value: str) -> str:
    start = " ".join(value.split())
    start = start if len(start) <= HOOK_CHARS else start[: HOOK_CHARS - 1] + "…"
    return f"- [tiermem {label}]({OWN}{label}.md) — {start or '(empty)'}"


def sync(memory: Memory, agent_id: str, folder: Path) -> Synced:
    """One sync of ``folder`` and the agent's memory (see the module's docstring); nothing when the folder is
    missing (auto memory is not set up for this memory)."""
    done = Synced()
    if not folder.is_dir():
        return done
    state_path = folder / STATE
    try:
        state: dict[str, Any] = json.loads(state_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        state = {}
    files: dict[str, dict[str, Any]] = state.setdefault("files", {})
    block_files: dict[str, str] = state.setdefault("blocks", {})
    seen = set()
    for path in sorted(folder.glob("*.md")):
        if path.name == INDEX or path.name.startswith(OWN):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            log.info("auto memory: cannot read %s: %s", path, exc)
            continue
        seen.add(path.name)
        known = files.get(path.name)
        digest = _digest(text)
        if known and known.get("digest") == digest:
            continue
        fields, body = split(text)
        name = fields.get("name") or path.stem
        about = fields.get("description", "")
        content = (f"{about}\n\n" if about else "") + body.strip()
        content = memory.scrub(drop_private(content))  # as every hook-captured text: no private span, no credential
        if not content.strip():
            continue
        ids = memory.archive.insert(agent_id, content, [TAG, name])
        for old in (known or {}).get("passages", []):
            memory.archive.delete(agent_id, old)
        files[path.name] = {"digest": digest, "passages": ids}
        done.imported += 1
    for gone in set(files) - seen:
        for old in files.pop(gone).get("passages", []):
            memory.archive.delete(agent_id, old)
        done.removed += 1
    lines = []
    for block in memory.blocks(agent_id):
        path = folder / f"{OWN}{block.label}.md"
        value = block.value
        try:
            current = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            current = None
        written = block_files.get(block.label)
        if current is not None and written is not None and _digest(current) != written and not block.read_only:
            from ..domain.blocks import Rethink

            edited = memory.scrub(drop_private(split(current)[1].strip()))  # the file is rewritten without them
            if edited != value.strip():
                value = memory.edit(agent_id, block.label, Rethink(edited), actor="claude-code auto memory").value
                done.blocks_edited += 1
        text = _block_file(block.label, block.description, value)
        if text != current:
            write_text_atomically(path, text)
            done.blocks_written += 1
        block_files[block.label] = _digest(text)
        lines.append(_index_line(block.label, value))
    index = folder / INDEX
    try:
        theirs = [line for line in index.read_text(encoding="utf-8").splitlines() if not _OWN_LINE.match(line)]
    except FileNotFoundError:
        theirs = []
    text = "\n".join([*lines, *theirs]).rstrip("\n") + "\n"
    if not index.exists() or index.read_text(encoding="utf-8") != text:
        write_text_atomically(index, text)
    write_text_atomically(state_path, json.dumps(state, indent=2) + "\n")
    return done


def gather(sources: list[Path], folder: Path) -> list[str]:
    """Copy the auto-memory files of ``sources`` (Claude Code's folders before setup) into ``folder``: each topic
    file, renamed when another of that name differs, and each index line. The sources are left as they were; the
    next sync stores the copies in tiermem. One line per file copied."""
    folder.mkdir(parents=True, exist_ok=True)
    index = folder / INDEX
    try:
        kept = index.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        kept = []
    copied = []
    for source in sources:
        if not source.is_dir() or source.resolve() == folder.resolve():
            continue
        renamed: dict[str, str] = {}
        for path in sorted(source.glob("*.md")):
            if path.name == INDEX or path.name.startswith(OWN):
                continue
            text = path.read_text(encoding="utf-8")
            target = folder / path.name
            if target.exists() and target.read_text(encoding="utf-8") != text:
                target = folder / f"{path.stem}-{hashlib.sha256(str(source).encode()).hexdigest()[:6]}.md"
                renamed[path.name] = target.name
            if not target.exists():
                write_text_atomically(target, text)
                copied.append(f"{path} -> {target}")
        try:
            lines = (source / INDEX).read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            lines = []
        for line in lines:
            for old, new in renamed.items():
                line = line.replace(f"({old})", f"({new})")
            if line.strip() and line not in kept:
                kept.append(line)
    if kept:
        write_text_atomically(index, "\n".join(kept) + "\n")
    return copied


SETTING = "autoMemoryDirectory"


def point(settings: dict[str, Any], record: dict[str, Any], folder: Path) -> str:
    """Claude Code's settings pointed at ``folder`` (what was there first kept in ``record``, setup's); what changed,
    or "" when they already were."""
    if settings.get(SETTING) == str(folder):
        return ""
    if "auto_memory_before" not in record:  # the first setup's: what uninstall puts back
        record["auto_memory_before"] = {"value": settings.get(SETTING), "had": SETTING in settings}
    settings[SETTING] = record["auto_memory_wrote"] = str(folder)
    return f"{SETTING} -> {folder}"


def unpoint(settings: dict[str, Any], record: dict[str, Any], folder: Path | None) -> str:
    """The user's setting put back (or removed) if it is still setup's; what changed, or "". The files stay."""
    wrote = record.get("auto_memory_wrote") or (str(folder) if folder is not None else None)
    if wrote is None or settings.get(SETTING) != wrote:
        return ""
    before = record.get("auto_memory_before", {})
    if before.get("had") and before.get("value") is not None:
        settings[SETTING] = before["value"]
    else:
        del settings[SETTING]
    return f"{SETTING} {'put back' if before.get('had') else 'removed'} (the files in {wrote} stay)"


def adopt(settings: Settings, folder: Path, home: Path, before: object) -> str:
    """Claude Code's auto-memory files so far (its folder before setup, ``before``, and each project's under
    ``home``) copied into ``folder`` (theirs left as they are) and stored in tiermem at once; what was done."""
    from ..domain.factory import open_memory

    sources = [Path(before).expanduser()] if isinstance(before, str) and before else []
    sources += sorted((home / ".claude" / "projects").glob("*/memory"))
    copied = gather(sources, folder)
    memory = open_memory(settings)
    try:
        done = sync(memory, memory.ensure_agent(settings.agent).id, folder)
    finally:
        memory.settle(60)  # the model loading in a thread when the process exits would abort it
    return (
        f"{folder}: Claude Code's auto memory, shared with tiermem ({len(copied)} file(s) copied from its folders, "
        f"which are left as they were; {done.imported} stored in tiermem; core memory written as {OWN}*.md)"
    )
