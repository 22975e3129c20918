"""`python -m bench [coldstart|roundtrip|peers|locomo|baselines|scale|agent_loop|load|tool_tokens|footprint|ui|lance_writes|small_index|objstore|objmix|lettacode|notify|hooks|autorecall|shutdown|files|secrets|uses|fragments|cjk|payloads|upkeep_rss|all]`"""

from __future__ import annotations

import importlib
import sys

BENCHES = [
    "coldstart",
    "roundtrip",
    "peers",
    "locomo",
    "baselines",
    "scale",
    "agent_loop",
    "load",
    "tool_tokens",
    "footprint",
    "ui",
    "lance_writes",
    "small_index",
    "objstore",
    "objmix",
    "lettacode",
    "notify",
    "hooks",
    "autorecall",
    "shutdown",
    "files",
    "secrets",
    "uses",
    "fragments",
    "cjk",
    "payloads",
    "upkeep_rss",
]


def main() -> None:
    names = [a for a in sys.argv[1:] if not a.startswith("-") and a in [*BENCHES, "all"]] or ["all"]
    if names == ["all"]:
        names = BENCHES
    for name in names:
        if name not in BENCHES:
            raise SystemExit(f"unknown benchmark {name!r}; choose from {', '.join(BENCHES)} or all")
        print(f"== {name}", flush=True)
        # `locomo --archival` is the facts benchmark of archival memory, a module of its own
        module = "locomo_facts" if name == "locomo" and "--archival" in sys.argv else name
        module = "locomo_links" if name == "locomo" and "--links" in sys.argv else module  # links at a token budget
        importlib.import_module(f"bench.{module}").main()


main()
