"""``tiermem import`` and ``tiermem export``: pick the format, run it, report."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.errors import StoreError, TiermemError, ValidationError
from ..base.files import write_atomically
from ..base.records import check_text
from ..domain.blocks import shown_label
from . import af_export, agentfile, backup, importers, memfs
from .letta_messages import EXTENSION
from .redactions import Redactions

if TYPE_CHECKING:
    from ..domain.memory import Memory

FORMATS = ("auto", "af", "jsonl", "memory-graph", "memories", "memfs")
# What a store error says of the one write or read it was: true of that step, not of an import that failed partway.
_NOTHING = re.compile(r"\b([Nn])othing was (?:written|changed)")


def detect(path: Path) -> str:
    if path.is_dir():
        return "memfs" if memfs.is_memfs_dir(path) else "memories"
    if not path.exists():
        raise ValidationError(f"{path} does not exist.")
    if backup.is_backup(path):
        return "jsonl"
    if importers.is_memory_graph(path):
        return "memory-graph"
    return "af"


def run_import(
    memory: Memory,
    path: Path,
    *,
    fmt: str,
    agent: str,
    rename: str | None,
    replace: bool,
    include_forgotten: bool = False,
) -> dict[str, Any]:
    """Import ``path`` (``fmt``, or detected). A store failure partway is reported as one: the steps before it wrote
    what they wrote, and every format's import is safe to run again (it skips what is already there)."""
    try:
        return _run_import(
            memory, path, fmt=fmt, agent=agent, rename=rename, replace=replace, include_forgotten=include_forgotten
        )
    except StoreError as exc:
        step = _NOTHING.sub(lambda m: f"{'T' if m.group(1) == 'N' else 't'}his step wrote nothing", str(exc))
        raise type(exc)(
            f"The import of {path} stopped partway: {step} What the import wrote before this failure is kept; once "
            "it is fixed, run the same import again: it skips what is already there and writes the rest."
        ) from exc


def _run_import(
    memory: Memory, path: Path, *, fmt: str, agent: str, rename: str | None, replace: bool, include_forgotten: bool
) -> dict[str, Any]:
    kind = detect(path) if fmt == "auto" else fmt
    if include_forgotten and kind not in ("jsonl", "af"):
        raise ValidationError(
            "--include-forgotten applies to tiermem backups (jsonl) and agent files (.af) only; nothing was "
            "imported. Leave it out."
        )
    if kind == "af":
        data, digest = agentfile.load_json(path)
        plans = agentfile.plan_agent_file(data)
        _check_sizes(memory, plans)
        report = agentfile.apply_plans(
            memory, plans, digest, rename=rename, replace=replace, include_forgotten=include_forgotten
        )
        return {"format": "af", **report.as_dict()}
    if rename is not None:
        raise ValidationError("--rename applies to agent files (.af) only; use --agent to choose the target agent.")
    if kind == "jsonl":
        notes: list[str] = []
        restored = backup.import_backup(memory, path, notes, replace=replace, include_forgotten=include_forgotten)
        return {"format": "jsonl", "inserted": restored, "notes": notes}
    if kind == "memfs":  # every file screened before the agent is made (with no default blocks) or anything written
        return memfs.import_memfs(memory, agent, path)
    graph = importers.graph_passages(path) if kind == "memory-graph" else []  # so is a graph's every line
    agent_id = memory.ensure_agent(agent).id  # an import names its target: it is made if missing, on purpose
    if kind == "memory-graph":
        redacted = Redactions(memory.secret_scan)
        inserted, skipped = importers.import_passages(memory, agent_id, graph, importers.GRAPH_TAG, redacted, agent)
        return {
            "format": "memory-graph",
            "agent": agent,
            "passages": inserted,
            "already_present": skipped,
            "notes": redacted.notes(),
        }
    if kind == "memories":
        return {
            "format": "memories",
            "agent": agent,
            **importers.import_memories(memory, agent_id, path, replace=replace, owner=agent),
        }
    raise ValidationError(f"Unknown format {fmt!r}; use one of {', '.join(FORMATS)}.")


def _check_sizes(memory: Memory, plans: list[agentfile.AgentPlan]) -> None:
    """Every text must be storable, and every block creatable, before anything is written."""
    most = agentfile.IMPORT_MAX_CHARS
    for p in plans:
        texts = [(f"message {shown_label(m['file_id'])}", m.get("content") or "") for m in p.messages]
        texts += [("a passage", c) for c, _, _ in p.passages]
        for what, text in texts:
            if len(text) > most:
                raise ValidationError(
                    f"Agent {shown_label(p.name)}: {what} has {len(text)} characters; the most an import "
                    f"stores is {most}. Shorten it in the file."
                )
            try:
                check_text(text, what, most)
            except ValidationError as exc:
                raise ValidationError(f"Agent {shown_label(p.name)}: {exc} Correct it in the file.") from None
        block_most = memory.max_content_chars
        for _, spec in p.blocks:
            for part, text in (("value", spec.value), ("description", spec.description)):
                if len(text) > block_most:
                    raise ValidationError(
                        f"Agent {shown_label(p.name)}: the {part} of block {shown_label(spec.label)} has {len(text)} "
                        "characters; a block's "
                        f"{part} holds at most {block_most} (the max_content_chars setting). Shorten it in the file, "
                        "or raise max_content_chars (tiermem config) before importing."
                    )
            try:
                memory.check_block_spec(spec)
            except TiermemError as exc:
                raise ValidationError(f"Agent {shown_label(p.name)}: block {shown_label(spec.label)}: {exc}") from None


def run_export(
    memory: Memory,
    *,
    agent: str | list[str] | None = None,
    fmt: str,
    output: str | None,
    vectors: bool,
    all_agents: bool = False,
) -> dict[str, Any]:
    names = [agent] if isinstance(agent, str) else list(agent or [])
    if fmt == "af":
        if all_agents:
            if names:
                raise ValidationError("Give agent names or --all, not both.")
            names = [a.name for a in memory.list_agents()]
            if not names:
                raise ValidationError("There are no agents to export.")
        if not names:
            raise ValidationError("Name the agents to export: tiermem export AGENT [AGENT ...] -o FILE.af (or --all)")
        data, notes = af_export.export_agent_files(memory, names)
        text = json.dumps(data, ensure_ascii=False, indent=2)
        _write(output, lambda f: f.write(text + "\n"))
        passages = sum(len(v) for v in data[EXTENSION]["passages"].values())
        report: dict[str, Any] = {
            "format": "af",
            "agents": [a["name"] for a in data["agents"]],
            "blocks": len(data["blocks"]),
            "messages": sum(len(a["messages"]) for a in data["agents"]),
            "passages": passages,
            "links": sum(len(v) for v in data[EXTENSION].get("links", {}).values()),
            "tools": len(data["tools"]),
            "groups": len(data["groups"]),
            "output": output or "-",
        }
        if len(names) == 1:
            report["agent"] = names[0]
        if notes:
            report["notes"] = notes
        return report
    if fmt == "jsonl":
        if names or all_agents:
            raise ValidationError(
                "A jsonl backup holds every agent; leave out AGENT and --all (or export agents as .af)."
            )
        counts: dict[str, int] = {}
        _write(output, lambda f: counts.update(backup.export_backup(memory, f, vectors=vectors)))
        return {"format": "jsonl", "rows": counts, "output": output or "-"}
    if fmt == "memfs":
        if len(names) != 1 or all_agents or output in (None, "-"):
            raise ValidationError("Name one agent and a directory: tiermem export AGENT --format memfs -o DIR")
        return memfs.export_memfs(memory, names[0], Path(output).expanduser())
    raise ValidationError(f"Unknown export format {fmt!r}; use af, jsonl or memfs.")


def output_file(output: str | None) -> Path | None:
    """The file ``-o`` names (None: stdout), if it can be written there: its directory exists and it is no
    directory itself. Checked before anything is exported (``cli/prechecks.py``) and again as it is written."""
    if output in (None, "-"):
        return None
    target = Path(str(output)).expanduser()
    parent = target.parent
    if parent.exists() and not parent.is_dir():
        raise ValidationError(f"Cannot write {target}: {parent} is a file, not a directory. Give another path to -o.")
    if not parent.is_dir():
        raise ValidationError(
            f"Cannot write {target}: the directory {parent} does not exist. Make it first "
            f"(mkdir -p {shlex.quote(str(parent))}) or give another path to -o. Nothing was exported."
        )
    if target.is_dir():
        raise ValidationError(f"Cannot write {target}: it is a directory. Give a file name to -o.")
    return target


def _write(output: str | None, fill: Any) -> None:
    """Write to stdout, or to a temporary file renamed into place (no half-written export)."""
    target = output_file(output)
    if target is None:
        fill(sys.stdout)
        return
    try:
        write_atomically(target, fill)
    except OSError as exc:  # named by the user's path: the temporary file beside it is no concern of theirs
        raise ValidationError(f"Cannot write {target}: {exc.strerror or exc}. Nothing was exported.") from exc
