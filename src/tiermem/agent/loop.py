"""One Letta turn of an agent: call the model, run its tool calls, persist everything, repeat.

Styles (per agent, metadata ``agent_type``):

- ``letta_v1``: a tool call continues the turn; a reply without a tool call ends it.
- ``memgpt``: every tool takes ``request_heartbeat``; the loop continues only when it is true
  (or a tool failed); ``send_message(message)`` ends the turn with that message as the reply.

Every message (user, assistant with its tool calls, tool results, heartbeats, alerts,
summaries) is written to recall as it happens, and the in-context window is recorded per
conversation, so a turn interrupted by a crash, a provider error or a sampling round trip
resumes from the store exactly where it was.

Why this module is long: ``AgentLoop`` is one turn in both styles with its resumption, the context window's upkeep
and the writes to recall, which share the turn's state; the tool-calling loop is ``toolcalls.py`` and the token
maths ``context.py``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import anyio

from ..base.errors import (
    ConfigError,
    ContextOverflowError,
    PromptTooLongError,
    ProviderError,
    TiermemError,
    ValidationError,
)
from ..base.records import MAX_ROW_CHARS, Agent, ContextWindow, Message, check_text, valid_text
from ..domain import secrets
from ..domain.filesystem import STATE_KEY as FILES_STATE_KEY
from .context import (
    SUMMARY_SYSTEM,
    WARNING,
    Thresholds,
    TokenCounter,
    fallback_summary,
    split_for_summary,
    summary_allowance,
    summary_message,
    transcript,
)
from .llm import (
    JSON,
    MODEL_TEXT,
    LLMRequest,
    LLMResponse,
    Provider,
    ToolCall,
    ToolSpec,
    Usage,
    payload,
    recall_content,
    replied,
    to_api_messages,
)
from .sampling_provider import NeedsInput
from .sleeptime import SleeptimeRun, run_sleeptime
from .toolcalls import SEND_MESSAGE, Report, Style, ToolLoop, memgpt_specs, notice_of, send_message
from .toolhost import ToolHost
from .turnlock import turn_lock

if TYPE_CHECKING:
    from ..domain.memory import Memory

log = logging.getLogger(__name__)
T = TypeVar("T")
FACTOR_KEY = "token_factor."  # agent metadata, per model: the calibrated token-count factor (``context.py``)

STYLES: tuple[Style, ...] = ("letta_v1", "memgpt")


@dataclass(frozen=True)
class LoopSettings:
    max_steps: int = 50
    max_tokens: int = 4096
    thresholds: Thresholds = field(default_factory=Thresholds)
    line_numbers: bool = True  # the line-numbered core memory variant (Claude models)
    default_style: str = "letta_v1"
    sleeptime_frequency: int = 0  # for agents whose metadata does not set it
    sleeptime_max_steps: int = 10
    memory_tool_dialect: str = "anthropic"  # the server's: how its memory tools' arguments name blocks
    # a local store's: where the lock files that keep processes' turns in one conversation apart live (turnlock.py)
    turn_lock_dir: Path | None = None
    turn_lock_wait: float = 120.0  # seconds a turn waits for another process's turn in its conversation


@dataclass(frozen=True)
class Resume:
    """Where a turn stopped for a sampling round trip: its user message and the next step."""

    turn_id: str
    step: int


class NeedsRoundTrip(Exception):
    """The provider needs the client to answer ``inner`` (a sampling request) before the turn can go on."""

    def __init__(self, inner: NeedsInput, conversation_id: str, resume: Resume) -> None:
        super().__init__(str(inner))
        self.inner = inner
        self.conversation_id = conversation_id
        self.resume = resume


@dataclass
class TurnResult:
    reply: str
    stop_reason: str  # end_turn | max_steps | max_tokens | refusal | error
    conversation_id: str
    steps: list[JSON]
    memory_edits: list[str]
    usage: Usage
    error: str | None = None
    summarised: int = 0
    sleeptime: str = ""
    notice: str = ""  # why the reply is not a complete one: cut at max_tokens, a refusal, empty
    # the token usage of the sleep-time runs this conversation's turns started that ended since its previous result
    # (they run in the background)
    sleeptime_usage: Usage = field(default_factory=Usage)

    def structured(self) -> JSON:
        return {
            "reply": self.reply,
            "stop_reason": self.stop_reason,
            "conversation_id": self.conversation_id,
            "steps": self.steps,
            "memory_edits": self.memory_edits,
            "usage": asdict(self.usage),
            "error": self.error,
            "summarised": self.summarised,
            "sleeptime": self.sleeptime,
            "sleeptime_usage": asdict(self.sleeptime_usage),
            "notice": self.notice,
        }


CONVERSATION_CHARS = 200  # a conversation id's fixed limit


def check_conversation(conversation_id: object) -> str:
    """The conversation id (``default`` when empty) if it is one: text of at most ``CONVERSATION_CHARS``."""
    conv = conversation_id or "default"
    if isinstance(conv, str) and len(conv) > CONVERSATION_CHARS:
        raise ValidationError(
            f"The conversation id has {len(conv)} characters; a conversation id may have at most "
            f"{CONVERSATION_CHARS}. Name the conversation with a shorter id."
        )
    return check_text(conv, "conversation_id", CONVERSATION_CHARS)


def check_message(text: object, max_chars: int) -> str:
    """The user's message to the agent if it is one: text, not blank, of at most ``max_chars`` characters."""
    if not isinstance(text, str) or not text.strip():
        raise ValidationError("message is empty: send the user's message as text.")
    if len(text) > max_chars:
        raise ValidationError(
            f"The message has {len(text)} characters; a message to the agent may have at most {max_chars} "
            "(max_content_chars). Nothing was sent or logged: send a shorter message (long text can go to a file or "
            "archival memory first)."
        )
    return check_text(text, "message", max_chars)


# The most one message the loop writes may hold: as much as an import stores (``interop.agentfile``), far beyond
# max_content_chars (which bounds what one tool argument, the user's message, may carry): a 64,000-token answer is
# some 250,000 characters, and is stored whole.
ROW_MAX_CHARS = MAX_ROW_CHARS
CUT_NOTE = "\n\n[Cut here: this message had {n} characters; tiermem stores at most {most} of one message.]"


def storable(text: str) -> str:
    """``text`` as the loop stores it: a NUL or a lone surrogate (which no stored text may hold) replaced by U+FFFD,
    and past ``ROW_MAX_CHARS`` (a runaway tool result) cut, with a note saying so at the cut and in the log."""
    text = valid_text(text).replace("\x00", "\ufffd")
    if len(text) <= ROW_MAX_CHARS:
        return text
    note = CUT_NOTE.format(n=len(text), most=ROW_MAX_CHARS)
    log.warning("a message of %d characters was cut to the %d one message may hold", len(text), ROW_MAX_CHARS)
    return text[: ROW_MAX_CHARS - len(note)] + note


TURN_KEY = "turn"  # in the payload of every row the loop writes for a turn: the id of the turn's user message


def this_turn(user: Message, since: list[Message]) -> list[Message]:
    """The turn's own messages: its ``user`` message and the rows of ``since`` (its conversation from the user message
    on) that the loop wrote for it, which carry its id. Rows logged in between by anyone else (conversation_log,
    another turn in the conversation, while the turn waits for a sampling round trip) are not the turn's."""
    return [user, *(x for x in since if x.id != user.id and payload(x).get(TURN_KEY) == user.id)]


def summaries(turn: list[Message]) -> int:
    """How many times the turn's context was summarised, from its stored messages (``this_turn``)."""
    return sum(1 for x in turn if payload(x).get("kind") == "summary")


def stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %I:%M:%S %p UTC%z")


async def _io(fn: Callable[[], T]) -> T:
    return await anyio.to_thread.run_sync(fn)


class AgentLoop:
    def __init__(
        self,
        memory: Memory,
        agent_id: str,
        tools: ToolHost,
        settings: LoopSettings | None = None,
        *,
        sleeptime_tools: ToolHost | None = None,
        background_provider: Provider | None = None,
    ) -> None:
        self.memory = memory
        self.agent_id = agent_id
        self.tools = tools
        self.settings = settings or LoopSettings()
        self.counter = TokenCounter()
        # model -> the token-count factor stored in the agent's metadata (as last read or written)
        self._factors: dict[str, float] = {}
        self.sleeptime_tools = sleeptime_tools
        self.background_provider = background_provider
        # (agent system text, (block id, version) of each block) -> the compiled system prompt
        self._system_cache: tuple[tuple[str, tuple[tuple[str, int], ...], str | None], str] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._sleeptime_lock = asyncio.Lock()
        self._locks: dict[str, asyncio.Lock] = {}
        # conversation -> (messages table version, (start_seq, summary_id), in-context messages) after our last turn
        self._contexts: dict[str, tuple[int, tuple[int, str], list[Message]]] = {}
        self.last_sleeptime: SleeptimeRun | None = None  # the report of the last finished sleep-time run
        # conversation -> the usage of the sleep-time runs its turns started, ended since its last result
        self._sleeptime_usage: dict[str, Usage] = {}

    # -- the turn ------------------------------------------------------------------

    async def turn(
        self,
        text: str | None,
        provider: Provider,
        conversation_id: str = "default",
        *,
        resume: Resume | None = None,
        tools: ToolHost | None = None,
    ) -> TurnResult:
        """Run one turn (or resume one after a sampling round trip); ``tools`` overrides the loop's tool host."""
        conv = check_conversation(conversation_id)
        lock = self._locks.setdefault(conv, asyncio.Lock())
        st = self.settings
        async with lock:  # one turn at a time per conversation, so its messages never interleave
            async with turn_lock(st.turn_lock_dir, self.agent_id, conv, st.turn_lock_wait):  # nor another process's
                return await self._turn(text, provider, conv, resume, tools or self.tools)

    async def _turn(
        self, text: str | None, provider: Provider, conv: str, resume: Resume | None, host: ToolHost
    ) -> TurnResult:
        m = self.memory
        agent = await _io(lambda: m.core.get_agent(self.agent_id))
        style = self._style(agent)
        self._load_factor(agent, provider)
        turn: list[Message] = []  # this turn's messages, from the user's on
        version = m.archive.rows.messages_version
        cached = self._contexts.pop(conv, None)
        seen = await _io(version)  # the messages table as of the cached context
        tools = await self._tool_specs(host, style)  # listed once a turn: the size check and the requests use it
        if resume is None:
            text = check_message(text, m.max_content_chars)
            system = await self._system(agent)
            try:
                self._check_base(system, tools)
            except ContextOverflowError as exc:  # refused before anything is logged or sent
                return TurnResult("", "error", conv, [], [], Usage(), error=f"{exc} Nothing was sent or logged.")
            too_big = self._message_fits(system, tools, text)
            if too_big is not None:  # refused before anything is logged or sent
                return TurnResult("", "error", conv, [], [], Usage(), error=too_big)
            user = await self._log(conv, "user", text, {"kind": "user"})
            after = await _io(version)
            if agent.metadata.get("message_buffer_autoclear", "false") == "true":
                await self._save_window(conv, start_seq=user.seq, summary_id="")
            step = 0
            turn.append(user)
        else:
            found = await _io(lambda: m.archive.rows.message(resume.turn_id))
            if found is None or found.agent_id != self.agent_id or found.conversation_id != conv:
                raise ValidationError(
                    "The turn to resume does not exist in this agent's conversation; send the message again."
                )
            user, after = found, -1
            since = await _io(lambda: m.archive.rows.messages_since(self.agent_id, conv, user.seq))
            turn = this_turn(user, since)
            step = sum(1 for x in turn if x.role == "assistant")  # each step stores the model's answer
            if resume.step > step:
                raise ValidationError(
                    f"The request_state of this retried agent_chat call names step {resume.step} of a turn that has "
                    f"{step} stored; it is not one this server wrote. Send the message again without it."
                )
            if resume.step < step:
                # An earlier round's state and answer, sent again (a client retrying after a lost response): the step
                # it answers is stored and is not run again. The turn goes on from the store, asking the client for
                # the step it is at; a turn already over gives its stored result.
                log.info("agent_chat retried with step %d's state; the turn is at step %d", resume.step, step)
                over = self._stored_result(turn, style, conv, step)
                if over is not None:
                    return over
        window = await _io(lambda: m.context_window(self.agent_id, conv))
        # The in-context messages are read from the store once per turn at most, and not at all when
        # nobody else wrote messages since this loop's last turn here; the loop keeps them current itself.
        known: int | None
        if (
            cached is not None
            and cached[0] == seen
            and after == seen + 1
            and cached[1] == (window.start_seq, window.summary_id)
        ):
            context, known = [*cached[2], user], after
        else:
            known = await _io(version)
            context = await _io(lambda: m.in_context_messages(window))

        report = Report.from_messages(turn, self.settings.memory_tool_dialect)
        recall = _Recall(self, agent, provider, conv, tools, user, window, context, known, version, report)
        run = ToolLoop(
            provider,
            host,
            recall,
            max_steps=self.settings.max_steps,
            style=style,
            builtins={SEND_MESSAGE.name: send_message} if style == "memgpt" else None,
            step=step,
            report=report,
        )
        stop, error = "end_turn", None
        try:
            try:
                stop = await run.run()
            except PromptTooLongError as exc:
                # The model's own count says the prompt is over its window: learn its count, summarise, try once more.
                await recall.refused(exc)
                stop = await run.run()
        except ProviderError as exc:
            stop, error = "error", str(exc)
        except ContextOverflowError as exc:
            stop, error = "error", str(exc)
        except NeedsInput as exc:  # the sampling provider's round trip (2026-07-28 clients)
            raise NeedsRoundTrip(exc, conv, Resume(user.id, run.step)) from exc
        if recall.known is not None:
            self._contexts[conv] = (recall.known, (recall.window.start_seq, recall.window.summary_id), recall.context)
        window = await self._save_window(conv, turns_delta=1)
        sleeptime = self._maybe_sleeptime(agent, conv, window.turns)
        return TurnResult(
            reply=run.reply,
            stop_reason=stop,
            conversation_id=conv,
            steps=report.steps,
            memory_edits=report.memory_edits,
            usage=report.usage,
            error=error,
            summarised=summaries(turn) + recall.summaries,  # a resumed turn's earlier rounds' too, as its steps
            sleeptime=sleeptime,
            notice=report.notice,
            sleeptime_usage=self.reported_sleeptime_usage(conv),
        )

    def reported_sleeptime_usage(self, conv: str) -> Usage:
        """The token usage of the sleep-time runs that turns of the conversation ``conv`` started and that ended since
        the previous call for it, reported with its turn's result as the turn's own usage is (never with another
        conversation's: another client's); its count starts again."""
        return self._sleeptime_usage.pop(conv, Usage())

    def _stored_result(self, turn: list[Message], style: Style, conv: str, steps: int) -> TurnResult | None:
        """The result of a turn that is over, from its stored messages (``turn``: its own, ``this_turn``); None
        while it is under way: its last answer called tools and the turn goes on after them (in the ``memgpt``
        style, only when a heartbeat followed them), short of ``max_steps``."""
        answers = [n for n, x in enumerate(turn) if x.role == "assistant"]
        last = turn[answers[-1]] if answers else None
        p = payload(last) if last is not None else {}
        calls = p.get("tool_calls") or []
        heartbeat = any(payload(x).get("kind") == "heartbeat" for x in turn[answers[-1] + 1 :]) if answers else False
        going = last is not None and bool(calls) and (style != "memgpt" or heartbeat)
        if going and steps < self.settings.max_steps:
            return None
        report = Report.from_messages(turn, self.settings.memory_tool_dialect)
        # a final answer, or what the last answer's send_message calls said (read from the calls: recall keeps no
        # content for an answer that also searched, ``recall_content``; a call cut at max_tokens did not run)
        sent = calls[:-1] if p.get("stop_reason") == "max_tokens" else calls
        reply = "" if last is None else last.content if not calls else replied(sent) or ""
        stop = str(p.get("stop_reason") or "end_turn") if last is not None and not calls else "end_turn"
        if going and steps >= self.settings.max_steps:
            stop = "max_steps"
        # an answer without tool calls ended the turn: its notice, as the turn gave it (``ToolLoop._final``)
        notice = notice_of(stop, last.content, self.settings.max_tokens) if last is not None and not calls else ""
        return TurnResult(
            reply=reply,
            stop_reason=stop if stop in ("end_turn", "max_steps", "max_tokens", "refusal") else "end_turn",
            conversation_id=conv,
            steps=report.steps,
            memory_edits=report.memory_edits,
            usage=report.usage,
            summarised=summaries(turn),
            notice=notice,
        )

    # -- token-count calibration, kept per agent and model across processes ----------------------

    def _load_factor(self, agent: Agent, provider: Provider) -> None:
        model = getattr(provider, "model", None)
        if not isinstance(model, str) or model in self._factors:
            return
        try:
            stored = float(agent.metadata.get(FACTOR_KEY + model, "0"))
        except ValueError:
            stored = 0.0
        self._factors[model] = stored
        if 1.0 <= stored <= 3.1:
            self.counter.factor = stored

    async def _save_factor(self, provider: Provider) -> None:
        """Store the counter's factor for the provider's model when it moved by more than 5% from the stored one."""
        model = getattr(provider, "model", None)
        factor = round(self.counter.factor, 3)
        stored = self._factors.get(model, 0.0) if isinstance(model, str) else 0.0
        if not isinstance(model, str) or (stored and abs(factor - stored) <= 0.05 * stored):
            return
        self._factors[model] = factor
        await _io(lambda: self.memory.set_agent_metadata(self.agent_id, {FACTOR_KEY + model: str(factor)}))

    def _style(self, agent: Agent) -> Style:
        style = agent.metadata.get("agent_type", self.settings.default_style)
        for known in STYLES:
            if style == known:
                return known
        raise ConfigError(f"Agent {agent.name!r} has agent_type {style!r}; use one of {', '.join(STYLES)}.")

    async def _tool_specs(self, host: ToolHost, style: Style) -> list[ToolSpec]:
        specs = await host.specs()
        return memgpt_specs(specs) if style == "memgpt" else specs

    async def _system(self, agent: Agent) -> str:
        """The agent's system text + rendered core memory; recompiled only when a block changes (prompt caching)."""
        m = self.memory
        blocks = await _io(lambda: m.blocks(self.agent_id))
        agent = await _io(lambda: m.core.get_agent(self.agent_id))  # its file views may have changed this turn
        key = (agent.system, tuple((b.id, b.version) for b in blocks), agent.metadata.get(FILES_STATE_KEY))
        if self._system_cache is not None and self._system_cache[0] == key:
            return self._system_cache[1]
        core = await _io(
            lambda: m.render_core(
                self.agent_id, line_numbers=self.settings.line_numbers, context_window=self.settings.thresholds.window
            )
        )
        text = (agent.system or m.default_system) + "\n\n" + core
        self._system_cache = (key, text)
        return text

    # -- context window --------------------------------------------------------------

    async def _fit(
        self,
        provider: Provider,
        system: str,
        tools: list[ToolSpec],
        window: ContextWindow,
        messages: list[Message],
        user: Message,
        step: int,
        force: bool = False,
        report: Report | None = None,
    ) -> tuple[ContextWindow, list[Message]] | None:
        """Summarise when the prompt is past ``summarize_at`` (or ``force``: the provider refused it as too long):
        the new (window, messages); None when it fits. The summariser's token usage is added to ``report``."""
        th = self.settings.thresholds
        m = self.memory
        self._check_base(system, tools)
        if not force and self.counter.count(system, tools, messages) <= th.summarize_at * th.window:
            return None
        if not await self._summarise(provider, system, tools, window, messages, user, step, report):
            if force:
                raise ContextOverflowError(
                    "The model refused the prompt as longer than its context window, and only this turn's messages "
                    "are left to send (every earlier one is summarised already). The turn stops here (its messages "
                    "are kept in recall); ask for less at a time, or set context_window to the model's window."
                )
            return None
        window = await _io(lambda: m.context_window(self.agent_id, window.conversation_id))
        messages = await _io(lambda: m.in_context_messages(window))
        size = self.counter.count(system, tools, messages)
        if size >= th.window:  # only this turn's messages are left, and they alone are too many
            raise ContextOverflowError(
                f"This turn's messages (the user's message and the tool results since) take about {size} tokens with "
                f"the system prompt, more than the context window of {th.window} tokens, even with every earlier "
                "message summarised. The turn stops here (its messages are kept in recall); ask for less at a time, "
                "or raise context_window."
            )
        return window, messages

    def _check_base(self, system: str, tools: list[ToolSpec]) -> None:
        """An error when the system prompt and tools alone leave no room."""
        th = self.settings.thresholds
        base = self.counter.count(system, tools, [])
        if base + self.settings.max_tokens >= th.window:
            raise ContextOverflowError(
                f"The system prompt, core memory and tool definitions take about {base} tokens, which with max_tokens "
                f"{self.settings.max_tokens} does not fit the context window of {th.window} tokens. Shorten the core "
                "memory blocks or the system prompt, publish fewer tools, or raise context_window."
            )

    def _message_fits(self, system: str, tools: list[ToolSpec], text: str) -> str | None:
        """Why a new message cannot be sent (None when it can): it must fit the window beside the system prompt,
        tools, max_tokens and a summary of every earlier message, since it is never summarised itself (it is what the
        model must answer). A system prompt too large by itself is ``_fit``'s error."""
        th = self.settings.thresholds
        base = self.counter.count(system, tools, [])
        size = self.counter.text(text)
        room = th.window - base - self.settings.max_tokens - summary_allowance(th)
        if base + self.settings.max_tokens < th.window and size > room:
            return (
                f"The message is about {size} tokens, but the context window of {th.window} tokens leaves room for "
                f"about {max(0, room)} after the system prompt, core memory, tool definitions, max_tokens "
                f"({self.settings.max_tokens}) and a summary of earlier messages. Nothing was sent or logged: send a "
                "shorter message (long text can go to a file or archival memory first), or raise context_window."
            )
        return None

    def _needs_warning(self, system: str, tools: list[ToolSpec], messages: list[Message]) -> bool:
        """Past ``warn_at``, once per window: MemGPT's memory-pressure alert."""
        th = self.settings.thresholds
        if self.counter.count(system, tools, messages) <= th.warn_at * th.window:
            return False
        return not any(payload(x).get("kind") == "system_alert" for x in messages)

    async def _summarise(
        self,
        provider: Provider,
        system: str,
        tools: list[ToolSpec],
        window: ContextWindow,
        messages: list[Message],
        user: Message,
        step: int,
        report: Report | None = None,
    ) -> bool:
        """Summarise the oldest messages (never the turn's user message); whether any were. The summariser's token
        usage is added to ``report`` and kept in the summary's payload (a resumed turn counts it again from there)."""
        th = self.settings.thresholds
        turn_id = user.id
        old = messages[0] if messages and payload(messages[0]).get("kind") == "summary" else None
        body = messages[1:] if old is not None else messages
        allowance = summary_allowance(th)

        def fits(kept: list[Message]) -> bool:
            return self.counter.count(system, tools, kept) + allowance <= th.target * th.window

        evicted, kept = split_for_summary(body, fits, th, pinned=user)
        if not evicted:
            return False
        hidden = [*([old] if old is not None else []), *evicted]
        from ..domain.tokens import truncate

        text, _ = truncate(transcript(hidden), th.window // 2)
        words = max(50, allowance * 3 // 4)
        request = LLMRequest(
            SUMMARY_SYSTEM.format(words=words),
            [{"role": "user", "content": [{"type": "text", "text": text}]}],
            (),
            allowance,
            key=f"{turn_id}:{step}:summary",
            purpose="summary",
        )
        usage = Usage()
        conv = window.conversation_id
        m = self.memory
        first_kept = kept[0].seq if kept else None
        total = await _io(lambda: len(m.archive.rows.messages_since(self.agent_id, conv, 0)))
        n_hidden = max(total - len(kept) - (1 if old is not None else 0), len(evicted))
        try:
            response = await provider.complete(request)
            usage = response.usage
            if report is not None:
                report.add_usage(usage)
            summary = response.text.strip()
            if not summary:
                raise ProviderError("the model returned an empty summary")
        except ProviderError as exc:
            log.warning("summariser failed, keeping a truncated transcript instead: %s", exc)
            # within the window's share and within what one stored message may hold, the note around it included
            room = m.max_content_chars - len(summary_message("", n_hidden, total))
            summary = fallback_summary(hidden, str(exc), max(200, th.window // 10), room)
        note = await self._log(
            conv,
            "system",
            summary_message(summary, n_hidden, total),
            {"kind": "summary", "evicted": len(evicted), "usage": asdict(usage), TURN_KEY: turn_id},
        )
        await self._save_window(conv, start_seq=first_kept if first_kept is not None else note.seq, summary_id=note.id)
        return True

    # -- persistence -------------------------------------------------------------------

    async def _log(self, conv: str, role: str, content: str, meta: JSON) -> Message:
        """Write one message to recall. The loop's own rows (the model's answers, tool results, summaries) are
        stored whole, however long (``storable``): the user's message was checked against ``max_content_chars``
        before the turn began, and nothing the model or a tool produced may fail the turn when it is written."""
        archive = self.memory.archive
        payload = json.dumps(meta, ensure_ascii=False)
        if self.memory.secret_scan:  # credentials are never stored: each replaced by [redacted: KIND]
            content, payload = self.memory.scrub(content), secrets.redact_json(payload)
        row = {"role": role, "content": storable(content), "conversation_id": conv, "payload": valid_text(payload)}
        return (await _io(lambda: archive.log_messages(self.agent_id, [row], max_chars=ROW_MAX_CHARS)))[0]

    async def _save_window(
        self,
        conv: str,
        *,
        turns_delta: int = 0,
        start_seq: int | None = None,
        summary_id: str | None = None,
        sleeptime_seq: int | None = None,
    ) -> ContextWindow:
        """Re-read and change only the given fields (the sleep-time agent writes its own mark concurrently)."""
        m = self.memory

        def save() -> ContextWindow:
            current = m.context_window(self.agent_id, conv)
            new = replace(
                current,
                turns=current.turns + turns_delta,
                start_seq=current.start_seq if start_seq is None else start_seq,
                summary_id=current.summary_id if summary_id is None else summary_id,
                sleeptime_seq=current.sleeptime_seq if sleeptime_seq is None else sleeptime_seq,
            )
            m.set_context_window(new)
            return new

        return await _io(save)

    # -- sleep-time agent -------------------------------------------------------------------

    def _maybe_sleeptime(self, agent: Agent, conv: str, turns: int) -> str:
        try:
            every = int(agent.metadata.get("sleeptime_frequency", str(self.settings.sleeptime_frequency)))
        except ValueError:
            return f"skipped: sleeptime_frequency {agent.metadata.get('sleeptime_frequency')!r} is not a whole number"
        if every <= 0 or turns % every:
            return ""
        if self.background_provider is None or self.sleeptime_tools is None:
            return (
                "skipped: the sleep-time agent runs in the background, which needs the anthropic provider "
                "(a sampling request cannot outlive the host's tool call)"
            )
        task = asyncio.get_running_loop().create_task(self._sleeptime(conv))
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return "started"

    def _finished(self, task: asyncio.Task[None]) -> None:
        """A sleep-time run ended: one that raised has no caller to answer, so what it raised is logged here."""
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.warning("sleep-time agent failed: %s", exc, exc_info=exc)

    @property
    def background_running(self) -> bool:
        return bool(self._tasks)

    async def wait_background(self) -> None:
        """Wait for running sleep-time agents (the CLI calls this before it exits; tests use it). What a run raised
        is logged as it ends (``_finished``)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _sleeptime(self, conv: str) -> None:
        from ..domain.memory import current_actor  # the store is open by now; importing memory loads it

        current_actor.set("sleeptime")  # this task's edits are recorded as the sleep-time agent's
        async with self._sleeptime_lock:
            try:
                assert self.background_provider is not None and self.sleeptime_tools is not None
                run = await run_sleeptime(
                    self.memory,
                    self.agent_id,
                    conv,
                    self.background_provider,
                    self.sleeptime_tools,
                    max_steps=self.settings.sleeptime_max_steps,
                    max_tokens=self.settings.max_tokens,
                )
                if run is not None:
                    await self._save_window(conv, sleeptime_seq=run.mark)
                    self.last_sleeptime = run
                    u = run.report.usage
                    self._sleeptime_usage[conv] = self._sleeptime_usage.get(conv, Usage()) + u
                    log.info(
                        "sleep-time agent: %d tool calls, stop %s, edited %s; tokens: %d input (%d cached), %d output",
                        len(run.report.steps),
                        run.stop_reason,
                        ", ".join(run.report.memory_edits) or "nothing",
                        u.prompt_tokens,
                        u.cache_read_input_tokens,
                        u.output_tokens,
                    )
            except TiermemError as exc:
                # a background run has no caller to answer: the mark stays, so the next run covers these turns
                log.warning("sleep-time agent failed: %s", exc)


class _Recall:
    """The agent loop's exchange: each message is written to recall as it happens, and a request is the
    system prompt (agent text + core memory) with the in-context window, summarised first when it is full."""

    def __init__(
        self,
        loop: AgentLoop,
        agent: Agent,
        provider: Provider,
        conv: str,
        tools: list[ToolSpec],
        user: Message,
        window: ContextWindow,
        context: list[Message],
        known: int | None,
        version: Callable[[], int],
        report: Report,
    ) -> None:
        self.loop, self.agent, self.provider, self.conv, self.tools, self.user = (
            loop,
            agent,
            provider,
            conv,
            tools,
            user,
        )
        self.window, self.context = window, context
        self.known = known  # the messages table version after our last write; None: someone else wrote too
        self._version = version
        self.report = report  # the turn's: the summariser's usage is added to it
        self.summaries = 0
        self._raw = 0
        self._force = False  # the provider refused the last request as too long: summarise before the next

    async def _log(self, role: str, content: str, meta: JSON) -> None:
        message = await self.loop._log(self.conv, role, content, {**meta, TURN_KEY: self.user.id})
        now_at = await _io(self._version)
        self.known = now_at if self.known is not None and now_at == self.known + 1 else None
        self.context.append(message)

    async def request(self, step: int) -> LLMRequest:
        loop = self.loop
        system = await loop._system(self.agent)
        force, self._force = self._force, False
        fitted = await loop._fit(
            self.provider,
            system,
            self.tools,
            self.window,
            self.context,
            self.user,
            step,
            force=force,
            report=self.report,
        )
        if fitted is not None:
            self.window, self.context = fitted
            self.summaries += 1
            self.known = None
        elif loop._needs_warning(system, self.tools, self.context):
            await self._log("user", WARNING, {"kind": "system_alert"})
        self._raw = loop.counter.raw(system, self.tools, self.context)
        return LLMRequest(
            system,
            to_api_messages(self.context),
            tuple(self.tools),
            loop.settings.max_tokens,
            stable_prefix=len(self.agent.system or loop.memory.default_system),
            key=f"{self.user.id}:{step}",
        )

    async def refused(self, exc: PromptTooLongError) -> None:
        """The provider refused the last request as too long: learn its count, summarise before the next request."""
        log.warning("%s Summarising and trying again.", exc)
        self.loop.counter.calibrate(self._raw, exc.tokens)
        await self.loop._save_factor(self.provider)
        self._force = True

    async def assistant(self, response: LLMResponse) -> None:
        self.loop.counter.calibrate(self._raw, response.usage.prompt_tokens)
        await self.loop._save_factor(self.provider)
        calls = [{"id": c.id, "name": c.name, "input": c.input} for c in response.tool_calls]
        meta: JSON = {
            "kind": "assistant",
            "tool_calls": calls,
            "stop_reason": response.stop_reason,
            "usage": asdict(response.usage),
            "model": response.model,
        }
        # A send_message reply (memgpt style) is what the user saw: recall keeps it as the content, the model's text
        # beside it; an answer calling conversation_search is kept with no content, so no search finds it (an answer
        # cut at max_tokens does not run its last call: what that one says was never sent).
        sent = calls[:-1] if response.stop_reason == "max_tokens" else calls
        content = recall_content(response.text, sent, replies=any(t.name == SEND_MESSAGE.name for t in self.tools))
        if content is not None:
            meta[MODEL_TEXT] = response.text
        await self._log("assistant", response.text if content is None else content, meta)

    async def result(self, call: ToolCall, text: str, is_error: bool) -> None:
        wrapped = json.dumps(
            {"status": "Failed" if is_error else "OK", "message": text, "time": stamp()}, ensure_ascii=False
        )
        await self._log(
            "tool", wrapped, {"kind": "tool_result", "tool_call_id": call.id, "name": call.name, "is_error": is_error}
        )

    async def heartbeat(self, reason: str) -> None:
        await self._log(
            "user", json.dumps({"type": "heartbeat", "reason": reason, "time": stamp()}), {"kind": "heartbeat"}
        )
