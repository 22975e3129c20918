"""Letta Code and tiermem on one memory: round trips and hook rejections over scripted sessions.

    python -m bench lettacode [--edits N]
    python -m bench lettacode --sync-pass [--files 50] [--rounds 5]

Letta Code 0.32.18 (local backend, its own pre-commit hook) runs offline against the scripted model of
tests/fake_anthropic.py; tiermem keeps its memory directory in step two ways, measured in turn:

- ``watch``: ``tiermem sync DIR --watch`` in its own process; tiermem's edits are made by another process
  (as an MCP server of any host would make them) on the same data directory; then both sides edit at once
  (different files), N edits each;
- ``serve``: ``tiermem serve`` with the ``sync`` setting over stdio; the edits are ``memory`` tool calls
  (Letta Code's dialect) through an MCP client.

Letta Code -> tiermem: one Letta Code session makes N edits with its ``memory`` tool, about 1 s apart (the
scripted model waits before each tool call); an edit's latency runs from the moment the model's tool call
left the fake server (an upper bound: Letta Code still has to run the tool and commit) to the moment
tiermem's store holds the text. tiermem -> Letta Code: N edits through tiermem, 1 s apart; latency from
the edit to the commit holding it in the directory's HEAD, which is what Letta Code compiles its prompt
from (checked at the end: the next Letta Code turn's prompt has the last edit). Counted: commits refused by
Letta Code's hook (tiermem's sync reports), and Letta Code tool calls that failed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from .common import ROOT, machine, save, stats

EDITS = 20
GAP_S = 1.0
TIMEOUT_S = 30.0


def _poll(check: Any, timeout: float = TIMEOUT_S, every: float = 0.002) -> float:
    """Wall-clock time (time.time()) when ``check()`` first held."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        time.sleep(every)
    return time.time()


def _head_has(root: Path, rel: str, text: str) -> bool:
    done = subprocess.run(["git", "-C", str(root), "show", f"HEAD:{rel}"], capture_output=True, text=True, check=False)
    return text in done.stdout


class _HeadWatch:
    """Calls ``_head_has`` only when the branch HEAD points at moved (reading a ref file is cheap, a ``git show`` is
    not): the branch is read from ``.git/HEAD`` (whatever it is called; a detached HEAD is its own commit), its
    commit from its loose ref file, else from ``packed-refs``."""

    def __init__(self, root: Path) -> None:
        self.gitdir = root / ".git"
        self.seen = ""

    def _commit(self) -> str:
        head = (self.gitdir / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head
        ref = head[len("ref: ") :]
        try:
            return (self.gitdir / ref).read_text().strip()
        except FileNotFoundError:
            packed = (self.gitdir / "packed-refs").read_text().splitlines()
            return next((line.split(" ", 1)[0] for line in packed if line.endswith(" " + ref)), "")

    def moved(self) -> bool:
        try:
            now = self._commit()
        except OSError:
            return False
        if now == self.seen:
            return False
        self.seen = now
        return True


def _letta_session(letta: Any, agent: str, memory: Any, agent_id: str, tag: str, n: int) -> tuple[list[float], int]:
    """Letta Code makes ``n`` edits; the latency of each until tiermem's store has it, and its failed tool calls."""
    from tests import fake_anthropic as fa
    from tests.letta_code import tool_results

    sent: dict[int, float] = {}

    def step(k: int) -> Any:
        def later(_body: dict[str, Any]) -> dict[str, Any]:
            time.sleep(GAP_S)
            sent[k] = time.time()
            return fa.tool(
                "memory",
                {
                    "command": "insert",
                    "reason": f"{tag} edit {k}",
                    "file_path": "system/human.md",
                    "insert_line": 1,
                    "insert_text": f"{tag} letta {k}",
                },
            )

        return later

    letta.fake.add(*[step(k) for k in range(n)], fa.text("Done."))
    first = len(letta.fake.requests)
    runner = threading.Thread(target=letta.run, args=("Take notes.", agent))
    runner.start()
    seen: dict[int, float] = {}
    deadline = time.monotonic() + n * (GAP_S + 5) + 60
    while len(seen) < n and time.monotonic() < deadline:
        value = memory.block(agent_id, "system/human").value
        now = time.time()
        for k in range(n):
            if k not in seen and f"{tag} letta {k}\n" in value + "\n":
                seen[k] = now
        time.sleep(0.002)
    runner.join()
    failed = sum(1 for r in tool_results(letta.fake.requests[-1]) if "committed" not in r)
    assert len(letta.fake.requests) > first
    return [seen.get(k, float("inf")) - sent[k] for k in sorted(sent)], failed


def _tiermem_edits(root: Path, edit: Any, tag: str, n: int) -> list[float]:
    """``n`` edits through tiermem; the latency of each until the directory's HEAD holds it (inf: not in 30 s)."""
    head = _HeadWatch(root)
    head.moved()
    out = []
    for k in range(n):
        time.sleep(GAP_S)
        text = f"{tag} tiermem {k}"
        start = time.time()
        edit(text)
        try:
            end = _poll(lambda: head.moved() and _head_has(root, "system/persona.md", text))
        except RuntimeError:
            end = float("inf")
        out.append(end - start)
    return out


def _timing(samples: list[float]) -> dict[str, Any]:
    done = [x for x in samples if x != float("inf")]
    return {**(stats(done) if done else {}), "missed": len(samples) - len(done)}


def _watch_mode(letta: Any, agent: str, root: Path, tmp: Path, n: int) -> dict[str, Any]:
    from tiermem.base.config import load_settings
    from tiermem.domain.blocks import Append
    from tiermem.domain.factory import open_memory

    data = ["--data-dir", str(tmp / "watch-data"), "--embedding-model", "hashing"]
    with (tmp / "watch.log").open("w") as log:  # the child has its own copy of the descriptor
        proc = subprocess.Popen(
            [sys.executable, "-m", "tiermem", "sync", str(root), "--agent", "lc", "--watch", "--json", *data],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
    reports: list[dict[str, Any]] = []
    reader = threading.Thread(target=lambda: reports.extend(json.loads(x) for x in proc.stdout or []), daemon=True)
    reader.start()
    try:
        memory = open_memory(load_settings(data_dir=tmp / "watch-data", embedding_model="hashing"))
        _poll(lambda: memory.core.find_agent("lc") is not None and len(memory.blocks(memory.get_agent("lc").id)) >= 2)
        agent_id = memory.get_agent("lc").id
        to_tiermem, failed = _letta_session(letta, agent, memory, agent_id, "watch", n)
        to_letta = _tiermem_edits(
            root, lambda t: memory.edit(agent_id, "system/persona", Append(t), actor="agent"), "watch", n
        )
        # both sides at once (different files): what a person using Letta Code and a host at the same time meets
        both: dict[str, Any] = {}
        edits = threading.Thread(
            target=lambda: both.update(
                to_letta=_tiermem_edits(
                    root, lambda t: memory.edit(agent_id, "system/persona", Append(t), actor="agent"), "both", n
                )
            )
        )
        edits.start()
        both_to_tiermem, both_failed = _letta_session(letta, agent, memory, agent_id, "both", n)
        edits.join()
    finally:
        proc.terminate()
        proc.wait(10)
    reader.join(5)
    if proc.stdout is not None:
        proc.stdout.close()
    rejected = [r for rep in reports for r in rep.get("rejected", [])]
    errors = [
        x for x in (tmp / "watch.log").read_text().splitlines() if x.startswith("tiermem: ") and "syncing" not in x
    ]
    return {
        "letta_to_tiermem": _timing(to_tiermem),
        "tiermem_to_letta": _timing(to_letta),
        "hook_rejections": len(rejected),
        "sync_errors": errors[:5],
        "rejected": rejected[:5],
        "letta_tool_failures": failed,
        "conflicts": sum(len(r.get("conflicts", [])) for r in reports),
        "at_once": {
            "letta_to_tiermem": _timing(both_to_tiermem),
            "tiermem_to_letta": _timing(both.get("to_letta", [])),
            "letta_tool_failures": both_failed,
        },
        "last": f"both tiermem {n - 1}",
    }


def _serve_mode(letta: Any, agent: str, root: Path, tmp: Path, n: int) -> dict[str, Any]:
    import anyio
    from mcp import Client, StdioServerParameters

    from tiermem.base.config import load_settings
    from tiermem.domain.factory import open_memory

    from .common import bench_env

    env = bench_env(
        tmp / "serve-data",
        TIERMEM_SYNC=str(root),
        TIERMEM_MEMORY_TOOL_DIALECT="letta-code",
        TIERMEM_EMBEDDING_MODEL="hashing",
        TIERMEM_AGENT="lc2",
    )
    params = StdioServerParameters(command=sys.executable, args=["-m", "tiermem", "serve"], env=env, cwd=str(ROOT))
    out: dict[str, Any] = {}

    async def run() -> None:
        async with Client(params) as c:
            await c.list_tools()
            memory = open_memory(load_settings(data_dir=tmp / "serve-data", embedding_model="hashing"))
            _poll(
                lambda: (
                    memory.core.find_agent("lc2") is not None and len(memory.blocks(memory.get_agent("lc2").id)) >= 2
                )
            )
            agent_id = memory.get_agent("lc2").id
            to_tiermem, failed = await anyio.to_thread.run_sync(
                lambda: _letta_session(letta, agent, memory, agent_id, "serve", n)
            )
            portal_calls: list[float] = []
            for k in range(n):
                await anyio.sleep(GAP_S)
                text = f"serve tiermem {k}"
                head = _HeadWatch(root)
                head.moved()
                start = time.time()
                r = await c.call_tool(
                    "memory",
                    {
                        "command": "insert",
                        "reason": f"tiermem edit {k}",
                        "file_path": "system/persona.md",
                        "insert_line": 999,
                        "insert_text": text,
                    },
                )
                assert not r.is_error, r
                end = await anyio.to_thread.run_sync(
                    lambda: _poll(lambda: head.moved() and _head_has(root, "system/persona.md", text))
                )
                portal_calls.append(end - start)
            out.update(
                letta_to_tiermem=_timing(to_tiermem),
                tiermem_to_letta=_timing(portal_calls),
                letta_tool_failures=failed,
                last=f"serve tiermem {n - 1}",
            )

    anyio.run(run)
    subjects = subprocess.run(
        ["git", "-C", str(root), "log", f"-{n}", "--format=%an|%s"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    out["commits_by_tiermem_with_the_edits_reason"] = sum(1 for s in subjects if s.startswith("tiermem|tiermem edit "))
    return out


def sync_pass(files: int, rounds: int) -> dict[str, Any]:
    """``--sync-pass``: one sync pass over a Letta Code-style repository (branch main, its layout policy file, one
    commit) of ``files`` memory files, timed (a) when tiermem writes every file (every block edited: each file is
    checked against the last commit, committed, named in the message) and (b) when one block changed. No hook runs
    (the measure is tiermem's own git work); the hashing embedder, a temporary data directory."""
    from tiermem.base.config import load_settings
    from tiermem.domain.blocks import Append
    from tiermem.domain.factory import open_memory
    from tiermem.interop.memfs_sync import sync_memfs

    tmp = Path(tempfile.mkdtemp(prefix="tiermem-bench-syncpass-"))
    try:
        root = tmp / "memory"
        (root / "reference").mkdir(parents=True)
        (root / "system").mkdir()

        def git(*args: str) -> None:
            subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)

        git("init", "-q", "-b", "main")
        git("config", "user.email", "agent@letta.com")
        git("config", "user.name", "Letta Code")
        (root / ".git" / "letta-memory-layout-policy").write_text("legacy-only\n")
        for i in range(files):
            folder = "system" if i < 5 else "reference"
            (root / folder / f"note-{i}.md").write_text(f"---\ndescription: Note {i}\n---\nLine {i}\n")
        git("add", "-A")
        git("commit", "-q", "-m", "init")
        memory = open_memory(load_settings(data_dir=tmp / "data", embedding_model="hashing"))
        start = time.perf_counter()
        sync_memfs(memory, "lc", root)
        first = time.perf_counter() - start
        agent = memory.get_agent("lc").id
        labels = sorted(b.label for b in memory.blocks(agent))
        every: list[float] = []
        one: list[float] = []
        for r in range(rounds):
            for label in labels:
                memory.edit(agent, label, Append(f"round {r}"), actor="agent")
            start = time.perf_counter()
            report = sync_memfs(memory, "lc", root)
            every.append(time.perf_counter() - start)
            assert len(report["to_files"]) == len(labels) and report["commit"], report
            memory.edit(agent, labels[r % len(labels)], Append(f"single {r}"), actor="agent")
            start = time.perf_counter()
            report = sync_memfs(memory, "lc", root)
            one.append(time.perf_counter() - start)
            assert len(report["to_files"]) == 1 and report["commit"], report
        processes: dict[str, int] = {}  # git commands one pass runs (GIT_TRACE logs one "built-in" line per command)
        for case, edited in (("every_file_written", labels), ("one_file_written", labels[:1])):
            for label in edited:
                memory.edit(agent, label, Append(f"traced {case}"), actor="agent")
            trace = tmp / f"trace-{case}"
            os.environ["GIT_TRACE"] = str(trace)
            try:
                sync_memfs(memory, "lc", root)
            finally:
                del os.environ["GIT_TRACE"]
            ran = [x.split("built-in: ", 1)[1] for x in trace.read_text().splitlines() if "built-in: git " in x]
            processes[case] = len(ran)
            processes[case + ", reading the last commit"] = sum(
                1 for x in ran if x.startswith(("git show ", "git cat-file "))
            )
        return {
            "files": files,
            "rounds": rounds,
            "first_sync_s": round(first, 3),
            "every_file_written": stats(every),
            "one_file_written": stats(one),
            "git_commands": processes,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    if "--sync-pass" in sys.argv:
        files = int(sys.argv[sys.argv.index("--files") + 1]) if "--files" in sys.argv else 50
        rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 5
        result = {"machine": machine(), **sync_pass(files, rounds)}
        save("lettacode_sync_pass", result)
        print(json.dumps(result, indent=1))
        return
    from tests import fake_anthropic as fa
    from tests.letta_code import LettaCode, install, system_of

    n = EDITS
    if "--edits" in sys.argv:
        n = int(sys.argv[sys.argv.index("--edits") + 1])
    exe, why = install("letta-code")
    if exe is None or shutil.which("node") is None:
        print(f"lettacode: skipped ({why or 'node is not on PATH'})")
        return
    tmp = Path(tempfile.mkdtemp(prefix="tiermem-bench-lettacode-"))
    result: dict[str, Any] = {"machine": machine(), "edits_per_side": n, "gap_s": GAP_S}
    try:
        with fa.FakeAnthropic() as fake:
            letta = LettaCode(exe, tmp / "home", fake)
            for mode, run in (("watch", _watch_mode), ("serve", _serve_mode)):
                fake.add(fa.text("Hello."))
                agent = letta.run("Hello.")["agent_id"]
                root = letta.memory_dir(agent)
                result[mode] = run(letta, agent, root, tmp, n)
                fake.add(fa.text("Hello again."))
                asked = len(fake.requests)
                letta.run("What do you know?", agent=agent)
                result[mode]["next_prompt_has_last_tiermem_edit"] = result[mode]["last"] in system_of(
                    fake.requests[asked]
                )
                clean = subprocess.run(
                    ["git", "-C", str(root), "status", "--porcelain"], capture_output=True, text=True
                )
                result[mode]["repository_clean_at_end"] = clean.stdout == ""
                print(mode, json.dumps(result[mode], indent=1), flush=True)
            result["offline"] = letta.offline()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    save("lettacode", result)
    print(json.dumps({k: v for k, v in result.items() if k not in ("watch", "serve")}, indent=1))
