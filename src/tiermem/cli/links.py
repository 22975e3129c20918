"""``tiermem links``: a memory's neighbourhood (the memory and what it links to, drawn in the terminal), and links
made or removed on purpose (``domain/links.py``). The parser is built here (``add_links_parser``, called by
``cli.main``)."""

from __future__ import annotations

import argparse
import json
import textwrap
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..base.errors import ValidationError
from .terminal import echo

if TYPE_CHECKING:
    from ..base.config import Settings
    from ..domain.links import Neighbourhood
    from ..domain.memory import Memory

EXAMPLE = (
    "tiermem links message-9a2e...                 # the memory and its links, drawn\n"
    "  tiermem links add message-9a2e... passage-0c1f... --note 'the trip she planned'\n"
    "  tiermem links remove message-9a2e... passage-0c1f...\n"
    "  tiermem links show passage-0c1f... --json"
)
ACTIONS = ("add", "remove", "show")


def add_links_parser(sp: Any, common: Callable[..., None]) -> None:
    text = (
        "Show a memory's links (the turns beside it in its sitting, links made on purpose), or link two memories "
        "(recall turns or archival passages; `tiermem search QUERY --json` shows their ids) on purpose: `tiermem "
        "links ID` then shows each with the other (searches, the CLI's and the tools', do not follow links)."
    )
    p = sp.add_parser(
        "links",
        help=text,
        description=text,
        epilog=f"example:\n  {EXAMPLE}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    common(p)
    p.add_argument(
        "words",
        nargs="+",
        metavar="ID",
        help="an id (show its links), or add|remove and two ids, or show and one id",
    )
    p.add_argument(
        "--note",
        default="",
        help="add: why the two belong together (shown with the link; at most 1,000 characters, no control "
        "characters but tabs and line breaks)",
    )
    p.add_argument("--json", action="store_true")


def links_command(memory: Memory, settings: Settings, args: argparse.Namespace) -> int:
    words = list(args.words)
    action = words.pop(0) if words[0] in ACTIONS else "show"
    agent = memory.named_agent(settings.agent)
    if action in ("add", "remove"):
        if len(words) != 2:
            raise ValidationError(f"links {action} takes two memory ids: tiermem links {action} ID ID.")
        a, b = words
        if action == "add":
            memory.link(agent.id, a, b, args.note)  # both must be this agent's turns or passages
            done = {"linked": [a, b], "note": args.note}
        else:
            if not memory.unlink(agent.id, a, b):
                raise ValidationError(f"{a} and {b} are not linked on purpose (sitting links are not removed).")
            done = {"unlinked": [a, b]}
        if args.json:
            print(json.dumps(done))
        else:
            echo(f"{'added' if action == 'add' else 'removed'} link {a} — {b}")
        return 0
    if len(words) != 1:
        raise ValidationError("links show takes one memory id: tiermem links ID.")
    found = memory.neighbourhood(agent.id, words[0])
    if args.json:
        print(json.dumps(found.as_dict(), indent=1))
    else:
        echo("\n".join(draw(found)))
    return 0


def _line(content: str, width: int) -> str:
    return textwrap.shorten(" ".join(content.split()), width=width, placeholder=" ...")


def draw(found: Neighbourhood, width: int = 96) -> list[str]:
    """The memory, then each link as a branch: its kind, the linked memory's id, date and text."""
    c = found.center
    head = "recall" if found.table == "messages" else "archival"
    out = [
        f"{c.id}  ({head}{', ' + c.role if c.role else ''}, {c.created_at:%d %b %Y})",
        f"  {_line(c.content, width)}",
    ]
    if not found.links:
        out.append("  (no links)")
    for n, (link, h) in enumerate(found.links):
        last = n == len(found.links) - 1
        note = f" {link.note!r}" if link.note else ""
        out.append(f"{'└' if last else '├'}── {link.kind}{note} → {h.id}  ({h.created_at:%d %b %Y})")
        out.append(f"{' ' if last else '│'}     {_line(h.content, width - 6)}")
    return out
