"""Export agents as one Letta agent file, in Letta's shape.

Several agents go into one file: a block they share is written once and listed by each, a group
(e.g. a sleep-time pair) lists every member that is exported. Ids are renumbered the way Letta's
exporter numbers them (``agent-0``, ``block-0``, ``tool-0``, ``message-0``, ...).

The folders attached to an exported agent are written as Letta's ``sources`` and ``files`` (each once, whatever
the agents sharing it), and the agent's views of them as its ``files_agents``, with its ``source_ids`` and two
limits; what a source, file or view had in the imported file that tiermem does not hold is written back from the
folder's metadata (``letta_source``, ``letta_files``) and the agent's document while the file is unchanged.

An agent imported from an agent file is written back from the document kept at import
(``letta_passthrough``): its settings, tools, tool rules, groups (and the sources no agent used) as the file had them,
and each message as the file had it; what tiermem holds natively (name, system prompt, blocks,
messages, context window, archival passages) comes from storage, so later edits are exported.
Archival passages (each with an id in the file), tiermem's own settings and the links made on purpose between two
exported memories (``links_io``) ride the top-level ``tiermem`` extension, which Letta ignores; each message carries
tiermem's row under its own ``tiermem`` key.

Why this module is long: it writes Letta's agent-file shape field by field (agents, blocks, tools, groups, sources,
files, views, messages) with the ids they share renumbered once; it is the mirror of ``agentfile.py``'s import.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..agent.llm import MODEL_TEXT, model_text
from ..base.errors import TiermemError, ValidationError
from ..base.records import Agent, Block, Message, stable_id
from ..domain.blocks import LETTA_LABEL_KEY, PINNED_KEY, label_from_letta
from ..domain.filesystem import STATE_KEY, AgentFiles
from . import letta_passthrough
from .agentfile import (
    FILES_KEY,
    SOURCE_KEY,
    STYLE,
    VIEWS_KEY,
    letta_file_fields,
    letta_source_fields,
    letta_view_fields,
    tiermem_name,
    with_kept,
)
from .letta_messages import EXTENSION
from .links_io import exported_links

if TYPE_CHECKING:
    from ..domain.memory import Memory

JSON = dict[str, Any]

# Model settings for agents that never lived in Letta (Letta requires both; tiermem runs neither).
DEFAULT_LLM_CONFIG: JSON = {
    "model": "claude-sonnet-4-5",
    "model_endpoint_type": "anthropic",
    "model_endpoint": "https://api.anthropic.com/v1",
    "provider_name": "anthropic",
    "context_window": 200000,
    "handle": "anthropic/claude-sonnet-4-5",
    "max_tokens": 8192,
}
DEFAULT_EMBEDDING_CONFIG: JSON = {
    "embedding_endpoint_type": "openai",
    "embedding_endpoint": "https://api.openai.com/v1",
    "embedding_model": "text-embedding-3-small",
    "embedding_dim": 1536,
    "embedding_chunk_size": 300,
    "handle": "openai/text-embedding-3-small",
}


class _Ids:
    """New file ids, numbered per kind in order of first use; the same key always gets the same id."""

    def __init__(self) -> None:
        self.maps: dict[str, dict[Any, str]] = {}
        self.written: set[tuple[str, Any]] = set()
        self.metadata: dict[str, dict[str, str]] = {}  # exported agent id -> its tiermem metadata
        self.orphan_blocks: dict[str, JSON] = {}  # block key -> a block no agent of its file listed
        self.file_names: dict[str, str] = {}  # tiermem file id -> its exported file_name
        self.messages: dict[str, dict[str, str]] = {}  # exported agent id -> tiermem message id -> its id in the file

    def first_time(self, kind: str, key: Any) -> bool:
        """True once per (kind, key): the object is written to the file then."""
        if (kind, key) in self.written:
            return False
        self.written.add((kind, key))
        return True

    def get(self, kind: str, key: Any) -> str:
        m = self.maps.setdefault(kind, {})
        if key not in m:
            m[key] = f"{kind}-{len(m)}"
        return m[key]

    def find(self, kind: str, key: Any) -> str | None:
        return self.maps.get(kind, {}).get(key)


def _scope(doc: JSON) -> tuple[str, str]:
    s = doc.get("scope") or {}
    return str(s.get("digest", "")), str(s.get("namespace", ""))


def _block_key(doc: JSON, ref: str) -> str:
    digest, namespace = _scope(doc)
    return stable_id("block", digest, namespace, ref)  # the id import gave the file's block `ref`


def export_agent_files(memory: Memory, names: list[str]) -> tuple[JSON, list[str]]:
    """The agents ``names`` as one Letta agent file, and notes on what could not be written as it was."""
    if not names:
        raise ValidationError("Name at least one agent to export (or use --all).")
    if len(set(names)) != len(names):
        raise ValidationError("An agent is named twice; name each agent once.")
    agents = [memory.get_agent(n) for n in names]
    docs = [letta_passthrough.parse(a.metadata) for a in agents]
    ids = _Ids()
    notes: list[str] = []
    # agents first, so a group can name every exported member whatever the order
    for a, doc in zip(agents, docs, strict=True):
        new = ids.get("agent", a.id)
        ids.metadata[new] = a.metadata
        for b in ((doc or {}).get("orphans") or {}).get("blocks") or []:
            ids.orphan_blocks[_block_key(doc or {}, str(b.get("id")))] = b
        if doc is not None:
            ids.maps.setdefault("agent_by_file", {})[(_scope(doc), str(doc.get("file_id")))] = new
    out: JSON = {
        "agents": [],
        "groups": [],
        "blocks": [],
        "files": [],
        "sources": [],
        "tools": [],
        "mcp_servers": [],
        "skills": [],
    }
    extension: JSON = {"format": 1, "passages": {}, "agents": {}}
    counter = [0]
    for a, doc in zip(agents, docs, strict=True):
        agent_id = ids.get("agent", a.id)
        out["agents"].append(_agent(memory, a, doc, agent_id, ids, out, counter, notes))
        extension["agents"][agent_id] = {
            k: v
            for k, v in a.metadata.items()  # the view travels as files_agents
            if k not in (letta_passthrough.KEY, STATE_KEY)
        }
        passages = memory.archive.rows.passages_of(a.id)
        extension["passages"][agent_id] = [
            {
                "id": ids.get("passage", p.id),  # what the agent's links name it by
                "tiermem_id": p.id,  # the row it was made from: a forget of it leaves it out of an import
                "content": p.content,
                "tags": list(p.tags),
                "created_at": p.created_at.isoformat(),
                **({"project": p.project} if p.project is not None else {}),  # None: shared by every project
            }
            for p in passages
        ]
        file_ids = {**ids.messages.get(agent_id, {}), **{p.id: ids.get("passage", p.id) for p in passages}}
        links = exported_links(memory, file_ids)  # the links made on purpose between two of its exported memories
        if links:
            extension.setdefault("links", {})[agent_id] = links
    for doc in docs:  # what no agent referenced, kept with a file's first agent
        if doc is not None:
            _orphans(doc, ids, out)
    file_meta = next(
        (
            (d.get("orphans") or {}).get("file_metadata")
            for d in docs
            if d and (d.get("orphans") or {}).get("file_metadata") is not None
        ),
        None,
    )
    out["metadata"] = file_meta if isinstance(file_meta, dict) else {"exported_by": "tiermem"}
    out["created_at"] = datetime.now(UTC).isoformat()
    out[EXTENSION] = extension
    return out, notes


def _agent(
    memory: Memory,
    a: Agent,
    doc: JSON | None,
    agent_id: str,
    ids: _Ids,
    out: JSON,
    counter: list[int],
    notes: list[str],
) -> JSON:
    blocks = memory.blocks(a.id)
    block_ids = [_block(b, doc, ids, out) for b in blocks]
    messages, in_context = _messages(memory, a, doc, agent_id, ids, counter)
    style = a.metadata.get("agent_type", "letta_v1")
    folders = _folders(memory, a, doc, agent_id, ids, out)
    if doc is None:
        native = {k: v for k, v in (folders or {}).items() if k != "folder_ids"}  # Letta's other name: once is enough
        return {**_native_agent(a, agent_id, style, block_ids, messages, in_context), **native}
    fields = dict(doc.get("agent") or {})
    kept_type = str(fields.get("agent_type") or "letta_v1_agent")
    original_name = fields.get("name")
    scope = _scope(doc)
    tool_ids = [_tool(t, ids, out) for t in doc.get("tools") or []]
    by_old = {str(t.get("id")): new for t, new in zip(doc.get("tools") or [], tool_ids, strict=True)}
    for g in doc.get("groups") or []:
        _group(g, doc, ids, out, notes)
    for s in doc.get("sources") or []:
        _source(s, scope, ids, out)
    for f in doc.get("files") or []:
        _file(f, scope, ids, out)
    fields.update(
        id=agent_id,
        # the file's name, unless the agent was imported (or renamed) under another one
        name=original_name if isinstance(original_name, str) and tiermem_name(original_name) == a.name else a.name,
        system=a.system,
        agent_type=kept_type
        if STYLE.get(kept_type, "letta_v1") == style
        else ("memgpt_agent" if style == "memgpt" else "letta_v1_agent"),
        message_buffer_autoclear=a.metadata.get("message_buffer_autoclear") == "true",
        block_ids=block_ids,
        memory_blocks=[],
        in_context_message_ids=in_context,
        messages=messages,
    )
    if "tool_ids" in fields:
        fields["tool_ids"] = [by_old.get(str(t), str(t)) for t in fields.get("tool_ids") or []]
    for key, kind in (("group_ids", "group"), ("source_ids", "source"), ("folder_ids", "source")):
        if isinstance(fields.get(key), list):
            fields[key] = [ids.find(kind, (scope, str(x))) or str(x) for x in fields[key]]
    if isinstance(fields.get("files_agents"), list):
        fields["files_agents"] = [_remap(fa, scope, ids, agent_id) for fa in fields["files_agents"]]
    for key, value in (folders or {}).items():  # the agent's folders and views, as they are now
        if key == "folder_ids" and not isinstance(fields.get(key), list):
            continue  # Letta's other name for source_ids: written only where the file had it
        if fields.get(key) is None and value in (None, []):
            continue  # null or absent in the file, and still nothing
        fields[key] = value
    return fields


def _folders(memory: Memory, a: Agent, doc: JSON | None, agent_id: str, ids: _Ids, out: JSON) -> JSON | None:
    """The agent's folders as Letta's ``source_ids`` (their sources and files written to ``out`` once), its views
    as ``files_agents``, its two limits. None for an agent imported by an earlier tiermem with no folder attached
    since (its sources, files and views are written back from its document as they were)."""
    state = AgentFiles.of(a)
    if not state.folders and doc is not None and not doc.get("files_native"):
        return None
    rows = memory.archive.files
    stored = {f.id: f for f in rows.folders()}
    source_ids: list[str] = []
    for info in state.folders:
        folder = stored.get(info["id"])
        if folder is None:
            continue
        source_id = ids.get("source", ("folder", folder.id))
        source_ids.append(source_id)
        if not ids.first_time("folder", folder.id):
            continue
        kept = folder.metadata.get(SOURCE_KEY)
        if isinstance(kept, dict):
            source = with_kept(letta_source_fields(folder), kept)
        else:  # a folder made in tiermem: Letta's fields, with the embedding settings Letta needs
            own = {k: v for k, v in folder.metadata.items() if k not in (SOURCE_KEY, FILES_KEY)}
            source = {
                **letta_source_fields(folder),
                "metadata": own or None,
                "embedding_config": _letta_config(a.metadata, "embedding_config", DEFAULT_EMBEDDING_CONFIG),
            }
        out["sources"].append({**source, "id": source_id})
        files = sorted(rows.files([folder.id]), key=lambda f: (f.created_at, f.name))  # as they were added
        texts = rows.texts([f.id for f in files])
        kept_files = folder.metadata.get(FILES_KEY)
        kept_files = kept_files if isinstance(kept_files, dict) else {}
        for f in files:
            native = letta_file_fields(folder.name, f, texts.get(f.id, ""))
            extra = kept_files.get(f.id)
            if isinstance(extra, dict) and extra.get("sha256") == f.sha256:  # unchanged since the import
                body = with_kept(native, extra)
            else:
                body = {
                    **native,
                    "file_creation_date": f.created_at.isoformat(),
                    "file_last_modified_date": f.updated_at.isoformat(),
                }
            ids.file_names[f.id] = str(body.get("file_name") or native["file_name"])
            out["files"].append({"source_id": source_id, **body, "id": ids.get("file", ("file", f.id))})
    kept_views = (doc or {}).get(VIEWS_KEY) or {}
    views = []
    for v in state.files:
        new_file = ids.find("file", ("file", v.file_id))
        new_source = ids.find("source", ("folder", v.folder_id))
        if new_file is None or new_source is None:
            continue  # its file or folder is gone (the view is dropped at the agent's next file change)
        whole = replace(v, visible=memory.files.whole_window(v, state.char_limit))  # kept cut: rendered whole
        body = with_kept(letta_view_fields(whole, ids.file_names[v.file_id]), kept_views.get(v.file_id))
        views.append(
            {
                "agent_id": agent_id,
                "file_id": new_file,
                "source_id": new_source,
                **body,
                "id": ids.get("file_agent", (agent_id, v.file_id)),
            }
        )
    return {
        "source_ids": source_ids,
        "folder_ids": list(source_ids),
        "files_agents": views,
        "max_files_open": state.max_files_open,
        "per_file_view_window_char_limit": state.char_limit,
    }


def _remap(fa: Any, scope: tuple[str, str], ids: _Ids, agent_id: str) -> Any:
    if not isinstance(fa, dict):
        return fa
    fa = dict(fa)
    if "id" in fa:
        fa["id"] = ids.get("file_agent", (scope, str(fa["id"])))
    fa["agent_id"] = agent_id
    for key, kind in (("file_id", "file"), ("source_id", "source")):
        if fa.get(key) is not None:
            fa[key] = ids.find(kind, (scope, str(fa[key]))) or ids.get(kind, (scope, str(fa[key])))
    return fa


def _native_agent(
    a: Agent, agent_id: str, style: str, block_ids: list[str], messages: list[JSON], in_context: list[str]
) -> JSON:
    """An agent that never lived in Letta: the fields Letta needs to create it."""
    return {
        "id": agent_id,
        "name": a.name,
        "system": a.system,
        "agent_type": "memgpt_agent" if style == "memgpt" else "letta_v1_agent",
        "description": a.metadata.get("description"),
        "message_buffer_autoclear": a.metadata.get("message_buffer_autoclear") == "true",
        "enable_sleeptime": int(a.metadata.get("sleeptime_frequency", "0") or 0) > 0,
        "memory_blocks": [],
        "tools": [],
        "tool_ids": [],
        "source_ids": [],
        "block_ids": block_ids,
        "tool_rules": [],
        "tags": json.loads(a.metadata["tags"]) if "tags" in a.metadata else [],
        "include_base_tools": True,
        "llm_config": _letta_config(a.metadata, "llm_config", DEFAULT_LLM_CONFIG),
        "embedding_config": _letta_config(a.metadata, "embedding_config", DEFAULT_EMBEDDING_CONFIG),
        "metadata": None,
        "in_context_message_ids": in_context,
        "messages": messages,
        "files_agents": [],
        "group_ids": [],
    }


def _letta_config(metadata: dict[str, str], key: str, default: JSON) -> JSON:
    try:
        kept = json.loads(metadata.get(f"letta_{key}", "null"))
    except ValueError:
        kept = None
    return kept if isinstance(kept, dict) else dict(default)


def _block(b: Block, doc: JSON | None, ids: _Ids, out: JSON) -> str:
    new = ids.find("block", b.id)
    if new is not None:
        return new
    new = ids.get("block", b.id)
    extras: JSON = {"metadata": dict(b.metadata)}
    native: JSON = {
        "label": _letta_label(b),
        "value": b.value,
        "limit": b.limit,
        "description": b.description,
        "read_only": b.read_only,
    }
    if doc is not None:
        for ref, kept in (doc.get("blocks") or {}).items():
            if _block_key(doc, ref) == b.id:
                extras = {k: v for k, v in kept.items() if k != "_native"}
                for key, (original, stored) in (kept.get("_native") or {}).items():
                    if native.get(key) == stored:  # unchanged since the import: the file's own value
                        native[key] = original
                break
    if b.metadata.get(PINNED_KEY) == "false":  # detached in tiermem: a re-import keeps it detached
        kept_meta = extras.get("metadata")
        extras["metadata"] = {**(kept_meta if isinstance(kept_meta, dict) else {}), PINNED_KEY: "false"}
    out["blocks"].append({**extras, "id": new, **native})
    return new


def _letta_label(block: Block) -> str:
    """The label as the imported file spelled it ('/note_directory'), unless the block was renamed since."""
    kept = block.metadata.get(LETTA_LABEL_KEY)
    try:
        return kept if kept and label_from_letta(kept) == block.label else block.label
    except TiermemError:
        return block.label


def _tool(t: JSON, ids: _Ids, out: JSON) -> str:
    key = json.dumps({k: v for k, v in t.items() if k != "id"}, sort_keys=True)  # the same tool from two files: once
    new = ids.find("tool", key)
    if new is None:
        new = ids.get("tool", key)
        out["tools"].append({**t, "id": new})
    return new


def _group(g: JSON, doc: JSON, ids: _Ids, out: JSON, notes: list[str]) -> None:
    scope = _scope(doc)
    key = (scope, str(g.get("id")))
    if not ids.first_time("group", key):
        return
    new = ids.get("group", key)
    members, missing = [], []
    for old in g.get("agent_ids") or []:
        found = ids.find("agent_by_file", (scope, str(old)))
        (members.append(found) if found else missing.append(str(old)))
    group = {**g, "id": new, "agent_ids": members}
    config = dict(g.get("manager_config") or {}) if isinstance(g.get("manager_config"), dict) else None
    if config is not None:
        if config.get("manager_agent_id"):
            found = ids.find("agent_by_file", (scope, str(config["manager_agent_id"])))
            if found is None:
                missing.append(str(config["manager_agent_id"]))
            config["manager_agent_id"] = found or config["manager_agent_id"]
            frequency = ids.metadata.get(found or "", {}).get("sleeptime_frequency")
            if found and config.get("sleeptime_agent_frequency") is not None and frequency and frequency.isdigit():
                config["sleeptime_agent_frequency"] = int(frequency)  # `tiermem agents set --sleeptime` is exported
        group["manager_config"] = config
    if isinstance(g.get("shared_block_ids"), list):
        group["shared_block_ids"] = [_shared_block(doc, str(r), ids, out) for r in g["shared_block_ids"]]
    if missing:
        notes.append(
            f"group {g.get('id')}: agent(s) {', '.join(missing)} of that group are not in this export; "
            "export them together (tiermem export A B ...) to keep the group whole"
        )
    out["groups"].append(group)


def _shared_block(doc: JSON, ref: str, ids: _Ids, out: JSON) -> str:
    key = _block_key(doc, ref)
    found = ids.find("block", key)
    if found is not None:
        return found
    b = ids.orphan_blocks.get(key)
    if b is None:
        return ref  # the file did not contain it either
    new = ids.get("block", key)
    out["blocks"].append({**b, "id": new})
    return new


def _source(s: JSON, scope: tuple[str, str], ids: _Ids, out: JSON) -> None:
    key = (scope, str(s.get("id")))
    if ids.first_time("source", key):
        out["sources"].append({**s, "id": ids.get("source", key)})


def _file(f: JSON, scope: tuple[str, str], ids: _Ids, out: JSON) -> None:
    key = (scope, str(f.get("id")))
    if not ids.first_time("file", key):
        return
    new = {**f, "id": ids.get("file", key)}
    if f.get("source_id") is not None:
        new["source_id"] = ids.get("source", (scope, str(f["source_id"])))
    out["files"].append(new)


def _orphans(doc: JSON, ids: _Ids, out: JSON) -> None:
    orphans = doc.get("orphans") or {}
    scope = _scope(doc)
    for b in orphans.get("blocks") or []:
        _shared_block(doc, str(b.get("id")), ids, out)
    for t in orphans.get("tools") or []:
        _tool(t, ids, out)
    for g in orphans.get("groups") or []:
        _group(g, doc, ids, out, [])
    for s in orphans.get("sources") or []:
        _source(s, scope, ids, out)
    for f in orphans.get("files") or []:
        _file(f, scope, ids, out)
    for key in ("mcp_servers", "skills"):
        kept = orphans.get(key)
        if kept is not None and not isinstance(kept, list):
            out[key] = kept  # not Letta's list shape: written back as the file had it
            continue
        for item in kept or []:
            if isinstance(out[key], list) and item not in out[key]:
                out[key].append(item)


def _messages(
    memory: Memory, a: Agent, doc: JSON | None, agent_id: str, ids: _Ids, counter: list[int]
) -> tuple[list[JSON], list[str]]:
    native = memory.archive.rows.messages_of(a.id)
    window = memory.context_window(a.id, "default")
    in_window = {m.id for m in memory.in_context_messages(window)}
    unlogged = list((doc or {}).get("unlogged_messages") or [])
    after: dict[str | None, list[JSON]] = {}
    if doc is not None:
        digest, _ = _scope(doc)
        for u in unlogged:
            key = None if u.get("after") is None else stable_id("message", digest, a.id, str(u["after"]))
            after.setdefault(key, []).append(u)
    out: list[JSON] = []
    # the window in the order the model reads it: what led the file's window (Letta's system message, stored late
    # when it was recompiled), the summary, the rest in message order
    in_context: list[tuple[int, int, str]] = []

    def emit(message: JSON, listed: bool, rank: int = 2) -> str:
        message["id"] = f"message-{counter[0]}"
        counter[0] += 1
        message["agent_id"] = agent_id
        out.append(message)
        if listed:
            in_context.append((rank, len(in_context), message["id"]))
        return str(message["id"])

    def emit_unlogged(key: str | None) -> None:
        for u in after.pop(key, []):
            message = dict(u.get("message") or {})
            emit(message, bool(u.get("in_context")), 0 if u.get("leads") is True else 2)

    if doc is None:  # Letta's first message is the compiled system prompt
        emit(
            {
                "type": "message",
                "role": "system",
                "content": [{"type": "text", "text": a.system}],
                "created_at": a.created_at.isoformat(),
            },
            True,
            0,
        )
    emit_unlogged(None)
    for m in native:
        rank = 1 if m.id == window.summary_id else 2
        ids.messages.setdefault(agent_id, {})[m.id] = emit(_letta_message(m), m.id in in_window, rank)
        emit_unlogged(m.id)
    for key in list(after):  # their neighbour is gone from the log: keep them, at the end
        emit_unlogged(key)
    return out, [ident for _, _, ident in sorted(in_context)]


def _letta_message(m: Message) -> JSON:
    payload = json.loads(m.payload) if m.payload else {}
    original = payload.pop("letta", None) if isinstance(payload, dict) else None
    own: JSON = {
        "role": m.role,
        "payload": json.dumps(payload) if original is not None else m.payload,
        "conversation_id": m.conversation_id,
        "id": m.id,  # the row it was made from: a forget of it leaves it out of an import (``af_forgotten``)
    }
    if m.project is not None:  # the project a hook logged it in (none: shared by every project)
        own["project"] = m.project
    if m.role == "system" or (original is None and isinstance(payload, dict) and MODEL_TEXT in payload):
        own["content"] = m.content  # unlike the Letta message's text (a send_message reply: in the call)
    if isinstance(original, dict):
        own["letta"] = True
        return {**original, EXTENSION: own}
    out: JSON = {"type": "message", "created_at": m.created_at.isoformat(), EXTENSION: own}
    if m.role == "system":  # our summaries: Letta shows them to the model as a user system alert
        out.update(
            role="user", content=[{"type": "text", "text": json.dumps({"type": "system_alert", "message": m.content})}]
        )
    elif m.role == "assistant":
        calls = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": json.dumps(c.get("input") or {})},
            }
            for c in payload.get("tool_calls") or []
        ]
        text = model_text(m, payload if isinstance(payload, dict) else {})  # the reply of send_message is in the call
        out.update(role="assistant", content=[{"type": "text", "text": text}], tool_calls=calls or None)
    elif m.role == "tool":
        out.update(
            role="tool",
            content=[{"type": "text", "text": m.content}],
            tool_call_id=payload.get("tool_call_id"),
            name=payload.get("name"),
        )
    else:
        out.update(role="user", content=[{"type": "text", "text": m.content}])
    return out
