"""Rough edges of the `tiermem` command line a new user meets, each as the user meets it: global options before the
command, output into a closed pipe, errors that name the command to type, contradictory flags, empty blocks and
stdin's newline, export's default agent, deleting a missing agent, and search results in order of relevance.

Bad input gets an error naming the problem and what to do instead, a non-zero exit, and no change on disk.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from mcp import Client

from tiermem.base.config import Settings, load_settings
from tiermem.base.errors import NotFoundError, ValidationError
from tiermem.cli.main import main
from tiermem.domain.blocks import Rethink
from tiermem.domain.factory import open_memory
from tiermem.domain.memory import Memory

from .conftest import PYTHON, ROOT, serve_in_process, spec, text_of
from .test_transports import server_env


def data_args(tmp_path: Path) -> list[str]:
    return ["--data-dir", str(tmp_path / "data"), "--embedding-model", "hashing"]


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``tiermem ARGS`` in this process: (exit status, stdout, stderr); argparse's refusals included."""
    try:
        code = main(list(args))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run(tmp_path: Path, *args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """``tiermem ARGS`` as a process, the arguments exactly as given (no --data-dir appended)."""
    return subprocess.run(
        [PYTHON, "-m", "tiermem", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=server_env(tmp_path, **env),
        timeout=120,
        check=False,
    )


def stored(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> tuple[object, ...]:
    """What is on disk, as the CLI reads it: agents, the default agent's blocks (versions, flags) and settings."""
    d = data_args(tmp_path)
    shown = [
        json.loads(cli(capsys, *args, *d)[1]) for args in (("blocks", "list", "--json"), ("agents", "list", "--json"))
    ]
    agent = json.loads(cli(capsys, "agents", "show", "default", "--json", *d)[1])
    return shown[0], shown[1], agent["settings"], agent["system"]


def memory_at(tmp_path: Path) -> Memory:
    return open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="hashing"), start_embedder=False)


# 1. global options before the command -----------------------------------------------------------------------


def test_global_options_go_before_or_after_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path / "data")
    done = run(tmp_path, "--data-dir", data, "blocks", "list")  # the line the user typed
    assert done.returncode == 0, done.stderr
    assert "human" in done.stdout and (tmp_path / "data").is_dir()

    assert cli(capsys, "agents", "create", "work", *data_args(tmp_path))[0] == 0
    before = ["--data-dir", data, "--embedding-model", "hashing", "--agent", "work"]
    assert cli(capsys, *before, "blocks", "set", "human", "Name: Ada")[0] == 0
    assert cli(capsys, "blocks", "show", "human", "--agent", "work", *data_args(tmp_path))[1] == "Name: Ada\n"
    # after the command wins over before it
    code, out, _ = cli(capsys, *before, "blocks", "show", "human", "--agent", "default", "--data-dir", data)
    assert code == 0 and "Ada" not in out
    other = ["--data-dir", str(tmp_path / "other"), "--embedding-model", "hashing"]
    assert cli(capsys, *other, "blocks", "list", "--data-dir", data)[0] == 0
    assert not (tmp_path / "other").exists()
    # --config before the command: its data_dir is used
    config = tmp_path / "tiermem.toml"
    config.write_text(f'data_dir = "{data}"\nembedding_model = "hashing"\n')
    code, out, _ = cli(capsys, "--config", str(config), "blocks", "show", "human", "--agent", "work")
    assert code == 0 and out == "Name: Ada\n"

    # --agent before a command that takes no agent: refused, saying so
    code, _, err = cli(capsys, "--agent", "work", "agents", "list", *data_args(tmp_path))
    assert code == 2 and "--agent" in err and "agents list" in err

    code, out, _ = cli(capsys, "--help")
    assert code == 0 and "--data-dir" in out and "before or after the command" in out


# 2. output into a closed pipe -------------------------------------------------------------------------------


def _close_early(tmp_path: Path, *args: str, read_line: bool) -> tuple[int, str]:
    """Run ``tiermem ARGS`` into a pipe whose reader leaves: after one line (``read_line``, as ``| head -1`` does), or
    before the command writes anything (``| true``): (exit status, stderr)."""
    err_path = tmp_path / "stderr.txt"
    read_end, write_end = os.pipe()
    reader = os.fdopen(read_end, "rb")
    if not read_line:
        reader.close()  # gone before the command starts: its first write finds no reader
    with err_path.open("w") as err:
        proc = subprocess.Popen(
            [PYTHON, "-m", "tiermem", *args, "--data-dir", str(tmp_path / "data")],
            stdout=write_end,
            stderr=err,
            cwd=ROOT,
            env=server_env(tmp_path),
        )
        os.close(write_end)
        if read_line:
            assert reader.readline()
            reader.close()
        code = proc.wait(timeout=120)
    return code, err_path.read_text()


def test_output_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    memory = memory_at(tmp_path)
    agent = memory.named_agent("default")
    memory.update_block(agent.id, "human", limit=20000)
    for n in range(60):  # well over a pipe's buffer: the output cannot all be written before the reader leaves
        memory.edit(agent.id, "human", Rethink(f"{n} " + "tea " * 1200, check_line_numbers=False), actor="human")
    memory.archive.insert_many(agent.id, [(f"Passage {n} about tea. " + "green tea " * 150, []) for n in range(100)])
    for args, read_line in (
        (("blocks", "history", "human", "--limit", "100", "--json"), True),
        (("export", "--format", "jsonl"), True),
        (("export", "--format", "jsonl", "-o", "-"), True),
        (("search", "tea", "--limit", "100", "--json"), False),  # search's output is capped: it fits a pipe's buffer
        (("blocks", "list"), False),
    ):
        code, err = _close_early(tmp_path, *args, read_line=read_line)
        assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err, (args, err)
        assert code == 141, (args, code, err)  # 128 + SIGPIPE: the output was cut short, as the shell reports it


# 3. errors name the command the user types; MCP clients keep Letta's texts ----------------------------------


def test_block_errors_name_the_blocks_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = data_args(tmp_path)
    assert cli(capsys, "blocks", "set", "human", "Name: Ada", *d)[0] == 0
    before = stored(capsys, tmp_path)
    code, _, err = cli(capsys, "blocks", "create", "human", "--value", "x", *d)
    assert code == 1 and "already exists" in err and "tiermem blocks set human" in err and "memory_replace" not in err
    code, _, err = cli(capsys, "blocks", "revert", "human", "9", *d)
    assert code == 1 and "no version 9" in err and "tiermem blocks history human" in err
    assert "memory_history" not in err
    code, _, err = cli(capsys, "blocks", "revert", "human", "0", *d)
    assert code == 1 and "tiermem blocks history human" in err and "memory_history" not in err
    assert stored(capsys, tmp_path) == before


def test_a_revert_to_the_value_a_block_holds_writes_nothing_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Version 2 changed a setting only (read-only): reverting to version 1 has nothing to write (the value is the
    same, and a revert restores the value only), and says so instead of naming a new version."""
    d = data_args(tmp_path)
    assert cli(capsys, "blocks", "create", "notes", "--value", "same text", *d)[0] == 0
    assert cli(capsys, "blocks", "set", "notes", "--read-only", *d)[0] == 0
    code, out, _ = cli(capsys, "blocks", "revert", "notes", "1", *d)
    assert code == 0 and out == "notes: already holds version 1's value (version 2); nothing written\n", out
    assert cli(capsys, "blocks", "set", "notes", "other text", *d)[0] == 0
    code, out, _ = cli(capsys, "blocks", "revert", "notes", "1", *d)
    assert code == 0 and out == "notes: reverted to version 1's value as version 4\n", out
    history = json.loads(cli(capsys, "blocks", "history", "notes", "--json", *d)[1])
    assert [(v["version"], v["value"]) for v in history] == [
        (4, "same text"),
        (3, "other text"),
        (2, "same text"),
        (1, "same text"),
    ]


@pytest.mark.anyio
async def test_memory_revert_says_when_the_block_holds_that_value_already(settings: Settings) -> None:
    async with Client(serve_in_process(settings), cache=None) as c:
        await c.call_tool("memory_open", {"label": "human"})  # a rethink needs a view first (sessionless)
        await c.call_tool("memory_rethink", {"label": "human", "new_memory": "Name: Ada"})
        r = await c.call_tool("memory_revert", {"label": "human", "version": 2})
        assert text_of(r) == "Block 'human' already holds version 2's value; nothing was written. Its value:\nName: Ada"
        r = await c.call_tool("memory_revert", {"label": "human", "version": 1})
        assert not r.is_error and text_of(r) == ""  # the value of version 1 (the empty human block), written


@pytest.mark.anyio
async def test_mcp_tools_keep_their_letta_error_texts(settings: Settings) -> None:
    async with Client(serve_in_process(settings), cache=None) as c:
        r = await c.call_tool("memory_revert", {"label": "human", "version": 9})
        assert r.is_error
        assert text_of(r) == "Block 'human' has no version 9; its versions are 1 to 1. See memory_history for the list."
        r = await c.call_tool("memory_revert", {"label": "human", "version": 0})
        assert text_of(r) == "version must be a positive whole number from memory_history, got 0."
        # past SQLite's largest integer (2**63 - 1): the same answers, not an OverflowError
        r = await c.call_tool("memory_revert", {"label": "human", "version": 2**63})
        assert (
            text_of(r)
            == f"Block 'human' has no version {2**63}; its versions are 1 to 1. See memory_history for the list."
        )
        r = await c.call_tool("memory_history", {"label": "human", "limit": 2**63})
        assert not r.is_error and [v["version"] for v in (r.structured_content or {})["versions"]] == [1]
    memory = memory_at(settings.resolved_data_dir().parent)
    agent = memory.named_agent("default")
    with pytest.raises(ValidationError) as exc:
        memory.create_block(agent.id, spec("human"))
    assert str(exc.value) == (
        "A block labelled 'human' already exists; edit it with memory_replace or choose another label."
    )
    with pytest.raises(NotFoundError, match=r"See memory_history for the list\.$"):
        memory.revert(agent.id, "human", 7)


# 4. contradictory flags -----------------------------------------------------------------------------------


def test_contradictory_flags_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = data_args(tmp_path)
    before = stored(capsys, tmp_path)
    for args, flags in (
        (("blocks", "set", "human", "--pinned", "--detached"), ("--pinned", "--detached")),
        (("blocks", "set", "human", "Ada", "--detached", "--pinned"), ("--pinned", "--detached")),
        (("blocks", "set", "human", "--read-only", "--writable"), ("--read-only", "--writable")),
        (("agents", "set", "default", "--autoclear", "--no-autoclear"), ("--autoclear", "--no-autoclear")),
    ):
        code, out, err = cli(capsys, *args, *d)
        assert code == 2 and "not allowed with" in err and all(f in err for f in flags), (args, err)
        assert out == ""
    assert stored(capsys, tmp_path) == before


# 5. an empty block, and stdin's trailing newline ----------------------------------------------------------


def test_an_empty_block_shows_empty(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = data_args(tmp_path)
    assert cli(capsys, "blocks", "show", "human", *d)[1] == "(empty)\n"
    assert json.loads(cli(capsys, "blocks", "show", "human", "--json", *d)[1])["value"] == ""


def test_a_value_from_stdin_loses_one_trailing_newline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = ["--data-dir", str(tmp_path / "data")]
    for given, kept in (("Name: Ada\n", "Name: Ada"), ("Name: Ada\n\n", "Name: Ada\n"), ("Name: Ada", "Name: Ada")):
        done = run(tmp_path, "blocks", "set", "human", "-", *data, stdin=given)
        assert done.returncode == 0, done.stderr
        shown = json.loads(cli(capsys, "blocks", "show", "human", "--json", *data_args(tmp_path))[1])
        assert shown["value"] == kept, given
    code, out, _ = cli(capsys, "blocks", "set", "--help")
    assert code == 0 and "trailing newline" in out


def test_stdin_loses_a_byte_order_mark_and_a_trailing_crlf(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Text piped from a Windows editor: a UTF-8 byte order mark first is not part of the value, and its trailing
    newline is "\r\n" (one dropped, as docs/cli.md says; the lines within keep theirs)."""
    data = ["--data-dir", str(tmp_path / "data")]
    for given, kept in (
        (b"Name: Ada\r\n", "Name: Ada"),
        (b"\xef\xbb\xbfName: Ada\n", "Name: Ada"),
        (b"\xef\xbb\xbfName: Ada\r\nLikes tea\r\n", "Name: Ada\r\nLikes tea"),
        (b"Name: Ada\r\n\r\n", "Name: Ada\r\n"),
        (b"Name: Ada\r", "Name: Ada\r"),
    ):
        done = subprocess.run(
            [PYTHON, "-m", "tiermem", "blocks", "set", "human", "-", *data],
            input=given,
            capture_output=True,
            cwd=tmp_path,
            env=server_env(tmp_path),
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        shown = json.loads(cli(capsys, "blocks", "show", "human", "--json", *data_args(tmp_path))[1])
        assert shown["value"] == kept, given


def test_a_value_from_a_closed_stdin_is_refused(tmp_path: Path) -> None:
    """`tiermem remember - <&-`: stdin closed (Python's sys.stdin is None) gives a clear error, no traceback, and no
    data directory made."""
    done = subprocess.run(
        [PYTHON, "-m", "tiermem", "remember", "-", "--data-dir", str(tmp_path / "fresh")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=server_env(tmp_path),
        timeout=120,
        preexec_fn=lambda: os.close(0),  # noqa: PLW1509 - the shell's `<&-`
    )
    assert done.returncode == 1, done.stderr
    assert "stdin is closed" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "fresh").exists()


@pytest.mark.parametrize("io_encoding", ["", "utf-8:replace"], ids=["default", "PYTHONIOENCODING-replace"])
def test_stdin_that_is_not_utf8_is_refused_and_nothing_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], io_encoding: str
) -> None:
    """A value read from stdin ('-') that is not UTF-8 is refused, naming the byte and its offset, whatever Python's
    stdin error handler is (PYTHONIOENCODING=utf-8:replace stored U+FFFD in its place); nothing is stored, and a
    data directory that did not exist is not made."""
    fresh = ["--data-dir", str(tmp_path / "fresh"), "--embedding-model", "hashing"]
    d = data_args(tmp_path)
    assert cli(capsys, "blocks", "set", "human", "Name: Ada", *d)[0] == 0
    before = stored(capsys, tmp_path)
    env = server_env(tmp_path, **({"PYTHONIOENCODING": io_encoding} if io_encoding else {}))
    for args in (
        ("blocks", "set", "human", "-", *d),
        ("agents", "set", "default", "--system", "-", *d),
        ("remember", "-", *fresh),
    ):
        done = subprocess.run(
            [PYTHON, "-m", "tiermem", *args], input=b"caf\xe9 au lait\n", capture_output=True, env=env, timeout=120
        )
        err = done.stderr.decode()
        assert done.returncode == 1, (args, err)
        assert "is not UTF-8 text: the byte 0xe9 at byte offset 3" in err and "send the text as UTF-8" in err, err
    assert stored(capsys, tmp_path) == before
    assert not (tmp_path / "fresh").exists()


# 6. export's default agent ---------------------------------------------------------------------------------


def test_export_defaults_to_the_agent_every_command_uses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = data_args(tmp_path)
    assert cli(capsys, "agents", "create", "work", *d)[0] == 0
    assert cli(capsys, "blocks", "set", "human", "Name: Ada", *d)[0] == 0
    code, _, err = cli(capsys, "export", "-o", str(tmp_path / "all.af"), *d)
    assert code == 0, err
    assert [a["name"] for a in json.loads((tmp_path / "all.af").read_text())["agents"]] == ["default"]
    done = run(tmp_path, "export", "-o", "work.af", "--data-dir", str(tmp_path / "data"), TIERMEM_AGENT="work")
    assert done.returncode == 0, done.stderr
    assert [a["name"] for a in json.loads((tmp_path / "work.af").read_text())["agents"]] == ["work"]
    assert cli(capsys, "export", "--all", "-o", str(tmp_path / "every.af"), *d)[0] == 0
    assert {a["name"] for a in json.loads((tmp_path / "every.af").read_text())["agents"]} == {"default", "work"}
    assert cli(capsys, "export", "-o", str(tmp_path / "backup.jsonl"), *d)[0] == 0  # still everything, as jsonl
    assert json.loads((tmp_path / "backup.jsonl").read_text().splitlines()[0])


# 7. deleting an agent that does not exist ------------------------------------------------------------------


def test_deleting_a_missing_agent_lists_the_agents(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = data_args(tmp_path)
    assert cli(capsys, "agents", "create", "work", *d)[0] == 0
    before = stored(capsys, tmp_path)
    code, out, err = cli(capsys, "agents", "delete", "nobody", "--yes", *d)
    assert code == 1 and out == ""
    assert "No agent named 'nobody' (agents: default, work)" in err and "nothing was deleted" in err
    assert "agents create" not in err
    assert stored(capsys, tmp_path) == before


def test_forget_names_a_missing_id_or_agent_before_asking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mistyped id is said at once (not after "run again with --yes"), with where ids are shown; a missing agent is
    named with the agents there are (forgetting one is no reason to create it); an empty agent name says where it
    came from."""
    d = data_args(tmp_path)
    assert cli(capsys, "agents", "create", "work", *d)[0] == 0
    before = stored(capsys, tmp_path)
    for what, hint in (
        ("message", "`tiermem search --recall --json`"),
        ("passage", "`tiermem search --archival --json`"),
    ):
        code, out, err = cli(capsys, "forget", what, f"{what}-nope", *d)  # no --yes, stdin no terminal
        assert code == 1 and out == "" and f"with id '{what}-nope'; nothing was forgotten" in err, err
        assert hint in err and "--yes" not in err
    for args in (("agent", "old-project", "--yes"), ("message", "m-1", "--agent", "old-project", "--yes")):
        code, out, err = cli(capsys, "forget", *args, *d)
        assert code == 1 and "No agent named 'old-project' (agents: default, work); nothing was forgotten" in err
        assert "`tiermem agents list`" in err and "agents create" not in err
    monkeypatch.setenv("TIERMEM_AGENT", "")
    code, out, err = cli(capsys, "blocks", "list", *d)
    assert code == 1 and out == "" and "TIERMEM_AGENT is set but empty" in err and "unset TIERMEM_AGENT" in err
    assert "agents create" not in err
    monkeypatch.delenv("TIERMEM_AGENT")
    code, out, err = cli(capsys, "blocks", "list", "--agent", "", *d)
    assert code == 1 and "--agent is empty" in err
    assert stored(capsys, tmp_path) == before


# 8. search results in order of relevance -----------------------------------------------------------------


def test_search_lists_results_by_relevance_across_memories(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    memory = memory_at(tmp_path)
    agent = memory.named_agent("default")
    memory.archive.insert(agent.id, "The office kitchen has a kettle; someone once mentioned tea in passing.")
    memory.archive.insert(agent.id, "Quarterly report numbers for the northern region are due on Friday.")
    memory.archive.log_messages(
        agent.id,
        [
            {"role": "user", "content": "I drink green tea every morning, green tea is my favourite tea."},
            {"role": "assistant", "content": "Noted: green tea every morning."},
        ],
    )
    d = data_args(tmp_path)
    code, out, err = cli(capsys, "search", "green tea", "--json", *d)
    assert code == 0, err
    rows = json.loads(out)
    assert {r["memory"] for r in rows} == {"archival", "recall"}
    assert [r["relevance"] for r in rows] == sorted((r["relevance"] for r in rows), reverse=True)
    code, out, _ = cli(capsys, "search", "green tea", *d)
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["memory", "relevance"]
    shown = [(line.split()[0], float(line.split()[1])) for line in lines[1:]]
    assert {kind for kind, _ in shown} == {"archival", "recall"}
    assert [r for _, r in shown] == sorted((r for _, r in shown), reverse=True)


def test_a_mistyped_data_dir_is_refused_by_commands_that_only_read_change_or_delete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A data directory that does not exist, or holds no memory, is not made empty and reported on as if all were
    well: each command that only reads, changes or deletes exits 1 naming the directory and the commands that make
    one, and creates nothing. The commands that store something still make it."""
    empty = tmp_path / "empty"
    empty.mkdir()
    backup = tmp_path / "backup.jsonl"
    for data in (tmp_path / "typo", empty):
        d = ["--data-dir", str(data), "--embedding-model", "hashing"]
        for command in (
            ["doctor", "--secrets"],
            ["doctor", "--secrets", "--redact", "--yes"],
            ["forget", "--text", "old address", "--now", "--yes"],
            ["forget", "passage", "passage-1", "--now", "--yes"],
            ["export", "--format", "jsonl", "-o", str(backup)],
            ["stats"],
            ["timeline"],
            ["search", "tea"],
            ["links", "passage-1"],
            ["folders", "list"],
            ["agents", "list"],
            ["agents", "delete", "default", "--yes"],
            ["optimize"],
            ["reembed"],
        ):
            code, out, err = cli(capsys, *d, *command)
            assert code == 1 and out == "", command
            assert f"The data directory {data} " in err and "tiermem agents create" in err, (command, err)
        assert sorted(p.name for p in empty.iterdir()) == [] and not backup.exists()
    assert not (tmp_path / "typo").exists()
    assert cli(capsys, "--data-dir", str(empty), "--embedding-model", "hashing", "agents", "create", "work")[0] == 0
    assert cli(capsys, "--data-dir", str(empty), "--embedding-model", "hashing", "stats")[0] == 0


def test_a_command_that_makes_a_data_directory_refuses_an_agent_it_would_not_make_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`blocks`, `remember`, `agents show`/`set` and `chat` make a new data directory for the built-in agent
    `default`; any other agent cannot exist in one, and they refuse it (as they do once it is open): exit 1, the agent
    and the directory named, and no store made (they made one, then said "No agent named"). `folders upload` into a
    folder of a new data directory likewise."""
    (tmp_path / "a.md").write_text("apples\n")
    (tmp_path / "empty").mkdir()
    for data in (tmp_path / "new", tmp_path / "empty"):
        d = ["--data-dir", str(data), "--embedding-model", "hashing"]
        for command, missing in (
            (["blocks", "list", "--agent", "nope"], "No agent named 'nope'"),
            (["blocks", "show", "--core", "--agent", "nope"], "No agent named 'nope'"),
            (["blocks", "set", "human", "Ada", "--agent", "nope"], "No agent named 'nope'"),
            (["remember", "Ada likes tea", "--agent", "nope"], "No agent named 'nope'"),
            (["agents", "show", "nope"], "No agent named 'nope'"),
            (["agents", "set", "nope", "--sleeptime", "2"], "No agent named 'nope'"),
            (["chat", "-m", "hi", "--agent", "nope"], "No agent named 'nope'"),
            (["blocks", "attach", "human", "--from", "wrok"], "No agent named 'wrok'"),  # the agent with the block
            (["folders", "upload", "docs", str(tmp_path / "a.md")], "No folder named 'docs'"),
        ):
            code, out, err = cli(capsys, *d, *command)
            assert code == 1 and out == "", (command, err)
            assert f"{missing}: the data directory {data} holds no memory yet, and nothing was created" in err
        assert not data.exists() or list(data.iterdir()) == [], (data, list(data.iterdir()))
    new = ["--data-dir", str(tmp_path / "new"), "--embedding-model", "hashing"]
    assert cli(capsys, *new, "blocks", "list")[0] == 0  # the built-in agent: made on first use, with the directory
    assert (tmp_path / "new" / "core.sqlite3").is_file()
    code, _, err = cli(capsys, *new, "blocks", "list", "--agent", "nope")  # a memory now: the agents it has
    assert code == 1 and "No agent named 'nope' (agents: default)" in err


def test_an_export_into_a_missing_directory_names_the_users_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before anything is opened, naming the path given and the directory missing (not the temporary file
    an export is written through)."""
    assert cli(capsys, "agents", "create", "work", *data_args(tmp_path))[0] == 0
    for fmt, name in (("af", "x.af"), ("jsonl", "x.jsonl")):
        target = tmp_path / "missing" / "dir" / name
        code, out, err = cli(capsys, "export", "--format", fmt, "-o", str(target), *data_args(tmp_path))
        assert code == 1 and out == ""
        assert f"Cannot write {target}: the directory {target.parent} does not exist" in err and ".tmp" not in err
    code, _, err = cli(capsys, "export", "-o", str(tmp_path), *data_args(tmp_path))
    assert code == 1 and "it is a directory" in err
    assert not (tmp_path / "missing").exists()


def test_a_mistyped_command_action_or_config_key_gets_the_closest_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused as before (usage error 2; a config error 1, nothing made), with the closest name when one is close."""
    for args, suggestion in [
        (["serch", "tea"], "did you mean 'search'?"),
        (["agents", "lst"], "did you mean 'list'?"),
        (["config", "cursr"], "did you mean 'cursor'?"),
    ]:
        code, _, err = cli(capsys, *args)
        assert code == 2 and "invalid choice" in err and suggestion in err, err
    code, _, err = cli(capsys, "zzzz")
    assert code == 2 and "did you mean" not in err
    config = tmp_path / "typo.toml"
    config.write_text(f'data_dri = "{tmp_path / "data"}"\n[[default_blocks]]\nlabel = "x"\nlimt = 100\n')
    code, _, err = cli(capsys, "stats", "--config", str(config), "--data-dir", str(tmp_path / "data"))
    assert code == 1 and "data_dri" in err and "did you mean `data_dir`?" in err and "did you mean `limit`?" in err
    assert not (tmp_path / "data").exists()


def test_a_mistyped_option_tool_or_variable_gets_the_closest_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped option is refused by the command's parser with its closest option; one before the command is
    named, not the word after it as a bad command; an option of the command given before it is said to go after
    it. A mistyped tool name in `--tools` is refused with the closest one, and a mistyped TIERMEM_* variable is
    named with the closest setting's (the command runs, as before; the variable stays ignored)."""
    d = data_args(tmp_path)
    code, _, err = cli(capsys, "blocks", "list", "--jsn", *d)
    assert code == 2 and "tiermem blocks list: error: unrecognized arguments: --jsn; did you mean '--json'?" in err
    code, _, err = cli(capsys, "search", "tea", "--limt", "3", "--jsn", *d)
    assert code == 2 and "did you mean '--limit' for '--limt', '--json' for '--jsn'?" in err, err
    code, _, err = cli(capsys, "--data-dri", "x", "blocks", "list")
    assert code == 2 and "unrecognized option '--data-dri' (did you mean '--data-dir'?)" in err, err
    assert "'x' after it was read as COMMAND" in err and "invalid choice" not in err
    code, _, err = cli(capsys, "--json", "blocks", "list", *d)
    assert code == 2 and "'--json' is an option of `tiermem blocks list`: give it after the command" in err, err
    code, _, err = cli(capsys, "blocks", "list", "--zzzzzz", *d)
    assert code == 2 and "unrecognized arguments: --zzzzzz" in err and "did you mean" not in err
    data = tmp_path / "data"
    tools = run(tmp_path, "serve", "--tools", "memory_replce", "--data-dir", str(data))
    assert tools.returncode == 1 and "tools (--tools): 'memory_replce' is no tool, group or preset" in tools.stderr
    assert "(did you mean 'memory_replace'?)" in tools.stderr and not data.exists()
    typo = run(tmp_path, "blocks", "list", "--data-dir", str(data), TIERMEM_TOOOLS="minimal", TIERMEM_TRACE="t.jsonl")
    assert typo.returncode == 0, typo.stderr
    assert typo.stderr.count("tiermem: warning:") == 1  # TIERMEM_TRACE is read by bench/trace_server.py
    assert "TIERMEM_TOOOLS is not a tiermem setting, so it is ignored; did you mean TIERMEM_TOOLS?" in typo.stderr
