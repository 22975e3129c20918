"""The CLI's command handlers (agents, blocks, search, import/export); ``cli.py`` parses and dispatches.

Why this module is long: it holds the handlers of many small commands, each short and independent of the others;
command groups that grow (``forget``, ``folders``) get a module of their own.
"""

from __future__ import annotations

import json
import shlex
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.errors import ConfigError, ConflictError, EditError, NotFoundError, TiermemError, ValidationError
from .terminal import echo

if TYPE_CHECKING:
    import argparse

    from ..base.config import Settings
    from ..base.records import Agent
    from ..domain.memory import Memory


def print_rows(obj: Any, as_json: bool) -> None:
    """JSON, or a table: a header of the column names, then one aligned line per row (the last column unpadded)."""
    if as_json:
        print(json.dumps(obj, indent=2, ensure_ascii=False, default=str))
    elif isinstance(obj, str):
        echo(obj)
    elif obj:
        columns = list(obj[0])
        cells = [
            [str(row.get(c, "")).lower() if isinstance(row.get(c), bool) else str(row.get(c, "")) for c in columns]
            for row in obj
        ]
        widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
        for line in [columns, *cells]:
            echo("  ".join(v.ljust(w) for v, w in zip(line[:-1], widths[:-1], strict=True)) + "  " + line[-1])


def existing_agent(memory: Memory, name: str, undone: str, *, named: bool = False) -> Agent:
    """The agent named ``name`` (``named``: the one a command works on, ``default`` made on first use); a missing one
    is an error naming those that exist and what was ``undone`` ("deleted"), not a hint to create it."""
    try:
        return memory.named_agent(name) if named else memory.get_agent(name)
    except NotFoundError:
        names = ", ".join(a.name for a in memory.list_agents()) or "none"
        raise NotFoundError(
            f"No agent named {name!r} (agents: {names}); nothing was {undone}. Check the name with "
            "`tiermem agents list`."
        ) from None


def agent_delete_command(memory: Memory, args: argparse.Namespace) -> int:
    """Show what deleting the agent removes, ask (unless --yes), then delete it."""
    agent = existing_agent(memory, args.name, "deleted")
    plan = memory.deletion_plan(agent.id)
    print(f"Deleting removes:\n{plan.describe()}", file=sys.stderr)
    if not args.yes:
        if not sys.stdin.isatty():
            print(f"tiermem: nothing was deleted; to delete {agent.name}, run again with --yes.", file=sys.stderr)
            return 2
        answer = input(f"Delete agent {agent.name}? This cannot be undone (export it first to keep a copy). [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing was deleted", file=sys.stderr)
            return 1
    done = memory.delete_agent(agent.id)
    echo(f"deleted agent {agent.name} ({agent.id})")
    if done.purge_unfinished:
        print(f"tiermem: deleted; {PURGE_PENDING}: {done.purge_unfinished}", file=sys.stderr)
    return 0


PURGE_PENDING = "purge pending (run `tiermem optimize` to remove its old values from the core state's files)"


def config_command(settings: Settings, args: argparse.Namespace) -> int:
    """A host snippet on stdout or in ``--output``; one that holds a token is written with mode 0600."""
    import os
    import stat

    from ..interop.hosts import HTTP_FILE, SECRET_HOSTS, host_note, snippet
    from ..process.netguard import write_private

    text = (
        snippet(
            args.host,
            data_dir=settings.resolved_data_dir().resolve(),
            agent=settings.agent,
            agent_loop=bool(settings.agent_loop),
            port=settings.port,
            config_file=HTTP_FILE if args.output is None else str(args.output),
        )
        + "\n"
    )
    print(f"# {host_note(args.host, args.output)}", file=sys.stderr)
    secret = args.host in SECRET_HOSTS
    if args.output is not None:
        if secret:
            write_private(args.output, text)
        else:
            args.output.write_text(text, encoding="utf-8")
        print(f"wrote {args.output}" + (" (mode 0600: it holds a token)" if secret else ""), file=sys.stderr)
        return 0
    if secret:  # `tiermem config http > file`: the shell made the file with the umask's mode; narrow it
        try:
            if stat.S_ISREG(os.fstat(sys.stdout.fileno()).st_mode):
                os.fchmod(sys.stdout.fileno(), 0o600)
        except (OSError, ValueError):
            pass  # not a file we own (a pipe, a terminal): nothing to narrow
    sys.stdout.write(text)
    return 0


def interop_command(memory: Memory, settings: Settings, args: argparse.Namespace) -> int:
    from ..interop.commands import run_export, run_import

    if args.command == "sync":
        return sync_command(memory, settings, args)
    if args.command == "import":
        report = run_import(
            memory,
            args.path,
            fmt=args.format,
            agent=settings.agent,
            rename=args.rename,
            replace=args.replace,
            include_forgotten=args.include_forgotten,
        )
        if args.json:
            print_rows(report, True)
        else:
            for key, value in report.items():
                if key == "notes":
                    for note in value:
                        print(f"note: {note}", file=sys.stderr)
                elif key == "kept_not_run":
                    continue  # the notes say it, in words
                elif value not in ([], None):
                    echo(f"{key}: {', '.join(map(str, value)) if isinstance(value, list) else value}")
        return 0
    fmt = args.format
    if args.output and args.output.endswith(".jsonl") and fmt == "af" and not args.name and not args.all_agents:
        fmt = "jsonl"
    names = list(args.name)
    if not names and not args.all_agents and fmt in ("af", "memfs"):
        names = [memory.named_agent(settings.agent).name]  # the agent every command uses ($TIERMEM_AGENT, 'default')
    report = run_export(
        memory, agent=names, fmt=fmt, output=args.output, vectors=args.vectors, all_agents=args.all_agents
    )
    for note in report.pop("notes", []):
        print(f"note: {note}", file=sys.stderr)
    if args.output not in (None, "-"):
        print(json.dumps(report), file=sys.stderr)
    return 0


def sync_command(memory: Memory, settings: Settings, args: argparse.Namespace) -> int:
    """``tiermem sync DIR [--watch [SECONDS]]``: the agent is --agent, else the one the directory was synced with."""
    import os

    from ..interop.memfs_holders import remember_synced
    from ..interop.memfs_sync import needs_attention, recorded_agent, sync_memfs, watch_memfs

    agent = settings.agent
    if args.agent is None and "TIERMEM_AGENT" not in os.environ:
        agent = recorded_agent(args.path) or agent
    remember_synced(settings.resolved_data_dir(), agent, args.path)  # so `tiermem forget` looks there
    quiet = ("format", "agent", "directory", "layout", "waiting")  # said once, not every round of --watch

    def show(report: dict[str, Any]) -> None:
        if args.json:
            print(json.dumps(report, ensure_ascii=False), flush=True)
            return
        for key, value in report.items():
            if value not in ([], None, "") and (args.watch is None or key not in quiet):
                echo(f"{key}: {', '.join(map(str, value)) if isinstance(value, list) else value}", flush=True)

    if args.watch is not None:
        print(
            f"tiermem: syncing {args.path} with agent {agent!r} whenever either side changes (checked every "
            f"{args.watch:g} s); Ctrl-C stops",
            file=sys.stderr,
        )
        attention: list[dict[str, Any]] = []  # the rounds that left something to settle
        failed: list[TiermemError] = []  # the rounds that failed (a plain sync exits 1 on each)

        def shown(report: dict[str, Any]) -> None:
            show(report)
            if needs_attention(report):
                attention.append(report)

        def error(exc: TiermemError) -> None:
            print(f"tiermem: {exc}", file=sys.stderr, flush=True)
            failed.append(exc)

        with stopping() as stop:
            try:
                watch_memfs(
                    memory,
                    agent,
                    args.path,
                    interval=args.watch,
                    prefer=args.prefer,
                    on_report=shown,
                    keep_going=lambda: not stop.is_set(),
                    on_error=error,
                    wait=stop.wait,
                )
            except KeyboardInterrupt:  # a second Ctrl-C: stopped at once, maybe half-way through a round
                print("tiermem: stopped watching at once, maybe within a sync (exit 130)", file=sys.stderr, flush=True)
                return 130
        said = [f"{len(failed)} sync(s) failed"] if failed else []
        said += [f"{len(attention)} sync(s) left something to settle"] if attention else []
        code = 1 if failed else 2 if attention else 0
        print(
            f"tiermem: stopped watching{'; ' + ', '.join(said) + f' (exit {code})' if said else ''}",
            file=sys.stderr,
            flush=True,
        )
        return code
    report = sync_memfs(memory, agent, args.path, prefer=args.prefer)
    show(report)
    return 2 if needs_attention(report) else 0


@contextmanager
def stopping() -> Iterator[threading.Event]:
    """An event SIGINT (Ctrl-C) or SIGTERM sets, so a watch ends after the round it is in (said on stderr at once); a
    second signal raises ``KeyboardInterrupt`` (stop now). The previous handlers are put back on leaving."""
    import os
    import signal

    stop = threading.Event()
    # stderr's own descriptor, not fd 2: with stderr closed at start, fd 2 may be a file or socket opened since
    # (cli.keep_notices_off_stdout points sys.stderr at the null device then)
    try:
        fd = sys.stderr.fileno() if sys.stderr is not None else -1
    except (OSError, ValueError):
        fd = -1

    def handler(signum: int, frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        # os.write, not print: the main thread may be inside a print to stderr when the handler runs. With stderr
        # closed (`2>&-`) or its reader gone, the notice has nowhere to go: the stop it announces still happens
        try:
            os.write(fd, b"tiermem: stopping once this sync is done; Ctrl-C again stops at once\n")
        except OSError:
            pass

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def setup_letta_code(settings: Settings, args: argparse.Namespace) -> int:
    """``tiermem setup letta-code``: the first sync, then the host configuration that keeps the directory in step."""
    from ..domain.factory import open_memory
    from ..interop.hosts import HOSTS, snippet
    from ..interop.letta_code import default_agent_name, resolve_agent_dir, setup

    root = resolve_agent_dir(args.agent_dir, args.letta_agent).resolve()
    agent = args.agent or default_agent_name(root)
    if agent is None:
        raise ValidationError(f"Name the tiermem agent for {root}: --agent NAME.")
    memory = open_memory(settings, start_embedder=False)
    report = setup(memory, root, agent)
    env = {"TIERMEM_SYNC": str(root), "TIERMEM_MEMORY_TOOL_DIALECT": args.dialect}
    config = snippet(args.host, data_dir=settings.resolved_data_dir().resolve(), agent=agent, extra_env=env)
    report["host_config"] = config
    # the store this setup used, and the config it read: run as printed, the watch works on the same ones
    watch = ["tiermem", "sync", str(root), "--agent", agent, "--data-dir", str(settings.resolved_data_dir().resolve())]
    if getattr(args, "config", None) is not None:
        watch += ["--config", str(Path(args.config).resolve())]
    report["watch_command"] = shlex.join([*watch, "--watch"])
    if args.json:
        print_rows(report, True)
        return 0
    print(
        f"Letta Code agent memory: {root}\ntiermem agent: {agent}" + (" (created)" if report["created_agent"] else ""),
        file=sys.stderr,
    )
    if "warning" in report:
        print(f"warning: {report['warning']}", file=sys.stderr)
    for key, value in report["sync"].items():
        print(f"first sync: {key}: {', '.join(map(str, value)) if isinstance(value, list) else value}", file=sys.stderr)
    print(
        f"\nEvery MCP server started with this configuration keeps the directory in step while it runs "
        f"({HOSTS[args.host]}):",
        file=sys.stderr,
    )
    print(config)
    print(f"\nWithout a running server: {report['watch_command']}", file=sys.stderr)
    return 0


def _folders_of(memory: Memory, agent_id: str) -> list[str]:
    """The agent's attached folders, each with its files and those open (the view is in its metadata)."""
    state = memory.files.state(agent_id)
    out = []
    for f in state.folders:
        views = [v for v in state.files if v.folder_id == f["id"]]
        opened = sum(v.is_open for v in views)
        out.append(f"{f['name']} ({len(views)} files, {opened} open)")
    return out


def agent_show_command(memory: Memory, args: argparse.Namespace) -> None:
    """One agent: settings, blocks, message and passage counts, and what an import kept that tiermem does not run."""
    from ..interop import letta_passthrough

    agent = memory.get_agent(args.name)
    messages, passages, _tags = memory.archive.counts(agent.id)
    doc = letta_passthrough.parse(agent.metadata)
    kept = letta_passthrough.summary(doc)
    if doc is None and agent.metadata.get("letta_unsupported"):  # imported by an earlier tiermem: names only
        try:
            names = json.loads(agent.metadata["letta_unsupported"])
        except ValueError:
            names = {}
        kept = (
            {
                f"{k} (names only; import the file again to keep it whole)": v if isinstance(v, list) else [str(v)]
                for k, v in names.items()
            }
            if isinstance(names, dict)
            else {}
        )
    info: dict[str, Any] = {
        "name": agent.name,
        "id": agent.id,
        "created": agent.created_at.isoformat(timespec="seconds"),
        "settings": user_settings(agent.metadata),
        "folders": _folders_of(memory, agent.id),
        "blocks": [
            f"{b.label} ({len(b.value)}/{b.limit} chars{', read-only' if b.read_only else ''})"
            for b in memory.blocks(agent.id)
        ],
        "messages": messages,
        "passages": passages,
        "kept_not_run": kept,
    }
    if args.json:
        print_rows({**info, "system": agent.system}, True)
        return
    echo(f"{agent.name} ({agent.id}), created {info['created']}")
    echo(f"system prompt: {len(agent.system)} characters")
    for k, v in info["settings"].items():
        echo(f"  {k} = {v}")
    echo(f"blocks: {', '.join(info['blocks']) or 'none'}")
    if info["folders"]:
        echo(f"folders: {', '.join(info['folders'])}")
    echo(f"messages: {info['messages']}, archival passages: {info['passages']}")
    if not kept:
        echo("kept but not run: nothing (tiermem runs all of this agent)")
        return
    echo("kept for export, not run by tiermem:")
    for key, items in kept.items():
        echo(f"  {key.replace('_', ' ')} ({len(items)}):")
        for item in items:
            echo(f"    - {item}")


def edit_block(memory: Memory, agent_id: str, label: str) -> None:
    import os
    import re
    import shlex
    import subprocess
    import tempfile

    from ..domain.blocks import Rethink

    block = memory.block(agent_id, label)
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    # a label may hold "/" (system/human/family): in the name it would lead the file out of $TMPDIR, into a directory
    # someone else may have made (and could swap the file in while the editor has it open)
    fd, path = tempfile.mkstemp(prefix=f"tiermem-{re.sub(r'[^A-Za-z0-9_-]', '_', label)[:60]}-", suffix=".md")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(block.value + "\n")  # a text file's last line ends with a newline: the one dropped when read back
    try:
        done = subprocess.run([*shlex.split(editor), path], check=False)
    except OSError as exc:
        os.unlink(path)
        raise ConfigError(f"Cannot start the editor {editor!r}: {exc}. Set $EDITOR (e.g. EDITOR=nano).") from exc
    if done.returncode != 0:
        os.unlink(path)
        raise EditError(f"The editor exited with status {done.returncode}; the block was not changed.")
    # one trailing newline dropped, as for '-' (stdin): the one written above, or the one an editor adds on saving
    # (vim's 'fixendofline', nano), so a save without a change is no new version
    value = open(path, encoding="utf-8").read().removesuffix("\n")
    if value == block.value:
        os.unlink(path)
        echo(f"{label}: unchanged (version {block.version})")
        return
    current = memory.block(agent_id, label)
    if current.version != block.version:
        raise ConflictError(
            f"{label} changed while you were editing (version {block.version} -> {current.version}); nothing was "
            f"written. Your text is kept in {path}: run `tiermem blocks edit {label}` again and merge it."
        )
    try:
        saved = memory.edit(agent_id, label, Rethink(value, operation="edit", check_line_numbers=False), actor="human")
    except TiermemError as exc:
        raise type(exc)(f"{exc} Nothing was written; your text is kept in {path}.") from exc
    os.unlink(path)
    echo(f"{label}: version {saved.version}, {len(saved.value)}/{saved.limit} characters")


def search_command(memory: Memory, settings: Settings, args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= 100:
        raise ValidationError(f"--limit must be from 1 to 100, got {args.limit}.")
    agent = memory.named_agent(settings.agent)
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    if not args.recall:
        tags = [t.strip() for t in args.tags.split(",") if t.strip()] if args.tags else None
        found = memory.archival_search(  # a hit is a use, and times are in the agent's zone, as the tools' are
            agent.id,
            args.query,
            tags=tags,
            tag_match_mode="any",
            top_k=args.limit,
            start_datetime=None,
            end_datetime=None,
        )
        notes += found.notes
        for h in found.hits:
            rows.append(
                {
                    "memory": "archival",
                    "relevance": round(h.relevance, 4),
                    "score": round(h.score, 4),
                    "time": h.created_at.isoformat(timespec="seconds"),
                    "where": ",".join(h.tags),
                    "content": h.content,
                    "id": h.id,
                }
            )
    if not args.archival:
        found = memory.conversation_search(
            agent.id, args.query, roles=None, limit=args.limit, start_date=None, end_date=None
        )
        notes += found.notes
        for h in found.hits:
            rows.append(
                {
                    "memory": "recall",
                    "relevance": round(h.relevance, 4),
                    "score": round(h.score, 4),
                    "time": h.created_at.isoformat(timespec="seconds"),
                    "where": h.role or "",
                    "content": h.content,
                    "id": h.id,
                }
            )
    rows.sort(key=lambda r: -r["relevance"])  # one list, most relevant first: relevance is comparable across memories
    for note in dict.fromkeys(notes):
        print(f"note: {note}", file=sys.stderr)
    if args.json:
        print_rows(rows, True)
        return 0
    if not rows:
        echo("no results")
        return 0
    import shutil

    width = max(40, shutil.get_terminal_size((120, 20)).columns - 65)
    echo(f"{'memory':8s}  {'relevance':>9s}  {'time':19s}  {'role/tags':18s}  content")
    for r in rows:
        text = " ".join(r["content"].split())
        text = text if len(text) <= width else text[: width - 1] + "…"
        echo(f"{r['memory']:8s}  {r['relevance']:9.3f}  {r['time'][:19]:19s}  {r['where'][:18]:18s}  {text}")
    return 0


def agent_set_command(memory: Memory, settings: Settings, args: argparse.Namespace) -> None:
    agent = memory.named_agent(args.name)
    updates: dict[str, str] = {}
    if args.agent_type is not None:
        updates["agent_type"] = args.agent_type
    if args.sleeptime is not None:
        if args.sleeptime < 0:
            raise ValidationError("--sleeptime must be 0 (off) or a positive number of turns.")
        updates["sleeptime_frequency"] = str(args.sleeptime)
    if args.autoclear is not None:
        updates["message_buffer_autoclear"] = "true" if args.autoclear else "false"
    if args.timezone is not None:
        from ..domain.memory import TIMEZONE_KEY

        updates[TIMEZONE_KEY] = _checked_zone(args.timezone)
    system = args.system  # ('-': stdin, read by ``prechecks``)
    if not updates and system is None:
        raise ValidationError(
            "Nothing to set: give --type, --sleeptime, --autoclear/--no-autoclear, --system or --timezone."
        )
    before = agent
    agent = memory.set_agent_metadata(agent.id, updates, system=system)
    shown = user_settings(agent.metadata)
    if args.json:
        print_rows({"name": agent.name, "id": agent.id, "metadata": shown, "system": agent.system}, True)
    else:
        echo(f"{agent.name}: {'; '.join(_changes(before.metadata, updates, before.system, system))}")
        echo(f"settings now: {', '.join(f'{k}={v}' for k, v in shown.items()) or 'defaults'}")


def user_settings(metadata: dict[str, str]) -> dict[str, str]:
    """An agent's metadata as its settings are shown (``agents show``, ``agents set``), sorted: without what tiermem
    keeps there for itself (the folder files' views, an import's Letta document and model settings)."""
    from ..domain.filesystem import STATE_KEY as FILES_STATE_KEY
    from ..interop import letta_passthrough

    internal = (letta_passthrough.KEY, "letta_unsupported", FILES_STATE_KEY)
    return {
        k: v
        for k, v in sorted(metadata.items())
        if k not in internal and not k.startswith(("letta_llm", "letta_embedding"))
    }


def _checked_zone(name: str) -> str:
    """``--timezone``'s value as stored: an IANA zone's name, or "" (UTC: the key is removed)."""
    from ..domain.periods import time_zone

    zone = name.strip()
    if zone.upper() == "UTC":
        return ""
    if zone and time_zone(zone) is None:
        raise ValidationError(
            f"--timezone {zone!r} is not an IANA time zone: give a name such as 'Europe/Paris', "
            "'America/New_York' or 'UTC' ('' for UTC)."
        )
    return zone


def _changes(metadata: dict[str, str], updates: dict[str, str], system: str, new_system: str | None) -> list[str]:
    """What ``agents set`` changed, each setting with its value before, and the system prompt's new start."""
    out = [
        f"{k}={v or 'unset'} (was {metadata.get(k, 'unset')})"
        if metadata.get(k, "") != v
        else f"{k}={v or 'unset'} (unchanged)"
        for k, v in updates.items()
    ]
    if new_system is not None:
        if new_system == system:
            out.append("system prompt unchanged")
        else:
            first = " ".join(new_system.split())
            shown = first if len(first) <= 60 else first[:59] + "…"
            out.append(f"system prompt set ({len(new_system)} characters, was {len(system)}): {shown!r}")
    return out


def blocks_command(memory: Memory, settings: Settings, args: argparse.Namespace) -> int:
    from ..base.config import BlockSpec
    from ..domain.blocks import Rethink, is_pinned

    agent = memory.named_agent(settings.agent)
    if args.action == "list":
        rows = [
            {
                "label": b.label,
                "chars": len(b.value),
                "limit": b.limit,
                "read_only": b.read_only,
                "pinned": is_pinned(b),
                "version": b.version,
                "id": b.id,
            }
            for b in memory.blocks(agent.id)
        ]
        print_rows(rows, args.json)
    elif args.action == "show":
        if args.core or not args.label:
            echo(memory.render_core(agent.id))
        else:
            b = memory.block(agent.id, args.label)
            if args.json:
                print_rows(
                    {
                        "label": b.label,
                        "value": b.value,
                        "limit": b.limit,
                        "description": b.description,
                        "read_only": b.read_only,
                        "version": b.version,
                        "id": b.id,
                    },
                    True,
                )
            else:
                echo(b.value if b.value else "(empty)")  # --json gives the exact value
    elif args.action == "set":
        if args.value is not None:
            b = memory.edit(  # ('-': stdin, read by ``prechecks``)
                agent.id, args.label, Rethink(args.value, operation="set", check_line_numbers=False), actor="human"
            )
            echo(f"{b.label}: version {b.version}, {len(b.value)}/{b.limit} characters")
        settings_given = (args.new_label, args.description, args.limit, args.read_only, args.pinned) != (None,) * 5
        if settings_given:
            b = memory.update_block(
                agent.id,
                args.label,
                new_label=args.new_label,
                description=args.description,
                limit=args.limit,
                read_only=args.read_only,
                pinned=args.pinned,
            )
            echo(
                f"{b.label}: version {b.version}, limit {b.limit}, read_only={str(b.read_only).lower()}, "
                f"pinned={str(is_pinned(b)).lower()}"
            )
        if args.value is None and not settings_given:
            raise ValidationError(
                "Nothing to set: give a VALUE ('-' for stdin) or --label/--description/--limit/--read-only/"
                "--writable/--pinned/--detached."
            )
    elif args.action == "create":
        spec = BlockSpec(
            label=args.label, value=args.value, description=args.description, limit=args.limit, read_only=args.read_only
        )
        b = memory.create_block(agent.id, spec, actor="human")
        echo(f"created block {b.label} ({b.id})")
    elif args.action == "attach":
        source = memory.get_agent(args.source)
        b = memory.attach(agent.id, memory.block(source.id, args.label).id)
        echo(f"attached block {b.label} ({b.id}) from {source.name} to {agent.name}")
    elif args.action == "history":
        versions = memory.history(agent.id, args.label, args.limit)
        print_rows(
            [
                {
                    "version": v.version,
                    "time": v.created_at.isoformat(timespec="seconds"),
                    "operation": v.operation,
                    "actor": v.actor,
                    "value": v.value if args.json else v.value[:60].replace("\n", "⏎"),
                }
                for v in versions
            ],
            args.json,
        )
    elif args.action == "edit":
        edit_block(memory, agent.id, args.label)
    elif args.action == "revert":
        b, written = memory.revert_version(agent.id, args.label, args.version, actor="human")
        if written:
            echo(f"{b.label}: reverted to version {args.version}'s value as version {b.version}")
        else:
            echo(f"{b.label}: already holds version {args.version}'s value (version {b.version}); nothing written")
    return 0
