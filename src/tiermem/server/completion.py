"""``completion/complete`` for block labels and ``logging/setLevel``, registered on the server.

Completions offer the agent's block labels for the ``label`` argument of the block resource
template (``memory://blocks/{label}``) and of prompts that take a label: labels that start with
what was typed first (a leading ``/`` ignored), then labels with a later path segment that does.
Other arguments of the server's prompts and templates get no values; a prompt or template the server does not have,
or an argument it does not take, is -32602 (the spec's error for an invalid prompt name).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from mcp.shared.exceptions import MCPError
from mcp.types import (
    INVALID_PARAMS,
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
        await check_reference(server, ref, arg.name)
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


async def check_reference(
    server: MCPServer[Any], ref: PromptReference | ResourceTemplateReference, argument: str
) -> None:
    """-32602 unless ``ref`` names one of the server's prompts or resource templates and it takes ``argument``."""
    if isinstance(ref, PromptReference):
        known = {p.name: [a.name for a in p.arguments or []] for p in await server.list_prompts()}
        kind, name, what = "prompt", ref.name, "prompts"
    else:
        known = {t.uri_template: _variables(t.uri_template) for t in await server.list_resource_templates()}
        kind, name, what = "resource template", ref.uri, "resource templates"
    if name not in known:
        raise MCPError(
            code=INVALID_PARAMS,
            message=f"No {kind} {name!r} to complete an argument of: the {what} on this server are "
            f"{', '.join(sorted(known)) or 'none'}.",
            data={"ref": name},
        )
    takes = known[name]
    if argument not in takes:
        listed = f"it takes {', '.join(takes)}" if takes else "it takes no arguments"
        raise MCPError(
            code=INVALID_PARAMS,
            message=f"The {kind} {name!r} has no argument {argument!r} to complete: {listed}.",
            data={"ref": name, "argument": argument},
        )


def _variables(template: str) -> list[str]:
    """The variable names of a URI template (RFC 6570: ``{label}``, ``{+path}``, ``{?a,b*}``, ``{x:3}``)."""
    names = []
    for group in re.findall(r"{([^}]*)}", template):
        for spec in group.lstrip("+#./;?&").split(","):
            names.append(spec.split(":")[0].rstrip("*"))
    return names


def complete_labels(labels: Iterable[str], typed: str) -> list[str]:
    """Labels that start with what was typed (a leading '/' ignored), then labels with a segment that does."""
    typed = typed[1:] if typed.startswith("/") else typed
    ordered = sorted(set(labels))
    first = [label for label in ordered if label.startswith(typed)]
    later = [label for label in ordered if label not in first and any(p.startswith(typed) for p in label.split("/"))]
    return first + later
