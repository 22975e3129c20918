"""Claude Code's auto memory as tiermem 0.1.0 set it up, taken over by this version's sync (``auto_memory``).

tiermem 0.1.0's ``setup claude-code`` pointed Claude Code's ``autoMemoryDirectory`` at ``<data dir>/auto-memory/<agent>/``
(one folder for every project) and kept what its sync did in ``.tiermem-sync.json`` there; it wrote no
``sources.json``, without which this version's sync does nothing. ``take_over`` brings that layout forward on the
first sync after the upgrade (the server's, or setup's): ``sources.json`` written as setup writes it, 0.1.0's record
taken as the state of the folder's sync (a file it stored is not stored again), and the folder synced once, so what
Claude Code wrote there since 0.1.0's last sync is stored (without a project, as 0.1.0 stored it). While Claude
Code's setting still points at that folder, the sync keeps syncing it (its files stored without a project, recalled
in every project) and ``pointed`` says so, for the server's log and ``tiermem doctor``: only setup changes Claude
Code's settings, so running it again is what gives each project its own folder.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.files import locked
from .auto_memory import LOCK, SOURCES, STATE, Synced, read_json, sync_folder, user_sources, write_json

if TYPE_CHECKING:
    from ..domain.memory import Memory

log = logging.getLogger(__name__)

EARLIER_STATE = ".tiermem-sync.json"  # tiermem 0.1.0's record of its sync, in the folder it gave every project
SETTING = "autoMemoryDirectory"
RERUN = (
    "run `tiermem setup claude-code` again: it points Claude Code back at one auto-memory folder per project, each "
    "stored in its project (the files in the old folder stay, and are already stored)"
)


def left_by_earlier(home: Path) -> bool:
    """Whether ``home`` (``auto_memory.directory``) is still as tiermem 0.1.0's setup left it."""
    return (home / EARLIER_STATE).is_file()


def take_over(memory: Memory, agent_id: str, home: Path, user_home: Path) -> Synced:
    """tiermem 0.1.0's folder ``home`` brought forward (see the module's docstring): ``sources.json`` written for
    Claude Code's folders under ``user_home`` (unless there is one), 0.1.0's record taken as the folder's state, the
    folder synced once; 0.1.0's record is removed last, so a take-over cut short is done again."""
    done = Synced()
    with locked(home / LOCK):
        if not left_by_earlier(home):  # another process took it over meanwhile
            return done
        earlier = read_json(home / EARLIER_STATE)
        state = read_json(home / STATE)
        entry = state.setdefault("folders", {}).setdefault(str(home), {"project": None})
        _carry(earlier, entry)
        try:
            sync_folder(memory, agent_id, home, None, entry, done)
        finally:
            state["problems"], state["waiting"] = done.problems, done.waiting
            write_json(home / STATE, state)
        if not (home / SOURCES).exists():
            write_json(home / SOURCES, user_sources(user_home))
        (home / EARLIER_STATE).unlink()
    log.info(
        "auto memory: took over %s, the folder tiermem 0.1.0's setup gave Claude Code for every project "
        "(%d file(s) written there since its last sync stored)",
        home,
        done.imported,
    )
    return done


def _carry(earlier: dict[str, Any], entry: dict[str, Any]) -> None:
    """0.1.0's record of the folder (``{"files": {name: {"digest", "passages"}}, "blocks": {label: digest}}``) put
    in this version's ``entry`` of it, beside anything already there."""
    files = entry.setdefault("files", {})
    for name, record in (earlier.get("files") or {}).items():
        if isinstance(record, dict) and isinstance(record.get("digest"), str):
            passages = [str(p) for p in record.get("passages") or [] if isinstance(p, str)]
            files.setdefault(str(name), {"digest": record["digest"], "passages": passages})
    blocks = entry.setdefault("blocks", {})
    for label, written in (earlier.get("blocks") or {}).items():
        if isinstance(written, str):  # the digest of the file it wrote (no block version: an edit is taken as made)
            blocks.setdefault(str(label), {"file": written})


def pointed(home: Path, user_home: Path) -> str | None:
    """What is wrong while Claude Code's setting still points at ``home`` (the folder tiermem 0.1.0's setup gave
    every project), read from the settings file setup recorded (else ``user_home``'s); None when it does not."""
    sources = read_json(home / SOURCES)
    settings = sources.get("settings")
    path = Path(settings) if isinstance(settings, str) else user_home / ".claude" / "settings.json"
    value = read_json(path).get(SETTING)
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        same = Path(value).expanduser().resolve() == home.resolve()
    except (OSError, RuntimeError):
        return None
    if not same:
        return None
    return (
        f"Claude Code's {SETTING} ({path}) still points at {home}, the one folder tiermem 0.1.0's setup gave every "
        "project: Claude Code loads that folder's MEMORY.md in every project, and tiermem stores its files without a "
        "project (recalled in every project)"
    )
