"""Letta Code's dialect of the ``memory`` and ``memory_apply_patch`` tools (``memory_tool_dialect = "letta-code"``).

The arguments and the behaviour are Letta Code's (0.32): blocks are memory files named by relative
paths (``system/human.md``, ``reference/Team-Notes.md``; a leading ``memory/`` and the ``.md`` are
optional), ``reason`` is required and becomes the version's message (it is the commit message when a
synced directory receives the edit), ``str_replace`` replaces the first occurrence, ``insert``
makes the text line ``insert_line`` (1-based, clamped), ``delete`` removes a file or a whole folder,
``rename`` moves a file, ``update_description`` changes a description. ``memory_apply_patch`` takes
Letta Code's codex-style patch, applied to each block's file as ``domain.memfs_files`` writes it (the
sync's renderer). What is in the prompt follows the synced directory's layout, decided as Letta Code's
tool decides it (``memfs_files.directory_layout``): blocks under ``system/`` (v1), or at the top (v2, a
root ``MEMORY.md``); a new block elsewhere is detached (listed, opened on demand). A new block's limit
fits its text (Letta Code's tools enforce none), the same for ``create`` and a patch's ``Add File``. A call is
checked in full before its first write (a patch: every file; a path the synced directory's hook cannot read; a file
there that its sync skipped, which Letta Code would find).

Why this module is long: the two tools are one program's (Letta Code's) behaviour and messages, with the checks that
keep a call all or nothing; split, one tool's rules would live in two places.
"""

from __future__ import annotations

import math
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel

from ..base.config import BlockSpec
from ..base.errors import EditError, LabelTakenError, NotFoundError, TiermemError, without_nothing_written
from ..domain import blocks as rules
from ..domain import memfs_files as files
from ..domain import memfs_format as fmt
from .runtime import runtime_of

if TYPE_CHECKING:
    from ..base.records import Block
    from ..domain.memory import Memory

Command = Literal["create", "str_replace", "insert", "delete", "rename", "update_description"]


class FilesResult(BaseModel):
    """What the tools return as structured content."""

    command: str
    paths: list[str]  # the memory files the call changed
    message: str
    versions: dict[str, int] = {}  # label -> its new version (blocks that still exist)


def _root(ctx: Context[Any, Any]) -> str | None:
    return runtime_of(ctx).memory_dir


def _tree(root: str | None) -> files.Tree:
    """The memory directory as Letta Code's memory tools see it: its layout (v1 without a synced directory), files
    written as those tools write them."""
    return files.Tree(files.directory_layout(Path(root)) if root else "v1", agent_repo=True)


def _done(result: FilesResult) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=result.message)], structured_content=result.model_dump(mode="json")
    )


async def memory(
    command: Command,
    reason: str,
    ctx: Context[Any, Any],
    file_path: str | None = None,
    old_path: str | None = None,
    new_path: str | None = None,
    old_string: str | None = None,
    new_string: str | None = None,
    insert_line: float | None = None,
    insert_text: str | None = None,
    description: str | None = None,
    file_text: str | None = None,
) -> Annotated[CallToolResult, FilesResult]:
    """Your memory as files (Letta Code's memory tool). Files under system/ (with a root MEMORY.md index: the files at
    the top) are in your prompt every turn; other files are listed by path and description and opened on demand.
    `reason` (required) is the change's message.
    Paths are relative, like system/human.md or reference/project/team.md. Commands:
    - create: file_path, description, optional file_text
    - str_replace: file_path, old_string (its first occurrence), new_string
    - insert: file_path, insert_line (1-based: the text becomes that line), insert_text
    - delete: file_path (a file, or a folder with everything in it)
    - rename: old_path, new_path
    - update_description: file_path, description
    """
    args = {
        "command": command,
        "reason": reason,
        "file_path": file_path,
        "old_path": old_path,
        "new_path": new_path,
        "old_string": old_string,
        "new_string": new_string,
        "insert_line": insert_line,
        "insert_text": insert_text,
        "description": description,
        "file_text": file_text,
    }
    root = _root(ctx)
    return _done(await runtime_of(ctx).call(ctx, run_command, args, root))


async def memory_apply_patch(reason: str, input: str, ctx: Context[Any, Any]) -> Annotated[CallToolResult, FilesResult]:
    """Apply a codex-style patch to your memory files (Letta Code's memory_apply_patch). `reason` (required) is the
    change's message. `input`: "*** Begin Patch", then any of "*** Add File: <path>" (lines starting with '+'),
    "*** Update File: <path>" (optional "*** Move to: <path>", then '@@' hunks of ' ' context, '-' removed and '+'
    added lines; they apply to the whole file, frontmatter included), "*** Delete File: <path>"; then "*** End Patch".
    """
    root = _root(ctx)
    return _done(await runtime_of(ctx).call(ctx, run_patch, reason, input, root))


# ---------------------------------------------------------------------------
# The commands (run in a worker thread)
# ---------------------------------------------------------------------------


def _need(args: dict[str, Any], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str) or not value.strip():
        raise EditError(f"memory {args['command']}: '{name}' must be a non-empty string")
    return value


def _find(m: Memory, agent_id: str, label: str, shown: str, tool: str = "memory") -> Block:
    try:
        block = m.block(agent_id, label)
    except NotFoundError:
        files = ", ".join(f"{b.label}{fmt.SUFFIX}" for b in m.blocks(agent_id)) or "none"
        raise NotFoundError(f"{tool}: failed to read {shown}: no such memory file. Files: {files}.") from None
    if block.read_only:
        raise EditError(f"{tool}: {shown} is read_only and cannot be modified")
    return block


def run_command(m: Memory, agent_id: str, args: dict[str, Any], root: str | None) -> FilesResult:
    """One ``memory`` call; raises with Letta Code's messages where it has one."""
    from ..domain.memory import current_actor  # after the store has opened

    command = args["command"]
    reason = args.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise EditError("memory: 'reason' must be a non-empty string")
    op = fmt.reason_operation(f"memory {command}", reason)
    actor = current_actor.get()
    tree = _tree(root)

    def label_of(name: str, *, written: bool = True) -> tuple[str, str]:
        """The label a path argument names; ``written``: the call writes that file (its path must be one the synced
        directory's hook can read)."""
        raw = _need(args, name)
        label = fmt.label_of_path(raw, name, root=root)
        fmt.check_label_allowed(label, tree.layout)
        if written:
            _check_committable(label, name, tree, root)
        return label, raw

    if command == "create":
        label, raw = label_of("file_path")
        text = _need(args, "description")
        if any(b.label == label for b in m.blocks(agent_id)) or _skipped_file(m, root, label, tree):
            raise EditError(f"memory create: block already exists at {raw}")
        value = args.get("file_text") or ""
        spec = BlockSpec(
            label=label,
            value=value,
            description=fmt.one_line(text),
            limit=files.fit_limit(value),
            metadata=files.pinned_meta(tree.pinned(label + fmt.SUFFIX)),
        )
        try:
            block = m.create_block(agent_id, spec, actor=actor, operation=op)
        except LabelTakenError:  # created by another process since the check above
            raise EditError(f"memory create: block already exists at {raw}") from None
        return _result(command, [block], f"Memory create: created {block.label}.md (version 1).")
    if command in ("str_replace", "insert", "update_description"):
        label, raw = label_of("file_path")
        edit: rules.Edit
        if command == "str_replace":
            old, new = _need(args, "old_string"), _need(args, "new_string")
            _find(m, agent_id, label, raw)
            edit = rules.FirstReplace(old, new, operation=op)
        elif command == "insert":
            text = _need(args, "insert_text")
            line = args.get("insert_line")
            if isinstance(line, bool) or not isinstance(line, int | float) or math.isnan(line):
                raise EditError("memory insert: 'insert_line' must be a number")
            _find(m, agent_id, label, raw)
            edit = rules.LineInsert(
                text, int(max(1, math.floor(line))) if math.isfinite(line) else 1 << 30, operation=op
            )
        else:
            text = _need(args, "description")
            before = _find(m, agent_id, label, raw)
            block = m.update_block(agent_id, label, description=fmt.one_line(text), actor=actor, operation=op)
            return _changed(command, before, block)
        before = m.block(agent_id, label)
        return _changed(command, before, m.edit(agent_id, label, edit, actor=actor))
    if command == "delete":
        label, raw = label_of("file_path", written=False)
        inside = [b for b in m.blocks(agent_id) if b.label.startswith(label + "/")]
        targets = inside or [_find(m, agent_id, label, raw)]
        locked = [b.label for b in targets if b.read_only]
        if locked:
            raise EditError(f"memory: {locked[0]}.md is read_only and cannot be modified")
        for b in targets:
            m.delete_block(agent_id, b.label, actor=actor, operation=op)
        paths = [b.label + fmt.SUFFIX for b in targets]
        return FilesResult(command=command, paths=paths, message=f"Memory delete: removed {', '.join(paths)}.")
    if command == "rename":
        old_label, old_raw = label_of("old_path", written=False)
        new_label, new_raw = label_of("new_path")
        if any(b.label == new_label for b in m.blocks(agent_id)) or _skipped_file(m, root, new_label, tree):
            raise EditError(f"memory rename: destination already exists at {new_raw}")
        _find(m, agent_id, old_label, old_raw)
        pinned = tree.pinned(new_label + fmt.SUFFIX)
        try:
            block = m.update_block(agent_id, old_label, new_label=new_label, pinned=pinned, actor=actor, operation=op)
        except LabelTakenError:  # taken by another process since the check above
            raise EditError(f"memory rename: destination already exists at {new_raw}") from None
        return _result(
            command,
            [block],
            f"Memory rename: {old_label}.md is now {new_label}.md (version {block.version}).",
            paths=[old_label + ".md", new_label + ".md"],
        )
    raise EditError(f"Unsupported memory command: {command}")


def _result(command: str, changed: list[Block], message: str, paths: list[str] | None = None) -> FilesResult:
    return FilesResult(
        command=command,
        paths=paths or [b.label + fmt.SUFFIX for b in changed],
        message=message,
        versions={b.label: b.version for b in changed},
    )


def _changed(command: str, before: Block, after: Block) -> FilesResult:
    if after.version == before.version:
        raise EditError(
            f"Memory {command} made no effective changes; nothing was committed. The resulting content "
            "matched what was already there."
        )
    return _result(command, [after], f"Memory {command}: {after.label}.md is now version {after.version}.")


def run_patch(m: Memory, agent_id: str, reason: object, patch: object, root: str | None) -> FilesResult:
    """One ``memory_apply_patch`` call: every operation is worked out first, then applied."""
    from ..domain.memory import current_actor

    tool = fmt.TOOL
    if not isinstance(reason, str) or not reason.strip():
        raise EditError(f"{tool}: 'reason' must be a non-empty string")
    op = fmt.reason_operation(tool, reason)
    actor = current_actor.get()
    tree = _tree(root)
    ops = fmt.parse_codex_patch(patch, root=root)
    for o in ops:
        for label in dict.fromkeys((o.label, o.target)):
            fmt.check_label_allowed(label, tree.layout, tool)
        if o.kind != "delete":
            _check_committable(
                o.target, "Move to path" if o.target != o.label else f"{o.kind.title()} File path", tree, root, tool
            )
    blocks = {b.label: b for b in m.blocks(agent_id)}
    planned_files: dict[str, str | None] = {}  # label -> its file text after the patch so far (None: deleted)

    def current(label: str) -> str:
        rel = label + fmt.SUFFIX
        if label in planned_files:
            text = planned_files[label]
            if text is None:
                raise EditError(f"{tool}: file not found for update: {rel}")
            return text
        if label not in blocks:
            raise EditError(f"{tool}: failed to read {rel}: no such memory file")
        b = blocks[label]
        if b.read_only:
            raise EditError(f"{tool}: {rel} is read_only and cannot be modified")
        return files.render_file(b, rel, tree)

    def parse(label: str, text: str) -> files.FileBlock:
        try:
            return files.parse_file(label + fmt.SUFFIX, text, tree)
        except TiermemError as exc:
            raise EditError(f"{tool}: {exc}") from exc

    for o in ops:
        rel = o.target + fmt.SUFFIX
        if o.kind == "add":
            if (
                (planned_files[o.label] is not None)
                if o.label in planned_files
                else o.label in blocks or _skipped_file(m, root, o.label, tree)
            ):
                raise EditError(f"{tool}: cannot add existing memory file: {rel}")
            body = "\n".join(o.lines)
            planned_files[o.label] = body if body.startswith("---\n") else files.new_file(o.label, body, rel, tree)
        elif o.kind == "delete":
            current(o.label)
            planned_files[o.label] = None
        else:
            text = fmt.apply_hunks(current(o.label), o.hunks, o.label + fmt.SUFFIX)
            if parse(o.label, text).read_only:
                raise EditError(f"{tool}: {rel} cannot be written with read_only=true")
            if o.target != o.label:
                if (
                    (planned_files[o.target] is not None)
                    if o.target in planned_files
                    else o.target in blocks or _skipped_file(m, root, o.target, tree)
                ):
                    raise EditError(f"{tool}: cannot move {o.label}.md onto the existing file {rel}")
                planned_files[o.label] = None
            planned_files[o.target] = text
    moved: dict[str, str] = {o.label: o.target for o in ops if o.kind == "update" and o.target != o.label}
    parsed: dict[str, files.FileBlock] = {}
    for label, planned in planned_files.items():  # every write is checked before the first one: all or nothing
        if planned is not None:
            parsed[label] = plan = parse(label, planned)
            if plan.read_only:  # only Letta's server sets it; its hook refuses a new file that does
                raise EditError(f"{tool}: {label}.md cannot be written with read_only=true")
            source = next((k for k, v in moved.items() if v == label), None)
            existing = blocks.get(label) if label in blocks else blocks.get(source or "")
            try:
                BlockSpec(label=rules.validate_label(label), value=plan.value, description=plan.description)
                _check_write(m, agent_id, label, plan, existing, renamed=source is not None, actor=actor)
            except TiermemError as exc:
                raise EditError(f"{tool}: {label}.md: {exc}") from exc
    changed: list[Block] = []
    written: dict[str, None] = {}  # the files changed so far, in order (a failure past the checks names them)
    for label, planned in planned_files.items():
        try:
            if planned is None:
                if label in moved and label in blocks:
                    new = moved[label]
                    blocks[new] = m.update_block(
                        agent_id, label, new_label=new, pinned=tree.pinned(new + fmt.SUFFIX), actor=actor, operation=op
                    )
                    del blocks[label]
                    written[label + fmt.SUFFIX] = written[new + fmt.SUFFIX] = None
                elif label in blocks:
                    m.delete_block(agent_id, label, actor=actor, operation=op)
                    written[label + fmt.SUFFIX] = None
                continue
            plan = parsed[label]
            if label not in blocks:
                changed.append(m.create_block(agent_id, plan.spec(), actor=actor, operation=op))
                written[label + fmt.SUFFIX] = None
                continue
            b = m.block(agent_id, label)
            if b.description != plan.description or not files.same_front(b.metadata.get(fmt.FRONT_KEY), plan.front):
                b = m.update_block(
                    agent_id,
                    label,
                    description=plan.description,
                    metadata={fmt.FRONT_KEY: plan.front or ""},
                    actor=actor,
                    operation=op,
                )
                written[label + fmt.SUFFIX] = None
            if b.value != plan.value:
                b = m.edit(
                    agent_id, label, rules.Rethink(plan.value, operation=op, check_line_numbers=False), actor=actor
                )
                written[label + fmt.SUFFIX] = None
            changed.append(b)
        except TiermemError as exc:  # past the checks: another writer meanwhile, or the storage failed
            if not written:
                raise EditError(f"{tool}: {label}.md: {exc}") from exc
            raise EditError(
                f"{tool}: the patch was applied only in part: writing {label}.md failed ({without_nothing_written(exc)}), after "
                f"{', '.join(written)} had been written (they stay so). Read the files again and finish the change "
                "with another call."
            ) from exc
    paths = sorted({o.label + fmt.SUFFIX for o in ops} | {o.target + fmt.SUFFIX for o in ops})
    return FilesResult(
        command=tool,
        paths=paths,
        message=f"{tool} applied to {', '.join(paths)}.",
        versions={b.label: b.version for b in changed},
    )


def _check_committable(label: str, name: str, tree: files.Tree, root: str | None, tool: str = "memory") -> None:
    """Refuse a file the synced directory's pre-commit hook (Letta Code's) could never read, so never commit: the
    call would answer that it wrote a file that does not reach Letta Code (``memfs_format.unreadable_path``)."""
    why = fmt.unreadable_path(label + fmt.SUFFIX, tree.layout) if root is not None else None
    if why is not None:
        raise EditError(f'{tool}: {name} "{label}{fmt.SUFFIX}" cannot be committed: {why}')


def _skipped_file(m: Memory, root: str | None, label: str, tree: files.Tree) -> bool:
    """Whether the synced directory holds a file at ``label``'s path that its sync skips (not a regular file, or one
    the sync's screening refuses, ``memfs_files.screen_file``: a symbolic link on the way, not UTF-8 text, its
    frontmatter unclosed, a text over ``max_content_chars``, a credential in it): no block has it, but Letta Code finds
    it there, so its tools refuse to create or move a file onto it."""
    if root is None:
        return False
    rel = label + fmt.SUFFIX
    try:
        info = (Path(root) / rel).lstat()
    except OSError:  # nothing there
        return False
    return not stat.S_ISREG(info.st_mode) or isinstance(files.screen_file(Path(root), rel, tree, m), str)


def _check_write(
    m: Memory, agent_id: str, label: str, plan: files.FileBlock, before: Block | None, *, renamed: bool, actor: str
) -> None:
    """Refuse, before a patch's first write, what writing ``plan`` at ``label`` (over ``before``, the block it
    changes; None: a new one) would refuse: ``Memory.check_new_block`` and ``check_update`` run the checks of
    ``create_block`` and ``update_block`` themselves (the label, the sizes, the limit, the frontmatter kept as
    metadata, a new credential in the value or the description)."""
    if before is None:
        m.check_new_block(agent_id, plan.spec(), actor=actor)
        return
    front_changed = before.description != plan.description or not files.same_front(
        before.metadata.get(fmt.FRONT_KEY), plan.front
    )
    m.check_update(
        before,
        new_label=label if renamed else None,
        value=plan.value if before.value != plan.value else None,
        description=plan.description if front_changed else None,
        metadata={fmt.FRONT_KEY: plan.front or ""} if front_changed else None,
        actor=actor,
    )


def edited_labels(arguments: dict[str, Any]) -> list[str]:
    """The labels a successful call with ``arguments`` changed (the agent loop's report)."""
    out: list[str] = []
    try:
        if "input" in arguments:
            for o in fmt.parse_codex_patch(arguments["input"]):
                out += [o.label, o.target]
        else:
            out += [
                fmt.label_of_path(arguments[k], k)
                for k in ("file_path", "old_path", "new_path")
                if isinstance(arguments.get(k), str)
            ]
    except TiermemError:
        return []
    return list(dict.fromkeys(out))
