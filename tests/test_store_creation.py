"""Several processes opening a new store at once: one creates its tables, the others wait and open them (real
LanceDB, a local directory and moto's S3 server on loopback). LanceDB lets a second creation of a table commit as
a replacement of the first, with every row written to it meanwhile, and a write based on the first then fails."""

from __future__ import annotations

import fcntl
import subprocess
import textwrap
import threading
import time
import uuid
from pathlib import Path

import boto3
import pytest

from tiermem.base.config import load_settings
from tiermem.base.errors import StoreError
from tiermem.core.bucket import Bucket
from tiermem.core.lease import CREATE_LEASE, CREATE_SECONDS, Lease
from tiermem.domain.factory import open_memory
from tiermem.domain.memory import Memory
from tiermem.store.connection import CREATION_LOCK_FILE

from .conftest import PYTHON, ROOT
from .test_object_storage import BUCKET, s3_config, s3_endpoint  # noqa: F401 (the module-scoped moto server fixture)
from .test_object_upkeep import options as s3_options


def objects_under(endpoint: str, prefix: str) -> list[str]:
    s3 = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1"
    )
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{prefix}/")
    return [o["Key"] for p in pages for o in p.get("Contents", [])]


def open_in_thread(open_it: object) -> tuple[threading.Thread, list[Memory]]:
    opened: list[Memory] = []
    thread = threading.Thread(target=lambda: opened.append(open_it()), daemon=True)  # type: ignore[operator]
    thread.start()
    return thread, opened


def test_a_new_store_on_object_storage_is_created_under_the_creation_lease(tmp_path: Path, s3_endpoint: str) -> None:  # noqa: F811
    prefix = f"create-{uuid.uuid4().hex[:8]}"
    settings = load_settings(s3_config(tmp_path, s3_endpoint, prefix))
    other = Lease(Bucket(f"s3://{BUCKET}/{prefix}", settings.storage_options), CREATE_LEASE)
    etag = other.take()  # another replica is creating the store
    assert etag is not None
    thread, opened = open_in_thread(lambda: open_memory(settings, start_embedder=False))
    time.sleep(1.5)
    assert thread.is_alive() and not opened  # waits for the lease
    assert not [k for k in objects_under(s3_endpoint, prefix) if ".lance/" in k]  # and creates nothing meanwhile
    other.give_back(etag)
    thread.join(60)
    assert opened, "the store did not open once the lease was given back"
    memory = opened[0]
    agent = memory.ensure_agent("default").id
    memory.conversation_log(agent, [{"role": "user", "content": "first words"}])
    assert [m.content for m in memory.archive.rows.messages_of(agent)] == ["first words"]
    assert other.take() is not None  # the opener gave the lease back


def test_a_creation_lease_held_too_long_is_a_clear_error(s3_endpoint: str, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    """A replica that waits longer than its timeout for the creation lease (its holder is slow, or died and the
    lease has not run out yet) says so, naming the lease, instead of waiting forever; the wait itself is logged
    once when it starts."""
    bucket = Bucket(f"s3://{BUCKET}/held-{uuid.uuid4().hex[:8]}", s3_options(s3_endpoint))
    assert Lease(bucket, CREATE_LEASE, CREATE_SECONDS).take() is not None  # held, never given back
    started = time.monotonic()
    with pytest.raises(
        StoreError,
        match=r"Another process has held .*core/leases/create\.json for more than 1 s: .*runs out 60 s after",
    ):
        with Lease(bucket, CREATE_LEASE, CREATE_SECONDS).waiting(timeout=1.0):
            raise AssertionError("entered without the lease")
    assert time.monotonic() - started < 10
    waits = [r.getMessage() for r in caplog.records if r.getMessage().startswith("waiting (up to 1 s) for ")]
    assert len(waits) == 1 and "core/leases/create.json: another process holds it" in waits[0], waits


def test_a_new_local_store_is_created_under_the_lock_file(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path / "data", embedding_model="hashing")
    db = Path(settings.store_uri())
    db.mkdir(parents=True)
    with open(db / CREATION_LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process is creating the store
        thread, opened = open_in_thread(lambda: open_memory(settings, start_embedder=False))
        time.sleep(1.5)
        assert thread.is_alive() and not opened
        assert not list(db.glob("*.lance"))
        fcntl.flock(lock, fcntl.LOCK_UN)
    thread.join(60)
    assert opened and {p.name for p in db.glob("*.lance")} >= {"meta.lance", "messages.lance", "passages.lance"}


def test_replicas_opening_a_new_store_at_once_all_open_and_lose_nothing(tmp_path: Path, s3_endpoint: str) -> None:  # noqa: F811
    """Three processes start on a new bucket prefix at the same instant, each logs a message at once: every one
    opens (before: one in ~8 such starts failed with LanceDB's "Incompatible transaction ... Overwrite"), and every
    message is there."""
    config = s3_config(tmp_path, s3_endpoint, f"at-once-{uuid.uuid4().hex[:8]}")
    start = time.time() + 4  # past the imports of all three
    code = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from tiermem.base.config import load_settings
        from tiermem.domain.factory import open_memory
        settings = load_settings(Path({str(config)!r}))
        while time.time() < {start}:
            time.sleep(0.001)
        m = open_memory(settings, start_embedder=False)
        agent = m.ensure_agent("default").id
        m.conversation_log(agent, [{{"role": "user", "content": "from " + sys.argv[1]}}])
        print("opened", flush=True)
    """)
    procs = [
        subprocess.Popen(
            [PYTHON, "-c", code, str(i)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for i in range(3)
    ]
    outs = [p.communicate(timeout=180) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and out.strip() == "opened", err[-2000:]
    memory = open_memory(load_settings(config), start_embedder=False)
    agent = memory.ensure_agent("default").id
    said = sorted(m.content for m in memory.archive.rows.messages_of(agent))
    assert said == ["from 0", "from 1", "from 2"]
    assert [a.name for a in memory.list_agents()] == ["default"]


def test_an_index_another_process_was_building_at_open_is_said_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Processes opening a new store at once race to build its indexes; the one whose commit loses (a "Retryable
    commit conflict") leaves it to the other: normal, so nothing at WARNING (no Rust error on a CLI's stderr)."""
    import logging

    import lancedb

    from tiermem.store import Store

    uri = str(tmp_path / "db")
    store = Store(uri, embedding_model="hashing-384", embedding_dim=384)
    rows = [
        {"id": f"m{i}", "agent_id": "a", "role": "user", "content": f"turn {i}", "text": f"turn {i}"} for i in range(3)
    ]
    for r in rows:
        store.rows.add_rows("messages", [r])  # one small fragment each: another process's upkeep compacts them
    store.conn.tables["messages"].drop_index("agent_id_idx")  # as on a store whose first opener is still building it
    # this process's handle looks for newer versions only when told (as within ``read_staleness``), so the other
    # process's compaction lands while its index build runs: a real commit conflict from LanceDB
    monkeypatch.setitem(
        store.conn.tables, "messages", lancedb.connect(uri, read_consistency_interval=None).open_table("messages")
    )
    lancedb.connect(uri).open_table("messages").optimize()
    with caplog.at_level(logging.DEBUG, logger="tiermem.store.indexes"):
        store.indexes.ensure_search_indexes()
    said = [r for r in caplog.records if r.name == "tiermem.store.indexes"]
    assert any("agent_id index of messages not built here" in r.getMessage() for r in said), said
    assert [r.getMessage() for r in said if r.levelno >= logging.INFO] == []


def test_a_damaged_table_is_said_at_once_not_taken_for_another_creator(
    s3_endpoint: str,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Opening a table retried any library error up to 40 times (~5 s locally; on object storage each try is also a
    round of LanceDB's listings and retries), taking it for another process still creating the table. A table
    whose manifest is damaged is no such race: the open fails at once, with the library's own words."""
    import logging

    from tiermem.store import Store

    prefix = f"damaged-{uuid.uuid4().hex[:8]}"
    uri = f"s3://{BUCKET}/{prefix}"
    Store(uri, embedding_model="hashing-384", embedding_dim=384, storage_options=s3_options(s3_endpoint))
    s3 = boto3.client(
        "s3", endpoint_url=s3_endpoint, aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1"
    )
    manifests = [k for k in objects_under(s3_endpoint, prefix) if k.startswith(f"{prefix}/passages.lance/_versions/")]
    assert manifests
    for key in manifests:
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"not a manifest")
    with caplog.at_level(logging.DEBUG, logger="tiermem.store.connection"):
        with pytest.raises(
            StoreError, match=f"Could not open the object store {uri}: .*does not have sufficient data"
        ) as failed:
            Store(uri, embedding_model="hashing-384", embedding_dim=384, storage_options=s3_options(s3_endpoint))
    retried = [r.getMessage() for r in caplog.records if "being created by another process" in r.getMessage()]
    assert retried == [], retried
    assert ".cargo" not in str(failed.value)


def test_a_table_listed_before_its_first_commit_is_waited_for(tmp_path: Path) -> None:
    """The race the retries are for: a table listed (its directory made) and not yet committed reads "not found";
    the open goes on to create it."""
    from tiermem.store import Store

    uri = tmp_path / "db"
    (uri / "passages.lance").mkdir(parents=True)
    store = Store(str(uri), embedding_model="hashing-384", embedding_dim=384)
    assert store.conn.tables["passages"].count_rows() == 0
