"""What the published tool list costs a host's context, per preset (`python -m bench tool_tokens`).

``model_tokens``: name + description + input schema of every tool, as hosts hand tools to a model;
``list_tokens`` / ``list_chars``: the whole ``tools/list`` answer (titles, annotations, output schemas);
``claude_code_chars``: the definitions as Claude Code sends them in every request (``mcp__tiermem__`` names, compact JSON).
Tokens are cl100k_base, counted offline with tiermem's tokenizer (a throwaway data directory is used).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import anyio
from mcp import Client

from tiermem.base.config import load_settings
from tiermem.cli.main import open_memory
from tiermem.server.app import PRESETS, build_server
from tiermem.server.arguments import tool_list_cost
from tiermem.server.runtime import MemoryHandle


async def measure() -> dict[str, dict[str, int]]:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for preset in PRESETS:
            settings = load_settings(data_dir=Path(tmp) / "data", embedding_model="hashing", tools=preset)

            def factory(s=settings):  # type: ignore[no-untyped-def]
                m = open_memory(s)
                return m, m.ensure_agent(s.agent).id

            async with Client(build_server(MemoryHandle(factory), settings), cache=None) as client:
                out[preset] = tool_list_cost((await client.list_tools()).tools)
    return out


def main() -> None:
    print(json.dumps(anyio.run(measure), indent=2))


if __name__ == "__main__":
    main()
