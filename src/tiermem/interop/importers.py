"""Other memory formats, imported into one agent's archival memory and blocks.

- The reference MCP memory server's knowledge graph (``memory.jsonl``): each entity's observations
  and each relation become archival passages, tagged ``memory-graph``, ``entity:<name>``,
  ``type:<entityType>`` / ``relation:<type>``.
- An Anthropic memory-tool directory (``/memories``): a file whose text fits a block becomes a
  block labelled after the file; a longer one becomes archival passages tagged ``file:<path>``.

Both are idempotent: a passage with the same text and tags, or a block with the same value, is
not written again. Credentials are never stored (docs/security.md): in a passage's text and tags
each is replaced by ``[redacted: KIND]``, and the report's notes say where and how many
(``Redactions``); a /memories file whose path holds one is skipped whole (its label, description and
tags would hold it), listed under ``skipped`` by its path redacted.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.config import BlockSpec
from ..base.errors import ValidationError
from ..domain.blocks import Rethink, validate_label
from .progress import Progress
from .redactions import Redactions

if TYPE_CHECKING:
    from ..domain.memory import Memory

GRAPH_TAG = "memory-graph"
TEXT_SUFFIXES = {".md", ".txt", ".markdown", ".json", ".yaml", ".yml", ".toml", ""}


def is_memory_graph(path: Path) -> bool:
    from .backup import first_record_type

    return first_record_type(path) in ("entity", "relation")


def graph_passages(path: Path) -> list[tuple[str, list[str]]]:
    """Validate a knowledge-graph file and return (content, tags) pairs."""
    items: list[tuple[str, list[str]]] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValidationError(f"Cannot read {path}: {exc}.") from exc
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValidationError(
                f"{path}:{n} is not JSON ({exc}); expected the memory server's memory.jsonl."
            ) from exc
        except RecursionError:
            raise ValidationError(
                f"{path}:{n} nests JSON arrays or objects too deeply to read; the memory server's memory.jsonl never "
                "does. Nothing was written."
            ) from None
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "entity":
            name, etype = item.get("name"), item.get("entityType") or "entity"
            if not isinstance(name, str) or not name:
                raise ValidationError(f"{path}:{n}: an entity without a name.")
            tags = [GRAPH_TAG, f"entity:{name}", f"type:{etype}"]
            observations = item.get("observations") or []
            if not isinstance(observations, list):
                raise ValidationError(f"{path}:{n}: observations must be a list.")
            if not observations:
                items.append((f"{name} is a {etype}.", tags))
            for obs in observations:
                items.append((f"{name} ({etype}): {obs}", tags))
        elif kind == "relation":
            src, dst, rtype = item.get("from"), item.get("to"), item.get("relationType")
            if not all(isinstance(x, str) and x for x in (src, dst, rtype)):
                raise ValidationError(f"{path}:{n}: a relation needs from, to and relationType.")
            items.append((f"{src} {rtype} {dst}", [GRAPH_TAG, f"relation:{rtype}", f"entity:{src}", f"entity:{dst}"]))
        else:
            raise ValidationError(f"{path}:{n}: unknown record type {kind!r} (expected entity or relation).")
    return items


def import_passages(
    memory: Memory,
    agent_id: str,
    items: list[tuple[str, list[str]]],
    marker_tag: str,
    redactions: Redactions | None = None,
    owner: str = "",
) -> tuple[int, int]:
    """Insert the (content, tags) pairs not already stored for this agent; returns (inserted, skipped). Credentials
    in the text and the tags are stored redacted; ``redactions`` counts those of the pairs inserted, as ``owner``'s
    (the agent's name)."""
    have = {
        (p.content, tuple(sorted(p.tags))) for p in memory.archive.rows.passages_of(agent_id, tags_any=[marker_tag])
    }
    todo, seen = [], set()
    for given, given_tags in items:
        # credentials are never stored: each replaced by [redacted: KIND], in the tags as in the text
        content, tags = memory.scrub(given), [memory.scrub(t) for t in given_tags]
        # a long text is stored as chunks: it is present when its first chunk is (chunking is deterministic)
        first = memory.archive.embedder.chunk(content)[0]
        key = (first, tuple(sorted(tags)))
        if key in have or key in seen:
            continue
        seen.add(key)
        todo.append((content, tags))
        if redactions is not None:
            redactions.text(owner, "passages", given)
            for tag in given_tags:
                redactions.text(owner, "passage tags", tag)
    progress = Progress("importing", len(todo))
    try:
        for start in range(0, len(todo), 256):
            batch = todo[start : start + 256]
            memory.archive.insert_many(agent_id, batch)
            progress.advance(len(batch))
    finally:
        progress.close()
    return len(todo), len(items) - len(todo)


def _label(rel: str) -> str:
    stem = rel.rsplit(".", 1)[0] if "." in Path(rel).name else rel
    label = re.sub(r"[^A-Za-z0-9_-]+", "_", stem).strip("_")[:100] or "memory"
    return label


def memories_plan(
    root: Path, limit: int, memory: Memory | None = None
) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]], list[str]]:
    """(blocks as (label, value, path), long files as (path, text), a line per file skipped); validates every file
    first. With ``memory``, a file whose path holds a credential is skipped (its label, description and tags would
    hold it), named by its path redacted."""
    if not root.is_dir():
        raise ValidationError(f"{root} is not a directory; give the memory tool's /memories directory.")
    blocks: list[tuple[str, str, str]] = []
    long: list[tuple[str, str]] = []
    skipped: list[str] = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if path.suffix.lower() not in TEXT_SUFFIXES or any(
            part.startswith(".") for part in path.relative_to(root).parts
        ):
            continue
        held = memory.credentials_in(rel) if memory is not None else None
        if memory is not None and held is not None:  # before any message could quote the path
            skipped.append(
                f"{memory.scrub(rel)}: its name holds {held}: credentials are never stored in memory, and the name "
                "is the block's label (or the passages' tag); rename the file without it, then import again"
            )
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValidationError(
                f"Cannot read {path} as UTF-8 text ({exc}); move it out of the directory or fix it."
            ) from exc
        if "\x00" in text:
            raise ValidationError(f"{path} contains NUL characters; it is not a text memory file.")
        if len(text) <= limit:
            label = _label(rel)
            validate_label(label)
            blocks.append((label, text, rel))
        else:
            long.append((rel, text))
    labels = [b[0] for b in blocks]
    if len(set(labels)) != len(labels):
        raise ValidationError(f"Two files in {root} map to the same block label; rename one of them.")
    return blocks, long, skipped


def import_memories(
    memory: Memory, agent_id: str, root: Path, *, limit: int = 5000, replace: bool = False, owner: str = ""
) -> dict[str, Any]:
    """Each file of ``root`` as a block (or, too long for one, as passages); the report lists the blocks created,
    updated, unchanged or left as they are (``conflicts``), the passages, the files skipped, and notes on the
    credentials redacted (as ``owner``'s, the agent's name)."""
    blocks, long, skipped = memories_plan(root, limit, memory)
    redacted = Redactions(memory.secret_scan)
    report: dict[str, Any] = {
        "blocks_created": [],
        "blocks_updated": [],
        "blocks_unchanged": [],
        "conflicts": [],
        "passages": 0,
        "skipped": skipped,
    }
    existing = {b.label: b for b in memory.blocks(agent_id)}
    for label, given, rel in blocks:
        block = existing.get(label)
        value = memory.scrub(given)  # as the block stores it: each credential replaced by [redacted: KIND]
        if block is None:
            memory.create_block(
                agent_id,
                BlockSpec(label=label, value=given, description=f"Imported from /memories/{rel}", limit=limit),
                actor="import",
            )
            report["blocks_created"].append(label)
        elif block.value == value:
            report["blocks_unchanged"].append(label)
            continue
        elif replace:
            memory.edit(agent_id, label, Rethink(given, operation="import", check_line_numbers=False), actor="import")
            report["blocks_updated"].append(label)
        else:
            report["conflicts"].append(label)
            continue
        redacted.text(owner, f"block {label!r}", given)
    items = [(text, ["memories", f"file:{rel}"]) for rel, text in long]
    if items:
        inserted, _ = import_passages(memory, agent_id, items, "memories", redacted, owner)
        report["passages"] = inserted
    report["notes"] = redacted.notes()
    return report
