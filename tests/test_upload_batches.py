"""``upload_many`` stores one batch in a worker thread while it parses the next: outcomes keep the order of storing
batch by batch, and a batch that fails to store stops the upload before the next batch is stored. A file stored again
keeps the vectors of the chunks whose text did not change."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tiermem.base.config import Settings
from tiermem.base.errors import StoreWriteError, ValidationError
from tiermem.domain.factory import open_memory
from tiermem.store import Filter


def test_outcomes_keep_the_order_of_storing_batch_by_batch(settings: Settings) -> None:
    memory = open_memory(settings)
    memory.files.create_folder("docs")
    memory.files.upload_many("docs", [("u.md", b"unchanged text\n", "")])
    items = [
        ("a.md", b"alpha\n", ""),
        ("../escape.md", b"no\n", ""),  # skipped at once: a bad name
        ("b.md", b"beta\n", ""),  # the first batch is a.md and b.md
        ("c.md", b"gamma\n", ""),
        ("bin.dat", b"\x00\x01\x02binary", ""),  # cannot be parsed: stored as an error, in the second batch
        ("u.md", b"unchanged text\n", ""),  # unchanged: found while the second batch is being stored
        ("d.md", b"delta\n", ""),
    ]
    seen: list[tuple[str, str]] = []
    done = memory.files.upload_many("docs", items, batch=2, progress=lambda u: seen.append((u.name, u.outcome)))
    expected = [
        ("../escape.md", "skipped"),
        ("a.md", "added"),
        ("b.md", "added"),
        ("c.md", "added"),
        ("bin.dat", "error"),
        ("u.md", "unchanged"),
        ("d.md", "added"),
    ]
    assert [(u.name, u.outcome) for u in done] == expected
    assert seen == expected
    stored = {f.name: f.status for f in memory.files.rows.files([memory.files.folder("docs").id])}
    assert stored == {n: "completed" for n in ("a.md", "b.md", "c.md", "d.md", "u.md")} | {"bin.dat": "error"}
    assert memory.files.text("docs", "c.md") == "gamma\n"


def test_a_batch_that_fails_to_store_stops_the_upload(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    memory = open_memory(settings)
    memory.files.create_folder("docs")
    rows = memory.files.rows
    write = rows.write_changed
    calls: list[list[str]] = []

    def failing_second(items: Any, **kw: Any) -> Any:
        calls.append([r.name for r, _ in items])
        if len(calls) == 2:
            raise StoreWriteError("the disk is full")
        return write(items, **kw)

    monkeypatch.setattr(rows, "write_changed", failing_second)
    items = [(f"f{i}.md", f"file {i}\n".encode(), "") for i in range(6)]
    with pytest.raises(StoreWriteError, match="the disk is full"):
        memory.files.upload_many("docs", items, batch=2)
    assert calls == [["f0.md", "f1.md"], ["f2.md", "f3.md"]]  # the third batch was never stored
    stored = {f.name for f in rows.files([memory.files.folder("docs").id])}
    assert stored == {"f0.md", "f1.md"}


def _chunks(memory: Any, name: str) -> dict[str, Any]:
    file = next(f for f in memory.files.rows.files([memory.files.folder("docs").id]) if f.name == name)
    rows = memory.archive.store.conn.rows("file_chunks", Filter(group_ids=(file.id,)), columns=("content", "vector"))
    return {r["content"]: r["vector"] for r in rows}


def test_a_file_stored_again_embeds_only_the_chunks_that_changed(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = open_memory(settings)
    memory.files.create_folder("docs")
    text = "".join(f"Paragraph {i} is about the topic numbered {i} and about nothing else.\n\n" for i in range(300))
    memory.files.upload_many("docs", [("big.md", text.encode(), ""), ("other.md", text.encode(), "")])
    before = _chunks(memory, "big.md")
    assert len(before) > 10 and all(v is not None for v in before.values())
    embedder = memory.files.rows.vectors.embedder
    real = embedder.embed_blocking
    embedded: list[str] = []

    def counting(texts: list[str], timeout: float | None = None) -> Any:
        embedded.extend(texts)
        return real(texts, timeout)

    monkeypatch.setattr(embedder, "embed_blocking", counting)
    memory.files.upload_many("docs", [("big.md", (text + "A closing line about harbours.\n").encode(), "")])
    after = _chunks(memory, "big.md")
    changed = set(after) - set(before)
    assert 1 <= len(changed) <= 2 and sorted(embedded) == sorted(changed)  # the last chunk(s) only
    assert all(after[c] == before[c] for c in after if c in before)
    assert all(v is not None for v in after.values())

    embedded.clear()  # an edit at the start moves the windows after it until they end at the same line again
    memory.files.upload_many("docs", [("big.md", ("A new opening line.\n" + text + "Closing.\n").encode(), "")])
    edited = _chunks(memory, "big.md")
    assert sorted(embedded) == sorted(set(edited) - set(after)) and embedded
    assert all(edited[c] == after[c] for c in edited if c in after)

    embedded.clear()  # chunks stored without vectors are embedded when their file is stored again
    memory.files.upload_many("docs", [("late.md", text.encode(), "")], embed=False)
    assert all(v is None for v in _chunks(memory, "late.md").values())
    memory.files.upload_many("docs", [("late.md", (text + "More.\n").encode(), "")])
    late = _chunks(memory, "late.md")
    assert sorted(embedded) == sorted(late) and all(v is not None for v in late.values())


def test_two_uploads_of_the_same_files_at_once_leave_one_chunk_set_per_file(settings: Settings) -> None:
    """Two processes (here: two store handles in two threads, as two processes open them) uploading one directory
    at once: every file ends with one set of chunks, and the upload that finds a file stored by the other says it is
    unchanged, not updated."""
    first = open_memory(settings, start_embedder=False)
    first.files.create_folder("docs")
    second = open_memory(settings, start_embedder=False)
    text = "".join(f"Line {i} of a file that fills a few chunks with words about harbours.\n" for i in range(60))
    items = [(f"f{i}.md", f"{i}\n{text}".encode(), "") for i in range(16)]
    start = threading.Barrier(2)
    outcomes: dict[int, list[str]] = {}

    def upload(n: int, memory: Any) -> None:
        start.wait()
        outcomes[n] = [u.outcome for u in memory.files.upload_many("docs", items, batch=4)]

    threads = [threading.Thread(target=upload, args=(n, m)) for n, m in enumerate((first, second))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = first.archive.store.conn.rows("file_chunks", None, columns=("id", "group_id"))
    assert len(rows) == len({r["id"] for r in rows})  # no chunk stored twice
    stored = first.files.rows.files([first.files.folder("docs").id])
    assert sum(f.chunks for f in stored) == len(rows) and len(stored) == 16
    assert "updated" not in outcomes[0] + outcomes[1]
    assert sorted(outcomes[0] + outcomes[1]).count("added") == 16  # each file added once, unchanged for the other


def test_rows_stored_twice_by_an_older_race_are_reported_and_mended(settings: Settings) -> None:
    """A store that met two uploads of one file at once before they took a lock holds its file row and chunks twice:
    `tiermem doctor` says so, `tiermem optimize` leaves one copy of each, the file whole and searchable once."""
    from tiermem.domain.doctor_checks import check_files
    from tiermem.domain.maintenance import optimize

    memory = open_memory(settings)
    memory.files.create_folder("docs")
    text = "\n".join(f"line {i} about the harbour lights" for i in range(400)) + "\n"
    memory.files.upload_many("docs", [("a.md", text.encode(), ""), ("b.md", b"just one line\n", "")])
    rows = memory.archive.store.conn
    chunks = rows.rows("file_chunks", None)
    files = rows.rows("files", Filter(ids=tuple({str(c["group_id"]) for c in chunks})))
    a = next(f for f in files if f["name"] == "a.md")
    memory.archive.store.rows.add_rows("file_chunks", [c for c in chunks if c["group_id"] == a["id"]])  # as the race
    memory.archive.store.rows.add_rows("files", [a])
    stored = memory.archive.files.stored_twice()
    assert set(stored) == {"files", "file_chunks"} and stored["files"] == 1, stored
    checks: list[tuple[str, bool, str]] = []
    check_files(memory, lambda name, ok, detail, fix="": checks.append((name, ok, detail)))
    assert ("file rows", False) in [(n, ok) for n, ok, _ in checks], checks
    lines = optimize(memory)
    assert any("stored twice removed" in line for line in lines), lines
    assert memory.archive.files.stored_twice() == {}
    after = rows.rows("file_chunks", None, columns=("id", "group_id"))
    ids = [r["id"] for r in after]
    assert len(ids) == len(set(ids)) == len(chunks)
    again = memory.archive.files.file(a["id"])
    assert (
        again is not None
        and again.status == "completed"
        and again.chunks == sum(1 for c in after if c["group_id"] == a["id"])
    )
    assert memory.archive.files.text(a["id"]) == text.rstrip("\n") or memory.archive.files.text(a["id"]) == text


def create_at_once(memories: list[Any], name: str) -> tuple[list[str], list[str]]:
    """Each memory (a process's store handle) creates the folder ``name`` at once, in its own thread: what each
    ``create_folder`` said ("created" or its error), and the ids each ``ensure_folder`` (a first sync) was given."""
    said: list[str] = []
    given: list[str] = []
    start = threading.Barrier(len(memories))

    def create(memory: Any, ensure: bool) -> None:
        start.wait()
        if ensure:
            given.append(memory.files.ensure_folder(name + "-synced")[0].id)
            return
        try:
            memory.files.create_folder(name)
            said.append("created")
        except ValidationError as exc:
            said.append(str(exc))

    for ensure in (False, True):
        threads = [threading.Thread(target=create, args=(m, ensure)) for m in memories]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return said, given


def test_two_processes_creating_one_folder_name_at_once_make_one_folder(settings: Settings) -> None:
    """`tiermem folders create docs` (or a first `folders sync docs DIR`) in several processes at once: one folder
    of the name (docs/FILES.md), the others told it exists (create) or given it (sync); doctor finds no name twice."""
    from tiermem.domain.doctor_checks import check_files

    memories = [open_memory(settings, start_embedder=False) for _ in range(4)]
    said, given = create_at_once(memories, "docs")
    assert said.count("created") == 1 and len(said) == 4
    assert all("A folder named 'docs' exists already" in s for s in said if s != "created")
    assert len(set(given)) == 1 and len(given) == 4
    rows = memories[0].archive.store.conn.rows("folders", None)
    assert sorted(r["name"] for r in rows) == ["docs", "docs-synced"]
    checks: list[tuple[str, bool, str]] = []
    check_files(memories[0], lambda name, ok, detail, fix="": checks.append((name, ok, detail)))
    assert ("folder names", True) in [(n, ok) for n, ok, _ in checks], checks


def test_doctor_names_a_folder_name_an_older_race_left_twice(settings: Settings) -> None:
    """A store where two processes made one folder name twice (before the name took a lock): doctor says so."""
    from dataclasses import replace

    from tiermem.domain.doctor_checks import check_files

    memory = open_memory(settings, start_embedder=False)
    docs = memory.files.create_folder("docs")
    memory.files.rows.put_folder(replace(docs, id="folder-second"))  # what the race wrote
    checks: list[tuple[str, bool, str, str]] = []
    check_files(memory, lambda name, ok, detail, fix="": checks.append((name, ok, detail, fix)))
    found = next(c for c in checks if c[0] == "folder names")
    assert not found[1] and "more than one folder is named 'docs'" in found[2] and "folders delete" in found[3]


def test_two_folders_an_older_race_named_alike_are_reached_by_id(settings: Settings) -> None:
    """Two folders of one name (an older tiermem's race): every command acted on the oldest, so the other could
    only be reached by deleting the first, and a forget cleaned the oldest's description twice and the other's
    never. The name is refused (naming both ids), each folder is reached by its id (show, upload, attach, delete),
    a forget cleans both, the two are not attached to one agent together, and doctor names the ids."""
    from dataclasses import replace

    from tiermem.base.errors import NotFoundError
    from tiermem.domain.doctor_checks import check_files
    from tiermem.domain.forgetting import Target, forget

    memory = open_memory(settings, start_embedder=False)
    docs = memory.files.create_folder("docs", description="Notes. My old address is 1 Elm St.")
    memory.files.rows.put_folder(replace(docs, id="folder-second"))  # what the race wrote
    with pytest.raises(ValidationError) as refused:
        memory.files.folder("docs")
    said = str(refused.value)
    assert said.startswith("2 folders are named 'docs' (an older tiermem let them share it): ")
    assert f"{docs.id} (0 file(s), created " in said and "folder-second (0 file(s), created " in said
    assert "`tiermem folders show " in said and "`tiermem folders delete ID --yes`" in said
    memory.files.upload("folder-second", "b.txt", b"second folder's file", embed=False)
    memory.files.upload(docs.id, "a.txt", b"first folder's file", embed=False)
    assert [f.name for f in memory.files.files("folder-second")] == ["b.txt"]
    assert [f.name for f in memory.files.files(docs.id)] == ["a.txt"]
    with pytest.raises(ValidationError, match="2 folders are named 'docs'"):
        memory.files.upload("docs", "c.txt", b"which one?", embed=False)

    done = forget(memory, Target("text", None, "My old address is 1 Elm St."))
    assert done.folder_texts == ["docs", "docs"]
    assert {f.description for f in memory.files.folders()} == {"Notes. "}

    agent = memory.ensure_agent("ezra").id
    memory.files.attach(agent, "folder-second")
    with pytest.raises(ValidationError, match=r"another folder named 'docs' attached \(folder-second\)"):
        memory.files.attach(agent, docs.id)
    memory.files.detach(agent, "folder-second")

    checks: list[tuple[str, bool, str, str]] = []
    check_files(memory, lambda name, ok, detail, fix="": checks.append((name, ok, detail, fix)))
    found = next(c for c in checks if c[0] == "folder names")
    assert not found[1] and f"'docs' ({docs.id}: 1 file(s), folder-second: 1 file(s))" in found[2], found
    assert "by its id (`tiermem folders delete ID --yes`)" in found[3]

    memory.files.delete_folder("folder-second")
    assert memory.files.folder("docs").id == docs.id and [f.name for f in memory.files.files("docs")] == ["a.txt"]
    with pytest.raises(NotFoundError):
        memory.files.folder("folder-second")


def test_a_folder_is_not_named_another_folders_id(settings: Settings) -> None:
    """A folder is reached by its id too, so a name equal to another folder's id would make that folder unreachable
    by its id (the name matched first) or reach the wrong folder: create and rename refuse it without naming the
    other folder (a caller may not see it), a backup restored beside it takes ``NAME_(1)`` as for a taken name, and
    an id reaches its own folder even where an older tiermem left a folder named so."""
    from dataclasses import replace

    from tiermem.domain.archive_files import folder_row
    from tiermem.domain.filesystem import restore_rows

    memory = open_memory(settings, start_embedder=False)
    private = memory.files.create_folder("private-plans")
    memory.files.upload(private.id, "plan.txt", b"the plan", embed=False)
    docs = memory.files.create_folder("docs")
    for attempt in (
        lambda: memory.files.create_folder(private.id),
        lambda: memory.files.update_folder("docs", new_name=private.id),
    ):
        with pytest.raises(ValidationError) as refused:
            attempt()
        assert str(refused.value) == (
            f"{private.id!r} is the id of another folder (a folder is reached by its id too); choose another name."
        )
    assert sorted(f.name for f in memory.files.folders()) == ["docs", "private-plans"]
    assert memory.files.rows.put_named_folder(replace(docs, name=private.id)) == private  # (the lock's own check)
    assert memory.files.folder(private.id) == private and memory.files.folder("docs").name == "docs"

    restored = replace(docs, id="folder-from-a-backup", name=private.id)
    assert restore_rows(memory.files, "folders", [folder_row(restored)]) == 1
    assert memory.files.rows.folder(restored.id).name == f"{private.id}_(1)"

    memory.files.rows.put_folder(replace(docs, name=private.id))  # what an older tiermem let a rename do
    assert memory.files.folder(private.id).id == private.id  # the id goes first: the folder stays reachable
    assert [f.name for f in memory.files.files(private.id)] == ["plan.txt"]
