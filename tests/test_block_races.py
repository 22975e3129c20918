"""Two writers on one memory at once: block labels stay one per agent, and an edit that cannot be re-applied over
another writer's is refused rather than re-applied (docs/reliability.md, "Several writers").

Every test runs two real store handles on one memory (two ``open_memory`` of one data directory; on object storage
two ``ObjectCore`` on one moto S3 prefix, as two replicas have) or two real ``tiermem serve`` processes. Where the
code has a seam, the interleaving is forced there (``before_next_commit``: the other writer's edit lands between
this one's read and its commit); creations race from a barrier, a bounded number of rounds.
"""

from __future__ import annotations

import sqlite3
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tiermem.base.config import BlockSpec, load_settings
from tiermem.base.errors import ConflictError, EditError, LabelTakenError, NotFoundError, TiermemError
from tiermem.base.records import Block
from tiermem.domain import blocks as b
from tiermem.domain.factory import open_memory
from tiermem.domain.memory import Memory

from .conftest import PYTHON, ROOT, text_of
from .test_maintenance import doctor_report
from .test_object_core import core_at, memory_at, prefix_uri
from .test_object_storage import s3_endpoint  # noqa: F401 (the module-scoped moto server fixture)
from .test_transports import server_env, stdio_params

ROUNDS = 12  # creations raced from a barrier: without the label checked in the write's own step, 1-2 rounds suffice


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


def raced(a: Callable[[], Block], b_: Callable[[], Block]) -> list[Block | TiermemError]:
    """Run both at once (released together from a barrier); what each returned or raised."""
    barrier = threading.Barrier(2)
    out: list[Block | TiermemError] = [TiermemError("not run"), TiermemError("not run")]

    def run(n: int, fn: Callable[[], Block]) -> None:
        barrier.wait()
        try:
            out[n] = fn()
        except TiermemError as exc:
            out[n] = exc

    threads = [threading.Thread(target=run, args=(n, fn)) for n, fn in enumerate((a, b_))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def before_next_commit(m: Memory, other_edit: Callable[[], object], monkeypatch: pytest.MonkeyPatch) -> None:
    """Force the interleaving: ``m``'s next block commit (its compare-and-set) runs only once ``other_edit`` (the
    other handle's) has committed, so ``m`` loses the race after reading the block, and re-reads."""
    core = m.core
    real = core.commit_edit

    def commit(*args: Any) -> tuple[str, ...] | None:
        monkeypatch.setattr(core, "commit_edit", real)  # once
        other_edit()
        return real(*args)

    monkeypatch.setattr(core, "commit_edit", commit)


def labels(m: Memory, agent: str) -> list[str]:
    return [blk.label for blk in m.blocks(agent)]


def test_two_writers_creating_one_label_make_one_block(two: tuple[Memory, Memory, str]) -> None:
    one, other, agent = two
    for i in range(ROUNDS):
        label = f"notes{i}"
        got = raced(
            lambda: one.create_block(agent, BlockSpec(label=label, value="one's notes")),
            lambda: other.create_block(agent, BlockSpec(label=label, value="other's notes")),
        )
        made = [g for g in got if isinstance(g, Block)]
        refused = [g for g in got if isinstance(g, LabelTakenError)]
        assert len(made) == 1 and len(refused) == 1, got
        assert f"A block labelled {label!r} already exists" in str(refused[0])
        assert labels(one, agent).count(label) == labels(other, agent).count(label) == 1
        assert one.block(agent, label).value == made[0].value


def test_a_rename_into_a_label_created_meanwhile_is_refused(
    two: tuple[Memory, Memory, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    one, other, agent = two
    one.create_block(agent, BlockSpec(label="draft", value="one's draft"))
    before_next_commit(
        one, lambda: other.create_block(agent, BlockSpec(label="plan", value="other's plan")), monkeypatch
    )
    with pytest.raises(LabelTakenError, match="A block labelled 'plan' already exists"):
        one.update_block(agent, "draft", new_label="plan", actor="agent")
    assert labels(one, agent).count("plan") == 1 and "draft" in labels(one, agent)
    assert one.block(agent, "plan").value == "other's plan" and one.block(agent, "draft").version == 1


def test_two_renames_of_one_block_at_once_one_wins_the_other_is_told(
    two: tuple[Memory, Memory, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    one, other, agent = two
    one.create_block(agent, BlockSpec(label="x", value="base"))
    before_next_commit(one, lambda: other.update_block(agent, "x", new_label="yb", actor="agent"), monkeypatch)
    with pytest.raises(ConflictError, match="'x' was renamed to 'yb' by another writer meanwhile; nothing was written"):
        one.update_block(agent, "x", new_label="ya", actor="agent")
    assert "yb" in labels(one, agent) and not {"x", "ya"} & set(labels(one, agent))
    assert [v.label for v in one.history(agent, "yb")] == ["yb", "x"]


def test_a_rethink_over_another_writers_edit_is_refused_an_append_is_reapplied(
    two: tuple[Memory, Memory, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    one, other, agent = two
    one.edit(agent, "human", b.Rethink("name: Alice\npet: cat"))
    before_next_commit(one, lambda: other.edit(agent, "human", b.StrReplace("pet: cat", "pet: dog")), monkeypatch)
    with pytest.raises(ConflictError, match=r"another writer while this edit was replacing its whole value"):
        one.edit(agent, "human", b.Rethink("name: Alice\npet: cat\njob: chef"))
    assert one.block(agent, "human").value == "name: Alice\npet: dog"  # the other writer's edit is kept

    # an append (like a replace or an insert) is computed again on the new value: both edits are kept
    before_next_commit(one, lambda: other.edit(agent, "human", b.Append("from other")), monkeypatch)
    one.edit(agent, "human", b.Append("from one"))
    assert one.block(agent, "human").value == "name: Alice\npet: dog\nfrom other\nfrom one"

    # a description set over another writer's is refused too; a rename over a value edit goes ahead
    before_next_commit(one, lambda: other.update_block(agent, "human", description="theirs"), monkeypatch)
    with pytest.raises(ConflictError, match="description of block 'human' was changed by another writer"):
        one.update_block(agent, "human", description="mine", actor="agent")
    before_next_commit(one, lambda: other.edit(agent, "human", b.Append("more")), monkeypatch)
    assert one.update_block(agent, "human", new_label="user", actor="agent").value.endswith("from one\nmore")


def test_a_rethink_from_a_version_the_model_saw_is_refused_over_any_later_edit(
    two: tuple[Memory, Memory, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``seen``: the version the model wrote its rethink from (its number and commit time). An edit committed before
    the rethink's read, or between its read and its commit (in the compare-and-set itself), is not dropped: the
    rethink is refused with Letta's words and the way out; at the version seen, it goes through."""
    one, other, agent = two
    shown = one.edit(agent, "human", b.Rethink("name: Alice"))
    other.edit(agent, "human", b.Append("pet: cat"))  # before the rethink reads the block
    with pytest.raises(ConflictError, match=r"^No rewrite was performed: memory block with label `human` changed "):
        one.edit(agent, "human", b.Rethink("name: Alicia"), seen={shown.id: (shown.version, shown.updated_at)})
    shown = one.block(agent, "human")
    before_next_commit(one, lambda: other.edit(agent, "human", b.Append("job: chef")), monkeypatch)
    with pytest.raises(ConflictError, match=r"View the block again \(with whichever you have: memory_open with label "):
        one.edit(
            agent, "human", b.Rethink("name: Alicia\npet: cat"), seen={shown.id: (shown.version, shown.updated_at)}
        )
    assert one.block(agent, "human").value == "name: Alice\npet: cat\njob: chef"
    shown = one.block(agent, "human")
    done = one.edit(agent, "human", b.Rethink("name: Alicia"), seen={shown.id: (shown.version, shown.updated_at)})
    assert done.value == "name: Alicia" and done.version == shown.version + 1


def test_a_revert_over_another_writers_edit_is_refused(
    two: tuple[Memory, Memory, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer's edit lands between the revert's read of the block and its write: refused, that edit kept."""
    one, other, agent = two
    one.edit(agent, "human", b.Rethink("first"))
    one.edit(agent, "human", b.Rethink("second"))
    real = one.core.history_version

    def read_old(*args: Any) -> Any:  # the revert has read the block; it reads the old version now
        monkeypatch.setattr(one.core, "history_version", real)
        other.edit(agent, "human", b.Append("theirs"))
        return real(*args)

    monkeypatch.setattr(one.core, "history_version", read_old)
    version = one.block(agent, "human").version - 1
    with pytest.raises(ConflictError, match=r"another writer while this edit was replacing its whole value"):
        one.revert(agent, "human", version, actor="agent")
    assert one.block(agent, "human").value == "second\ntheirs"


def test_the_letta_memory_tool_losing_a_label_race_answers_as_letta_does(
    two: tuple[Memory, Memory, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Letta Code's ``memory`` tool checks the label first; another process taking it between that check and the
    write gets Letta's own refusal, not a second block."""
    from tiermem.server.letta_memory_tool import run_command

    one, other, agent = two
    core = one.core
    real = core.create_block

    def create_after_other(*args: Any) -> None:  # the other process creates the label between check and write
        monkeypatch.setattr(core, "create_block", real)
        other.create_block(agent, BlockSpec(label="notes", value="other's"))
        real(*args)

    monkeypatch.setattr(core, "create_block", create_after_other)
    create = {"command": "create", "reason": "r", "file_path": "notes.md", "description": "notes", "file_text": "mine"}
    with pytest.raises(EditError, match=r"^memory create: block already exists at notes.md$"):
        run_command(one, agent, create, None)
    assert labels(one, agent).count("notes") == 1 and one.block(agent, "notes").value == "other's"

    one.create_block(agent, BlockSpec(label="draft", value="d"))
    before_next_commit(one, lambda: other.create_block(agent, BlockSpec(label="plan", value="p")), monkeypatch)
    rename = {"command": "rename", "reason": "r", "old_path": "draft.md", "new_path": "plan.md"}
    with pytest.raises(EditError, match=r"^memory rename: destination already exists at plan.md$"):
        run_command(one, agent, rename, None)
    assert labels(one, agent).count("plan") == 1 and "draft" in labels(one, agent)


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
        with pytest.raises(NotFoundError, match="it was deleted .*so nothing was (read or )?written.*agents create"):
            edit()
    with pytest.raises(NotFoundError, match="it was deleted .*so nothing was read or written"):
        one.block(work, "human")  # a read is told it read nothing too


def test_doctor_names_two_blocks_of_one_label_and_the_command_that_fixes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    m = open_memory(load_settings(data_dir=data, embedding_model="hashing"), start_embedder=False)
    agent = m.ensure_agent("default").id
    twin = m.blocks(m.create_agent("other").id)[0]
    # what two creations at once left before the label was checked in the same step as the write: the core's own
    # attach, unchecked, gives the agent a second block labelled 'human'
    m.core.attach(agent, twin.id)
    assert labels(m, agent).count(twin.label) == 2
    m.core.close()
    report = doctor_report(data, capsys)["block labels"]
    assert not report["ok"] and f"2 blocks labelled {twin.label!r} (agent default)" in report["detail"], report
    assert f"`tiermem blocks set {twin.label} --label NEW --agent default`" in report["fix"], report
    fixed = subprocess.run(
        [PYTHON, "-m", "tiermem", "--data-dir", str(data), "blocks", "set", twin.label, "--label", "me"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=server_env(tmp_path),
        timeout=300,
        check=False,
    )
    assert fixed.returncode == 0, fixed.stderr
    assert doctor_report(data, capsys)["block labels"]["ok"]


def test_doctor_counts_labels_per_agent_not_per_agent_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two agents of one name (a store from before names were checked) each with its own blocks: no label twice;
    a label twice in one of them is named with that agent's id, and the fix says to settle the names first."""
    data = tmp_path / "data"
    m = open_memory(load_settings(data_dir=data, embedding_model="hashing"), start_embedder=False)
    default = m.ensure_agent("default").id
    work, copy = m.create_agent("work").id, m.create_agent("copy").id
    m.core.close()
    with sqlite3.connect(data / "core.sqlite3") as conn:  # behind the core's back: it refuses a second name now
        conn.execute("UPDATE agents SET name = 'work' WHERE id = ?", (copy,))
    assert doctor_report(data, capsys)["block labels"]["ok"]
    m = open_memory(load_settings(data_dir=data, embedding_model="hashing"), start_embedder=False)
    m.core.attach(copy, m.block(default, "human").id)  # unchecked: copy has two blocks labelled 'human'
    assert labels(m, copy).count("human") == 2 and labels(m, work).count("human") == 1
    m.core.close()
    report = doctor_report(data, capsys)["block labels"]
    assert not report["ok"] and report["detail"].startswith(f"2 blocks labelled 'human' (agent work (id {copy})):")
    assert report["fix"].startswith("first give each agent named 'work' a name of its own"), report


@pytest.mark.anyio
async def test_two_servers_creating_and_renaming_at_once_tell_the_truth(tmp_path: Path) -> None:
    """End to end: two ``tiermem serve`` processes on one data directory, each creating one label with the ``memory``
    tool, then each renaming one block to a label of its own, at once: one succeeds, the other is told why not."""
    params = stdio_params(tmp_path)

    async def call(c: Client, **args: Any) -> tuple[bool, str]:
        r = await c.call_tool("memory", args)
        return r.is_error, text_of(r)

    async with Client(params, cache=None, read_timeout_seconds=120) as a, Client(params, cache=None) as b2:
        for i in range(6):
            got: dict[str, tuple[bool, str]] = {}

            async def run(name: str, c: Client, **args: Any) -> None:
                got[name] = await call(c, **args)

            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: run("a", a, command="create", path=f"/memories/n{i}", file_text="from a"))
                tg.start_soon(lambda: run("b", b2, command="create", path=f"/memories/n{i}", file_text="from b"))
            assert sorted(e for e, _ in got.values()) == [False, True], got
            assert any("already exists" in t for e, t in got.values() if e), got

            await call(a, command="create", path=f"/memories/x{i}", file_text="base")
            got.clear()
            async with anyio.create_task_group() as tg:
                tg.start_soon(
                    lambda: run("a", a, command="rename", old_path=f"/memories/x{i}", new_path=f"/memories/ya{i}")
                )
                tg.start_soon(
                    lambda: run("b", b2, command="rename", old_path=f"/memories/x{i}", new_path=f"/memories/yb{i}")
                )
            assert sorted(e for e, _ in got.values()) == [False, True], got  # never both told "Renamed"
        _, listing = await call(b2, command="view", path="/memories")
    paths = [line.split("\t")[1] for line in listing.splitlines() if "\t" in line]
    for i in range(6):
        assert paths.count(f"/memories/n{i}") == 1, listing
        assert (f"/memories/ya{i}" in paths) != (f"/memories/yb{i}" in paths), listing


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])  # a client with a session, and requests without one (2026-07-28)
async def test_a_rethink_over_an_edit_the_model_has_not_seen_is_refused_until_it_views_the_block(
    tmp_path: Path, mode: Any
) -> None:
    """Two ``tiermem serve`` processes on one data directory. The model of the first read ``human`` (version N);
    the second appends to it; the first model's rethink, written from version N, is refused (the append is not lost
    silently) with the text to view the block again; once it has, the rethink goes through. Its own edits since
    its last view (another call of the same client) count as seen."""
    params = stdio_params(tmp_path)
    async with (
        Client(params, cache=None, read_timeout_seconds=120, mode=mode) as a,
        Client(params, cache=None, mode=mode) as b2,
    ):
        assert not (await a.call_tool("memory_open", {"label": "human"})).is_error
        assert not (await b2.call_tool("core_memory_append", {"label": "human", "content": "Likes tea."})).is_error
        r = await a.call_tool("memory_rethink", {"label": "human", "new_memory": "Name: Ada"})
        assert r.is_error and "changed since you last viewed it" in text_of(r), text_of(r)
        assert "memory_open" in text_of(r)
        seen = await a.call_tool("memory_open", {"label": "human"})
        assert "Likes tea." in text_of(seen)  # kept
        r = await a.call_tool("memory_rethink", {"label": "human", "new_memory": "Name: Ada\nLikes tea."})
        assert not r.is_error and text_of(r) == "Name: Ada\nLikes tea."

        # the first client's own edits since its last view are its own: a rethink after them goes through
        assert not (await a.call_tool("core_memory_append", {"label": "human", "content": "Has a cat."})).is_error
        assert not (await a.call_tool("memory_insert", {"label": "human", "new_string": "Born 1815."})).is_error
        r = await a.call_tool("memory_rethink", {"label": "human", "new_memory": "Name: Ada (1815)"})
        assert not r.is_error, text_of(r)
        # a client that never viewed the block but in the instructions it connected with: its rethink replaces the
        # value as it stands; without a session, where the instructions count for no client, after one refusal
        r = await b2.call_tool("memory_rethink", {"label": "persona", "new_memory": "I am helpful."})
        if mode == "auto":
            assert r.is_error and "has not been shown to you whole by this server" in text_of(r), text_of(r)
            r = await b2.call_tool("memory_rethink", {"label": "persona", "new_memory": "I am helpful."})
        assert not r.is_error, text_of(r)


@pytest.mark.anyio
async def test_a_block_viewed_with_the_memory_tool_counts_as_seen(tmp_path: Path) -> None:
    """A file viewed with the ``memory`` tool (``view /memories/human``) shows the block whole: a rethink written
    from it goes through even when another process changed the block after the client's earlier view."""
    params = stdio_params(tmp_path, TIERMEM_TOOLS="default,memory_tool")
    async with (
        Client(params, cache=None, read_timeout_seconds=120) as a,
        Client(params, cache=None) as b2,
    ):
        assert not (await a.call_tool("memory_open", {"label": "human"})).is_error
        assert not (await b2.call_tool("memory_insert", {"label": "human", "new_string": "Likes tea."})).is_error
        shown = await a.call_tool("memory", {"command": "view", "path": "/memories/human"})
        assert "Likes tea." in text_of(shown), text_of(shown)
        r = await a.call_tool("memory_rethink", {"label": "human", "new_memory": "Name: Ada\nLikes tea."})
        assert not r.is_error, text_of(r)
