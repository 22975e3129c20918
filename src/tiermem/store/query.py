"""Filter text for LanceDB ``where`` clauses: every value is quoted here, so it can never end a literal early."""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import ValidationError


def sql_str(value: str) -> str:
    """Quote ``value`` as a SQL string literal; it can never end the literal early."""
    if not isinstance(value, str):
        raise ValidationError(f"Expected text, got {type(value).__name__}.")
    if "\x00" in value:
        raise ValidationError("Text used as a filter contains a NUL byte; remove it.")
    return "'" + value.replace("'", "''") + "'"


def sql_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(sql_str(v) for v in values) + "]"

