"""Shared fixtures: real LanceDB in temporary directories, real settings."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tiermem.base.config import BlockSpec, Settings, load_settings
from tiermem.core.bucket import Bucket
from tiermem.core.migrate import open_core
from tiermem.core.objects import ObjectCore
from tiermem.domain.archive import Archive
from tiermem.domain.memory import Memory
from tiermem.embedding.embedders import make_embedder
from tiermem.store import Store

from . import watchdog

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def pytest_configure(config: pytest.Config) -> None:
    watchdog.install(config)  # a run whose workers fall silent ends instead of waiting forever (tests/watchdog.py)


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Keep the user's real config, data dir, hook sockets and environment out of every test."""
    for key in list(os.environ):
        if key.startswith("TIERMEM_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    # The servers' hook sockets: a private directory of this test's own, short (Unix socket paths are 108 bytes at most)
    runtime = Path(tempfile.mkdtemp(prefix="tmrt-"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    yield
    shutil.rmtree(runtime, ignore_errors=True)
    _finish_background_work()


# tiermem's one-shot background threads (opening the store and the archive, loading the model, an upkeep, a vector
# backfill): a test that ends while one still runs in native code (LanceDB, onnxruntime) would otherwise leave it
# running into the next test. A worker died of a segmentation fault in LanceDB's native code with two such threads of
# an ended test still running (CI, 2026-12-07); each test now waits for them, a bounded time. Not "tiermem-warm": it
# waits, in Python, for an archive a server of an ended test may never start opening (until the process exits).
ONE_SHOT_THREADS = frozenset(
    ["tiermem-open", "tiermem-open-archive", "tiermem-embedder", "tiermem-optimize", "tiermem-backfill"]
)
BACKGROUND_WAIT = 30.0  # seconds in all, per test


def _finish_background_work() -> None:
    deadline = time.monotonic() + BACKGROUND_WAIT
    for thread in threading.enumerate():
        if thread.name in ONE_SHOT_THREADS and thread.is_alive():
            thread.join(max(0.0, deadline - time.monotonic()))


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Every tool published (``tools = ["all"]``): tests exercise each tool; the default set's own tests ask for it."""
    return load_settings(data_dir=tmp_path / "data", embedding_model="hashing", tools=["all"])


def memory_over(store: Store, **kw: Any) -> Memory:
    """A Memory over ``store`` with its Archive on the hashing embedder (``open_memory`` builds both from settings);
    without ``core``, the core state ``open_core`` picks for the store (SQLite beside a local one)."""
    if "core" not in kw:
        local = "://" not in store.uri
        kw["core"] = open_core(store, "auto", Path(store.uri).parent if local else None)
    return Memory(Archive(store, make_embedder("hashing", Path())), **kw)


def object_core(name: str) -> ObjectCore:
    """The object-storage core state on an in-process object store (obstore's memory store: same code path as
    S3 but for the transport; tests/test_object_storage.py runs it on moto's S3 server)."""
    return ObjectCore.open(Bucket(f"memory://{name}"))


@pytest.fixture(params=["sqlite", "object"])
def memory(settings: Settings, request: pytest.FixtureRequest) -> Memory:
    """A Memory on each core-state backend: the same tests pass on both."""
    store = Store(settings.store_uri(), embedding_model="hashing-384", embedding_dim=384)
    core = open_core(store, "sqlite", settings.resolved_data_dir()) if request.param == "sqlite" else object_core("t")
    return memory_over(store, default_blocks=settings.default_blocks, default_system=settings.system, core=core)


def legacy_core(
    store: Store,
    blocks: dict[str, list[str]],
    *,
    agent: str = "default",
    requests: dict[tuple[str, str], str] | None = None,
) -> str:
    """Core state as a tiermem before SQLite and object storage kept it: rows in the store's LanceDB core tables
    (the agent row written last, as that tiermem did). Each block gets its first value and then one version per
    further value, each with its whole-value history row. Returns the agent's id."""
    from tiermem.base.records import Agent, Block, BlockVersion, now, stable_id, to_us
    from tiermem.core.rows import agent_row, block_row, version_row

    t = now()
    a = Agent(id=stable_id("agent", agent), name=agent, system="", created_at=t, updated_at=t)
    for label, values in blocks.items():
        history = []
        for version, value in enumerate(values, start=1):
            block = Block(
                id=stable_id("block", a.id, label),
                label=label,
                value=value,
                limit=5000,
                description=f"{label} block",
                read_only=False,
                version=version,
                updated_at=t,
            )
            history.append(
                version_row(
                    BlockVersion(
                        block_id=block.id,
                        version=version,
                        label=label,
                        value=value,
                        limit=block.limit,
                        description=block.description,
                        read_only=False,
                        operation="create" if version == 1 else "append",
                        actor="agent",
                        created_at=t,
                    )
                )
            )
        store.rows.merge_rows("blocks", "id", [block_row(block)])
        store.rows.merge_rows("block_history", "key", history)
        store.rows.merge_rows(
            "attachments",
            "key",
            [{"key": f"{a.id}:{block.id}", "agent_id": a.id, "block_id": block.id, "created_us": to_us(t)}],
        )
    for (tool, key), result in (requests or {}).items():  # keyed as Memory.remember keys them
        store.rows.merge_rows(
            "requests",
            "key",
            [
                {
                    "key": f"{a.id}\x1f{tool}\x1f{key}",
                    "agent_id": a.id,
                    "tool": tool,
                    "args_sha256": "abc",
                    "result": result,
                    "created_us": 0,
                }
            ],
        )
    store.rows.merge_rows("agents", "id", [agent_row(a)])
    return a.id


def spec(label: str, value: str = "", limit: int = 5000, read_only: bool = False) -> BlockSpec:
    return BlockSpec(label=label, value=value, description=f"{label} block", limit=limit, read_only=read_only)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def serve_in_process(settings: Settings):  # type: ignore[no-untyped-def]
    """The real server object over the real store, as ``tiermem serve`` builds it."""
    from tiermem.cli.main import server_memory
    from tiermem.server.app import build_server
    from tiermem.server.runtime import MemoryHandle

    return build_server(MemoryHandle(server_memory(settings), agent=settings.agent), settings)


def text_of(result) -> str:  # type: ignore[no-untyped-def]
    return "".join(getattr(c, "text", "") for c in result.content)


def stored_result(memory: Memory, agent_id: str, tool: str, key: str) -> str | None:
    """The result recorded under an idempotency key (None: nothing, or a claim of a call still writing)."""
    from tiermem.domain.memory import request_key

    stored = memory.core.get_request(request_key(agent_id, tool, key))
    return None if stored is None or stored.pending else stored.result


def store_result(memory: Memory, agent_id: str, tool: str, key: str, args_sha256: str, result: str) -> None:
    """Record ``result`` under an idempotency key as a keyed call does: claim the key, then finish the claim."""
    from tiermem.domain import idempotency

    claim = idempotency.claim(memory, agent_id, tool, key, args_sha256)
    assert claim.mine is not None, f"idempotency key {key!r} is taken already"
    idempotency.finish(memory, agent_id, claim.mine, result)
