"""``tiermem chat``: the agent loop in a terminal, on the Anthropic API.

Replies go to stdout; the steps the agent took (tool calls, memory edits) go to stderr, so
``tiermem chat -m ... > reply.txt`` captures only the reply. ``--json`` prints each turn's
full result instead. Ctrl-C during a turn cancels that turn (its user message stays in the
conversation, marked as unanswered) and returns to the prompt; Ctrl-C at the prompt quits.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import anyio

from ..base.errors import ConfigError, TiermemError
from ..base.quoting import printable

if TYPE_CHECKING:
    from ..base.config import Settings
    from ..domain.memory import Memory
    from .llm import Usage
    from .loop import AgentLoop, TurnResult

T = TypeVar("T")
HELP = "Commands: /memory (show core memory), /help, /quit (or Ctrl-D). Anything else is sent to the agent."


def run_chat(
    settings: Settings,
    *,
    message: str | None,
    conversation: str,
    as_json: bool,
    opened: Callable[[Memory], None] | None = None,
) -> int:
    """``opened``: what the composition root does to the memory once it is open (the deletion guard of Claude Code's
    auto memory, as ``serve`` and ``ui`` set it), before any tool runs."""
    from .loop import check_conversation, check_message
    from .service import provider_kind

    # what can be refused without the store is refused before it is opened (a refusal leaves no data directory)
    check_conversation(conversation)
    if message is not None:
        check_message(message, settings.max_content_chars)
    if provider_kind(settings) != "anthropic":
        raise ConfigError(
            "tiermem chat runs the agent on the Anthropic API: set ANTHROPIC_API_KEY (and optionally "
            "anthropic_base_url / ANTHROPIC_BASE_URL). The sampling provider needs an MCP host: use "
            "`tiermem serve --agent-loop` and the agent_chat tool there."
        )
    # the HTTP client's "HTTP Request: POST ..." and the SDK's "Retrying request ..." lines (INFO) would bury the chat
    for name in ("httpx", "httpx2", "httpcore", "anthropic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    return anyio.run(_main, settings, message, conversation, as_json, opened)


async def _main(
    settings: Settings,
    message: str | None,
    conversation: str,
    as_json: bool,
    opened: Callable[[Memory], None] | None,
) -> int:
    from ..domain.factory import open_memory
    from ..server.app import build_server
    from ..server.runtime import MemoryHandle
    from .service import anthropic_provider, make_loop

    memory = await anyio.to_thread.run_sync(lambda: open_memory(settings))
    if opened is not None:
        opened(memory)
    # messages are embedded as they are written: load the model first (no backfill thread left at exit)
    await anyio.to_thread.run_sync(lambda: memory.archive.embedder.wait(None))
    agent = await anyio.to_thread.run_sync(lambda: memory.named_agent(settings.agent))
    server = build_server(MemoryHandle(lambda: (memory, agent.id)), settings)
    provider = anthropic_provider(settings)
    loop = make_loop(memory, agent.id, server, settings)
    loop.background_provider = provider
    status = 0
    try:
        if message is not None:
            result = await loop.turn(message, provider, conversation)
            if as_json:  # the result holds the sleep-time run this turn started: it is waited for (as at exit anyway)
                await _wait_background(loop)
                result.sleeptime_usage = result.sleeptime_usage + loop.reported_sleeptime_usage(conversation)
            _show(result, as_json)
            status = 1 if result.stop_reason == "error" else 0
        else:
            memory.warm(agent.id)  # the agent's sitting index builds while the user types (its first search would)
            await _interactive(loop, provider, conversation, as_json)
    finally:
        await _wait_background(loop)
        _show_late_usage(loop.reported_sleeptime_usage(conversation))
    return status


async def _wait_background(loop: AgentLoop) -> None:
    if loop.background_running:
        print("(waiting for the sleep-time agent to finish)", file=sys.stderr)
    await loop.wait_background()


def _show_late_usage(usage: Usage) -> None:
    """The tokens of the sleep-time runs that ended after the last result was shown (the last turn's, at exit): no
    result is left to report them in (``sleeptime_usage``), so stderr says them."""
    if usage.prompt_tokens or usage.output_tokens:
        print(
            f"(sleep-time agent since the last reply: {usage.prompt_tokens} input tokens "
            f"({usage.cache_read_input_tokens} cached), {usage.output_tokens} output)",
            file=sys.stderr,
        )


async def _interactive(loop: AgentLoop, provider: object, conversation: str, as_json: bool) -> None:
    print(f"tiermem chat: agent {loop.agent_id}, conversation {conversation!r}. {HELP}", file=sys.stderr)
    # A line that is not UTF-8 is read (its bad bytes as lone surrogates) and refused below, not a crash of the REPL.
    reconfigure = getattr(sys.stdin, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(errors="surrogateescape")
    while True:
        try:
            line = await anyio.to_thread.run_sync(_read_line)
        except EOFError:
            print(file=sys.stderr)
            return
        text = line.strip()
        if not text:
            continue
        if text in ("/quit", "/exit"):
            return
        if text == "/help":
            print(HELP, file=sys.stderr)
            continue
        if text == "/memory":
            print(printable(await anyio.to_thread.run_sync(lambda: loop.memory.render_core(loop.agent_id))))
            continue
        if any("\udc80" <= c <= "\udcff" for c in text):
            print("  (That line is not valid UTF-8 text; it was not sent. Type it again.)", file=sys.stderr)
            continue
        try:
            result = await _interruptible(lambda: loop.turn(text, provider, conversation))  # type: ignore[arg-type]
        except TiermemError as exc:  # one bad message ends its turn, not the chat
            print(f"  ({exc.for_person()})", file=sys.stderr)
            continue
        if result is None:
            print(
                "  (Turn cancelled: your message is kept in the conversation. Ctrl-C at the prompt quits.)",
                file=sys.stderr,
            )
            continue
        _show(result, as_json)


async def _interruptible(run: Callable[[], Awaitable[T]]) -> T | None:
    """``run()``, cancelled by Ctrl-C (None then) instead of ending the process: while it runs, SIGINT cancels it
    (from the event loop's thread); the handler before it is back afterwards, so Ctrl-C at the prompt quits."""
    if not hasattr(signal, "SIGINT"):
        return await run()
    event_loop = asyncio.get_running_loop()
    with anyio.CancelScope() as scope:

        def interrupt(signum: int, frame: object) -> None:
            event_loop.call_soon_threadsafe(scope.cancel)

        before = signal.signal(signal.SIGINT, interrupt)
        try:
            return await run()
        finally:
            signal.signal(signal.SIGINT, before)
    return None


def _read_line() -> str:
    print("you> ", end="", file=sys.stderr, flush=True)  # the prompt is not part of the output
    return input()


def _show(result: TurnResult, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result.structured(), ensure_ascii=False, indent=2))
        if result.stop_reason == "error":  # the result holds it; stderr says it too, as without --json
            print(f"tiermem chat: turn stopped: {result.error or 'error'}", file=sys.stderr)
        return
    for step in result.steps:
        label = (step.get("input") or {}).get("label")
        target = f"({label})" if isinstance(label, str) else ""
        print(f"  · {step['tool']}{target} {step['status']}", file=sys.stderr)
    if result.reply:
        print(printable(result.reply))  # a reply may quote stored text: shown, never obeyed by the terminal
    if result.notice:  # a reply cut at max_tokens, a refusal, an empty reply
        print(f"  ({result.notice})", file=sys.stderr)
    elif result.stop_reason != "end_turn":
        print(f"  (turn stopped: {result.stop_reason}{': ' + result.error if result.error else ''})", file=sys.stderr)
    if result.sleeptime:
        print(f"  (sleep-time agent: {result.sleeptime})", file=sys.stderr)
