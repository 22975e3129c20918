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
from tiermem.core.migrate import open_core
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
    """A Memory over ``store`` with its Archive on the hashing embedder (``open_memory`` builds both from settings)."""
    return Memory(Archive(store, make_embedder("hashing", Path())), **kw)


@pytest.fixture(params=["sqlite", "lancedb"])
def memory(settings: Settings, request: pytest.FixtureRequest) -> Memory:
    """A Memory on each core-state backend: the same tests pass on both."""
    store = Store(settings.store_uri(), embedding_model="hashing-384", embedding_dim=384)
    core = open_core(store, request.param, settings.resolved_data_dir())
    return memory_over(store, default_blocks=settings.default_blocks, default_system=settings.system, core=core)


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
