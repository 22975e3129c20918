"""Letta Agent File (.af): import both formats, export a file Letta's schema accepts.

Import validates the whole file first (nothing is written when any part is unusable), then
writes each agent: blocks (a block listed by several agents becomes one shared block),
messages in order with the in-context window, archival passages (tiermem's extension), and
the agent row last. Ids are derived from the file's content, so importing the same file again
finds the agents already there and writes nothing; an interrupted import is finished by
running it again.

What tiermem cannot run (custom tools, MCP servers, files and sources, tool rules) is reported
and kept in the agent's metadata under ``letta_unsupported``.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..blocks import LETTA_LABEL_KEY, PINNED_KEY, label_from_letta
from ..config import BlockSpec
from ..errors import NotFoundError, TiermemError, ValidationError
from ..records import ContextWindow, Message
from ..memory import check_agent_name
from ..store import passage_from_row, sql_str, stable_id
from .progress import Progress

if TYPE_CHECKING:
    from ..memory import Memory

JSON = dict[str, Any]
EXTENSION = "tiermem"  # top-level key Letta ignores: archival passages and exact message payloads
# Tools tiermem provides itself (the MCP tools, plus the loop's send_message and the sleep-time finish).
KNOWN_TOOLS = frozenset({
    "send_message", "memory_replace", "memory_insert", "memory_rethink", "memory_finish_edits", "memory_apply_patch",
    "memory", "core_memory_append", "core_memory_replace", "core_memory_view", "conversation_search",
    "archival_memory_insert", "archival_memory_search", "archival_memory_delete", "archival_memory_list",
    "memory_history", "memory_revert",
})
STYLE = {"letta_v1_agent": "letta_v1", "memgpt_agent": "memgpt", "memgpt_v2_agent": "memgpt", "react_agent": "letta_v1"}
SUMMARY_MARK = "prior messages"
# Files hold whole transcripts: a message may be far longer than one tool argument (max_content_chars).
IMPORT_MAX_CHARS = 10_000_000


@dataclass
class AgentPlan:
    file_id: str
    name: str
    system: str
    metadata: dict[str, str]
    blocks: list[tuple[str, BlockSpec]]
    messages: list[JSON]  # rows for Archive.log_messages, with "file_id"
    in_context: list[str]
    passages: list[tuple[str, list[str], datetime | None]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class ImportReport:
    imported: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    messages: int = 0
    passages: int = 0
    blocks: int = 0

    def as_dict(self) -> JSON:
        return {"imported": self.imported, "skipped": self.skipped, "notes": self.notes, "messages": self.messages,
                "passages": self.passages, "blocks": self.blocks}


# ---------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------


def load_json(path: Path) -> tuple[Any, str]:
    """The parsed file and a digest of its bytes. Some published files are a JSON string of JSON: unwrap it."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ValidationError(f"Cannot read {path}: {exc}.") from exc
    try:
        data = json.loads(raw)
        if isinstance(data, str):
            data = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValidationError(f"{path} is not a JSON agent file: {exc}. Export it again from Letta (.af).") from exc
    return data, hashlib.sha256(raw).hexdigest()


def plan_agent_file(data: Any) -> list[AgentPlan]:
    """Validate and convert a whole agent file; raises ``ValidationError`` naming the first problem."""
    if not isinstance(data, dict):
        raise ValidationError("An agent file is a JSON object; this one is not.")
    if "agents" not in data and ("core_memory" in data or "messages" in data):
        data = _from_single_agent(data)
    if not isinstance(data.get("agents"), list) or not data["agents"]:
        raise ValidationError("The agent file has no `agents` list (and is not the older single-agent format).")
    blocks = {b.get("id"): b for b in _list(data, "blocks")}
    tools = {t.get("id"): t for t in _list(data, "tools")}
    frequency: dict[str, int] = {}
    sleepers: dict[str, str] = {}
    for g in _list(data, "groups"):
        config = g.get("manager_config") or {}
        if config.get("manager_type") == "sleeptime" and config.get("manager_agent_id"):
            frequency[config["manager_agent_id"]] = int(config.get("sleeptime_agent_frequency") or 5)
            for a in g.get("agent_ids") or []:
                sleepers[a] = config["manager_agent_id"]
    extension = data.get(EXTENSION) if isinstance(data.get(EXTENSION), dict) else {}
    names = {a.get("id"): a.get("name") for a in data["agents"] if isinstance(a, dict)}
    plans = []
    for n, agent in enumerate(data["agents"]):
        if not isinstance(agent, dict):
            raise ValidationError(f"agents[{n}] is not an object.")
        plans.append(_plan_agent(n, agent, data, blocks, tools, frequency, sleepers, names, extension))
    seen: set[str] = set()
    for p in plans:
        if p.name in seen:
            raise ValidationError(f"The file has two agents named {p.name!r}; tiermem agent names are unique.")
        seen.add(p.name)
    return plans


def _list(data: JSON, key: str) -> list[JSON]:
    value = data.get(key) or []
    if not isinstance(value, list) or not all(isinstance(x, dict) for x in value):
        raise ValidationError(f"`{key}` in the agent file must be a list of objects.")
    return value


def _plan_agent(
    n: int, agent: JSON, data: JSON, blocks: dict[Any, JSON], tools: dict[Any, JSON], frequency: dict[str, int],
    sleepers: dict[str, str], names: dict[Any, Any], extension: JSON,
) -> AgentPlan:
    file_id = str(agent.get("id") or f"agent-{n}")
    name = agent.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValidationError(f"agents[{n}] has no name.")
    system = agent.get("system") or ""
    if not isinstance(system, str):
        raise ValidationError(f"Agent {name!r}: `system` must be text.")
    letta_type = str(agent.get("agent_type") or "letta_v1_agent")
    metadata: dict[str, str] = {
        "agent_type": STYLE.get(letta_type, "letta_v1"),
        "message_buffer_autoclear": "true" if agent.get("message_buffer_autoclear") else "false",
        "letta_agent_type": letta_type,
    }
    if file_id in frequency:
        metadata["sleeptime_frequency"] = str(frequency[file_id])
    if file_id in sleepers:
        metadata["letta_sleeptime_of"] = str(names.get(sleepers[file_id]) or sleepers[file_id])
    if agent.get("description"):
        metadata["description"] = str(agent["description"])
    if agent.get("tags"):
        metadata["tags"] = json.dumps(agent["tags"])
    model = (agent.get("llm_config") or {}).get("model") if isinstance(agent.get("llm_config"), dict) else None
    if model:
        metadata["letta_model"] = str(model)
    # Letta will not create an agent without model settings; keep them so an export can hand them back.
    for key in ("llm_config", "embedding_config"):
        if isinstance(agent.get(key), dict):
            metadata[f"letta_{key}"] = json.dumps(agent[key], sort_keys=True)
    # blocks: shared ones are listed by several agents; inline memory_blocks belong to this agent only
    specs: list[tuple[str, BlockSpec]] = []
    for ref in agent.get("block_ids") or []:
        if ref not in blocks:
            raise ValidationError(f"Agent {name!r} lists block {ref!r}, which the file does not contain.")
        specs.append((str(ref), _block_spec(blocks[ref], name)))
    for i, b in enumerate(agent.get("memory_blocks") or []):
        specs.append((f"{file_id}/inline-{i}", _block_spec(b, name)))
    labels = [s.label for _, s in specs]
    if len(set(labels)) != len(labels):
        raise ValidationError(f"Agent {name!r} has two blocks with the same label; labels must be unique per agent.")
    # what we cannot run
    unsupported: JSON = {}
    custom = []
    for ref in agent.get("tool_ids") or []:
        tool = tools.get(ref) or {}
        if tool.get("name") not in KNOWN_TOOLS:
            custom.append(str(tool.get("name") or ref))
    custom += [str(t.get("name")) for t in agent.get("tools") or [] if isinstance(t, dict) and t.get("name") not in KNOWN_TOOLS]
    if custom:
        unsupported["tools"] = sorted(set(custom))
    for key in ("mcp_servers", "files", "sources", "skills"):
        items = data.get(key) or []
        if items:
            unsupported[key] = [str(x.get("name") or x.get("server_name") or x.get("file_name") or x.get("id")) for x in items
                                if isinstance(x, dict)]
    if agent.get("tool_rules"):
        unsupported["tool_rules"] = len(agent["tool_rules"])
    notes = []
    if unsupported:
        metadata["letta_unsupported"] = json.dumps(unsupported, sort_keys=True)
        parts = [f"{k}: {', '.join(v) if isinstance(v, list) else v}" for k, v in sorted(unsupported.items())]
        notes.append(f"{name}: not runnable in tiermem, kept in metadata letta_unsupported ({'; '.join(parts)})")
    if letta_type not in STYLE:
        notes.append(f"{name}: Letta agent type {letta_type!r} runs as letta_v1")
    messages = []
    for i, m in enumerate(agent.get("messages") or []):
        row = _message(m, i, name)
        if row is not None:
            messages.append(row)
    passages = []
    for p in (extension.get("passages") or {}).get(file_id, []):
        if not isinstance(p, dict) or not isinstance(p.get("content"), str):
            raise ValidationError(f"Agent {name!r}: a passage in the `{EXTENSION}` extension has no content.")
        passages.append((p["content"], [str(t) for t in p.get("tags") or []], _time(p.get("created_at"))))
    in_context = [str(x) for x in agent.get("in_context_message_ids") or []]
    clean = re.sub(r"[^A-Za-z0-9_.-]+", "-", name.strip()).strip("-")[:64] or f"agent-{n}"
    if clean != name:
        notes.append(f"agent {name!r} is named {clean!r} (tiermem names use letters, digits, '_', '-', '.')")
        metadata["letta_name"] = name
    return AgentPlan(file_id, clean, system, metadata, specs, messages, in_context, passages, notes)


def _block_spec(b: Any, agent: str) -> BlockSpec:
    if not isinstance(b, dict) or not isinstance(b.get("label"), str):
        raise ValidationError(f"Agent {agent!r} has a block without a label.")
    value = b.get("value") or ""
    if not isinstance(value, str):
        raise ValidationError(f"Block {b['label']!r} of agent {agent!r}: value must be text.")
    try:
        label = label_from_letta(b["label"])  # '/x' and 'a//b' are normalised; the file's spelling is kept for export
    except TiermemError as exc:
        raise ValidationError(f"Block of agent {agent!r}: {exc}") from exc
    limit = int(b.get("limit") or 5000)
    # a Letta block may hold more than its limit (limits were advisory there): keep the text, raise the limit
    metadata = {LETTA_LABEL_KEY: b["label"]} if label != b["label"] else {}
    if isinstance(b.get("metadata"), dict) and b["metadata"].get(PINNED_KEY) == "false":
        metadata[PINNED_KEY] = "false"  # a detached block exported by tiermem stays detached
    return BlockSpec(label=label, value=value, description=b.get("description") or "",
                     limit=max(limit, len(value), 1), read_only=bool(b.get("read_only")), metadata=metadata)


def _text_of(content: Any) -> tuple[str, list[str]]:
    if isinstance(content, str):
        return content, []
    texts, reasoning = [], []
    for c in content or []:
        if not isinstance(c, dict):
            continue
        if c.get("type") == "text":
            texts.append(str(c.get("text") or ""))
        elif c.get("type") in ("reasoning", "omitted_reasoning", "redacted_reasoning") and c.get("reasoning"):
            reasoning.append(str(c["reasoning"]))
    return "".join(texts), reasoning


def _message(m: Any, i: int, agent: str) -> JSON | None:
    if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "tool"):
        role = m.get("role") if isinstance(m, dict) else None
        if role in ("approval",):
            return None
        raise ValidationError(f"Agent {agent!r}: message {i} has no usable role ({role!r}).")
    text, reasoning = _text_of(m.get("content"))
    row: JSON = {"file_id": str(m.get("id") or f"message-{i}"), "timestamp": m.get("created_at"), "content": text}
    own = m.get(EXTENSION)
    if isinstance(own, dict) and own.get("role") in ("system", "user", "assistant", "tool"):
        row.update(role=own["role"], payload=own.get("payload") or "", conversation_id=own.get("conversation_id") or "default",
                   content=own["content"] if isinstance(own.get("content"), str) else text)
        return row
    role = m["role"]
    if role == "system":
        return None  # the compiled system prompt: tiermem rebuilds it from the agent's system text and blocks
    if role == "user":
        kind, content = "user", text
        try:
            wrapped = json.loads(text)
        except (json.JSONDecodeError, TypeError):
            wrapped = None
        if isinstance(wrapped, dict) and wrapped.get("type") == "user_message" and isinstance(wrapped.get("message"), str):
            content = wrapped["message"]
        elif isinstance(wrapped, dict) and wrapped.get("type") == "heartbeat":
            kind = "heartbeat"
        elif isinstance(wrapped, dict) and wrapped.get("type") == "system_alert":
            message = str(wrapped.get("message") or "")
            if SUMMARY_MARK in message[:200]:
                row.update(role="system", content=message, payload=json.dumps({"kind": "summary"}))
                return row
            kind = "system_alert"
        row.update(role="user", content=content, payload=json.dumps({"kind": kind}))
    elif role == "assistant":
        calls = []
        for c in m.get("tool_calls") or []:
            fn = c.get("function") or {}
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except json.JSONDecodeError:
                args = {"_raw": fn.get("arguments")}
            calls.append({"id": str(c.get("id")), "name": str(fn.get("name")), "input": args if isinstance(args, dict) else {"_raw": args}})
        payload: JSON = {"kind": "assistant", "tool_calls": calls}
        if reasoning:
            payload["reasoning"] = "\n".join(reasoning)
        row.update(role="assistant", payload=json.dumps(payload))
    else:
        failed = any(isinstance(r, dict) and r.get("status") == "error" for r in m.get("tool_returns") or [])
        row.update(role="tool", payload=json.dumps({"kind": "tool_result", "tool_call_id": m.get("tool_call_id"),
                                                    "name": m.get("name"), "is_error": failed}))
    return row


def _time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        t = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _from_single_agent(d: JSON) -> JSON:
    """The older single-agent layout: ``core_memory`` blocks, messages flagged ``in_context``."""
    blocks = [{**b, "id": f"block-{i}"} for i, b in enumerate(d.get("core_memory") or [])]
    messages = []
    for i, m in enumerate(d.get("messages") or []):
        if isinstance(m, dict):
            messages.append({**m, "id": f"message-{i}"})
    in_context = [m["id"] for m in messages if m.get("in_context")]
    tools = [{**t, "id": f"tool-{i}"} for i, t in enumerate(d.get("tools") or []) if isinstance(t, dict)]
    agent = {
        "id": "agent-0", "name": d.get("name"), "system": d.get("system"), "agent_type": d.get("agent_type"),
        "message_buffer_autoclear": d.get("message_buffer_autoclear"), "description": d.get("description"),
        "tags": d.get("tags"), "llm_config": d.get("llm_config"), "embedding_config": d.get("embedding_config"), "block_ids": [b["id"] for b in blocks],
        "tool_ids": [t["id"] for t in tools], "tool_rules": d.get("tool_rules"), "messages": messages,
        "in_context_message_ids": in_context,
    }
    return {"agents": [agent], "blocks": blocks, "tools": tools, "groups": [], "files": [], "sources": [],
            "mcp_servers": []}


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------


def apply_plans(
    memory: Memory, plans: list[AgentPlan], digest: str, *, rename: str | None = None, replace: bool = False
) -> ImportReport:
    """Write validated plans. Names that clash with other agents are refused unless renamed or replaced."""
    if memory.archive is None:
        raise TiermemError("Importing needs recall and archival memory; open memory with open_memory().")
    report = ImportReport()
    if rename is not None:
        plans[0].name = rename
    for p in plans:  # every name is checked before anything is written
        check_agent_name(p.name)
    todo = []
    for p in plans:
        agent_id = stable_id("agent", digest, p.file_id, p.name)  # the same file under another name is another agent
        existing = memory.core.find_agent(p.name)
        try:
            memory.core.get_agent(agent_id)
            report.skipped.append(f"{p.name} (already imported from this file)")
            continue
        except NotFoundError:
            pass
        if existing is not None and not replace:
            raise ValidationError(
                f"An agent named {p.name!r} already exists. Import under another name with --rename NEW, or "
                "overwrite it with --replace (its messages and passages are deleted; its blocks' history stays)."
            )
        todo.append((p, agent_id, existing))
    total = sum(len(p.messages) + len(p.passages) + len(p.blocks) for p, _, _ in todo)
    progress = Progress("importing", total)
    namespace = plans[0].name  # the same file imported under --rename gets its own blocks
    try:
        for p, agent_id, existing in todo:
            if existing is not None:
                memory.delete_agent(existing.id)
            _write_agent(memory, p, agent_id, digest, namespace, progress, report)
    finally:
        progress.close()
    return report


def _write_agent(
    memory: Memory, p: AgentPlan, agent_id: str, digest: str, namespace: str, progress: Progress,
    report: ImportReport,
) -> None:
    archive = memory.archive
    assert archive is not None
    for ref, spec in p.blocks:
        # keyed by the import's first agent name too: the same file imported under --rename gets its own blocks
        block_id = stable_id("block", digest, namespace, ref)  # one id per file block: shared stays shared
        memory.import_block(agent_id, block_id, spec)
        report.blocks += 1
        progress.advance()
    # An interrupted earlier run may have left messages or passages of this (not yet visible) agent.
    memory.store.delete("messages", f"agent_id = {sql_str(agent_id)}")
    memory.store.delete("passages", f"agent_id = {sql_str(agent_id)}")
    rows = []
    base = 1_000_000_000  # seq: the file's order, before anything the agent writes later (time-based)
    ids: dict[str, JSON] = {}
    for i, m in enumerate(p.messages):
        row = {k: v for k, v in m.items() if k != "file_id"}
        row["id"] = stable_id("message", digest, agent_id, m["file_id"])
        row["seq"] = base + i
        if not row.get("timestamp"):
            row.pop("timestamp", None)
        rows.append(row)
        ids[m["file_id"]] = row
    for start in range(0, len(rows), 256):
        archive.log_messages(agent_id, rows[start : start + 256], max_chars=IMPORT_MAX_CHARS)
        report.messages += len(rows[start : start + 256])
        progress.advance(len(rows[start : start + 256]))
    window = _window(agent_id, p, ids, base + len(rows))
    if window is not None:
        memory.set_context_window(window)
    if p.passages:
        archive.insert_many(agent_id, [(c, t) for c, t, _ in p.passages], created=[w for _, _, w in p.passages],
                            max_chars=IMPORT_MAX_CHARS)
        report.passages += len(p.passages)
        progress.advance(len(p.passages))
    memory.create_agent(p.name, system=p.system, blocks=[], metadata=p.metadata, agent_id=agent_id)
    report.imported.append(p.name)
    report.notes.extend(p.notes)


def _window(agent_id: str, p: AgentPlan, ids: dict[str, JSON], end: int) -> ContextWindow | None:
    listed = [ids[i] for i in p.in_context if i in ids]
    if not ids:
        return None
    summary_id = ""
    if listed and json.loads(listed[0].get("payload") or "{}").get("kind") == "summary":
        summary_id = listed[0]["id"]
        listed = listed[1:]
    start = listed[0]["seq"] if listed else end
    return ContextWindow(agent_id=agent_id, conversation_id="default", start_seq=start, summary_id=summary_id)


# ---------------------------------------------------------------------------
# Export
# ---------------------------------------------------------------------------


def export_agent_file(memory: Memory, name: str) -> JSON:
    """One agent as a Letta agent file; passages and exact message payloads ride the ``tiermem`` extension."""
    agent = memory.get_agent(name)
    blocks = memory.blocks(agent.id)
    messages = memory.store.agent_messages(agent.id)
    window = memory.context_window(agent.id, "default")
    in_window = {m.id for m in memory.in_context_messages(window)}
    block_ids = {b.id: f"block-{i}" for i, b in enumerate(blocks)}
    out_messages: list[JSON] = [{
        "type": "message", "role": "system", "id": "message-0", "agent_id": "agent-0",
        "content": [{"type": "text", "text": agent.system}], "created_at": agent.created_at.isoformat(),
    }]
    in_context = ["message-0"]
    for n, m in enumerate(messages, start=1):
        out = _letta_message(m, f"message-{n}")
        out_messages.append(out)
        if m.id in in_window:
            in_context.append(out["id"])
    passages = [passage_from_row(r) for r in memory.store.select("passages", f"agent_id = {sql_str(agent.id)}", limit=10**9)]
    style = agent.metadata.get("agent_type", "letta_v1")
    return {
        "agents": [{
            "id": "agent-0",
            "name": agent.name,
            "system": agent.system,
            "agent_type": "memgpt_agent" if style == "memgpt" else "letta_v1_agent",
            "description": agent.metadata.get("description"),
            "message_buffer_autoclear": agent.metadata.get("message_buffer_autoclear") == "true",
            "enable_sleeptime": int(agent.metadata.get("sleeptime_frequency", "0") or 0) > 0,
            "memory_blocks": [],
            "tools": [],
            "tool_ids": [],
            "source_ids": [],
            "block_ids": list(block_ids.values()),
            "tool_rules": [],
            "tags": json.loads(agent.metadata["tags"]) if "tags" in agent.metadata else [],
            "include_base_tools": True,
            "llm_config": _letta_config(agent.metadata, "llm_config", DEFAULT_LLM_CONFIG),
            "embedding_config": _letta_config(agent.metadata, "embedding_config", DEFAULT_EMBEDDING_CONFIG),
            "metadata": {"tiermem": agent.metadata},
            "in_context_message_ids": in_context,
            "messages": out_messages,
            "files_agents": [],
            "group_ids": [],
        }],
        "groups": [],
        "blocks": [
            {"id": block_ids[b.id], "label": _letta_label(b), "value": b.value, "limit": b.limit, "description": b.description,
             "read_only": b.read_only, "metadata": dict(b.metadata)}
            for b in blocks
        ],
        "files": [],
        "sources": [],
        "tools": [],
        "mcp_servers": [],
        "skills": [],
        "metadata": {"exported_by": "tiermem"},
        "created_at": datetime.now(UTC).isoformat(),
        EXTENSION: {
            "format": 1,
            "passages": {"agent-0": [
                {"content": p.content, "tags": list(p.tags), "created_at": p.created_at.isoformat()} for p in passages
            ]},
        },
    }


# Model settings for agents that never lived in Letta (Letta requires both; tiermem runs neither).
DEFAULT_LLM_CONFIG: JSON = {
    "model": "claude-sonnet-4-5", "model_endpoint_type": "anthropic", "model_endpoint": "https://api.anthropic.com/v1",
    "provider_name": "anthropic", "context_window": 200000, "handle": "anthropic/claude-sonnet-4-5", "max_tokens": 8192,
}
DEFAULT_EMBEDDING_CONFIG: JSON = {
    "embedding_endpoint_type": "openai", "embedding_endpoint": "https://api.openai.com/v1",
    "embedding_model": "text-embedding-3-small", "embedding_dim": 1536, "embedding_chunk_size": 300,
    "handle": "openai/text-embedding-3-small",
}


def _letta_config(metadata: dict[str, str], key: str, default: JSON) -> JSON:
    """The settings kept from a Letta import, else ``default``."""
    try:
        kept = json.loads(metadata.get(f"letta_{key}", "null"))
    except ValueError:
        kept = None
    return kept if isinstance(kept, dict) else dict(default)


def _letta_label(block: Any) -> str:
    """The label as the imported file spelled it ('/note_directory'), unless the block was renamed since."""
    kept = block.metadata.get(LETTA_LABEL_KEY)
    try:
        return kept if kept and label_from_letta(kept) == block.label else block.label
    except TiermemError:
        return block.label


def _letta_message(m: Message, file_id: str) -> JSON:
    payload = json.loads(m.payload) if m.payload else {}
    out: JSON = {"type": "message", "id": file_id, "agent_id": "agent-0", "created_at": m.created_at.isoformat(),
                 EXTENSION: {"role": m.role, "payload": m.payload, "conversation_id": m.conversation_id}}
    if m.role == "system":
        out[EXTENSION]["content"] = m.content  # Letta gets it wrapped as a system alert
    if m.role == "system":  # our summaries: Letta shows them to the model as a user system alert
        out.update(role="user", content=[{"type": "text", "text": json.dumps({"type": "system_alert", "message": m.content})}])
    elif m.role == "assistant":
        calls = [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": json.dumps(c.get("input") or {})}}
                 for c in payload.get("tool_calls") or []]
        out.update(role="assistant", content=[{"type": "text", "text": m.content}], tool_calls=calls or None)
    elif m.role == "tool":
        out.update(role="tool", content=[{"type": "text", "text": m.content}], tool_call_id=payload.get("tool_call_id"),
                   name=payload.get("name"))
    else:
        out.update(role="user", content=[{"type": "text", "text": m.content}])
    return out
