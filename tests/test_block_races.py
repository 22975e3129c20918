"""Two writers on one memory at once (docs/reliability.md, "Several writers").

Every test runs two real store handles on one memory (two ``open_memory`` of one data directory; on object storage
two ``ObjectCore`` on one moto S3 prefix, as two replicas have) or two real ``tiermem serve`` processes. Where the
code has a seam, the interleaving is forced there (``before_next_commit``: the other writer's edit lands between
this one's read and its commit); creations race from a barrier, a bounded number of rounds.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tiermem.base.config import load_settings
from tiermem.base.errors import NotFoundError
from tiermem.domain import blocks as b
from tiermem.domain.factory import open_memory
from tiermem.domain.memory import Memory

from .test_object_core import core_at, memory_at, prefix_uri
from .test_object_storage import s3_endpoint  # noqa: F401 (the module-scoped moto server fixture)


@pytest.fixture(params=["sqlite", "object"])
def two(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Memory, Memory, str]]:
    """Two handles on one memory and the id of its agent ``default``: SQLite (two ``open_memory`` of one data
    directory) or object storage (two cores on one S3 prefix)."""
    if request.param == "sqlite":
        settings = load_settings(data_dir=tmp_path / "data", embedding_model="hashing")
        one, other = (open_memory(settings, start_embedder=False) for _ in range(2))
    else:
        endpoint = request.getfixturevalue("s3_endpoint")
        uri = prefix_uri("labels")
        one, other = memory_at(tmp_path, core_at(uri, endpoint)), memory_at(tmp_path, core_at(uri, endpoint))
    agent = one.ensure_agent("default").id
    yield one, other, agent
    one.core.close()
    other.core.close()


def test_an_edit_for_an_agent_deleted_by_another_process_says_it_was_deleted(
    two: tuple[Memory, Memory, str],
) -> None:
    one, other, _ = two
    work = one.create_agent("work").id
    other.delete_agent(other.get_agent("work").id)
    for edit in (
        lambda: one.edit(work, "human", b.Append("after delete")),
        lambda: one.edit(work, "human", b.StrReplace("a", "b")),
        lambda: one.update_block(work, "human", description="d"),
    ):
        with pytest.raises(NotFoundError, match="it was deleted .*reconnects to get a fresh memory"):
            edit()
