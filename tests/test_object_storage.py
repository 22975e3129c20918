"""tiermem on object storage: a real S3-compatible server (moto) on loopback, real ``tiermem`` server processes (the
CLI commands run in process).

One moto server per module; each test uses its own prefix in one bucket.
"""

from __future__ import annotations

import json
import socket
import subprocess
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client

from .cli_inproc import run_cli
from .conftest import PYTHON, ROOT, text_of
from .test_reliability import Target, kill_during_block_edits, kill_during_bulk_insert, kill_during_import
from .test_transports import HTTP_TOKEN, free_port, http_target, server_env, wait_for_port

moto_server = pytest.importorskip("moto.server", reason="moto[server] is not installed (pip install -e '.[test]')")
boto3 = pytest.importorskip("boto3", reason="boto3 (installed with moto) is missing")

BUCKET = "tiermem-test"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    from .moto_s3 import S3Server

    server = S3Server(port)  # moto with S3's atomic conditional writes
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    s3 = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test", region_name="us-east-1"
    )
    # moto keeps its buckets per Python process, not per server: another module's server (tests/test_crash.py
    # reuses this fixture) may have made the bucket already. Each test uses its own prefix in it.
    if BUCKET not in {x["Name"] for x in s3.list_buckets().get("Buckets", [])}:
        s3.create_bucket(Bucket=BUCKET)
    # LanceDB commits with If-None-Match; the replica test means something only if the store honours it.
    probe = f"probe-{uuid.uuid4().hex}"
    s3.put_object(Bucket=BUCKET, Key=probe, Body=b"1", IfNoneMatch="*")
    with pytest.raises(Exception, match="PreconditionFailed"):
        s3.put_object(Bucket=BUCKET, Key=probe, Body=b"2", IfNoneMatch="*")
    try:
        yield endpoint
    finally:
        server.stop()


def s3_config(tmp_path: Path, endpoint: str, prefix: str, model: str = "hashing") -> Path:
    """The exact settings the README documents for an S3-compatible store."""
    path = tmp_path / f"{prefix}.toml"
    path.write_text(
        f'uri = "s3://{BUCKET}/{prefix}"\n'
        f'embedding_model = "{model}"\n'
        "[storage_options]\n"
        f'aws_endpoint = "{endpoint}"\n'
        'aws_access_key_id = "test"\n'
        'aws_secret_access_key = "test"\n'
        'region = "us-east-1"\n'
        'allow_http = "true"\n',
        encoding="utf-8",
    )
    return path


def env(tmp_path: Path) -> dict[str, str]:
    e = server_env(tmp_path)
    e.pop("TIERMEM_EMBEDDING_MODEL", None)  # the config file decides
    return e


def start_http(tmp_path: Path, config: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen(
        [PYTHON, "-m", "tiermem", "serve", "--transport", "http", "--port", str(port), "--config", str(config)],
        cwd=ROOT,
        env={**env(tmp_path), "TIERMEM_HTTP_TOKEN": HTTP_TOKEN},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    wait_for_port(port, proc, timeout=120)
    return proc, port


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(timeout=30)


def cli(tmp_path: Path, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``tiermem ARGS --config CONFIG``, in this process (``run_cli``); servers are started as processes."""
    return run_cli(*args, "--config", str(config), env=env(tmp_path))


async def ok(c: Client, tool: str, args: dict[str, object]) -> str:
    r = await c.call_tool(tool, args)
    assert not r.is_error, (tool, text_of(r))
    return text_of(r)


@pytest.mark.anyio
async def test_s3_serve_edit_search_restart_doctor_optimize_export_import(tmp_path: Path, s3_endpoint: str) -> None:
    config = s3_config(tmp_path, s3_endpoint, f"full-{uuid.uuid4().hex[:8]}", model="default")
    proc, port = start_http(tmp_path, config)
    try:
        async with Client(http_target(f"http://127.0.0.1:{port}/mcp"), cache=None, read_timeout_seconds=120) as c:
            names = {t.name for t in (await c.list_tools()).tools}
            await ok(c, "core_memory_append", {"label": "human", "content": "Prefers tea"})
            await ok(c, "core_memory_replace", {"label": "human", "old_content": "tea", "new_content": "green tea"})
            await ok(c, "memory_insert", {"label": "human", "new_string": "Lives in Oslo", "insert_line": 0})
            await ok(c, "memory_replace", {"label": "human", "old_string": "Oslo", "new_string": "Bergen"})
            await ok(c, "memory_open", {"label": "persona"})  # a rethink needs a view first (sessionless)
            await ok(c, "memory_rethink", {"label": "persona", "new_memory": "I am a careful assistant."})
            if "memory_apply_patch" in names:
                await ok(
                    c,
                    "memory_apply_patch",
                    {"label": "persona", "patch": "-I am a careful assistant.\n+I am a very careful assistant."},
                )
            r = await c.call_tool("memory_replace", {"label": "human", "old_string": "nope", "new_string": "x"})
            assert r.is_error
            ids = json.loads(
                await ok(c, "archival_memory_insert", {"content": "The launch is on March 3rd", "tags": ["work"]})
            )["ids"]
            await ok(c, "archival_memory_insert", {"content": "My cat is called Miso"})
            found = json.loads(await ok(c, "archival_memory_search", {"query": "when do we launch?"}))
            assert found["results"][0]["id"] == ids[0]  # the real embedding model over S3
            await ok(
                c,
                "conversation_log",
                {
                    "messages": [
                        {"role": "user", "content": "I bought a red bicycle"},
                        {"role": "assistant", "content": "Nice!"},
                    ]
                },
            )
            hits = await ok(c, "conversation_search", {"query": "bicycle"})
            assert "red bicycle" in hits
    finally:
        stop(proc)

    proc, port = start_http(tmp_path, config)  # restart: everything is read back from the bucket
    try:
        async with Client(http_target(f"http://127.0.0.1:{port}/mcp"), cache=None, read_timeout_seconds=120) as c:
            core = (await c.read_resource("memory://core")).contents[0].text
            assert "Prefers green tea" in core and "Lives in Bergen" in core and "careful assistant" in core
            found = json.loads(await ok(c, "archival_memory_search", {"query": "cat name"}))
            assert "Miso" in found["results"][0]["content"]
            assert "red bicycle" in await ok(c, "conversation_search", {"query": "bicycle"})
    finally:
        stop(proc)

    doctor = cli(tmp_path, config, "doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    opt = cli(tmp_path, config, "optimize")
    assert opt.returncode == 0, opt.stderr
    backup = tmp_path / "backup.jsonl"
    exp = cli(tmp_path, config, "export", "-o", str(backup))
    assert exp.returncode == 0, exp.stderr
    assert "Miso" in backup.read_text(encoding="utf-8")
    other = s3_config(tmp_path, s3_endpoint, f"restored-{uuid.uuid4().hex[:8]}", model="default")
    imp = cli(tmp_path, other, "import", str(backup))
    assert imp.returncode == 0, imp.stderr
    shown = cli(tmp_path, other, "blocks", "show", "human")
    assert "Prefers green tea" in shown.stdout and "Lives in Bergen" in shown.stdout, shown.stderr
    assert "Miso" in cli(tmp_path, other, "search", "cat name").stdout


REPLICAS, CLIENTS, APPENDS = 2, 8, 5


@pytest.mark.anyio
@pytest.mark.filterwarnings("ignore:resources/(un)?subscribe is removed")
async def test_replicas_on_one_bucket_lose_and_double_nothing(tmp_path: Path, s3_endpoint: str) -> None:
    config = s3_config(tmp_path, s3_endpoint, f"replicas-{uuid.uuid4().hex[:8]}")
    procs = [start_http(tmp_path, config) for _ in range(REPLICAS)]
    try:

        async def worker(w: int) -> None:
            port = procs[w % REPLICAS][1]
            async with Client(http_target(f"http://127.0.0.1:{port}/mcp"), cache=None, read_timeout_seconds=240) as c:
                for i in range(APPENDS):
                    await ok(c, "core_memory_append", {"label": "human", "content": f"w{w}-a{i}"})

        async with anyio.create_task_group() as tg:
            for w in range(CLIENTS):
                tg.start_soon(worker, w)

        expected = {f"w{w}-a{i}" for w in range(CLIENTS) for i in range(APPENDS)}
        for _, port in procs:  # every replica reads the same block
            async with Client(http_target(f"http://127.0.0.1:{port}/mcp"), cache=None, read_timeout_seconds=120) as c:
                value = (await c.read_resource("memory://blocks/human")).contents[0].text
                lines = Counter(line for line in value.split("\n") if line.startswith("w"))
                lost = expected - set(lines)
                doubled = {k: n for k, n in lines.items() if n > 1}
                assert not lost and not doubled, (sorted(lost), doubled)

        # A client subscribed on replica 0 learns of an edit made through replica 1 (the store is polled every
        # watch_seconds while anyone subscribes; a bounded wait, not a timed assert on speed).
        received: list[str] = []

        async def handler(message) -> None:  # type: ignore[no-untyped-def]
            root = getattr(message, "root", message)
            if getattr(root, "method", None) == "notifications/resources/updated":
                received.append(str(root.params.uri))

        async with Client(
            http_target(f"http://127.0.0.1:{procs[0][1]}/mcp"),
            cache=None,
            mode="legacy",
            message_handler=handler,
            read_timeout_seconds=120,
        ) as watcher:
            await watcher.subscribe_resource("memory://blocks/human")
            await anyio.sleep(3)  # let the watcher take its first look
            async with Client(
                http_target(f"http://127.0.0.1:{procs[1][1]}/mcp"), cache=None, read_timeout_seconds=120
            ) as other:
                await ok(other, "core_memory_append", {"label": "human", "content": "edited on replica 1"})
            with anyio.fail_after(120):
                while "memory://blocks/human" not in received:
                    await anyio.sleep(0.1)
            value = (await watcher.read_resource("memory://blocks/human")).contents[0].text
            assert "edited on replica 1" in value
    finally:
        for proc, _ in procs:
            stop(proc)


def s3_target(tmp_path: Path, endpoint: str, name: str) -> Target:
    config = s3_config(tmp_path, endpoint, f"{name}-{uuid.uuid4().hex[:8]}")
    return Target(["--config", str(config)], env(tmp_path), config=config)


def test_s3_kill_during_block_edits(tmp_path: Path, s3_endpoint: str) -> None:
    m = kill_during_block_edits(s3_target(tmp_path, s3_endpoint, "kill-edits"), acks=15)
    assert m.archive.store.uri.startswith("s3://")


def test_s3_kill_during_bulk_insert(tmp_path: Path, s3_endpoint: str) -> None:
    kill_during_bulk_insert(s3_target(tmp_path, s3_endpoint, "kill-bulk"), batches=5)


def test_s3_kill_during_import(tmp_path: Path, s3_endpoint: str) -> None:
    # killed after its first batch of 256 messages: two more, then the passages, are still to come (each a commit to
    # the bucket). Every message is scanned for credentials before the first is written: no more of them than that.
    kill_during_import(
        s3_target(tmp_path, s3_endpoint, "kill-import"), tmp_path, messages=768, passages=500, stage="messages"
    )


def test_s3_folders_files_open_grep_and_search(tmp_path: Path, s3_endpoint: str) -> None:
    """Folders and files on object storage: uploaded by one process, opened, grepped and searched by another."""
    from tiermem.base.config import load_settings
    from tiermem.domain.factory import open_memory
    from tiermem.domain.file_views import OpenRequest

    config = s3_config(tmp_path, s3_endpoint, f"files-{uuid.uuid4().hex[:8]}")
    writer = open_memory(load_settings(config))
    agent = writer.ensure_agent("default")
    writer.files.create_folder("specs", description="Product specs")
    writer.files.attach(agent.id, "specs")  # while empty: every file starts closed
    done = writer.files.upload_many(
        "specs",
        [
            ("api.md", b"# API\nThe rate limit is 40 requests per minute.\n", ""),
            ("notes.txt", b"remember the milk\nTODO: call the plumber\n", ""),
        ],
    )
    assert [u.outcome for u in done] == ["added", "added"]

    reader = open_memory(load_settings(config))  # another process on the same bucket
    rid = reader.ensure_agent("default").id
    assert reader.open_files(rid, [OpenRequest("specs/notes.txt", 1, 1)]) == "* Opened specs/notes.txt (lines 2-2)"
    assert "[Viewing lines 2 to 2 (out of 2 lines)]\n2: TODO: call the plumber" in reader.render_core(rid)
    assert "=== specs/notes.txt:2 ===" in reader.grep_files(rid, "plumber", None, 0, None)
    found = reader.semantic_search_files(rid, "rate limit requests per minute", 2)
    assert "=== specs/api.md (passage #1) ===" in found
    assert [f.status for f in writer.files.files("specs")] == ["completed", "completed"]


def test_s3_one_folder_name_created_by_two_replicas_at_once_is_one_folder(tmp_path: Path, s3_endpoint: str) -> None:
    """Replicas on one bucket creating one folder name at once (`folders create`, a first `folders sync`): one
    folder of it; the name is checked under the write lease."""
    from tiermem.base.config import load_settings
    from tiermem.domain.factory import open_memory

    from .test_upload_batches import create_at_once

    config = s3_config(tmp_path, s3_endpoint, f"names-{uuid.uuid4().hex[:8]}")
    replicas = [open_memory(load_settings(config), start_embedder=False) for _ in range(2)]
    said, given = create_at_once(replicas, "docs")
    assert said.count("created") == 1 and len(said) == 2 and len(set(given)) == 1
    assert sorted(f.name for f in replicas[1].files.folders()) == ["docs", "docs-synced"]
