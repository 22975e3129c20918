"""The memory inspector's operations: plain functions over ``Memory`` that take and return JSON values.

No HTTP here (``app.py`` maps requests onto these) and no storage calls: every read and write goes
through the ``Memory`` facade and its ``Archive``, so the inspector obeys the same rules as the tools
(limits, versions, history). Edits made here carry the actor ``human``.

Why this module is long: it is every operation the inspector offers, one short function each over ``Memory``
(agents, blocks, history, search, passages, forgetting, folders, import and export), so ``app.py``'s routes map onto
one module.
"""

from __future__ import annotations

import difflib
import hashlib
import io
import json
import os
import tempfile
from collections.abc import Collection
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.errors import AccessError, EditError, NotFoundError, TiermemError, ValidationError
from ..domain.blocks import Rethink, is_pinned, no_version, version_number
from ..domain.file_views import truncate_visible

if TYPE_CHECKING:
    from ..base.records import Agent, Block, BlockVersion, Folder, Hit, Passage
    from ..domain.memory import Memory

JSON = dict[str, Any]
IMPORT_FORMATS = ("auto", "af", "jsonl", "memory-graph")
EXPORT_FORMATS = ("af", "jsonl")


def allowed(agents: Collection[str] | None, name: str) -> bool:
    """Whether a token covering ``agents`` (None: no tokens configured) may see agent ``name``."""
    return agents is None or "*" in agents or name in agents


def check_access(agents: Collection[str] | None, name: str) -> None:
    if not allowed(agents, name):
        raise AccessError(f"This token may not use agent {name!r}; use a token that lists it.")


def check_every_agent(agents: Collection[str] | None, what: str, refusal: str | None = None) -> None:
    """Refuse a token limited to some agents (``AccessError``: ``refusal``, else that ``what`` touches every agent);
    only one with ``agents = ["*"]`` (or no tokens configured) may."""
    if not (agents is None or "*" in agents):
        raise AccessError(refusal or f'{what} touches every agent; it needs a token with agents = ["*"].')


def check_agent_deletion(agents: Collection[str] | None) -> None:
    """Deleting (or forgetting) a whole agent is an administrator's operation: a token limited to some agents (a
    signed-in user's, even for their own or a shared agent) may not, only one with ``agents = ["*"]``
    (docs/oauth.md)."""
    check_every_agent(
        agents,
        "Deleting a whole agent",
        'Deleting a whole agent needs a static token with agents = ["*"] (an administrator\'s); this token may only '
        "use its agents. Nothing was deleted.",
    )


# -- agents and blocks ---------------------------------------------------------------


def list_agents(memory: Memory, agents: Collection[str] | None) -> list[JSON]:
    return [
        {"name": a.name, "id": a.id, "created_at": a.created_at.isoformat()}
        for a in memory.list_agents()
        if allowed(agents, a.name)
    ]


def agent_view(memory: Memory, name: str) -> JSON:
    """Everything the page shows first for an agent: its blocks, counts and the change signature."""
    agent = memory.get_agent(name)
    blocks = memory.blocks(agent.id)
    messages, passages, tags = memory.archive.counts(agent.id)
    return {
        "agent": {"name": agent.name, "id": agent.id, "metadata": agent.metadata},
        "blocks": [block_json(memory, b) for b in blocks],
        "counts": {"messages": messages, "passages": passages},
        "tags": tags,
        "signature": _signature(blocks, messages, passages),
    }


def deletion_plan(memory: Memory, name: str) -> JSON:
    """What deleting the agent removes, for the page to show before the person confirms."""
    plan = memory.deletion_plan(memory.get_agent(name).id)
    return {
        "agent": plan.name,
        "id": plan.agent_id,
        "blocks": list(plan.blocks),
        "block_versions": plan.block_versions,
        "shared_blocks_kept": list(plan.shared_blocks_kept),
        "messages": plan.messages,
        "passages": plan.passages,
        "summary": plan.describe(),
    }


def delete_agent(memory: Memory, name: str, confirm: Any, *, serving: str | None) -> JSON:
    """Delete an agent (``Memory.delete_agent``) once the person typed its name; the agent a server in this process
    serves over ``/mcp`` is refused (its clients would lose their memory mid-session)."""
    agent = memory.get_agent(name)
    if confirm != agent.name:
        raise ValidationError(f"Type the agent's name ({agent.name}) to confirm the deletion; nothing was deleted.")
    if serving is not None and agent.name == serving:
        raise EditError(
            f"This server serves agent {agent.name!r} over /mcp; it cannot be deleted while it runs. Stop "
            f"the server and run `tiermem agents delete {agent.name}`. Nothing was deleted."
        )
    plan = memory.delete_agent(agent.id)
    return {
        "deleted": plan.name,
        "id": plan.agent_id,
        "blocks": list(plan.blocks),
        "messages": plan.messages,
        "passages": plan.passages,
        **({"purge_pending": plan.purge_unfinished} if plan.purge_unfinished else {}),
    }


def block_json(memory: Memory, b: Block) -> JSON:
    return {
        "id": b.id,
        "label": b.label,
        "value": b.value,
        "description": b.description,
        "limit": b.limit,
        "chars": len(b.value),
        "read_only": b.read_only,
        "version": b.version,
        "updated_at": b.updated_at.isoformat(),
        "pinned": is_pinned(b),  # False: detached, shown to the model only as a label in <memory_directory>
        "shared_with": len(memory.core.agents_of_block(b.id)) - 1,
    }


def signature(memory: Memory, name: str) -> str:
    """Changes whenever a block of the agent, or the number of its messages or passages, changes."""
    agent = memory.get_agent(name)
    messages, passages, _ = memory.archive.counts(agent.id)
    return _signature(memory.blocks(agent.id), messages, passages)


def watch_state(memory: Memory, name: str) -> tuple[object, bool, str]:
    """What a long poll of ``api/changes`` starts from: the core's change token, whether polling it is cheap
    (``CoreStore.watch_cheap``), and the agent's ``signature``."""
    return memory.change_token(), memory.watch_cheap, signature(memory, name)


def change_token(memory: Memory) -> object:
    """The core's change token (``CoreStore.change_token``): it moves when another process may have edited."""
    return memory.change_token()


def _signature(blocks: list[Block], messages: int, passages: int) -> str:
    text = json.dumps([[b.id, b.label, b.version] for b in blocks] + [messages, passages])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _agent(memory: Memory, name: str) -> Agent:
    return memory.get_agent(name)


def edit_block(
    memory: Memory, name: str, label: str, value: Any, *, expected_version: Any, override_read_only: bool = False
) -> JSON:
    """Replace a block's value as a person: a new version with the actor ``human``.

    Refused, writing nothing, when the block changed since the editor opened it (``expected_version``),
    when it is read-only and the person did not confirm the override, or when the text exceeds the limit.
    """
    agent = _agent(memory, name)
    if not isinstance(value, str):
        raise ValidationError("value must be text.")
    block = memory.block(agent.id, label)
    _check_version(block, expected_version)
    if block.read_only and not override_read_only:
        raise EditError(
            f"Block {label!r} is read-only: the model cannot change it. A person may; confirm the "
            'override (tick "edit this read-only block") and save again. Nothing was written.'
        )
    if value == block.value:
        return {"block": block_json(memory, block), "changed": False}
    saved = memory.edit(agent.id, label, Rethink(value, operation="ui_edit", check_line_numbers=False), actor="human")
    return {"block": block_json(memory, saved), "changed": True}


def _check_version(block: Block, expected: Any) -> None:
    if isinstance(expected, bool) or not isinstance(expected, int):
        raise ValidationError("expected_version must be the block's version number when the editor opened it.")
    if block.version != expected:
        raise EditError(
            f"Block {block.label!r} changed while you were editing it (version {expected} -> "
            f"{block.version}); nothing was written. Your text is still in the editor: compare it "
            "with the new version (history), then save again."
        )


def history(memory: Memory, name: str, label: str, limit: int = 50) -> JSON:
    agent = _agent(memory, name)
    versions = memory.history(agent.id, label, _count(limit, "limit", 1000))
    return {"label": label, "versions": [version_json(v) for v in versions]}


def version_json(v: BlockVersion) -> JSON:
    return {
        "version": v.version,
        "value": v.value,
        "limit": v.limit,
        "description": v.description,
        "read_only": v.read_only,
        "operation": v.operation,
        "actor": v.actor,
        "created_at": v.created_at.isoformat(),
    }


def diff(memory: Memory, name: str, label: str, old: Any, new: Any) -> JSON:
    """A line diff from version ``old`` to version ``new``: ``[{"kind": " "|"-"|"+"|"@", "text"}]``."""
    agent = _agent(memory, name)
    block = memory.block(agent.id, label)
    values = []
    for v in (old, new):
        found = memory.core.history_version(block.id, version_number(block, v))
        if found is None:  # forgotten
            raise no_version(block, v)
        values.append(found.value)
    lines = difflib.unified_diff(
        values[0].splitlines(), values[1].splitlines(), f"version {old}", f"version {new}", lineterm="", n=3
    )
    out = [{"kind": line[0] if line[:1] in (" ", "-", "+", "@") else " ", "text": line[1:]} for line in list(lines)[2:]]
    return {"label": label, "old": old, "new": new, "lines": out}


def revert(memory: Memory, name: str, label: str, version: Any, *, override_read_only: bool = False) -> JSON:
    agent = _agent(memory, name)
    block = memory.block(agent.id, label)
    version_number(block, version)
    if block.read_only and not override_read_only:
        raise EditError(
            f"Block {label!r} is read-only: confirm that you, a person, want to revert it. Nothing was written."
        )
    saved = memory.revert(agent.id, label, version, actor="human")
    return {"block": block_json(memory, saved)}


# -- archival and recall ---------------------------------------------------------------


def search(memory: Memory, name: str, params: JSON) -> JSON:
    """Archival or recall search with the filters the tools take, and each hit's relevance breakdown."""
    agent = _agent(memory, name)
    archive = memory.archive
    query = params.get("q") or ""
    limit = _count(whole_number(params.get("limit", 10), "limit"), "limit", 100)
    which = params.get("memory", "archival")
    if which == "archival":
        result = archive.search(
            agent.id,
            query,
            tags=_list(params.get("tags")),
            tag_match_mode=params.get("tag_mode") or "any",
            top_k=limit,
            start_datetime=params.get("start") or None,
            end_datetime=params.get("end") or None,
        )
    elif which == "recall":
        result = archive.conversation_search(
            agent.id,
            query,
            roles=_list(params.get("roles")),
            limit=limit,
            start_date=params.get("start") or None,
            end_date=params.get("end") or None,
        )
    else:
        raise ValidationError(f"memory must be 'archival' or 'recall', got {which!r}.")
    return {"memory": which, "mode": result.mode, "notes": result.notes, "hits": [hit_json(h) for h in result.hits]}


def hit_json(h: Hit) -> JSON:
    return {
        "id": h.id,
        "content": h.content,
        "created_at": h.created_at.isoformat(),
        "relevance": round(h.relevance, 4),
        "score": round(h.score, 4),
        "vector_rank": h.vector_rank,
        "keyword_rank": h.fts_rank,
        "role": h.role,
        "tags": list(h.tags),
        "conversation_id": h.conversation_id,
    }


def passages(memory: Memory, name: str, *, offset: Any = 0, limit: Any = 50, tags: Any = None) -> JSON:
    agent = _agent(memory, name)
    start = whole_number(offset, "offset")
    rows, total = memory.archive.list_passages(
        agent.id, offset=start, limit=whole_number(limit, "limit"), tags=_list(tags)
    )
    # hot, warm or cold by the agent's uses (domain/uses.py): a chunk's are its passage's (the insert it is part of)
    heat = memory.uses.temperatures({p.group_id or p.id for p in rows}, agent_id=agent.id)
    listed = [
        {**passage_json(p), "temperature": heat[p.group_id or p.id][0], "use_score": heat[p.group_id or p.id][1]}
        for p in rows
    ]
    return {"total": total, "offset": start, "passages": listed}


def uses(memory: Memory, name: str) -> JSON:
    """How used the agent's memories are: per kind hot, warm and cold, the hottest and coldest (``tiermem stats``)."""
    from ..domain.use_stats import use_stats

    return use_stats(memory, _agent(memory, name).id).as_dict()


def links(memory: Memory, name: str, memory_id: Any) -> JSON:
    """A memory (a recall turn or an archival passage of the agent) and the memories it links to, one hop."""
    if not isinstance(memory_id, str) or not memory_id.strip():
        raise ValidationError("Give the id of a turn or passage (search results show them).")
    return memory.neighbourhood(_agent(memory, name).id, memory_id.strip()).as_dict()


def passage_json(p: Passage) -> JSON:
    return {
        "id": p.id,
        "content": p.content,
        "tags": list(p.tags),
        "created_at": p.created_at.isoformat(),
        "group_id": p.group_id,
        "chunk": p.chunk,
    }


def delete_passage(memory: Memory, name: str, passage_id: Any) -> JSON:
    agent = _agent(memory, name)
    if not isinstance(passage_id, str):
        raise ValidationError("id must be a passage id from the list or a search.")
    return {"deleted": memory.archival_delete(agent.id, passage_id)}  # with its use record


# -- the timeline (``domain/timeline.py``) -----------------------------------------------------


def timeline(memory: Memory, name: str, params: JSON) -> JSON:
    """Counts per period (``by``: day, week, month) by kind within [from, to], each period's rising terms (5)."""
    from ..domain import timeline as tl

    agent = _agent(memory, name)
    found = tl.timeline(
        memory,
        agent.id,
        start=params.get("from") or None,
        end=params.get("to") or None,
        by=params.get("by") or "month",
        query=params.get("q") or None,
        kinds=_list(params.get("kinds")),
        terms=5,
    )
    return found.as_dict()


def timeline_period(memory: Memory, name: str, params: JSON) -> JSON:
    """What one period holds (up to 200 items) and its rising terms, measured against [from, to]."""
    from ..domain import timeline as tl

    agent = _agent(memory, name)
    view = tl.period(
        memory,
        agent.id,
        params.get("period") or "",
        query=params.get("q") or None,
        kinds=_list(params.get("kinds")),
        limit=200,
        start=params.get("from") or None,
        end=params.get("to") or None,
    )
    return view.as_dict()


# -- folders and files (``memory.files``) ---------------------------------------------------


def forget(memory: Memory, name: str, body: JSON, *, serving: str | None = None, data_dir: Path | None = None) -> JSON:
    """Forget (``domain/forgetting.forget``): ``kind`` passage / message (``ref``: its id), block (``ref``: its label;
    ``versions``: past versions, or every past one when absent), agent (``confirm``: its name typed), text
    (``ref``: the text, in this agent's memory); ``now``: purge the files before answering, else at the next upkeep.
    The answer names synced MemFS directories and git history that still hold the text (never rewritten), and with
    ``data_dir`` (a local store) edits a forgotten text out of Claude Code's auto-memory files, as `tiermem forget`
    does."""
    from ..domain.forgetting import KINDS, Target
    from ..domain.forgetting import forget as forget_target
    from ..interop.auto_memory_admin import after_forget, syncs_held
    from ..interop.memfs_holders import holders, synced_directories

    agent = _agent(memory, name)
    kind = body.get("kind")
    if kind not in KINDS:
        raise ValidationError(f"kind must be one of {', '.join(KINDS)}; nothing was forgotten.")
    ref = body.get("ref") if kind != "agent" else agent.name
    if kind == "agent":
        if body.get("confirm") != agent.name:
            raise ValidationError(f"Type the agent's name ({agent.name}) to confirm; nothing was forgotten.")
        if serving == agent.name:
            raise EditError(
                f"This server serves agent {agent.name!r}; run `tiermem forget agent {agent.name}` with "
                "the server stopped. Nothing was forgotten."
            )
    versions = body.get("versions")
    if versions is not None and not (isinstance(versions, list) and all(isinstance(v, int) for v in versions)):
        raise ValidationError("versions must be a list of version numbers; nothing was forgotten.")
    if not isinstance(ref, str):
        raise ValidationError("ref must be text (an id, a label or the text to forget); nothing was forgotten.")
    edited: list[str] = []
    named: list[str] = []
    # Claude Code's auto memory, as `tiermem forget` does (no sync between the forget and the files' edit)
    with syncs_held(data_dir, [agent.name]) if data_dir is not None else nullcontext():
        done = forget_target(
            memory,
            Target(kind, agent.id, ref, tuple(versions) if versions is not None else None),
            now=bool(body.get("now")),
        )
        if data_dir is not None:
            edited, named = after_forget(data_dir, [agent.name], kind, ref, done.texts, done.passage_ids)
    still = holders(synced_directories([agent.name], (), data_dir), done.texts) + named
    return {**done.as_dict(), "auto_memory_files_edited": edited, "still_held_outside_the_store": still}


def folders(memory: Memory, agents: Collection[str] | None) -> JSON:
    """Every folder this token may see: its description, how many files it holds and the agents it is attached to
    (those this token may see by name, the others counted). A token limited to some agents sees only the folders
    attached to one of them."""
    out = []
    for f, attached in _visible_folders(memory, agents):
        shown = sorted(n for n in attached if allowed(agents, n))
        out.append(
            {
                "id": f.id,
                "name": f.name,
                "description": f.description,
                "instructions": f.instructions,
                "files": len(memory.files.files(f.id)),  # (by id: a name an older tiermem gave two is refused)
                "agents": shown,
                "other_agents": len(attached) - len(shown),
                "updated_at": f.updated_at.isoformat(),
            }
        )
    return {"folders": out}


def _visible_folders(memory: Memory, agents: Collection[str] | None) -> list[tuple[Folder, list[str]]]:
    """The folders a token covering ``agents`` may see, each with the names of every agent it is attached to: all of
    them for an unlimited token, else those attached to one of its agents."""
    names = {a.id: a.name for a in memory.list_agents()}
    every = agents is None or "*" in agents
    found = []
    for f in memory.files.folders():
        attached = [names.get(i, i) for i in memory.files.agents_of(f.id)]
        if every or any(allowed(agents, n) for n in attached):
            found.append((f, attached))
    return found


def visible_folder(memory: Memory, agents: Collection[str] | None, folder: Any) -> Folder:
    """The folder whose id or name ``folder`` is if this token may see it (``Filesystem.find_folder``). A token
    limited to some agents gets the same 404 for a folder that does not exist and for one attached to none of its
    agents, naming only the folders it may see (so it cannot learn or probe the names of other users' folders); a
    name two folders it may see hold (left by an older tiermem) is refused naming those two alone."""
    if agents is None or "*" in agents:
        return memory.files.folder(folder)
    if not isinstance(folder, str):
        raise ValidationError("A folder is named by text, e.g. 'docs'.")
    visible = [f for f, _ in _visible_folders(memory, agents)]
    found = memory.files.find_folder(folder, visible)
    if found is None:
        known = ", ".join(repr(f.name) for f in visible) or "none"
        shown = folder if len(folder) <= 80 else folder[:80] + "..."
        raise NotFoundError(
            f"No folder named {shown!r} among the folders of the agents this token may use (folders: {known})."
        )
    return found


def folder_files(memory: Memory, folder: str, agents: Collection[str] | None = None) -> JSON:
    """A folder's files: name, type, size, processing status (with the error of a file that failed) and chunks."""
    found = visible_folder(memory, agents, folder)
    return {
        "id": found.id,
        "folder": found.name,
        "description": found.description,
        "files": [
            {
                "id": f.id,
                "name": f.name,
                "file_type": f.file_type,
                "size": f.size,
                "status": f.status,
                "error": f.error,
                "chunks": f.chunks,
                "updated_at": f.updated_at.isoformat(),
            }
            for f in memory.files.files(found.id)
        ],
    }


def rename_folder(memory: Memory, folder: Any, new_name: Any, agents: Collection[str] | None = None) -> JSON:
    """Give a folder a new name, as ``tiermem folders rename`` does: the checks are the domain's
    (``Filesystem.update_folder``: a name with ``/`` or over 100 characters, a name another folder has, another
    folder's id), the same texts, and a refused rename changes nothing. Folder names are one namespace for the whole
    store, so only a token with ``agents = ["*"]`` may (a refusal would otherwise tell a token for some agents which
    names other users' folders hold)."""
    check_every_agent(
        agents,
        "Renaming a folder",
        'Renaming a folder needs a token with agents = ["*"] (folder names are shared by every agent); this token may '
        "only use its agents. Nothing was renamed.",
    )
    if not isinstance(folder, str) or not folder:
        raise ValidationError("Name the folder to rename (folder: its id or name); nothing was renamed.")
    if not isinstance(new_name, str) or not new_name:
        raise ValidationError("Type the folder's new name (a file name without '/'); nothing was renamed.")
    found = visible_folder(memory, agents, folder)
    if new_name == found.name:
        return {"id": found.id, "name": found.name, "old_name": found.name, "renamed": False}
    renamed = memory.files.update_folder(found.id, new_name=new_name)
    return {"id": renamed.id, "name": renamed.name, "old_name": found.name, "renamed": True}


def file_view(memory: Memory, name: str, folder: str, file: str, agents: Collection[str] | None = None) -> JSON:
    """A file's whole parsed text and what agent ``name`` sees of it: its open window (the text its core memory
    shows, cut at its per-file limit, the whole window's length and its lines), "closed", or not attached (the folder is not attached to the agent, or the file is not ready)."""
    where = visible_folder(memory, agents, folder)
    agent = _agent(memory, name)
    found = next((f for f in memory.files.files(where.id) if f.name == file), None)
    if found is None:
        raise NotFoundError(f"Folder {where.name!r} has no file {file!r}; pick one from the folder's list.")
    text = memory.files.text(where.id, file) if found.status == "completed" else ""
    state = memory.files.state(agent.id)
    view = next((v for v in state.files if v.file_id == found.id), None)
    seen: JSON = {
        "attached": view is not None,
        "name": view.name if view else f"{where.name}/{file}",
        "is_open": bool(view and view.is_open),
    }
    if view is not None and view.is_open:  # the row keeps a large window cut (file_windows): counted whole
        window = memory.files.whole_window(view, state.char_limit)
        seen.update(
            visible=truncate_visible(window, state.limits[1]),  # as <directories> shows it (its per-file limit)
            window_chars=len(window),
            start_line=view.start_line,
            end_line=view.end_line,
            accessed_us=view.accessed_us,
        )
    return {
        "folder": where.name,
        "file": file,
        "status": found.status,
        "error": found.error,
        "text": text,
        "chars": len(text),
        "agent": agent.name,
        "view": seen,
    }


def file_search(memory: Memory, name: str, query: Any, kind: Any = "both", include: Any = None) -> JSON:
    """Agent ``name``'s own file tools over its attached files, answered with their text as the model reads it:
    ``grep_files`` (a regular expression, one line of context) and ``semantic_search_files`` (5 passages). Like the
    tools, a search marks the files it found as just used (what closing the least recently used open file reads)."""
    agent = _agent(memory, name)
    if not isinstance(query, str) or not query.strip():
        raise ValidationError("Type what to look for: a pattern (grep) or a question (semantic).")
    if kind not in ("both", "grep", "semantic"):
        raise ValidationError(f"kind must be 'both', 'grep' or 'semantic', got {kind!r}.")
    if include is not None and not isinstance(include, str):
        raise ValidationError("include must be a file name pattern such as *.py.")
    out: JSON = {"query": query, "kind": kind}
    for tool in ("grep", "semantic"):
        if kind not in ("both", tool):
            continue
        try:
            out[tool] = (
                memory.grep_files(agent.id, query, include or None, 1, None)
                if tool == "grep"
                else memory.semantic_search_files(agent.id, query, 5)
            )
        except TiermemError as exc:  # both asked: one tool's refusal (a bad regex) is shown beside the other's answer
            if kind != "both":
                raise
            out[f"{tool}_error"] = str(exc)
    return out


# -- import and export -------------------------------------------------------------------


def export(memory: Memory, name: str | None, fmt: str) -> tuple[str, str]:
    """(file name, text) of an agent as a Letta agent file, or of everything as a jsonl backup."""
    from ..interop import af_export, backup

    if fmt == "af":
        if not name:
            raise ValidationError("Choose the agent to export as a Letta agent file.")
        data, _notes = af_export.export_agent_files(memory, [name])
        return f"{name}.af", json.dumps(data, ensure_ascii=False, indent=2) + "\n"
    if fmt == "jsonl":
        out = io.StringIO()
        backup.export_backup(memory, out)
        return "tiermem-backup.jsonl", out.getvalue()
    raise ValidationError(f"Unknown export format {fmt!r}; use one of {', '.join(EXPORT_FORMATS)}.")


def import_file(
    memory: Memory, data: bytes, *, filename: str, fmt: str, agent: str, rename: str | None, replace: bool
) -> JSON:
    """Import an uploaded file (a Letta agent file, a tiermem backup or a memory.jsonl graph). Its errors and report
    name the uploaded file (``filename``'s last part), never the server's temporary copy."""
    from ..interop.commands import run_import

    if fmt not in IMPORT_FORMATS:
        raise ValidationError(f"Unknown import format {fmt!r}; use one of {', '.join(IMPORT_FORMATS)}.")
    if not data:
        raise ValidationError("The uploaded file is empty; choose a .af, .json or .jsonl file.")
    shown = Path(filename.replace("\\", "/")).name[:200] or "the uploaded file"
    suffix = Path(shown).suffix if Path(shown).suffix in (".af", ".json", ".jsonl") else ".json"
    fd, tmp = tempfile.mkstemp(prefix="tiermem-ui-import-", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        report = run_import(memory, Path(tmp), fmt=fmt, agent=agent, rename=rename or None, replace=replace)
    except TiermemError as exc:
        exc.args = (str(exc).replace(tmp, shown),)
        if exc.person is not None:
            exc.person = exc.person.replace(tmp, shown)
        raise
    finally:
        Path(tmp).unlink(missing_ok=True)
    plain: JSON = json.loads(json.dumps(report, default=str).replace(json.dumps(tmp)[1:-1], json.dumps(shown)[1:-1]))
    return plain


# -- argument helpers ------------------------------------------------------------------------


def whole_number(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise ValidationError(f"{name} must be a whole number, got {value!r}.")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValidationError(f"{name} must be a whole number, got {value!r}.") from None


def _count(value: int, name: str, most: int) -> int:
    if not 1 <= value <= most:
        raise ValidationError(f"{name} must be from 1 to {most}, got {value}.")
    return value


def _list(value: Any) -> list[str] | None:
    """Tags or roles: a list, or one comma-separated string; None when empty."""
    if value in (None, "", []):
        return None
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise ValidationError("tags and roles must be text, comma-separated (for example: work,people).")
    clean = [i.strip() for i in items if i.strip()]
    return clean or None
