"""What a model sees of a tool, and what it is told when a call is wrong.

``describe`` and ``tidy_schema`` shape what ``tools/list`` shows (``tools.tidy_published_schema`` applies them): a
dedented description, an input schema without pydantic's titles and ``null`` unions. ``check_arguments`` maps the
aliases Letta's older tools used onto the advertised names and refuses arguments the tool does not take (and keys an
object argument does not take, at any depth, in an argument sent as JSON text too); ``explain`` turns a pydantic
validation error into one line per argument naming it, the type expected and an example. Pure functions over plain
values.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping, Sequence
from typing import Any

from mcp.types import CallToolResult, TextContent

# Names Letta's tools use for an argument a tool names otherwise: accepted, never advertised as separate schema
# properties. Letta's older memory_replace/memory_insert used old_str/new_str; Letta's server-side `memory` tool
# (letta/functions/function_sets/base.py) takes old_string/new_string where Anthropic's (ours) takes old_str/new_str.
# An alias applies only where the tool does not take the name itself (Letta Code's `memory` takes old_string).
ALIASES: dict[str, dict[str, str]] = {
    "memory_replace": {"old_str": "old_string", "new_str": "new_string"},
    "memory_insert": {"new_str": "new_string"},
    "memory": {"old_string": "old_str", "new_string": "new_str"},
}

# An example value per argument name, used in error messages (falls back to one made from the type).
EXAMPLES: dict[str, Any] = {
    "label": "human",
    "old_string": "Likes tea",
    "new_string": "Likes green tea",
    "old_content": "Likes tea",
    "new_content": "Likes green tea",
    "content": "Ada prefers green tea.",
    "new_memory": "Name: Ada\nLikes green tea",
    "patch": " Name: Ada\n-Likes tea\n+Likes green tea",
    "insert_line": -1,
    "query": "what does Ada drink",
    "tags": ["preferences"],
    "roles": ["user"],
    "messages": [{"role": "user", "content": "I prefer green tea."}],
    "start_date": "2025-01-31",
    "end_date": "2025-01-31",
    "start_datetime": "2025-01-31T09:00",
    "end_datetime": "2025-01-31T18:00",
    "id": "passage-0123",
    "version": 2,
    "limit": 10,
    "top_k": 5,
    "offset": 0,
    "path": "/memories/human",
    "view_range": [1, 10],
    "file_text": "Goal: ship v1",
    "old_str": "Likes tea",
    "new_str": "Likes green tea",
    "insert_text": "Likes green tea",
    "old_path": "/memories/notes",
    "new_path": "/memories/project",
    "description": "Notes about the project",
    "idempotency_key": "3f2c9a1e-retry-1",
    "conversation_id": "chat-42",
    "message": "Hello!",
    # the file tools: one request (an example that is itself a valid call: an empty list is refused)
    "file_requests": [{"file_name": "docs/README.md", "offset": 0, "length": 50}],
    "pattern": "TODO",
    "include": "*.py",
    "context_lines": 1,
}

_EXPECTED = {
    "missing": None,
    "string_type": "a string",
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "list_type": "a list",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
}


# ---------------------------------------------------------------------------
# Publishing: what tools/list shows
# ---------------------------------------------------------------------------


def describe(doc: str) -> str:
    """A docstring as a tool description: dedented, trailing space gone."""
    return inspect.cleandoc(doc or "")


def tidy_schema(schema: Any) -> Any:
    """Drop what costs a model tokens and tells it nothing: titles, ``null`` arms of optional arguments, null defaults."""
    if isinstance(schema, list):
        return [tidy_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in ("properties", "$defs") and isinstance(value, dict):
            out[key] = {name: tidy_schema(sub) for name, sub in value.items()}
        else:
            out[key] = tidy_schema(value)
    arms = out.get("anyOf")
    if isinstance(arms, list) and {"type": "null"} in arms:
        rest = [a for a in arms if a != {"type": "null"}]
        if len(rest) == 1 and out.get("default", None) is None:
            out.pop("anyOf")
            out.pop("default", None)
            out = {**rest[0], **out}
    return out


# ---------------------------------------------------------------------------
# Checking a call
# ---------------------------------------------------------------------------


def check_arguments(tool: str, schema: dict[str, Any], arguments: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Map aliases onto the advertised names, refuse unknown arguments and ``true``/``false`` given for numbers.

    Returns (arguments, None), or (arguments, message) when the call must be refused.
    """
    properties = schema.get("properties", {})
    accepted = list(properties)
    aliases = ALIASES.get(tool, {})
    out: dict[str, Any] = {}
    given: dict[str, str] = {}  # advertised name -> the name the call used for it
    unknown: list[str] = []
    for name, value in arguments.items():
        target = name if name in accepted else aliases.get(name, name)
        if target not in accepted:
            unknown.append(name)
            continue
        if target in out and out[target] != value:
            return arguments, (
                f"{tool}: `{given[target]}` and `{name}` are two names for the same argument and their values differ. "
                f"Send only `{target}`."
            )
        out[target] = value
        given[target] = name
    if unknown:
        return arguments, (
            f"{tool} does not take the {_noun(unknown, 'argument')} {_names(unknown)}. It accepts: "
            f"{', '.join(accepted)} (required: {', '.join(schema.get('required', [])) or 'none'})."
        )
    # inside an object argument (a message of conversation_log, a request of open_files) a key the object does not
    # take is refused too: pydantic would drop it without a word (a `conversationId` stored as no conversation)
    walked = [
        found
        for name, value in out.items()
        for found in _walk(schema, properties[name], _as_sent(schema, properties[name], value), (name,))
    ]
    extras = [f"{tool}: {problem}" for problem in walked if isinstance(problem, str)]
    if extras:
        shown = extras[:MAX_KEY_PROBLEMS]
        if len(extras) > len(shown):
            shown.append(f"{tool}: and {len(extras) - len(shown)} more objects with keys they do not take.")
        return arguments, "\n".join(shown)
    # pydantic's lax mode would take true as 1 (or 1.0): a boolean where a number belongs is a mistake, said as one
    booleans = [
        {"type": _NUMBER_ERRORS[kind], "loc": loc, "input": value}
        for loc, kind, value in (found for found in walked if not isinstance(found, str))
        if isinstance(value, bool)
    ]
    if booleans:
        return arguments, explain(tool, schema, booleans)
    return out, None


MAX_KEY_PROBLEMS = 5  # objects with keys they do not take named in a refusal (then "and N more")
_NUMBER_ERRORS = {"integer": "int_type", "number": "float_type"}
_Found = str | tuple[tuple[Any, ...], str, Any]


def _as_sent(schema: dict[str, Any], prop: dict[str, Any], value: Any) -> Any:
    """An argument as the SDK validates it: a string that is JSON text of a list, an object or null is parsed first
    (``FuncMetadata.pre_parse_json``: Claude Desktop sends lists and objects as JSON text), so it is looked into as
    that value; any other value (a string of a number or a boolean too, which the SDK leaves) as it is. Only an
    argument whose schema is a list or an object is parsed (``_walk`` looks into nothing else): a long text
    argument is not read as JSON on every call."""
    if not isinstance(value, str) or _resolved(schema, prop).get("type") not in ("array", "object"):
        return value
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):
        return value
    return value if isinstance(parsed, str | int | float) else parsed


def _walk(schema: dict[str, Any], prop: dict[str, Any], value: Any, loc: tuple[Any, ...]) -> list[_Found]:
    """What an argument's value holds that needs a look: (location, schema type, value) of each value given where
    the schema wants a whole number or a number (Letta Code's ``insert_line``, an ``offset`` in a list of requests),
    and a problem (text) for each object given a key its schema does not list, at any depth."""
    prop = _resolved(schema, prop)
    kind = prop.get("type")
    if kind in _NUMBER_ERRORS:
        return [(loc, str(kind), value)]
    if kind == "array" and isinstance(value, list):
        items = prop.get("items", {})
        return [found for i, v in enumerate(value) for found in _walk(schema, items, v, (*loc, i))]
    if kind != "object" or not isinstance(value, dict):
        return []
    fields = prop.get("properties")
    fields = fields if isinstance(fields, dict) else {}
    extra = prop.get("additionalProperties", False)  # a schema for the other keys, true (any), or false (none)
    out: list[_Found] = []
    unknown = [key for key in value if key not in fields]
    if unknown and extra is False and "properties" in prop:
        out.append(
            f"`{_path(list(loc))}` does not take the {_noun(unknown, 'key')} {_names(unknown)}. It accepts: "
            f"{', '.join(fields)} (required: {', '.join(prop.get('required', [])) or 'none'})."
        )
    for key, item in value.items():
        if key in fields:
            out.extend(_walk(schema, fields[key], item, (*loc, key)))
        elif isinstance(extra, dict):
            out.extend(_walk(schema, extra, item, (*loc, key)))
    return out


def _resolved(schema: dict[str, Any], prop: dict[str, Any]) -> dict[str, Any]:
    """``prop`` itself, the definition its ``$ref`` names (``#/$defs/LogMessage``), or the one arm of a nullable
    ``anyOf`` (``context_lines: int | None = 1``, whose default keeps the ``null`` arm in the schema)."""
    arms = [arm for arm in prop.get("anyOf", ()) if arm != {"type": "null"}]
    if len(arms) == 1 and isinstance(arms[0], dict):
        prop = {**prop, **arms[0]}
        prop.pop("anyOf")
    ref = prop.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        found = schema.get("$defs", {}).get(ref.removeprefix("#/$defs/"))
        return found if isinstance(found, dict) else prop
    return prop


def _noun(names: list[str], noun: str) -> str:
    return noun if len(names) == 1 else noun + "s"


def _names(names: list[str]) -> str:
    return ", ".join(f"`{n}`" for n in names)


def explain(tool: str, schema: dict[str, Any], errors: Sequence[Mapping[str, Any]], *, reveal: bool = True) -> str:
    """One line per invalid argument: its name, the type expected and an example call value. ``reveal=False``
    (what the log gets): a value given is said by its kind and size only, never quoted (it may be a secret the
    model put in the wrong argument)."""
    lines: list[str] = []
    seen: set[str] = set()
    for err in errors:
        loc = [part for part in err.get("loc", ()) if not (isinstance(part, str) and part.startswith("function-"))]
        name = _path(loc)
        if name in seen:
            continue  # a union reports each arm; the first says enough
        seen.add(name)
        top = str(loc[0]) if loc else ""
        prop = schema.get("properties", {}).get(top, {})
        expected = _expected(err, prop if len(loc) == 1 else {})
        example = json.dumps({top: EXAMPLES.get(top, _example(prop))}, ensure_ascii=False) if top else ""
        if err.get("type") == "missing":
            what = f"the required argument `{name}` is missing"
            if len(loc) == 1:
                what += f"; it takes {expected}"
        else:
            what = f"`{name}` must be {expected}, got {_shown(err.get('input'), reveal)}"
        lines.append(f"{tool}: {what}. Example: {example}." if example else f"{tool}: {what}.")
    return "\n".join(lines) or f"{tool}: the arguments are not valid; see the tool's input schema."


def error_result(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def _path(loc: list[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _expected(err: Mapping[str, Any], prop: dict[str, Any]) -> str:
    kind = err.get("type", "")
    if kind == "literal_error":
        return "one of " + str((err.get("ctx") or {}).get("expected", "the listed values"))
    if prop:
        return _type_phrase(prop)
    return _EXPECTED.get(kind) or str(err.get("msg", "a valid value")).lower()


def _type_phrase(prop: dict[str, Any]) -> str:
    prop = _resolved({}, prop)
    if "enum" in prop:
        return "one of " + ", ".join(repr(v) for v in prop["enum"])
    kind = prop.get("type")
    if kind == "array":
        item = prop.get("items", {})
        if "enum" in item:
            return "a list of values from " + ", ".join(repr(v) for v in item["enum"])
        plural = {"string": "strings", "integer": "whole numbers", "number": "numbers", "boolean": "booleans"}
        return "a list of " + plural.get(str(item.get("type")), "objects")
    return {
        "string": "a string",
        "integer": "a whole number",
        "number": "a number",
        "boolean": "true or false",
        "object": "an object",
    }.get(str(kind), "a valid value")


def _example(prop: dict[str, Any]) -> Any:
    if "enum" in prop:
        return prop["enum"][0]
    return {"string": "text", "integer": 1, "number": 1.0, "boolean": True, "array": [], "object": {}}.get(
        str(prop.get("type")), "value"
    )


def _shown(value: Any, reveal: bool = True) -> str:
    if isinstance(value, str):
        return f"the string {value!r}" if reveal and len(value) <= 60 else f"a string of {len(value)} characters"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        return f"the number {value}" if reveal else "a number"
    if isinstance(value, list):
        return f"a list of {len(value)} item" + ("" if len(value) == 1 else "s")
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


# ---------------------------------------------------------------------------
# What the tool list costs
# ---------------------------------------------------------------------------


CLAUDE_CODE_PREFIX = "mcp__tiermem__"  # Claude Code names a server's tools mcp__<server>__<tool>


def tool_list_cost(tools: list[Any]) -> dict[str, int]:
    """Tokens (cl100k_base) of a ``tools/list`` answer: what a model reads of each tool (name, description,
    input schema, as hosts pass tools to a model) and the whole JSON answer (with titles, annotations, output schemas).
    ``claude_code_chars``: the characters of the definitions as Claude Code sends them in every request (its name
    ``mcp__tiermem__<tool>``, the description and the input schema unchanged, counted as compact JSON).
    """
    from ..domain.tokens import count_tokens

    wire = [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in tools]
    seen = [
        {"name": t["name"], "description": t.get("description", ""), "input_schema": t["inputSchema"]} for t in wire
    ]
    whole = json.dumps(wire, ensure_ascii=False)
    claude_code = sum(
        len(CLAUDE_CODE_PREFIX + t["name"])
        + len(t["description"])
        + len(json.dumps(t["input_schema"], separators=(",", ":")))
        for t in seen
    )
    return {
        "tools": len(wire),
        "model_tokens": count_tokens(json.dumps(seen, ensure_ascii=False)),
        "list_tokens": count_tokens(whole),
        "list_chars": len(whole),
        "claude_code_chars": claude_code,
    }
