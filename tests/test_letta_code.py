"""Letta Code itself (npm @letta-ai/letta-code, local backend) and tiermem sharing one memory, both ways.

A scripted Anthropic-compatible model on loopback makes Letta Code create and edit memory files with its own
`memory` tool (committed under its own pre-commit hook); tiermem takes them in; edits made through tiermem's MCP
tools are committed under that hook and are in the prompt Letta Code compiles next. Letta Code runs offline: a
throwaway HOME and LETTA_LOCAL_BACKEND_DIR, telemetry and updates off, and tests/node_offline.cjs refuses (and
logs) any connection that is not to loopback. Skipped, with the reason, when Letta Code cannot be installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tiermem.base.config import load_settings
from tiermem.domain import memfs_format as fmt
from tiermem.domain.blocks import Append
from tiermem.domain.factory import open_memory
from tiermem.interop.letta_code import setup
from tiermem.interop.memfs_sync import sync_memfs

from . import fake_anthropic as fa
from .conftest import serve_in_process, text_of
from .letta_code import OFFLINE, LettaCode, install, system_of, tool_results

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def letta(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LettaCode]:
    if shutil.which("node") is None or shutil.which("git") is None:
        pytest.skip("Letta Code needs node and git on PATH")
    exe, why = install("letta-code")
    if exe is None:
        pytest.skip(f"Letta Code is not installed: {why}")
    with fa.FakeAnthropic() as fake:
        yield LettaCode(exe, tmp_path_factory.mktemp("letta-home"), fake)


def memory_call(**args: Any) -> dict[str, Any]:
    return fa.tool("memory", args)


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


async def test_one_memory_both_ways(letta: LettaCode, tmp_path: Path) -> None:
    fake = letta.fake
    # 1. Letta Code creates and edits memory files with its own tool (each call is a commit under its hook)
    fake.add(
        memory_call(
            command="create",
            reason="Track the team",
            file_path="reference/Team-Notes.md",
            description="Team: who is who",
            file_text="Ada leads.",
        ),
        memory_call(
            command="str_replace",
            reason="Learned the name",
            file_path="system/human.md",
            old_string="I haven't gotten to know this person yet.",
            new_string="Name: Ada",
        ),
        memory_call(
            command="insert", reason="A pet", file_path="system/human.md", insert_line=2, insert_text="Has a cat"
        ),
        memory_call(command="create", reason="Scratch", file_path="notes/tmp/x.md", description="x", file_text="x"),
        memory_call(command="delete", reason="Clean up", file_path="notes"),
        fa.text("Noted."),
    )
    agent = letta.run("I'm Ada; I lead the team and have a cat.")["agent_id"]
    root = letta.memory_dir(agent)
    assert "Letta Code" in (root / ".git" / "hooks" / "pre-commit").read_text()
    assert [r for r in tool_results(fake.requests[-1]) if "committed" not in r] == []

    # 2. tiermem takes it in: capitals, a description with ': ', system/ pinned, reference/ detached
    settings = load_settings(data_dir=tmp_path / "data", embedding_model="hashing", memory_tool_dialect="letta-code")
    memory = open_memory(settings)
    report = setup(memory, root, agent)
    assert report["letta_code_repository"] and report["created_agent"]
    assert sorted(report["sync"]["to_store"]) == ["reference/Team-Notes", "system/human", "system/persona"]
    aid = memory.get_agent(agent).id
    team = memory.block(aid, "reference/Team-Notes")
    assert (team.value, team.description) == ("Ada leads.", "Team: who is who")
    assert memory.block(aid, "system/human").value.startswith("Name: Ada\nHas a cat\n")
    assert "<system/human>" in memory.render_core(aid) and "<reference/Team-Notes>" not in memory.render_core(aid)

    # 3. edits through tiermem's MCP tools are committed under Letta Code's hook, one commit each
    async with Client(serve_in_process(settings.model_copy(update={"agent": agent}))) as c:
        r = await c.call_tool(
            "memory",
            {
                "command": "str_replace",
                "reason": "Ada's full name",
                "file_path": "system/human.md",
                "old_string": "Name: Ada",
                "new_string": "Name: Ada Lovelace",
            },
        )
        assert not r.is_error, text_of(r)
        first = sync_memfs(memory, agent, root)
        r = await c.call_tool(
            "memory",
            {
                "command": "create",
                "reason": "Start a project file",
                "file_path": "reference/projects.md",
                "description": "Projects",
                "file_text": "tiermem",
            },
        )
        assert not r.is_error, text_of(r)
        r = await c.call_tool(
            "memory_replace",
            {"label": "reference/Team-Notes", "old_string": "Ada leads.", "new_string": "Ada leads. Bo joins."},
        )
        assert not r.is_error, text_of(r)
    second = sync_memfs(memory, agent, root)
    for done in (first, second):
        assert done["commit"] and done["rejected"] == [] and done["conflicts"] == [], done
    assert git(root, "status", "--porcelain") == ""
    log = git(root, "log", "-3", "--format=%an|%s").splitlines()
    assert log[1] == "tiermem|Ada's full name" and log[0].startswith("tiermem|tiermem: 2 memory files")

    # 4. Letta Code's next prompt has them, and it edits the file tiermem created
    fake.add(
        memory_call(
            command="str_replace",
            reason="Rename the project",
            file_path="reference/projects.md",
            old_string="tiermem",
            new_string="tiermem (MCP memory)",
        ),
        fa.text("Done."),
    )
    asked = len(fake.requests)
    letta.run("Rename the project.", agent=agent)
    prompt = system_of(fake.requests[asked])
    assert "Name: Ada Lovelace" in prompt and "projects.md" in prompt and "Team-Notes.md" in prompt
    assert any("committed" in r for r in tool_results(fake.requests[-1]))
    back = sync_memfs(memory, agent, root)
    assert back["to_store"] == ["reference/projects"]
    assert memory.block(aid, "reference/projects").value == "tiermem (MCP memory)"
    assert memory.history(aid, "reference/projects", 1)[0].operation.startswith("memfs: Rename the project (commit by ")
    assert letta.offline(), letta.net_log.read_text()


# Cases for Letta Code's real pre-commit hook and tiermem's copy of its rules (memfs_format.hook_problems):
# (path, the committed file or None, the new file)
HOOK_CASES: list[tuple[str, str | None, str]] = [
    ("system/a.md", None, "---\ndescription: Fine: really\n---\nbody"),
    ("system/b.md", None, "no frontmatter"),
    ("system/c.md", None, "---\ndescription: x\nbody"),
    ("reference/d.md", None, "---\nlimit: 5\n---\n"),
    ("reference/e.md", None, "---\ndescription: d\npinned: false\nread_only: false\n---\n"),
    ("system/f.md", None, "---\ndescription: |\n  folded\n  text\nlimit: 9\n---\n"),
    ("system/g.md", "---\ndescription: g\nread_only: false\n---\n", "---\ndescription: g2\nread_only: false\n---\n"),
    ("system/h.md", "---\ndescription: h\nread_only: false\n---\n", "---\ndescription: h\n---\n"),
    ("system/i.md", "---\ndescription: i\nread_only: true\n---\n", "---\ndescription: i\nread_only: true\n---\nmore"),
    ("notes/j.md", None, "anything goes outside system/ and reference/"),
]


def test_hook_rules_match_letta_codes_hook(letta: LettaCode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Commit each case under the hook Letta Code installs, and compare with what tiermem predicts."""
    fake = letta.fake
    fake.add(fa.text("Hello."))
    agent = letta.run("Hello.")["agent_id"]
    hooks = letta.memory_dir(agent) / ".git"
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    for name in ("hooks/pre-commit", "hooks/letta-memory-constraints.cjs", "letta-memory-layout-policy"):
        (repo / ".git" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(hooks / name, repo / ".git" / name)
    git(repo, "commit", "-q", "--allow-empty", "-m", "start")
    env = {**os.environ, "NODE_OPTIONS": f"--require {OFFLINE}"}
    for rel, before, after in HOOK_CASES:
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if before is not None:
            path.write_text(before)
            git(repo, "add", rel)
            git(repo, "commit", "-q", "--no-verify", "-m", f"before {rel}")
        path.write_text(after)
        git(repo, "add", rel)
        done = subprocess.run(
            ["git", "-C", str(repo), "commit", "-q", "-m", rel], capture_output=True, text=True, env=env, check=False
        )
        said = sorted(line.strip() for line in (done.stdout + done.stderr).splitlines() if line.startswith("  "))
        checked = fmt.hook_checked(rel, set(), "v1")
        predicted = sorted(fmt.hook_problems(rel, after, before, "v1")) if checked else []
        assert said == predicted and (done.returncode == 0) == (predicted == []), (rel, done.stderr, predicted)
        if done.returncode != 0:
            git(repo, "reset", "-q", "HEAD", "--", rel)

    # a rule tiermem does not check itself (the size limits of .memfs.config.json): the real hook refuses the commit,
    # the sync says which file and why, and nothing is left behind
    (repo / ".memfs.config.json").write_text('{"version": 1, "maxFileCharacters": 60}\n')
    git(repo, "add", ".memfs.config.json")
    git(repo, "commit", "-q", "--no-verify", "-m", "limits")
    memory = open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="hashing"))
    monkeypatch.setenv("NODE_OPTIONS", f"--require {OFFLINE}")
    sync_memfs(memory, "hooked", repo)
    before = (git(repo, "rev-parse", "HEAD"), git(repo, "status", "--porcelain"), (repo / "system/a.md").read_text())
    memory.edit(memory.get_agent("hooked").id, "system/a", Append("x" * 80), actor="agent")
    report = sync_memfs(memory, "hooked", repo)
    assert report["commit"] == "" and len(report["rejected"]) == 1, report
    assert (
        report["rejected"][0].startswith("system/a.md: ")
        and "exceeds 60 from maxFileCharacters" in report["rejected"][0]
    )
    assert (
        git(repo, "rev-parse", "HEAD"),
        git(repo, "status", "--porcelain"),
        (repo / "system/a.md").read_text(),
    ) == before
