"""The sleep-time agent: a background agent sharing the main agent's blocks.

Every N turns (agent metadata ``sleeptime_frequency``) it reads the transcript since its last
run and reorganises core memory with memory_replace / memory_insert / memory_rethink, ending
with memory_finish_edits. Its edits are recorded with the actor ``sleeptime`` (and can be
reverted like any other). Its own exchange with the model is not part of the user's
conversation and is not written to recall.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from ..server.registry import FINISH_EDITS
from .context import transcript
from .llm import JSON, Block, LLMRequest, LLMResponse, Provider, ToolCall, ToolSpec, Turn
from .toolcalls import Answer, Report, ToolLoop

if TYPE_CHECKING:
    from ..domain.memory import Memory
    from .toolhost import ToolHost

FINISH = ToolSpec(
    FINISH_EDITS,
    "Call when you have finished reorganising memory; it ends your run.",
    {"type": "object", "properties": {}},
)
SYSTEM = """You are the sleep-time memory agent of another AI agent. You share its core memory blocks
(shown below). You receive the transcript of its recent conversation. Your job: keep core memory
accurate, current and well organised: record durable facts about the user and the agent, fix
contradictions, remove outdated or duplicated lines, and rewrite a block with memory_rethink when
it has become messy. Use memory_replace / memory_insert for small changes. Do not invent facts.
Never include line numbers in the text you write. When you are done, call memory_finish_edits."""


@dataclass(frozen=True)
class SleeptimeRun:
    """A finished run: the new mark (the seq after the last message it read), how it stopped, its report."""

    mark: int
    stop_reason: str  # end_turn | max_steps
    report: Report


class _Conversation:
    """The sleep-time agent's exchange: kept in a list, never written to recall."""

    def __init__(self, system: str, first: str, specs: list[ToolSpec], mark: int, max_tokens: int) -> None:
        self.system, self.specs, self.mark, self.max_tokens = system, specs, mark, max_tokens
        self.messages: list[Turn] = [{"role": "user", "content": [{"type": "text", "text": first}]}]

    async def request(self, step: int) -> LLMRequest:
        return LLMRequest(
            self.system,
            self.messages,
            tuple(self.specs),
            self.max_tokens,
            key=f"sleeptime:{self.mark}:{step}",
            purpose="sleeptime",
        )

    async def assistant(self, response: LLMResponse) -> None:
        if not response.tool_calls:
            return  # the run ends here; nothing follows that would need it
        blocks: list[Block] = [{"type": "text", "text": response.text}] if response.text.strip() else []
        blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.input} for c in response.tool_calls]
        self.messages.append({"role": "assistant", "content": blocks})

    async def result(self, call: ToolCall, text: str, is_error: bool) -> None:
        if self.messages[-1]["role"] != "user":
            self.messages.append({"role": "user", "content": []})
        self.messages[-1]["content"].append(
            {
                "type": "tool_result",
                "tool_use_id": call.id,
                "is_error": is_error,
                "content": json.dumps({"status": "Failed" if is_error else "OK", "message": text}),
            }
        )

    async def heartbeat(self, reason: str) -> None:  # the letta_v1 style has none
        return None


def _finish(arguments: JSON) -> Answer:
    return Answer("Finished.", ends=True)


async def run_sleeptime(
    m: Memory, agent_id: str, conv: str, provider: Provider, tools: ToolHost, *, max_steps: int, max_tokens: int
) -> SleeptimeRun | None:
    """One run over the messages since the last mark (None: nothing to read). ``tools`` decides what is offered
    besides memory_finish_edits (the agent service gives it the ``sleeptime`` tools of the registry)."""
    window = await anyio.to_thread.run_sync(lambda: m.context_window(agent_id, conv))
    messages = await anyio.to_thread.run_sync(
        lambda: m.archive.rows.messages_since(agent_id, conv, window.sleeptime_seq)
    )
    if not messages:
        return None
    mark = messages[-1].seq + 1
    specs = [*await tools.specs(), FINISH]
    core = await anyio.to_thread.run_sync(lambda: m.render_core(agent_id, line_numbers=True))
    system = SYSTEM + "\n\n" + core
    first = "Transcript of the conversation since your last run:\n\n" + transcript(messages)
    run = ToolLoop(
        provider,
        tools,
        _Conversation(system, first, specs, mark, max_tokens),
        max_steps=max_steps,
        builtins={FINISH.name: _finish},
    )
    stop = await run.run()
    return SleeptimeRun(mark, stop, run.report)
