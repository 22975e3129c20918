"""Wiring the loop to settings and to the MCP server: providers, the ``agent_chat`` tool.

``register_agent_chat(server, settings)`` adds the tool when ``agent_loop`` is on. One
``AgentLoop`` serves the process; each call brings its own MCP context (for notifications and,
with the sampling provider, for the host's model).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, InputRequiredResult, TextContent

from ..base.errors import TiermemError, ValidationError
from ..base.object_errors import is_object_uri
from ..server.arguments import describe
from ..server.registry import BY_NAME, SLEEPTIME_TOOLS
from ..server.tools import tidy_published_schema
from .context import Thresholds
from .llm import Provider
from .loop import AgentLoop, LoopSettings, NeedsRoundTrip, Resume
from .toolhost import ServerTools

if TYPE_CHECKING:
    from ..base.config import Settings
    from ..domain.memory import Memory
    from ..server.app import TiermemServer


def loop_settings(settings: Settings) -> LoopSettings:
    return LoopSettings(
        max_steps=settings.max_steps,
        max_tokens=settings.max_tokens,
        thresholds=Thresholds(window=settings.context_window),
        line_numbers="claude" in settings.model.lower() or settings.llm_provider == "sampling",
        default_style=settings.agent_type,
        sleeptime_frequency=settings.sleeptime_frequency,
        memory_tool_dialect=settings.memory_tool_dialect,
        turn_lock_dir=turn_lock_dir(settings),
    )


def turn_lock_dir(settings: Settings) -> Path | None:
    """Where a local store keeps its turn locks (``turnlock.py``); None on object storage, which has none."""
    uri = settings.store_uri()
    if is_object_uri(uri):
        return None
    return Path(uri.removeprefix("file://")) / ".tiermem-turns"


def provider_kind(settings: Settings) -> str:
    if settings.llm_provider != "auto":
        return settings.llm_provider
    return "anthropic" if os.environ.get("ANTHROPIC_API_KEY") else "sampling"


def anthropic_provider(settings: Settings) -> Provider:
    from .anthropic_provider import AnthropicProvider

    return AnthropicProvider(
        model=settings.model,
        base_url=settings.anthropic_base_url,
        max_retries=settings.llm_max_retries,
        timeout=settings.anthropic_timeout,
    )


def make_loop(memory: Memory, agent_id: str, server: TiermemServer, settings: Settings) -> AgentLoop:
    background = anthropic_provider(settings) if provider_kind(settings) == "anthropic" else None
    return AgentLoop(
        memory,
        agent_id,
        ServerTools(server),
        loop_settings(settings),
        sleeptime_tools=ServerTools(server, only=SLEEPTIME_TOOLS),
        background_provider=background,
    )


def register_agent_chat(server: TiermemServer, settings: Settings) -> None:
    kind = provider_kind(settings)
    # with the anthropic provider, made now: a missing API key fails at start, not at the first call
    shared = _Shared(anthropic_provider(settings) if kind == "anthropic" else None)
    guard = anyio.Lock()

    async def loop_for() -> AgentLoop:
        async with guard:
            if shared.loop is None:
                memory, agent_id = await anyio.to_thread.run_sync(server.runtime.handle.get)
                made = make_loop(memory, agent_id, server, settings)
                if shared.provider is not None:
                    made.background_provider = shared.provider
                shared.loop = made
            return shared.loop

    async def agent_chat(
        message: str, ctx: Context[Any, Any], conversation_id: str | None = None
    ) -> CallToolResult | InputRequiredResult:
        """Talk to this server's stateful agent: runs one full Letta turn and returns its reply.

        The agent reads and edits its own core memory, searches recall and archival memory, and
        remembers the conversation across calls and restarts. Use `conversation_id` to keep
        separate threads (default: "default"). The structured result lists the steps it took
        (tool calls, memory edits), the stop reason and token usage.
        """
        try:
            loop = await loop_for()
            resume, conv = _resume(ctx, conversation_id)
            provider: Provider
            if shared.provider is not None:
                provider = shared.provider
            else:
                from .sampling_provider import SamplingProvider

                provider = SamplingProvider(ctx, answers=dict(ctx.input_responses or {}))
            result = await loop.turn(message, provider, conv, resume=resume, tools=ServerTools(server, ctx))
        except NeedsRoundTrip as pending:
            inner = pending.inner
            state = {
                "turn": pending.resume.turn_id,
                "step": pending.resume.step,
                "conversation_id": pending.conversation_id,
            }
            return InputRequiredResult(input_requests={inner.key: inner.request}, request_state=json.dumps(state))
        except TiermemError as exc:
            return CallToolResult(content=[TextContent(type="text", text=str(exc))], is_error=True)
        text = result.reply or f"(The agent ended its turn without a reply; stop reason: {result.stop_reason}.)"
        if result.notice:  # a reply cut at max_tokens, a refusal, an empty reply
            text = f"{result.reply}\n\n({result.notice})" if result.reply.strip() else f"({result.notice})"
        if result.error:
            text = (
                f"{text}\n\nThe turn stopped early: {result.error}"
                if result.reply
                else f"The turn stopped: {result.error}"
            )
        return CallToolResult(
            content=[TextContent(type="text", text=text)],
            structured_content=result.structured(),
            is_error=result.stop_reason == "error",
        )

    chat = BY_NAME["agent_chat"]
    server.add_tool(
        agent_chat,
        name=chat.name,
        title=chat.title,
        annotations=chat.annotations.mcp(),
        description=describe(agent_chat.__doc__ or ""),
        structured_output=False,
    )
    tidy_published_schema(server, "agent_chat")


@dataclass
class _Shared:
    """What every agent_chat call of one server shares: the anthropic provider (None: sampling) and the loop."""

    provider: Provider | None
    loop: AgentLoop | None = None


def _resume(ctx: Context[Any, Any], conversation_id: str | None) -> tuple[Resume | None, str]:
    raw = ctx.request_state
    if not raw:
        return None, conversation_id or "default"
    try:
        state = json.loads(raw)
        resume = Resume(turn_id=str(state["turn"]), step=int(state["step"]))
        conv = str(state["conversation_id"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ValidationError(
            "The request_state of this retried agent_chat call is not one tiermem wrote; "
            "send the message again without it."
        ) from exc
    if conversation_id not in (None, conv):
        raise ValidationError("A retried agent_chat call must keep its conversation_id.")
    return resume, conv
