"""The ``tiermem`` command: hooks start fast, everything else goes to the CLI.

A host runs ``tiermem hook ...`` once per prompt and waits for it to exit, so that path imports only ``hooks``
(standard library and ``rendezvous``) and reads its few options itself; any other command, ``--help``, or options it
does not know go to ``cli.main`` with its full parser.
"""

from __future__ import annotations

import sys

from ..base import gcpause

HOOK_OPTIONS = ("--data-dir", "--agent", "--config")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    quick = _hook_options(args)
    if quick is not None:
        from .hooks import run

        return run(quick.get("--data-dir"), quick.get("--agent"), quick.get("--config"))
    if args[:1] == ["serve"]:  # a server's start creates objects, not garbage: collect once it has answered
        gcpause.hold()
    from .main import main as cli_main

    return cli_main(args)


def _hook_options(args: list[str]) -> dict[str, str] | None:
    """``tiermem hook claude-code [--data-dir D] [--agent A] [--config C]``: its options; else None."""
    if args[:2] != ["hook", "claude-code"]:
        return None
    rest, options = args[2:], {}
    while rest:
        if len(rest) < 2 or rest[0] not in HOOK_OPTIONS or rest[0] in options:
            return None
        options[rest[0]] = rest[1]
        rest = rest[2:]
    return options
