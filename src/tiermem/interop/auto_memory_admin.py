"""Claude Code's auto memory (``auto_memory``) set up, undone, and edited by ``tiermem forget``; what its sync could
not do, for ``tiermem doctor``.

``adopt`` (setup) records where Claude Code keeps its auto memory (``sources.json``: its projects folder, its
``.claude.json`` and user settings) and syncs at once; ``withdraw`` (uninstall) takes tiermem's block files and
``MEMORY.md`` lines back out of Claude Code's folders; ``forget_text`` edits a forgotten text out of the
auto-memory files of the agent a forget names (of every agent for a whole-store forget), ``forget_passage`` a
forgotten passage out of the file it was stored from (so Claude Code neither loads nor re-imports it);
``guard_deletions`` keeps a passage deleted on purpose from being stored again from its unchanged file; ``unpoint``
puts back the ``autoMemoryDirectory`` setting an earlier setup pointed at one folder for every project.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.errors import NotFoundError, TiermemError
from ..base.files import locked, write_text_atomically
from .auto_memory import (
    FORGOTTEN,
    INDEX,
    LOCK,
    OWN,
    READ_ERRORS,
    SOURCES,
    STATE,
    digest,
    directory,
    read_file,
    read_json,
    remove_if_untouched,
    split,
    sync,
    user_sources,
    users_folder,
    write_index,
    write_json,
)
from .auto_memory_earlier import RERUN, left_by_earlier, pointed, take_over

if TYPE_CHECKING:
    from ..base.config import Settings
    from ..domain.memory import Memory

log = logging.getLogger(__name__)


def adopt(settings: Settings, home: Path, user_home: Path) -> str:
    """Claude Code's auto memory (its folders under ``user_home``) recorded as synced with this memory
    (``home``: ``directory``), and stored in tiermem at once; what was done."""
    from ..domain.factory import make_dir_inside, open_memory

    claude = user_home / ".claude"
    make_dir_inside(
        settings.resolved_data_dir(), home
    )  # a new data directory is private (0700), as open_memory makes it
    memory = open_memory(settings)
    try:
        agent_id = memory.ensure_agent(settings.agent).id
        # tiermem 0.1.0's folder: what Claude Code wrote there since its last sync stored first
        earlier = take_over(memory, agent_id, home, user_home) if left_by_earlier(home) else None
        write_json(home / SOURCES, user_sources(user_home))
        done = sync(memory, agent_id, home)
    finally:
        memory.settle(60)  # the model loading in a thread when the process exits would abort it
    lines = [
        f"{claude / 'projects'}/*/memory: Claude Code's auto memory, kept in step with tiermem, each project's in "
        f"its project ({done.imported} file(s) stored now; core memory written as {OWN}*.md in each folder)"
    ]
    if earlier is not None:
        lines.append(
            f"{home}: the folder tiermem 0.1.0's setup gave every project, taken over ({earlier.imported} file(s) "
            "written there since its last sync stored, without a project; its files stay)"
        )
        lines += [f"  not synced: {p}" for p in earlier.problems]
    lines += [f"  not synced: {p}" for p in done.problems]
    lines += [
        f"  not synced until a Claude Code session there names its project (stored without one, it would be "
        f"recalled in every project): {w}"
        for w in done.waiting
    ]
    return "\n".join(lines)


def withdraw(home: Path) -> list[str]:
    """Undo ``adopt``: no more sync; tiermem's block files (as it wrote them) and ``MEMORY.md`` lines taken out of
    Claude Code's folders. Claude Code's files, and what tiermem stored, stay."""
    if not (home / SOURCES).exists():
        return []
    with locked(home / LOCK):
        state = read_json(home / STATE)
        for name, kept in state.get("folders", {}).items():
            folder = Path(name)
            for label, record in kept.get("blocks", {}).items():
                remove_if_untouched(folder, label, record)
            try:
                if (folder / INDEX).exists():
                    write_index(folder, [])
            except READ_ERRORS as exc:
                log.warning("auto memory: %s: tiermem's lines not removed: %s", folder / INDEX, exc)
        (home / SOURCES).unlink()
    return [f"{home}: Claude Code's auto memory no longer synced (its files stay; tiermem's {OWN}*.md taken out)"]


def forget_text(
    data_dir: Path, agents: list[str] | None, texts: list[str], passages: Sequence[str] = ()
) -> tuple[list[str], list[str]]:
    """``texts`` edited out of every auto-memory file of the agents' syncs (the files Claude Code loads and reads,
    and any left in their folders of the data directory's ``auto-memory`` folder); ``agents`` None: every agent's,
    and anything under that folder (a whole-store forget). (The files edited, lines naming those that could not be.)
    The next sync stores what is left of each file in place of its forgotten passage. A file whose passage the forget
    took (``passages``: the ids of those forgotten, and of their inserts) and that this edit did not change (the
    store found the text where the file does not hold it as given: across two chunks, its whitespace compared as
    single spaces, or from its description into its body) is marked, so the next sync does not store it again."""
    texts = [t for t in texts if t]
    if not texts:
        return [], []
    edited: list[str] = []
    failed: list[str] = []
    homes, root = _homes(data_dir, agents), data_dir / "auto-memory"
    # another agent's files are not this forget's: its own folder only (an agent named "." or ".." has none there)
    left = [root] if agents is None else [h for h in homes if h.parent == root and h.name != ".."]
    folders: dict[Path, None] = {p.parent: None for root in left for p in sorted(root.rglob("*.md"))}
    kept: set[Path] = set()
    for home in homes:
        for name in read_json(home / STATE).get("folders", {}):
            folders[Path(name)] = None
        shared = users_folder(read_json(home / SOURCES))
        if shared is not None:
            folders[shared] = None
    with _no_sync(homes):
        for folder in folders:
            for path in sorted(p for p in folder.glob("*.md") if not p.is_dir()):
                try:
                    _edit(path, lambda text: _without(text, texts), edited)
                except (UnicodeDecodeError, FileNotFoundError, TiermemError):
                    continue  # not text tiermem could have stored (not UTF-8, a symbolic link), or gone
                except OSError as exc:
                    failed.append(_not_edited(path, exc))
                    kept.add(path)
        changed = set(edited)
        kept |= {path for p in dict.fromkeys(passages) for path, _ in sources_of(homes, p) if str(path) not in changed}
        _keep_forgotten(homes, kept)
    return edited, failed


def forget_passage(
    data_dir: Path, agents: list[str] | None, passage_id: str, stored: list[str]
) -> tuple[list[str], list[str]]:
    """A forgotten passage (``passage_id``; ``stored``: its text as stored) edited out of the auto-memory file(s) it
    was stored from (``sources_of``), so neither Claude Code nor the next sync has it again: the file's description
    and body when the file is as it was stored, else (Claude Code changed it since) each of its lines that is a line
    of the passage as stored; and the file's line in its folder's ``MEMORY.md`` (Claude Code's summary of it) taken
    out. (The files edited, lines naming those that could not be.) The next sync stores what is left of the file."""
    lines = {line.strip() for text in stored for line in text.splitlines() if line.strip()}
    edited: list[str] = []
    failed: list[str] = []
    homes = _homes(data_dir, agents)
    kept: set[Path] = set()
    with _no_sync(homes):
        for path, record in sources_of(homes, passage_id):
            index = path.parent / INDEX
            for target, edit in ((path, partial(_stored_out, record=record, lines=lines)), (index, _unlinking(path))):
                try:
                    _edit(target, edit, edited)
                except (FileNotFoundError, TiermemError):
                    continue  # gone, or a symbolic link now (never read): nothing tiermem wrote holds it
                except READ_ERRORS as exc:
                    failed.append(_not_edited(target, exc))
                    kept.add(target)
        _keep_forgotten(homes, kept)
    return edited, failed


def guard_deletions(memory: Memory, data_dir: Path) -> None:
    """A passage deleted on purpose in ``memory`` (``archival_memory_delete``, the inspector's delete) that a sync
    stored from one of Claude Code's auto-memory files stays deleted: the file's record is marked (``FORGOTTEN``:
    its digest is kept, not its text), so the sync does not store the file again while it holds the same text; a
    changed file is stored. No sync of the agent's runs between the deletion and the mark (``memory``'s
    ``deletion_guard``; ``data_dir``: the local store's, where the syncs keep their state). A deletion that fails
    after the passage went (its use record's removal: the use counters' file unwritable) marks the file all the same,
    then fails."""

    def guard(agent_id: str, passage_id: str, delete: Callable[[], int]) -> int:
        homes = _homes(data_dir, [memory.core.get_agent(agent_id).name])
        with _no_sync(homes):
            try:
                removed = delete()
            except NotFoundError:
                raise  # no such passage: nothing went
            except BaseException:  # a failure after the rows went (the use record's removal) marks them all the same
                if not memory.existing({passage_id: "passage"}, agent_id=agent_id):
                    _keep_forgotten(homes, {path for path, _ in sources_of(homes, passage_id)})
                raise
            if removed:
                _keep_forgotten(homes, {path for path, _ in sources_of(homes, passage_id)})
        return removed

    memory.deletion_guard = guard


def _homes(data_dir: Path, agents: list[str] | None) -> list[Path]:
    """tiermem's side of the sync of each of ``agents`` (None: of every agent that has one)."""
    if agents is not None:
        return [directory(data_dir, a) for a in agents]
    root = data_dir / "auto-memory"
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def sources_of(homes: list[Path], passage_id: str) -> list[tuple[Path, dict[str, Any]]]:
    """(file, its record) of each auto-memory file (Claude Code's) whose sync stored ``passage_id`` (or one of its
    chunks), as the syncs of ``homes`` (``directory``) recorded it."""
    found = []
    for home in homes:
        for folder, entry in read_json(home / STATE).get("folders", {}).items():
            for name, record in entry.get("files", {}).items():
                ids = [str(p) for p in record.get("passages", [])]
                if any(
                    p == passage_id or p.startswith(passage_id + ".") or passage_id.startswith(p + ".") for p in ids
                ):
                    found.append((Path(folder) / name, record))
    return found


def after_forget(
    data_dir: Path, agents: list[str] | None, kind: str, ref: str, stored: list[str], passages: Sequence[str] = ()
) -> tuple[list[str], list[str]]:
    """Claude Code's auto memory after a forget (``kind``, ``ref`` as ``forgetting.Target``'s; ``stored``: the
    forgotten texts, ``Forgotten.texts``; ``passages``: the forgotten passages' ids, ``Forgotten.passage_ids``) in
    ``agents`` (None: a whole-store forget): a forgotten text edited out of every file (``forget_text``), a forgotten
    passage out of the file(s) it was stored from (``forget_passage``). (The files edited, lines naming those that
    could not be.)"""
    if kind == "text":
        return forget_text(data_dir, agents, [ref], passages)
    if kind == "passage":
        return forget_passage(data_dir, agents, ref, stored)
    return [], []


@contextmanager
def syncs_held(data_dir: Path, agents: list[str] | None) -> Iterator[None]:
    """No sync of the agents' auto memory (None: every agent's) while held: a forget holds it from the deletion of
    its rows to the edit of the files they were stored from (``after_forget``, inside it), so no sync in between
    finds a passage gone from a file not edited yet and stores the forgotten text again."""
    with _no_sync(_homes(data_dir, agents)):
        yield


_HELD = threading.local()  # the homes whose lock this thread holds (``_no_sync`` inside ``syncs_held``)


@contextmanager
def _no_sync(homes: list[Path]) -> Iterator[None]:
    """Held while Claude Code's files are edited: no sync of these homes' (``directory``) meanwhile."""
    before: frozenset[Path] = getattr(_HELD, "homes", frozenset())
    with ExitStack() as held:
        for home in homes:
            if home not in before and (home / SOURCES).exists():
                held.enter_context(locked(home / LOCK))
        _HELD.homes = before | set(homes)
        try:
            yield
        finally:
            _HELD.homes = before


def _keep_forgotten(homes: list[Path], paths: set[Path]) -> None:
    """The records of ``paths``, files a forget could not edit, marked so no sync stores what they hold again (their
    passages are gone because they were forgotten) until they change. Under ``_no_sync``."""
    for home in homes:
        state = read_json(home / STATE)
        marked = False
        for folder, entry in state.get("folders", {}).items():
            for name, record in entry.get("files", {}).items():
                if Path(folder) / name in paths and isinstance(record, dict):
                    record[FORGOTTEN] = marked = True
        if marked:
            write_json(home / STATE, state)


def _edit(path: Path, edit: Callable[[str], str], edited: list[str]) -> None:
    """``path`` rewritten as ``edit`` of its text (its mode kept) when that changes it, and then added to
    ``edited``."""
    text = read_file(path)  # never through a symbolic link (``TiermemError``)
    new = edit(text)
    if new != text:
        write_text_atomically(path, new, mode=path.stat().st_mode & 0o777)
        edited.append(str(path))


def _without(text: str, texts: list[str]) -> str:
    for t in texts:
        text = text.replace(t, "")
    return text


def _unlinking(path: Path) -> Callable[[str], str]:
    """A ``MEMORY.md`` without its lines linking ``path`` (Claude Code's: ``- [Title](file.md) — summary``)."""
    link = re.compile(rf"\]\((\./)?{re.escape(path.name)}\)")
    return lambda text: "".join(line for line in text.splitlines(keepends=True) if not link.search(line))


def _stored_out(text: str, record: dict[str, Any], lines: set[str]) -> str:
    """An auto-memory file's ``text`` without what its forgotten passage was stored from (``forget_passage``)."""
    if digest(text) == record.get("digest"):  # as stored: what the sync stored is its description and body
        fields, body = split(text)
        return _without(text, [t for t in (body.strip(), fields.get("description", "")) if t])
    kept = []
    for line in text.splitlines(keepends=True):
        key, sep, value = line.partition(":")
        if line.strip() in lines:
            continue
        if sep and value.strip().strip("\"'") in lines:  # a frontmatter field's value (the description)
            line = key + ":" + line[len(line.rstrip("\r\n")) :]
        kept.append(line)
    return "".join(kept)


def _not_edited(path: Path, exc: BaseException) -> str:
    return (
        f"{path} (Claude Code's auto-memory file, not edited: {type(exc).__name__}: {exc}; edit what you forgot out "
        "of it, or delete it)"
    )


def problems(data_dir: Path, kind: str = "problems") -> dict[str, list[str]]:
    """For each agent whose auto memory is synced: what its last sync could not do (``kind`` "problems"), or the
    folders it left until their project is known ("waiting"); for ``tiermem doctor``."""
    out = {}
    for sources in sorted((data_dir / "auto-memory").glob(f"*/{SOURCES}")):
        found = read_json(sources.parent / STATE).get(kind, [])
        out[sources.parent.name] = [p for p in found if isinstance(p, str)] if isinstance(found, list) else []
    return out


def doctor_check(settings: Settings) -> list[dict[str, Any]]:
    """``tiermem doctor``'s checks of the auto-memory sync, when there is one: what its last sync could not do, and
    Claude Code still pointed at the one folder tiermem 0.1.0's setup gave every project (``auto_memory_earlier``)."""
    if settings.uri is not None:
        return []
    checks = []
    for home in _homes(settings.resolved_data_dir(), None):
        if (home / SOURCES).exists() or left_by_earlier(home):
            wrong = pointed(home, Path.home())
            if wrong is not None:
                checks.append({"check": "claude code auto memory setup", "ok": False, "detail": wrong, "fix": RERUN})
    return checks + _sync_check(settings)


def _sync_check(settings: Settings) -> list[dict[str, Any]]:
    found = problems(settings.resolved_data_dir())
    if not found:
        return []
    bad = [f"agent {agent}: {p}" for agent, listed in found.items() for p in listed]
    waiting = [w for listed in problems(settings.resolved_data_dir(), "waiting").values() for w in listed]
    check: dict[str, Any] = {
        "check": "claude code auto memory",
        "ok": not bad,
        "detail": "the last sync of "
        + ", ".join(f"agent {a}" for a in found)
        + (" synced every file" if not bad else f" could not sync {len(bad)} thing(s): " + "; ".join(bad))
        + (
            f"; {len(waiting)} folder(s) wait for a Claude Code session there to name their project: "
            + "; ".join(waiting)
            if waiting
            else ""
        ),
    }
    if bad:
        check["fix"] = (
            "fix or remove each file named (the next sync, at a Claude Code session's start or after a reply, "
            "takes it up); a conflict's text is kept as an archival passage (tag claude-auto-memory-conflict)"
        )
    return [check]


# -- the setting earlier versions pointed at one folder for every project ---------------------------------------

SETTING = "autoMemoryDirectory"


def unpoint(settings: dict[str, Any], record: dict[str, Any], folder: Path | None) -> str:
    """The user's setting put back (or removed) if it is still the one an earlier setup wrote (one folder for every
    project: no longer done); what changed, or "". The files stay."""
    wrote = record.get("auto_memory_wrote") or (str(folder) if folder is not None else None)  # no record: setup's path
    if wrote is None or settings.get(SETTING) != wrote:
        return ""
    before = record.pop("auto_memory_before", {})
    record.pop("auto_memory_wrote", None)
    if before.get("had") and before.get("value") is not None:
        settings[SETTING] = before["value"]
    else:
        del settings[SETTING]
    return f"{SETTING} {'put back' if before.get('had') else 'removed'} (the files in {wrote} stay)"
