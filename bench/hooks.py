"""How long Claude Code waits for tiermem's hooks (`python -m bench hooks`).

A ``tiermem serve`` (stdio, its input kept open as a host keeps it, the packaged embedding model) serves an agent
holding ``--messages`` recall turns (default 10,000: the LoCoMo dev split's turns repeated under new conversation
ids, logged as role-tagged turns as the hooks log them, ``bench locomo``'s role format) and a few archival passages. Each sample runs the hook
command exactly as Claude Code does (``tiermem hook claude-code --data-dir D --agent A``, a new process, the hook's
JSON on stdin) and times it from spawn to exit: Claude Code waits for the process to exit before it sends the prompt.

- ``prompt``: UserPromptSubmit with a LoCoMo question (logs the prompt, searches archival and recall, returns what
  passes the threshold). Goal: p50 <= 150 ms, p95 <= 400 ms.
- ``stop``: Stop with a reply (logs it). ``session_start``: SessionStart (core memory).
- ``no_server``: UserPromptSubmit with no server for the memory (the hook fails soft).
- ``process_floor``: ``python -c pass`` with the same interpreter: what starting any Python hook costs.
- ``prompt_in_server``: the same prompt request sent over the socket from the bench process (no hook process):
  the server's share.

``--host codex|gemini|opencode`` runs ``tiermem hook HOST`` with that host's hook input instead (Codex: Claude Code's
events with a ``turn_id``; Gemini CLI: ``BeforeAgent`` / ``AfterAgent`` with ``prompt_response``; opencode: what its
plugin sends, Claude Code's events, from a process of its own as the plugin spawns it).

``--data DIR`` keeps the filled store in DIR and reuses it on the next run (filling 10k turns takes minutes).
The dev split is found as ``bench locomo`` finds it (``$TIERMEM_LOCOMO_DEV`` names it elsewhere).

    python -m bench hooks                   # 10k turns, 200 prompts
    python -m bench hooks --messages 2000 --samples 50
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tiermem.base.rendezvous import memory_key
from tiermem.cli.hooks import ask

from .common import ROOT, machine, save, stats
from .locomo import DATA, log_copies, name_blocks

GOALS = {"prompt": (150.0, 400.0)}  # p50, p95 ms


def fill(data: Path, target: int) -> int:
    """``target`` role-tagged turns (alternating speakers -> user / assistant) and three passages; optimized."""
    from tiermem.base.config import load_settings
    from tiermem.domain.factory import open_memory

    memory = open_memory(load_settings(data_dir=data, embedding_model="default"))
    memory.archive.embedder.wait(None)
    agent = memory.ensure_agent("default").id
    samples = json.loads(DATA.read_text())
    name_blocks(memory, agent, samples[0])
    logged = log_copies(memory, agent, samples, target, "role")
    for fact in (
        "The user's cat is called Miso.",
        "The user works on compilers at a small startup.",
        "The user's sister Grace lives in Lisbon.",
    ):
        memory.archive.insert(agent, fact)
    memory.archive.store.indexes.optimize()
    memory.settle(60)
    return logged


def shaped(host: str, data: dict[str, Any]) -> dict[str, Any]:
    """A Claude Code hook input as ``host`` sends it (every host sends its working directory: ``cwd``)."""
    data = {"cwd": str(ROOT), **data}
    if host == "codex" and "prompt_id" in data:
        data["turn_id"] = data.pop("prompt_id")
    if host == "gemini":
        event = {"UserPromptSubmit": "BeforeAgent", "Stop": "AfterAgent"}.get(data["hook_event_name"])
        if event is not None:
            data["hook_event_name"] = event
            data.pop("prompt_id", None)
        if "last_assistant_message" in data:
            data["prompt_response"] = data.pop("last_assistant_message")
    return data


def run_hook(cmd: list[str], env: dict[str, str], data: dict[str, Any]) -> tuple[float, str]:
    data = shaped(cmd[2], data)
    start = time.perf_counter()
    done = subprocess.run(
        cmd, input=json.dumps(data), capture_output=True, text=True, env=env, timeout=120, check=False
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"hook exited {done.returncode}: {done.stderr[-500:]}")
    return elapsed, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench hooks")
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--data", type=Path, help="keep the filled store here and reuse it next time")
    parser.add_argument("--host", choices=["claude-code", "codex", "gemini", "opencode"], default="claude-code")
    args, _ = parser.parse_known_args(sys.argv[2:])
    root = Path(tempfile.mkdtemp(prefix="tiermem-bench-hooks-"))
    data = args.data or root / "data"
    runtime = Path(tempfile.mkdtemp(prefix="tmbh-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERMEM_")}
    env.update(XDG_RUNTIME_DIR=str(runtime), XDG_STATE_HOME=str(root / "state"), XDG_CONFIG_HOME=str(root / "cfg"))
    try:
        t = time.perf_counter()
        done_marker = data / f".bench-hooks-{args.messages}"
        if done_marker.exists():
            turns = args.messages
        else:
            turns = fill(data, args.messages)
            done_marker.touch()
        print(f"{turns} turns stored ({time.perf_counter() - t:.0f} s)", flush=True)
        tiermem = str(Path(sys.executable).with_name("tiermem"))
        server = subprocess.Popen(
            [tiermem, "serve", "--data-dir", str(data)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=(root / "server.log").open("w"),
            env=env,
            cwd=ROOT,
        )
        hook = [tiermem, "hook", args.host, "--data-dir", str(data), "--agent", "default"]
        questions = [qa["question"] for s in json.loads(DATA.read_text()) for qa in s["qa"]]
        session = "bench-session"
        try:
            run_hook(hook, env, {"hook_event_name": "SessionStart", "session_id": session, "source": "startup"})
            for i in range(5):  # warm: the server has the store and the model open, as after a session's first prompt
                run_hook(
                    hook,
                    env,
                    {
                        "hook_event_name": "UserPromptSubmit",
                        "session_id": session,
                        "prompt_id": f"warm{i}",
                        "prompt": questions[-1 - i],
                    },
                )
            times: dict[str, list[float]] = {
                "prompt": [],
                "stop": [],
                "session_start": [],
                "no_server": [],
                "process_floor": [],
                "prompt_in_server": [],
            }
            os.environ["XDG_RUNTIME_DIR"] = str(runtime)  # for the in-process requests
            key = memory_key(data, "default")
            added = 0
            for i in range(args.samples):
                q = questions[i % len(questions)]
                elapsed, out = run_hook(
                    hook,
                    env,
                    {"hook_event_name": "UserPromptSubmit", "session_id": session, "prompt_id": f"p{i}", "prompt": q},
                )
                times["prompt"].append(elapsed)
                added += bool(out.strip())
                if i % 4 == 0:
                    times["stop"].append(
                        run_hook(
                            hook,
                            env,
                            {
                                "hook_event_name": "Stop",
                                "session_id": session,
                                "prompt_id": f"p{i}",
                                "last_assistant_message": f"Here is what I found about: {q}",
                            },
                        )[0]
                    )
                if i % 10 == 0:
                    times["session_start"].append(
                        run_hook(
                            hook, env, {"hook_event_name": "SessionStart", "session_id": f"s{i}", "source": "startup"}
                        )[0]
                    )
                    other = [*hook[:4], str(root / "no-such-memory"), *hook[5:]]
                    times["no_server"].append(
                        run_hook(
                            other,
                            env,
                            {
                                "hook_event_name": "UserPromptSubmit",
                                "session_id": session,
                                "prompt_id": "x",
                                "prompt": q,
                            },
                        )[0]
                    )
                    t = time.perf_counter()
                    subprocess.run([sys.executable, "-c", "pass"], check=True)
                    times["process_floor"].append(time.perf_counter() - t)
                    t = time.perf_counter()
                    ask(
                        key,
                        {
                            "v": 1,
                            "key": key,
                            "event": "UserPromptSubmit",
                            "input": {
                                "hook_event_name": "UserPromptSubmit",
                                "session_id": session,
                                "prompt_id": f"d{i}",
                                "prompt": questions[(i + 7) % len(questions)],
                            },
                        },
                        wait=0,
                    )
                    times["prompt_in_server"].append(time.perf_counter() - t)
        finally:
            server.send_signal(2)
            server.wait(timeout=60)
        result: dict[str, Any] = {
            "machine": machine(),
            "host": args.host,
            "turns": turns,
            "prompts_with_memories_added": added,
            **{k: stats(v) for k, v in times.items()},
        }
        save("hooks" if args.host == "claude-code" else f"hooks_{args.host}", result)
        print(f"{turns} turns; {added} of {len(times['prompt'])} prompts got memories added")
        print("hook (spawn -> exit, ms)       p50      p95     n")
        for name in times:
            s = result[name]
            print(f"  {name:16s} {s['p50_ms']:10.1f} {s['p95_ms']:8.1f} {s['n']:5d}")
        for name, (p50, p95) in GOALS.items():
            s = result[name]
            verdict = "met" if s["p50_ms"] <= p50 and s["p95_ms"] <= p95 else "NOT met"
            print(f"  goal {name}: p50 <= {p50:.0f} ms, p95 <= {p95:.0f} ms: {verdict}")
    finally:
        shutil.rmtree(root, ignore_errors=True)  # (--data is outside it)
        shutil.rmtree(runtime, ignore_errors=True)


if __name__ == "__main__":
    main()
