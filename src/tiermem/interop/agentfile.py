"""Letta Agent File (.af) import: both layouts (and a file that is a JSON string of JSON).

Import validates the whole file first (nothing is written when any part is unusable), then
writes each agent: blocks (a block listed by several agents becomes one shared block),
messages in order with the in-context window (``in_context_message_ids``, or the older
``in_context_message_indices`` / ``in_context`` flags), archival passages and the links made on purpose
between its memories (tiermem's extension), and the agent row last. Ids are derived from the file's content, so
importing the same file again finds the agents already there and writes nothing (with ``--replace`` it deletes them
and imports them again, discarding what changed since); an interrupted import is finished by running it again.

Sources and files an agent uses become tiermem folders and files (``memory.files``): a source is a folder (an
identical folder of that name is reused, else a free name ``NAME_(n)`` is taken and said so), its files keep their
text, names, type, size and status, each agent gets its ``source_ids`` attached with its two limits, and its
``files_agents`` become its views exactly (open or closed, the visible text verbatim, lines, last access). A
Letta field tiermem does not hold is kept with the folder (``letta_source``, ``letta_files`` in its metadata) or
the agent (``file_views`` in ``letta_passthrough``'s document), so an export writes it back.

What tiermem cannot run (custom tools, tool rules, MCP servers, groups, env var names, Letta-only messages,
sources no agent uses) is kept whole in the agent's metadata (``letta_passthrough``), reported, and written back
by export (``af_export``). Environment variable and secret values are never stored.

Why this module is long: an import is planned whole before anything is written, so the plans of agents, blocks,
messages, folders, files and views share one validation pass and one set of plan types with their writing; the
folder half (``_plan_folders`` onward) is the seam to split at next.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.config import BlockSpec
from ..base.errors import NotFoundError, TiermemError, ValidationError
from ..base.records import MAX_ROW_CHARS, ContextWindow, Folder, StoredFile, from_us, now, stable_id, to_us
from ..domain import secrets
from ..domain.archive import parse_bound
from ..domain.blocks import LETTA_LABEL_KEY, PINNED_KEY, label_from_letta
from ..domain.file_views import check_file_name, check_folder_name, file_type, folder_names
from ..domain.filesystem import STATE_KEY, FileView, check_limits, restored_view
from ..domain.memory import TIMEZONE_KEY, check_agent_name
from ..domain.periods import time_zone
from ..server.registry import KNOWN_TOOLS
from . import af_forgotten, letta_passthrough
from .letta_messages import (
    EXTENSION,  # top-level key Letta ignores: passages, tiermem's settings, links
    called_tools,
    file_project,
)
from .letta_messages import letta_original as _letta_original
from .letta_messages import message_row as _message
from .links_io import read_links, restore_links
from .progress import Progress
from .redactions import Redactions

if TYPE_CHECKING:
    from ..domain.memory import Memory

JSON = dict[str, Any]
STYLE = {"letta_v1_agent": "letta_v1", "memgpt_agent": "memgpt", "memgpt_v2_agent": "memgpt", "react_agent": "letta_v1"}
# Files hold whole transcripts: a message may be far longer than one tool argument (max_content_chars).
IMPORT_MAX_CHARS = MAX_ROW_CHARS


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
    passage_ids: list[str] = field(default_factory=list)  # each passage's id in the file ("" when it has none)
    # the tiermem rows a tiermem export made them from (``af_forgotten``): message id in the file -> [tiermem id],
    # and each passage's tiermem id ("" when the file names none)
    origins: dict[str, list[str]] = field(default_factory=dict)
    passage_origins: list[str] = field(default_factory=list)
    passage_projects: list[str | None] = field(default_factory=list)  # each passage's project (None: shared)
    links: list[tuple[str, str, str]] = field(default_factory=list)  # made on purpose: (file id, file id, note)
    kept: JSON = field(default_factory=dict)  # letta_passthrough's document: what tiermem keeps but does not run
    folders: list[FolderPlan] = field(default_factory=list)  # the sources it uses, in its order (shared plans)
    views: list[ViewPlan] = field(default_factory=list)  # its files_agents
    max_files_open: int | None = None
    char_limit: int | None = None


@dataclass
class FilePlan:
    """A Letta file, as tiermem stores it."""

    key: str  # its id in the agent file
    name: str  # its name in the folder
    original_name: str
    file_type: str
    size: int
    status: str  # "completed" or "error"
    error: str
    source_path: str
    text: str
    sha256: str
    letta: JSON  # the file's object as the agent file has it (what tiermem does not hold is kept from it)
    created_at: datetime | None = None  # its ``file_creation_date`` (None: absent or not an ISO time)
    updated_at: datetime | None = None  # its ``file_last_modified_date``


@dataclass
class FolderPlan:
    """A Letta source some agent of the file uses, with its files."""

    key: str  # its id in the agent file
    name: str
    description: str
    instructions: str
    letta: JSON
    files: list[FilePlan] = field(default_factory=list)


@dataclass
class ViewPlan:
    """One ``files_agents`` row: what an agent sees of a file."""

    file_key: str
    folder_key: str
    is_open: bool
    visible: str
    start_line: int | None
    end_line: int | None
    accessed_us: int
    kept: JSON  # the row's fields tiermem does not hold (and those it holds differently), for export


@dataclass
class ImportReport:
    imported: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    messages: int = 0
    passages: int = 0
    links: int = 0
    blocks: int = 0
    folders: int = 0
    files: int = 0
    kept: JSON = field(default_factory=dict)  # agent -> what was kept but is not run (letta_passthrough.summary)

    def as_dict(self) -> JSON:
        return {
            "imported": self.imported,
            "skipped": self.skipped,
            "notes": self.notes,
            "messages": self.messages,
            "passages": self.passages,
            "links": self.links,
            "blocks": self.blocks,
            "folders": self.folders,
            "files": self.files,
            "kept_not_run": self.kept,
        }


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
    except RecursionError:
        raise ValidationError(
            f"{path} nests JSON arrays or objects too deeply to read; no agent file does. Export it again from Letta."
        ) from None
    return data, hashlib.sha256(raw).hexdigest()


def plan_agent_file(data: Any) -> list[AgentPlan]:
    """Validate and convert a whole agent file; raises ``ValidationError`` naming the first problem."""
    if not isinstance(data, dict):
        raise ValidationError("An agent file is a JSON object; this one is not.")
    if "agents" not in data and ("core_memory" in data or "messages" in data):
        data = _from_single_agent(data)
    if not isinstance(data.get("agents"), list) or not data["agents"]:
        raise ValidationError("The agent file has no `agents` list (and is not the older single-agent format).")
    blocks: dict[Any, JSON] = {}
    for b in _list(data, "blocks"):
        if b.get("id") is not None and b.get("id") in blocks:
            raise ValidationError(
                f"The file has two blocks with the id {b.get('id')!r}; each block needs its own id. "
                "Remove or renumber one of them."
            )
        blocks[b.get("id")] = b
    tools = {t.get("id"): t for t in _list(data, "tools")}
    frequency: dict[str, int] = {}
    sleepers: dict[str, str] = {}
    for i, g in enumerate(_list(data, "groups")):
        config = g.get("manager_config") or {}
        if not isinstance(config, dict):
            raise ValidationError(f"groups[{i}]: `manager_config` must be an object, not {config!r}.")
        if config.get("manager_type") == "sleeptime" and config.get("manager_agent_id"):
            every = config.get("sleeptime_agent_frequency")
            if every is not None and (not _whole(every) or every < 1):
                raise ValidationError(
                    f"groups[{i}]: `manager_config.sleeptime_agent_frequency` must be a whole number of turns, "
                    f"1 or more (or null for the default 5), not {every!r}."
                )
            frequency[str(config["manager_agent_id"])] = int(every or 5)
            for a in g.get("agent_ids") or []:
                sleepers[a] = config["manager_agent_id"]
    extension = _extension(data)
    seen_ids: set[str] = set()
    for n, a in enumerate(data["agents"]):
        ident = a.get("id") if isinstance(a, dict) else None
        if ident is None:
            continue
        if str(ident) in seen_ids:
            raise ValidationError(
                f"The file has two agents with the id {ident!r} (agents[{n}] is the second); each agent needs its "
                "own id. Remove or renumber one of them."
            )
        seen_ids.add(str(ident))
    names = {a.get("id"): a.get("name") for a in data["agents"] if isinstance(a, dict)}
    for key in ("files", "sources"):  # read field by field below; MCP servers and skills are kept as they are
        _list(data, key)
    for n, agent in enumerate(data["agents"]):
        if not isinstance(agent, dict):
            raise ValidationError(f"agents[{n}] is not an object.")
    folders = _plan_folders(data)
    native = set(folders) | {f.key for p in folders.values() for f in p.files}  # held natively, not passed through
    referenced = letta_passthrough.referenced_ids(data)
    plans = []
    for n, agent in enumerate(data["agents"]):
        plan = _plan_agent(n, agent, data, blocks, tools, frequency, sleepers, names, extension, native)
        _plan_views(plan, agent, data, folders)
        _keep(plan, agent, data, first=n == 0, referenced=referenced, blocks=blocks, native=native)
        plans.append(plan)
    seen: dict[str, AgentPlan] = {}
    for p in plans:
        first = seen.setdefault(p.name, p)
        if first is not p:
            one, two = first.metadata.get("letta_name", first.name), p.metadata.get("letta_name", p.name)
            named = (
                f"two agents named {one!r}"
                if one == two
                else f"the agents {one!r} and {two!r}, both named {p.name!r} here,"
            )
            raise ValidationError(f"The file has {named}; tiermem agent names are unique. Rename one of them.")
    return plans


def _whole(value: Any) -> bool:
    """A JSON whole number: an int (not a bool) or a float without a fraction (Letta's pydantic reads 5.0 as 5)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _extension(data: JSON) -> JSON:
    """tiermem's own top-level object, its parts checked for shape: ``passages`` and ``agents`` map agent ids
    to a list of passages and to an object of settings."""
    extension = data.get(EXTENSION)
    if extension is None:
        return {}
    if not isinstance(extension, dict):
        raise ValidationError(f"`{EXTENSION}` in the agent file must be an object (tiermem's extension).")
    passages = extension.get("passages")
    if passages is not None and (
        not isinstance(passages, dict) or not all(isinstance(v, list) for v in passages.values())
    ):
        raise ValidationError(f"`{EXTENSION}.passages` in the agent file must map agent ids to lists of passages.")
    agents = extension.get("agents")
    if agents is not None and (not isinstance(agents, dict) or not all(isinstance(v, dict) for v in agents.values())):
        raise ValidationError(f"`{EXTENSION}.agents` in the agent file must map agent ids to objects of settings.")
    for ident, settings in (agents or {}).items():
        every = settings.get("sleeptime_frequency")
        if every is not None and not (isinstance(every, str) and every.isascii() and every.isdigit()):
            raise ValidationError(
                f"`{EXTENSION}.agents[{ident!r}].sleeptime_frequency` must be a whole number of turns written as "
                f'text ("0" is off), not {every!r}.'
            )
    return extension


def _list(data: JSON, key: str) -> list[JSON]:
    value = data.get(key) or []
    if not isinstance(value, list) or not all(isinstance(x, dict) for x in value):
        raise ValidationError(f"`{key}` in the agent file must be a list of objects.")
    return value


def _plan_agent(
    n: int,
    agent: JSON,
    data: JSON,
    blocks: dict[Any, JSON],
    tools: dict[Any, JSON],
    frequency: dict[str, int],
    sleepers: dict[str, str],
    names: dict[Any, Any],
    extension: JSON,
    native: set[str],
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
            if (
                isinstance(k, str)
                and isinstance(v, str)
                and k not in (letta_passthrough.KEY, "letta_unsupported", STATE_KEY)
            ):
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
        specs.append((str(ref), _block_spec(blocks[ref], name, f"block {str(ref)!r}")))
    for i, b in enumerate(agent.get("memory_blocks") or []):
        specs.append((f"{file_id}/inline-{i}", _block_spec(b, name, f"memory_blocks[{i}]")))
    _check_unique_labels(name, specs)
    # what we cannot run
    unsupported: JSON = {}
    custom = []
    for ref in agent.get("tool_ids") or []:
        tool = tools.get(ref) or {}
        if tool.get("name") not in KNOWN_TOOLS:
            custom.append(str(tool.get("name") or ref))
    custom += [
        str(t.get("name")) for t in agent.get("tools") or [] if isinstance(t, dict) and t.get("name") not in KNOWN_TOOLS
    ]
    if custom:
        unsupported["tools"] = sorted(set(custom))
    for key in ("mcp_servers", "files", "sources", "skills"):
        items = [x for x in data.get(key) or [] if not (isinstance(x, dict) and str(x.get("id")) in native)]
        if items:
            unsupported[key] = [
                str(x.get("name") or x.get("server_name") or x.get("file_name") or x.get("id"))
                for x in items
                if isinstance(x, dict)
            ]
    if agent.get("tool_rules"):
        unsupported["tool_rules"] = len(agent["tool_rules"])
    notes = []
    if unsupported:
        metadata["letta_unsupported"] = json.dumps(unsupported, sort_keys=True)  # names only; the whole is kept
    if letta_type not in STYLE:
        notes.append(f"{name}: Letta agent type {letta_type!r} runs as letta_v1")
    if agent.get("timezone") not in (None, ""):  # as Letta: dates the search tools get without a zone are in it
        zone = time_zone(agent["timezone"])
        if zone is not None:
            metadata[TIMEZONE_KEY] = zone.key
        else:
            notes.append(
                f"{name}: timezone {agent['timezone']!r} is not an IANA time zone (such as 'Europe/Paris'): the search "
                "tools read and show dates in UTC (the file's value is kept for export)"
            )
    messages: list[JSON] = []
    origins: dict[str, list[str]] = {}
    unlogged: list[JSON] = []  # Letta's compiled system message, approvals: kept for export, not logged
    message_ids: set[str] = set()
    called = called_tools(agent.get("messages") or [])
    for i, m in enumerate(agent.get("messages") or []):
        row = _message(m, i, name, called)
        ident = str(m.get("id") or f"message-{i}")
        if ident in message_ids:
            raise ValidationError(
                f"Agent {name!r}: messages[{i}] has the id {ident!r}, which an earlier message has; each message "
                "needs its own id. Remove or renumber one of them."
            )
        message_ids.add(ident)
        if row is not None:
            _check_time(row.get("timestamp"), f"Agent {name!r}: messages[{i}] (id {ident!r}) has `created_at`")
            messages.append(row)
            own = m.get(EXTENSION)
            if isinstance(own, dict) and isinstance(own.get("id"), str) and own["id"]:
                origins[row["file_id"]] = [own["id"]]
        else:
            unlogged.append(
                {
                    "after": messages[-1]["file_id"] if messages else None,
                    "message": _letta_original(m),
                    "file_id": ident,
                }
            )
    passages = []
    passage_ids = []
    passage_origins: list[str] = []
    projects: list[str | None] = []
    for j, p in enumerate((extension.get("passages") or {}).get(file_id, [])):
        where = f"Agent {name!r}: `{EXTENSION}.passages` entry {j}"
        if not isinstance(p, dict) or not isinstance(p.get("content"), str):
            raise ValidationError(f"{where} has no content.")
        tags = p.get("tags") or []
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise ValidationError(f"{where}: `tags` must be a list of texts, not {tags!r}.")
        _check_time(p.get("created_at"), f"{where} has `created_at`")
        passages.append((p["content"], list(tags), _time(p.get("created_at"))))
        passage_ids.append(p["id"] if isinstance(p.get("id"), str) else "")
        passage_origins.append(p["tiermem_id"] if isinstance(p.get("tiermem_id"), str) else "")
        projects.append(file_project(p.get("project"), where))
    all_links = extension.get("links")
    if all_links is not None and not isinstance(all_links, dict):
        raise ValidationError(f"`{EXTENSION}.links` in the agent file must map agent ids to lists of links.")
    known = {m["file_id"] for m in messages} | {i for i in passage_ids if i}
    links = read_links((all_links or {}).get(file_id), f"Agent {name!r}", known)
    in_context = [str(x) for x in agent.get("in_context_message_ids") or []]
    if not in_context and agent.get("in_context_message_indices"):  # Letta 0.6.x: positions in `messages`
        in_context = _indices_to_ids(agent.get("messages") or [], agent["in_context_message_indices"], name)
    clean = tiermem_name(name) or f"agent-{n}"
    if clean != name:
        notes.append(_naming_note(name, clean))
        metadata["letta_name"] = name
    listed = set(in_context)
    for u in unlogged:
        ident = u.pop("file_id")
        u["in_context"] = ident in listed
        if in_context and ident == in_context[0]:  # the window starts with it (Letta's system message): export too
            u["leads"] = True
    return AgentPlan(
        file_id,
        clean,
        system,
        metadata,
        specs,
        messages,
        in_context,
        passages,
        notes,
        kept={UNLOGGED: unlogged},
        passage_ids=passage_ids,
        passage_projects=projects,
        links=links,
        origins=origins,
        passage_origins=passage_origins,
    )


def _keep(
    plan: AgentPlan,
    agent: JSON,
    data: JSON,
    *,
    first: bool,
    referenced: dict[str, set[str]],
    blocks: dict[Any, JSON],
    native: set[str],
) -> None:
    """Fill ``plan.kept`` with everything of the agent tiermem does not hold natively, and report it."""
    doc = letta_passthrough.agent_document(agent, data, first=first, referenced=referenced)
    # folders and files are held natively: their objects and the agent's references to them are not kept here
    doc["sources"] = [s for s in doc["sources"] if str(s.get("id")) not in native]
    doc["files"] = [f for f in doc["files"] if str(f.get("id")) not in native]
    fields = doc["agent"]
    for key in ("source_ids", "folder_ids", "files_agents"):
        if isinstance(fields.get(key), list):
            fields[key] = []  # written from the agent's folders and views by export (the key's presence is kept)
    for key in ("max_files_open", "per_file_view_window_char_limit"):
        if key in fields:
            fields[key] = None  # held in the agent's view (``memory.files``)
    doc["files_native"] = True
    doc[UNLOGGED] = plan.kept.get(UNLOGGED, [])
    inline = [b for b in agent.get("memory_blocks") or [] if isinstance(b, dict)]
    raw = {
        **{str(r): blocks[r] for r in agent.get("block_ids") or [] if r in blocks},
        **{f"{plan.file_id}/inline-{i}": b for i, b in enumerate(inline)},
    }
    doc["blocks"] = {
        ref: letta_passthrough.block_extras(
            raw[ref],
            {
                "label": spec.label,
                "value": spec.value,
                "limit": spec.limit,
                "description": spec.description,
                "read_only": spec.read_only,
            },
        )
        for ref, spec in plan.blocks
        if ref in raw
    }
    plan.kept = doc
    if doc["env_names"]:
        plan.notes.append(
            f"{plan.name}: environment variable and secret values are not stored; names kept: "
            f"{', '.join(doc['env_names'])} (set the values again where the agent runs)"
        )
    plan.notes.extend(letta_passthrough.summary_lines(plan.name, doc))


def _indices_to_ids(messages: list[Any], indices: Any, agent: str) -> list[str]:
    if not isinstance(indices, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in indices):
        raise ValidationError(f"Agent {agent!r}: `in_context_message_indices` must be a list of message positions.")
    out = []
    for i in indices:
        if not 0 <= i < len(messages):
            raise ValidationError(
                f"Agent {agent!r}: in_context_message_indices lists position {i}, but the agent has "
                f"{len(messages)} messages."
            )
        m = messages[i]
        out.append(str(m.get("id") or f"message-{i}") if isinstance(m, dict) else f"message-{i}")
    return out


def _check_unique_labels(agent: str, specs: list[tuple[str, BlockSpec]]) -> None:
    first: dict[str, str] = {}
    for ref, spec in specs:
        other = first.setdefault(spec.label, ref)
        if other != ref:
            a, b = (_block_ref(agent, x) for x in (other, ref))
            raise ValidationError(
                f"Agent {agent!r} has two blocks labelled {spec.label!r}: {a} and {b}; labels must be unique per "
                "agent. Give one of them another label, or take it off the agent."
            )


def _block_ref(agent: str, ref: str) -> str:
    """How a refusal names a block of the file: its id, or its place in the agent's inline ``memory_blocks``."""
    head, sep, tail = ref.rpartition("/inline-")
    return f"memory_blocks[{tail}]" if sep and tail.isdigit() else f"block {ref!r}"


def _naming_note(name: str, clean: str) -> str:
    return f"agent {name!r} is named {clean!r} (tiermem names use letters, digits, '_', '-', '.')"


def tiermem_name(name: str) -> str:
    """A Letta agent name in tiermem's alphabet (letters, digits, '_', '-', '.'; at most 64)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name.strip()).strip("-")[:64]


def _block_spec(b: Any, agent: str, ref: str) -> BlockSpec:
    if not isinstance(b, dict):
        raise ValidationError(f"Agent {agent!r}: {ref} is not an object.")
    if not isinstance(b.get("label"), str):
        got = f"it is {b['label']!r}" if "label" in b else "it is missing"
        raise ValidationError(f"Agent {agent!r}: {ref} has no label ({got}); a block's `label` is text, e.g. 'human'.")
    value = b.get("value") or ""
    if not isinstance(value, str):
        raise ValidationError(f"Block {b['label']!r} of agent {agent!r}: value must be text.")
    try:
        label = label_from_letta(b["label"])  # '/x' and 'a//b' are normalised; the file's spelling is kept for export
    except TiermemError as exc:
        raise ValidationError(f"Agent {agent!r}: {ref}: {exc}") from exc
    where = f"Block {b['label']!r} of agent {agent!r}"
    limit = b.get("limit")
    if limit is None:
        limit = 5000  # Letta's default (CORE_MEMORY_BLOCK_CHAR_LIMIT)
    elif not _whole(limit) or limit < 1:
        raise ValidationError(
            f"{where}: `limit` must be a whole number of characters, 1 or more (or null for 5000), not {limit!r}."
        )
    description = b.get("description")
    if description is not None and not isinstance(description, str):
        raise ValidationError(f"{where}: `description` must be text (or null), not {description!r}.")
    read_only = b.get("read_only")
    if read_only is not None and not isinstance(read_only, bool):
        raise ValidationError(f"{where}: `read_only` must be true or false (or null), not {read_only!r}.")
    # a Letta block may hold more than its limit (limits were advisory there): keep the text, raise the limit
    metadata = {LETTA_LABEL_KEY: b["label"]} if label != b["label"] else {}
    if isinstance(b.get("metadata"), dict) and b["metadata"].get(PINNED_KEY) == "false":
        metadata[PINNED_KEY] = "false"  # a detached block exported by tiermem stays detached
    return BlockSpec(
        label=label,
        value=value,
        description=description or "",
        limit=max(int(limit), len(value), 1),
        read_only=bool(read_only),
        metadata=metadata,
    )


def _check_time(value: Any, where: str) -> None:
    """Refuse a time that is not ISO 8601 text (or empty) before anything is written."""
    try:
        parse_bound(value, "created_at", end=False)
    except ValidationError:
        raise ValidationError(
            f"{where} {value!r}, which is not an ISO 8601 time (e.g. 2025-01-31T09:30:00Z). "
            "Correct it or remove the field in the file."
        ) from None


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
    agent.update(
        {
            "id": "agent-0",
            "block_ids": [b["id"] for b in blocks],
            "tool_ids": [t["id"] for t in tools],
            "messages": messages,
            "in_context_message_ids": in_context,
        }
    )
    return {
        "agents": [agent],
        "blocks": blocks,
        "tools": tools,
        "groups": [],
        "files": [],
        "sources": [],
        "mcp_servers": [],
    }


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------


def _renamed(note: str, old: str, new: str) -> str:
    if note.startswith(f"{old}: "):
        note = f"{new}: " + note[len(old) + 2 :]
    return note.replace(f"`tiermem agents show {old}`", f"`tiermem agents show {new}`")


def apply_plans(
    memory: Memory,
    plans: list[AgentPlan],
    digest: str,
    *,
    rename: str | None = None,
    replace: bool = False,
    include_forgotten: bool = False,
) -> ImportReport:
    """Write validated plans. Names that clash with other agents are refused unless renamed or replaced. What the
    forget record names is left out (``af_forgotten``), or with ``include_forgotten`` written and taken out of it."""
    report = ImportReport()
    if rename is not None:  # the notes name the agent as it will be stored (the name it would have had goes)
        old, plans[0].name = plans[0].name, rename
        naming = _naming_note(plans[0].metadata.get("letta_name", old), old)
        plans[0].notes = [_renamed(note, old, rename) for note in plans[0].notes if note != naming]
    for p in plans:  # every name is checked before anything is written
        check_agent_name(p.name)
    todo = []
    for p in plans:
        agent_id = stable_id("agent", digest, p.file_id, p.name)  # the same file under another name is another agent
        existing = memory.core.find_agent(p.name)
        try:
            memory.core.get_agent(agent_id)
            if not replace:  # --replace imports it again over it (changes made since are discarded)
                report.skipped.append(f"{p.name} (already imported from this file)")
                continue
        except NotFoundError:
            pass
        if existing is not None and not replace:
            letta = p.metadata.get("letta_name", p.name)
            renamed = rename is not None and p is plans[0]
            named = f"{p.name!r} (the file's {letta!r})" if letta != p.name and not renamed else repr(p.name)
            raise ValidationError(
                f"An agent named {named} already exists. Import under another name with --rename NEW, or "
                "overwrite it with --replace (its messages and passages are deleted; its blocks' history stays)."
            )
        todo.append((p, agent_id, existing))
    # where each source goes is decided before anything is written (the sources the agents written use)
    targets: dict[str, _Target] = {}
    taken: set[str] = set()
    folder_plans = {f.key: f for p, _, _ in todo for f in p.folders}
    report.notes += _skip_named_credentials(memory, list(folder_plans.values()), [p for p, _, _ in todo])
    for key, plan in folder_plans.items():
        targets[key] = _resolve_folder(memory, plan, digest, taken)
    plans_written, agent_ids = [p for p, _, _ in todo], [a for _, a, _ in todo]
    forgotten = af_forgotten.apply(memory, plans_written, agent_ids, digest, include=include_forgotten)
    report.notes += forgotten.notes
    namespace = plans[0].name  # the same file imported under --rename gets its own blocks
    _check_agents(memory, todo, targets, digest, namespace)  # nothing is written when an agent would be refused
    total = sum(len(p.messages) + len(p.passages) + len(p.blocks) for p, _, _ in todo)
    total += sum(len(f.files) for f in folder_plans.values())
    progress = Progress("importing", total)
    redacted = Redactions(memory.secret_scan)  # what the report says was redacted as it entered
    try:
        folders = _write_folders(memory, todo, targets, progress, report, redacted)  # before the agents that see them
        # every replaced agent goes first: a block the file's agents share is then gone too, and written anew
        for _, _, existing in todo:
            if existing is not None:
                memory.delete_agent(existing.id)
        passage_ids = [
            _write_agent(memory, p, agent_id, digest, namespace, progress, report, folders, targets, redacted)
            for p, agent_id, _ in todo
        ]
    finally:
        progress.close()
    if forgotten.restored:  # written: no longer forgotten (forget them again to forget them)
        memory.core.unrecord_forgotten(forgotten.restored)
    # a forget that ran meanwhile (recorded after the record was read above): what it names is forgotten again
    report.notes += af_forgotten.forgotten_meanwhile(
        memory, plans_written, agent_ids, digest, forgotten.record, passage_ids
    )
    report.notes += redacted.notes()
    return report


def _write_agent(
    memory: Memory,
    p: AgentPlan,
    agent_id: str,
    digest: str,
    namespace: str,
    progress: Progress,
    report: ImportReport,
    folders: dict[str, Folder],
    targets: dict[str, _Target],
    redacted: Redactions,
) -> list[str]:
    """Write one agent of the file; returns the id each of its passages was written with (its first chunk's)."""
    archive = memory.archive
    for ref, spec in p.blocks:
        # keyed by the import's first agent name too: the same file imported under --rename gets its own blocks
        block_id = stable_id("block", digest, namespace, ref)  # one id per file block: shared stays shared
        if memory.core.get_block(block_id) is None:  # written (and redacted) once, by its first agent
            redacted.text(p.name, f"block {spec.label!r}", spec.value)
            redacted.text(p.name, f"the description of block {spec.label!r}", spec.description)
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
        redacted.message(p.name, row.get("content"), row.get("payload"))
        redacted.text(p.name, "the projects of messages", row.get("project"))
        redacted.text(p.name, "the conversations of messages", row.get("conversation_id"))
        _scrub_message(memory, row)
        row["id"] = stable_id("message", digest, agent_id, m["file_id"])
        row["seq"] = base + i
        if not row.get("timestamp"):
            row.pop("timestamp", None)
        rows.append(row)
        ids[m["file_id"]] = row
    for start in range(0, len(rows), 256):
        archive.log_messages(agent_id, rows[start : start + 256], max_chars=IMPORT_MAX_CHARS, before_agent_row=True)
        report.messages += len(rows[start : start + 256])
        progress.advance(len(rows[start : start + 256]))
    window = _window(agent_id, p, ids, base + len(rows))
    if window is not None:
        memory.set_context_window(window)
    passage_ids: list[str] = []
    for c, tags, _ in p.passages:
        redacted.text(p.name, "archival passages", c)
        for tag in tags:
            redacted.text(p.name, "the tags of archival passages", tag)
    for project in p.passage_projects:
        redacted.text(p.name, "the projects of archival passages", project)
    if p.passages:
        archive.insert_many(
            agent_id,
            [(memory.scrub(c), [memory.scrub(x) for x in t]) for c, t, _ in p.passages],
            created=[w for _, _, w in p.passages],
            projects=[memory.scrub(x) if x else x for x in p.passage_projects] or None,
            max_chars=IMPORT_MAX_CHARS,
            ids=passage_ids,
            before_agent_row=True,  # the agent's row is written last (it shows only once complete)
        )
        report.passages += len(p.passages)
        progress.advance(len(p.passages))
    if p.links:  # between the rows just written, before the agent is visible
        new_ids = {k: v["id"] for k, v in ids.items()}
        new_ids.update((k, v) for k, v in zip(p.passage_ids, passage_ids, strict=True) if k)
        report.links += restore_links(memory, agent_id, p.links, new_ids)
    metadata = _agent_metadata(p, folders, targets, digest, namespace)
    if p.folders:
        opened = sum(v.is_open for v in p.views)
        report.notes.append(
            f"{p.name}: folder(s) attached: {', '.join(repr(folders[f.key].name) for f in p.folders)}"
            f" ({len(p.views)} file views, {opened} open)"
        )
    # the kept document names its fields (tools[NAME].source_code); those held natively too once, by their own name
    copies = frozenset({"agent.system", *(f"agent.{k}" for k in metadata)})
    for k, v in metadata.items():
        place = "" if k == letta_passthrough.KEY else f"the agent's {k}"
        redacted.text(p.name, "a key of the agent's metadata", k)
        value = _json_or_text(v)
        if k == letta_passthrough.KEY and isinstance(value, dict) and isinstance(value.get(UNLOGGED), list):
            redacted.document(p.name, UNLOGGED, value.pop(UNLOGGED))  # as a logged message's payload
        redacted.document(p.name, place, value, copies, as_text=True)
    redacted.text(p.name, "the system prompt", p.system)
    metadata = _stored_metadata(memory, metadata)
    memory.create_agent(
        p.name, system=memory.scrub(p.system), blocks=[], metadata=metadata, agent_id=agent_id, documents=DOCUMENTS
    )
    report.imported.append(p.name)
    if letta_passthrough.summary(p.kept):
        report.kept[p.name] = letta_passthrough.summary(p.kept)
    report.notes.extend(p.notes)
    return passage_ids


def _agent_metadata(
    p: AgentPlan, folders: dict[str, Folder], targets: dict[str, _Target], digest: str, namespace: str
) -> dict[str, str]:
    """The agent's metadata as the file gives it: its settings, its view of its folders (``folders``: by source key)
    and the document of what tiermem keeps but does not run (``letta_passthrough``)."""
    metadata = dict(p.metadata)
    view, kept_views = _agent_view(p, folders, targets)
    if view is not None:  # the agent row carries its view: once it is visible, so are its open files
        metadata[STATE_KEY] = view
    if p.kept:
        metadata[letta_passthrough.KEY] = json.dumps(
            {**p.kept, VIEWS_KEY: kept_views, "scope": {"digest": digest, "namespace": namespace}}, ensure_ascii=False
        )
    return metadata


UNLOGGED = "unlogged_messages"  # of the kept document: Letta's messages tiermem does not log (approvals, ...)
DOCUMENTS = frozenset({letta_passthrough.KEY})  # agent metadata holding Letta's messages: checked as their payloads


def _stored_metadata(memory: Memory, metadata: dict[str, str]) -> dict[str, str]:
    """The agent's metadata as it is stored: every credential in a key or a value redacted as it enters (a value
    holding JSON string by string, a key telling what its value is: ``{"password": "..."}``). Stored as its text,
    where every string is quoted, a value is redacted until ``secrets.find`` sees nothing in it (``Memory.scrub_json``);
    but the Letta messages the kept document holds are redacted as a logged message's payload is
    (``secrets.redact_document``): their tool-call ids and reasoning signatures, random-looking, are ids, written back
    as the file had them (the document is checked so: ``Memory.create_agent``'s ``documents``)."""
    return {memory.scrub(k): _stored_value(memory, k, v) for k, v in metadata.items()}


def _stored_value(memory: Memory, key: str, value: str) -> str:
    doc = _json_or_text(value) if key in DOCUMENTS and memory.secret_scan else None
    if not isinstance(doc, dict) or not isinstance(doc.get(UNLOGGED), list):
        return memory.scrub_json(value)
    messages = secrets.redact_document(doc.pop(UNLOGGED))[0]
    rest = json.loads(memory.scrub_json(json.dumps(doc, ensure_ascii=False)))
    return json.dumps({**rest, UNLOGGED: messages}, ensure_ascii=False)


def _check_agents(
    memory: Memory, todo: list[tuple[AgentPlan, str, Any]], targets: dict[str, _Target], digest: str, namespace: str
) -> None:
    """Refuse, before anything is written, what writing an agent's row would refuse (``Memory.create_agent``): a
    credential in its name (never redacted: it is how the agent is called) or left in its stored metadata values,
    named by the field it is in (a kept field by its path in the file, ``mcp_servers[local].env.KEY``). Its prompt
    and metadata keys are stored redacted (``Memory.scrub``: every credential ``secrets.find`` finds replaced), so
    nothing is left in them to refuse. The folders of new sources are checked for names as their creation would
    (``Filesystem.create_folder``)."""
    if not memory.secret_scan:
        return
    for key, target in targets.items():
        if target.mode == "new":
            memory.refuse_secrets(target.folder.name, f"the name of source {key!r} in the file")
    folders = {k: t.folder for k, t in targets.items()}
    for p, _, _ in todo:
        agent = f"agent {p.file_id!r} in the file"
        memory.refuse_secrets(p.name, f"the name of {agent}")
        for k, v in _stored_metadata(memory, _agent_metadata(p, folders, targets, digest, namespace)).items():
            if k in DOCUMENTS:  # checked as create_agent checks it: named by its path in the document
                memory.refuse_in_document(v, f"the Letta fields kept for export of {agent}")
                continue
            found = secrets.find(v)
            if found:
                memory.refuse_secrets(v, f"{_field_of(k, v, found[0].start, p.name)} of {agent}")


def _field_of(key: str, value: str, at: int, agent: str) -> str:
    """The field of an agent's stored metadata a character ``at`` of ``value`` is in: a kept field by its path in
    the file (``mcp_servers[local].stdio_config.env.AWS_SECRET_ACCESS_KEY``), else the metadata entry."""
    path = secrets.json_path(value, at)
    if key != letta_passthrough.KEY or not path:
        return f"the metadata entry {key!r}"
    steps: list[str | int] = list(path)
    where = ""
    if steps[0] in ("orphans", "agent"):  # the file's own top-level lists; the agent's fields
        where = f"agents[{agent}]" if steps[0] == "agent" else ""
        steps = steps[1:]
    for step in steps:
        where += f"[{step}]" if isinstance(step, int) else f".{step}" if where else str(step)
    return f"the file's {where}"


def _window(agent_id: str, p: AgentPlan, ids: dict[str, JSON], end: int) -> ContextWindow | None:
    listed = [ids[i] for i in p.in_context if i in ids]
    if not ids:
        return None
    summary_id = ""
    if listed and _kind(listed[0].get("payload")) == "summary":
        summary_id = listed[0]["id"]
        listed = listed[1:]
    start = listed[0]["seq"] if listed else end
    return ContextWindow(agent_id=agent_id, conversation_id="default", start_seq=start, summary_id=summary_id)


# ---------------------------------------------------------------------------
# Folders and files: Letta's sources, files and files_agents
# ---------------------------------------------------------------------------

SOURCE_KEY = "letta_source"  # folder metadata: the source's fields tiermem does not hold (written back by export)
FILES_KEY = "letta_files"  # folder metadata: file id -> that file's fields tiermem does not hold, while it is unchanged
VIEWS_KEY = "file_views"  # letta_passthrough document: file id -> the agent's files_agents fields tiermem does not hold
NUMBERED = "{name}_({n})"  # a source whose name is taken by a different folder is imported as NAME_(1), NAME_(2), ...


def kept_fields(original: JSON, native: JSON, ignore: tuple[str, ...] = ()) -> JSON:
    """What of a Letta object tiermem does not hold: its other fields verbatim; under ``_native`` each held field
    the file had otherwise than tiermem writes it ([the file's value, tiermem's]); under ``_absent`` each held
    field the file did not have (with tiermem's value). ``with_kept`` puts the file's values back while
    tiermem's are unchanged."""
    out = {k: v for k, v in original.items() if k not in native and k not in ignore}
    changed = {k: [original[k], v] for k, v in native.items() if k in original and k not in ignore and original[k] != v}
    absent = {k: v for k, v in native.items() if k not in original and k not in ignore}
    if changed:
        out["_native"] = changed
    if absent:
        out["_absent"] = absent
    return out


def with_kept(native: JSON, kept: JSON | None) -> JSON:
    """``native`` (tiermem's fields of a Letta object) with what ``kept_fields`` kept of the file's object."""
    if not isinstance(kept, dict):
        return dict(native)
    out = dict(native)
    for k, pair in (kept.get("_native") or {}).items():
        if k in out and isinstance(pair, list) and len(pair) == 2 and out[k] == pair[1]:
            out[k] = pair[0]
    for k, v in (kept.get("_absent") or {}).items():
        if k in out and out[k] == v:
            del out[k]
    out.update({k: v for k, v in kept.items() if k not in ("_native", "_absent", "sha256")})
    return out


def _scrubbed(memory: Memory, kept: JSON) -> JSON:
    """What ``kept_fields`` keeps of a Letta object, with every credential in it redacted (``secrets.redact_document``,
    as the store's own copy of a field is: the file's value under ``_native`` too), when the store scans."""
    if not memory.secret_scan:
        return kept
    redacted: JSON = secrets.redact_document(kept)[0]
    return redacted


# A Letta source's or file's fields held natively: their credentials are counted where they are stored (the folder's
# description, a file's text), not again as kept fields
_HELD = frozenset({"id", "name", "source_id", "description", "instructions", "content", "file_name"})


def _own_fields(letta: JSON) -> JSON:
    """The fields of a Letta source or file whose redaction the report counts as its kept fields (``_HELD`` aside)."""
    return {k: v for k, v in letta.items() if k not in _HELD}


def letta_source_fields(folder: Folder) -> JSON:
    """A folder's fields as a Letta source has them (tiermem's own; ``id`` and the rest are added by export)."""
    return {"name": folder.name, "description": folder.description or None, "instructions": folder.instructions or None}


def letta_file_fields(folder_name: str, f: StoredFile, text: str) -> JSON:
    """A file's fields as a Letta file has them (``source_id`` and ``id`` are added by export)."""
    return {
        "file_name": f"{folder_name}/{f.name}",
        "original_file_name": f.original_name,
        "file_path": f.source_path or None,
        "file_type": f.file_type,
        "file_size": f.size,
        "processing_status": f.status,
        "error_message": f.error or None,
        "total_chunks": f.chunks,
        "chunks_embedded": f.chunks,
        "content": text,
    }


def letta_view_fields(v: FileView, file_name: str) -> JSON:
    """A view's fields as Letta's ``files_agents`` row has them (ids added by export)."""
    return {
        "file_name": file_name,
        "is_open": v.is_open,
        "visible_content": v.visible,
        "last_accessed_at": from_us(v.accessed_us).isoformat() if v.accessed_us else None,
        "start_line": v.start_line,
        "end_line": v.end_line,
    }


def _by_id(data: JSON, key: str) -> dict[str, JSON]:
    """The entries of ``data[key]`` by their file-local id (each must have one, and no id twice)."""
    out: dict[str, JSON] = {}
    for i, entry in enumerate(_list(data, key)):
        ident = entry.get("id")
        if not isinstance(ident, str) or not ident:
            raise ValidationError(f"{key}[{i}] has no id.")
        if ident in out:
            raise ValidationError(f"The file has two {key} with the id {ident!r}.")
        out[ident] = entry
    return out


def _plan_folders(data: JSON) -> dict[str, FolderPlan]:
    """The sources some agent uses, with their files; every file must belong to a source of the file."""
    sources = _by_id(data, "sources")
    files = _by_id(data, "files")
    for key, f in files.items():
        if f.get("source_id") not in sources:
            raise ValidationError(
                f"File {f.get('file_name') or key!r} belongs to source {f.get('source_id')!r}, which "
                "the agent file does not contain; add the source to `sources` or remove the file."
            )
    used: list[str] = []
    for a in data["agents"]:
        lists = [a.get(k) if isinstance(a.get(k), list) else [] for k in ("source_ids", "folder_ids", "files_agents")]
        refs = [*lists[0], *lists[1]]
        for fa in lists[2]:
            if isinstance(fa, dict):
                refs += [fa.get("source_id"), (files.get(str(fa.get("file_id"))) or {}).get("source_id")]
        for r in refs:
            if r is not None and not isinstance(r, str):
                raise ValidationError(f"Agent {a.get('name')!r}: a source id must be text, not {r!r}.")
            if r is not None and r not in used:
                if r not in sources:
                    raise ValidationError(
                        f"Agent {a.get('name')!r} uses source {r!r}, which the agent file does not contain."
                    )
                used.append(r)
    plans: dict[str, FolderPlan] = {}
    names: set[str] = set()
    for key in [k for k in sources if k in used]:
        s = sources[key]
        name = s.get("name")
        if not isinstance(name, str):
            raise ValidationError(f"Source {key!r} has no name.")
        try:
            check_folder_name(name)
        except ValidationError as exc:
            raise ValidationError(f"Source {name!r} cannot be a folder: {exc}") from exc
        if name in names:
            raise ValidationError(f"The file has two sources named {name!r}; folder names are unique.")
        names.add(name)
        texts = {k: s.get(k) for k in ("description", "instructions")}
        for k, v in texts.items():
            if v is not None and not isinstance(v, str):
                raise ValidationError(f"Source {name!r}: `{k}` must be text.")
        plans[key] = FolderPlan(key, name, texts["description"] or "", texts["instructions"] or "", s)
    for key, f in files.items():
        folder = plans.get(f["source_id"])
        if folder is not None:
            folder.files.append(_plan_file(key, f, folder.name))
    for folder in plans.values():
        seen: set[str] = set()
        for fp in folder.files:
            if fp.name in seen:
                raise ValidationError(f"Source {folder.name!r} has two files named {fp.name!r}.")
            seen.add(fp.name)
    return plans


def _plan_file(key: str, f: JSON, folder: str) -> FilePlan:
    letta_name = f.get("file_name") or f.get("original_file_name")
    if not isinstance(letta_name, str) or not letta_name:
        raise ValidationError(f"File {key!r} of source {folder!r} has no file_name.")
    name = letta_name[len(folder) + 1 :] if letta_name.startswith(f"{folder}/") else letta_name
    try:
        check_file_name(name)
    except ValidationError as exc:
        raise ValidationError(f"File {letta_name!r} of source {folder!r}: {exc}") from exc
    content = f.get("content")
    if content is not None and not isinstance(content, str):
        raise ValidationError(f"File {letta_name!r}: `content` must be text.")
    text = content or ""
    if len(text) > IMPORT_MAX_CHARS:
        raise ValidationError(
            f"File {letta_name!r} has {len(text)} characters; the most an import stores is {IMPORT_MAX_CHARS}."
        )
    status = "error" if f.get("processing_status") == "error" else "completed"
    size = f.get("file_size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        size = len(text.encode("utf-8"))
    original = f.get("original_file_name")
    kind = f.get("file_type")
    path = f.get("file_path")
    return FilePlan(
        key=key,
        name=name,
        original_name=original if isinstance(original, str) and original else name.rsplit("/", 1)[-1],
        file_type=kind if isinstance(kind, str) and kind else file_type(name),
        size=size,
        status=status,
        error=str(f.get("error_message") or "") if status == "error" else "",
        source_path=path if isinstance(path, str) else "",
        text=text if status == "completed" else "",
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        letta=f,
        created_at=_time(f.get("file_creation_date")),
        updated_at=_time(f.get("file_last_modified_date")),
    )


def _plan_views(plan: AgentPlan, agent: JSON, data: JSON, folders: dict[str, FolderPlan]) -> None:
    """The agent's folders (``source_ids``, ``folder_ids``, the sources of its views), views and limits, checked."""
    name = plan.name
    files = {f.key: (p, f) for p in folders.values() for f in p.files}
    order: list[str] = []
    for key in ("source_ids", "folder_ids"):
        refs = agent.get(key)
        if refs is not None and not isinstance(refs, list):
            raise ValidationError(f"Agent {name!r}: `{key}` must be a list of source ids.")
        order += [str(r) for r in refs or [] if str(r) not in order]
    rows = agent.get("files_agents")
    if rows is not None and (not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows)):
        raise ValidationError(f"Agent {name!r}: `files_agents` must be a list of objects.")
    views: list[ViewPlan] = []
    for fa in rows or []:
        key = str(fa.get("file_id"))
        if key not in files:
            raise ValidationError(
                f"Agent {name!r}: a files_agents row names file {fa.get('file_id')!r}, which the "
                "agent file does not contain."
            )
        folder, f = files[key]
        if fa.get("source_id") is not None and fa["source_id"] != folder.key:
            raise ValidationError(
                f"Agent {name!r}: the files_agents row of {f.letta.get('file_name')!r} names source "
                f"{fa['source_id']!r}, but the file belongs to {folder.key!r}."
            )
        if any(v.file_key == key for v in views):
            raise ValidationError(f"Agent {name!r} has two files_agents rows for {f.letta.get('file_name')!r}.")
        lines = [fa.get("start_line"), fa.get("end_line")]
        if any(x is not None and (not isinstance(x, int) or isinstance(x, bool) or x < 0) for x in lines):
            raise ValidationError(
                f"Agent {name!r}: the lines of its view of {f.letta.get('file_name')!r} must be whole numbers or null."
            )
        visible = fa.get("visible_content")
        if visible is not None and not isinstance(visible, str):
            raise ValidationError(f"Agent {name!r}: the visible_content of {f.letta.get('file_name')!r} must be text.")
        accessed = _time(fa.get("last_accessed_at"))
        view = ViewPlan(
            key,
            folder.key,
            bool(fa.get("is_open")),
            visible or "",
            lines[0],
            lines[1],
            to_us(accessed) if accessed else 0,
            {},
        )
        native = letta_view_fields(_view(view, "", ""), str(f.letta.get("file_name") or f.name))
        view.kept = kept_fields(fa, native, ignore=("id", "agent_id", "file_id", "source_id"))
        views.append(view)
        if folder.key not in order:
            order.append(folder.key)
    limits = [agent.get("max_files_open"), agent.get("per_file_view_window_char_limit")]
    if any(x is not None and (not isinstance(x, int) or isinstance(x, bool)) for x in limits):
        raise ValidationError(
            f"Agent {name!r}: max_files_open and per_file_view_window_char_limit must be whole numbers or null."
        )
    try:
        check_limits(limits[0], limits[1])
    except ValidationError as exc:
        raise ValidationError(f"Agent {name!r}: {exc}") from exc
    plan.folders = [folders[k] for k in order]
    plan.views, plan.max_files_open, plan.char_limit = views, limits[0], limits[1]


def _view(v: ViewPlan, file_id: str, folder_id: str, name: str = "", sha256: str = "") -> FileView:
    return FileView(
        file_id=file_id,
        folder_id=folder_id,
        name=name,
        is_open=v.is_open,
        visible=v.visible,
        start_line=v.start_line,
        end_line=v.end_line,
        accessed_us=v.accessed_us,
        sha256=sha256 if v.is_open else "",
    )


# a Letta file's fields tiermem stores as they are (and shows: a file's name to every agent its folder is attached to)
_NAMES = (("file_name", "name"), ("original_file_name", "original name"), ("file_path", "path"))


def _skip_named_credentials(memory: Memory, folders: list[FolderPlan], agents: list[AgentPlan]) -> list[str]:
    """Leave out of ``folders`` (before anything is written) each file whose name, original name or path holds a
    credential, as an upload skips a file whose name holds one (``Filesystem._prepared``); the ``agents``' views of
    it go with it. Returns a note per file, naming it redacted (never echoed)."""
    notes: list[str] = []
    dropped: set[str] = set()
    for folder in folders:
        kept: list[FilePlan] = []
        for f in folder.files:
            held = [(what, h) for k, what in _NAMES if (h := memory.credentials_in(_text(f.letta.get(k))))]
            if not held:
                kept.append(f)
                continue
            dropped.add(f.key)
            what, kinds = held[0]
            shown = memory.scrub(_text(f.letta.get("file_name")) or f.name)
            notes.append(
                f"folder {memory.scrub(folder.name)!r}: skipped file {shown!r}: its {what} holds {kinds}: credentials "
                "are never stored in memory, and a file's name is shown to every agent its folder is attached to; "
                "rename the file without it in the agent file, then import again"
            )
        folder.files = kept
    for p in agents:
        p.views = [v for v in p.views if v.file_key not in dropped]
    return notes


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


@dataclass
class _Target:
    """Where a source goes: a new folder, this file's own (an earlier or interrupted import), or an identical one."""

    folder: Folder
    mode: str  # "new", "ours" (written again where it differs) or "same" (used as it is)
    file_ids: dict[str, str]  # the file's key -> the file's id
    # "same": the file's key -> its row's hash (of the bytes uploaded, which may not be the agent file's text's:
    # ``_same_texts``), the version the agent's views are of
    hashes: dict[str, str] = field(default_factory=dict)


def _resolve_folder(memory: Memory, plan: FolderPlan, digest: str, taken: set[str]) -> _Target:
    """The folder a source goes to (nothing is written): its name if free (neither a folder's name nor a folder's
    id); the folder of that name if it is this file's (from an earlier or interrupted import) or identical
    (description, instructions, files and texts); else the first free ``NAME_(n)``."""
    rows = memory.archive.files
    want = {f.name: (f.sha256, f.status) for f in plan.files}
    texts = (memory.scrub(plan.description), memory.scrub(plan.instructions))  # as stored: redacted
    for name in folder_names(plan.name):
        if name in taken or rows.folder(name) is not None:  # (another folder's id reaches that folder)
            continue
        folder_id = stable_id("folder", digest, plan.key, name)  # the same file into the same name: the same folder
        ours = {f.key: stable_id("file", folder_id, f.name) for f in plan.files}  # as an upload names them
        existing = rows.folder_named(name)
        if existing is None:
            taken.add(name)
            folder = Folder(id=folder_id, name=name, description=plan.description, instructions=plan.instructions)
            kept = kept_fields(plan.letta, letta_source_fields(folder), ("id", "name"))
            folder.metadata[SOURCE_KEY] = _scrubbed(memory, kept)  # the file's own fields, redacted as they enter
            return _Target(folder, "new", ours)
        if (existing.description, existing.instructions) != texts:
            continue
        stored = rows.files([existing.id])
        have = _same_texts(rows, stored, want)
        if have == want:
            taken.add(name)
            by_name = {f.name: f for f in stored}
            return _Target(
                existing,
                "ours" if existing.id == folder_id else "same",
                {f.key: by_name[f.name].id for f in plan.files},
                {f.key: by_name[f.name].sha256 for f in plan.files},
            )
        unfinished = all(n in want and (have[n] == want[n] or have[n][1] not in ("completed", "error")) for n in have)
        if existing.id == folder_id and unfinished:  # an interrupted import of this file: finish it
            taken.add(name)
            return _Target(existing, "ours", ours)
    raise ValidationError(f"No free name for folder {plan.name!r}; rename it in the file.")


def _same_texts(rows: Any, stored: list[StoredFile], want: dict[str, tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """(hash, status) of each of a folder's ``stored`` files by name, as ``want`` (an agent file's files) counts them:
    the hash of its text. An uploaded file's row holds the hash of its bytes, which is its text's only when the bytes
    were UTF-8 text as they are (not CRLF line ends, a BOM, another encoding, a converted PDF), so a completed file
    whose row's hash differs is compared by its text; read only when every name is there."""
    have: dict[str, tuple[str, str]] = {f.name: (f.sha256, str(f.status)) for f in stored}
    if have.keys() != want.keys():
        return have
    differ = [f for f in stored if have[f.name] != want[f.name] and f.status == want[f.name][1] == "completed"]
    texts = rows.texts([f.id for f in differ]) if differ else {}
    for f in differ:
        if f.id in texts and hashlib.sha256(texts[f.id].encode("utf-8")).hexdigest() == want[f.name][0]:
            have[f.name] = want[f.name]
    return have


def _write_folder(
    memory: Memory, plan: FolderPlan, target: _Target, progress: Progress, redacted: Redactions
) -> Folder:
    """Store the folder and its files (those not stored as they are already), then what tiermem does not hold of
    the source and its files in the folder's metadata."""
    rows = memory.archive.files
    if target.mode == "same":
        progress.advance(len(plan.files))
        return target.folder
    owner = f"folder {target.folder.name!r}"
    if target.mode == "new":
        redacted.text(owner, "its description", plan.description)
        redacted.text(owner, "its instructions", plan.instructions)
        redacted.document(owner, "source", _own_fields(plan.letta))
        memory.files.create_folder(
            target.folder.name,
            description=memory.scrub(plan.description),
            instructions=memory.scrub(plan.instructions),
            metadata=target.folder.metadata,
            folder_id=target.folder.id,
        )
    folder_id = target.folder.id
    existing = {f.id: f for f in rows.files([folder_id])}
    good: list[tuple[StoredFile, str]] = []
    bad: list[tuple[StoredFile, str]] = []
    stored: dict[str, StoredFile] = {}
    for f in plan.files:
        file_id = target.file_ids[f.key]
        old = existing.get(file_id)
        if old is not None and (old.sha256, old.status) == (f.sha256, f.status):
            stored[f.key] = old
            continue
        record = StoredFile(
            id=file_id,
            folder_id=folder_id,
            name=f.name,
            original_name=f.original_name,
            file_type=f.file_type,
            size=f.size,
            sha256=f.sha256,
            status="parsing",
            source_path=f.source_path,
            # the file's dates as the agent file has them (an export writes them): now where it has none
            created_at=f.created_at or (old.created_at if old else now()),
            updated_at=f.updated_at or now(),
        )
        # the file's text with its credentials redacted, as an upload's (the agent file's other content is too)
        if f.status != "error":
            redacted.text(owner, f"file {f.name!r}", f.text)
        redacted.document(owner, f"files[{f.name}]", _own_fields(f.letta))
        (bad.append((record, f.error)) if f.status == "error" else good.append((record, memory.scrub(f.text))))
    for start in range(0, len(good), 64):
        for s in rows.write(good[start : start + 64], embed=True):
            stored[next(f.key for f in plan.files if target.file_ids[f.key] == s.id)] = s
        progress.advance(len(good[start : start + 64]))
    for s in rows.write_errors(bad):
        stored[next(f.key for f in plan.files if target.file_ids[f.key] == s.id)] = s
    progress.advance(len(plan.files) - len(good))
    folder = rows.folder(folder_id) or target.folder
    kept_files = {}
    for f in plan.files:
        s = stored[f.key]
        native = letta_file_fields(folder.name, s, f.text)
        regular = f.letta.get("file_name") == f"{plan.name}/{f.name}"  # a renamed folder's files follow its name
        ignore = ("id", "source_id", "file_name") if regular else ("id", "source_id")
        kept_files[s.id] = {**_scrubbed(memory, kept_fields(f.letta, native, ignore)), "sha256": s.sha256}
    source = _scrubbed(memory, kept_fields(plan.letta, letta_source_fields(folder), ("id", "name")))
    metadata = {**folder.metadata, SOURCE_KEY: source, FILES_KEY: kept_files}
    if metadata != folder.metadata:
        rows.put_folder(
            Folder(
                id=folder.id,
                name=folder.name,
                description=folder.description,
                instructions=folder.instructions,
                metadata=metadata,
                created_at=folder.created_at,
                updated_at=now(),
            )
        )
        folder = rows.folder(folder_id) or folder
    return folder


def _write_folders(
    memory: Memory,
    todo: list[tuple[AgentPlan, str, Any]],
    targets: dict[str, _Target],
    progress: Progress,
    report: ImportReport,
    redacted: Redactions,
) -> dict[str, Folder]:
    written: dict[str, Folder] = {}
    for p, _, _ in todo:
        for plan in p.folders:
            if plan.key in written:
                continue
            target = targets[plan.key]
            written[plan.key] = _write_folder(memory, plan, target, progress, redacted)
            name = written[plan.key].name
            report.folders += target.mode != "same"
            report.files += len(plan.files) if target.mode != "same" else 0
            files = (
                ", ".join(
                    f"{f.name} ({len(f.text)} chars{', error' if f.status == 'error' else ''})" for f in plan.files
                )
                or "no files"
            )
            if target.mode == "same":
                report.notes.append(f"folder {name!r} is here already with the same files ({files}); attached as it is")
            elif name != plan.name:
                why = (
                    "it is the id of another folder here, which reaches that folder"
                    if memory.archive.files.folder(plan.name) is not None
                    else f"a folder named {plan.name!r} with other content exists here"
                )
                report.notes.append(f"folder {plan.name!r} is imported as {name!r} ({why}): {files}")
            else:
                report.notes.append(f"folder {name!r} imported: {files}")
    return written


def _agent_view(p: AgentPlan, folders: dict[str, Folder], targets: dict[str, _Target]) -> tuple[str | None, JSON]:
    """The agent's view as its metadata entry (None: no folders, no limits) and, per file id, what of its
    ``files_agents`` rows tiermem does not hold."""
    by_key = {f.key: f for plan in p.folders for f in plan.files}
    views, kept = [], {}
    for v in p.views:
        folder = folders[v.folder_key]
        target = targets[v.folder_key]
        file_id = target.file_ids[v.file_key]
        sha256 = target.hashes.get(v.file_key) or by_key[v.file_key].sha256  # a shared row's own hash: its version
        views.append(_view(v, file_id, folder.id, f"{folder.name}/{by_key[v.file_key].name}", sha256))
        if v.kept:
            kept[file_id] = v.kept
    state = restored_view([folders[f.key] for f in p.folders], views, p.max_files_open, p.char_limit)
    if not (state.folders or state.max_files_open or state.char_limit):
        return None, kept
    return state.to_json(), kept


def _kind(payload: Any) -> Any:
    """A logged message's kind (its payload's ``kind``); None when the payload is not a JSON object (tiermem's own
    payload is imported as the file gives it)."""
    try:
        value = json.loads(payload or "{}")
    except (ValueError, RecursionError):
        return None
    return value.get("kind") if isinstance(value, dict) else None


def _json_or_text(value: str) -> Any:
    """A metadata value as the JSON it holds (the text itself when it is not JSON, or nests too deep to walk: as
    ``secrets.redact_json`` redacts it)."""
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return value


def _scrub_message(memory: Memory, row: JSON) -> None:
    """An imported message without credentials: its content, its project and conversation, and every string of its
    payload (tool calls and their arguments) redacted, each credential replaced by ``[redacted: KIND]``
    (``secret_scan`` on)."""
    if isinstance(row.get("content"), str):
        row["content"] = memory.scrub(row["content"])
    for key in ("project", "conversation_id"):  # tiermem's own fields, scanned as a logged turn's are
        if isinstance(row.get(key), str):
            row[key] = memory.scrub(row[key])
    if memory.secret_scan and isinstance(row.get("payload"), str):
        row["payload"] = secrets.redact_json(row["payload"])
