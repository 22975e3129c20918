"""``tiermem stats``: how used an agent's memories are: per kind how many are hot, warm and cold, the hottest and the
coldest (``domain/use_stats.py``). The parser is built here (``add_stats_parser``, called by ``cli.main``)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .terminal import echo

if TYPE_CHECKING:
    from ..base.config import Settings
    from ..domain.memory import Memory

HELP = (
    "How used the agent's memories are: per kind (passages, messages, blocks, files) how many are hot, warm and "
    "cold, and the hottest and coldest of them."
)


def add_stats_parser(sp: Any, common: Callable[..., None]) -> None:
    p = sp.add_parser(
        "stats",
        help=HELP,
        description=HELP,
        epilog="example:\n  tiermem stats                 # counts by kind and temperature, the hottest and coldest\n"
        "  tiermem stats --top 20 --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    common(p)
    p.add_argument("--top", type=int, default=5, help="hottest and coldest memories shown (default 5)")
    p.add_argument("--json", action="store_true")


def stats_command(memory: Memory, settings: Settings, args: argparse.Namespace) -> int:
    from ..base.errors import ValidationError
    from ..domain.use_stats import use_stats

    if not 0 <= args.top <= 100:
        raise ValidationError(f"--top must be from 0 to 100, got {args.top}.")
    agent = memory.named_agent(settings.agent)
    memory.uses.flush()  # this process's own uses first
    stats = use_stats(memory, agent.id, top=args.top)
    if args.json:
        print(json.dumps({"agent": agent.name, **stats.as_dict()}, indent=2, ensure_ascii=False))
        return 0
    hot, warm = stats.thresholds
    echo(
        f"agent {agent.name}: use score = uses halving every {stats.half_life_days:g} days; "
        f"hot >= {hot:g}, warm >= {warm:g}, else cold"
    )
    echo(f"{'kind':<10}{'hot':>8}{'warm':>8}{'cold':>8}{'total':>8}")
    for kind, c in stats.counts.items():
        echo(f"{kind:<10}{c['hot']:>8}{c['warm']:>8}{c['cold']:>8}{c['total']:>8}")
    for title, rows in (("hottest", stats.hottest), ("coldest", stats.coldest)):
        if rows:
            echo(f"\n{title}:")
        for u in rows:
            when = u.last_used.strftime("%Y-%m-%d") if u.last_used else "never"
            echo(
                f"  {u.temperature:<5} {u.score:6.2f}  {u.count:>4} use(s)  {when:<10}  {u.kind:<8} {u.id}  {u.preview}"
            )
    return 0
