"""Answer first, load later: the stdio server answers the handshake and tools/list without the heavy libraries.

The server runs under ``tests/harness/without_heavy.py``, which makes lancedb, pyarrow, onnxruntime,
numpy, fastembed and pandas impossible to import. Whatever it answers there, it answered without them;
opening the memory store (which needs them) fails in the background and a tool call reports that clearly.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from .conftest import PYTHON, ROOT, text_of
from .test_transports import server_env

pytestmark = pytest.mark.anyio

HEAVY = ("lancedb", "pyarrow", "onnxruntime", "numpy", "fastembed", "pandas")
HARNESS = Path(__file__).parent / "harness" / "without_heavy.py"


@pytest.mark.parametrize(
    ("mode", "extra"),
    [("legacy", ()), ("auto", ()), ("legacy", ("--agent-loop",))],
    ids=["handshake", "modern", "agent-loop"],
)
async def test_initialize_and_tools_list_need_no_heavy_library(tmp_path: Path, mode: str, extra: tuple[str, ...]) -> None:
    params = StdioServerParameters(
        command=PYTHON,
        args=[str(HARNESS), ",".join(HEAVY), "serve", "--data-dir", str(tmp_path / "data"), *extra],
        env=server_env(tmp_path, TIERMEM_LLM_PROVIDER="sampling"),
        cwd=str(ROOT),
    )
    log = tmp_path / "stderr.log"
    with log.open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode=mode) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"memory_replace", "core_memory_view", "archival_memory_search"} <= names
            result = await client.call_tool("core_memory_view", {})
    stderr = log.read_text()
    # Opening the store needed the refused libraries: the tool call says so instead of hanging or crashing.
    assert result.is_error, text_of(result)
    assert "could not open its memory store" in text_of(result)
    refused = [line for line in stderr.splitlines() if line.startswith("refused import")]
    assert refused, stderr  # the block was in force: the opener did ask for them
    # Only the background opener asked for them; the code that answered requests never did.
    assert all(line.endswith("in thread tiermem-open") for line in refused), stderr
