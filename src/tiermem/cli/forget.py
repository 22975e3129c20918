"""``tiermem forget ...``: forget a passage, a message, a block's past values, an agent, or a text, from search at
once and from every file of the store (``domain/forgetting.py``); a text is also edited out of Claude Code's
auto-memory files synced with the memory, and a passage out of the file it was stored from
(``interop/auto_memory_admin.py``); synced MemFS directories and their git history that still hold it are named, not
rewritten. The parser is built here (``add_forget_parser``, called by ``cli.main``)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.errors import ValidationError
from .suggest import path
from .terminal import echo

if TYPE_CHECKING:
    from ..base.config import Settings
    from ..base.records import Agent
    from ..domain.forgetting import Target
    from ..domain.memory import Memory

EXAMPLE = (
    "tiermem forget passage passage-0c1f... --agent work --now\n"
    "  tiermem forget message message-9a2e...\n"
    "  tiermem forget block human --version 3          # one past value; --history: every past value\n"
    "  tiermem forget agent old-project --yes\n"
    "  tiermem forget --text 'my old address' --now     # every passage, message and block version holding it"
)


def add_forget_parser(sp: Any, common: Callable[..., None]) -> None:
    text = (
        "Forget a passage, a message, a block's past values, an agent or a text: gone from search at once, from "
        "every file of the data directory at the next upkeep (`tiermem optimize`), or at once with --now."
    )
    p = sp.add_parser(
        "forget",
        help=text,
        description=text,
        epilog=f"example:\n  {EXAMPLE}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    common(p)
    p.add_argument("what", nargs="?", choices=("passage", "message", "block", "agent"), help="what to forget")
    p.add_argument("ref", nargs="?", help="the passage or message id, the block label, or the agent name")
    p.add_argument(
        "--text",
        help="forget every passage, message and block version holding this text (exactly); "
        "with --agent only that agent's",
    )
    p.add_argument("--version", type=int, action="append", help="block: a past version to forget (repeatable)")
    p.add_argument("--history", action="store_true", help="block: every past version (the current value stays)")
    p.add_argument("--now", action="store_true", help="purge the data directory's files now, not at the next upkeep")
    p.add_argument(
        "--memfs",
        type=path,
        action="append",
        default=[],
        help="a MemFS directory to look in for the forgotten text (those synced with `tiermem sync DIR`, `serve`'s sync "
        "setting or `setup letta-code` are found by themselves)",
    )
    p.add_argument("--yes", action="store_true", help="do it without asking")
    p.add_argument("--json", action="store_true")


def forget_command(memory: Memory, settings: Settings, args: argparse.Namespace) -> int:
    from ..domain.forgetting import check_found, forget

    usage = _usage_error(args)
    if usage is not None:  # contradictory flags: a usage error (exit 2), nothing opened or forgotten
        print(f"tiermem: {usage}", file=sys.stderr)
        return 2
    for root in args.memfs:
        if not Path(root).is_dir():
            raise ValidationError(
                f"--memfs {root}: no such directory; give a MemFS directory to look in (nothing was forgotten)."
            )
    target, agent_names = _target(memory, settings, args)
    check_found(memory, target)  # a mistyped id is said first, not after a question or a rerun with --yes
    if not args.yes:
        what = (
            f"every passage, message and block version holding {args.text!r}"
            if target.kind == "text"
            else f"{target.kind} {args.ref}"
            + (
                f" version(s) {', '.join(map(str, target.versions))}"
                if target.versions
                else " (every past version)"
                if target.kind == "block"
                else ""
            )
        )
        if not sys.stdin.isatty():
            print(f"tiermem: nothing was forgotten; to forget {what}, run again with --yes.", file=sys.stderr)
            return 2
        answer = input(f"Forget {what}? This cannot be undone. [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing was forgotten", file=sys.stderr)
            return 1
    from ..interop.auto_memory_admin import after_forget, syncs_held
    from ..interop.memfs_holders import holders, synced_directories

    scope = agent_names if target.agent_id is not None else None  # None: every agent's (a whole-store forget)
    local = settings.uri is None  # Claude Code's auto memory: what was forgotten edited out of its files
    edited: list[str] = []
    named: list[str] = []
    with syncs_held(settings.resolved_data_dir(), scope) if local else nullcontext():
        done = forget(memory, target, now=args.now)
        if local:
            edited, named = after_forget(
                settings.resolved_data_dir(), scope, target.kind, target.ref, done.texts, done.passage_ids
            )
    roots = synced_directories(
        agent_names, [*args.memfs, *([settings.sync] if settings.sync else [])], settings.resolved_data_dir()
    )
    still = holders(roots, done.texts) + named
    # exit 1 when the purge asked for with --now did not finish (what was forgotten is gone from search already)
    status = 0 if done.purge_unfinished is None else 1
    if args.json:
        print(
            json.dumps(
                {**done.as_dict(), "auto_memory_files_edited": edited, "still_held_outside_the_store": still}, indent=2
            )
        )
        return status
    for line in done.lines():
        echo(line)
    for name in edited:
        echo(f"edited what was forgotten out of Claude Code's auto-memory file {name}")
    for line in still:
        echo(f"still held outside the store: {line}")
    if status:
        print(
            "tiermem: forgotten, but the purge of the store's files did not finish (see above); "
            "`tiermem optimize` finishes it.",
            file=sys.stderr,
        )
    return status


def _usage_error(args: argparse.Namespace) -> str | None:
    """What two of the given flags contradict, if anything."""
    if args.text is not None and args.what is not None:
        return "Give either --text or what to forget (passage, message, block, agent), not both."
    if args.what == "block" and args.version and args.history:
        return "Give --version N (one past value; repeatable) or --history (every past value), not both."
    if (args.version or args.history) and args.what != "block":
        flag = "--version" if args.version else "--history"
        return f"{flag} applies to `tiermem forget block LABEL`; leave it out to forget a {args.what or 'text'}."
    return None


def _target(memory: Memory, settings: Settings, args: argparse.Namespace) -> tuple[Target, list[str]]:
    from ..domain.forgetting import Target

    if args.text is not None:
        agent = _agent(memory, args.agent) if args.agent else None
        names = [agent.name] if agent else [a.name for a in memory.list_agents()]
        return Target("text", agent.id if agent else None, args.text), names
    if args.what is None or not args.ref:
        raise ValidationError(
            "Say what to forget: passage ID, message ID, block LABEL (--version N or --history), "
            "agent NAME, or --text TEXT."
        )
    if args.what == "agent":
        agent = _agent(memory, args.ref)
        return Target("agent", agent.id, agent.name), [agent.name]
    agent = _agent(memory, settings.agent, named=True)
    if args.what == "block":
        if not args.version and not args.history:
            raise ValidationError(
                "Forgetting a block's past values needs --version N (repeatable) or --history "
                "(every past value); the current value stays (edit the block to change it)."
            )
        return Target("block", agent.id, args.ref, tuple(args.version) if args.version else None), [agent.name]
    return Target(args.what, agent.id, args.ref), [agent.name]


def _agent(memory: Memory, name: str, *, named: bool = False) -> Agent:
    from .commands import existing_agent

    return existing_agent(memory, name, "forgotten", named=named)
