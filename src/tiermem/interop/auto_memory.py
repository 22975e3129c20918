"""Claude Code's auto memory and tiermem as one: each project's auto-memory folder synced both ways, within its project.

Claude Code (2.1.197, measured) keeps its own memory per project, in ``~/.claude/projects/<project>/memory/`` (unless
the user sets ``autoMemoryDirectory``): one Markdown file per fact with frontmatter (``name``, ``description``,
``metadata.type``), written by the model with its Write tool, and ``MEMORY.md``, an index of one line per file
(``- [Title](file.md) — hook``), which is the only part loaded into context at session start (the files are read on
demand). ``tiermem setup claude-code`` leaves those folders where they are (one folder for every project would put
one project's ``MEMORY.md`` in every other's context) and records them in ``<data dir>/auto-memory/<agent>/``
(``sources.json``); ``sync`` keeps each folder and tiermem in step (the server runs it on hook events: at a session's
start, before core memory is given, and after each reply):

- each of Claude Code's files (any ``*.md`` but ``MEMORY.md`` and tiermem's own) is an archival passage of tiermem
  in the folder's project (``claude_projects``: the project the hooks name; a folder whose project is not known is
  not stored, and says why), tagged ``claude-auto-memory`` and its name, so every host working in that project finds
  it; a file changed replaces its passage, a file removed removes it. A folder of the user's own
  ``autoMemoryDirectory`` is Claude Code's memory in every project: its files are stored without a project;
- each core block (core memory is every project's) is a file ``tiermem-<label>.md`` in each folder (a label that is
  not a plain file name gets a safe one: ``block_file``) with a line in ``MEMORY.md`` that carries the block's
  start, both without the block's ``<private>`` spans (each shown as ``[private: not kept]``: private text is not
  given to another memory); a block file Claude Code's model edits becomes the block's new value, each mark put
  back as the span it stands for (``quoting.with_private``). When the block changed in tiermem too, tiermem's value
  is kept and Claude Code's added lines (an edit that only added at the start or the end) are added to it; any
  other edit of both, an edit that took out or added a mark, an edit of a read-only block, or one the block refuses
  (over its limit) keeps the block, stores Claude Code's text as an archival passage (tag
  ``claude-auto-memory-conflict``) and reports it;
- ``MEMORY.md`` keeps every line of Claude Code's; tiermem's lines (those linking ``tiermem-*.md``) go first and are
  rewritten each sync;
- symbolic links are never followed (``read_file``): a file that is one is not read (reported), nor is a folder whose
  project folder or ``memory`` folder is one; a link to nothing is no file.

What sync did last is kept in ``<data dir>/auto-memory/<agent>/state.json``: per folder, its project, each file's
digest and passage ids, each block file's digest and the block version written; so it tells an edit on either side
from its own writes; a file whose passages are gone from the store (the agent deleted and made anew, a backup
restored) is stored again, but not one whose passage was deleted or forgotten on purpose (its record marked
``FORGOTTEN``: ``auto_memory_admin``), until the file changes. Each file is synced on its own: one that cannot be (not UTF-8, a block
edit refused, ...) is skipped and reported (``Synced.problems``, logged to stderr, and kept in the state for
``tiermem doctor``) while the rest go on, and the state is saved whatever happens, so a file is never stored twice.

Why this module is long: one sync (folders, memory files, block files, the index) over one state record; split, each
part would need the record's shape and the others' rules.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.errors import NotFoundError, TiermemError, ValidationError
from ..base.files import LinkedFileError, NotRegularFileError, locked, read_text_nofollow, write_text_atomically
from ..base.quoting import PRIVATE_MARK, drop_private, private_parts, with_private
from . import claude_projects

if TYPE_CHECKING:
    from ..base.records import Block
    from ..domain.memory import Memory

log = logging.getLogger(__name__)

INDEX = "MEMORY.md"
SOURCES = "sources.json"  # setup's: where Claude Code keeps its auto memory
STATE = "state.json"
# in a file's record: its passage was deleted on purpose, or a forget took it and could not edit the file: the file is
# not stored again until it changes (its digest is kept, not its text)
FORGOTTEN = "forgotten"
LOCK = ".lock"
OWN = "tiermem-"  # tiermem's block files
TAG = "claude-auto-memory"
CONFLICT_TAG = "claude-auto-memory-conflict"
HOOK_CHARS = 150  # of a block's value in its MEMORY.md line
MAX_TAG = 64
MAX_PATHS = 2000  # working directories kept for naming folders' projects
_OWN_LINE = re.compile(r"^\s*-\s*\[[^\]]*\]\(tiermem-[^)]*\.md\)")
_PLAIN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")
READ_ERRORS = (OSError, UnicodeDecodeError)
LINK_WHY = (
    "it is a symbolic link: tiermem never follows links in Claude Code's auto-memory folders (what one points to may "
    "be outside them); put the file itself in its place, or remove it"
)


def directory(data_dir: Path, agent: str) -> Path:
    """tiermem's side of the sync: ``sources.json``, ``state.json``."""
    return data_dir / "auto-memory" / agent


@dataclass
class Synced:
    imported: int = 0  # Claude Code's files stored (new or changed)
    removed: int = 0  # passages of files that are gone
    blocks_written: int = 0  # block files (re)written
    blocks_edited: int = 0  # blocks changed from their files
    problems: list[str] = field(default_factory=list)  # what could not be synced, and why
    waiting: list[str] = field(default_factory=list)  # folders not synced until their project is known

    def problem(self, text: str) -> None:
        log.warning("auto memory: %s", text)
        self.problems.append(text)


def digest(text: str) -> str:
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


def block_file(label: str) -> str:
    """The file of block ``label``: ``tiermem-<label>.md`` when the label is a plain file name, else its plain
    characters and a digest of the label (a label may be a path, ``notes/projects``, or hold any character)."""
    if _PLAIN.fullmatch(label):
        return f"{OWN}{label}.md"
    plain = re.sub(r"[^A-Za-z0-9_.-]+", "-", label).strip("-.")[:60]
    return f"{OWN}{plain}-{digest(label)[:10]}.md"


def read_file(path: Path) -> str:
    """The text of the regular file ``path``, never read through a symbolic link (``files.read_text_nofollow``):
    ``ValidationError`` for a link (or anything but a regular file), ``FileNotFoundError`` for a link to nothing (no
    file: as one removed)."""
    try:
        return read_text_nofollow(path)
    except LinkedFileError:
        raise ValidationError(LINK_WHY) from None
    except NotRegularFileError:
        raise ValidationError("it is not a regular file") from None


def _block_text(label: str, description: str, value: str) -> str:
    about = " ".join(description.split()) or f"tiermem core memory block {label}"
    name = json.dumps(f"{OWN}{label}", ensure_ascii=False)  # a JSON string is a YAML one: any label is one value
    what = json.dumps(f"tiermem core memory, block {label}: {about}", ensure_ascii=False)
    return f"---\nname: {name}\ndescription: {what}\nmetadata:\n  type: user\n---\n\n{drop_private(value).rstrip()}\n"


def _index_line(label: str, value: str) -> str:
    start = " ".join(drop_private(value).split())
    start = start if len(start) <= HOOK_CHARS else start[: HOOK_CHARS - 1] + "…"
    title = label.replace("[", "(").replace("]", ")")
    return f"- [tiermem {title}]({block_file(label)}) — {start or '(empty)'}"


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("auto memory: %s cannot be read (%s); starting it afresh", path, exc)
        return {}
    return data if isinstance(data, dict) else {}


def write_json(path: Path, data: dict[str, Any]) -> None:
    write_text_atomically(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


# -- which folders, in which project ---------------------------------------------------------------------------


def _folders(home: Path, sources: dict[str, Any], state: dict[str, Any], done: Synced) -> list[tuple[Path, str | None]]:
    """(folder, project) of each of Claude Code's auto-memory folders that can be synced; the others reported."""
    out: list[tuple[Path, str | None]] = []
    kept: dict[str, Any] = state.setdefault("folders", {})
    projects_dir = Path(sources["projects"]) if isinstance(sources.get("projects"), str) else None
    if projects_dir is not None:
        config = Path(sources["config"]) if isinstance(sources.get("config"), str) else None
        known_paths: claude_projects.KnownPaths | None = None  # built once, for the first folder not placed yet
        for folder in sorted(projects_dir.glob("*/memory")):
            if not folder.is_dir():
                continue
            if folder.is_symlink() or folder.parent.is_symlink():
                done.problem(f"{folder}: not synced: {LINK_WHY.replace('the file itself', 'the folder itself')}")
                continue
            known = kept.get(str(folder))
            if isinstance(known, dict) and "project" in known:
                out.append((folder, known["project"]))
                continue
            if known_paths is None:  # with what Claude Code recorded since the last look
                since, state["scanned"] = float(state.get("scanned") or 0.0), time.time()
                for path in claude_projects.recorded_paths(projects_dir, config, since):
                    _remember_path(state, path)
                known_paths = claude_projects.KnownPaths(p for p in state.get("paths", []) if isinstance(p, str))
            project, why = known_paths.project_for(folder.parent.name)
            if project is None:
                log.info("auto memory: %s: not synced: %s", folder, why)
                done.waiting.append(f"{folder}: {why}")
                continue
            kept[str(folder)] = {"project": project}
            out.append((folder, project))
    shared = users_folder(sources)
    if (
        shared is not None
    ):  # tiermem 0.1.0's folder too, while the setting still points at it (Claude Code writes there)
        out.append((shared, None))
    return out


def user_sources(user_home: Path) -> dict[str, str]:
    """``sources.json`` of Claude Code's auto memory for the user whose home is ``user_home`` (setup's record)."""
    claude = user_home / ".claude"
    return {
        "projects": str(claude / "projects"),
        "config": str(user_home / ".claude.json"),
        "settings": str(claude / "settings.json"),
    }


def users_folder(sources: dict[str, Any]) -> Path | None:
    """The user's own ``autoMemoryDirectory`` (Claude Code's user settings), when set and present: one folder for
    every project, by the user's choice."""
    settings = sources.get("settings")
    if not isinstance(settings, str):
        return None
    value = read_json(Path(settings)).get("autoMemoryDirectory")
    if not isinstance(value, str) or not value.strip():
        return None
    folder = Path(value).expanduser()
    return folder if folder.is_absolute() and folder.is_dir() else None


def _remember_path(state: dict[str, Any], cwd: object) -> None:
    if not isinstance(cwd, str) or not os.path.isabs(cwd) or "\x00" in cwd:
        return
    paths = [p for p in state.get("paths", []) if isinstance(p, str) and p != cwd]
    state["paths"] = [*paths, cwd][-MAX_PATHS:]


# -- one sync --------------------------------------------------------------------------------------------------


def sync(memory: Memory, agent_id: str, home: Path, cwd: object = None) -> Synced:
    """One sync of Claude Code's auto-memory folders (``home``'s ``sources.json``) and the agent's memory (see the
    module's docstring); nothing when ``home`` has no ``sources.json`` (auto memory is not set up for this memory).
    ``cwd``: the working directory of the hook that asked for it (it names a folder's project)."""
    done = Synced()
    sources = read_json(home / SOURCES)
    if not sources:
        return done
    with locked(home / LOCK):
        state = read_json(home / STATE)
        try:
            _remember_path(state, cwd)
            folders = _folders(home, sources, state, done)
            kept: dict[str, Any] = state.setdefault("folders", {})
            _restore_missing(memory, agent_id, [kept.get(str(f)) for f, _ in folders])
            for folder, project in folders:
                entry = kept.setdefault(str(folder), {"project": project})
                sync_folder(memory, agent_id, folder, project, entry, done)
            live = {str(f) for f, _ in folders}
            for gone in [k for k in kept if k not in live and not Path(k).is_dir()]:
                for old in [p for f in kept.pop(gone).get("files", {}).values() for p in f.get("passages", [])]:
                    _delete(memory, agent_id, old)
                done.removed += 1
        finally:
            state["problems"], state["waiting"] = done.problems, done.waiting
            write_json(home / STATE, state)
    return done


def _restore_missing(memory: Memory, agent_id: str, entries: list[Any]) -> None:
    """Each file whose passages are gone from the store (a backup restored from before it was stored, an agent
    deleted while the state stayed) stored again at this sync: its record kept, its digest dropped. Not a file
    whose passage was deleted on purpose, or that a forget could not edit (``FORGOTTEN``: what it holds was deleted
    or forgotten; it is stored again once it changes). One read for every file of the sync."""
    records = [
        record
        for entry in entries
        if isinstance(entry, dict)
        for record in entry.get("files", {}).values()
        if isinstance(record, dict) and record.get("passages") and not record.get(FORGOTTEN)
    ]
    ids = [str(p) for record in records for p in record["passages"]]
    if not ids:
        return
    there = memory.archive.rows.existing("passages", ids, agent_id=agent_id)
    for record in records:
        if any(str(p) not in there for p in record["passages"]):
            record.pop("digest", None)


def sync_folder(
    memory: Memory, agent_id: str, folder: Path, project: str | None, kept: dict[str, Any], done: Synced
) -> None:
    """One folder synced (``kept``: its part of the state, updated as each file is done)."""
    files: dict[str, dict[str, Any]] = kept.setdefault("files", {})
    seen = set()
    for path in sorted(folder.glob("*.md")):
        if path.name == INDEX or path.name.startswith(OWN) or path.is_dir():
            continue
        try:
            _store_file(memory, agent_id, path, project, files, done)
        except FileNotFoundError:
            continue  # removed since it was listed: gone, its passage with it
        except (*READ_ERRORS, TiermemError) as exc:
            done.problem(f"{path}: not stored in tiermem: {_why(exc)}")
        seen.add(path.name)  # one that cannot be read now keeps its passage
    for gone in set(files) - seen:
        for old in files.pop(gone).get("passages", []):
            _delete(memory, agent_id, old)
        done.removed += 1
    written: dict[str, Any] = kept.setdefault("blocks", {})
    lines = []
    labels = set()
    for block in memory.blocks(agent_id):
        labels.add(block.label)
        try:
            value = _sync_block(memory, agent_id, folder, project, block, written, done)
        except (*READ_ERRORS, TiermemError) as exc:
            done.problem(f"{folder / block_file(block.label)}: block {block.label!r} not synced: {_why(exc)}")
            value = block.value
        lines.append(_index_line(block.label, value))
    for label in [k for k in written if k not in labels]:  # a block gone from tiermem: its file too, if untouched
        remove_if_untouched(folder, label, written.pop(label))
    try:
        write_index(folder, lines)
    except (*READ_ERRORS, TiermemError) as exc:
        done.problem(f"{folder / INDEX}: tiermem's lines not written: {_why(exc)}")


def _why(exc: BaseException) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "it is not UTF-8 text (save it as UTF-8)"
    if isinstance(exc, ValidationError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _delete(memory: Memory, agent_id: str, passage_id: str) -> None:
    """A passage of an earlier sync deleted; one already gone (forgotten, deleted by hand, or a later chunk of a
    chunked one) is fine."""
    try:
        memory.archival_delete(agent_id, passage_id, guarded=False)  # with its use record; the sync's own
    except NotFoundError:
        pass


def _name_tag(memory: Memory, name: str) -> list[str]:
    """A file's ``name`` as a tag: without credentials (redacted) or control characters, cut to a tag's length."""
    tag = " ".join(memory.scrub(name).split())[:MAX_TAG].strip()
    return [tag] if tag and tag != TAG else []


def _store_file(
    memory: Memory, agent_id: str, path: Path, project: str | None, files: dict[str, dict[str, Any]], done: Synced
) -> None:
    text = read_file(path)
    known = files.get(path.name) or {}
    stamp = digest(text)
    if known.get("digest") == stamp:
        return
    fields, body = split(text)
    about = fields.get("description", "")
    content = (f"{about}\n\n" if about else "") + body.strip()
    content = memory.scrub(drop_private(content))  # as every hook-captured text: no private span, no credential
    ids = []
    if content.strip():
        ids = memory.archive.insert(
            agent_id, content, [TAG, *_name_tag(memory, fields.get("name") or path.stem)], project=project
        )
    for old in known.get("passages", []):
        _delete(memory, agent_id, old)
    files[path.name] = {"digest": stamp, "passages": ids}
    done.imported += bool(ids)


def remove_if_untouched(folder: Path, label: str, record: object) -> None:
    """Remove the file of block ``label`` in ``folder`` if it is still as tiermem wrote it (``record``: what was
    written); one that is gone, or was edited since, is left alone."""
    path = folder / block_file(label)
    try:
        if isinstance(record, dict) and digest(read_file(path)) == record.get("file"):
            path.unlink()
    except (*READ_ERRORS, TiermemError):  # gone, unreadable or a link: left alone
        pass


def _sync_block(
    memory: Memory,
    agent_id: str,
    folder: Path,
    project: str | None,
    block: Block,
    written: dict[str, Any],
    done: Synced,
) -> str:
    """Block ``block`` and its file in ``folder`` in step; the block's value after it."""
    path = folder / block_file(block.label)
    try:
        current: str | None = read_file(path)
    except FileNotFoundError:
        current = None
    record = written.get(block.label)
    record = record if isinstance(record, dict) else {}
    value = block.value
    if current is not None and record.get("file") and digest(current) != record["file"]:
        value = _take_edit(memory, agent_id, folder, project, block, record, split(current)[1].strip(), done)
    text = _block_text(block.label, block.description, value)
    if text != current:
        write_text_atomically(path, text)
        done.blocks_written += 1
    written[block.label] = {"file": digest(text), "version": memory.block(agent_id, block.label).version}
    return value


def _take_edit(
    memory: Memory,
    agent_id: str,
    folder: Path,
    project: str | None,
    block: Block,
    record: dict[str, Any],
    edited: str,
    done: Synced,
) -> str:
    """Claude Code's edit of a block file (``edited``: the file's text, the block's private spans shown as marks)
    applied to the block, when it can be; else kept as a passage and reported. The block's value after it."""
    from ..domain.blocks import Rethink

    where = folder / block_file(block.label)
    shown = memory.scrub(drop_private(edited))  # Claude Code's text as a passage keeps: no span, no credential
    if block.read_only:
        return _aside(memory, agent_id, project, block, shown, f"{where}: block {block.label!r} is read-only", done)
    changed = record.get("version") is not None and record["version"] != block.version  # in tiermem too
    given = _value_at(memory, block, int(record["version"])) if changed else block.value  # what the file showed
    # its marks back as the spans they stand for; what Claude Code wrote as it enters memory on its own
    new = None if given is None else with_private(edited, private_parts(given), lambda t: memory.scrub(drop_private(t)))
    if new is None:
        why = (
            f"{where}: block {block.label!r}: Claude Code's edit took out or added a {PRIVATE_MARK} mark, so the "
            "block's private text cannot be kept in its place"
            if given is not None
            else f"{where}: block {block.label!r} was changed in tiermem and its file by Claude Code"
        )
        return _aside(memory, agent_id, project, block, shown, why, done)
    new = new.strip()
    if new in (block.value.strip(), (given or "").strip()):  # nothing of Claude Code's to take
        return block.value
    if changed:
        merged = _merged(block, given or "", new)
        if merged is None:
            why = f"{where}: block {block.label!r} was changed in tiermem and its file by Claude Code"
            return _aside(memory, agent_id, project, block, shown, why, done)
        new = merged
    try:
        value = memory.edit(agent_id, block.label, Rethink(new), actor="claude-code auto memory").value
    except TiermemError as exc:
        return _aside(memory, agent_id, project, block, shown, f"{where}: {exc}", done)
    done.blocks_edited += 1
    return value


def _value_at(memory: Memory, block: Block, version: int) -> str | None:
    """The block's value at ``version`` (None when that version is forgotten)."""
    return next((v.value for v in memory.core.history(block.id) if v.version == version), None)


def _merged(block: Block, old: str, edited: str) -> str | None:
    """The block's value with what Claude Code added at the start or the end of the value it was given (``old``);
    None when its edit was anything else."""
    old = old.strip()
    if not old:  # it was given an empty block: all it wrote is added
        return f"{block.value.rstrip()}\n\n{edited}" if block.value.strip() else edited
    if edited.startswith(old):
        return block.value.rstrip() + edited[len(old) :]
    if edited.endswith(old):
        return edited[: -len(old)] + block.value.lstrip()
    return None


def _aside(
    memory: Memory, agent_id: str, project: str | None, block: Block, edited: str, why: str, done: Synced
) -> str:
    """Claude Code's text of a block file kept as a passage (nothing lost), the block kept; reported."""
    content = f"Claude Code's edit of tiermem core memory block {block.label!r}, not applied ({why}):\n\n{edited}"
    memory.archive.insert(agent_id, content, [TAG, CONFLICT_TAG], project=project)
    done.problem(
        f"{why}: the block kept tiermem's value; Claude Code's text is an archival passage (tag {CONFLICT_TAG})"
    )
    return block.value


def write_index(folder: Path, lines: list[str]) -> None:
    index = folder / INDEX
    try:
        before: str | None = read_file(index)
    except FileNotFoundError:
        before = None
    theirs = [line for line in (before or "").splitlines() if not _OWN_LINE.match(line)]
    text = "\n".join([*lines, *theirs]).rstrip("\n") + "\n"
    if before != text:
        write_text_atomically(index, text)
