"""Typed queries: a ``Filter`` names rows by value, the store alone turns it into LanceDB filter text, quoting
every value, so hostile ids, tags and agent names select exactly their own rows (real tables)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from tiermem.base.errors import ValidationError
from tiermem.base.records import to_us
from tiermem.store import Filter, Store

HOSTILE = ["a' OR '1'='1", "x'); DELETE FROM passages; --", "it's", "]", "\\'", "%", 'a"b']


def _row(pid: str, agent: str, tags: list[str], when: datetime, vector: bool = True) -> dict[str, object]:
    return {
        "id": pid,
        "agent_id": agent,
        "group_id": pid,
        "chunk": 0,
        "content": pid,
        "tags": tags,
        "text": pid,
        "created_us": to_us(when),
        "vector": [0.5] * 4 if vector else None,
    }


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    s = Store(
        str(tmp_path_factory.mktemp("query") / "db"), embedding_model="hashing-4", embedding_dim=4, optimize_every=0
    )
    day = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [
        _row(f"p{i}", name, [name, "common"], day.replace(day=i + 1), vector=i % 2 == 0)
        for i, name in enumerate(HOSTILE)
    ]
    s.rows.add_rows("passages", [*rows, _row("plain", "plain", ["common"], day.replace(day=20))])
    return s


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_values_select_exactly_their_own_rows(store: Store, name: str) -> None:
    n = HOSTILE.index(name)
    assert [r["id"] for r in store.rows.select("passages", Filter(agent_id=name), limit=10)] == [f"p{n}"]
    assert store.rows.count("passages", Filter(tags_any=(name,))) == 1
    assert store.rows.count("passages", Filter(tags_all=(name, "common"))) == 1
    assert store.rows.count("passages", Filter(ids=(f"p{n}", name))) == 1
    assert store.rows.count("passages", Filter(id_or_group=name)) == 0
    assert store.rows.count("passages", Filter(not_agent_ids=(name,))) == len(HOSTILE)


def test_fields_combine_and_empty_lists_match_nothing(store: Store) -> None:
    total = len(HOSTILE) + 1
    assert store.rows.count("passages") == store.rows.count("passages", Filter()) == total
    assert store.rows.count("passages", Filter(tags_any=("common",))) == total
    assert store.rows.count("passages", Filter(tags_any=())) == store.rows.count("passages", Filter(ids=())) == 0
    assert store.rows.count("passages", Filter(missing_vector=True)) == len(HOSTILE) // 2
    assert store.rows.count("passages", Filter(missing_vector=False)) == total - len(HOSTILE) // 2
    jan = Filter(start=datetime(2026, 1, 2, tzinfo=UTC), end=datetime(2026, 1, 3, tzinfo=UTC))
    assert [r["id"] for r in store.rows.select("passages", jan, limit=10)] == ["p1", "p2"]
    assert store.rows.count("passages", Filter(tags_any=("common",), missing_vector=True, start=jan.start)) == 3


def test_a_query_is_a_filter_and_deleting_needs_one(store: Store) -> None:
    with pytest.raises(TypeError, match="takes a Filter"):
        store.rows.count("passages", "agent_id = 'plain'")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="would delete every row"):
        store.rows.delete("passages", Filter())
    with pytest.raises(ValidationError, match="NUL"):
        store.rows.count("passages", Filter(agent_id="a\x00b"))
    assert store.rows.count("passages") == len(HOSTILE) + 1  # nothing was deleted


def test_delete_by_hostile_id_removes_only_that_row(tmp_path: Path) -> None:
    s = Store(str(tmp_path / "db"), embedding_model="hashing-4", embedding_dim=4, optimize_every=0)
    day = datetime(2026, 1, 1, tzinfo=UTC)
    s.rows.add_rows("passages", [_row("keep", "a", [], day), _row("x' OR '1'='1", "a", [], day)])
    assert s.rows.delete("passages", Filter(agent_id="a", id_or_group="x' OR '1'='1")) == 1
    assert [r["id"] for r in s.rows.select("passages", None, limit=10)] == ["keep"]
