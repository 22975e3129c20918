"""``memory_apply_patch``'s multi-block patches: Letta's ``*** Update Block:``, ``*** Add Block:`` and ``*** Move to:``
headers (``letta/services/tool_executor/core_tool_executor.py``), applied to several blocks as one change.

A patch holding one of Letta's headers is a multi-block patch: each header names its block and the tool's ``label``
is not used (Letta's callers send ""). ``*** Update Block: <label>`` is followed by that block's hunks
(``blocks.parse_hunks``); ``*** Add Block: <label>`` by an optional ``Description: <text>`` line and the new block's
``+`` lines; ``*** Move to: <new label>`` renames the block of the header above it, after its hunks (an update
without hunks only renames). ``*** Delete Block:`` is refused by name: the tool is announced as an edit that loses
nothing (hosts may run it without asking), and deleting a block is the ``memory`` tool's ``delete``. Lines that
belong to no operation are refused (Letta skips them), so nothing meant for one block lands in another.

Every operation is worked out first, against the blocks as read, with the checks of an edit (read-only blocks,
limits, sizes, credentials, labels): a refusal anywhere changes nothing. Then the writes: each edited block once, at
the version read (another writer in between is a conflict), the renames in the patch's order, the new blocks last.
Should a write fail part way (another writer, the storage), the writes before it are undone, newest first. A block
the patch created is undone as the ``memory`` tool's ``delete`` removes one (``Memory.delete_block``): detached from
the agent, its row and history kept in the store (the core stores remove a block's row only with its last agent,
``CoreStore.delete_agent``). Refusals quote headers and labels with credentials redacted (``blocks.shown_label``).
"""

from __future__ import annotations

import copy
import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ..base.config import BlockSpec
from ..base.errors import EditError, NotFoundError, TiermemError, ValidationError, without_nothing_written
from ..base.records import check_text
from . import blocks as rules
from .memory import current_actor, rename_taken

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
    return isinstance(patch, str) and any(line.startswith(rules.PATCH_HEADERS) for line in rules.patch_lines(patch))


def parse_block_patch(patch: str) -> list[BlockOp]:
    """The operations of a multi-block patch, in order; refused (``EditError``) with Letta's texts where it has them."""
    ops: list[BlockOp] = []
    lines = rules.patch_lines(patch)
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
                    f"{_shown(line)}: memory_apply_patch does not delete blocks here (it is announced as an edit "
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
                    f"Failed to apply patch: the line {_shown(line)} comes before the first '*** Update Block:' or "
                    "'*** Add Block:' header, so it belongs to no block. Start the patch with a header (in a "
                    "multi-block patch each header names its block; the label argument is not used)."
                )
        elif ops[-1].kind == "update":
            ops[-1].rows.append(line)
        elif line.startswith("+") or line == "":
            ops[-1].rows.append(line[1:])
        elif not line.startswith("@@") and line.rstrip() not in rules.PATCH_WRAPPERS:
            raise EditError(
                f"Failed to apply patch: in {_shown(ops[-1].header)}, the line {_shown(line)} does not start with '+'. "
                "A new block's lines each start with '+' (after an optional 'Description: <text>' line)."
            )
    return ops


def _checked_label(name: str, line: str) -> str:
    try:
        return rules.validate_label(name)
    except ValidationError as exc:
        raise _noted(exc, f"{_shown(line)}: {exc}") from exc


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
    renames: list[tuple[Block, str, str]] = field(default_factory=list)  # (block as read, label, new label), in order
    creates: list[BlockSpec] = field(default_factory=list)
    done: list[str] = field(default_factory=list)  # what each operation did, in Letta's words


def apply_block_patch(m: Memory, agent_id: str, patch: str) -> str:
    """Apply a multi-block patch (``is_multi_block``) to the agent's blocks: all of it, or nothing."""
    actor = current_actor.get()
    check_text(patch, "patch", m.max_content_chars)
    rules.reject_patch_line_numbers(patch)
    plan = _plan(m, agent_id, parse_block_patch(patch), actor)
    _write(m, agent_id, plan, actor)
    return DONE + "\n\nOperations completed:\n- " + "\n- ".join(plan.done)


def _plan(m: Memory, agent_id: str, ops: list[BlockOp], actor: str) -> _Plan:
    slots = {b.label: _Slot(b, b.value, b.description, b.limit, b.read_only) for b in m.blocks(agent_id)}
    names = ", ".join(rules.shown_label(label) for label in slots) or "none"
    enforce = actor not in ("human", "doctor")  # who may edit read-only blocks (Memory.edit)
    plan = _Plan()
    for op in ops:
        try:
            if op.kind == "add":
                if op.label in slots:
                    raise EditError(f"Error: Memory block {rules.shown_label(op.label)} already exists")
                value = "\n".join(op.rows).rstrip("\n")
                slot = _Slot(None, value, op.description, BlockSpec(label=op.label).limit, False)
                plan.done.append(f"Created memory block '{op.label}'")
            else:
                found = slots.get(op.label)
                if found is None:
                    raise NotFoundError(
                        f"Error: Memory block {rules.shown_label(op.label)} does not exist. Blocks that exist: "
                        f"{names}. Use '*** Add Block: <label>' to create one."
                    )
                slot = found
                if enforce and slot.read_only:
                    raise EditError(rules.READ_ONLY_ERROR)
                renamed = bool(op.target) and op.target != op.label
                hunks = rules.parse_hunks(op.rows, none_ok=renamed)  # only a Move to: a rename, no edit
                if hunks:
                    slot.value = rules.apply_hunks(slot.value, hunks)
                    rules.check_limit(slot.value, slot.limit)
                    plan.done.append(f"Updated memory block '{op.label}'")
            label = op.label
            if op.target and op.target != op.label:
                _check_move(m, agent_id, slot, op.target, slots, enforce=enforce)
                slots.pop(op.label, None)
                if slot.block is not None:
                    plan.renames.append((slot.block, op.label, op.target))
                plan.done.append(f"Renamed memory block '{op.label}' to '{op.target}'")
                label = op.target
            slots[label] = slot
            _check_value(m, agent_id, label, slot)
        except TiermemError as exc:
            raise _noted(exc, f"{exc}\nThe patch failed at {_shown(op.header)}; no block was changed.") from exc
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
    # a shared block keeps one label for every agent it is attached to
    if target in slots or (slot.block is not None and m.label_taken(slot.block.id, target, besides=agent_id)):
        raise rename_taken(target)


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
    """The planned writes, each at the version the patch read or last left the block at (another writer in between
    is a conflict); should one fail, the ones before it are undone, newest first, each again at the version the
    patch left (so an undo never overwrites another writer's change), and the error says so."""
    at: dict[str, int] = {}  # block id -> the version the patch's latest write (or undo) of it committed
    undo: list[tuple[str, Callable[[], Block]]] = []  # (the write, as errors name it; its undo)
    back = "memory_apply_patch undone"

    def left(b: Block) -> Block:
        at[b.id] = b.version
        return b

    step = ""
    try:
        for block, value in plan.edits:
            step = f"the write of block {rules.shown_label(block.label)}'s new value"
            edit = rules.Rethink(value, operation=TOOL, check_line_numbers=False)
            left(m.edit(agent_id, block.label, edit, actor=actor, expected_version=block.version))
            restore = rules.Rethink(block.value, operation=back, check_line_numbers=False)
            undo.append((step, functools.partial(_undo_edit, m, agent_id, block, restore, actor, at, left)))
        for block, old, new in plan.renames:
            step = f"the rename of block {rules.shown_label(old)} to {rules.shown_label(new)}"
            version = at.get(block.id, block.version)
            left(m.update_block(agent_id, old, new_label=new, actor=actor, operation=TOOL, expected_version=version))
            undo.append((step, functools.partial(_undo_rename, m, agent_id, block, new, old, actor, at, left)))
        for spec in plan.creates:
            step = f"the creation of block {rules.shown_label(spec.label)}"
            m.create_block(agent_id, spec, actor=actor, operation=TOOL)
            undo.append((step, functools.partial(m.delete_block, agent_id, spec.label, actor=actor)))
    except TiermemError as exc:
        kept = _undo(undo)
        if not kept:
            raise _noted(
                exc, f"{exc}\nThe patch was not applied: no block was changed (the writes before it were undone)."
            ) from exc
        raise _noted(
            exc,
            f"The patch was applied only in part: {step} failed ({without_nothing_written(exc)}), and undoing the "
            f"writes before it failed too (another writer changed those blocks meanwhile, or the storage failed), so "
            f"these stay as the patch wrote them: {'; '.join(kept)}. Read the blocks again (core_memory_view) and "
            "fix them with single edits.",
        ) from exc


def _undo_edit(
    m: Memory,
    agent_id: str,
    block: Block,
    restore: rules.Rethink,
    actor: str,
    at: Mapping[str, int],
    left: Callable[[Block], Block],
) -> Block:
    """Put back the value ``block`` had, under the label it has again once its renames are undone."""
    return left(m.edit(agent_id, block.label, restore, actor=actor, expected_version=at[block.id]))


def _undo_rename(
    m: Memory,
    agent_id: str,
    block: Block,
    label: str,
    old: str,
    actor: str,
    at: Mapping[str, int],
    left: Callable[[Block], Block],
) -> Block:
    back = "memory_apply_patch undone"
    return left(
        m.update_block(agent_id, label, new_label=old, actor=actor, operation=back, expected_version=at[block.id])
    )


def _undo(undo: list[tuple[str, Callable[[], Block]]]) -> list[str]:
    """Run the undos, newest first; the writes whose undo failed (each logged with its error)."""
    kept: list[str] = []
    for step, run in reversed(undo):
        try:
            run()
        except TiermemError as exc:
            log.warning("memory_apply_patch: undoing %s failed: %s", step, exc)
            kept.append(step)
    return kept


def _shown(line: str) -> str:
    """A header or line of the patch as a refusal quotes it: credentials redacted, cut to 120 characters, quoted."""
    return rules.shown_label(line.strip(), 120)


def _noted(exc: TiermemError, text: str) -> TiermemError:
    """``exc`` with the message ``text`` (its ``person`` text, when it has one, followed by what ``text`` adds), its
    other attributes (``LabelTakenError.label``) kept: a caller tells errors apart by them, not by their text."""
    noted = copy.copy(exc)
    noted.args = (text,)
    person = getattr(exc, "person", None)
    if person is not None:
        said = str(exc)
        noted.person = person + text[len(said) :] if text.startswith(said) else text
    return noted
