"""``tiermem setup codex|gemini|opencode`` and ``tiermem config`` of the same: the host's module, chosen and run
(``codex.py``, ``gemini_cli.py``, ``opencode.py``; what they share is ``hook_setup.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.errors import ConfigError
from . import codex, gemini_cli, opencode
from .hook_setup import serve_args_of
from .hosts import executable

if TYPE_CHECKING:
    from ..base.config import Settings


def setup_command(host: str, settings: Settings, args: Any, *, dry_run: bool) -> int:
    """``tiermem setup codex|gemini|opencode`` (``--uninstall``) and ``tiermem config`` of the same (``dry_run``)."""
    module = {"codex": codex, "gemini": gemini_cli, "opencode": opencode}[host]
    exe = executable()
    if not Path(exe).is_absolute():
        raise ConfigError(
            f"Cannot find the absolute path of the tiermem command (got {exe!r}); run setup with the tiermem of "
            f"your installation, e.g. /path/to/venv/bin/tiermem setup {host}."
        )
    plan = module.plan(
        exe,
        serve_args_of(settings, args),
        data_dir=settings.resolved_data_dir().expanduser().resolve(),
        agent=settings.agent,
        scope=getattr(args, "scope", "user") or "user",
        project=getattr(args, "project_dir", None),
    )
    if dry_run:
        from .hosts import show_or_write

        output = getattr(args, "output", None)
        return show_or_write(host, module.show(plan), module.entry(plan), output, module.also(plan))
    force = bool(getattr(args, "force", False))
    for line in module.uninstall(plan) if args.uninstall else module.install(plan, force=force):
        print(line)
    if not args.uninstall:
        print(
            f"Start a new {module.TITLE} session: core memory is in context, each prompt and reply is logged, and "
            f"relevant memories are added to prompts. Undo with `tiermem setup {host} --uninstall"
            + (" --scope project`." if getattr(args, "scope", "user") == "project" else "`.")
        )
    return 0
