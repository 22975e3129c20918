"""Property-based tests of block edits: limits always hold, failures change nothing, revert is exact."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tiermem.base.errors import EditError, TiermemError
from tiermem.base.records import Block
from tiermem.domain import blocks as b
from tiermem.store import Store

from .conftest import memory_over, spec

text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
edits = st.one_of(
    st.builds(b.Append, text),
    st.builds(b.ReplaceAll, text, text),
    st.builds(b.StrReplace, text, text),
    st.builds(b.Insert, text, st.integers(-3, 12)),
    st.builds(b.Rethink, text),
    st.builds(
        b.Patch,
        st.lists(st.tuples(st.sampled_from(" -+"), text.filter(lambda t: "\n" not in t)), max_size=5).map(
            lambda ls: "\n".join(p + t for p, t in ls)
        ),
    ),
)


def block(value: str, limit: int) -> Block:
    return Block(
        id="block-x",
        label="notes",
        value=value,
        limit=limit,
        description="",
        read_only=False,
        version=1,
        updated_at=datetime(2026, 1, 1, tzinfo=UTC),
    )


@given(value=text, limit=st.integers(1, 80), edit=edits)
def test_pure_edit_respects_limit(value: str, limit: int, edit: b.Edit) -> None:
    if len(value) > limit:
        value = value[:limit]
    try:
        new = b.apply_edit(block(value, limit), edit)
    except EditError:
        return
    assert len(new) <= limit


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(edits, min_size=1, max_size=6))
def test_stored_edits_keep_invariants(tmp_path_factory, steps: list[b.Edit]) -> None:  # type: ignore[no-untyped-def]
    store = Store(
        str(tmp_path_factory.mktemp("prop") / "db"), embedding_model="hashing-384", embedding_dim=384, optimize_every=0
    )
    m = memory_over(store)
    agent = m.create_agent("a", blocks=[spec("notes", "line one\nline two", limit=60)]).id
    for edit in steps:
        before = m.block(agent, "notes")
        history_before = m.history(agent, "notes", 100)
        try:
            after = m.edit(agent, "notes", edit)
        except TiermemError:
            assert m.block(agent, "notes") == before  # a refused edit writes nothing
            assert m.history(agent, "notes", 100) == history_before
            continue
        assert len(after.value) <= 60
    history = m.history(agent, "notes", 100)
    assert [v.version for v in history] == list(range(len(history), 0, -1))
    for v in history:  # revert restores the exact earlier value, as a new version
        reverted = m.revert(agent, "notes", v.version)
        assert reverted.value == v.value
    assert m.history(agent, "notes", 1)[0].version == m.block(agent, "notes").version
