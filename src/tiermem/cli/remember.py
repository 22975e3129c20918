"""``tiermem remember``: store a fact in archival memory from the terminal, as a model does with
``archival_memory_insert`` (the same checks: credentials refused, chunking, tags)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ..base.errors import EmbeddingError, ValidationError
from ..base.records import is_blank
from .terminal import echo

if TYPE_CHECKING:
    import argparse

    from ..base.config import Settings
    from ..domain.memory import Memory


def remember_command(memory: Memory, settings: Settings, args: argparse.Namespace) -> int:
    """Insert ``args.text`` (stdin's text for '-', read by ``prechecks``, one trailing newline dropped) into the agent's archival memory, embedded
    before the command returns when the model loads; prints the new passage's id (or ids, when chunked)."""
    text = args.text  # ('-': stdin, read by ``prechecks``)
    if is_blank(text):
        raise ValidationError("Nothing to remember: give the fact as an argument, or '-' and the text on stdin.")
    tags = [t.strip() for t in args.tags.split(",") if t.strip()] if args.tags else None
    agent = memory.named_agent(settings.agent)
    try:
        memory.archive.embedder.wait(None)  # embed it now, so the next search finds it by meaning too
    except EmbeddingError as exc:
        print(
            f"tiermem: warning: {exc} Stored without a vector: found by keywords until the model works.",
            file=sys.stderr,
        )
    written = memory.archival_insert(agent.id, text, tags, project=args.project)
    if args.json:
        import json

        print(json.dumps({"ids": written.stored, "agent": agent.name}))
    else:
        chunks = f" ({len(written.stored)} chunks)" if len(written.stored) > 1 else ""
        echo(f"remembered {written.stored[0]}{chunks} in {agent.name}'s archival memory")
    return 0
