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
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, get_origin

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel

from ..base.errors import ConflictError, SchemaError, StoreBusyError, StoreError, TiermemError
from ..domain import block_patch, idempotency
from ..domain import blocks as rules
from ..domain.memory import Memory
from .arguments import tidy_schema
from .runtime import runtime_of
from .sdk import schema_changed, tool_manager

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

log = logging.getLogger(__name__)


def tidy_published_schema(server: MCPServer[Any], name: str) -> None:
    """Tidy what tools/list shows of the registered tool ``name``: schemas without titles and ``null`` arms of
    optional arguments, output schemas compacted without loosening them."""
    tool = tool_manager(server).get_tool(name)
    if tool is None:
        return
    tool.parameters = tidy_schema(tool.parameters)
    if tool.fn_metadata.output_schema is not None:
        tool.fn_metadata.output_schema = tidy_output(tool.fn_metadata.output_schema)
        schema_changed(tool)


def tidy_output(schema: Any) -> Any:
    """Compact an output schema without loosening it: titles go, ``anyOf`` of plain types becomes a type list."""
    if isinstance(schema, list):
        return [tidy_output(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: tidy_output(v) for k, v in schema.items() if not (k == "title" and isinstance(v, str))}
    arms = out.get("anyOf")
    if isinstance(arms, list) and all(isinstance(a, dict) and set(a) == {"type"} for a in arms):
        out.pop("anyOf")
        out["type"] = [a["type"] for a in arms]
    if out.get("default", 0) is None:
        out.pop("default")
    return out


def returns_structured(fn: Callable[..., Any]) -> bool:
    return get_origin(inspect.signature(fn, eval_str=True).return_annotation) is Annotated


def structured(data: dict[str, Any], text: str | None = None) -> CallToolResult:
    """A result with structured content and, for older clients, a text block (by default its JSON)."""
    shown = text if text is not None else json.dumps(data, ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=shown)], structured_content=data)


_ENVELOPE = "tiermem/result"


def _stored(result: str | CallToolResult) -> str:
    if isinstance(result, CallToolResult):
        text = "".join(getattr(c, "text", "") for c in result.content)
        return json.dumps({_ENVELOPE: 1, "text": text, "structured": result.structured_content}, ensure_ascii=False)
    return result


def _replayed(prior: str, is_structured: bool) -> str | CallToolResult:
    if not is_structured:
        return prior
    data = json.loads(prior)
    return structured(data["structured"], data["text"])


def idempotent(name: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Add an optional ``idempotency_key``: a retried call with the same key returns the first result, writing nothing,
    in whichever process it lands (the key is claimed in the core store first: ``domain/idempotency.py``)."""
    sig = inspect.signature(fn, eval_str=True)
    is_structured = get_origin(sig.return_annotation) is Annotated
    key_param = inspect.Parameter(
        "idempotency_key", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=str | None
    )
    locks: dict[str, list[Any]] = {}  # key -> [lock, callers using it]; empty once no call uses a key

    @functools.wraps(fn)
    async def wrapper(*args: Any, idempotency_key: str | None = None, **kwargs: Any) -> Any:
        if idempotency_key is None:
            return await fn(*args, **kwargs)
        import anyio

        rt = runtime_of(kwargs["ctx"])
        plain = {k: v for k, v in kwargs.items() if k != "ctx"}
        digest = hashlib.sha256(json.dumps(plain, sort_keys=True, default=_jsonable).encode()).hexdigest()

        async def attempt() -> tuple[bool, Any]:
            """One try at the key: (True, the result) when this call got the first result or wrote; (False, the
            claim another call holds) otherwise. Shielded: a claim this call stored is always finished or released
            (cancelled, it would hold the key until it is stale)."""
            with anyio.CancelScope(shield=True):
                got = await rt.call(None, idempotency.claim, name, idempotency_key, digest)
                if got.mine is None:
                    return (True, _replayed(got.result, is_structured)) if got.result is not None else (False, got)
                # Once started, the write runs to its end in its worker thread whatever becomes of the request (a
                # client's cancel or timeout cannot stop it), so its result is kept under the key even then: the
                # retry a timeout calls for gets that result instead of writing a second time.
                try:
                    result = await fn(*args, **kwargs)
                except BaseException:
                    await rt.call(None, idempotency.release, got.mine)
                    raise
                if isinstance(result, CallToolResult) and result.is_error:
                    await rt.call(None, idempotency.release, got.mine)
                else:
                    await rt.call(None, idempotency.finish, got.mine, _stored(result))
            return True, result

        entry = locks.setdefault(idempotency_key, [anyio.Lock(), 0])
        entry[1] += 1  # callers holding or waiting for this key's lock; the last one out drops it
        try:
            async with entry[0]:  # a retry racing its original in this process waits for it without polling
                deadline = anyio.current_time() + idempotency.WAIT_SECONDS
                while True:
                    done, value = await attempt()
                    if done:
                        return value
                    if anyio.current_time() >= deadline:  # another process holds the key: its write goes on
                        raise idempotency.busy(idempotency_key, value.holder)
                    await anyio.sleep(value.poll)
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                locks.pop(idempotency_key, None)

    wrapper.__signature__ = sig.replace(parameters=[*sig.parameters.values(), key_param])  # type: ignore[attr-defined]
    return wrapper


def _jsonable(value: Any) -> Any:
    return value.model_dump() if hasattr(value, "model_dump") else str(value)


# Storage errors that are a refusal of the store's state, not a failure: other writers kept committing
# (``StoreBusyError``: a reembed running, a contended table), or the store is of another schema or model (a reembed
# switched it). Logged in one line: the traceback would say nothing the message does not.
REFUSALS = (StoreBusyError, SchemaError)


def model_errors(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Return our errors as tool errors whose text is exactly the message (no SDK prefix). A storage failure is
    also logged (to stderr) with the library's own error under it, for whoever runs the server; a refusal
    (``REFUSALS``) in one line."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except TiermemError as exc:
            if isinstance(exc, REFUSALS):
                log.warning("tool %s refused: %s", fn.__name__, exc)
            elif isinstance(exc, StoreError):
                log.warning("tool %s failed: %s", fn.__name__, exc, exc_info=exc)
            return CallToolResult(content=[TextContent(type="text", text=str(exc))], is_error=True)

    return wrapper


async def _edit(ctx: Context[Any, Any], label: str, edit: rules.Edit) -> str:
    """``edit`` applied to the block ``label``: a ``memory_rethink`` is refused over a version the client's model has
    not seen (``sightings.py``); the block as the result shows it is seen from then on. A refused rethink shows the
    block as it is now, which counts as seen: the model writes its rethink again from it (behind a balancer, where
    each request may reach another replica, a view and a rethink served by two of them would otherwise never meet)."""
    rt = runtime_of(ctx)
    since = rt.sightings.mark()
    seen = rt.sightings.of(ctx)
    try:
        block = await rt.call(ctx, Memory.edit, label, edit, seen=seen)
    except ConflictError as exc:
        if seen is None or not isinstance(edit, rules.Rethink):
            raise
        since = rt.sightings.mark()
        now = await rt.call(ctx, Memory.block, label)
        rt.sightings.saw(ctx, [now], since)
        raise ConflictError(
            f"{exc}\n\nThe block as it is now (version {now.version}), shown whole:\n{rules.render_block(now)}"
        ) from exc
    rt.sightings.saw(ctx, [block], since)
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


async def memory_replace(label: str, old_string: str, new_string: str, ctx: Context[Any, Any]) -> str:
    """Replace one exact, unique piece of text in a memory block.

    `old_string` must appear verbatim exactly once (include surrounding words to make it
    unique); `new_string` replaces it ("" deletes it). Never include line numbers ('1→')
    or the line-number warning. Returns the block's full new value.
    """
    return await _edit(ctx, label, rules.StrReplace(old_string, new_string))


async def memory_insert(label: str, new_string: str, ctx: Context[Any, Any], insert_line: int = -1) -> str:
    """Insert text into a memory block at a line.

    `insert_line`: -1 appends after the last line (default), 0 inserts before the first line,
    k inserts after line k. Returns the block's full new value.
    """
    return await _edit(ctx, label, rules.Insert(new_string, insert_line))


async def memory_rethink(label: str, new_memory: str, ctx: Context[Any, Any]) -> str:
    """Rewrite a whole memory block with `new_memory`.

    For reorganising or condensing a block; for small changes prefer memory_replace or
    memory_insert. Returns the block's full new value.
    """
    return await _edit(ctx, label, rules.Rethink(new_memory))


async def memory_apply_patch(label: str, patch: str, ctx: Context[Any, Any]) -> str:
    """Apply a unified-diff style patch to a memory block.

    Lines starting with ' ' are context, '-' removes a line, '+' adds one; '@@' separates
    hunks. Each hunk's context and removed lines must match exactly one place; a hunk of
    only '+' lines appends them. Returns the block's full new value.
    Several blocks at once: label "", and each part starts with `*** Update Block: <label>`
    (then hunks) or `*** Add Block: <label>` (optional `Description: <text>` line, then '+'
    lines); `*** Move to: <new label>` after a part renames its block. All or nothing.
    """
    if block_patch.is_multi_block(patch):
        return await runtime_of(ctx).call(ctx, block_patch.apply_block_patch, patch)
    return await _edit(ctx, label, rules.Patch(patch))


class BlockView(BaseModel):
    label: str
    description: str
    value: str
    chars: int
    limit: int
    read_only: bool
    version: int


class CoreView(BaseModel):
    blocks: list[BlockView]


class VersionView(BaseModel):
    version: int
    time: str
    operation: str
    actor: str
    value: str


class History(BaseModel):
    label: str
    versions: list[VersionView]


async def core_memory_view(ctx: Context[Any, Any], line_numbers: bool = False) -> Annotated[CallToolResult, CoreView]:
    """Return your core memory blocks rendered as in Letta, with <memory_metadata>.

    Use it at the start of a conversation when the host does not show memory://core.
    `line_numbers=true` prefixes each line with 'N→' to help place edits (never copy them into edits).
    """
    rt = runtime_of(ctx)
    since = rt.sightings.mark()
    text, blocks = await rt.call(ctx, Memory.core_memory, line_numbers=line_numbers)
    rt.sightings.saw(ctx, [b for b in blocks if rules.is_pinned(b)], since)  # the text names a detached block alone
    data = {
        "blocks": [
            {
                "label": b.label,
                "description": b.description,
                "value": b.value,
                "chars": len(b.value),
                "limit": b.limit,
                "read_only": b.read_only,
                "version": b.version,
            }
            for b in blocks
        ]
    }
    return structured(data, text)


async def memory_open(label: str, ctx: Context[Any, Any], line_numbers: bool = False) -> str:
    """Open one memory block by label: its value, description and limits.

    Blocks under <memory_directory> (detached) are not shown in full: open one when it is relevant,
    then edit it like any block. Labels may be paths such as 'notes/projects'.
    """
    rt = runtime_of(ctx)
    since = rt.sightings.mark()
    block = await rt.call(ctx, Memory.open_block, label)
    rt.sightings.saw(ctx, [block], since)
    return rules.render_block(block, line_numbers=line_numbers)


async def memory_history(label: str, ctx: Context[Any, Any], limit: int = 10) -> Annotated[CallToolResult, History]:
    """List a block's earlier versions, newest first (version, time, operation, actor, value).

    Use with memory_revert to undo a bad edit.
    """
    versions = await runtime_of(ctx).call(ctx, Memory.history, label, limit)
    items = [
        {
            "version": v.version,
            "time": v.created_at.isoformat(timespec="seconds"),
            "operation": v.operation,
            "actor": v.actor,
            "value": v.value,
        }
        for v in versions
    ]
    return structured({"label": label, "versions": items})


async def memory_revert(label: str, version: int, ctx: Context[Any, Any]) -> str:
    """Restore a block's value from an earlier version (see memory_history).

    The revert is itself a new version, so nothing is lost. Returns the block's new value.
    """
    rt = runtime_of(ctx)
    since = rt.sightings.mark()
    block, written = await rt.call(ctx, Memory.revert_version, label, version)
    rt.sightings.saw(ctx, [block], since)
    if written:
        return block.value
    return f"Block {label!r} already holds version {version}'s value; nothing was written. Its value:\n{block.value}"
