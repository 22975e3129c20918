"""Shared fixtures: real LanceDB in temporary directories, real settings."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tiermem.archive import Archive
from tiermem.core.bucket import Bucket
from tiermem.core.migrate import open_core
from tiermem.core.objects import ObjectCore
from tiermem.config import BlockSpec, Settings, load_settings
from tiermem.embeddings import make_embedder
from tiermem.memory import Memory
from tiermem.store import Store

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


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


def legacy_core(store: Store, blocks: dict[str, list[str]], *, agent: str = "default",
                requests: dict[tuple[str, str], str] | None = None) -> str:
    """Core state as a tiermem before SQLite and object storage kept it: rows in the store's LanceDB core tables.
    Each block gets its first value and then one version per further value. Returns the agent's id."""
    from tiermem.records import Agent, Block, BlockVersion, now, stable_id

    t = now()
    a = Agent(id=stable_id("agent", agent), name=agent, system="", created_at=t, updated_at=t)
    for label, values in blocks.items():
        block = Block(id=stable_id("block", a.id, label), label=label, value=values[0], limit=5000,
                      description=f"{label} block", read_only=False, version=1, updated_at=t)

        def version_of(b: Block) -> BlockVersion:
            return BlockVersion(block_id=b.id, version=b.version, label=b.label, value=b.value, limit=b.limit,
                                description=b.description, read_only=b.read_only, operation="create" if b.version == 1
                                else "append", actor="agent", created_at=b.updated_at)

        store.insert_block(block, version_of(block))
        store.attach(a.id, block.id)
        for value in values[1:]:
            newer = Block(**{**block.__dict__, "value": value, "version": block.version + 1})
            assert store.cas_block(newer, block.version)
            store.append_history(version_of(newer))
            block = newer
    for (tool, key), result in (requests or {}).items():  # keyed as Memory.remember keys them
        store.put_request({"key": f"{a.id}\x1f{tool}\x1f{key}", "agent_id": a.id, "tool": tool, "args_sha256": "abc",
                           "result": result, "created_us": 0})
    store.insert_agent(a)
    return a.id


def spec(label: str, value: str = "", limit: int = 5000, read_only: bool = False) -> BlockSpec:
    return BlockSpec(label=label, value=value, description=f"{label} block", limit=limit, read_only=read_only)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def serve_in_process(settings: Settings):  # type: ignore[no-untyped-def]
    """The real server object over the real store, as ``tiermem serve`` builds it."""
    from tiermem.cli import server_memory
    from tiermem.runtime import MemoryHandle
    from tiermem.server import build_server

    return build_server(MemoryHandle(server_memory(settings)), settings)


def text_of(result) -> str:  # type: ignore[no-untyped-def]
    return "".join(getattr(c, "text", "") for c in result.content)
