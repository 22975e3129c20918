"""``tiermem timeline``: counts per day, ISO week or month of an agent's recall, archival passages, file changes and
block versions (``domain/timeline.py``), one line per period with a bar; ``--period P`` lists what one period holds
and the terms that rise in it. Its arguments are checked before the data directory is opened (``check``)."""

from __future__ import annotations

import json
from datetime import timedelta, timezone
from typing import TYPE_CHECKING

from ..domain.archive import parse_bound
from ..domain.periods import check_unit, parse_period
from ..domain.timeline import check_kinds, parse_range
from .terminal import echo

if TYPE_CHECKING:
    import argparse

    from ..base.config import Settings
    from ..domain.memory import Memory
    from ..domain.timeline import PeriodView, Timeline

BAR = 30  # characters of the longest bar


def usage_conflict(args: argparse.Namespace) -> str | None:
    """A flag that does nothing with the others given (a usage error, exit 2), rather than one silently ignored."""
    if args.period is not None and args.by is not None:
        return f"--by counts the range by a unit; --period {args.period} names its own. Give one or the other."
    if args.period is None and args.limit is not None:
        return (
            "--limit caps the items --period P lists; the counts list every period of the range, so narrow it "
            "with --from/--to instead."
        )
    return None


def check(args: argparse.Namespace) -> None:
    """Bad dates, a start after the end, an unknown unit, kind or period: refused before anything is opened. Bounds
    without a zone are in the agent's time zone, not known yet: a start and an end of which only one names a zone
    are compared once it is (``timeline.parse_range``)."""
    parse_bound(args.start, "--from", end=False)
    parse_bound(args.end, "--to", end=True)
    if _names_a_zone(args.start) == _names_a_zone(args.end):
        parse_range(args.start, args.end, ("--from", "--to"))
    check_unit(args.by or "month")
    check_kinds(args.kind)
    if args.period is not None:
        parse_period(args.period)


def _names_a_zone(bound: str | None) -> bool:
    """Whether a ``--from``/``--to`` value is the same instant in any time zone (it names its own, ``...Z``)."""
    far = timezone(timedelta(hours=14))
    return parse_bound(bound, "bound", end=False) == parse_bound(bound, "bound", end=False, zone=far)


def timeline_command(memory: Memory, settings: Settings, args: argparse.Namespace) -> int:
    from ..domain import timeline

    check(args)
    agent = memory.named_agent(settings.agent)
    if args.period is not None:
        view = timeline.period(
            memory,
            agent.id,
            args.period,
            query=args.query,
            kinds=args.kind,
            project=args.project,
            limit=100 if args.limit is None else args.limit,
            terms=10 if args.terms is None else args.terms,
            start=args.start,
            end=args.end,
        )
        if args.json:
            print(json.dumps(view.as_dict(), ensure_ascii=False, indent=2))
        else:
            echo(render_period(view))
        return 0
    found = timeline.timeline(
        memory,
        agent.id,
        start=args.start,
        end=args.end,
        by=args.by or "month",
        query=args.query,
        kinds=args.kind,
        project=args.project,
        terms=args.terms or 0,
    )
    if args.json:
        print(json.dumps(found.as_dict(), ensure_ascii=False, indent=2))
    else:
        echo(render(found))
    return 0


def render(found: Timeline) -> str:
    """One line per period: its key, the count of each kind, the total and a bar scaled to the fullest period."""
    if not found.periods:
        what = f" matching {found.query!r}" if found.query else ""
        return f"nothing{what} in this range"
    width = max(len(p.key) for p in found.periods)
    cols = [max(len(k), 5) for k in found.kinds]
    head = f"{'period':<{width}}  " + "  ".join(f"{k:>{c}}" for k, c in zip(found.kinds, cols, strict=True))
    lines = [head + "  total"]
    most = max((p.total for p in found.periods), default=0) or 1
    for p in found.periods:
        counts = "  ".join(f"{p.counts.get(k, 0):>{c}}" for k, c in zip(found.kinds, cols, strict=True))
        bar = "#" * (round(BAR * p.total / most) if p.total else 0)
        if p.total and not bar:
            bar = "."
        terms = f"  {', '.join(t.term for t in p.rising)}" if p.rising else ""
        lines.append(f"{p.key:<{width}}  {counts}  {p.total:>5}  {bar}{terms}")
    totals = found.totals
    lines.append(
        f"{'all':<{width}}  "
        + "  ".join(f"{totals[k]:>{c}}" for k, c in zip(found.kinds, cols, strict=True))
        + f"  {sum(totals.values()):>5}"
    )
    return "\n".join(lines)


def render_period(view: PeriodView) -> str:
    p = view.period
    counts = ", ".join(f"{n} {k}" for k, n in p.counts.items() if n) or "nothing"
    lines = [f"{p.key} ({view.by}): {counts}"]
    if view.rising:
        lines.append("rising: " + ", ".join(f"{t.term} ({t.count})" for t in view.rising))
    for item in view.items:
        detail = f"{item.detail}: " if item.detail else ""
        lines.append(f"{item.at:%Y-%m-%d %H:%M}  {item.kind:<8}  {detail}{item.text}  [{item.id}]")
    if view.total > len(view.items):
        lines.append(f"... and {view.total - len(view.items)} more (--limit, --kind or --query narrow the list)")
    return "\n".join(lines)
