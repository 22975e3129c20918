"""``memory_apply_patch``'s multi-block patches: Letta's ``*** Update Block:``, ``*** Add Block:`` and ``*** Move to:``
headers (``letta/services/tool_executor/core_tool_executor.py``), applied to several blocks as one change.

A patch holding one of Letta's headers is a multi-block patch: each header names its block and the tool's ``label``
is not used (Letta's callers send ""). ``*** Update Block: <label>`` is followed by that block's hunks
(``blocks.parse_hunks``); ``*** Add Block: <label>`` by an optional ``Description: <text>`` line and the new block's
``+`` lines; ``*** Move to: <new label>`` renames the block of the header above it, after its hunks. ``*** Delete
Block:`` is refused by name: the tool is announced as an edit that loses nothing (hosts may run it without asking),
and deleting a block is the ``memory`` tool's ``delete``. Lines that belong to no operation are refused (Letta skips
them), so nothing meant for one block lands in another.

Every operation is worked out first, against the blocks as read, with the checks of an edit (read-only blocks,
limits, sizes, credentials, labels): a refusal anywhere changes nothing. Then the writes: each edited block once, at
the version read (another writer in between is a conflict), the renames in the patch's order, the new blocks last.
Should a write fail part way (another writer, the storage), the writes before it are undone.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ..base.config import BlockSpec
from ..base.errors import EditError, NotFoundError, TiermemError, ValidationError
from ..base.records import check_text
from . import blocks as rules
from .memory import current_actor

if TYPE_CHECKING:
    from ..base.records import Block
    from .memory import Memory

log = logging.getLogger(__name__)
TOOL = "memory_apply_patch"
ADD, DELETE, UPDATE, MOVE = rules.PATCH_HEADERS
DONE = "Successfully applied memory patch operations."


@dataclass
class BlockOp:
    """One ``*** Add Block:`` or ``*** Update Block:`` operation, with the ``*** Move to:`` that follows it."""

    kind: Literal["add", "update"]
    label: str
    header: str  # its header line, as errors name it
    target: str = ""  # the label ``*** Move to:`` gives it ("": none)
    description: str = ""  # add: the ``Description:`` line
    rows: list[str] = field(default_factory=list)  # add: the new block's lines; update: its hunks' rows


def is_multi_block(patch: object) -> bool:
    """Whether ``patch`` has a line starting with one of Letta's headers (Letta's test for its multi-block mode)."""
    return isinstance(patch, str) and any(line.startswith(rules.PATCH_HEADERS) for line in patch.split("\n"))


def parse_block_patch(patch: str) -> list[BlockOp]:
    """The operations of a multi-block patch, in order; refused (``EditError``) with Letta's texts where it has them."""
    ops: list[BlockOp] = []
    lines = patch.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith(rules.PATCH_HEADERS):
            header = line.split(":", 1)[0] + ":"
            name = line.split(":", 1)[1].strip()
            if not name:
                what = "a non-empty new label" if header == MOVE else "a non-empty label"
                raise EditError(f"{header} must specify {what}")
            if header == DELETE:
                raise EditError(
                    f"{line.strip()}: memory_apply_patch does not delete blocks here (it is announced as an edit "
                    "that loses nothing, so hosts may run it without asking). Delete the block with the memory tool's "
                    "delete command, or leave it be. The patch changed nothing."
                )
            if header == MOVE:
                if not ops:
                    raise EditError(f"{MOVE} must follow an Add/Update/Delete header")
                ops[-1].target = _checked_label(name, line)
                continue
            if header == ADD:
                op = BlockOp("add", _checked_label(name, line), line.strip())
                if i < len(lines) and lines[i].startswith("Description:"):
                    op.description = lines[i].split(":", 1)[1].strip()
                    i += 1
            else:
                op = BlockOp("update", rules.lookup_label(name), line.strip())
            ops.append(op)
        elif not ops:
            if line.strip() and not line.startswith("@@") and line.rstrip() not in rules.PATCH_WRAPPERS:
                raise EditError(
                    f"Failed to apply patch: the line {line[:120]!r} comes before the first '*** Update Block:' or "
                    "'*** Add Block:' header, so it belongs to no block. Start the patch with a header (in a "
                    "multi-block patch each header names its block; the label argument is not used)."
                )
        elif ops[-1].kind == "update":
            ops[-1].rows.append(line)
        elif line.startswith("+") or line == "":
            ops[-1].rows.append(line[1:])
        elif not line.startswith("@@") and line.rstrip() not in rules.PATCH_WRAPPERS:
            raise EditError(
                f"Failed to apply patch: in {ops[-1].header!r}, the line {line[:120]!r} does not start with '+'. "
                "A new block's lines each start with '+' (after an optional 'Description: <text>' line)."
            )
    return ops


def _checked_label(name: str, line: str) -> str:
    try:
        return rules.validate_label(name)
    except ValidationError as exc:
        raise ValidationError(f"{line.strip()}: {exc}") from exc


def edited_labels(arguments: Mapping[str, object]) -> list[str]:
    """The labels a successful ``memory_apply_patch`` call with ``arguments`` changed (the agent loop's report)."""
    patch = arguments.get("patch")
    if isinstance(patch, str) and is_multi_block(patch):
        try:
            ops = parse_block_patch(patch)
        except TiermemError:
            return []
        return list(dict.fromkeys(x for o in ops for x in (o.label, o.target) if x))
    label = arguments.get("label")
    return [label] if isinstance(label, str) else []


@dataclass
class _Slot:
    """A block as the patch leaves it so far."""

    block: Block | None  # the stored block; None: added by this patch
    value: str
    description: str
    limit: int
    read_only: bool


@dataclass
class _Plan:
    edits: list[tuple[Block, str]] = field(default_factory=list)  # (block as read, its new value)
    renames: list[tuple[str, str]] = field(default_factory=list)  # (label, new label), in the patch's order
    creates: list[BlockSpec] = field(default_factory=list)
    done: list[str] = field(default_factory=list)  # what each operation did, in Letta's words


def apply_block_patch(m: Memory, agent_id: str, patch: str) -> str:
    """Apply a multi-block patch (``is_multi_block``) to the agent's blocks: all of it, or nothing."""
    actor = current_actor.get()
    check_text(patch, "patch", m.max_content_chars)
    rules.reject_line_numbers("patch", patch)
    plan = _plan(m, agent_id, parse_block_patch(patch), actor)
    _write(m, agent_id, plan, actor)
    return DONE + "\n\nOperations completed:\n- " + "\n- ".join(plan.done)


def _plan(m: Memory, agent_id: str, ops: list[BlockOp], actor: str) -> _Plan:
    slots = {b.label: _Slot(b, b.value, b.description, b.limit, b.read_only) for b in m.blocks(agent_id)}
    names = ", ".join(repr(label) for label in slots) or "none"
    enforce = actor not in ("human", "doctor")  # who may edit read-only blocks (Memory.edit)
    plan = _Plan()
    for op in ops:
        try:
            if op.kind == "add":
                if op.label in slots:
                    raise EditError(f"Error: Memory block '{op.label}' already exists")
                value = "\n".join(op.rows).rstrip("\n")
                slot = _Slot(None, value, op.description, BlockSpec(label=op.label).limit, False)
                plan.done.append(f"Created memory block '{op.label}'")
            else:
                found = slots.get(op.label)
                if found is None:
                    raise NotFoundError(
                        f"Error: Memory block '{op.label}' does not exist. Blocks that exist: {names}. Use "
                        "'*** Add Block: <label>' to create one."
                    )
                slot = found
                if enforce and slot.read_only:
                    raise EditError(rules.READ_ONLY_ERROR)
                slot.value = rules.apply_hunks(slot.value, rules.parse_hunks(op.rows))
                rules.check_limit(slot.value, slot.limit)
                plan.done.append(f"Updated memory block '{op.label}'")
            label = op.label
            if op.target and op.target != op.label:
                _check_move(m, agent_id, slot, op.target, slots, enforce=enforce)
                slots.pop(op.label, None)
                if slot.block is not None:
                    plan.renames.append((op.label, op.target))
                plan.done.append(f"Renamed memory block '{op.label}' to '{op.target}'")
                label = op.target
            slots[label] = slot
            _check_value(m, agent_id, label, slot)
        except TiermemError as exc:
            raise type(exc)(f"{exc}\nThe patch failed at {op.header!r}; no block was changed.") from exc
    for label, slot in slots.items():
        if slot.block is None:
            plan.creates.append(BlockSpec(label=label, value=slot.value, description=slot.description))
        elif slot.value != slot.block.value:
            plan.edits.append((slot.block, slot.value))
    return plan


def _check_move(
    m: Memory, agent_id: str, slot: _Slot, target: str, slots: Mapping[str, _Slot], *, enforce: bool
) -> None:
    """Refuse what ``Memory.update_block`` would refuse of this rename, before anything is written."""
    if enforce and slot.read_only:
        raise EditError(rules.READ_ONLY_ERROR)
    m.refuse_secrets(target, "the new label")
    taken = target in slots
    if slot.block is not None and not taken:  # a shared block keeps one label for every agent it is attached to
        others = [a for a in m.core.agents_of_block(slot.block.id) if a != agent_id]
        taken = any(b.label == target for a in others for b in m.blocks(a))
    if taken:
        raise ValidationError(f"A block labelled {target!r} already exists; choose another label.")


def _check_value(m: Memory, agent_id: str, label: str, slot: _Slot) -> None:
    """Refuse what the write of this block would refuse: its size, a new credential in it; a new block's spec."""
    if slot.block is None:
        m.check_live(agent_id)
        m.check_block_spec(BlockSpec(label=label, value=slot.value, description=slot.description))
        m.refuse_secrets(slot.description, f"the description of block {label!r}")
    check_text(slot.value, f"the new value of block {label!r}", m.max_content_chars)
    before = slot.block.value if slot.block is not None else ""
    m.refuse_secrets(slot.value, f"the value of block {label!r}", before=before)


def _write(m: Memory, agent_id: str, plan: _Plan, actor: str) -> None:
    """The planned writes; should one fail, the ones before it are undone (newest first) and the error says so."""
    undo: list[Callable[[], object]] = []
    back = "memory_apply_patch undone"
    try:
        for block, value in plan.edits:
            edit = rules.Rethink(value, operation=TOOL, check_line_numbers=False)
            done = m.edit(agent_id, block.label, edit, actor=actor, expected_version=block.version)
            restore = rules.Rethink(block.value, operation=back, check_line_numbers=False)
            undo.append(
                functools.partial(m.edit, agent_id, block.label, restore, actor=actor, expected_version=done.version)
            )
        for old, new in plan.renames:
            m.update_block(agent_id, old, new_label=new, actor=actor, operation=TOOL)
            undo.append(functools.partial(m.update_block, agent_id, new, new_label=old, actor=actor, operation=back))
        for spec in plan.creates:
            m.create_block(agent_id, spec, actor=actor, operation=TOOL)
            undo.append(functools.partial(m.delete_block, agent_id, spec.label, actor=actor))
    except TiermemError as exc:
        kept = _undo(undo)
        note = (
            "no block was changed (the writes before it were undone)"
            if not kept
            else f"undoing the writes before it failed too, so these stay changed: {'; '.join(kept)}"
        )
        raise type(exc)(f"{exc}\nThe patch was not applied: {note}.") from exc


def _undo(undo: list[Callable[[], object]]) -> list[str]:
    kept: list[str] = []
    for step in reversed(undo):
        try:
            step()
        except TiermemError as exc:
            log.warning("memory_apply_patch: undoing a write failed: %s", exc)
            kept.append(str(exc).split("\n", 1)[0])
    return kept
