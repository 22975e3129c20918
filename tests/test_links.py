"""Links between memories: a turn's sitting neighbours (derived), links made on purpose (meta rows), a search that
returns each hit with its links inside the token budget, forgetting, the CLI, the tool, and a store of schema 1."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tiermem.base.config import Settings
from tiermem.base.errors import NotFoundError, ValidationError
from tiermem.base.records import Hit
from tiermem.cli.main import main
from tiermem.domain.forgetting import Target, forget
from tiermem.domain.links import OVERHEAD, expand
from tiermem.domain.memory import Memory
from tiermem.domain.tokens import count_tokens
from tiermem.store import Store

T0 = datetime(2024, 5, 8, 10, 0, tzinfo=UTC)
TRIP = [
    "Caroline: I am planning a trip for the summer.",
    "Melanie: Where are you going?",
    "Caroline: To the mountains near Lake Tahoe, with the kids.",
    "Melanie: Lovely, bring warm clothes.",
]


def log_trip(memory: Memory, agent: str) -> list[str]:
    """Two sittings of one conversation (a day apart): the trip, then an unrelated one."""
    items = [
        {"role": "user", "content": c, "timestamp": (T0 + timedelta(minutes=i)).isoformat(), "conversation_id": "c"}
        for i, c in enumerate(TRIP)
    ]
    items.append(
        {
            "role": "user",
            "content": "Caroline: My cat learnt a new trick.",
            "timestamp": (T0 + timedelta(days=1)).isoformat(),
            "conversation_id": "c",
        }
    )
    return [m.id for m in memory.archive.log_messages(agent, items)]


def test_sitting_links_are_the_turns_beside_a_hit(memory: Memory) -> None:
    agent = memory.ensure_agent("links").id
    ids = log_trip(memory, agent)
    found = memory.archive.neighbourhood(agent, ids[2])
    assert [(link.kind, h.id) for link, h in found.links] == [("sitting", ids[1]), ("sitting", ids[3])]
    last = memory.archive.neighbourhood(agent, ids[4])  # alone in its sitting: no neighbour across the day's gap
    assert last.links == []
    assert [h.id for _, h in memory.archive.neighbourhood(agent, ids[0], reach=2).links] == [ids[1], ids[2]]

    plain = memory.archive.conversation_search(agent, "Lake Tahoe mountains", limit=1, links=False)
    linked = memory.archive.conversation_search(agent, "Lake Tahoe mountains", limit=1, links=True)
    assert [h.id for h in plain.hits] == [ids[2]]  # searches follow no link unless asked (measured: docs/links.md)
    assert memory.archive.conversation_search(agent, "Lake Tahoe mountains", limit=1).hits == plain.hits
    assert [h.id for h in linked.hits] == [ids[2], ids[1], ids[3]]
    assert [h.linked_to for h in linked.hits] == [None, ids[2], ids[2]]


def test_linked_turns_already_in_the_pool_are_not_read_again(memory: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = memory.ensure_agent("links").id
    ids = log_trip(memory, agent)
    plain = memory.archive.conversation_search(agent, "Lake Tahoe mountains", limit=1, links=True)
    read: list[tuple[str, ...]] = []
    archive_type = type(memory.archive)
    original = archive_type._linked_rows

    def counted(self: object, table: str, where: Any) -> Any:
        read.append(tuple(where.ids or ()))
        return original(self, table, where)  # type: ignore[arg-type]

    monkeypatch.setattr(archive_type, "_linked_rows", counted)
    linked = memory.archive.conversation_search(agent, "Lake Tahoe mountains", limit=1, links=True)
    assert [h.id for h in linked.hits] == [h.id for h in plain.hits] == [ids[2], ids[1], ids[3]]
    assert [(h.content, h.role, h.created_at) for h in linked.hits] == [
        (h.content, h.role, h.created_at) for h in plain.hits
    ]
    assert not any(ids[1] in wanted or ids[3] in wanted for wanted in read)  # every turn of the sitting was pooled


def test_links_made_on_purpose_and_forgetting_removes_them(memory: Memory) -> None:
    agent = memory.ensure_agent("links").id
    ids = log_trip(memory, agent)
    fact = memory.archival_insert(agent, "Caroline's summer trip is to Lake Tahoe.", None).stored[0]
    other = memory.archival_insert(agent, "Melanie paints sunsets.", None).stored[0]
    archive = memory.archive
    archive.links.add(agent, fact, ids[4], "unrelated on purpose")
    archive.links.add(agent, fact, other)
    shown = archive.neighbourhood(agent, fact)
    assert [(link.kind, h.id) for link, h in shown.links] == [("manual", ids[4]), ("manual", other)]
    assert shown.as_dict()["links"][0]["note"] == "unrelated on purpose"
    assert [h.id for _, h in archive.neighbourhood(agent, ids[4]).links] == [fact]  # a link has no direction

    hits = archive.search(agent, "Lake Tahoe trip", top_k=1, links=True).hits
    assert [h.id for h in hits] == [fact, ids[4], other]
    with pytest.raises(ValidationError):
        archive.links.add(agent, fact, fact)
    assert archive.links.remove(other, fact) and not archive.links.remove(other, fact)

    forget(memory, Target("message", agent_id=agent, ref=ids[4]), now=True)  # forgetting either end drops the link
    assert archive.neighbourhood(agent, fact).links == []
    assert not any(k.startswith("link:") for k in archive.store.conn.meta())
    archive.links.add(agent, fact, other)
    memory.archival_delete(agent, other)  # a plain delete too
    assert not any(k.startswith("link:") for k in archive.store.conn.meta())
    with pytest.raises(NotFoundError):
        archive.neighbourhood(agent, other)


def _link_rows(memory: Memory) -> dict[str, str]:
    return {k: v for k, v in memory.archive.store.conn.meta().items() if k.startswith("link:")}


def test_a_link_made_while_its_memory_is_forgotten_goes_with_it(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process links a passage while it is being forgotten, its whole call landing after the forget read
    the links and before it deleted the rows (both of its checks see the passage): the forget reads the links again
    once the rows are gone, and removes that one too, note and all."""
    agent = memory.ensure_agent("links").id
    anchor = memory.archival_insert(agent, "The anchor fact.", None).stored[0]
    victim = memory.archival_insert(agent, "A passage being forgotten.", None).stored[0]
    purge = memory.archive.store.purge
    mark = purge.mark

    def link_then_mark(table: str, where: Any) -> Any:
        monkeypatch.setattr(purge, "mark", mark)  # once
        memory.link(agent, anchor, victim, "private note about it")  # the other process's whole call
        assert _link_rows(memory)
        return mark(table, where)

    monkeypatch.setattr(purge, "mark", link_then_mark)
    memory.archival_delete(agent, victim)
    assert _link_rows(memory) == {} and memory.archive.neighbourhood(agent, anchor).links == []
    assert "meta" in memory.archive.rows.purge_pending()  # its note leaves the files at the next upkeep


def test_a_link_to_a_memory_forgotten_after_its_check_is_removed_and_refused(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other order: the forget runs whole between the link's check of its ends and its write. The link checks
    its ends again after writing, finds the passage gone, removes the link (its note too) and fails, naming it."""
    agent = memory.ensure_agent("links").id
    anchor = memory.archival_insert(agent, "The anchor fact.", None).stored[0]
    victim = memory.archival_insert(agent, "A passage being forgotten.", None).stored[0]
    links = memory.archive.links
    add = links.add

    def forget_then_add(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(links, "add", add)  # once
        memory.archival_delete(agent, victim)  # the other process's whole call
        return add(*args, **kwargs)

    monkeypatch.setattr(links, "add", forget_then_add)
    with pytest.raises(NotFoundError, match=victim):
        memory.link(agent, anchor, victim, "private note about it")
    assert _link_rows(memory) == {} and memory.archive.neighbourhood(agent, anchor).links == []
    assert "meta" in memory.archive.rows.purge_pending()


def test_doctor_reports_a_link_to_a_deleted_memory_and_optimize_removes_it_with_its_note(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    """A link whose memory is gone (a forget cut short between its steps, or an older tiermem's race) is reported
    by ids (never its note) and removed by `tiermem optimize`, its note gone from every file of the data directory."""
    from tiermem.domain.factory import open_memory
    from tiermem.domain.maintenance import doctor, optimize
    from tiermem.store import Filter

    memory = open_memory(settings, start_embedder=False)
    agent = memory.ensure_agent("links").id
    anchor = memory.archival_insert(agent, "The anchor fact.", None).stored[0]
    victim = memory.archival_insert(agent, "A passage deleted behind the links' back.", None).stored[0]
    other = memory.archival_insert(agent, "Another fact.", None).stored[0]
    memory.link(agent, anchor, victim, "zanzibar-note-7731")
    memory.link(agent, anchor, other, "kept")
    memory.archive.store.rows.delete("passages", Filter(ids=(victim,)))  # the row alone, as a crash would leave it
    root = settings.resolved_data_dir()
    assert [p for p in root.rglob("*") if p.is_file() and b"zanzibar-note-7731" in p.read_bytes()]
    assert doctor(settings) == 1
    out = capsys.readouterr().out
    assert "[FAIL] links: 1 link(s)" in out and victim in out and "zanzibar" not in out
    assert "links: 1 link(s) to deleted memories removed" in optimize(memory)
    assert [json.loads(v)["note"] for v in _link_rows(memory).values()] == ["kept"]
    assert not [p for p in root.rglob("*") if p.is_file() and b"zanzibar-note-7731" in p.read_bytes()]
    capsys.readouterr()
    doctor(settings)
    assert "[ok ] links: every link" in capsys.readouterr().out


def test_a_search_with_links_follows_only_to_memories_its_filter_admits(memory: Memory) -> None:
    """A linked memory of the other table must pass the search's project and date filter too (it was read by id
    and agent alone: a search of project beta showed a linked passage of project alpha)."""
    agent = memory.ensure_agent("scoped").id
    turns = [
        ("project alpha: the launch codename is BLUEBIRD", "2024-05-01T10:00:00", "/repo/alpha"),
        ("project beta: we talk about the launch schedule", "2024-05-01T10:00:30", "/repo/beta"),
        ("alpha follow-up: BLUEBIRD ships friday", "2024-05-01T10:01:00", "/repo/alpha"),
    ]
    logged = memory.archive.log_messages(
        agent, [{"role": "user", "content": c, "timestamp": t, "project": p} for c, t, p in turns]
    )
    beta_turn, alpha_turn = logged[1].id, logged[2].id
    alpha = memory.archival_insert(agent, "alpha passage: BLUEBIRD budget is 2M", [], project="/repo/alpha").stored[0]
    beta = memory.archival_insert(agent, "beta passage: launch schedule is public", [], project="/repo/beta").stored[0]
    beta_too = memory.archival_insert(agent, "beta passage: the schedule slipped", [], project="/repo/beta").stored[0]
    memory.link(agent, beta_turn, alpha, "cross-project")
    memory.link(agent, beta_turn, beta_too, "same project")
    memory.link(agent, beta, alpha_turn, "cross-project")
    archive = memory.archive

    recall = archive.conversation_search(agent, "launch schedule", projects=["/repo/beta"], limit=5, links=True)
    assert [h.id for h in recall.hits] == [beta_turn, beta_too]  # the beta passage follows; the alpha one does not
    found = archive.search(agent, "launch schedule", projects=["/repo/beta"], top_k=1, links=True)
    assert [h.id for h in found.hits] == [beta]
    dated = archive.conversation_search(
        agent, "launch", start_date="2024-05-01T10:00:20", end_date="2024-05-01T10:00:40", limit=5, links=True
    )
    assert [h.id for h in dated.hits] == [beta_turn]  # the passages were stored today: outside the dates


def hit(i: int, text: str) -> Hit:
    return Hit(id=f"h{i}", content=text, created_at=T0, score=1.0 / (i + 1), vector_rank=i, fts_rank=None)


@pytest.mark.parametrize("budget", [1, 30, 60, 100, 250, 1000])
def test_a_search_with_links_never_exceeds_the_budget(budget: int) -> None:
    hits = [hit(i, f"hit number {i} " + "word " * (i % 7)) for i in range(12)]
    linked = {h.id: [hit(100 + 3 * i + k, "a linked memory " + "x " * k) for k in range(3)] for i, h in enumerate(hits)}
    out, truncated = expand(hits, linked, budget)
    used = sum(count_tokens(h.content) + OVERHEAD for h in out)
    assert used <= budget or len(out) == 1  # one whole first hit beats none (as fit_to_budget)
    assert out[0].id == "h0" and len({h.id for h in out}) == len(out)
    for h in out:  # every linked memory follows the hit it completes
        if h.linked_to is not None:
            assert [x.id for x in out].index(h.linked_to) < [x.id for x in out].index(h.id)
    assert truncated == (len([h for h in out if h.linked_to is None]) < len(hits))


def test_the_cli_shows_and_makes_links(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    from tiermem.domain.factory import open_memory

    memory = open_memory(settings)
    agent = memory.named_agent(settings.agent).id
    ids = log_trip(memory, agent)
    fact = memory.archival_insert(agent, "Caroline's summer trip is to Lake Tahoe.", None).stored[0]
    memory.settle(30)
    base = ["--data-dir", str(settings.resolved_data_dir()), "--embedding-model", "hashing"]
    assert main(["links", "add", ids[2], fact, "--note", "the trip", *base]) == 0
    assert main(["links", ids[2], *base]) == 0
    out = capsys.readouterr().out
    assert ids[2] in out and "├── sitting" in out and "└── manual 'the trip'" in out and fact in out
    assert main(["links", "show", fact, "--json", *base]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["memory"]["kind"] == "archival" and [x["id"] for x in shown["links"]] == [ids[2]]
    assert main(["links", "remove", ids[2], fact, *base]) == 0
    assert main(["links", "show", fact, *base]) == 0
    assert "(no links)" in capsys.readouterr().out
    assert main(["links", "add", ids[2], *base]) != 0  # one id: refused, saying what it takes
    assert "two memory ids" in capsys.readouterr().err


def test_a_store_of_schema_1_gets_links(tmp_path: Path) -> None:
    """Links need no migration: a store written by an older tiermem (schema 1) opens, migrates as it does, and its
    old rows link like new ones."""
    from tiermem.domain.archive import Archive
    from tiermem.embedding.embedders import make_embedder

    from .test_privacy_hooks import _v1_store

    uri = str(tmp_path / "old" / "lance")
    _v1_store(uri)
    archive = Archive(Store(uri, embedding_model="hashing-384", embedding_dim=384), make_embedder("hashing", Path()))
    archive.links.add("agent-1", "passage-old", "message-old", "kettles")
    assert [(link.kind, h.id) for link, h in archive.neighbourhood("agent-1", "passage-old").links] == [
        ("manual", "message-old")
    ]
    assert [h.id for h in archive.search("agent-1", "kettles fact", top_k=1, links=True).hits] == [
        "passage-old",
        "message-old",
    ]


@pytest.mark.anyio
async def test_the_tool_shows_and_makes_links(settings: Settings) -> None:
    """``memory_links`` (group ``links``, published here by ``tools = ["all"]``) over a real MCP client."""
    from mcp import Client

    from .conftest import serve_in_process, text_of

    turns = [
        {"role": "user", "content": c, "timestamp": (T0 + timedelta(minutes=i)).isoformat()} for i, c in enumerate(TRIP)
    ]
    async with Client(serve_in_process(settings), cache=None) as c:
        ids = json.loads(text_of(await c.call_tool("conversation_log", {"messages": turns})))["ids"]
        fact = json.loads(text_of(await c.call_tool("archival_memory_insert", {"content": "Tahoe in July."})))["ids"][0]
        added = await c.call_tool("memory_links", {"action": "add", "id": ids[1], "other": fact, "note": "when"})
        assert not added.is_error, text_of(added)
        shown = json.loads(text_of(await c.call_tool("memory_links", {"action": "show", "id": ids[1]})))
        assert shown["memory"]["id"] == ids[1]
        assert [(x["link"], x["id"]) for x in shown["links"]] == [
            ("sitting", ids[0]),
            ("sitting", ids[2]),
            ("manual", fact),
        ]
        refused = await c.call_tool("memory_links", {"action": "add", "id": ids[1]})
        assert refused.is_error and "other" in text_of(refused)
        missing = await c.call_tool("memory_links", {"action": "show", "id": "message-nope"})
        assert missing.is_error and "search for it first (conversation_search" in text_of(missing)
        assert "tiermem" not in text_of(missing)  # advice a model can follow: its tools, not the command line


@pytest.mark.anyio
async def test_the_tools_show_keeps_to_the_search_budget_and_pages_through_every_link(settings: Settings) -> None:
    """A memory linked on purpose to many long passages: ``memory_links show`` gives the links that fit the search's
    token budget beside the memory (as the search tools cut their results), says how many it left out and the offset
    that shows the next; paging with that offset gives every link once; an offset past the last is refused."""
    from mcp import Client

    from .conftest import serve_in_process, text_of

    budget = 800
    small = settings.model_copy(update={"search_token_budget": budget})
    async with Client(serve_in_process(small), cache=None) as c:

        async def insert(text: str) -> str:
            found = json.loads(text_of(await c.call_tool("archival_memory_insert", {"content": text})))
            return str(found["ids"][0])

        hub = await insert("The hub passage: the spokes below belong with it.")
        spokes = [await insert(f"Spoke {n}: " + "lorem ipsum dolor sit amet " * 12) for n in range(20)]
        for n, spoke in enumerate(spokes):
            linked = await c.call_tool("memory_links", {"action": "add", "id": hub, "other": spoke, "note": f"n{n}"})
            assert not linked.is_error, text_of(linked)
        seen: list[str] = []
        offset = 0
        while True:
            paged = {"offset": offset} if offset else {}  # the first call as a model makes it: no offset
            page = json.loads(text_of(await c.call_tool("memory_links", {"action": "show", "id": hub, **paged})))
            shown = page["links"]
            used = (
                count_tokens(page["memory"]["content"])
                + OVERHEAD
                + sum(count_tokens(x["content"]) + count_tokens(x["note"]) + OVERHEAD for x in shown)
            )
            assert shown and used <= budget, used
            assert (page["total"], page["offset"]) == (20, offset)
            seen += [x["id"] for x in shown]
            if page["next_offset"] is None:
                assert "more not shown" not in page["note"]
                break
            left = 20 - page["next_offset"]
            assert f"{left} more not shown: memory_links show with offset={page['next_offset']}" in page["note"]
            assert f"tiermem links {hub}" in page["note"]
            offset = page["next_offset"]
        assert seen == spokes and offset > 0  # every link once, in order, over more than one page
        past = await c.call_tool("memory_links", {"action": "show", "id": hub, "offset": 20})
        assert past.is_error and "has 20 link(s)" in text_of(past)


@pytest.mark.anyio
async def test_a_turn_found_by_conversation_search_can_be_linked(settings: Settings) -> None:
    """With memory_links published, recall hits carry their ids (the tool says its ids come from the searches);
    without it they keep Letta's shape, no id (tests/test_archive.py checks the default list's keys)."""
    from mcp import Client

    from .conftest import serve_in_process, text_of

    turns = [
        {"role": "user", "content": c, "timestamp": (T0 + timedelta(minutes=i)).isoformat()} for i, c in enumerate(TRIP)
    ]
    async with Client(serve_in_process(settings), cache=None) as c:
        ids = json.loads(text_of(await c.call_tool("conversation_log", {"messages": turns})))["ids"]
        found = json.loads(text_of(await c.call_tool("conversation_search", {"query": "Lake Tahoe", "limit": 1})))
        hit = found["results"][0]
        assert hit["id"] == ids[2] and list(hit)[:2] == ["id", "timestamp"]
        shown = json.loads(text_of(await c.call_tool("memory_links", {"action": "show", "id": hit["id"]})))
        assert [x["id"] for x in shown["links"]] == [ids[1], ids[3]]
    plain = settings.model_copy(update={"tools": ["default"]})
    async with Client(serve_in_process(plain), cache=None) as c:
        found = json.loads(text_of(await c.call_tool("conversation_search", {"query": "Lake Tahoe", "limit": 1})))
        assert "id" not in found["results"][0]


def test_a_link_note_with_a_credential_is_refused_and_nothing_is_linked(memory: Memory) -> None:
    """A note is written by a person or a model like any other memory text: a credential in it is refused."""
    from tiermem.base.errors import SecretError

    agent = memory.ensure_agent("noted").id
    a = memory.archival_insert(agent, "The deploy runs on Fridays.", None).stored[0]
    b = memory.archival_insert(agent, "Fridays are quiet in the office.", None).stored[0]
    with pytest.raises(SecretError):
        memory.link(agent, a, b, "key " + "AKIA" + "Q3EGRIBFXPN7WMT4")
    assert memory.archive.neighbourhood(agent, a).links == []
    memory.link(agent, a, b, "same day")
    assert [h.id for _, h in memory.archive.neighbourhood(agent, a).links] == [b]


def test_a_link_note_must_be_short_plain_text_and_a_refused_one_links_nothing(memory: Memory) -> None:
    """A note had no size limit and no control-character check: a 3 MB note with a NUL was stored and drawn."""
    from tiermem.domain.links import NOTE_MAX_CHARS
    from tiermem.interop.links_io import read_links

    agent = memory.ensure_agent("noted").id
    a = memory.archival_insert(agent, "The deploy runs on Fridays.", None).stored[0]
    b = memory.archival_insert(agent, "Fridays are quiet in the office.", None).stored[0]
    for note, said in [
        ("word " * 600_000, f"at most {NOTE_MAX_CHARS}"),
        ("x" * (NOTE_MAX_CHARS + 1), f"{NOTE_MAX_CHARS + 1} characters"),
        ("same day\x00", "NUL"),
        ("same \x1b[31mday", "control character '\\x1b'"),
        (42, "must be text"),
    ]:
        with pytest.raises(ValidationError, match=re.escape(said)):
            memory.link(agent, a, b, note)  # type: ignore[arg-type]
        with pytest.raises(ValidationError):
            memory.archive.links.add(agent, a, b, note)  # type: ignore[arg-type]
    assert memory.archive.neighbourhood(agent, a).links == []
    memory.link(agent, a, b, "same day\n\tboth quiet " + "x" * (NOTE_MAX_CHARS - 30))
    assert [h.id for _, h in memory.archive.neighbourhood(agent, a).links] == [b]
    with pytest.raises(ValidationError, match="note of link 0 in the file"):  # an import checks before writing
        read_links([{"a": "m1", "b": "m2", "note": "x" * (NOTE_MAX_CHARS + 1)}], "the file", {"m1", "m2"})


def _contents(memory: Memory, agent: str) -> dict[str, str]:
    """Each of the agent's turns and passages: id -> its text."""
    rows = [*memory.archive.rows.messages_of(agent), *memory.archive.rows.passages_of(agent)]
    return {r.id: r.content for r in rows}


def _linked_texts(memory: Memory, agent: str) -> set[tuple[str, str, str]]:
    """The agent's manual links as (text, text, note), the two texts sorted: comparable across stores."""
    texts = _contents(memory, agent)
    out = set()
    for x in memory.archive.links.among(texts):
        first, second = sorted((texts[x.source], texts[x.target]))
        out.add((first, second, x.note))
    return out


@pytest.mark.parametrize("fmt", ["af", "jsonl"])
def test_manual_links_survive_export_and_import(settings: Settings, tmp_path: Path, fmt: str) -> None:
    """A link made on purpose goes out with an export (the agent file's ``tiermem`` extension, a backup's ``link``
    records) and comes back between the imported counterparts, with its note (a credential in it redacted, as in any
    imported text); a link of an agent left out is not exported; an export without links (older) still imports."""
    from tiermem.base.config import load_settings
    from tiermem.domain.factory import open_memory
    from tiermem.interop.commands import run_export, run_import

    memory = open_memory(settings)
    agent = memory.ensure_agent("trip").id
    ids = log_trip(memory, agent)
    fact = memory.archival_insert(agent, "Caroline's summer trip is to Lake Tahoe.", None).stored[0]
    memory.link(agent, ids[2], fact, "the trip she planned")
    memory.link(agent, ids[0], ids[4])
    memory.archive.links.add(agent, ids[1], fact, "key " + "AKIA" + "Q3EGRIBFXPN7WMT4")  # bypassing Memory.link
    left_out = memory.ensure_agent("other").id
    a, b = (memory.archival_insert(left_out, t, None).stored[0] for t in ("Melanie paints.", "Sunsets mostly."))
    memory.link(left_out, a, b, "not exported with trip")
    want = _linked_texts(memory, agent)
    assert len(want) == 3

    out = tmp_path / f"export.{fmt}"
    names = ["trip"] if fmt == "af" else None
    report = run_export(memory, agent=names, fmt=fmt, output=str(out), vectors=False)
    assert (report["links"] if fmt == "af" else report["rows"]["links"]) == (3 if fmt == "af" else 4)
    if fmt == "af":
        assert "not exported with trip" not in out.read_text()

    def imported(name: str, path: Path) -> tuple[Memory, str, dict[str, object]]:
        other = open_memory(load_settings(data_dir=tmp_path / name, embedding_model="hashing"))
        result = run_import(other, path, fmt="auto", agent="default", rename=None, replace=False)
        return other, other.get_agent("trip").id, result

    other, new_agent, result = imported("new", out)
    got = _linked_texts(other, new_agent)
    assert {(x, y) for x, y, _ in got} == {(x, y) for x, y, _ in want}  # between the imported counterparts
    assert sorted(n for *_, n in got) == ["", "key [redacted: AWS access key]", "the trip she planned"]
    if fmt == "jsonl":  # ids kept: the very same links, once; restoring again makes none twice
        assert result["inserted"]["links"] == 4
        assert (
            run_import(other, out, fmt="jsonl", agent="default", rename=None, replace=False)["inserted"]["links"] == 0
        )
        assert _linked_texts(other, other.get_agent("other").id) == _linked_texts(memory, left_out)
    else:
        assert result["links"] == 3

    # an export written before links travelled: no links, everything else imports as before
    if fmt == "af":
        data = json.loads(out.read_text())
        del data["tiermem"]["links"]
        for passages in data["tiermem"]["passages"].values():
            for p in passages:
                del p["id"]
        old_text = json.dumps(data)
    else:
        lines = [json.loads(x) for x in out.read_text().splitlines()]
        lines[0]["format"] = 2
        old_text = "\n".join(json.dumps(x) for x in lines if x["type"] not in ("link", "tiermem-backup-end"))
    old = tmp_path / f"old.{fmt}"
    old.write_text(old_text)
    older, old_agent, _ = imported("old", old)
    assert sorted(_contents(older, old_agent).values()) == sorted(_contents(memory, agent).values())
    assert _linked_texts(older, old_agent) == set()
    if fmt == "af":  # a link naming a memory the file does not hold is refused before anything is written
        data["tiermem"]["links"] = {"agent-0": [{"a": "message-1", "b": "passage-9", "note": ""}]}
        old.write_text(json.dumps(data))
        with pytest.raises(ValidationError, match="passage-9"):
            run_import(older, old, fmt="af", agent="default", rename="again", replace=False)
        assert [x.name for x in older.list_agents()] == ["trip"]  # no "again"
