"""``completion/complete`` for block labels and ``logging/setLevel``, registered on the server.

Completions offer the agent's block labels for the ``label`` argument of the block resource
template (``memory://blocks/{label}``) and of prompts that take a label: labels that start with
what was typed first (a leading ``/`` ignored), then labels with a later path segment that does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from mcp.types import (
    CompleteRequestParams,
    CompleteResult,
    Completion,
    EmptyResult,
    PromptReference,
    ResourceTemplateReference,
    SetLevelRequestParams,
)

from ..base.errors import TiermemError
from .clientlog import ClientLevels
from .sdk import add_request_handler

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from .runtime import Runtime

log = logging.getLogger(__name__)


COMPLETION_MAX = 100  # the most values one completion/complete answer may carry


def register_completions_and_logging(
    server: MCPServer[Any], runtime: Runtime, levels: ClientLevels, *, block_uri: str, label_prompts: tuple[str, ...]
) -> None:
    """``completion/complete`` (block labels) and ``logging/setLevel`` (handshake-era clients)."""

    async def on_complete(ctx: Any, params: CompleteRequestParams) -> CompleteResult:
        ref, arg = params.ref, params.argument
        wants_label = arg.name == "label" and (
            (isinstance(ref, ResourceTemplateReference) and ref.uri == block_uri)
            or (isinstance(ref, PromptReference) and ref.name in label_prompts)
        )
        if not wants_label:
            return CompleteResult(completion=Completion(values=[], total=0, has_more=False))
        try:
            from ..domain.memory import Memory  # imported once the handshake is answered (cold start)

            labels = [b.label for b in await runtime.call(None, Memory.blocks)]
        except TiermemError as exc:
            log.warning("completing block labels failed: %s", exc)
            labels = []
        values = complete_labels(labels, arg.value)
        return CompleteResult(
            completion=Completion(
                values=values[:COMPLETION_MAX], total=len(values), has_more=len(values) > COMPLETION_MAX
            )
        )

    async def on_set_level(ctx: Any, params: SetLevelRequestParams) -> EmptyResult:
        levels.set(ctx.session, params.level)
        return EmptyResult()

    add_request_handler(server, "completion/complete", CompleteRequestParams, on_complete)
    add_request_handler(server, "logging/setLevel", SetLevelRequestParams, on_set_level)


def complete_labels(labels: Iterable[str], typed: str) -> list[str]:
    """Labels that start with what was typed (a leading '/' ignored), then labels with a segment that does."""
    typed = typed[1:] if typed.startswith("/") else typed
    ordered = sorted(set(labels))
    first = [label for label in ordered if label.startswith(typed)]
    later = [label for label in ordered if label not in first and any(p.startswith(typed) for p in label.split("/"))]
    return first + later
