"""Importing LanceDB without the parts of its REST client that a local or object-storage store never uses.

``import lancedb`` imports ``lance_namespace``, which imports its generated REST client
(``lance_namespace_urllib3_client``): ~160 pydantic models, and, from the package's ``__init__``, nine API modules
(~41,000 lines of ``validate_call``-wrapped methods) with their urllib3 client. A local or object-storage store
uses none of it. Two measures, both scoped to the one ``import lancedb`` below:

- **validators built on first use**: pydantic's ``defer_build`` default is on during the import, so those models
  build their validators on first use (measured: ~19 -> ~11 MB resident, ~0.25 s less archive opening). The
  default is restored right after, so models defined later (ours, the MCP SDK's) build as usual. pydantic keeps
  that default in a private table; if it moves, this part is skipped (a test in tests/test_footprint.py notices).
- **the client package's ``__init__`` run on first use**: the package is registered with its path set, so its
  models import as usual, but the API modules its ``__init__`` imports load only when a name defined there is first
  read (``from lance_namespace_urllib3_client import ApiClient`` works as before). Measured: -6.4 MB resident.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import threading
from types import ModuleType
from typing import Any

REST_CLIENT = "lance_namespace_urllib3_client"
_PENDING = "__tiermem_pending_init__"


class _InitOnFirstUse(ModuleType):
    """A package whose own ``__init__`` runs on the first read of a name it does not have yet.

    Submodules import without it (``__path__`` is set). A read from another thread waits for the ``__init__`` to
    finish; a read from inside the ``__init__`` itself fails as it would during any import.
    """

    def __getattr__(self, attr: str) -> Any:
        pending = self.__dict__.get(_PENDING)
        if pending is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}")
        lock, loader = pending
        with lock:
            if self.__dict__.pop(_PENDING, None) is not None:
                loader.exec_module(self)
        return getattr(self, attr)


def defer_package_init(name: str) -> bool:
    """Register package ``name`` so that its ``__init__`` runs on first use; False (nothing done) if it is already
    imported, not installed, or not a package."""
    if name in sys.modules:
        return False
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return False
    module = importlib.util.module_from_spec(spec)
    module.__class__ = _InitOnFirstUse
    module.__dict__[_PENDING] = (threading.RLock(), spec.loader)
    sys.modules[name] = module
    return True


def import_lancedb() -> ModuleType:
    """``lancedb``, imported (once per process) without building or loading the REST client it does not use."""
    if "lancedb" in sys.modules:
        return sys.modules["lancedb"]
    # Lance's Rust logger prints WARN lines (e.g. "No existing dataset at ..., it will be created" when a table is
    # made) straight to the terminal; our own messages say what matters. LANCEDB_LOG set by the user still wins.
    os.environ.setdefault("LANCEDB_LOG", "error")
    defer_package_init(REST_CLIENT)
    try:
        from pydantic._internal._config import config_defaults
    except ImportError:  # pydantic moved its private table: import as usual
        return importlib.import_module("lancedb")
    if "defer_build" not in config_defaults:
        return importlib.import_module("lancedb")
    before = config_defaults["defer_build"]
    config_defaults["defer_build"] = True
    try:
        return importlib.import_module("lancedb")
    finally:
        config_defaults["defer_build"] = before
