"""Letta messages -> tiermem log rows (role, content, payload), keeping each message as the file had it.

The payload carries what the agent loop reads (kind, tool calls, reasoning, tool results) and, under ``letta``,
the file's message less its ids, which an export writes back unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..agent.llm import MODEL_TEXT, recall_content
from ..base.errors import ValidationError

JSON = dict[str, Any]
EXTENSION = "tiermem"  # the key of tiermem's own row in an exported message
SUMMARY_MARK = "prior messages"


def letta_original(m: JSON) -> JSON:
    """A message as the file had it, less its ids (export assigns new ones) and tiermem's own extension."""
    return {k: v for k, v in m.items() if k not in ("id", "agent_id", EXTENSION)}


def file_project(value: Any, where: str) -> str | None:
    """The project tiermem wrote for a message or passage (its own field; None or absent: shared by every project)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{where}: `project` must be a project's name (text), not {value!r}.")
    return value


def _text_of(content: Any) -> tuple[str, list[str]]:
    if isinstance(content, str):
        return content, []
    texts, reasoning = [], []
    for c in content or []:
        if not isinstance(c, dict):
            continue
        if c.get("type") == "text":
            texts.append(str(c.get("text") or ""))
        elif c.get("type") in ("reasoning", "omitted_reasoning", "redacted_reasoning") and c.get("reasoning"):
            reasoning.append(str(c["reasoning"]))
    return "".join(texts), reasoning


def called_tools(messages: Sequence[Any]) -> dict[str, str]:
    """The tool each call of ``messages`` named, by the call's id (the assistant messages' ``tool_calls``): a Letta
    tool message names its call (``tool_call_id``), and in its own ``name`` the agent or nothing, not the tool."""
    out: dict[str, str] = {}
    for m in messages:
        for c in (m.get("tool_calls") if isinstance(m, dict) else None) or []:
            fn = c.get("function") if isinstance(c, dict) else None
            if isinstance(fn, dict) and c.get("id") is not None and isinstance(fn.get("name"), str):
                out[str(c["id"])] = fn["name"]
    return out


def message_row(m: Any, i: int, agent: str, called: Mapping[str, str] | None = None) -> JSON | None:
    """A row for the log, its payload carrying the file's message under ``letta`` (exported back as it was). A tool
    message's tool is the one its call named (``called``: ``called_tools`` of the agent's messages), so the loop's
    send_message and conversation_search results are told apart as the agent loop's own (``store.query.is_plumbing``);
    a call not found keeps the message's own name."""
    row = _convert(m, i, agent, called or {})
    if row is None:
        return None
    own = m.get(EXTENSION)
    if not isinstance(own, dict) or own.get("letta"):
        try:
            payload = json.loads(row.get("payload") or "{}")
        except (ValueError, RecursionError):  # RecursionError: refused in ``_convert``, never reached
            payload = {}
        payload = payload if isinstance(payload, dict) else {}
        payload["letta"] = letta_original(m)
        row["payload"] = json.dumps(payload)
    return row


def _own_payload(payload: Any, where: str) -> Any:
    """tiermem's own payload of a message, as the file gives it; refused when it nests JSON too deeply to read (tiermem
    never writes one; the import, its redaction and an export all read it), before anything is written."""
    if isinstance(payload, str) and payload.lstrip()[:1] in ("{", "["):
        try:
            json.loads(payload)
        except ValueError:  # not JSON: stored as it is, and redacted as text
            pass
        except RecursionError:
            raise ValidationError(
                f"{where}: its `tiermem.payload` nests JSON arrays or objects too deeply to read; tiermem never "
                "writes one. Remove that payload from the message, or export the agent again. Nothing was written."
            ) from None
    return payload


def _convert(m: Any, i: int, agent: str, called: Mapping[str, str]) -> JSON | None:
    if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "tool"):
        role = m.get("role") if isinstance(m, dict) else None
        if role in ("approval",):
            return None
        raise ValidationError(f"Agent {agent!r}: message {i} has no usable role ({role!r}).")
    where = f"Agent {agent!r}: messages[{i}] (id {str(m.get('id') or f'message-{i}')!r})"
    content = m.get("content")
    if content is not None and not isinstance(content, str | list):
        raise ValidationError(f"{where}: `content` must be text or a list of content parts, not {content!r}.")
    text, reasoning = _text_of(content)
    row: JSON = {"file_id": str(m.get("id") or f"message-{i}"), "timestamp": m.get("created_at"), "content": text}
    own = m.get(EXTENSION)
    if isinstance(own, dict) and own.get("project") is not None:  # the project tiermem logged it in
        row["project"] = file_project(own["project"], where)
    if isinstance(own, dict) and own.get("letta"):  # Letta's own message, written back as it was: convert it again
        row["conversation_id"] = own.get("conversation_id") or "default"
    elif isinstance(own, dict) and own.get("role") in ("system", "user", "assistant", "tool"):
        row.update(
            role=own["role"],
            payload=_own_payload(own.get("payload") or "", where),
            conversation_id=own.get("conversation_id") or "default",
            content=own["content"] if isinstance(own.get("content"), str) else text,
        )
        return row
    role = m["role"]
    if role == "system":
        return None  # the compiled system prompt: tiermem rebuilds it from the agent's system text and blocks
    if role == "user":
        kind, content = "user", text
        try:
            wrapped = json.loads(text)
        except (json.JSONDecodeError, TypeError, RecursionError):  # RecursionError: nested too deep, so text
            wrapped = None
        if (
            isinstance(wrapped, dict)
            and wrapped.get("type") == "user_message"
            and isinstance(wrapped.get("message"), str)
        ):
            content = wrapped["message"]
        elif isinstance(wrapped, dict) and wrapped.get("type") == "heartbeat":
            kind = "heartbeat"
        elif isinstance(wrapped, dict) and wrapped.get("type") == "system_alert":
            message = str(wrapped.get("message") or "")
            if SUMMARY_MARK in message[:200]:
                row.update(role="system", content=message, payload=json.dumps({"kind": "summary"}))
                return row
            kind = "system_alert"
        row.update(role="user", content=content, payload=json.dumps({"kind": kind}))
    elif role == "assistant":
        calls = []
        listed = m.get("tool_calls") or []
        if not isinstance(listed, list):
            raise ValidationError(f"{where}: `tool_calls` must be a list of tool calls, not {listed!r}.")
        for k, c in enumerate(listed):
            fn = c.get("function") if isinstance(c, dict) else None
            fn = {} if fn is None and isinstance(c, dict) else fn
            if not isinstance(fn, dict):
                raise ValidationError(
                    f"{where}: tool_calls[{k}] must be an object with a `function` object "
                    f'({{"id", "type": "function", "function": {{"name", "arguments"}}}}), not {c!r}.'
                )
            raw = fn.get("arguments")
            if raw is not None and not isinstance(raw, str):
                raise ValidationError(
                    f"{where}: tool_calls[{k}].function.arguments must be the arguments as JSON text (a string, as "
                    f"Letta writes it), not {type(raw).__name__} {raw!r}."
                )
            try:
                args = json.loads(raw or "{}")
            except (json.JSONDecodeError, RecursionError):  # RecursionError: nested too deep, kept as text
                args = {"_raw": raw}
            calls.append(
                {
                    "id": str(c.get("id")),
                    "name": str(fn.get("name")),
                    "input": args if isinstance(args, dict) else {"_raw": args},
                }
            )
        payload: JSON = {"kind": "assistant", "tool_calls": calls}
        if reasoning:
            payload["reasoning"] = "\n".join(reasoning)
        # what recall searches, as Letta reads the message: the reply of send_message; nothing for a conversation_search
        # call (Letta's search leaves it out); the model's text kept beside it
        content = recall_content(text, calls, replies=True)
        if content is not None:
            payload[MODEL_TEXT] = text
            row["content"] = content
        row.update(role="assistant", payload=json.dumps(payload))
    else:
        failed = any(isinstance(r, dict) and r.get("status") == "error" for r in m.get("tool_returns") or [])
        call = m.get("tool_call_id")
        row.update(
            role="tool",
            payload=json.dumps(
                {
                    "kind": "tool_result",
                    "tool_call_id": call,
                    "name": (called.get(str(call)) if call is not None else None) or m.get("name"),
                    "is_error": failed,
                }
            ),
        )
    return row
