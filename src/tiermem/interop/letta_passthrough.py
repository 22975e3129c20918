"""What a Letta agent file carries that tiermem keeps but does not run.

Each imported agent gets one JSON document in its metadata under ``letta_agent_file``: the agent's
Letta fields as the file had them (settings, tool rules, tool ids, group ids, ...), the tools and groups
it references, the Letta-only fields of its blocks, and the messages tiermem does not log (Letta's compiled
system message, approvals). The sources, files and ``files_agents`` it uses are held natively as folders,
files and views (``agentfile``); the document keeps only what of them tiermem does not hold (``file_views``). The first agent of a file also keeps what no
agent references (blocks, tools, groups, files, sources), the MCP servers, skills and the file's
metadata. Export (``af_export.py``) writes all of it back in Letta's shape.

Environment variables and secrets: only their **names** are kept; every value is replaced by "" (the agent's
``tool_exec_environment_variables`` and ``secrets``; an MCP server's ``env``, ``token``, ``auth_token`` and
``custom_headers``).
"""

from __future__ import annotations

import json
from typing import Any

from ..server.registry import KNOWN_TOOLS  # agentfile.py imports it from here

JSON = dict[str, Any]
KEY = "letta_agent_file"  # agent metadata key holding the document
FORMAT = 1
ENV_FIELDS = ("tool_exec_environment_variables", "secrets")
MCP_SECRET_FIELDS = ("token", "auth_token")  # an MCP server's credentials (its ``env`` and ``custom_headers`` too)
# Fields of a Letta agent that tiermem holds natively (or that ids/ordering replace on export).
NATIVE_AGENT_FIELDS = frozenset(
    {"id", "messages", "in_context_message_ids", "in_context_message_indices", "block_ids", "memory_blocks"}
)
NATIVE_BLOCK_FIELDS = ("id", "label", "value", "limit", "description", "read_only")


def blank_values(value: Any) -> tuple[Any, list[str]]:
    """``value`` (a dict of name -> value, or a list of {key, value} objects) with every value "", and the names."""
    if isinstance(value, dict):
        return {str(k): "" for k in value}, [str(k) for k in value]
    if isinstance(value, list):
        out, names = [], []
        for item in value:
            if isinstance(item, dict):
                kept = {k: v for k, v in item.items() if k not in ("value", "value_enc")}
                if "value" in item or "value_enc" in item:
                    kept["value"] = ""
                out.append(kept)
                names.append(str(item.get("key") or item.get("name") or ""))
            else:
                out.append(item)
        return out, [n for n in names if n]
    return value, []


def blank_mcp_server(server: Any) -> tuple[Any, list[str]]:
    """An MCP server of the file (``mcp_servers``) with its secret values "" (the ``env`` of its ``stdio_config`` or
    its own, its ``token``, ``auth_token`` and ``custom_headers`` values), and their names ("AWS_SECRET_ACCESS_KEY
    (MCP server local)")."""
    if not isinstance(server, dict):
        return server, []
    label = f"MCP server {server.get('server_name') or server.get('id')}"
    out, names = dict(server), []
    for key in MCP_SECRET_FIELDS:
        if isinstance(out.get(key), str) and out[key]:
            out[key] = ""
            names.append(f"{key} ({label})")
    for key in ("env", "custom_headers"):
        if isinstance(out.get(key), (dict, list)):
            out[key], found = blank_values(out[key])
            names += [f"{n} ({label})" for n in found]
    config = out.get("stdio_config")
    if isinstance(config, dict) and isinstance(config.get("env"), (dict, list)):
        env, found = blank_values(config["env"])
        out["stdio_config"] = {**config, "env": env}
        names += [f"{n} ({label})" for n in found]
    return out, names


def _ids(items: Any) -> list[str]:
    return [str(x) for x in items or [] if isinstance(x, (str, int))]


def agent_document(agent: JSON, data: JSON, *, first: bool, referenced: dict[str, set[str]]) -> JSON:
    """The document kept for ``agent`` (a dict of the file's ``agents``). ``referenced``: ids any agent uses."""
    file_id = str(agent.get("id"))
    fields = {k: v for k, v in agent.items() if k not in NATIVE_AGENT_FIELDS}
    env_names: list[str] = []
    for key in ENV_FIELDS:
        if key in fields:
            fields[key], names = blank_values(fields[key])
            env_names += [n for n in names if n not in env_names]  # Letta lists a variable in both fields
    tool_ids = set(_ids(agent.get("tool_ids")))
    tools = [t for t in data.get("tools") or [] if str(t.get("id")) in tool_ids]
    group_ids = set(_ids(agent.get("group_ids")))
    groups = [g for g in data.get("groups") or [] if _in_group(g, file_id, group_ids)]
    files_agents = [fa for fa in agent.get("files_agents") or [] if isinstance(fa, dict)]
    source_ids = set(_ids(agent.get("source_ids"))) | set(_ids(agent.get("folder_ids")))
    source_ids |= {str(fa.get("source_id")) for fa in files_agents if fa.get("source_id")}
    file_ids = {str(fa.get("file_id")) for fa in files_agents if fa.get("file_id")}
    sources = [s for s in data.get("sources") or [] if str(s.get("id")) in source_ids]
    files = [
        f for f in data.get("files") or [] if str(f.get("id")) in file_ids or str(f.get("source_id")) in source_ids
    ]
    doc: JSON = {
        "format": FORMAT,
        "file_id": file_id,
        "agent": fields,
        "tools": tools,
        "groups": groups,
        "sources": sources,
        "files": files,
        "blocks": {},
        "unlogged_messages": [],
        "env_names": env_names,
    }
    known_groups = {str(g.get("id")) for g in data.get("groups") or []}
    dangling = sorted(group_ids - known_groups)
    if dangling:
        doc["dangling_group_ids"] = dangling
    if first:
        orphans: JSON = {}
        for key in ("blocks", "tools", "groups", "files", "sources"):
            left = [x for x in data.get(key) or [] if str(x.get("id")) not in referenced.get(key, set())]
            if left:
                orphans[key] = left
        if isinstance(data.get("mcp_servers"), list) and data["mcp_servers"]:
            servers = [blank_mcp_server(x) for x in data["mcp_servers"]]
            orphans["mcp_servers"] = [x for x, _ in servers]
            doc["env_names"].extend(n for _, names in servers for n in names)
        elif data.get("mcp_servers"):
            orphans["mcp_servers"] = data["mcp_servers"]
        if data.get("skills"):
            orphans["skills"] = data["skills"]
        if isinstance(data.get("metadata"), dict):
            orphans["file_metadata"] = data["metadata"]
        doc["orphans"] = orphans
    return doc


def _in_group(g: JSON, file_id: str, group_ids: set[str]) -> bool:
    manager = g.get("manager_config")
    config: dict[str, Any] = manager if isinstance(manager, dict) else {}
    return (
        str(g.get("id")) in group_ids
        or file_id in _ids(g.get("agent_ids"))
        or str(config.get("manager_agent_id")) == file_id
    )


def referenced_ids(data: JSON) -> dict[str, set[str]]:
    """Ids of blocks, tools, groups, files and sources that some agent of the file uses."""
    out: dict[str, set[str]] = {k: set() for k in ("blocks", "tools", "groups", "files", "sources")}
    for a in data.get("agents") or []:
        if not isinstance(a, dict):
            continue
        out["blocks"] |= set(_ids(a.get("block_ids")))
        out["tools"] |= set(_ids(a.get("tool_ids")))
        fid = str(a.get("id"))
        out["groups"] |= {
            str(g.get("id")) for g in data.get("groups") or [] if _in_group(g, fid, set(_ids(a.get("group_ids"))))
        }
        fas = [fa for fa in a.get("files_agents") or [] if isinstance(fa, dict)]
        srcs = (
            set(_ids(a.get("source_ids"))) | set(_ids(a.get("folder_ids"))) | {str(fa.get("source_id")) for fa in fas}
        )
        out["sources"] |= srcs
        out["files"] |= {str(fa.get("file_id")) for fa in fas}
        out["files"] |= {str(f.get("id")) for f in data.get("files") or [] if str(f.get("source_id")) in srcs}
    return out  # a group's shared block that no agent lists is kept with the first agent, as unreferenced


def block_extras(block: JSON, stored: JSON) -> JSON:
    """A Letta block's fields tiermem does not hold, and under ``_native`` each held field whose value tiermem
    stored differently (a limit raised to fit the value, a null description): [the file's value, the stored one]."""
    extras = {k: v for k, v in block.items() if k not in NATIVE_BLOCK_FIELDS}
    changed = {k: [block.get(k), v] for k, v in stored.items() if k in block and block.get(k) != v}
    if changed:
        extras["_native"] = changed
    return extras


def parse(metadata: dict[str, str]) -> JSON | None:
    raw = metadata.get(KEY)
    if not raw:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def summary(doc: JSON | None) -> JSON:
    """What the document keeps that tiermem does not run, for ``agents show`` and the import report."""
    if not doc:
        return {}
    agent = doc.get("agent") or {}
    out: JSON = {}
    custom = [t for t in doc.get("tools") or [] if t.get("name") not in KNOWN_TOOLS]
    if custom:
        out["tools"] = [f"{t.get('name')} ({t.get('tool_type') or t.get('source_type') or 'custom'})" for t in custom]
    if agent.get("tool_rules"):
        out["tool_rules"] = [
            f"{r.get('type')}: {r.get('tool_name')}" for r in agent["tool_rules"] if isinstance(r, dict)
        ]
    if doc.get("env_names"):
        out["env_var_names"] = list(doc["env_names"])
    if doc.get("files"):
        out["files"] = [
            f"{f.get('file_name') or f.get('original_file_name') or f.get('id')} ({len(f.get('content') or '')} chars)"
            for f in doc["files"]
        ]
    if doc.get("sources"):
        out["sources"] = [str(s.get("name") or s.get("id")) for s in doc["sources"]]
    if doc.get("groups"):
        out["groups"] = [
            f"{g.get('id')} ({(g.get('manager_config') or {}).get('manager_type', 'group')})" for g in doc["groups"]
        ]
    if doc.get("dangling_group_ids"):
        out["dangling_group_ids"] = list(doc["dangling_group_ids"])
    if doc.get("unlogged_messages"):
        roles: dict[str, int] = {}
        for u in doc["unlogged_messages"]:
            role = str((u.get("message") or {}).get("role"))
            roles[role] = roles.get(role, 0) + 1
        out["letta_only_messages"] = [f"{n} {r}" for r, n in sorted(roles.items())]
    orphans = doc.get("orphans") or {}
    for key, items in sorted(orphans.items()):
        if key == "file_metadata" or not items:
            continue
        names = [
            str(x.get("label") or x.get("name") or x.get("server_name") or x.get("file_name") or x.get("id"))
            for x in items
            if isinstance(x, dict)
        ]
        out[f"unreferenced_{key}"] = names
    return out


def summary_lines(name: str, doc: JSON | None) -> list[str]:
    parts = summary(doc)
    if not parts:
        return []
    text = "; ".join(f"{k}: {', '.join(v) if isinstance(v, list) else v}" for k, v in parts.items())
    return [f"{name}: kept for export, not run by tiermem ({text}); see `tiermem agents show {name}`"]
