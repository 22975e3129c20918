"""MCP tool adapters. Each parses arguments, makes one ``Memory`` call, returns a compact result.

The docstrings are the contract the model reads: what the tool is for and when to use it.
Tools are module-level functions; each finds the server's ``Runtime`` through its ``ctx``
(``runtime_of``), so a tool can be imported and called on its own. Nothing here imports the
storage engine: ``initialize`` and ``tools/list`` need only these signatures.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent, ToolAnnotations

from . import blocks as rules
from .config import BlockSpec
from .errors import TiermemError, ValidationError
from .runtime import runtime_of

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from .memory import Memory

READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
ADD = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
CHANGE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)
SET = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)


def _pick(primary: str | None, alias: str | None, name: str, alias_name: str, *, required: bool = True) -> str:
    if primary is not None and alias is not None and primary != alias:
        raise ValidationError(f"Give {name} or its alias {alias_name}, not both with different values.")
    value = primary if primary is not None else alias
    if value is None:
        if required:
            raise ValidationError(f"Missing argument {name} (alias {alias_name}).")
        return ""
    return value


Entry = tuple[Callable[..., Any], ToolAnnotations, str]


def register_tools(server: MCPServer[Any], table: dict[str, Entry], names: list[str]) -> None:
    """Register the chosen tools (names already resolved from presets and groups) from ``table``."""
    for name in names:
        if name not in table:
            continue  # e.g. agent_chat, registered by the agent loop when enabled
        fn, annotations, title = table[name]
        if not annotations.read_only_hint:
            fn = idempotent(name, fn)
        server.add_tool(model_errors(fn), name=name, title=title, annotations=annotations, structured_output=False)


def idempotent(name: str, fn: Callable[..., Awaitable[str]]) -> Callable[..., Awaitable[str]]:
    """Add an optional ``idempotency_key``: a retried call with the same key returns the first result, writing nothing."""
    sig = inspect.signature(fn, eval_str=True)
    key_param = inspect.Parameter("idempotency_key", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=str | None)
    locks: dict[str, list[Any]] = {}  # key -> [lock, callers using it]; empty once no call uses a key

    @functools.wraps(fn)
    async def wrapper(*args: Any, idempotency_key: str | None = None, **kwargs: Any) -> str:
        if idempotency_key is None:
            return await fn(*args, **kwargs)
        import anyio

        rt = runtime_of(kwargs["ctx"])
        plain = {k: v for k, v in kwargs.items() if k != "ctx"}
        digest = hashlib.sha256(json.dumps(plain, sort_keys=True, default=_jsonable).encode()).hexdigest()
        entry = locks.setdefault(idempotency_key, [anyio.Lock(), 0])
        entry[1] += 1  # callers holding or waiting for this key's lock; the last one out drops it
        try:
            async with entry[0]:  # a retry racing its original waits for it instead of writing twice
                prior = await rt.call(None, lambda m, a: m.replay(a, name, idempotency_key, digest))
                if prior is not None:
                    return prior
                result = await fn(*args, **kwargs)
                await rt.call(None, lambda m, a: m.remember(a, name, idempotency_key, digest, result))
                return result
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                locks.pop(idempotency_key, None)

    wrapper.__signature__ = sig.replace(parameters=[*sig.parameters.values(), key_param])  # type: ignore[attr-defined]
    return wrapper


def _jsonable(value: Any) -> Any:
    return value.model_dump() if hasattr(value, "model_dump") else str(value)


def model_errors(fn: Callable[..., Awaitable[str]]) -> Callable[..., Awaitable[str | CallToolResult]]:
    """Return our errors as tool errors whose text is exactly the message (no SDK prefix)."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> str | CallToolResult:
        try:
            return await fn(*args, **kwargs)
        except TiermemError as exc:
            return CallToolResult(content=[TextContent(type="text", text=str(exc))], is_error=True)

    return wrapper


async def _edit(ctx: Context[Any, Any], label: str, edit: rules.Edit) -> str:
    block = await runtime_of(ctx).call(ctx, lambda m, a: m.edit(a, label, edit))
    return block.value


async def core_memory_append(label: str, content: str, ctx: Context[Any, Any]) -> str:
    """Append to the contents of a core memory block (a new line is added before `content`).

    Use it to add a fact to a block, e.g. label="human", content="Prefers tea over coffee."
    Returns the block's full new value.
    """
    return await _edit(ctx, label, rules.Append(content))


async def core_memory_replace(label: str, old_content: str, new_content: str, ctx: Context[Any, Any]) -> str:
    """Replace every occurrence of `old_content` in a core memory block with `new_content`.

    An empty `new_content` deletes the text. `old_content` must match exactly.
    Returns the block's full new value.
    """
    return await _edit(ctx, label, rules.ReplaceAll(old_content, new_content))


async def memory_replace(
    label: str,
    ctx: Context[Any, Any],
    old_string: str | None = None,
    new_string: str | None = None,
    old_str: str | None = None,
    new_str: str | None = None,
) -> str:
    """Replace one exact, unique piece of text in a memory block.

    `old_string` must appear verbatim exactly once (include surrounding words to make it
    unique); `new_string` replaces it (empty deletes it). Never include line numbers
    ('1→') or the line-number warning. `old_str`/`new_str` are accepted as aliases.
    Returns the block's full new value.
    """
    old = _pick(old_string, old_str, "old_string", "old_str")
    new = _pick(new_string, new_str, "new_string", "new_str", required=False)
    return await _edit(ctx, label, rules.StrReplace(old, new))


async def memory_insert(
    label: str,
    ctx: Context[Any, Any],
    new_string: str | None = None,
    insert_line: int = -1,
    new_str: str | None = None,
) -> str:
    """Insert text into a memory block at a line.

    `insert_line`: -1 appends after the last line (default), 0 inserts before the first line,
    k inserts after line k. `new_str` is accepted as an alias of `new_string`.
    Returns the block's full new value.
    """
    text = _pick(new_string, new_str, "new_string", "new_str")
    return await _edit(ctx, label, rules.Insert(text, insert_line))


async def memory_rethink(label: str, new_memory: str, ctx: Context[Any, Any]) -> str:
    """Rewrite a whole memory block with `new_memory`.

    For reorganising or condensing a block; for small changes prefer memory_replace or
    memory_insert. Returns the block's full new value.
    """
    return await _edit(ctx, label, rules.Rethink(new_memory))


async def memory_apply_patch(label: str, patch: str, ctx: Context[Any, Any]) -> str:
    """Apply a unified-diff style patch to a memory block.

    Lines starting with ' ' are context, '-' removes a line, '+' adds one; '@@' separates
    hunks. Each hunk's context and removed lines must match exactly one place.
    Returns the block's full new value.
    """
    return await _edit(ctx, label, rules.Patch(patch))


async def core_memory_view(ctx: Context[Any, Any], line_numbers: bool = False) -> str:
    """Return your core memory blocks rendered as in Letta, with <memory_metadata>.

    Use it at the start of a conversation when the host does not show memory://core.
    `line_numbers=true` prefixes each line with 'N→' to help place edits (never copy them into edits).
    """
    return await runtime_of(ctx).call(ctx, lambda m, a: m.render_core(a, line_numbers=line_numbers))


async def memory_history(label: str, ctx: Context[Any, Any], limit: int = 10) -> str:
    """List a block's earlier versions, newest first (version, time, operation, actor, value).

    Use with memory_revert to undo a bad edit.
    """
    versions = await runtime_of(ctx).call(ctx, lambda m, a: m.history(a, label, limit))
    return json.dumps(
        [
            {
                "version": v.version,
                "time": v.created_at.isoformat(timespec="seconds"),
                "operation": v.operation,
                "actor": v.actor,
                "value": v.value,
            }
            for v in versions
        ],
        ensure_ascii=False,
    )


async def memory_revert(label: str, version: int, ctx: Context[Any, Any]) -> str:
    """Restore a block's value from an earlier version (see memory_history).

    The revert is itself a new version, so nothing is lost. Returns the block's new value.
    """
    block = await runtime_of(ctx).call(ctx, lambda m, a: m.revert(a, label, version))
    return block.value


async def memory_tool(
    command: Literal["create", "str_replace", "insert", "delete", "rename"],
    ctx: Context[Any, Any],
    path: str | None = None,
    file_text: str | None = None,
    description: str | None = None,
    old_str: str | None = None,
    new_str: str | None = None,
    insert_line: int | None = None,
    insert_text: str | None = None,
    old_path: str | None = None,
    new_path: str | None = None,
) -> str:
    """Manage memory blocks as files under /memories/<label>.

    - create: path, file_text (initial value), description -> a new block
    - str_replace: path, old_str (unique, verbatim), new_str
    - insert: path, insert_line (0 = before first line, k = after line k, -1 = end), insert_text
    - delete: path -> detaches the block (its history is kept)
    - rename: old_path + new_path to relabel, or path + description to change the description
    """
    args = {
        "command": command,
        "path": path,
        "file_text": file_text,
        "description": description,
        "old_str": old_str,
        "new_str": new_str,
        "insert_line": insert_line,
        "insert_text": insert_text,
        "old_path": old_path,
        "new_path": new_path,
    }
    return await runtime_of(ctx).call(ctx, lambda m, a: _memory_command(m, a, args))


CORE_TOOLS: dict[str, Entry] = {
    "core_memory_append": (core_memory_append, ADD, "Append to a memory block"),
    "core_memory_replace": (core_memory_replace, CHANGE, "Replace text in a memory block"),
    "memory_replace": (memory_replace, CHANGE, "Replace unique text in a memory block"),
    "memory_insert": (memory_insert, ADD, "Insert lines into a memory block"),
    "memory_rethink": (memory_rethink, SET, "Rewrite a memory block"),
    "memory_apply_patch": (memory_apply_patch, CHANGE, "Patch a memory block"),
    "memory": (memory_tool, CHANGE, "Manage memory blocks as /memories files"),
    "core_memory_view": (core_memory_view, READ, "View core memory"),
    "memory_history": (memory_history, READ, "Block version history"),
    "memory_revert": (memory_revert, CHANGE, "Revert a block to an earlier version"),
}


def _memory_command(m: Memory, agent_id: str, args: dict[str, Any]) -> str:
    from .memory import current_actor  # runs in the worker thread, after the store has opened

    command = args["command"]

    def need(name: str) -> Any:
        if args.get(name) is None:
            raise ValidationError(f"memory {command} needs `{name}`.")
        return args[name]

    if command == "create":
        label = rules.label_from_path(need("path"))
        spec = BlockSpec(label=label, value=args.get("file_text") or "", description=args.get("description") or "")
        block = m.create_block(agent_id, spec)
        return f"Created memory block {block.label!r} ({len(block.value)} of {block.limit} characters)."
    if command == "str_replace":
        label = rules.label_from_path(need("path"))
        block = m.edit(agent_id, label, rules.StrReplace(need("old_str"), args.get("new_str") or ""))
        return block.value
    if command == "insert":
        label = rules.label_from_path(need("path"))
        line = args.get("insert_line")
        block = m.edit(agent_id, label, rules.Insert(need("insert_text"), -1 if line is None else line))
        return block.value
    if command == "delete":
        label = rules.label_from_path(need("path"))
        m.delete_block(agent_id, label)
        return f"Deleted memory block {label!r} (its history is kept)."
    if command == "rename":
        if args.get("old_path") is not None or args.get("new_path") is not None:
            old = rules.label_from_path(need("old_path"))
            new = rules.label_from_path(need("new_path"))
            m.update_block(agent_id, old, new_label=new, actor=current_actor.get(), operation="rename")
            return f"Renamed memory block {old!r} to {new!r}."
        label = rules.label_from_path(need("path"))
        m.update_block(agent_id, label, description=need("description"), actor=current_actor.get(), operation="describe")
        return f"Updated the description of memory block {label!r}."
    raise ValidationError(f"Unknown memory command {command!r}; use create, str_replace, insert, delete or rename.")
