"""The sleep-time agent: a background agent sharing the main agent's blocks.

Every N turns (agent metadata ``sleeptime_frequency``) it reads the transcript since its last
run and reorganises core memory with memory_replace / memory_insert / memory_rethink, ending
with memory_finish_edits. Its edits are recorded with the actor ``sleeptime`` (and can be
reverted like any other). Its own exchange with the model is not part of the user's
conversation and is not written to recall.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import anyio

from ..registry import FINISH_EDITS, SLEEPTIME_TOOLS
from .context import transcript
from .llm import JSON, LLMRequest, Provider, ToolSpec

if TYPE_CHECKING:
    from ..memory import Memory
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


async def run_sleeptime(m: Memory, agent_id: str, conv: str, provider: Provider, tools: ToolHost, *,
                        max_steps: int, max_tokens: int) -> int | None:
    """One run over the messages since the last mark; returns the new mark (None: nothing to read)."""
    window = await anyio.to_thread.run_sync(lambda: m.context_window(agent_id, conv))
    messages = await anyio.to_thread.run_sync(lambda: m.archive.messages_since(agent_id, conv, window.sleeptime_seq))
    if not messages:
        return None
    mark = messages[-1].seq + 1
    specs = [*[s for s in await tools.specs() if s.name in SLEEPTIME_TOOLS], FINISH]
    core = await anyio.to_thread.run_sync(lambda: m.render_core(agent_id, line_numbers=True))
    system = SYSTEM + "\n\n" + core
    convo: list[JSON] = [{"role": "user", "content": [{"type": "text", "text": (
        "Transcript of the conversation since your last run:\n\n" + transcript(messages))}]}]
    for step in range(max_steps):
        response = await provider.complete(LLMRequest(system, convo, tuple(specs), max_tokens,
                                                      key=f"sleeptime:{mark}:{step}", purpose="sleeptime"))
        if not response.tool_calls:
            break
        blocks: list[JSON] = [{"type": "text", "text": response.text}] if response.text.strip() else []
        blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.input} for c in response.tool_calls]
        convo.append({"role": "assistant", "content": blocks})
        results: list[JSON] = []
        finished = False
        for call in response.tool_calls:
            if call.name == FINISH.name:
                text, is_error, finished = "Finished.", False, True
            else:
                text, is_error = await tools.call(call.name, dict(call.input))
            results.append({"type": "tool_result", "tool_use_id": call.id, "is_error": is_error,
                            "content": json.dumps({"status": "Failed" if is_error else "OK", "message": text})})
        convo.append({"role": "user", "content": results})
        if finished:
            break
    return mark
