"""The answer to a stdio line the SDK could not read as a JSON-RPC message.

The SDK's stdio transport hands such a line to the server as an exception (its pydantic error); the server answers
it here instead of dropping it without a word:

- text that is not JSON: -32700, ``id`` null (no id can be read from it);
- JSON that is not a JSON-RPC message: -32600, ``id`` null;
- a request that is JSON (Python's ``json`` reads it) but holds a lone surrogate, a ``\\udXXX`` escape without its
  other half, which the SDK's parser refuses: -32602 (-32600 when it is outside ``params``) with the request's own
  ``id``, naming where the surrogate is, so the client's request is answered instead of waiting forever. Nothing
  runs: such text is not valid Unicode, and no tool would store it (``check_text``). A notification or a response
  holding one gets no answer (JSON-RPC answers neither).
"""

from __future__ import annotations

import json
import re
from typing import Any

from mcp.types import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError
from pydantic import ValidationError

_SURROGATE = re.compile("[\ud800-\udfff]")


def bad_line_answer(item: Exception) -> tuple[JSONRPCError | None, str]:
    """The JSON-RPC error that answers the unreadable line behind ``item`` (None: nobody to answer), and what was
    wrong with it, for the log."""
    errors = item.errors() if isinstance(item, ValidationError) else []
    invalid = next((e for e in errors if e.get("type") == "json_invalid"), None)
    if invalid is None:
        what = "Invalid Request: the line is not a JSON-RPC 2.0 message"
        return _error(None, INVALID_REQUEST, f"{what}. Send one JSON-RPC message per line."), what
    try:
        message = json.loads(str(invalid.get("input", "")))
    except (ValueError, RecursionError):
        what = "Parse error: the line is not JSON"
        return _error(None, PARSE_ERROR, f"{what}. Send one JSON-RPC message per line."), what
    answered, ident = _request_id(message)
    where = lone_surrogate(message)
    if where is None:  # JSON Python reads but the SDK's parser does not, for another reason
        what = f"Parse error: the line is not strict JSON ({invalid.get('msg', 'refused')})"
        answer = _error(ident, PARSE_ERROR, f"{what}. Send one JSON-RPC message per line.")
        return (answer if answered else None), what
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
    answer = _error(ident, INVALID_PARAMS if in_params else INVALID_REQUEST, what + advice)
    return (answer if answered else None), what


def lone_surrogate(value: Any, path: str = "") -> tuple[str, int] | None:
    """Where the first lone surrogate in a parsed JSON value is: the path to the text (``params.arguments.x``,
    ``params.arguments.tags[0]``; for a key, its parent's path and ``(one of its keys)``) and its position in that text."""
    if isinstance(value, str):
        found = _SURROGATE.search(value)
        return (path or "the message", found.start()) if found else None
    if isinstance(value, dict):
        for key, item in value.items():
            if _SURROGATE.search(key):
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


def _request_id(message: Any) -> tuple[bool, int | str | None]:
    """Whether the message is answered (not a notification, not a response: JSON-RPC answers neither) and the id to
    answer with (None when it is not an integer or valid text: no client could match it)."""
    if not isinstance(message, dict):
        return True, None
    if "method" not in message or "id" not in message:
        return False, None
    ident = message["id"]
    if isinstance(ident, bool) or not isinstance(ident, int | str):
        return True, None
    if isinstance(ident, str) and _SURROGATE.search(ident):
        return True, None
    return True, ident


def _error(ident: int | str | None, code: int, message: str) -> JSONRPCError:
    return JSONRPCError(jsonrpc="2.0", id=ident, error=ErrorData(code=code, message=message))
