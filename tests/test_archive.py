"""Recall and archival memory through a real MCP client, with the real offline MiniLM model."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from mcp import Client

from tiermem.base.config import Settings, load_settings
from tiermem.cli.main import open_memory
from tiermem.domain.archive import Archive
from tiermem.domain.memory import Memory
from tiermem.embedding.embedders import BackgroundEmbedder, HashingEmbedder
from tiermem.server.app import build_server
from tiermem.server.runtime import MemoryHandle
from tiermem.store import Filter

from .conftest import text_of

pytestmark = pytest.mark.anyio


@pytest.fixture
def real(tmp_path: Path) -> Settings:
    return load_settings(data_dir=tmp_path / "data", embedding_model="default", tools=["all"])


def server_for(settings: Settings, memory: Memory | None = None):  # type: ignore[no-untyped-def]
    def factory():  # type: ignore[no-untyped-def]
        m = memory or open_memory(settings)
        if memory is None:
            m.archive.embedder.wait(120)  # these tests are about hybrid search, not the loading window
        return m, m.ensure_agent(settings.agent).id

    return build_server(MemoryHandle(factory), settings)


async def call(c: Client, name: str, **args):  # type: ignore[no-untyped-def]
    r = await c.call_tool(name, args)
    return r, (json.loads(text_of(r)) if not r.is_error else text_of(r))


async def test_insert_is_findable_at_once_by_keyword_and_meaning(real: Settings) -> None:
    memory = open_memory(real)
    memory.archive.embedder.wait(60)
    async with Client(server_for(real, memory), cache=None) as c:
        for i in range(20):
            await call(c, "archival_memory_insert", content=f"Filler fact number {i} about gardening and tomatoes")
        memory.archive.store.indexes.optimize()  # builds the full-text index over what exists now
        assert memory.archive.store.indexes.index_health()["passages"]["fts_indexed"] == 20
        _, ins = await call(
            c, "archival_memory_insert", content="The quarterly budget review with finance is on Thursday at 10am"
        )
        new_id = ins["ids"][0]
        assert memory.archive.store.indexes.index_health()["passages"]["fts_unindexed"] == 1  # not in the index yet...
        _, kw = await call(c, "archival_memory_search", query="quarterly budget review", top_k=3)
        assert kw["results"][0]["id"] == new_id and kw["results"][0]["ranking"]["fts_rank"] == 1  # ...found anyway
        _, sem = await call(
            c, "archival_memory_search", query="when do I meet the accounting team about money?", top_k=3
        )
        assert sem["results"][0]["id"] == new_id and sem["results"][0]["ranking"]["vector_rank"] == 1
        assert sem["search_mode"] == "hybrid" and "notes" not in sem
        # relevance is comparable across searches: the same passage, asked for plainly, scores high; the best hit of
        # a query this memory knows nothing about scores low, though it is ranked first of its own search
        off = (await call(c, "archival_memory_search", query="who won the 1998 football world cup final?", top_k=3))[1]
        assert 0.0 <= off["results"][0]["relevance"] < 0.1 < kw["results"][0]["relevance"] <= 1.0
        assert all(
            0.0 <= r["relevance"] <= 1.0 and set(r["ranking"]) == {"score", "vector_rank", "fts_rank"}
            for r in (*kw["results"], *sem["results"], *off["results"])
        )


async def test_tag_filters_apply_before_ranking(real: Settings) -> None:
    async with Client(server_for(real), cache=None) as c:
        for i in range(15):
            await call(
                c, "archival_memory_insert", content=f"Recipe {i}: slow cooked stew with beans", tags=["food", "winter"]
            )
            await call(c, "archival_memory_insert", content=f"Recipe {i}: cold noodle salad", tags=["food"])
        await call(c, "archival_memory_insert", content="Stew safety: simmer beans for ten minutes", tags=["safety"])
        _, any_ = await call(c, "archival_memory_search", query="stew with beans", tags=["winter", "safety"], top_k=10)
        assert len(any_["results"]) == 10 and all(set(r["tags"]) & {"winter", "safety"} for r in any_["results"])
        _, all_ = await call(
            c, "archival_memory_search", query="noodles", tags=["food", "winter"], tag_match_mode="all", top_k=10
        )
        assert len(all_["results"]) == 10 and all({"food", "winter"} <= set(r["tags"]) for r in all_["results"])
        _, only = await call(c, "archival_memory_search", query="noodles", tags=["safety"], top_k=5)
        assert [r["tags"] for r in only["results"]] == [["safety"]]  # top_k is a cap, the filter decides
        r, err = await call(c, "archival_memory_search", query="x", tag_match_mode="some")
        assert r.is_error


async def test_hostile_filter_strings_are_plain_values(real: Settings) -> None:
    async with Client(server_for(real), cache=None) as c:
        await call(c, "archival_memory_insert", content="normal passage", tags=["plain"])
        hostile = ["x' OR 1=1 --", "a\\' OR ''='", "') OR true; --", "%", "*"]
        _, ins = await call(c, "archival_memory_insert", content="tagged passage", tags=hostile)
        for tag in hostile:
            _, res = await call(c, "archival_memory_search", query="passage", tags=[tag], top_k=5)
            assert [r["id"] for r in res["results"]] == ins["ids"], tag
        _, none = await call(c, "archival_memory_search", query="passage", tags=["x"], top_k=5)
        assert none["results"] == []
        for bad in (["a\x00b"], ["\n"], [""], ["x" * 65]):
            r, err = await call(c, "archival_memory_search", query="passage", tags=bad)
            assert r.is_error and "Invalid tag" in err
        r, err = await call(c, "archival_memory_delete", id="x' OR 1=1 --")
        assert r.is_error and "Invalid passage id" in err
        _, listed = await call(c, "archival_memory_list")
        assert listed["total"] == 2  # nothing was deleted or changed
        r, err = await call(c, "conversation_search", query="x", roles=["user' OR 1=1 --"])
        assert r.is_error


async def test_date_filters_and_errors(real: Settings) -> None:
    async with Client(server_for(real), cache=None) as c:
        msgs = [
            {"role": "user", "content": "I adopted a cat named Miso", "timestamp": "2024-03-01T09:00:00Z"},
            {"role": "assistant", "content": "Miso is a lovely name for a cat", "timestamp": "2024-03-01T23:30:00Z"},
            {"role": "user", "content": "Miso knocked over my cat-themed plant", "timestamp": "2024-03-02T00:00:00Z"},
            {"role": "tool", "content": "cat facts lookup result", "timestamp": "2024-02-28T12:00:00Z"},
        ]
        _, logged = await call(c, "conversation_log", messages=msgs)
        assert logged["stored"] == 4
        _, day = await call(
            c, "conversation_search", query="cat", start_date="2024-03-01", end_date="2024-03-01", limit=10
        )
        assert sorted(r["content"] for r in day["results"]) == sorted([msgs[0]["content"], msgs[1]["content"]])
        _, users = await call(c, "conversation_search", query="cat", roles=["user"], limit=10)
        assert {r["role"] for r in users["results"]} == {"user"} and len(users["results"]) == 2
        _, since = await call(c, "conversation_search", query="cat", start_date="2024-03-01T23:00", limit=10)
        assert len(since["results"]) == 2
        first = day["results"][0]
        # Letta's keys, and the id memory_links (published here by "all") takes
        assert set(first) == {"id", "timestamp", "time_ago", "role", "content", "relevance", "ranking"} and first[
            "time_ago"
        ].endswith("ago")
        r, err = await call(c, "conversation_search", query="cat", start_date="March 1st")
        assert (
            r.is_error
            and err == "Invalid start_date format: March 1st. Use ISO 8601 format (YYYY-MM-DD or YYYY-MM-DDTHH:MM)"
        )
        r, err = await call(c, "conversation_search", query="cat", start_date="2024-03-02", end_date="2024-03-01")
        assert r.is_error and "is after end_date" in err
        r, err = await call(c, "archival_memory_search", query="cat", end_datetime="2024-13-01")
        assert r.is_error and err.startswith("end_datetime 2024-13-01 is not a date: there is no month 13")
        for bad in (0, -1, 101, 10**9):
            r, err = await call(c, "conversation_search", query="cat", limit=bad)
            assert r.is_error and "limit must be a whole number from 1 to 100" in err
        r, err = await call(c, "conversation_log", messages=[{"role": "robot", "content": "x"}])
        assert r.is_error
        _, after = await call(c, "conversation_search", query="cat", limit=10)
        assert len(after["results"]) == 3  # failed calls stored nothing
        # Tool results only when asked for (Letta's conversation_search leaves them out): one more, by name.
        assert "tool" not in {r["role"] for r in after["results"]}
        _, tools = await call(c, "conversation_search", query="cat", roles=["tool", "user"], limit=10)
        assert sorted(r["role"] for r in tools["results"]) == ["tool", "user", "user"]


async def test_delete_list_and_chunking(real: Settings) -> None:
    words = " ".join(f"word{i}" for i in range(1500)) + ". The secret launch code is PELICAN."
    async with Client(server_for(real), cache=None) as c:
        _, long = await call(c, "archival_memory_insert", content=words, tags=["long"])
        assert long["chunks"] > 1
        _, hit = await call(c, "archival_memory_search", query="secret launch code PELICAN", top_k=1)
        assert hit["results"][0]["id"] in long["ids"] and "PELICAN" in hit["results"][0]["content"]
        _, ins = await call(c, "archival_memory_insert", content="Temporary fact")
        _, page1 = await call(c, "archival_memory_list", limit=2)
        assert page1["total"] == long["chunks"] + 1 and page1["next_offset"] == 2 and len(page1["passages"]) == 2
        _, last = await call(c, "archival_memory_list", offset=page1["total"] - 1, limit=2)
        assert last["next_offset"] is None and len(last["passages"]) == 1
        _, deleted = await call(c, "archival_memory_delete", id=long["ids"][0])
        assert deleted["deleted"] == long["chunks"]  # the first chunk's id removes the whole insert
        _, rest = await call(c, "archival_memory_list")
        assert [p["id"] for p in rest["passages"]] == ins["ids"]
        r, err = await call(c, "archival_memory_delete", id=ins["ids"][0] + "x")
        assert r.is_error and "No archival passage with id" in err
        summary = json.loads((await c.read_resource("memory://archival")).contents[0].text)
        assert summary == {"passages": 1, "messages": 0, "tags": []}


def test_time_ago_keeps_lettas_past_and_says_a_future_time_as_one() -> None:
    from datetime import UTC, datetime, timedelta

    from tiermem.domain.archive import time_ago

    at = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
    assert [time_ago(at - d, at) for d in (timedelta(0), timedelta(seconds=42), timedelta(minutes=5))] == [
        "0s ago",
        "42s ago",
        "5m ago",
    ]
    assert (
        time_ago(at - timedelta(hours=3, minutes=59), at) == "3h ago"
        and time_ago(at - timedelta(days=9), at) == "9d ago"
    )
    # a turn logged ahead of the clock (a host's skewed clock, a typo'd year) was "0s ago"
    assert time_ago(at + timedelta(minutes=5), at) == "in 5m" and time_ago(at + timedelta(seconds=7), at) == "in 7s"
    assert time_ago(datetime(9999, 12, 31, 9, 59, 59, tzinfo=UTC), at).startswith("in ")


def test_chunks_fit_the_model_window(real: Settings) -> None:
    memory = open_memory(real)
    emb = memory.archive.embedder
    text = " ".join(f"Sentence {i} talks about topic {i % 7} in some detail." for i in range(400))
    chunks = emb.chunk(text)
    assert len(chunks) > 5 and all(emb.count_tokens(ch) <= 256 for ch in chunks)
    assert set(text.split()) == {w for ch in chunks for w in ch.split()}  # no word lost
    for a, b in zip(chunks, chunks[1:]):  # each chunk starts inside the previous one's tail (overlap)
        head = b.split()[:3]
        assert " ".join(head) in a and a.split()[-1] in b
    assert emb.chunk("short text") == ["short text"]


async def test_fts_only_until_model_ready_then_found_by_meaning_at_once(tmp_path: Path) -> None:
    """A model not ready within the wait: the search says it is keyword-only; once the model is ready, rows
    stored meanwhile are embedded and found by meaning in the very next search (no waiting for a backfill)."""
    settings = load_settings(data_dir=tmp_path / "d", embedding_model="hashing", tools=["all"])
    gate = threading.Event()
    hashing = HashingEmbedder()

    def slow_factory() -> HashingEmbedder:
        gate.wait(30)
        return hashing

    embedder = BackgroundEmbedder(slow_factory, name=hashing.name, dim=hashing.dim, max_tokens=hashing.max_tokens)
    opened = open_memory(settings, start_embedder=False)
    memory = Memory(Archive(opened.archive.store, embedder, wait_seconds=0), core=opened.core)
    embedder.start()
    async with Client(server_for(settings, memory), cache=None) as c:
        _, ins = await call(c, "archival_memory_insert", content="Penguins live in the southern hemisphere")
        assert "still loading" in ins["note"] and "vector" in ins["note"]
        assert memory.archive.store.rows.unembedded_marks("passages")  # announced to every process's searches
        _, res = await call(c, "archival_memory_search", query="penguins")
        assert res["search_mode"] == "fts" and res["notes"][0].startswith("Keyword-only results (search_mode fts)")
        assert "did not finish loading within 0 s" in res["notes"][0]
        assert res["results"][0]["id"] == ins["ids"][0] and res["results"][0]["ranking"]["vector_rank"] is None
        gate.set()
        assert embedder.wait(30)
        _, res = await call(c, "archival_memory_search", query="penguins")
        assert res["search_mode"] == "hybrid" and res["results"][0]["ranking"]["vector_rank"] == 1
        assert "notes" not in res
        assert (
            memory.archive.vectors.missing()["passages"] == 0
            and memory.archive.store.rows.unembedded_marks("passages") == {}
        )
        _, ins = await call(c, "archival_memory_insert", content="Emperor penguins huddle for warmth")
        assert "note" not in ins


def test_a_backfill_waiting_for_its_model_is_not_said_to_be_embedding(tmp_path: Path) -> None:
    """The backfill of rows stored before the model loaded takes the store's embedding lock (what `tiermem doctor`
    reads as "another tiermem process is embedding them now") only once its model is ready: a server whose model
    never loads does not keep saying so. Once it loads, the rows are embedded."""
    settings = load_settings(data_dir=tmp_path / "d", embedding_model="hashing", tools=["all"])
    gate = threading.Event()
    hashing = HashingEmbedder()

    def slow_factory() -> HashingEmbedder:
        gate.wait(60)
        return hashing

    embedder = BackgroundEmbedder(slow_factory, name=hashing.name, dim=hashing.dim, max_tokens=hashing.max_tokens)
    opened = open_memory(settings, start_embedder=False)
    archive = Archive(opened.archive.store, embedder, wait_seconds=0)
    agent = opened.ensure_agent("default").id
    archive.insert(agent, "Penguins live in the southern hemisphere")  # stored unembedded: the backfill starts
    backfill = archive.vectors._backfill_thread
    assert backfill is not None and backfill.is_alive()
    conn = archive.store.conn
    probes = [conn.embedding_elsewhere() for _ in range(50)]  # while it waits for the model (the gate holds it)
    assert not any(probes) and backfill.is_alive()
    gate.set()
    backfill.join(60)
    assert archive.vectors.missing()["passages"] == 0 and not conn.embedding_elsewhere()


async def test_model_that_cannot_load_gives_keyword_results_that_say_why(tmp_path: Path) -> None:
    """The model's directory cannot be created (a file is in the way): writes still store, searches fall
    back to keywords and say why; a later process with a working model embeds what was stored."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "models").write_text("not a directory")
    broken = load_settings(data_dir=data, embedding_model="default", tools=["all"])
    memory = open_memory(broken)
    async with Client(server_for(broken, memory), cache=None) as c:
        _, ins = await call(c, "archival_memory_insert", content="The spare key is under the blue flowerpot")
        assert "Stored without a vector: the embedding model is unavailable" in ins["note"]
        _, res = await call(c, "archival_memory_search", query="spare key")
        assert res["search_mode"] == "fts" and res["results"][0]["id"] == ins["ids"][0]
        note = res["notes"][0]
        assert note.startswith("Keyword-only results (search_mode fts): the embedding model is unavailable")
        assert "Cannot prepare the model directory" in note and "tiermem doctor" in note
    (data / "models").unlink()
    fixed = open_memory(load_settings(data_dir=data, embedding_model="default", tools=["all"]))
    agent = fixed.ensure_agent("default").id
    hits = fixed.archive.search(agent, "where can I find something to open the door?", top_k=1)
    assert hits.mode == "hybrid" and hits.hits[0].vector_rank == 1 and not hits.notes
    assert fixed.archive.vectors.missing()["passages"] == 0


async def test_token_budget_truncates_with_note(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path / "d", embedding_model="hashing", tools=["all"], search_token_budget=60)
    async with Client(server_for(settings), cache=None) as c:
        for i in range(5):
            await call(c, "archival_memory_insert", content=f"Budget item {i}: " + "long words " * 20)
        _, res = await call(c, "archival_memory_search", query="budget item", top_k=5)
        assert 1 <= len(res["results"]) < 5
        # the best results are kept: a lower limit shows the same ones, so the note says what reaches the others
        (note,) = [n for n in res["notes"] if "token budget" in n]
        assert note == (
            "Results were cut to fit the 60-token budget; to reach the others, narrow the query or add filters, or "
            "raise the search_token_budget setting."
        )


async def test_core_memory_metadata_counts(real: Settings) -> None:
    async with Client(server_for(real), cache=None) as c:
        await call(
            c,
            "conversation_log",
            messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
        )
        await call(c, "archival_memory_insert", content="fact", tags=["t1", "t2"])
        core = (await c.read_resource("memory://core")).contents[0].text
        assert "- 2 previous messages between you and the user are stored in recall memory" in core
        assert "- 1 total memories you created are stored in archival memory" in core
        assert "- Archival memory tags: t1, t2" in core


def test_vector_index_built_when_large_and_new_rows_still_found(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path / "d", embedding_model="hashing")
    memory = open_memory(settings)
    memory.archive.store.indexes.vector_index_min_rows = 300
    agent = memory.ensure_agent("default").id
    memory.archive.embedder.wait(10)
    memory.archive.insert_many(
        agent, [(f"Note {i} about subject {i % 13} and place {i % 7}", ["bulk"]) for i in range(320)]
    )
    memory.archive.store.indexes.optimize()
    health = memory.archive.store.indexes.index_health()["passages"]
    assert health["vector_indexed"] == 320 and health["vector_unindexed"] == 0
    new = memory.archive.insert(agent, "Zanzibar spice market visit on a rainy afternoon")
    hits = memory.archive.search(agent, "Zanzibar spice market visit", top_k=3).hits
    assert hits[0].id == new[0] and hits[0].vector_rank == 1 and hits[0].fts_rank == 1


def test_short_lived_processes_leave_no_row_without_a_vector(tmp_path: Path) -> None:
    """A process that stores a row without its model exits cleanly; the next short command that has the model
    (`tiermem search`) embeds the row. A process whose model is still loading when it exits finishes its
    backfill first (a backfill thread writing during interpreter shutdown must not abort the process)."""
    import subprocess

    from .conftest import PYTHON, ROOT
    from .test_transports import server_env

    def one_shot(text: str, wait_at_exit: float) -> subprocess.CompletedProcess[str]:
        code = (
            "from pathlib import Path\nfrom tiermem.base.config import load_settings\nfrom tiermem.domain.factory import open_memory\n"
            f"m = open_memory(load_settings(data_dir=Path({str(tmp_path / 'data')!r}), embedding_model='default', "
            "embedding_wait_seconds=0))\n"
            f"m.archive.insert(m.ensure_agent('default').id, {text!r})\n"
            f"m.archive.vectors.wait_seconds = {wait_at_exit}\n"
        )
        return subprocess.run(
            [PYTHON, "-c", code], capture_output=True, text=True, cwd=ROOT, env=server_env(tmp_path), timeout=300
        )

    settings = load_settings(data_dir=tmp_path / "data", embedding_model="default")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "models").write_text("in the way")  # this process's model cannot load
    first = one_shot("The spare key is under the blue flowerpot", 0)
    assert first.returncode == 0 and "Fatal" not in first.stderr, first.stderr[-2000:]
    (tmp_path / "data" / "models").unlink()
    store = open_memory(settings, start_embedder=False).archive.store
    assert store.rows.count("passages", Filter(missing_vector=True)) == 1 and store.rows.unembedded_marks("passages")
    search = subprocess.run(
        [
            PYTHON,
            "-m",
            "tiermem",
            "search",
            "where can I find something to open the door?",
            "--archival",
            "--json",
            "--data-dir",
            str(tmp_path / "data"),
            "--embedding-model",
            "default",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        # a loaded machine can take longer than the default 10 s to load the model
        env={**server_env(tmp_path), "TIERMEM_EMBEDDING_WAIT_SECONDS": "120"},
    )
    assert search.returncode == 0, search.stderr[-2000:]
    assert "embedded 1 row(s) stored without vectors" in search.stderr and "note:" not in search.stderr
    assert "flowerpot" in json.loads(search.stdout)[0]["content"]
    assert (
        store.rows.count("passages", Filter(missing_vector=True)) == 0 and store.rows.unembedded_marks("passages") == {}
    )
    second = one_shot("The wifi password is on the fridge", 300)
    assert second.returncode == 0 and "Fatal" not in second.stderr, second.stderr[-2000:]
    assert store.rows.count("passages", Filter(missing_vector=True)) == 0  # embedded before the process ended


def test_a_query_with_double_quotes_is_searched_by_its_words(settings: Settings) -> None:
    """The full-text index keeps no positions, so a quoted phrase once made the keyword leg fail (after indexing)."""
    memory = open_memory(settings)
    agent = memory.ensure_agent("default").id
    memory.archive.insert(agent, 'She said "hello world" at the door.')
    memory.archive.store.indexes.optimize()  # the rows are in the index now
    for query in ['"hello world"', 'said "hello', '""']:
        found = memory.archive.search(agent, query, top_k=3)
        assert [h.content for h in found.hits][:1] == ['She said "hello world" at the door.'], query
