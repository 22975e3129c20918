"""Forgetting that forgets: after ``tiermem forget ... --now`` no file of the data directory (and
no object under the store's prefix) holds a byte of the forgotten text; without ``--now`` it is gone from search at
once and from the files after the next upkeep (``tiermem optimize``)."""

from __future__ import annotations

import json
import logging
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tiermem.base.config import BlockSpec, Settings, load_settings
from tiermem.cli.main import main
from tiermem.domain.blocks import Rethink
from tiermem.domain.factory import open_memory
from tiermem.domain.forgetting import Target, forget, purge_pending
from tiermem.domain.maintenance import optimize
from tiermem.domain.memory import Memory
from tiermem.store import Filter

from .conftest import store_result, stored_result


def test_forget_text_does_not_overwrite_an_edit_made_after_it_read_the_block(
    local: tuple[Memory, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer's edit lands between the forget's read of a block and its edit: the forget's edit is based on
    the version it read, so it is refused as a conflict, read again and made again; the other edit stays."""
    memory, _root = local
    agent = memory.ensure_agent("default")
    memory.edit(agent.id, "human", Rethink("Name: Ana\nCode: quartz-4471-x", check_line_numbers=False), actor="human")
    read_blocks = memory.blocks

    edits = [Rethink("Name: Ana\nCode: quartz-4471-x\nLikes tea", check_line_numbers=False)]

    def blocks_then_another_edit(agent_id: str) -> Any:
        stale = read_blocks(agent_id)
        if edits:  # once: the other writer's edit, after the forget read the blocks
            memory.edit(agent_id, "human", edits.pop())
        return stale

    monkeypatch.setattr(memory, "blocks", blocks_then_another_edit)
    done = forget(memory, Target("text", agent.id, "quartz-4471-x"))
    assert memory.block(agent.id, "human").value == "Name: Ana\nCode: \nLikes tea" and done.edited == ["human"]

    # renamed meanwhile: edited out under its new label; taken out by the other writer first: not reported as edited
    memory.edit(agent.id, "human", Rethink("Code: quartz-4471-x", check_line_numbers=False), actor="human")
    edits.append(None)  # type: ignore[arg-type]

    def blocks_then_rename(agent_id: str) -> Any:
        stale = read_blocks(agent_id)
        if edits:
            edits.pop()
            memory.update_block(agent_id, "human", new_label="someone")
        return stale

    monkeypatch.setattr(memory, "blocks", blocks_then_rename)
    done = forget(memory, Target("text", agent.id, "quartz-4471-x"))
    assert memory.block(agent.id, "someone").value == "Code: " and done.edited == ["someone"]


SECRET = "zebra-quartz-4471"
TOKEN = "zebraquartz4471"  # one word: what a full-text index would keep as a token
NEEDLES = (SECRET.encode(), TOKEN.encode())


def scan_dir(root: Path) -> list[str]:
    """Every file under ``root`` (recursively) holding a byte of the secret."""
    return sorted(
        str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and any(n in p.read_bytes() for n in NEEDLES)
    )


def fill(memory: Memory) -> dict[str, str]:
    """A memory whose passage, message and block history hold the secret among other rows; everything compacted
    and indexed first, so the secret is in the data files and the full-text indexes as a long-lived store's is."""
    agent = memory.ensure_agent("default")
    for i in range(20):
        memory.archival_insert(agent.id, f"filler passage {i} about green tea", None)
    passage = memory.archival_insert(agent.id, f"the vault code is {SECRET} ({TOKEN})", ["vault"]).stored[0]
    logged = memory.conversation_log(
        agent.id,
        [
            {"role": "user", "content": f"remember {SECRET} for the vault"},
            {"role": "assistant", "content": "noted, the vault"},
            {"role": "user", "content": "thanks for the tea"},
        ],
    ).stored
    human = memory.block(agent.id, "human")
    memory.edit(agent.id, "human", Rethink(human.value + f"\nVault: {SECRET}", check_line_numbers=False), actor="human")
    memory.edit(agent.id, "human", Rethink(human.value + "\nLikes green tea", check_line_numbers=False), actor="human")
    optimize(memory)
    return {
        "agent": agent.id,
        "passage": passage,
        "message": logged[0].id,
        "block": human.id,
        "secret_version": str(human.version + 1),
    }


@pytest.fixture
def local(settings: Settings) -> Iterator[tuple[Memory, Path]]:
    memory = open_memory(settings, start_embedder=False)
    yield memory, settings.resolved_data_dir()
    memory.core.close()


def test_forget_now_by_cli_leaves_no_byte_in_the_data_directory(local: tuple[Memory, Path]) -> None:
    memory, root = local
    ids = fill(memory)
    assert scan_dir(root), "the secret must be on disk before forgetting it"
    memory.core.close()
    common = ["--data-dir", str(root), "--embedding-model", "hashing", "--yes", "--now"]
    assert main(["forget", "passage", ids["passage"], *common]) == 0
    assert main(["forget", "message", ids["message"], *common]) == 0
    assert main(["forget", "block", "human", "--version", ids["secret_version"], *common]) == 0
    assert scan_dir(root) == []
    after = open_memory(load_settings(data_dir=root, embedding_model="hashing"), start_embedder=False)
    try:  # the rest is whole: 20 passages, two turns, the block's other versions
        messages, passages, _ = after.archive.counts(ids["agent"])
        assert (messages, passages) == (2, 20)
        versions = [v.version for v in after.core.history(ids["block"])]
        assert int(ids["secret_version"]) not in versions and len(versions) == int(ids["secret_version"])
        assert "Likes green tea" in after.block(ids["agent"], "human").value
        found = after.conversation_search(ids["agent"], "vault", roles=None, limit=5, start_date=None, end_date=None)
        assert SECRET not in json.dumps([h.content for h in found.hits])
        assert not purge_pending(after)
    finally:
        after.core.close()


def test_forgetting_an_agent_purges_the_core_once(local: tuple[Memory, Path]) -> None:
    """The agent's deletion leaves the purge to the forget, which purges the core's files once (a VACUUM rewrites
    the whole file: it ran twice)."""
    memory, _root = local
    agent = memory.create_agent("work").id
    memory.edit(agent, "human", Rethink("Name: Ada"))
    statements: list[str] = []
    memory.core._conn.set_trace_callback(statements.append)  # type: ignore[attr-defined]
    done = forget(memory, Target("agent", agent))
    assert done.agents == ["work"] and memory.core.find_agent("work") is None
    assert [s for s in statements if s.strip().upper() == "VACUUM"] == ["VACUUM"]


def test_without_now_gone_from_search_at_once_and_from_the_files_after_upkeep(local: tuple[Memory, Path]) -> None:
    memory, root = local
    ids = fill(memory)
    memory.archival_delete(ids["agent"], ids["passage"])  # what archival_memory_delete and the inspector do
    forget(memory, Target("message", ids["agent"], ids["message"]))
    forget(memory, Target("block", ids["agent"], "human", None))  # --history: every past value
    hits = memory.archival_search(
        ids["agent"], "vault code", tags=None, tag_match_mode="any", top_k=10, start_datetime=None, end_datetime=None
    ).hits
    assert all(SECRET not in h.content for h in hits)
    assert [v.version for v in memory.core.history(ids["block"])] == [memory.block(ids["agent"], "human").version]
    assert purge_pending(memory)
    held = scan_dir(root)
    assert held and all(p.startswith("db/") for p in held), held  # the core state is purged at once
    report = _doctor(root)  # says so, with the way to purge now (a normal state between upkeeps: no failure)
    assert report["healthy"]
    detail = report["purge"]["detail"]
    assert "still in the store's files (" in detail and "passages: 1 data fragment(s)" in detail
    assert "tiermem optimize" in detail
    optimize(memory)  # `tiermem optimize` (a server's background upkeep runs the same purge)
    assert scan_dir(root) == []
    assert not purge_pending(memory)
    after = _doctor(root)
    assert after["purge"]["detail"].startswith("no deleted or forgotten row") and after["healthy"], after


def _doctor(root: Path) -> dict[str, Any]:
    """``tiermem doctor --json`` on ``root``: its verdict, and each check by name."""
    out = _run_cli(["doctor", "--json", "--data-dir", str(root), "--embedding-model", "hashing"], status=None)
    report = json.loads(out)
    return {"healthy": report["healthy"], **{c["check"]: c for c in report["checks"]}}


def test_forget_text_everywhere_and_an_agent(local: tuple[Memory, Path], tmp_path: Path) -> None:
    memory, root = local
    ids = fill(memory)
    agent = ids["agent"]
    memory.edit(agent, "persona", Rethink(f"I keep {SECRET} safe.", check_line_numbers=False), actor="human")
    store_result(memory, agent, "archival_memory_insert", "k1", "0" * 64, json.dumps({"text": f"stored {SECRET}"}))
    other = memory.create_agent("other")
    memory.archival_insert(other.id, f"another copy: {SECRET}", None)
    memfs = tmp_path / "memfs"
    memfs.mkdir()
    (memfs / "persona.md").write_text(f"---\ndescription: x\n---\nI keep {SECRET} safe.\n")
    subprocess.run(["git", "init", "-q", str(memfs)], check=True)
    subprocess.run(["git", "-C", str(memfs), "-c", "user.name=t", "-c", "user.email=t@t", "add", "."], check=True)
    subprocess.run(
        ["git", "-C", str(memfs), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"], check=True
    )
    memory.core.close()
    out = _run_cli(
        [
            "forget",
            "--text",
            SECRET,
            "--data-dir",
            str(root),
            "--embedding-model",
            "hashing",
            "--yes",
            "--now",
            "--memfs",
            str(memfs),
            "--json",
        ]
    )
    report = json.loads(out)
    assert report["blocks_edited"] == ["persona"] and report["requests"] == 1
    assert report["passages"] == 2 and report["messages"] == 1
    held = report["still_held_outside_the_store"]
    assert any("persona.md" in line for line in held) and any("git history" in line for line in held)
    assert scan_dir(root) == []
    assert (
        main(["forget", "agent", "other", "--data-dir", str(root), "--embedding-model", "hashing", "--yes", "--now"])
        == 0
    )
    assert scan_dir(root) == []


def test_forget_text_for_one_agent_leaves_another_agents_things(local: tuple[Memory, Path]) -> None:
    """`tiermem forget --text X --agent A` stays in A's scope: B's auto-memory file, stored tool result and folder file
    holding X are neither changed nor named; A's are. Without --agent, every agent's. A forget that matched nothing
    rewrites nothing (no core purge)."""
    memory, root = local
    a, b = memory.ensure_agent("default").id, memory.create_agent("other").id
    files = {}
    for name, agent in (("default", a), ("other", b)):
        store_result(memory, agent, "memory_insert", "k1", "0" * 64, json.dumps({"text": f"stored {SECRET}"}))
        memory.files.create_folder(f"docs-{name}")
        memory.files.upload_many(f"docs-{name}", [("note.txt", f"the file says {SECRET}".encode(), "note.txt")])
        memory.files.attach(agent, f"docs-{name}")
        files[name] = root / "auto-memory" / name / "project" / "notes.md"
        files[name].parent.mkdir(parents=True)
        files[name].write_text(f"kept: {SECRET}\n")
    memory.core.close()
    cli = ["--data-dir", str(root), "--embedding-model", "hashing", "--yes", "--json"]
    report = json.loads(_run_cli(["forget", "--text", SECRET, "--agent", "default", *cli]))
    assert report["auto_memory_files_edited"] == [str(files["default"])], report
    assert report["folder_files_holding_it"] == ["docs-default/note.txt"] and report["requests"] == 1, report
    assert files["other"].read_text() == f"kept: {SECRET}\n" and SECRET not in files["default"].read_text()
    nothing = json.loads(_run_cli(["forget", "--text", "never-stored-anywhere", "--agent", "default", *cli]))
    assert nothing["core_purge"] == {}, nothing
    after = open_memory(load_settings(data_dir=root, embedding_model="hashing"), start_embedder=False)
    try:
        assert stored_result(after, b, "memory_insert", "k1") is not None
        assert stored_result(after, a, "memory_insert", "k1") is None
    finally:
        after.core.close()
    every = json.loads(_run_cli(["forget", "--text", SECRET, *cli]))  # the whole store: the other agent's too
    assert every["auto_memory_files_edited"] == [str(files["other"])] and every["requests"] == 1, every
    assert sorted(every["folder_files_holding_it"]) == ["docs-default/note.txt", "docs-other/note.txt"], every


def test_forget_requests_keeps_to_its_agent(memory: Memory) -> None:
    """On each core backend: an agent's idempotency records only, or every agent's (None); a record stored with no
    agent_id goes by its key's first part (the agent id ``Memory`` keys it by)."""
    from tiermem.base.records import StoredResult, now

    a, b = memory.ensure_agent("default").id, memory.create_agent("other").id
    for agent in (a, b):
        store_result(memory, agent, "memory_insert", "k1", "0" * 64, f"stored {SECRET}")
    memory.core.put_request(StoredResult(f"{a}\x1fmemory_insert\x1fk2", "", "memory_insert", "0" * 64, SECRET, now()))
    assert memory.core.forget_requests(SECRET, agent_id=a) == 2
    assert stored_result(memory, b, "memory_insert", "k1") is not None
    assert memory.core.forget_requests(SECRET, agent_id=None) == 1
    assert stored_result(memory, b, "memory_insert", "k1") is None


def _run_cli(argv: list[str], status: int | None = 0) -> str:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(argv)
    assert status is None or code == status
    return buf.getvalue()


def test_forget_refuses_the_current_value_and_unknown_ids(local: tuple[Memory, Path]) -> None:
    from tiermem.base.errors import NotFoundError, ValidationError

    memory, _root = local
    agent = memory.ensure_agent("default")
    block = memory.block(agent.id, "human")
    with pytest.raises(ValidationError, match="current value"):
        forget(memory, Target("block", agent.id, "human", (block.version,)))
    with pytest.raises(NotFoundError):
        forget(memory, Target("passage", agent.id, "passage-nope"))
    assert memory.block(agent.id, "human").version == block.version


def test_inspector_forget_action(local: tuple[Memory, Path]) -> None:
    from tiermem.base.errors import ValidationError
    from tiermem.ui import api

    memory, root = local
    ids = fill(memory)
    with pytest.raises(ValidationError, match="confirm"):
        api.forget(memory, "default", {"kind": "agent"})
    answer = api.forget(memory, "default", {"kind": "text", "ref": SECRET, "now": True})
    assert answer["passages"] == 1 and answer["messages"] == 1 and answer["versions"] >= 1
    assert answer["still_held_outside_the_store"] == []
    assert scan_dir(root) == []
    assert memory.archive.counts(ids["agent"])[:2] == (2, 20)


# -- object storage (moto's S3 server, as tests/test_object_storage.py runs it) -----------------------------------

moto_server = pytest.importorskip("moto.server", reason="moto[server] is not installed")
boto3 = pytest.importorskip("boto3")
from .test_object_storage import BUCKET, s3_config, s3_endpoint  # noqa: E402,F401  (the module's moto fixture)


def scan_prefix(endpoint: str, prefix: str) -> tuple[int, list[str]]:
    s3 = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1"
    )
    keys = [
        o["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{prefix}/")
        for o in page.get("Contents", [])
    ]
    held = [k for k in keys if any(n in s3.get_object(Bucket=BUCKET, Key=k)["Body"].read() for n in NEEDLES)]
    return len(keys), sorted(held)


@pytest.fixture
def on_s3(s3_endpoint: str, tmp_path: Path) -> Iterator[tuple[Memory, Callable[[], list[str]]]]:
    prefix = f"forget-{uuid.uuid4().hex[:8]}"
    settings = load_settings(config=s3_config(tmp_path, s3_endpoint, prefix), data_dir=tmp_path / "unused")
    memory = open_memory(settings, start_embedder=False)

    def scan() -> list[str]:
        count, held = scan_prefix(s3_endpoint, prefix)
        assert count > 0
        return held

    yield memory, scan
    memory.core.close()


def test_forget_now_on_object_storage_leaves_no_object_holding_it(
    on_s3: tuple[Memory, Callable[[], list[str]]],
) -> None:
    memory, scan = on_s3
    ids = fill(memory)
    held = scan()
    assert any("/core/" in k or k.split("/", 1)[1].startswith("core/") for k in held) and any(
        ".lance" in k for k in held
    )
    forget(memory, Target("passage", ids["agent"], ids["passage"]), now=True)
    forget(memory, Target("message", ids["agent"], ids["message"]), now=True)
    forget(memory, Target("block", ids["agent"], "human", (int(ids["secret_version"]),)), now=True)
    assert scan() == []
    versions = [v.version for v in memory.core.history(ids["block"])]
    assert int(ids["secret_version"]) not in versions and "Likes green tea" in memory.block(ids["agent"], "human").value
    # the next edit after a forget seals on top of the rewritten history
    memory.edit(ids["agent"], "human", Rethink("Name: Ada", check_line_numbers=False), actor="human")
    assert [v.value for v in memory.core.history(ids["block"], limit=2)][0] == "Name: Ada"


def test_object_storage_without_now_purged_by_optimize(on_s3: tuple[Memory, Callable[[], list[str]]]) -> None:
    memory, scan = on_s3
    ids = fill(memory)
    forget(memory, Target("text", ids["agent"], SECRET))
    assert all(not k.split("/", 1)[1].startswith("core/") for k in scan())  # core objects: deleted at once
    optimize(memory)
    assert scan() == []


def test_a_deleted_file_leaves_the_data_directory_at_the_next_upkeep(local: tuple[Memory, Path]) -> None:
    """A folder's file (its text, its chunks, an open window of it) deleted: gone from the tools at once, and from
    every file of the data directory once the upkeep has run."""
    from tiermem.domain.file_views import OpenRequest

    memory, root = local
    agent = memory.ensure_agent("default").id
    memory.files.create_folder("vault")
    memory.files.upload_many(
        "vault", [(f"note{i}.md", f"filler note {i} about green tea\n".encode(), "") for i in range(10)]
    )
    memory.files.upload("vault", "code.md", f"The vault code is {SECRET} ({TOKEN}).\n".encode())
    memory.files.attach(agent, "vault")
    memory.open_files(agent, [OpenRequest("vault/code.md", None, None)])
    optimize(memory)
    assert scan_dir(root), "the secret must be on disk before the file is deleted"
    memory.files.delete_files("vault", ["code.md"])
    assert memory.grep_files(agent, "zebra", None, 0, None).startswith("No matches found")
    optimize(memory)
    assert scan_dir(root) == []


def test_a_deleted_or_replaced_file_leaves_the_grep_cache_at_once(local: tuple[Memory, Path]) -> None:
    """grep keeps each file's view lines in memory; deleting a file, its folder, or replacing its text drops them
    then, not when the cache next fills up."""
    memory, _ = local
    agent = memory.ensure_agent("default").id
    for folder in ("vault", "attic"):
        memory.files.create_folder(folder)
        memory.files.attach(agent, folder)  # while empty: every file starts closed
        memory.files.upload(folder, "code.md", f"The {folder} code is {SECRET}.\n".encode())
        memory.files.upload(folder, "tea.md", b"green tea\n")

    def held() -> list[str]:  # the texts grep's cache holds (FileRows' private cache: what this test is about)
        return [joined.text for _, joined in memory.archive.files._lines.values()]

    assert "Found 2 total matches" in memory.grep_files(agent, "zebra", None, 0, None)
    assert sum(SECRET in text for text in held()) == 2 and len(held()) == 4
    memory.files.upload("vault", "code.md", b"The vault code moved.\n")  # replaced
    assert sum(SECRET in text for text in held()) == 1
    memory.files.delete_folder("attic")
    assert not any(SECRET in text for text in held()) and len(held()) == 1
    assert "Found 1 total matches" in memory.grep_files(agent, "code", None, 0, None)
    memory.files.delete_files("vault", ["code.md"])
    assert not any("code" in text for text in held())


def test_a_file_deleted_while_grep_reads_the_texts_is_not_kept(
    local: tuple[Memory, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The texts grep reads are kept only if no file was deleted or replaced meanwhile: a delete landing between the
    read and the keeping does not leave the old text in the cache."""
    from tiermem.domain.archive_files import FileRows

    memory, _ = local
    agent = memory.ensure_agent("default").id
    memory.files.create_folder("vault")
    memory.files.attach(agent, "vault")  # while empty: every file starts closed
    memory.files.upload_many("vault", [("code.md", f"code {SECRET}\n".encode(), ""), ("tea.md", b"green tea\n", "")])
    real = FileRows.texts

    def texts_then_delete(self: FileRows, file_ids: list[str]) -> dict[str, str]:
        read = real(self, file_ids)
        monkeypatch.setattr(FileRows, "texts", real)  # once
        memory.files.delete_files("vault", ["code.md"])  # lands after the read, before the keeping
        return read

    monkeypatch.setattr(FileRows, "texts", texts_then_delete)
    memory.grep_files(agent, "zebra", None, 0, None)
    cached = memory.archive.files
    assert not any(SECRET in joined.text for _, joined in cached._lines.values())
    assert not any(SECRET in f.lines.text for _, _, made in cached._grep_views.values() for f in made)  # type: ignore[union-attr]
    assert memory.grep_files(agent, "zebra", None, 0, None).startswith("No matches found")


def test_forget_text_takes_it_out_of_link_notes_prompts_and_folders_and_names_the_files(
    local: tuple[Memory, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A link's note, an agent's system prompt and a folder's description hold the text too: forgetting edits them,
    and with --now no file of the data directory holds a byte of it (the meta table's old note included); a folder
    file holding it is named, not changed."""
    memory, root = local
    ids = fill(memory)
    agent = ids["agent"]
    plain = memory.archival_insert(agent, "a plain passage about tea", None).stored[0]
    other = memory.archival_insert(agent, "another plain passage", None).stored[0]
    memory.link(agent, plain, other, note=f"both about {SECRET}")
    memory.create_agent("ops", system=f"Never say {SECRET}.")
    memory.files.create_folder("vault", description=f"where {SECRET} lives")
    memory.files.upload_many("vault", [("note.txt", f"the file says {SECRET}".encode(), "note.txt")])
    optimize(memory)
    memory.core.close()
    assert (
        main(["forget", "--text", SECRET, "--data-dir", str(root), "--embedding-model", "hashing", "--yes", "--now"])
        == 0
    )
    out = capsys.readouterr().out
    assert "edited the text out of 1 link note(s)" in out
    assert "edited the text out of the system prompt of: ops" in out
    assert "description or instructions of folder(s): vault" in out
    assert "still held by folder file vault/note.txt" in out
    after = open_memory(load_settings(data_dir=root, embedding_model="hashing"), start_embedder=False)
    try:
        assert after.archive.links.of([plain])[plain][0].note == "both about "  # the link stays, its note without it
        assert SECRET not in after.get_agent("ops").system
        assert SECRET not in after.files.folder("vault").description
        assert scan_dir(root), "the folder file still holds it, as reported"
        after.files.delete_files("vault", ["note.txt"])
        optimize(after)
        assert scan_dir(root) == []  # the link note's old meta row, the prompt and the description are gone too
    finally:
        after.core.close()


def test_a_removed_links_note_leaves_the_files_with_the_next_purge(
    local: tuple[Memory, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """`tiermem links remove` marks the link's row for the purge, as a forgotten memory's links are, and deletes it by
    key (the deletion's filter, kept in the meta table's transaction and manifest files, holds no note): after
    `forget --text NOTE --now`, or after the next upkeep, no file of the data directory holds a byte of the note."""
    memory, root = local
    agent = memory.ensure_agent("default").id
    one, two, three = (memory.archival_insert(agent, f"kiwi fact {n}", None).stored[0] for n in ("one", "two", "3"))
    memory.core.close()
    cli = ["--data-dir", str(root), "--embedding-model", "hashing", "--agent", "default"]
    assert main(["links", "add", one, two, "--note", f"{SECRET} my therapist said", *cli]) == 0
    assert main(["links", "remove", one, two, *cli]) == 0
    held = scan_dir(root)  # deleted, not yet purged: only the meta table's data file holds it, no deletion's filter
    assert held and all("meta.lance/data/" in name for name in held), held
    assert main(["forget", "--text", SECRET, "--now", "--yes", *cli]) == 0
    assert "nothing was pending" not in capsys.readouterr().out
    assert scan_dir(root) == []
    # without --now: the server's next upkeep (here `tiermem optimize`) takes it out of the files
    assert main(["links", "add", two, three, "--note", f"{SECRET} again", *cli]) == 0
    assert main(["links", "remove", three, two, *cli]) == 0
    assert main(["optimize", "--data-dir", str(root), "--embedding-model", "hashing"]) == 0
    assert scan_dir(root) == []


def test_forget_text_names_the_tags_projects_and_labels_holding_it(
    local: tuple[Memory, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A text in a passage's tag or project, a message's project or a block's label is not in any content: forget
    --text leaves those names as they are (hosts, filters and prompts use them) but names each with the command
    that removes it; run those, and the same forget again leaves no byte of it in the data directory."""
    memory, root = local
    agent = memory.ensure_agent("default").id
    word = "OrchidClinic"
    tagged = memory.archival_insert(agent, "Meeting notes from Tuesday", [word, "health"]).stored[0]
    placed = memory.archival_insert(agent, "Follow-up scheduled", None, project=f"/nowhere/{word}-records").stored[0]
    said = memory.conversation_log(
        agent, [{"role": "user", "content": "booked for May", "project": f"/nowhere/{word}-records"}]
    ).stored[0]
    memory.create_block(agent, BlockSpec(label=word, value="appointments"), actor="human")
    memory.archival_insert(agent, "tagged otherwise", ["health"])
    memory.core.close()
    cli = ["--data-dir", str(root), "--embedding-model", "hashing"]
    assert main(["forget", "--text", word, *cli, "--yes", "--now"]) == 0
    out = capsys.readouterr().out
    assert "nothing was found to forget" in out
    assert f"still held by the passage tag of {tagged} (agent default)" in out
    assert f"`tiermem forget passage {tagged} --agent default`" in out
    assert f"still held by the passage project of {placed} (agent default)" in out
    assert f"still held by the message project of {said.id} (agent default)" in out
    assert f"`tiermem forget message {said.id} --agent default`" in out
    assert f"still held by the block label of {word} (agent default)" in out
    assert f"`tiermem blocks set {word} --label NEW --agent default`" in out
    assert out.count("still held by the") == 4  # the passage tagged "health" only is not named
    assert scan_for(root, word)
    for argv in (
        ["forget", "passage", tagged, "--agent", "default", "--yes"],
        ["forget", "passage", placed, "--agent", "default", "--yes"],
        ["forget", "message", said.id, "--agent", "default", "--yes"],
        ["blocks", "set", word, "--label", "clinic", "--agent", "default"],
    ):
        assert main([*argv, *cli]) == 0, argv
    capsys.readouterr()
    assert main(["forget", "--text", word, *cli, "--yes", "--now", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["names_holding_it"] == [] and report["versions"] == 1  # the block's version under the old label
    assert scan_for(root, word) == []


def scan_for(root: Path, text: str) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes())


def test_forget_an_agent_reports_what_went_and_usage_errors_exit_2(
    local: tuple[Memory, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    memory, root = local
    work = memory.create_agent("work")
    memory.archival_insert(work.id, "one", None)
    memory.archival_insert(work.id, "two", None)
    memory.core.close()
    common = ["--data-dir", str(root), "--embedding-model", "hashing", "--yes"]
    assert main(["forget", "agent", "work", "--now", *common]) == 0
    assert "forgot 2 passage row(s), 0 message(s)" in capsys.readouterr().out
    assert main(["forget", "block", "human", "--history", "--version", "1", *common]) == 2
    assert "not both" in capsys.readouterr().err
    assert main(["forget", "passage", "p-1", "--text", "hello", *common]) == 2
    assert main(["forget", "passage", "p-1", "--history", *common]) == 2
    assert "applies to `tiermem forget block LABEL`" in capsys.readouterr().err
    assert main(["forget", "--text", "hello", "--memfs", str(root / "nowhere"), *common]) == 1
    assert "no such directory" in capsys.readouterr().err


def _purge_meets_another_commit(memory: Memory, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A store whose passage holding the secret was compacted and indexed, with later passages in small fragments,
    set up so that the purge of ``passages`` meets another process's commit: another LanceDB handle compacts the table
    (as a server's upkeep does) right after the purge wrote the forgotten rows' neighbours again, and the purge's own
    handle is one that looks for newer versions only when told (as one on object storage does within
    ``read_staleness``), so its next commit, the full-text index built afresh, started from the version before the
    compaction: a real "Retryable commit conflict" from LanceDB, every time. Returns the agent and the passage."""
    import lancedb

    from tiermem.store.purge import Purge

    agent = memory.ensure_agent("default").id
    for i in range(8):
        memory.archival_insert(agent, f"filler passage {i} about green tea", None)
    passage = memory.archival_insert(agent, f"the vault code is {SECRET} ({TOKEN})", ["vault"]).stored[0]
    optimize(memory)  # compacted and indexed: the secret is in a data file and in the full-text index
    for i in range(3):
        memory.archival_insert(agent, f"later passage {i} about black tea", None)  # small fragments to compact
    store = memory.archive.rows.store
    uri = store.conn.uri
    monkeypatch.setitem(
        store.conn.tables, "passages", lancedb.connect(uri, read_consistency_interval=None).open_table("passages")
    )
    other = lancedb.connect(uri).open_table("passages")
    real = Purge.rewrite

    def rewrite_then_another_compacts(self: Purge, table: str, marks: dict[str, str]) -> int:
        rewritten = real(self, table, marks)
        if table == "passages":
            other.optimize()  # a Rewrite committed after the purge's last commit, before its next
        return rewritten

    monkeypatch.setattr(Purge, "rewrite", rewrite_then_another_compacts)
    return agent, passage


def test_a_purge_meeting_another_process_commit_tries_again_and_leaves_no_byte(
    local: tuple[Memory, Path], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Servers' upkeeps commit to the tables while `tiermem forget --now` purges: a commit conflict is tried again
    from the newest version, and the purge finishes with no byte of the text left in the data directory."""
    memory, root = local
    agent, passage = _purge_meets_another_commit(memory, monkeypatch)
    with caplog.at_level(logging.INFO, logger="tiermem.store.boundary"):
        done = forget(memory, Target("passage", agent, passage), now=True)
    assert done.purge_unfinished is None and done.purged is not None and "passages purge" in done.purged
    tried = [r.getMessage() for r in caplog.records if "commit conflict with another writer" in r.getMessage()]
    assert any(m.startswith("the indexes of passages (after forgetting)") for m in tried), tried  # met and tried again
    assert not purge_pending(memory)
    assert scan_dir(root) == []


def test_a_purge_that_cannot_finish_says_the_text_is_gone_from_search_and_how_to_finish(
    local: tuple[Memory, Path], settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """When the purge's tries run out, `tiermem forget --now` exits 1 saying what is true: forgotten (gone from every
    search and listing), the purge of the old files pending, and how to finish it; never "Nothing was written"."""
    from tiermem.cli.forget import forget_command
    from tiermem.cli.main import build_parser
    from tiermem.store import Retry

    memory, root = local
    agent, passage = _purge_meets_another_commit(memory, monkeypatch)
    monkeypatch.setattr(memory.archive.rows.store.indexes, "purge_retry", Retry(attempts=1))
    args = build_parser().parse_args(["forget", "passage", passage, "--yes", "--now"])
    assert forget_command(memory, settings, args) == 1
    out, err = capsys.readouterr()
    assert "forgot 1 passage row(s)" in out
    assert "store files not purged yet: Purging the forgotten rows of passages from the store's files did not" in out
    assert "already gone from every search and listing" in out and "`tiermem optimize`" in out
    assert "Retryable commit conflict" in out and ".rs:" not in out  # what stopped it, without Lance's source line
    assert "did not finish" in err and "othing was written" not in out + err
    hits = memory.archival_search(
        agent, "vault code", tags=None, tag_match_mode="any", top_k=10, start_datetime=None, end_datetime=None
    ).hits
    assert all(SECRET not in h.content for h in hits)
    assert purge_pending(memory)  # the marks stay: the next upkeep purges
    monkeypatch.undo()  # the other process is done; the store's own handle again
    optimize(memory)
    assert not purge_pending(memory)
    assert scan_dir(root) == []


def test_a_long_turn_is_kept_in_the_next_turns_keyword_text_only_in_part_and_leaves_it_when_forgotten(
    local: tuple[Memory, Path],
) -> None:
    """The next turn's keyword text holds the start of the turn before it (``PREVIOUS_CHARS``), not a 10M-character
    answer a second time (a tool result gives it nothing: ``archive.context_of``); forgetting that turn takes its start
    out of the next one's text too, though the next holds only part of it."""
    from tiermem.domain.archive import PREVIOUS_CHARS

    memory, _ = local
    agent = memory.ensure_agent("default").id
    long = f"{SECRET} " + "filler words " * 2_000
    first, second = memory.archive.log_messages(
        agent, [{"role": "assistant", "content": long}, {"role": "user", "content": "noted"}], max_chars=len(long)
    )

    def text_of(message_id: str) -> str:
        (row,) = memory.archive.rows.rows_where("messages", Filter(ids=(message_id,)))
        return str(row["text"])

    assert SECRET in text_of(second.id) and len(text_of(second.id)) < PREVIOUS_CHARS + 100
    forget(memory, Target("message", agent, first.id), now=True)
    assert SECRET not in text_of(second.id) and "filler" not in text_of(second.id)


def test_forget_text_across_the_chunks_of_one_insert_forgets_the_insert_whole(
    local: tuple[Memory, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A long archival insert is stored in chunks; a text of it that crosses from one chunk into the next is in no
    one chunk, yet the insert holds it: `forget --text` forgets every chunk of that insert (and no other)."""
    memory, root = local
    agent = memory.ensure_agent("default").id
    full = " ".join(f"filler{i} garden." for i in range(800))
    inserted = memory.archival_insert(agent, full, None).stored
    other = memory.archival_insert(agent, "the garden has filler plants", None).stored
    chunks = sorted(memory.archive.rows.rows_where("passages", Filter(agent_id=agent)), key=lambda r: r["chunk"])
    first, second = [r["content"] for r in chunks if r["group_id"] == inserted[0]][:2]
    start = full.index(second[:60])  # the second chunk starts inside the first (they overlap)
    crossing = full[start - 12 : len(first) + 12]
    assert crossing in full and not any(crossing in r["content"] for r in chunks)
    memory.core.close()
    cli = ["--data-dir", str(root), "--embedding-model", "hashing", "--agent", "default", "--yes"]
    assert main(["forget", "--text", crossing, *cli]) == 0
    out = capsys.readouterr().out
    assert f"forgot {sum(r['group_id'] == inserted[0] for r in chunks)} passage row(s)" in out
    after = open_memory(load_settings(data_dir=root, embedding_model="hashing"), start_embedder=False)
    try:
        left = after.archive.rows.rows_where("passages", Filter(agent_id=agent))
        assert [r["id"] for r in left] == [other[0]]
    finally:
        after.core.close()


@pytest.mark.parametrize(
    ("word", "whole"),
    [
        ("-".join(f"{i * 2654435761 % 2**32:x}" for i in range(500)), True),  # a token cut into slices: all of it
        ("".join(chr(0x4E00 + i * 37 % 2000) for i in range(1500)), False),  # a CJK run: a part across a cut
    ],
    ids=["token", "cjk"],
)
def test_forget_text_of_one_long_word_cut_into_chunks_forgets_the_insert(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], word: str, whole: bool
) -> None:
    """One word longer than the model's window (no whitespace in it, but pieces the tokenizer counts apart) is cut
    into slices, and consecutive chunks share none of it: no one chunk holds the word, nor surely its start or end.
    `forget --text` of the word, or of a part of it across a cut, forgets the insert whole, every chunk."""
    root = tmp_path / "data"
    memory = open_memory(load_settings(data_dir=root, embedding_model="default"), start_embedder=False)
    agent = memory.ensure_agent("default").id
    memory.archival_insert(agent, f"my key is {word} keep it", None)
    kept = memory.archival_insert(agent, f"a short note about {word[:40]}", None).stored
    rows = memory.archive.rows.rows_where("passages", Filter(agent_id=agent))
    chunks = sorted((r for r in rows if r["id"] not in kept), key=lambda r: r["chunk"])
    memory.core.close()
    cut = len(chunks[0]["content"]) - len("my key is ")
    text = word if whole else word[cut - 30 : cut + 30]
    assert len(chunks) > 2 and not any(text in r["content"] for r in chunks)
    cli = ["--data-dir", str(root), "--embedding-model", "default", "--agent", "default", "--yes"]
    assert main(["forget", "--text", text, *cli]) == 0
    assert f"forgot {len(chunks)} passage row(s)" in capsys.readouterr().out
    after = open_memory(load_settings(data_dir=root, embedding_model="default"), start_embedder=False)
    try:
        assert [r["id"] for r in after.archive.rows.rows_where("passages", Filter(agent_id=agent))] == kept
    finally:
        after.core.close()


def test_the_chunked_inserts_of_a_scope_are_read_whole_in_order(local: tuple[Memory, Path]) -> None:
    """What `forget --text` looks in across chunks: each insert of the agent stored in two chunks or more, its
    chunks in order; not a single-chunk insert, nor another agent's."""
    memory, _ = local
    agent = memory.ensure_agent("default").id
    other = memory.ensure_agent("other").id
    long = [" ".join(f"w{n}x{i}" for i in range(1500)) for n in range(3)]
    groups = [memory.archival_insert(agent, text, None).stored[0] for text in long]
    memory.archival_insert(agent, "a short note", None)
    memory.archival_insert(other, long[0], None)
    rows = memory.archive.rows.rows_where("passages", Filter(agent_id=agent))
    chunked = memory.archive.rows.chunked("passages", Filter(agent_id=agent))
    assert sorted(chunked) == sorted(groups)
    for group in groups:
        stored = sorted((r["chunk"], r["content"]) for r in rows if r["group_id"] == group)
        assert len(stored) > 2 and chunked[group] == [c for _, c in stored]


def test_forget_of_a_text_made_up_across_the_chunks_of_an_insert_forgets_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A long insert of a few words repeated: consecutive chunks share their overlap, and a text joining the end of
    one and the start of the next as if they shared none is in no text the insert was: `forget --text` of it forgets
    nothing (it forgot the whole insert), while a run of the text across the same join forgets it whole."""
    import random

    root = tmp_path / "data"
    memory = open_memory(load_settings(data_dir=root, embedding_model="default"), start_embedder=False)
    agent = memory.ensure_agent("default").id
    rng = random.Random(3)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda omicron sigma".split()
    text = " ".join(rng.choice(words) for _ in range(600))
    group = memory.archival_insert(agent, text, None).stored[0]
    chunks = sorted(memory.archive.rows.rows_where("passages", Filter(agent_id=agent)), key=lambda r: r["chunk"])
    memory.core.close()
    first, second = chunks[0]["content"], chunks[1]["content"]
    made_up = [
        f"{' '.join(first.split()[-n:])}{glue}{' '.join(second.split()[:m])}"
        for n in (1, 2)
        for m in (1, 3)
        for glue in (" ", "")
    ]
    made_up = [t for t in made_up if t not in text]
    assert len(chunks) > 2 and made_up
    cli = ["--data-dir", str(root), "--embedding-model", "default", "--agent", "default", "--yes"]
    for t in made_up:
        assert main(["forget", "--text", t, *cli]) == 0
        assert "nothing was found to forget" in capsys.readouterr().out, t
    crossing = text[text.index(second) - 12 : len(first) + 12]  # the insert's text starts with its first chunk
    assert not any(crossing in r["content"] for r in chunks)
    assert main(["forget", "--text", crossing, *cli]) == 0
    assert f"forgot {len(chunks)} passage row(s)" in capsys.readouterr().out
    after = open_memory(load_settings(data_dir=root, embedding_model="default"), start_embedder=False)
    try:
        assert after.archive.rows.rows_where("passages", Filter(group_ids=(group,))) == []
    finally:
        after.core.close()


def test_a_forget_that_found_nothing_says_so_and_leaves_nothing_pending(
    local: tuple[Memory, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    memory, root = local
    agent = memory.ensure_agent("default").id
    memory.archival_insert(agent, "the garden has filler plants", None)
    memory.core.close()
    cli = ["--data-dir", str(root), "--embedding-model", "hashing", "--yes"]
    assert main(["forget", "--text", "nowhere to be found", *cli]) == 0  # as a search finding nothing
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "nothing was found to forget"
    assert "upkeep" not in out and "forgot 0" not in out
    assert main(["forget", "--text", "nowhere to be found", *cli, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["files"] == "nothing to purge: nothing was found to forget"


def test_forget_text_takes_the_model_text_a_turn_keeps_in_its_payload(local: tuple[Memory, Path]) -> None:
    """An answer that called conversation_search is stored with no content and the model's text in its payload, as
    a send_message answer keeps the model's own text beside its reply (the loop writes the payload with its non-ASCII
    as it is, a Letta import escaped): forgetting a text the model wrote forgets those turns too, no byte left."""
    memory, root = local
    agent = memory.ensure_agent("default").id
    said = f'I will look up "{SECRET}" \u00e9t\u00e9 first'  # a quote and non-ASCII: JSON escapes them
    searched = {"kind": "assistant", "tool_calls": [{"id": "c1", "name": "conversation_search", "input": {}}]}
    replying = {"kind": "assistant", "tool_calls": [{"id": "c2", "name": "send_message", "input": {"message": "ok"}}]}
    kept = memory.archive.log_messages(
        agent,
        [
            {"role": "user", "content": "what was the code?"},
            {"role": "assistant", "content": "", "payload": json.dumps({**searched, "model_text": said})},
            {
                "role": "assistant",
                "content": "ok",
                "payload": json.dumps({**replying, "model_text": said}, ensure_ascii=False),
            },
            {"role": "assistant", "content": "other", "payload": json.dumps({**replying, "model_text": "no code"})},
        ],
    )
    done = forget(memory, Target("text", agent, f'"{SECRET}" \u00e9t\u00e9'), now=True)
    assert done.messages == 2
    left = memory.archive.rows.rows_where("messages", Filter(agent_id=agent))
    assert sorted(r["id"] for r in left) == sorted([kept[0].id, kept[3].id])
    assert scan_dir(root) == []


def test_forget_text_across_joins_the_chunks_leave_open_takes_the_insert_s_own_text_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two joins the chunks alone do not tell: a phrase repeated past the overlap (consecutive chunks share runs of
    it of many lengths) and a cut between two long tokens (whitespace there or none, not stored). The insert's text
    is rebuilt as the chunker cut it: `forget --text` of a run it holds across them forgets it whole; the run with
    the phrase once less, or the tokens joined without their space, is in no text the chunker cuts into those
    chunks, and forgets nothing."""
    root = tmp_path / "data"
    memory = open_memory(load_settings(data_dir=root, embedding_model="default"), start_embedder=False)
    agent = memory.ensure_agent("default").id
    repeated = " ".join([f"w{i}" for i in range(120)] + ["la la land"] * 150 + [f"v{i}" for i in range(120)])
    one = "-".join(f"{i * 2654435761 % 2**32:x}" for i in range(200))
    two = "-".join(f"{i * 40503 % 2**32:x}" for i in range(200))
    tokens = f"start {one} {two} end"
    first = memory.archival_insert(agent, repeated, None).stored[0]
    second = memory.archival_insert(agent, tokens, None).stored[0]
    rows = memory.archive.rows.rows_where("passages", Filter(agent_id=agent))
    memory.core.close()
    run = " ".join(["w119", *["la la land"] * 150, "v0"])
    assert not any(run in r["content"] for r in rows)
    cli = ["--data-dir", str(root), "--embedding-model", "default", "--agent", "default", "--yes"]
    for made_up in (" ".join(["w119", *["la la land"] * 149, "v0"]), one[-20:] + two[:20]):
        assert main(["forget", "--text", made_up, *cli]) == 0
        assert "nothing was found to forget" in capsys.readouterr().out, made_up
    for text, group in ((run, first), (one[-20:] + " " + two[:20], second)):
        assert main(["forget", "--text", text, *cli]) == 0
        assert f"forgot {sum(r['group_id'] == group for r in rows)} passage row(s)" in capsys.readouterr().out
    after = open_memory(load_settings(data_dir=root, embedding_model="default"), start_embedder=False)
    try:
        assert after.archive.rows.rows_where("passages", Filter(agent_id=agent)) == []
    finally:
        after.core.close()


def test_forget_text_across_two_copies_of_a_long_token_pasted_three_times(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A token too long to share an overlap, pasted three times: each copy fills a chunk of the default model, two
    of them identical. A text spanning two copies (the end of one, the start of the next) is in no one chunk, and the
    insert is forgotten all the same."""
    import random

    rng = random.Random(1)
    token = "-".join(f"{rng.getrandbits(32):08x}" for _ in range(30))
    root = tmp_path / "data"
    settings = load_settings(data_dir=root, embedding_model="default")
    memory = open_memory(settings, start_embedder=False)
    agent = memory.ensure_agent("default").id
    memory.archival_insert(agent, "The key, pasted again and again:\n" + "\n".join([token] * 3), None)
    rows = memory.archive.rows.rows_where("passages", Filter(agent_id=agent))
    memory.core.close()
    wanted = token[-16:] + " " + token[:16]
    assert len(rows) == 3 and not any(wanted in " ".join(r["content"].split()) for r in rows)

    capsys.readouterr()
    args = ["--data-dir", str(root), "--embedding-model", "default", "--agent", "default", "--yes"]
    assert main(["forget", "--text", wanted, *args]) == 0
    assert capsys.readouterr().out.startswith("forgot 3 passage row(s)")
    after = open_memory(settings, start_embedder=False)
    assert after.archive.rows.rows_where("passages", Filter(agent_id=agent)) == []
    after.core.close()
