"""The ``memory`` tool: Anthropic's memory-tool commands over the same core memory blocks.

Each block is a file ``/memories/<label>``; ``/memories`` is the directory that holds them
(a label with ``/`` in it, such as ``notes/projects``, lists as a sub-directory). Commands:
``view``, ``create``, ``str_replace``, ``insert``, ``delete``, ``rename``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel

from ..base.config import BlockSpec
from ..base.errors import NotFoundError, ValidationError
from ..base.records import check_text
from ..domain import blocks as rules
from .runtime import runtime_of

if TYPE_CHECKING:
    from ..base.records import Block
    from ..domain.memory import Memory

ROOT = rules.MEMORY_PATH_PREFIX.rstrip("/")  # "/memories"
Command = Literal["view", "create", "str_replace", "insert", "delete", "rename"]


class MemoryEntry(BaseModel):
    path: str
    kind: Literal["file", "directory"]
    chars: int
    limit: int | None = None  # a directory has none
    read_only: bool
    description: str


class MemoryResult(BaseModel):
    """What the ``memory`` tool returns as structured content (its text stays what Anthropic's tool returns)."""

    command: str
    path: str
    kind: Literal["file", "directory", "message"]
    content: str | None = None  # a file's whole value (view, create, str_replace, insert)
    entries: list[MemoryEntry] | None = None  # a directory's files and sub-directories (view)
    message: str | None = None  # what happened (create, delete, rename)


async def memory_tool(
    command: Command,
    ctx: Context[Any, Any],
    path: str | None = None,
    view_range: list[int] | None = None,
    file_text: str | None = None,
    description: str | None = None,
    old_str: str | None = None,
    new_str: str | None = None,
    insert_line: int | None = None,
    insert_text: str | None = None,
    old_path: str | None = None,
    new_path: str | None = None,
) -> Annotated[CallToolResult, MemoryResult]:
    """Your core memory blocks as files: /memories/<label>. Commands and their arguments:
    - view: path (/memories lists the files; a file shows numbered lines), optional view_range [start, end]
    - create: path, file_text, optional description
    - str_replace: path, old_str (unique, verbatim), new_str ("" deletes old_str)
    - insert: path, insert_line (0 = before line 1, k = after line k, -1 = end), insert_text
    - delete: path (its history is kept)
    - rename: old_path, new_path; or path + description to change the description
    Never copy the line numbers shown by view into edits.
    """
    args = {
        "command": command,
        "path": path,
        "view_range": view_range,
        "file_text": file_text,
        "description": description,
        "old_str": old_str,
        "new_str": new_str,
        "insert_line": insert_line,
        "insert_text": insert_text,
        "old_path": old_path,
        "new_path": new_path,
    }
    rt = runtime_of(ctx)
    since = rt.sightings.mark()
    text, data, shown = await rt.call(ctx, run_command, args)
    rt.sightings.saw(ctx, shown, since)  # a file shown whole is seen by the model (a later rethink is written from it)
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=data.model_dump(mode="json", exclude_none=True),
    )


def run_command(m: Memory, agent_id: str, args: dict[str, Any]) -> tuple[str, MemoryResult, list[Block]]:
    """Run one ``memory`` command; returns (the text a model reads, the structured result, the blocks it showed whole)."""
    from ..domain.memory import current_actor  # runs in the worker thread, after the store has opened

    command = args["command"]

    def need(name: str) -> Any:
        if args.get(name) is None:
            example = {
                "path": "/memories/human",
                "file_text": "Goal: ship v1",
                "old_str": "ship",
                "new_str": "ship v1",
                "insert_text": "Likes tea",
                "old_path": "/memories/notes",
                "new_path": "/memories/project",
                "description": "Project notes",
            }.get(name, "...")
            raise ValidationError(f"memory {command} needs `{name}`, for example {name}={example!r}.")
        return args[name]

    def file(path: str, value: str, message: str | None = None) -> MemoryResult:
        return MemoryResult(command=command, path=path, kind="file", content=value, message=message)

    if command == "view":
        return view(m, agent_id, need("path"), args.get("view_range"))
    if command == "create":
        path = need("path")
        label = rules.label_from_path(path)
        for name in ("file_text", "description"):  # checked here too, so that an error names the argument
            if args.get(name) is not None:
                check_text(args[name], name, m.max_content_chars)
        if args.get("file_text") is not None:  # the numbers view shows, as insert and str_replace refuse them
            rules.reject_line_numbers("file_text", args["file_text"], view=True)
        spec = BlockSpec(label=label, value=args.get("file_text") or "", description=args.get("description") or "")
        block = m.create_block(agent_id, spec)
        text = f"Created memory block {block.label!r} ({len(block.value)} of {block.limit} characters)."
        return text, file(path, block.value, text), []
    if command == "str_replace":
        path = need("path")
        label = rules.label_from_path(path)
        replace = rules.StrReplace(need("old_str"), need("new_str"), args=rules.MEMORY_TOOL_ARGS)  # "" deletes
        block = m.edit(agent_id, label, replace)
        return block.value, file(path, block.value), [block]
    if command == "insert":
        path = need("path")
        label = rules.label_from_path(path)
        line = args.get("insert_line")
        insert = rules.Insert(need("insert_text"), -1 if line is None else line, args=rules.MEMORY_TOOL_ARGS)
        block = m.edit(agent_id, label, insert)
        return block.value, file(path, block.value), [block]
    if command == "delete":
        path = need("path")
        label = rules.label_from_path(path)
        m.delete_block(agent_id, label)
        text = f"Deleted memory block {label!r} (its history is kept)."
        return text, MemoryResult(command=command, path=path, kind="message", message=text), []
    if command == "rename":
        if args.get("old_path") is not None or args.get("new_path") is not None:
            old = rules.label_from_path(need("old_path"))
            new = rules.label_from_path(need("new_path"))
            m.update_block(agent_id, old, new_label=new, actor=current_actor.get(), operation="rename")
            text = f"Renamed memory block {old!r} to {new!r}."
            return text, MemoryResult(command=command, path=args["new_path"], kind="message", message=text), []
        path = need("path")
        label = rules.label_from_path(path)
        m.update_block(
            agent_id, label, description=need("description"), actor=current_actor.get(), operation="describe"
        )
        text = f"Updated the description of memory block {label!r}."
        return text, MemoryResult(command=command, path=path, kind="message", message=text), []
    raise ValidationError(
        f"Unknown memory command {command!r}; use view, create, str_replace, insert, delete or rename."
    )


def view(m: Memory, agent_id: str, path: str, view_range: list[int] | None) -> tuple[str, MemoryResult, list[Block]]:
    """``/memories`` (or a sub-directory): the files in it; a file: its lines, numbered from 1."""
    if not isinstance(path, str) or not (path == ROOT or path.startswith(ROOT + "/")):
        raise ValidationError(
            f"Invalid path {path!r}: memory paths look like '/memories' or '/memories/<label>', "
            "for example '/memories/human'."
        )
    rel = path[len(ROOT) :].strip("/")
    blocks = m.blocks(agent_id)
    for b in blocks:
        if rel and b.label == rel:
            return (*_view_file(path, b, view_range), [b] if view_range is None else [])  # a range: not the whole
    inside = [b for b in blocks if not rel or b.label.startswith(rel + "/")]
    if rel and not inside:
        files = ", ".join(f"{ROOT}/{b.label}" for b in blocks) or "none yet"
        raise NotFoundError(f"The path {path} does not exist. Files in {ROOT}: {files}. View {ROOT} to list them.")
    if view_range is not None:
        raise ValidationError(f"{path} is a directory; view_range applies to files only.")
    return (*_view_directory(f"{ROOT}/{rel}" if rel else ROOT, rel, inside), [])


def _view_file(path: str, block: Block, view_range: list[int] | None) -> tuple[str, MemoryResult]:
    lines = block.value.split("\n")
    start, end = 1, len(lines)
    if view_range is not None:
        if len(view_range) != 2 or any(isinstance(n, bool) or not isinstance(n, int) for n in view_range):
            raise ValidationError(
                "view_range must be two line numbers [start, end], e.g. [1, 10]; end -1 means the last line."
            )
        start, end = view_range[0], (len(lines) if view_range[1] == -1 else view_range[1])
        if not 1 <= start <= len(lines) or not start <= end <= len(lines):
            raise ValidationError(
                f"Invalid view_range {view_range}: {path} has {len(lines)} lines; use 1 <= start <= end <= {len(lines)}, "
                "or end -1 for the last line."
            )
    numbered = "\n".join(f"{n:6}\t{lines[n - 1]}" for n in range(start, end + 1))
    text = f"Here's the content of {path} with line numbers:\n{numbered}"
    return text, MemoryResult(command="view", path=path, kind="file", content=block.value)


def _view_directory(path: str, rel: str, blocks: list[Block]) -> tuple[str, MemoryResult]:
    entries: list[MemoryEntry] = []
    dirs: dict[str, list[Block]] = {}
    for b in blocks:
        rest = b.label[len(rel) + 1 :] if rel else b.label
        head, sep, _ = rest.partition("/")
        if sep:
            dirs.setdefault(head, []).append(b)
        else:
            entries.append(
                MemoryEntry(
                    path=f"{path}/{rest}",
                    kind="file",
                    chars=len(b.value),
                    limit=b.limit,
                    read_only=b.read_only,
                    description=b.description,
                )
            )
    for head, group in dirs.items():
        entries.append(
            MemoryEntry(
                path=f"{path}/{head}",
                kind="directory",
                chars=sum(len(b.value) for b in group),
                limit=None,
                read_only=False,
                description=f"{len(group)} files",
            )
        )
    entries.sort(key=lambda e: e.path)
    lines = [f"Here are the files in {path} (one per memory block; size in characters of its limit):"]
    for e in entries:
        size = f"{e.chars}/{e.limit}" if e.kind == "file" else f"{e.chars}"
        flag = " read-only" if e.read_only else ""
        kind = "dir " if e.kind == "directory" else ""
        lines.append(f"{size}\t{kind}{e.path}{flag}" + (f"\t{e.description}" if e.description else ""))
    if not entries:
        lines.append(f"(empty: create a file with command create, path {ROOT}/<label>)")
    return "\n".join(lines), MemoryResult(command="view", path=path, kind="directory", entries=entries)
