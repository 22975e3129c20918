"""The stdio loop's reading of stdin, and the answer to a line the SDK would drop or misread.

tiermem reads stdin itself (the SDK's stdio transport writes stdout), one line at a time, so it sees each line
before the SDK's parser has thrown part of it away:

- text that is not JSON: -32700, ``id`` null (no id can be read from it);
- JSON the SDK would misread or refuse (a batch, an ``id`` that is not a string or an integer, ``params`` that is not
  an object, ...): what ``wire_checks.misread`` says, with the request's own ``id`` where it can be read;
- a request that is JSON (Python's ``json`` reads it) but holds a lone surrogate, a ``\\udXXX`` escape without its
  other half, which the SDK's parser refuses: -32602 (-32600 when it is outside ``params``) with the request's own
  ``id``, naming where the surrogate is, so the client's request is answered instead of waiting forever. Nothing
  runs: such text is not valid Unicode, and no tool would store it (``check_text``).

A notification or a response gets no answer (JSON-RPC answers neither); every refused line is logged on stderr.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from mcp.shared.message import SessionMessage
from mcp.types import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, JSONRPCNotification, jsonrpc_message_adapter
from pydantic import ValidationError

from .wire_checks import SURROGATE, Verdict, misread, readable_id, refused

log = logging.getLogger(__name__)
ONE_BY_ONE = "one JSON-RPC message per line"


async def pump(lines: Any, forward: Any, write: Any) -> None:
    """Read stdin's ``lines`` (an async iterable of text): each JSON-RPC message goes to ``forward`` (the server's
    stream), the answer to each refused line to ``write`` (stdout's)."""
    async with forward:
        async for line in lines:
            verdict = None
            try:
                message = jsonrpc_message_adapter.validate_json(line, by_name=False)
            except Exception as exc:  # what the SDK's own reader hands on: its parser's error, any of them
                verdict = bad_line_answer(line, exc)
            else:
                if isinstance(message, JSONRPCNotification) and '"id"' in line:
                    verdict = misread(json.loads(line), one_by_one=ONE_BY_ONE)  # an id the SDK dropped
            if verdict is None:
                await forward.send(SessionMessage(message))
                continue
            answer = verdict.answer
            log.warning(
                "stdin: %s; %s and ignored it",
                verdict.what,
                f"answered {answer.error.code}" if answer else "nothing to answer",
            )
            if answer is not None:
                await write.send(SessionMessage(answer))


def bad_line_answer(line: str, item: Exception) -> Verdict:
    """The JSON-RPC error that answers the line the SDK refused with ``item`` (its parser's error), and what was
    wrong with it, for the log."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        what = "Parse error: the line is not JSON"
        return refused(None, PARSE_ERROR, f"{what}. Send {ONE_BY_ONE}.", what)
    errors = item.errors() if isinstance(item, ValidationError) else []
    invalid = next((e for e in errors if e.get("type") == "json_invalid"), None)
    answered = isinstance(message, dict) and "method" in message and "id" in message
    ident = readable_id(message) if isinstance(message, dict) else None
    if invalid is None:  # JSON the SDK reads, but not as a message it takes
        what = "Invalid Request: not a JSON-RPC 2.0 message"
        return misread(message, one_by_one=ONE_BY_ONE) or refused(None, INVALID_REQUEST, f"{what}.", what)
    where = lone_surrogate(message)
    if where is None:  # JSON Python reads but the SDK's parser does not, for another reason
        what = f"Parse error: the line is not strict JSON ({invalid.get('msg', 'refused')})"
        return refused(
            ident, PARSE_ERROR, f"{what}. Send {ONE_BY_ONE}.", what, answered or not isinstance(message, dict)
        )
    path, index = where
    in_params = path.startswith("params")
    what = (
        f"Invalid {'params' if in_params else 'Request'}: {path} holds a lone surrogate (a \\udXXX escape without "
        f"its other half, at position {index}), which is not valid Unicode text"
    )
    advice = (
        ". Nothing was done. Send the text as UTF-8, or escape a character beyond U+FFFF as both halves of its "
        "surrogate pair (U+1F600 is \\ud83d\\ude00)."
    )
    code = INVALID_PARAMS if in_params else INVALID_REQUEST
    return refused(ident, code, what + advice, what, answered or not isinstance(message, dict))


def lone_surrogate(value: Any, path: str = "") -> tuple[str, int] | None:
    """Where the first lone surrogate in a parsed JSON value is: the path to the text (``params.arguments.x``,
    ``params.arguments.tags[0]``; for a key, its parent's path and ``(one of its keys)``) and its position in that text."""
    if isinstance(value, str):
        found = SURROGATE.search(value)
        return (path or "the message", found.start()) if found else None
    if isinstance(value, dict):
        for key, item in value.items():
            if SURROGATE.search(key):
                return lone_surrogate(key, f"{path or 'the message'} (one of its keys)")
            hit = lone_surrogate(item, f"{path}.{key}" if path else key)
            if hit is not None:
                return hit
    if isinstance(value, list):
        for n, item in enumerate(value):
            hit = lone_surrogate(item, f"{path}[{n}]")
            if hit is not None:
                return hit
    return None
