"""Importing LanceDB without building validators for the REST-client models it never uses on a local store.

``import lancedb`` imports ``lance_namespace``, which imports its generated REST client: ~160 pydantic models
whose validators pydantic builds at class creation (measured: ~19 MB resident, ~0.25 s of the archive
opening). A local or object-storage store never validates one of them. Importing LanceDB with pydantic's
``defer_build`` default on makes those classes build their validators on first use instead; every model
still works (its first use builds it). The default is restored right after the import, so models defined
later (ours, the MCP SDK's) build as usual. pydantic keeps that default in a private table; if it moves,
LanceDB is imported plainly (a test in tests/test_footprint.py notices).
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType


def import_lancedb() -> ModuleType:
    """``lancedb``, imported (once per process) with pydantic models' validators built on first use."""
    if "lancedb" in sys.modules:
        return sys.modules["lancedb"]
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
