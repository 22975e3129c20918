"""Embedding model names read without importing the embedders: ``factory.check_model`` runs before a server's MCP
handshake, which nothing heavy may delay (tests/test_coldstart.py)."""

from __future__ import annotations

import re

HASHING_DIM = 384  # "hashing" alone

_HASHING = re.compile(r"hashing(?:-(\d+))?")


def hashing_dim(model: str) -> int | None:
    """The dimension of the hashing embedder ``model`` names ("hashing", "hashing-<dim>", any case), else None."""
    match = _HASHING.fullmatch(model.strip().lower())
    return None if match is None else int(match.group(1) or HASHING_DIM)
