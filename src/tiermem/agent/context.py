"""The context window: counting a prompt's tokens, the memory-pressure warning, summarisation.

Counts use the offline tiktoken encoding times a safety factor; once the provider reports
its own count of a prompt (``usage``), the factor is calibrated from it. At ``warn_at`` of the
window the model gets MemGPT's memory-pressure alert once; past ``summarize_at`` the oldest
messages (40% first, then 10% more at a time) are replaced by a summary until the rest fits
in ``target``. The cut always lands on an assistant message, so no tool call is separated
from its result. Evicted messages stay in recall (``conversation_search`` finds them).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..base.records import Message
from ..domain.tokens import count_tokens, truncate
from .llm import ToolSpec, model_text, payload

WARNING = (
    "[This is an automated system message hidden from the user] The conversation history will soon reach its "
    "maximum length and be trimmed. Do NOT tell the user about this system alert, they should not know that the "
    "history is reaching max length. If there is any important new information or general memories about you or "
    "the user that you would like to save, you should save that information immediately by calling function "
    "core_memory_append, core_memory_replace, or archival_memory_insert (or memory_insert / memory_replace)."
)
SUMMARY_SYSTEM = (
    "You summarise a conversation between an AI assistant with a persistent memory and a user, so the assistant "
    "can continue it without the messages below. Keep every fact, decision, open question, and the user's "
    "preferences; note which tools were called and what they changed. Write in the third person, at most "
    "{words} words, no preamble."
)


@dataclass(frozen=True)
class Thresholds:
    window: int = 200_000
    warn_at: float = 0.75
    summarize_at: float = 0.90
    target: float = 0.70
    first_fraction: float = 0.40
    step_fraction: float = 0.10


class TokenCounter:
    """tiktoken counts times a safety factor, calibrated by the provider's own counts."""

    def __init__(self, safety: float = 1.15) -> None:
        self.factor = safety
        self._texts: dict[str, int] = {}  # system prompts and tool listings seen (a handful per process)
        self._messages: dict[str, int] = {}  # per stored message id: messages never change

    def raw(self, system: str, tools: Sequence[ToolSpec], messages: Sequence[Message]) -> int:
        total = self._text(system)
        if tools:
            total += self._text(json.dumps([[t.name, t.description, t.input_schema] for t in tools]))
        for m in messages:
            if m.id not in self._messages:
                if len(self._messages) > 50_000:
                    self._messages.clear()
                p = payload(m)
                calls = p.get("tool_calls") if m.role == "assistant" else None
                text = model_text(m, p) if m.role == "assistant" else m.content  # what the request carries
                self._messages[m.id] = 6 + count_tokens(text) + (count_tokens(json.dumps(calls)) if calls else 0)
            total += self._messages[m.id]
        return total

    def _text(self, text: str) -> int:
        if text not in self._texts:
            if len(self._texts) > 64:
                self._texts.clear()
            self._texts[text] = count_tokens(text)
        return self._texts[text]

    def text(self, text: str) -> int:
        """The count of one new message's text (as ``count`` would count it once stored)."""
        return int((6 + count_tokens(text)) * self.factor)

    def count(self, system: str, tools: Sequence[ToolSpec], messages: Sequence[Message]) -> int:
        return int(self.raw(system, tools, messages) * self.factor)

    def calibrate(self, raw: int, provider_count: int) -> None:
        """The provider counted ``provider_count`` tokens for a prompt we counted as ``raw``."""
        if raw > 0 and provider_count > 0:
            self.factor = max(1.0, min(3.0, provider_count / raw)) * 1.02


ERROR_CHARS = 500  # the most of the summariser's error a fallback summary quotes


def summary_allowance(th: Thresholds) -> int:
    """The tokens the summariser may write (room the summary takes in the window)."""
    return min(1024, th.window // 20)


def split_for_summary(
    messages: Sequence[Message],
    fits: Callable[[list[Message]], bool],
    th: Thresholds,
    pinned: Message | None = None,
) -> tuple[list[Message], list[Message]]:
    """(evicted, kept): evict the oldest 40%, growing by 10%, until ``fits(kept)``; kept starts at an assistant
    message. ``pinned`` (the turn's user message: the one the model must answer) is never evicted: the cut goes
    no further than it, even when the rest then does not fit."""
    total = len(messages)
    limit = next((i for i, m in enumerate(messages) if pinned is not None and m.id == pinned.id), total)
    fraction = th.first_fraction
    while True:
        cut = min(limit, max(1, int(total * fraction + 0.999)))
        while cut < limit and messages[cut].role != "assistant":
            cut += 1
        kept = list(messages[cut:])
        if cut >= limit or fits(kept):
            return list(messages[:cut]), kept
        fraction += th.step_fraction


def transcript(messages: Sequence[Message]) -> str:
    lines = []
    for m in messages:
        p = payload(m)
        kind = p.get("kind")
        stamp = m.created_at.strftime("%Y-%m-%d %H:%M")
        if kind == "summary":
            lines.append(f"[earlier summary] {m.content}")
        elif m.role == "assistant":
            calls = "; ".join(
                f"{c['name']}({json.dumps(c.get('input') or {}, ensure_ascii=False)})"
                for c in p.get("tool_calls") or []
            )
            text = model_text(m, p).strip()  # a send_message reply shows in the calls
            lines.append(f"[{stamp}] assistant: {text}" + (f" [called {calls}]" if calls else ""))
        elif m.role == "tool":
            lines.append(f"[{stamp}] tool {p.get('name', '')}: {m.content}")
        elif kind in ("heartbeat", "system_alert"):
            continue
        else:
            lines.append(f"[{stamp}] {m.role}: {m.content}")
    return "\n".join(lines)


def fallback_summary(evicted: Sequence[Message], error: str, max_tokens: int, max_chars: int) -> str:
    """What stands for a summary when the summariser failed: the hidden messages' transcript, cut to at most
    ``max_tokens`` tokens and the whole text to at most ``max_chars`` characters (dense text, a long markdown rule,
    packs 60 characters in a token: the token bound alone may leave more than a stored message may hold)."""
    error = error if len(error) <= ERROR_CHARS else error[: ERROR_CHARS - 3] + "..."
    text, cut = truncate(transcript(evicted), max_tokens)
    note = " (truncated; search the full messages with conversation_search)"

    def head(cut: bool) -> str:
        return f"[The summariser failed ({error}); transcript of the hidden messages{note if cut else ''}:]\n"

    room = max(0, max_chars - len(head(True)))
    if len(text) > room:
        text, cut = text[:room], True
    return head(cut) + text


def summary_message(text: str, evicted: int, total: int) -> str:
    return (
        f"Note: prior messages ({evicted} of {total} total messages) have been hidden from view due to conversation "
        f"memory constraints. The following is a summary of the previous messages:\n{text}"
    )
