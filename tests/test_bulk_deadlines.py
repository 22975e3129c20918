"""The bulk commands' longer deadlines (``object_deadlines.for_bulk``): they reach LanceDB's store only (and a
server's upkeep), never the core state's client (its requests and the leases' renewals keep a server's); and their
whole-request ``timeout`` does not cut the longer ``read_timeout`` short (the client's own is 30 s). moto's S3 server
on loopback behind a proxy."""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

import pytest

from tiermem.base.config import BlockSpec, Settings
from tiermem.base.errors import StoreError
from tiermem.base.object_deadlines import BULK_READ_TIMEOUT, BULK_TIMEOUT, DEFAULTS, for_bulk
from tiermem.cli.main import build_parser, command_settings
from tiermem.core.bucket import Bucket
from tiermem.domain.factory import open_memory

from .test_object_errors import HoldingProxy, ThrottledProxy, config_at
from .test_object_storage import BUCKET, s3_endpoint  # noqa: F401 (the module-scoped moto fixture)


@pytest.fixture(autouse=True)
def _no_deadline_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("TIMEOUT", "READ_TIMEOUT", "CONNECT_TIMEOUT", "CLIENT_RETRY_TIMEOUT"):
        monkeypatch.delenv(key, raising=False)


def settings_of(config: Path, tmp_path: Path, *command: str) -> Settings:
    return command_settings(build_parser().parse_args([*command, "--config", str(config), "--data-dir", str(tmp_path)]))


def test_a_bulk_command_gives_lancedb_longer_deadlines_and_the_core_state_its_own(
    tmp_path: Path,
    s3_endpoint: str,  # noqa: F811
) -> None:
    """`tiermem optimize` (a bulk command): LanceDB's store gets the bulk deadlines, ``timeout`` with them; the
    options the core state's client is opened with stay as configured (a core PUT held 8 s fails after a server's
    5 s ``read_timeout``; with the bulk ones it went through after 8 s, outlasting what a lease allows for)."""
    port = int(s3_endpoint.rsplit(":", 1)[1])
    prefix = f"bulk-{uuid.uuid4().hex[:8]}"
    proxy = HoldingProxy(port, re.compile(rb"(?!)"), 8)  # holds nothing until the agent is made
    config = config_at(tmp_path, f"http://127.0.0.1:{proxy.port}")
    config.write_text(re.sub(r'uri = "[^"]*"', f'uri = "s3://{BUCKET}/{prefix}"', config.read_text()), "utf-8")
    served = settings_of(config, tmp_path, "blocks", "list")
    bulk = settings_of(config, tmp_path, "optimize")
    configured = served.storage_options
    assert bulk.storage_options == configured  # what the core state's Bucket takes
    assert served.lance_storage_options() == configured
    lance = bulk.lance_storage_options()
    assert lance == {**configured, "timeout": BULK_TIMEOUT, "read_timeout": BULK_READ_TIMEOUT}
    memory = open_memory(bulk, start_embedder=False)
    try:
        agent = memory.ensure_agent("default").id
        memory.archival_insert(agent, "LanceDB writes through the proxy at once", None)
        proxy.held = re.compile(rb"PUT /" + BUCKET.encode() + rb"/" + prefix.encode() + rb"/core/blocks/")
        started = time.monotonic()
        with pytest.raises(StoreError, match="did not answer in time"):
            memory.create_block(agent, BlockSpec(label="notes", value="held"))
        took = time.monotonic() - started
        assert proxy.holds >= 1 and took < 8, took  # the core's deadline (5 s), not the bulk command's
    finally:
        proxy.close()
        memory.core.close()


def test_a_bulk_upload_may_outlast_the_clients_own_whole_request_timeout(
    tmp_path: Path,
    s3_endpoint: str,  # noqa: F811
) -> None:
    """``read_timeout = "60s"`` alone was cut at the client's whole-request 30 s: a 4 MB upload over ~125 KB/s
    (~32 s; the docs say a 5 MB part needs ~0.7 Mbit/s) failed after 30 s. With the bulk ``timeout`` it goes through;
    the options are the ones `tiermem import` opens LanceDB's store with."""
    proxy = ThrottledProxy(int(s3_endpoint.rsplit(":", 1)[1]), rate=125_000)
    config = config_at(tmp_path, f"http://127.0.0.1:{proxy.port}")
    bulk = settings_of(config, tmp_path, "import", str(tmp_path / "nothing.af"))
    options = bulk.lance_storage_options()
    uri = bulk.uri
    started = time.monotonic()
    try:
        Bucket(uri, {**options, "client_max_retries": "0"}).put("big", b"x" * 4_000_000)
    finally:
        proxy.close()
    assert time.monotonic() - started > 30  # the proof needs an upload past the client's own 30 s


def test_bulk_deadlines_keep_what_the_configuration_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    uri = "s3://b/p"
    assert for_bulk(uri, None) == {"timeout": BULK_TIMEOUT, "read_timeout": BULK_READ_TIMEOUT}
    assert for_bulk(uri, {"read_timeout": "9s"}) == {"read_timeout": "9s", "timeout": BULK_TIMEOUT}
    assert for_bulk(uri, {"timeout": "300s"}) == {"timeout": "300s"}  # the whole request's: read_timeout stays out
    assert for_bulk("/some/dir", None) == {} and for_bulk(None, {}) == {}  # no requests
    monkeypatch.setenv("TIMEOUT", "200s")  # LanceDB reads it from the environment
    assert for_bulk(uri, None) == {}
    assert int(BULK_TIMEOUT.removesuffix("s")) > int(BULK_READ_TIMEOUT.removesuffix("s"))  # it cuts nothing short
    assert DEFAULTS["read_timeout"] != BULK_READ_TIMEOUT


def test_a_servers_background_upkeep_gives_lancedb_the_bulk_deadlines_and_its_requests_keep_theirs(
    tmp_path: Path,
    s3_endpoint: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server's upkeep compacts (uploads whole data files) as `tiermem optimize` does: the 5 s ``read_timeout``
    of the request path cut such uploads short on a slow link. Each table an upkeep optimizes is opened on a
    connection with the bulk deadlines; the tables the server's calls use keep the server's."""
    from tiermem.base.config import load_settings
    from tiermem.base.object_deadlines import READ_TIMEOUT
    from tiermem.store import connection as connection_module

    opened: dict[int, dict[str, str]] = {}  # id(table) -> the storage options of the connection it was opened on
    real = connection_module.lancedb

    class Db:
        def __init__(self, db: object, options: dict[str, str]) -> None:
            self.db, self.options = db, options

        def open_table(self, name: str) -> object:
            table = self.db.open_table(name)  # type: ignore[attr-defined]
            opened[id(table)] = self.options
            return table

        def create_table(self, *args: object, **kw: object) -> object:
            table = self.db.create_table(*args, **kw)  # type: ignore[attr-defined]
            opened[id(table)] = self.options
            return table

        def __getattr__(self, name: str) -> object:
            return getattr(self.db, name)

    class Lance:
        Session = real.Session

        @staticmethod
        def connect(uri: str, **kw: object) -> Db:
            return Db(real.connect(uri, **kw), dict(kw.get("storage_options") or {}))  # type: ignore[arg-type]

    monkeypatch.setattr(connection_module, "lancedb", Lance)
    uri = f"s3://{BUCKET}/upkeep-{uuid.uuid4().hex[:8]}"
    endpoint = {"aws_access_key_id": "test", "aws_secret_access_key": "test", "region": "us-east-1"}
    settings = load_settings(
        uri=uri,
        embedding_model="hashing",
        storage_options={**endpoint, "allow_http": "true", "aws_endpoint": s3_endpoint},
        data_dir=tmp_path / "d",
    )
    memory = open_memory(settings, start_embedder=False)  # a server's settings (no bulk command)
    try:
        memory.archival_insert(memory.ensure_agent("default").id, "a passage to compact", None)
        store = memory.archive.store
        optimized: list[dict[str, str]] = []
        table_class = type(store.conn.tables["passages"])
        optimize = table_class.optimize

        def recorded(self: object, *args: object, **kw: object) -> object:
            optimized.append(opened.get(id(self), {}))
            return optimize(self, *args, **kw)

        monkeypatch.setattr(table_class, "optimize", recorded)
        report = store.indexes.optimize(background=True)
        assert "passages" in report and report["passages"].startswith("ok"), report
        assert optimized, "the upkeep optimized no table"
        for options in optimized:
            assert options.get("read_timeout") == BULK_READ_TIMEOUT and options.get("timeout") == BULK_TIMEOUT, options
        for table in store.conn.tables.values():  # the request path: a server's deadlines
            assert opened[id(table)].get("read_timeout") == READ_TIMEOUT and "timeout" not in opened[id(table)]
    finally:
        memory.core.close()
