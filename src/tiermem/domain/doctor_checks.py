"""The checks of ``tiermem doctor`` (``maintenance.doctor`` runs them): each reports through ``check(name, ok,
detail[, fix])``, one line of the health report; they read and never change the store."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.errors import TiermemError

if TYPE_CHECKING:
    from ..base.config import Settings


def check_access(data: Path, check: Any) -> None:
    """Whether other users of this machine can reach the data directory: its mode lets them in and so does every
    directory above it (for a group, the directories of that group by their group bits, the others by theirs). The
    files in it are written with the usual umask (0644), so reaching the directory is reading the memory."""
    import grp
    import shlex
    import stat

    path = data.resolve()
    st = path.stat()
    mode = stat.S_IMODE(st.st_mode)
    chain = [p.stat() for p in path.parents]
    others = bool(mode & 0o005) and all(s.st_mode & 0o001 for s in chain)
    group = bool(mode & 0o050) and all(s.st_mode & (0o010 if s.st_gid == st.st_gid else 0o001) for s in chain)
    if not (others or group):
        check("data directory access", True, f"{data} is private to its owner (mode {mode:04o})")
        return
    try:
        group_name = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group_name = str(st.st_gid)
    who = "every user of this machine" if others else f"the members of group {group_name}"
    check(
        "data directory access",
        False,
        f"{data} has mode {mode:04o} and the directories above it let {who} through: they can read every block, "
        "message and passage in it",
        f"chmod 700 {shlex.quote(str(data))} (tiermem makes a new data directory 0700 but leaves an existing one as "
        "it is)",
    )


def check_files(memory: Any, check: Any, *, busy: bool = False) -> None:
    """Folders and files: a name held by more than one folder, files a crash left unfinished (their status says so;
    ``busy``: another process is storing and embedding files now, so they may be its files under way), and files
    that could not be parsed."""
    try:
        folders = memory.files.folders()
        files = memory.archive.files.listing()
    except TiermemError as exc:
        check("folders", False, str(exc), "check the data directory's filesystem, or restore from a backup")
        return
    names = {f.id: f.name for f in folders}
    shared = sorted(name for name, n in Counter(f.name for f in folders).items() if n > 1)
    counts = Counter(f.folder_id for f in files)
    check(
        "folder names",
        not shared,
        "each folder has a name of its own"
        if not shared
        else "more than one folder is named "
        + "; ".join(
            f"{n!r} (" + ", ".join(f"{f.id}: {counts[f.id]} file(s)" for f in folders if f.name == n) + ")"
            for n in shared
        )
        + " (created at once by two processes before tiermem took a lock for it, or restored from a backup beside "
        "the store's own by a tiermem before 2026-12): commands refuse that name, and reach each folder by its id",
        "see which holds what with `tiermem folders show ID`; upload or sync into one what the other holds that it "
        "lacks, then delete the one too many by its id (`tiermem folders delete ID --yes`)",
    )
    _check_ids_as_names(folders, counts, check)
    unfinished = [f"{names.get(f.folder_id, '?')}/{f.name}" for f in files if f.status in ("parsing", "embedding")]
    failed = [f"{names.get(f.folder_id, '?')}/{f.name}" for f in files if f.status == "error"]
    shown = ", ".join(unfinished[:5]) + (" ..." if len(unfinished) > 5 else "")
    twice = memory.archive.files.stored_twice()
    check(
        "file rows",
        not twice,
        "no file or chunk is stored twice"
        if not twice
        else "stored twice under one id (two uploads of one file at once, before tiermem took a lock for them): "
        + ", ".join(f"{table} {n}" for table, n in twice.items()),
        "run `tiermem optimize`: it keeps one copy of each file and writes its chunks again",
    )
    left = "being stored now by another tiermem process" if busy else "left unfinished by an interrupted upload"
    check(
        "folders",
        not unfinished or busy,
        f"{len(folders)} folder(s), {len(files)} file(s)"
        + (f", {len(failed)} that could not be parsed (see `tiermem folders show`)" if failed else "")
        + (f"; {len(unfinished)} {left}: {shown}" if unfinished else ""),
        "if a `tiermem folders sync` or upload is still running, wait for it; otherwise upload or sync those files "
        "again (`tiermem folders upload FOLDER PATH` or `tiermem folders sync`); until then they are not searched",
    )


def _check_ids_as_names(folders: Sequence[Any], counts: Mapping[str, int], check: Any) -> None:
    """No folder is named another folder's id. A command given a folder looks for an id first, so such a folder is
    never reached by its name (its name reaches the other folder); create, rename, import and restore refuse or
    number such a name since 2026-12, an older tiermem let a rename or a restore make it."""
    import shlex

    from .file_views import folder_names

    ids = {f.id for f in folders}
    taken = {f.name for f in folders} | ids
    clashing = [f for f in folders if f.name in ids and f.name != f.id]
    if not clashing:
        check("folder ids", True, "no folder is named another folder's id")
        return
    fixes = []
    for f in clashing:
        free = next(n for n in folder_names(f.name) if n not in taken)
        taken.add(free)
        fixes.append(f"`tiermem folders rename {shlex.quote(f.id)} {shlex.quote(free)}`")
    check(
        "folder ids",
        False,
        "; ".join(
            f"folder {f.id} ({counts[f.id]} file(s)) is named {f.name!r}, the id of another folder" for f in clashing
        )
        + ": that name reaches the other folder (a command looks for a folder's id first), so these are reached by "
        "their own id only (named so by an older tiermem's rename or restore)",
        "give each a name of its own, e.g. " + ", ".join(fixes) + " (an import or a restore names a folder so)",
    )


def check_history(core: Mapping[str, Sequence[Mapping[str, Any]]], check: Any) -> None:
    """Every attached block's current version is in its history. Both core backends commit a version and its
    history entry together, so a gap means damage or a partial restore (an import of an incomplete backup)."""
    have = {(r["block_id"], int(r["version"])) for r in core["block_history"]}
    names = {r["id"]: r["name"] for r in core["agents"]}
    owner = {r["block_id"]: names[r["agent_id"]] for r in core["attachments"] if r["agent_id"] in names}
    _check_current_values(core, owner, check)
    missing = sorted(
        (owner[r["id"]], r["label"], int(r["version"]))
        for r in core["blocks"]
        if r["id"] in owner and (r["id"], int(r["version"])) not in have
    )
    if not missing:
        check("block history", True, "every block's current version is in its history")
        return
    shown = ", ".join(f"{lab} v{v} (agent {a})" for a, lab, v in missing[:5]) + (" ..." if len(missing) > 5 else "")
    check(
        "block history",
        False,
        f"{len(missing)} block(s) lack the history entry of their current version: {shown}. The value is there; "
        "its history entry was lost (a damaged store or an incomplete restore)",
        "restore the history from a backup (`tiermem import backup.jsonl` adds only what is missing); the next "
        "edit of such a block records its new version as a whole value",
    )


def _check_current_values(
    core: Mapping[str, Sequence[Mapping[str, Any]]], owner: Mapping[str, str], check: Any
) -> None:
    """Every attached block's value is its history's current version's (written in one commit with it)."""
    values = {(r["block_id"], int(r["version"])): r["value"] for r in core["block_history"]}
    differ = sorted(
        (owner[r["id"]], r["label"], int(r["version"]))
        for r in core["blocks"]
        if r["id"] in owner and values.get((r["id"], int(r["version"])), r["value"]) != r["value"]
    )
    shown = ", ".join(f"{lab} v{v} (agent {a})" for a, lab, v in differ[:5]) + (" ..." if len(differ) > 5 else "")
    check(
        "block values",
        not differ,
        "every block's value is its history's current version"
        if not differ
        else f"{len(differ)} block(s) hold another value than their history's current version: {shown} (a "
        "changed backup restored, or a damaged store): the block shows one text and its history another",
        "see both with `tiermem blocks show LABEL --agent AGENT` and `tiermem blocks history LABEL --agent AGENT`, "
        "then set the right value (`tiermem blocks set LABEL VALUE --agent AGENT`: a new version, whole)",
    )


def check_old_core_tables(store: Any, core: Any, check: Any) -> None:
    """The core tables an older tiermem kept in LanceDB are empty: their rows were moved into ``core`` (the
    ``CoreStore``) and purged when the store was opened (``core.migrate.retire_lance_core``); rows left there outlive
    what is forgotten. Rows ``core`` lacks are kept there until recovered or removed (docs/security.md)."""
    from ..core.lance import LanceCoreTables
    from ..core.migrate import not_in_core
    from ..core.protocol import CORE_TABLES

    left = {t: n for t in CORE_TABLES if (n := store.rows.count(t))}
    where = core.describe()
    missing = not_in_core(LanceCoreTables(store), core) if left else ""
    held = "the LanceDB core tables of an older tiermem still hold " + ", ".join(f"{n} {t}" for t, n in left.items())
    check(
        "old core tables",
        not left,
        f"the LanceDB core tables of an older tiermem hold nothing (core state is in {where})"
        if not left
        else f"{held} row(s), of which {where} lacks {missing}: kept so that nothing is lost, but forgetting and "
        "deleting do not reach them"
        if missing
        else f"{held} row(s), moved into {where} but not yet removed: forgetting and deleting do not reach them",
        "recover what the core lacks into a backup, or remove the old tables once you do not need it: "
        "docs/security.md, 'Old core tables'"
        if missing
        else "make the data directory writable, then run `tiermem doctor` again (opening the store removes them and "
        "purges them from its files)",
    )


def check_attachments(core: Mapping[str, Sequence[Mapping[str, Any]]], check: Any) -> None:
    """Every agent's attached blocks exist (an agent being deleted aside: its deletion removes them first)."""
    from .memory import DELETING_KEY

    blocks = {r["id"] for r in core["blocks"]}
    names = {r["id"]: r["name"] for r in core["agents"] if DELETING_KEY not in metadata(r)}
    missing = sorted(
        (names[r["agent_id"]], r["block_id"])
        for r in core["attachments"]
        if r["agent_id"] in names and r["block_id"] not in blocks
    )
    if not missing:
        check("attachments", True, "every attached block exists")
        return
    shown = ", ".join(f"{b} (agent {a})" for a, b in missing[:5]) + (" ..." if len(missing) > 5 else "")
    check(
        "attachments",
        False,
        f"{len(missing)} attached block(s) do not exist: {shown}; the agent shows the rest without them (a damaged "
        "store)",
        "restore the blocks from a backup (`tiermem import backup.jsonl` adds only what is missing)",
    )


def check_names(core: Mapping[str, Sequence[Mapping[str, Any]]], check: Any) -> None:
    """No two agents share a name (commands and servers find an agent by its name: they would pick one of them)."""
    ids: dict[str, list[str]] = {}
    for r in core["agents"]:
        ids.setdefault(str(r["name"]), []).append(str(r["id"]))
    shared = {name: sorted(found) for name, found in sorted(ids.items()) if len(found) > 1}
    if not shared:
        check("agent names", True, "every agent has a name of its own")
        return
    check(
        "agent names",
        False,
        "; ".join(f"{len(found)} agents are named {name!r} ({', '.join(found)})" for name, found in shared.items())
        + ": a command, a server or the inspector reaches only one of them by that name",
        "keep one: make a backup (`tiermem export --format jsonl -o before.jsonl`), then `tiermem agents delete NAME` "
        "deletes the one `tiermem agents show NAME` shows; the other stays",
    )


def check_labels(core: Mapping[str, Sequence[Mapping[str, Any]]], check: Any) -> None:
    """No agent has two blocks of one label (tools and commands find a block by its label: they would reach only one
    of them). Creations and renames check the label in the same step as they write it; two blocks of one label are
    left by a tiermem before that check, or by a restore of such a store."""
    import shlex

    from .memory import DELETING_KEY

    names = {r["id"]: str(r["name"]) for r in core["agents"] if DELETING_KEY not in metadata(r)}
    labels = {r["id"]: str(r["label"]) for r in core["blocks"]}
    count: dict[tuple[str, str], int] = {}  # (agent id, label): two agents of one name are two agents
    for r in core["attachments"]:
        if r["agent_id"] in names and r["block_id"] in labels:
            key = (str(r["agent_id"]), labels[r["block_id"]])
            count[key] = count.get(key, 0) + 1
    shared = {n for n in names.values() if list(names.values()).count(n) > 1}  # what the 'agent names' check finds

    def agent_of(agent_id: str) -> str:
        name = names[agent_id]
        return f"{name} (id {agent_id})" if name in shared else name

    twice = sorted((names[a], a, label, n) for (a, label), n in count.items() if n > 1)
    if not twice:
        check("block labels", True, "no agent has two blocks of one label")
        return
    shown = ", ".join(f"{n} blocks labelled {label!r} (agent {agent_of(a)})" for _, a, label, n in twice[:5])
    agent, _, label, _ = twice[0]
    fix = (
        f"give each its own label: `tiermem blocks set {shlex.quote(label)} --label NEW --agent {shlex.quote(agent)}` "
        "renames the one `tiermem blocks show` shows, and the other keeps the label (repeat for each label listed)"
    )
    if agent in shared:
        fix = (
            f"first give each agent named {agent!r} a name of its own (the 'agent names' check: `--agent` reaches only "
            f"one of them), then {fix}"
        )
    check(
        "block labels",
        False,
        f"{shown}{' ...' if len(twice) > 5 else ''}: tools and commands reach only one of each by its label (blocks "
        "created or renamed at once by two processes, before tiermem checked labels in the same step as it writes)",
        fix,
    )


def metadata(row: Mapping[str, Any]) -> Mapping[str, Any]:
    raw = row.get("metadata") or "{}"
    value = json.loads(raw) if isinstance(raw, str) else raw
    return value if isinstance(value, Mapping) else {}


def check_stray_rows(
    memory: Any, agent_ids: list[str], attachments: Sequence[Mapping[str, Any]] | None, check: Any
) -> None:
    """Messages and passages of no visible agent: an import that was killed (its blocks, then its messages and
    passages, its agent row last), or rows whose agent the core state does not know at all (no agent row, no block
    attached): the core state was lost or replaced (``attachments``: the core's, None when it could not be read)."""
    stray = memory.archive.rows.stray_rows(agent_ids)
    if not any(stray.values()):
        check("stray rows", True, "every message and passage belongs to an agent")
        return
    begun = {str(r["agent_id"]) for r in attachments or []}  # an import writes its blocks before its rows
    unknown = sorted(memory.archive.rows.stray_agents(agent_ids) - begun) if attachments is not None else []
    if unknown:
        check(
            "stray rows",
            False,
            f"{stray['messages']} messages and {stray['passages']} passages belong to no agent, and the core state "
            f"knows nothing of {len(unknown)} of their agents ({', '.join(unknown[:3])}"
            f"{' ...' if len(unknown) > 3 else ''}: no agent row, no block): the core state "
            f"({memory.core.describe()}) was lost or replaced (or these are the leftovers of a deleted agent); no "
            "search reaches them",
            "restore the agents from your latest backup: `tiermem import backup.jsonl` adds only what is missing, and "
            "these messages and passages rejoin their agents (leftovers of a deleted agent are harmless; an interrupted "
            "import of an agent file whose agent has no blocks is finished by running the same import again)",
        )
        return
    check(
        "stray rows",
        False,
        f"{stray['messages']} messages and {stray['passages']} passages belong to no agent: an import that was "
        "interrupted (or is still running), or an agent deletion that was; no search reaches them",
        "run the same `tiermem import FILE` again: it finishes the import without writing anything twice "
        "(rows left by an interrupted agent deletion are harmless)",
    )


def check_links(memory: Any, check: Any) -> None:
    """Links made on purpose whose memory is gone (a forget cut short between its deletions; a link made while its
    memory was forgotten, by a tiermem before links were checked again after their write). Only ids are shown: a
    link's note is the user's text."""
    dangling = memory.archive.rows.dangling_links()
    if not dangling:
        check("links", True, "every link made on purpose joins two memories that exist")
        return
    shown = ", ".join(f"{link.source} - {link.target}" for link in dangling[:3]) + (" ..." if len(dangling) > 3 else "")
    check(
        "links",
        False,
        f"{len(dangling)} link(s) made on purpose join a memory that was deleted or forgotten ({shown}); no search "
        "shows them, but their notes are still stored",
        "run `tiermem optimize`: it removes them, their notes with them",
    )


def check_transport(settings: Settings, check: Any) -> None:
    if settings.transport == "stdio":
        check("transport", True, "stdio (no port needed)")
        return
    import errno
    import socket

    try:
        with socket.socket(socket.AF_INET6 if ":" in settings.host else socket.AF_INET) as sock:
            sock.bind((settings.host, settings.port))
        check("transport", True, f"{settings.transport} on {settings.host}:{settings.port}: the port is free")
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE and tiermem_listens(settings.host, settings.port):
            check(
                "transport",
                True,
                f"{settings.transport} on {settings.host}:{settings.port}: in use by a running tiermem server (this "
                "configuration's, if it is the one serving it)",
            )
            return
        check(
            "transport",
            False,
            f"{settings.transport} on {settings.host}:{settings.port}: {exc.strerror or exc}",
            "stop whatever uses that port (perhaps a running tiermem serve), or choose another with --port",
        )


def tiermem_listens(host: str, port: int) -> bool:
    """Whether a tiermem HTTP server (``serve`` over sse/http, or ``ui``) answers on ``host:port``: asked for a
    WebSocket, it refuses with its guard's own words (``netguard.WEBSOCKET_REFUSED``), before any check of the Host
    header or a token, so whatever its configuration. Anything else there (or no answer within 3 s) is not one."""
    import http.client

    from ..process.netguard import WEBSOCKET_REFUSED

    target = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)  # a wildcard bind: ask loopback
    conn = http.client.HTTPConnection(target, port, timeout=3)
    try:
        conn.request("GET", "/", headers={"Upgrade": "websocket", "Connection": "Upgrade"})
        answer = conn.getresponse()
        status, body = answer.status, answer.read(4096)
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()
    try:
        said = json.loads(body)
    except ValueError:
        return False
    return status == 403 and isinstance(said, dict) and said.get("error") == WEBSOCKET_REFUSED


def check_agent_loop(settings: Settings, check: Any) -> None:
    import os

    if not settings.agent_loop:
        return
    has_key = bool(os.environ.get("ANTHROPIC_API_KEY"))
    if settings.llm_provider == "anthropic" and not has_key:
        check(
            "agent loop",
            False,
            "llm_provider is anthropic but ANTHROPIC_API_KEY is not set",
            'set ANTHROPIC_API_KEY in the server\'s environment, or use llm_provider = "sampling"',
        )
    else:
        provider = (
            "anthropic"
            if settings.llm_provider == "anthropic" or (settings.llm_provider == "auto" and has_key)
            else "sampling"
        )
        check(
            "agent loop",
            True,
            f"agent_chat on the {provider} provider, model {settings.model}"
            if provider == "anthropic"
            else "agent_chat on the host's model (MCP sampling)",
        )
