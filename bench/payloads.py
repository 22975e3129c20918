"""What a message's payload size costs a recall search (``conversation_search``): Letta imports keep each whole
original message in its payload, and a search must tell the agent loop's plumbing apart (``store.query.is_plumbing``).

    python -m bench payloads [--rows 2000] [--searches 50] [--sizes 2000,200000] [--tool-searches 50]

For each payload size, a fresh store (hashing embedder, in a temporary directory) is given ``--rows`` turns logged
like a Letta import's (user, assistant and tool rows in turn; a third of the tool rows send_message results, a third
conversation_search results; each payload holding the message's original under ``letta``, ``size`` characters long),
its indexes brought up to date, and then:

- ``said_s``: ``--searches`` searches of what was said (the default roles), wall seconds in all;
- ``tool_s``: ``--tool-searches`` searches of tool results too (roles user, assistant and tool: the filter that leaves
  the loop's plumbing out of the legs), wall seconds in all.

The figures should not depend on the payload size: a search reads the row's ``plumbing`` column, never its payload.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

WORDS = "apple river mountain lighthouse keeper garden tea coffee painting trip museum violin".split()
TOOLS = ("web_search", "send_message", "conversation_search")


def turns(rows: int, size: int, rng: random.Random) -> list[dict[str, Any]]:
    out = []
    for i in range(rows):
        role = ("user", "assistant", "tool")[i % 3]
        content = " ".join(rng.choice(WORDS) for _ in range(20)) + f" item{i}"
        original = {"role": role, "content": [{"type": "text", "text": "x" * size}]}
        payload: dict[str, Any] = {"kind": role, "letta": original}
        if role == "tool":
            payload = {"kind": "tool_result", "tool_call_id": f"call-{i}", "name": TOOLS[i // 3 % 3], "is_error": False}
            payload["letta"] = original
        out.append({"role": role, "content": content, "payload": json.dumps(payload)})
    return out


def measure(rows: int, size: int, searches: int, tool_searches: int) -> dict[str, Any]:
    from tiermem.base.config import load_settings
    from tiermem.domain.factory import open_memory

    rng = random.Random(1)
    with tempfile.TemporaryDirectory(prefix="tiermem-payloads-") as tmp:
        memory = open_memory(load_settings(data_dir=Path(tmp) / "data", embedding_model="hashing"))
        agent = memory.ensure_agent("default")
        logged = turns(rows, size, rng)
        for start in range(0, rows, 200):
            memory.archive.log_messages(agent.id, logged[start : start + 200])
        memory.archive.store.indexes.optimize()
        queries = [" ".join(rng.choice(WORDS) for _ in range(3)) for _ in range(max(searches, tool_searches))]
        out: dict[str, Any] = {"rows": rows, "payload_chars": size}
        for name, roles, n in (("said_s", None, searches), ("tool_s", ["user", "assistant", "tool"], tool_searches)):
            memory.archive.conversation_search(agent.id, queries[0], roles=roles, limit=10)  # warm: sittings, caches
            started = time.perf_counter()
            for q in queries[:n]:
                memory.archive.conversation_search(agent.id, q, roles=roles, limit=10)
            out[name] = round(time.perf_counter() - started, 3)
            out[name.replace("_s", "_searches")] = n
        return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench payloads")
    parser.add_argument("payloads", nargs="?")
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--searches", type=int, default=50, help="searches of what was said (50)")
    parser.add_argument("--tool-searches", type=int, default=50, help="searches of tool results too (50)")
    parser.add_argument("--sizes", default="2000,200000", help="payload sizes in characters")
    args = parser.parse_args()
    for size in (int(s) for s in args.sizes.split(",")):
        result = measure(args.rows, size, args.searches, args.tool_searches)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
