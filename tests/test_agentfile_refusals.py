"""Agent files with a wrong field are refused whole: the import names the field (with its agent, block or message)
and what to do, raises ``ValidationError`` (no traceback), and leaves the store exactly as it was, folders, blocks
and their history included (docs/import-export.md: every import validates the whole input before writing)."""

from __future__ import annotations

import copy
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tiermem.base.config import load_settings
from tiermem.base.errors import ValidationError
from tiermem.domain.factory import open_memory
from tiermem.domain.memory import Memory
from tiermem.interop import backup
from tiermem.interop.commands import run_import

from .conftest import ROOT

OWN = ROOT / "tests" / "fixtures" / "agent-file-own"
TOOLS = json.loads((OWN / "custom_tools_files.af").read_text())  # blocks, messages with tool calls, a folder
GROUPS = json.loads((OWN / "pair_groups.af").read_text())  # a sleeptime group
Edit = Callable[[dict[str, Any]], Any]


@pytest.fixture(scope="module")
def mem(tmp_path_factory: pytest.TempPathFactory) -> Memory:
    memory = open_memory(load_settings(data_dir=tmp_path_factory.mktemp("store"), embedding_model="hashing"))
    memory.ensure_agent("already-here")
    memory.archive.log_messages(memory.ensure_agent("already-here").id, [{"role": "user", "content": "hello"}])
    return memory


def snapshot(memory: Memory) -> str:
    out = io.StringIO()
    backup.export_backup(memory, out)
    return out.getvalue()


def refused(mem: Memory, tmp_path: Path, base: dict[str, Any], edit: Edit) -> str:
    data = copy.deepcopy(base)
    edit(data)
    path = tmp_path / "case.af"
    path.write_text(json.dumps(data))
    before = snapshot(mem)
    with pytest.raises(ValidationError) as caught:
        run_import(mem, path, fmt="af", agent="default", rename=None, replace=False)
    assert snapshot(mem) == before, "a refused import changed the store"
    assert [a.name for a in mem.list_agents()] == ["already-here"]
    return str(caught.value)


def msg(i: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda d: d["agents"][0]["messages"][i]


def block0(d: dict[str, Any]) -> dict[str, Any]:
    return dict(d["blocks"][0])


# -- finding 1: what failed after the writing had started is refused before it ------------------------------


@pytest.mark.parametrize(
    ("value", "shown"), [("yesterday", "'yesterday'"), (1700000000, "1700000000"), ("2024-02-30", "'2024-02-30'")]
)
def test_a_bad_message_time_is_refused_before_any_write(mem: Memory, tmp_path: Path, value: Any, shown: str) -> None:
    text = refused(mem, tmp_path, TOOLS, lambda d: msg(1)(d).update(created_at=value))
    assert text.startswith(f"Agent 'Wren the researcher': messages[1] (id 'message-1') has `created_at` {shown}")
    assert "not an ISO 8601 time" in text and "Correct it or remove the field" in text


def test_a_block_longer_than_a_block_may_be_is_refused_before_any_write(mem: Memory, tmp_path: Path) -> None:
    text = refused(mem, tmp_path, TOOLS, lambda d: d["blocks"][0].update(value="x" * 300_000, limit=400_000))
    label = TOOLS["blocks"][0]["label"]
    assert f"the value of block {label!r} has 300000 characters" in text
    assert "at most 100000 (the max_content_chars setting)" in text and "Shorten it in the file" in text
    text = refused(mem, tmp_path, TOOLS, lambda d: d["blocks"][0].update(description="d" * 300_000))
    assert f"the description of block {label!r} has 300000 characters" in text


def test_a_lone_surrogate_in_a_message_is_refused_before_any_write(mem: Memory, tmp_path: Path) -> None:
    text = refused(mem, tmp_path, TOOLS, lambda d: msg(1)(d).update(content="hi \ud800"))
    assert "message 'message-1' is not valid Unicode text" in text


# -- finding 2: wrong types and ranges ----------------------------------------------------------------------


BLOCK = "Block 'persona' of agent 'Wren the researcher'"
LIMIT = "`limit` must be a whole number of characters, 1 or more (or null for 5000), not"
FREQUENCY = "groups[0]: `manager_config.sleeptime_agent_frequency` must be a whole number of turns, 1 or more"
MESSAGE = "Agent 'Wren the researcher': messages[2] (id 'message-2')"
CASES: list[tuple[str, dict[str, Any], Edit, str]] = [
    ("limit text", TOOLS, lambda d: d["blocks"][0].update(limit="abc"), f"{BLOCK}: {LIMIT} 'abc'"),
    ("limit digits", TOOLS, lambda d: d["blocks"][0].update(limit="100"), f"{BLOCK}: {LIMIT} '100'"),
    ("limit NaN", TOOLS, lambda d: d["blocks"][0].update(limit=float("nan")), f"{BLOCK}: {LIMIT} nan"),
    ("limit fraction", TOOLS, lambda d: d["blocks"][0].update(limit=99.5), f"{BLOCK}: {LIMIT} 99.5"),
    ("limit zero", TOOLS, lambda d: d["blocks"][0].update(limit=0), f"{BLOCK}: {LIMIT} 0"),
    ("limit negative", TOOLS, lambda d: d["blocks"][0].update(limit=-5), f"{BLOCK}: {LIMIT} -5"),
    ("limit bool", TOOLS, lambda d: d["blocks"][0].update(limit=True), f"{BLOCK}: {LIMIT} True"),
    (
        "description number",
        TOOLS,
        lambda d: d["blocks"][0].update(description=42),
        f"{BLOCK}: `description` must be text (or null), not 42",
    ),
    (
        "read_only text",
        TOOLS,
        lambda d: d["blocks"][0].update(read_only="false"),
        f"{BLOCK}: `read_only` must be true or false (or null), not 'false'",
    ),
    (
        "content number",
        TOOLS,
        lambda d: msg(6)(d).update(content=5),
        "Agent 'Wren the researcher': messages[6] (id 'message-6'): `content` must be text or a list",
    ),
    (
        "tool_calls text",
        TOOLS,
        lambda d: msg(2)(d).update(tool_calls="call_1"),
        f"{MESSAGE}: `tool_calls` must be a list of tool calls, not 'call_1'",
    ),
    (
        "tool call text",
        TOOLS,
        lambda d: msg(2)(d).update(tool_calls=["call_1"]),
        f"{MESSAGE}: tool_calls[0] must be an object with a `function` object",
    ),
    (
        "arguments object",
        TOOLS,
        lambda d: msg(2)(d)["tool_calls"][0]["function"].update(arguments={"city": "Lyon"}),
        f"{MESSAGE}: tool_calls[0].function.arguments must be the arguments as JSON text",
    ),
    (
        "manager_config text",
        GROUPS,
        lambda d: d["groups"][0].update(manager_config="sleeptime"),
        "groups[0]: `manager_config` must be an object, not 'sleeptime'",
    ),
    (
        "frequency text",
        GROUPS,
        lambda d: d["groups"][0]["manager_config"].update(sleeptime_agent_frequency="often"),
        f"{FREQUENCY} (or null for the default 5), not 'often'",
    ),
    (
        "frequency zero",
        GROUPS,
        lambda d: d["groups"][0]["manager_config"].update(sleeptime_agent_frequency=0),
        f"{FREQUENCY} (or null for the default 5), not 0",
    ),
    (
        "frequency negative",
        GROUPS,
        lambda d: d["groups"][0]["manager_config"].update(sleeptime_agent_frequency=-2),
        f"{FREQUENCY} (or null for the default 5), not -2",
    ),
    (
        "passages list",
        TOOLS,
        lambda d: d.update(tiermem={"passages": [{"content": "x"}]}),
        "`tiermem.passages` in the agent file must map agent ids to lists of passages.",
    ),
    (
        "extension text",
        TOOLS,
        lambda d: d.update(tiermem="x"),
        "`tiermem` in the agent file must be an object",
    ),
    (
        "passage tags text",
        TOOLS,
        lambda d: d.update(tiermem={"passages": {"agent-0": [{"content": "fact", "tags": "t1"}]}}),
        "Agent 'Wren the researcher': `tiermem.passages` entry 0: `tags` must be a list of texts, not 't1'",
    ),
    (
        "passage time",
        TOOLS,
        lambda d: d.update(tiermem={"passages": {"agent-0": [{"content": "fact", "created_at": "garbage"}]}}),
        "Agent 'Wren the researcher': `tiermem.passages` entry 0 has `created_at` 'garbage', which is not an ISO",
    ),
    (
        "own sleeptime_frequency",
        TOOLS,
        lambda d: d.update(tiermem={"agents": {"agent-0": {"sleeptime_frequency": "abc"}}}),
        "`tiermem.agents['agent-0'].sleeptime_frequency` must be a whole number of turns written as text",
    ),
    # -- finding 3: duplicate ids
    (
        "two blocks, one id",
        TOOLS,
        lambda d: d["blocks"].append({**block0(d), "label": "other"}),
        f"The file has two blocks with the id {TOOLS['blocks'][0]['id']!r}; each block needs its own id",
    ),
    (
        "two messages, one id",
        TOOLS,
        lambda d: msg(6)(d).update(id="message-1"),
        "Agent 'Wren the researcher': messages[6] has the id 'message-1', which an earlier message has",
    ),
    (
        "two agents, one id",
        TOOLS,
        lambda d: d["agents"].append({**d["agents"][0], "name": "second", "messages": []}),
        "The file has two agents with the id 'agent-0' (agents[1] is the second)",
    ),
]


@pytest.mark.parametrize(("base", "edit", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_wrong_field_is_named_and_nothing_is_written(
    mem: Memory, tmp_path: Path, base: dict[str, Any], edit: Edit, expected: str
) -> None:
    assert expected in refused(mem, tmp_path, base, edit)


def test_json_nested_too_deeply_is_refused_without_a_traceback(mem: Memory, tmp_path: Path) -> None:
    path = tmp_path / "deep.af"
    path.write_text('{"agents": [{"name": "deep", "metadata": ' + "[" * 100_000 + "]" * 100_000 + "}]}")
    before = snapshot(mem)
    with pytest.raises(ValidationError, match="nests JSON arrays or objects too deeply to read"):
        run_import(mem, path, fmt="auto", agent="default", rename=None, replace=False)
    assert snapshot(mem) == before


def test_what_letta_writes_is_still_read(tmp_path: Path) -> None:
    """A null limit is Letta's default 5000, a whole float limit is that number, a null read_only is false, and
    a sleeptime group without a frequency runs every 5 turns."""
    data = copy.deepcopy(TOOLS)
    data["blocks"][0].update(limit=None, read_only=None, description=None)
    data["blocks"][1].update(limit=7000.0)
    path = tmp_path / "ok.af"
    path.write_text(json.dumps(data))
    memory = open_memory(load_settings(data_dir=tmp_path / "store", embedding_model="hashing"))
    run_import(memory, path, fmt="af", agent="default", rename=None, replace=False)
    agent = memory.list_agents()[0]
    blocks = {b.label: b for b in memory.blocks(agent.id)}
    first, second = blocks[data["blocks"][0]["label"]], blocks[data["blocks"][1]["label"]]
    assert (first.limit, first.read_only, first.description) == (5000, False, "")
    assert second.limit == 7000


# -- finding 4: --replace over an agent imported from the same file -----------------------------------------


def test_replace_imports_a_file_imported_before_again_over_it(tmp_path: Path) -> None:
    """The docs: ``--replace`` overwrites the existing agent. For the same file that used to report it skipped and
    keep every edit; now each agent of the file is written anew, its shared blocks included."""
    memory = open_memory(load_settings(data_dir=tmp_path / "store", embedding_model="hashing"))
    path = OWN / "pair_groups.af"
    first = run_import(memory, path, fmt="af", agent="default", rename=None, replace=False)
    assert first["imported"] == ["Pip", "pip-sleeptime"]
    pip = memory.get_agent("Pip").id
    messages = memory.archive.counts(pip)[0]
    memory.update_block(pip, "human", description="edited in tiermem")  # shared with pip-sleeptime
    memory.archive.log_messages(pip, [{"role": "user", "content": "said after the import"}])
    again = run_import(memory, path, fmt="af", agent="default", rename=None, replace=False)
    assert again["skipped"] == [f"{n} (already imported from this file)" for n in ("Pip", "pip-sleeptime")]
    replaced = run_import(memory, path, fmt="af", agent="default", rename=None, replace=True)
    assert replaced["imported"] == ["Pip", "pip-sleeptime"] and replaced["skipped"] == []
    assert memory.archive.counts(memory.get_agent("Pip").id)[0] == messages
    data = json.loads(path.read_text())
    for name in ("Pip", "pip-sleeptime"):
        for b in memory.blocks(memory.get_agent(name).id):
            original = next(x for x in data["blocks"] if x["label"] == b.label)
            assert b.description == (original.get("description") or ""), (name, b.label)
