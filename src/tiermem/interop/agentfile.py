"""Letta Agent File (.af) import: both layouts (and a file that is a JSON string of JSON).

Import validates the whole file first (nothing is written when any part is unusable), then
writes each agent: blocks (a block listed by several agents becomes one shared block),
messages in order with the in-context window (``in_context_message_ids``, or the older
``in_context_message_indices`` / ``in_context`` flags), archival passages (tiermem's extension),
and the agent row last. Ids are derived from the file's content, so importing the same file again
finds the agents already there and writes nothing; an interrupted import is finished by
running it again.

What tiermem cannot run (custom tools, tool rules, MCP servers, files and sources, groups, env var
names, Letta-only messages) is kept whole in the agent's metadata (``letta_passthrough``), reported, and
written back by export (``af_export``). Environment variable and secret values are never stored.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..domain.blocks import LETTA_LABEL_KEY, PINNED_KEY, label_from_letta
from ..base.config import BlockSpec
from ..base.errors import NotFoundError, TiermemError, ValidationError
from ..base.records import ContextWindow
from ..domain.memory import check_agent_name
from ..base.records import stable_id
from . import letta_passthrough
from ..server.registry import KNOWN_TOOLS
from .letta_messages import EXTENSION  # top-level key Letta ignores: passages, tiermem's settings
from .letta_messages import letta_original as _letta_original
from .letta_messages import message_row as _message
from .progress import Progress

if TYPE_CHECKING:
    from ..domain.memory import Memory

JSON = dict[str, Any]
STYLE = {"letta_v1_agent": "letta_v1", "memgpt_agent": "memgpt", "memgpt_v2_agent": "memgpt", "react_agent": "letta_v1"}
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
    kept: JSON = field(default_factory=dict)  # letta_passthrough's document: what tiermem keeps but does not run


@dataclass
class ImportReport:
    imported: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    messages: int = 0
    passages: int = 0
    blocks: int = 0
    kept: JSON = field(default_factory=dict)  # agent -> what was kept but is not run (letta_passthrough.summary)

    def as_dict(self) -> JSON:
        return {"imported": self.imported, "skipped": self.skipped, "notes": self.notes, "messages": self.messages,
                "passages": self.passages, "blocks": self.blocks, "kept_not_run": self.kept}


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
    for key in ("files", "sources"):  # read field by field below; MCP servers and skills are kept as they are
        _list(data, key)
    referenced = letta_passthrough.referenced_ids(data)
    plans = []
    for n, agent in enumerate(data["agents"]):
        if not isinstance(agent, dict):
            raise ValidationError(f"agents[{n}] is not an object.")
        plan = _plan_agent(n, agent, data, blocks, tools, frequency, sleepers, names, extension)
        _keep(plan, agent, data, first=n == 0, referenced=referenced, blocks=blocks)
        plans.append(plan)
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
    own_meta = (extension.get("agents") or {}).get(file_id) if isinstance(extension.get("agents"), dict) else None
    if isinstance(own_meta, dict):  # tiermem's own settings, written by a tiermem export
        for k, v in own_meta.items():
            if isinstance(k, str) and isinstance(v, str) and k not in (letta_passthrough.KEY, "letta_unsupported"):
                metadata.setdefault(k, v)
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
        metadata["letta_unsupported"] = json.dumps(unsupported, sort_keys=True)  # names only; the whole is kept
    if letta_type not in STYLE:
        notes.append(f"{name}: Letta agent type {letta_type!r} runs as letta_v1")
    messages: list[JSON] = []
    unlogged: list[JSON] = []  # Letta's compiled system message, approvals: kept for export, not logged
    for i, m in enumerate(agent.get("messages") or []):
        row = _message(m, i, name)
        if row is not None:
            messages.append(row)
        else:
            unlogged.append({"after": messages[-1]["file_id"] if messages else None, "message": _letta_original(m),
                             "file_id": str(m.get("id") or f"message-{i}")})
    passages = []
    for p in (extension.get("passages") or {}).get(file_id, []):
        if not isinstance(p, dict) or not isinstance(p.get("content"), str):
            raise ValidationError(f"Agent {name!r}: a passage in the `{EXTENSION}` extension has no content.")
        passages.append((p["content"], [str(t) for t in p.get("tags") or []], _time(p.get("created_at"))))
    in_context = [str(x) for x in agent.get("in_context_message_ids") or []]
    if not in_context and agent.get("in_context_message_indices"):  # Letta 0.6.x: positions in `messages`
        in_context = _indices_to_ids(agent.get("messages") or [], agent["in_context_message_indices"], name)
    clean = tiermem_name(name) or f"agent-{n}"
    if clean != name:
        notes.append(f"agent {name!r} is named {clean!r} (tiermem names use letters, digits, '_', '-', '.')")
        metadata["letta_name"] = name
    listed = set(in_context)
    for u in unlogged:
        u["in_context"] = u.pop("file_id") in listed
    return AgentPlan(file_id, clean, system, metadata, specs, messages, in_context, passages, notes,
                     kept={"unlogged_messages": unlogged})


def _keep(plan: AgentPlan, agent: JSON, data: JSON, *, first: bool, referenced: dict[str, set[str]],
          blocks: dict[Any, JSON]) -> None:
    """Fill ``plan.kept`` with everything of the agent tiermem does not hold natively, and report it."""
    doc = letta_passthrough.agent_document(agent, data, first=first, referenced=referenced)
    doc["unlogged_messages"] = plan.kept.get("unlogged_messages", [])
    inline = [b for b in agent.get("memory_blocks") or [] if isinstance(b, dict)]
    raw = {**{str(r): blocks[r] for r in agent.get("block_ids") or [] if r in blocks},
           **{f"{plan.file_id}/inline-{i}": b for i, b in enumerate(inline)}}
    doc["blocks"] = {ref: letta_passthrough.block_extras(raw[ref], {"label": spec.label, "value": spec.value, "limit": spec.limit,
                                                           "description": spec.description, "read_only": spec.read_only})
                     for ref, spec in plan.blocks if ref in raw}
    plan.kept = doc
    if doc["env_names"]:
        plan.notes.append(f"{plan.name}: environment variable and secret values are not stored; names kept: "
                          f"{', '.join(doc['env_names'])} (set the values again where the agent runs)")
    plan.notes.extend(letta_passthrough.summary_lines(plan.name, doc))


def _indices_to_ids(messages: list[Any], indices: Any, agent: str) -> list[str]:
    if not isinstance(indices, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in indices):
        raise ValidationError(f"Agent {agent!r}: `in_context_message_indices` must be a list of message positions.")
    out = []
    for i in indices:
        if not 0 <= i < len(messages):
            raise ValidationError(f"Agent {agent!r}: in_context_message_indices lists position {i}, but the agent has "
                                  f"{len(messages)} messages.")
        m = messages[i]
        out.append(str(m.get("id") or f"message-{i}") if isinstance(m, dict) else f"message-{i}")
    return out


def tiermem_name(name: str) -> str:
    """A Letta agent name in tiermem's alphabet (letters, digits, '_', '-', '.'; at most 64)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name.strip()).strip("-")[:64]


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
    if d.get("in_context_message_indices"):  # Letta 0.6.x: positions in `messages`
        in_context = _indices_to_ids(messages, d["in_context_message_indices"], str(d.get("name")))
    else:
        in_context = [m["id"] for m in messages if m.get("in_context")]
    messages = [{k: v for k, v in m.items() if k != "in_context"} for m in messages]  # the ids list replaces the flags
    tools = [{**t, "id": f"tool-{i}"} for i, t in enumerate(d.get("tools") or []) if isinstance(t, dict)]
    # every other field of the old layout stays on the agent (kept for export)
    agent = {k: v for k, v in d.items() if k not in ("core_memory", "messages", "tools", "in_context_message_indices")}
    agent.update({"id": "agent-0", "block_ids": [b["id"] for b in blocks], "tool_ids": [t["id"] for t in tools],
                  "messages": messages, "in_context_message_ids": in_context})
    return {"agents": [agent], "blocks": blocks, "tools": tools, "groups": [], "files": [], "sources": [],
            "mcp_servers": []}


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------


def _renamed(note: str, old: str, new: str) -> str:
    if note.startswith(f"{old}: "):
        note = f"{new}: " + note[len(old) + 2:]
    return note.replace(f"`tiermem agents show {old}`", f"`tiermem agents show {new}`")


def apply_plans(
    memory: Memory, plans: list[AgentPlan], digest: str, *, rename: str | None = None, replace: bool = False
) -> ImportReport:
    """Write validated plans. Names that clash with other agents are refused unless renamed or replaced."""
    report = ImportReport()
    if rename is not None:  # the notes name the agent as it will be stored
        old, plans[0].name = plans[0].name, rename
        plans[0].notes = [_renamed(note, old, rename) for note in plans[0].notes]
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
    for ref, spec in p.blocks:
        # keyed by the import's first agent name too: the same file imported under --rename gets its own blocks
        block_id = stable_id("block", digest, namespace, ref)  # one id per file block: shared stays shared
        memory.import_block(agent_id, block_id, spec)
        report.blocks += 1
        progress.advance()
    # An interrupted earlier run may have left messages or passages of this (not yet visible) agent.
    archive.rows.delete_agent_data(agent_id)
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
    metadata = dict(p.metadata)
    if p.kept:
        metadata[letta_passthrough.KEY] = json.dumps({**p.kept, "scope": {"digest": digest, "namespace": namespace}},
                                              ensure_ascii=False)
    memory.create_agent(p.name, system=p.system, blocks=[], metadata=metadata, agent_id=agent_id)
    report.imported.append(p.name)
    if letta_passthrough.summary(p.kept):
        report.kept[p.name] = letta_passthrough.summary(p.kept)
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
