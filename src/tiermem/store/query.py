"""Typed queries: callers say which rows with a ``Filter``; only this module writes LanceDB filter text.

Every value is quoted here (``sql_str``) or converted to a number, so no text a user or a file supplies can end a
literal early or change the query. Nothing outside the store package builds filter text
(``tests/test_layers.py`` checks it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from ..base.errors import ValidationError
from ..base.records import KEYWORD_LINE, to_us


@dataclass(frozen=True)
class Filter:
    """Which rows of a table: every field that is set narrows the rows (all must hold); an empty filter is every row.

    The fields name columns of the messages and passages tables (``agent_id`` and ``ids`` also fit the small
    tables keyed by agent or id).
    """

    agent_id: str | None = None
    agent_ids: tuple[str, ...] | None = None  # rows of any of these agents (file chunks: of these folders)
    folder_ids: tuple[str, ...] | None = None  # files of any of these folders
    group_ids: tuple[str, ...] | None = None  # rows of any of these groups (file chunks: of these files)
    not_agent_ids: tuple[str, ...] | None = None  # rows of none of these agents (every row's agent when empty)
    conversation_id: str | None = None
    not_conversation_id: str | None = None  # rows of every conversation but this one
    roles: tuple[str, ...] | None = None
    tags_any: tuple[str, ...] | None = None  # rows carrying at least one of these tags
    tags_all: tuple[str, ...] | None = None  # rows carrying every one of these tags
    start: datetime | None = None  # created at or after
    end: datetime | None = None  # created at or before
    ids: tuple[str, ...] | None = None
    id_or_group: str | None = None  # a passage id, or the group id of every chunk of one insert
    seq_from: int | None = None  # messages with seq >= this
    missing_vector: bool | None = None  # True: only rows stored without a vector; False: only rows with one
    entries: tuple[tuple[str, str], ...] | None = None  # meta rows whose (key, value) is one of these
    # meta rows with one of these keys (a deletion by key: its filter, kept in the table's transaction and manifest
    # files, then holds no value, so no link note)
    keys: tuple[str, ...] | None = None
    # rows whose content or keyword text holds this text, exactly (case and all); of the keyword text, the part before
    # its line of bigrams (``records.KEYWORD_LINE``: the line holds words apart that the row holds glued)
    containing: str | None = None
    text_holds: str | None = None  # rows whose ``text`` column holds this text, exactly (folder files)
    # messages whose payload (JSON text) holds this text as JSON writes it in a string, non-ASCII escaped or not: a
    # model's own text kept there (an answer's beside its send_message reply); the caller checks the rows it gets
    payload_holds: str | None = None
    plumbing_results: bool | None = None  # False: no tool result of the agent loop's plumbing (``TOOL_PLUMBING``)
    plumbing: bool | None = None  # messages that are the agent loop's plumbing (True) or not (False; ``is_plumbing``)
    # messages whose plumbing is undecided (True: null, rows a tiermem before schema 3 wrote) or decided (False)
    undecided: bool | None = None
    may_be_plumbing: bool | None = None  # messages that may be plumbing (True: ``MAY_BE_PLUMBING``) or cannot be
    # rows whose keyword text lacks the bigrams it should have: (n, expressions): for one of these regular
    # expressions, the ``text`` column's first n characters match it and its line of bigrams (from
    # ``records.KEYWORD_LINE`` to the line's end) does not, or it has no such line (``regexp_like``, in the store)
    lines_lacking: tuple[int, tuple[str, ...]] | None = None
    # passages with a tag holding this text, exactly (tags are joined by newlines: one holding a newline may match
    # across two tags, so a caller that needs exactness checks the rows it gets)
    tag_holds: str | None = None
    project_holds: str | None = None  # messages and passages whose project holds this text, exactly
    fragments: tuple[int, ...] | None = None  # rows stored in these data fragments (their ``_rowaddr``)
    # messages and passages of any of these projects; None in it: rows of no project (shared by every project)
    projects: tuple[str | None, ...] | None = None

    def is_empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self))


def sql_str(value: str) -> str:
    """Quote ``value`` as a SQL string literal; it can never end the literal early."""
    if not isinstance(value, str):
        raise ValidationError(f"Expected text, got {type(value).__name__}.")
    if "\x00" in value:
        raise ValidationError("Text used as a filter contains a NUL byte; remove it.")
    return "'" + value.replace("'", "''") + "'"


def sql_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(sql_str(v) for v in values) + "]"


def _in(values: Iterable[str]) -> str:
    return "(" + ", ".join(sql_str(v) for v in values) + ")"


# The agent loop's own plumbing among messages, which no search returns (``domain.search.ranking.said``): the result of
# conversation_search (the loop's own searches: their hits would come back nested) or send_message (a fixed "Sent
# message successfully.": the reply is its call's answer row), and an answer calling conversation_search (stored with
# its text before ``agent.llm.recall_content`` kept that aside: found for the words it searched for). Decided when a
# row is written, from the row's own tool (``is_plumbing``), into the messages' small ``plumbing`` column: a search
# reads that, never the payload (a Letta import's holds the whole original message).
PLUMBING_RESULTS, SEARCHING = ("conversation_search", "send_message"), "conversation_search"


def is_plumbing(role: object, payload: object) -> bool:
    """Whether a message of ``role`` with ``payload`` (JSON text) is the agent loop's plumbing: a tool result whose own
    tool (the payload's ``name``) is one of ``PLUMBING_RESULTS``, or an answer with a call (one of the payload's
    ``tool_calls``) to ``SEARCHING``. Only the row's own tool counts: a name quoted anywhere else in the payload (a
    call's arguments, a Letta import's original message, text) does not; a payload that is no JSON object is none."""
    if role not in ("tool", "assistant") or not isinstance(payload, str) or not payload.lstrip().startswith("{"):
        return False
    try:
        value = json.loads(payload)
    except (ValueError, RecursionError):  # not JSON, or nested too deep to read: no tool of its own named
        return False
    if not isinstance(value, dict):
        return False
    if role == "tool":
        return value.get("name") in PLUMBING_RESULTS
    calls = value.get("tool_calls")
    return isinstance(calls, list) and any(isinstance(c, dict) and c.get("name") == SEARCHING for c in calls)


def with_plumbing(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as written: each with its ``plumbing`` column decided from its role and payload (``is_plumbing``)."""
    return [{**r, "plumbing": is_plumbing(r.get("role"), r.get("payload"))} for r in rows]


# Written in a JSON string, a character of a tool's name (ASCII) is itself or an escape ``\\u00XX``
ESCAPED_ASCII = "\\u00"


def _may_name(tools: Iterable[str]) -> str:
    """Whether a row's payload may name one of ``tools`` (false for a row without a payload): it holds the name as
    written, or an escaped ASCII character (a name written with one, ``"send\\u005fmessage"``, is the same name)."""
    held = [f"strpos(payload, {sql_str(t)}) > 0" for t in (*tools, ESCAPED_ASCII)]
    return f"coalesce({' OR '.join(held)}, false)"


# A superset of ``is_plumbing``'s rows, in the store: the only rows whose payloads the rows' plumbing is decided from
# where an older tiermem left it undecided (``schemas.settle_plumbing``); every other row is no plumbing
MAY_BE_PLUMBING = (
    f"((role = 'tool' AND {_may_name(PLUMBING_RESULTS)}) OR (role = 'assistant' AND {_may_name((SEARCHING,))}))"
)
TOOL_PLUMBING = "(role = 'tool' AND coalesce(plumbing, false))"  # a tool result of the loop's plumbing


_LINE = sql_str(KEYWORD_LINE)
# A regular expression matching a keyword text's line of bigrams to what follows on it (``KEYWORD_LINE`` holds no
# character a regular expression reads apart; the line holds no newline)
_LINE_TO_END = KEYWORD_LINE + "[^\\n]*"
# A row's keyword text without its line of bigrams (``records.KEYWORD_LINE``; strpos and substr count characters)
_OWN_TEXT = f"CASE WHEN strpos(text, {_LINE}) > 0 THEN substr(text, 1, strpos(text, {_LINE}) - 1) ELSE text END"


def compile_filter(where: Filter | None) -> str | None:
    """The LanceDB filter text of ``where`` (None: every row). An empty list of ids, roles or tags matches nothing."""
    if where is None:
        return None
    if not isinstance(where, Filter):
        raise TypeError(f"a store query takes a Filter, not {type(where).__name__}")
    clauses: list[str] = []
    if where.agent_id is not None:
        clauses.append(f"agent_id = {sql_str(where.agent_id)}")
    if where.agent_ids is not None:
        clauses.append(f"agent_id IN {_in(where.agent_ids)}" if where.agent_ids else "false")
    if where.folder_ids is not None:
        clauses.append(f"folder_id IN {_in(where.folder_ids)}" if where.folder_ids else "false")
    if where.group_ids is not None:
        clauses.append(f"group_id IN {_in(where.group_ids)}" if where.group_ids else "false")
    if where.not_agent_ids:
        clauses.append(f"agent_id NOT IN {_in(where.not_agent_ids)}")
    if where.conversation_id is not None:
        clauses.append(f"conversation_id = {sql_str(where.conversation_id)}")
    if where.not_conversation_id is not None:
        clauses.append(f"conversation_id != {sql_str(where.not_conversation_id)}")
    if where.roles is not None:
        clauses.append(f"role IN {_in(where.roles)}" if where.roles else "false")
    if where.tags_any is not None:
        clauses.append(f"array_has_any(tags, {sql_list(where.tags_any)})" if where.tags_any else "false")
    if where.tags_all:
        clauses.append(f"array_has_all(tags, {sql_list(where.tags_all)})")
    if where.start is not None:
        clauses.append(f"created_us >= {to_us(where.start)}")
    if where.end is not None:
        clauses.append(f"created_us <= {to_us(where.end)}")
    if where.ids is not None:
        clauses.append(f"id IN {_in(where.ids)}" if where.ids else "false")
    if where.id_or_group is not None:
        clauses.append(f"(id = {sql_str(where.id_or_group)} OR group_id = {sql_str(where.id_or_group)})")
    if where.seq_from is not None:
        clauses.append(f"seq >= {int(where.seq_from)}")
    if where.missing_vector is not None:
        clauses.append("vector IS NULL" if where.missing_vector else "vector IS NOT NULL")
    if where.projects is not None:
        named = [p for p in where.projects if p is not None]
        either = ([f"project IN {_in(named)}"] if named else []) + (
            ["project IS NULL"] if None in where.projects else []
        )
        clauses.append(f"({' OR '.join(either)})" if len(either) > 1 else either[0] if either else "false")
    if where.entries is not None:
        pairs = [f"(key = {sql_str(k)} AND value = {sql_str(v)})" for k, v in where.entries]
        clauses.append(f"({' OR '.join(pairs)})" if pairs else "false")
    if where.keys is not None:
        clauses.append(f"key IN {_in(where.keys)}" if where.keys else "false")
    if where.containing is not None:
        if not where.containing:
            raise ValidationError("The text to look for is empty; give the text itself.")
        text = sql_str(where.containing)
        clauses.append(f"(strpos(content, {text}) > 0 OR strpos({_OWN_TEXT}, {text}) > 0)")
    if where.payload_holds is not None:
        if not where.payload_holds:
            raise ValidationError("The text to look for is empty; give the text itself.")
        written = {json.dumps(where.payload_holds)[1:-1], json.dumps(where.payload_holds, ensure_ascii=False)[1:-1]}
        clauses.append("(" + " OR ".join(f"strpos(payload, {sql_str(w)}) > 0" for w in sorted(written)) + ")")
    if where.plumbing is not None:
        clauses.append("coalesce(plumbing, false)" if where.plumbing else "NOT coalesce(plumbing, false)")
    if where.undecided is not None:
        clauses.append("plumbing IS NULL" if where.undecided else "plumbing IS NOT NULL")
    if where.may_be_plumbing is not None:
        clauses.append(MAY_BE_PLUMBING if where.may_be_plumbing else f"NOT {MAY_BE_PLUMBING}")
    if where.plumbing_results is not None:
        clauses.append(TOOL_PLUMBING if where.plumbing_results else f"NOT {TOOL_PLUMBING}")
    if where.text_holds is not None:
        if not where.text_holds:
            raise ValidationError("The text to look for is empty; give the text itself.")
        clauses.append(f"strpos(text, {sql_str(where.text_holds)}) > 0")
    if where.lines_lacking is not None:
        head, expressions = where.lines_lacking
        # a text of at most n bytes is its own first n characters (substr copies every text: twice the time)
        first = f"CASE WHEN octet_length(text) > {int(head)} THEN substr(text, 1, {int(head)}) ELSE text END"
        lacking = [
            f"(regexp_like({first}, {sql_str(e)}) AND NOT regexp_like(text, {sql_str(_LINE_TO_END + e)}))"
            for e in expressions
        ]
        clauses.append(f"({' OR '.join(lacking)})" if lacking else "false")
    for column, held in (("tags", where.tag_holds), ("project", where.project_holds)):
        if held is not None:
            if not held:
                raise ValidationError("The text to look for is empty; give the text itself.")
            joined = "array_to_string(tags, chr(10))" if column == "tags" else column
            clauses.append(f"strpos({joined}, {sql_str(held)}) > 0")
    if where.fragments is not None:
        spans = [f"(_rowaddr >= {int(f) << 32} AND _rowaddr < {(int(f) + 1) << 32})" for f in where.fragments]
        clauses.append(f"({' OR '.join(spans)})" if spans else "false")
    return " AND ".join(clauses) or None
