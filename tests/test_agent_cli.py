"""The agent loop from the command line and over stdio: real subprocesses, a loopback Anthropic server."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from . import fake_anthropic as fa
from .cli_inproc import run_cli
from .conftest import PYTHON, ROOT, text_of
from .test_transports import server_env, stdio_params

pytestmark = pytest.mark.anyio


def tiermem(  # type: ignore[no-untyped-def]
    tmp_path: Path, *args: str, env: dict[str, str] | None = None, stdin: str | None = None, process: bool = False
):
    """``tiermem *args`` on ``tmp_path / "data"``: in this process (``run_cli``) unless ``process`` asks for a real
    ``python -m tiermem`` (tests of the entry point, stdin, or what carries across processes)."""
    full = [*args, "--data-dir", str(tmp_path / "data")]
    if not process:
        return run_cli(*full, env=server_env(tmp_path, **(env or {})), stdin=stdin)
    return subprocess.run(
        [PYTHON, "-m", "tiermem", *full],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=server_env(tmp_path, **(env or {})),
        timeout=120,
        input=stdin,
    )


@pytest.fixture
def fake():  # type: ignore[no-untyped-def]
    with fa.FakeAnthropic() as server:
        yield server


def test_chat_one_shot_and_resume_across_processes(tmp_path: Path, fake: fa.FakeAnthropic) -> None:
    # ANTHROPIC_BASE_URL is honoured as the SDK does (no tiermem setting needed).
    env = {"ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": fake.url, "TIERMEM_MODEL": "claude-fake-1"}
    fake.add(fa.tool("memory_insert", {"label": "human", "new_str": "Name: Grace"}), fa.text("Hello Grace."))
    first = tiermem(tmp_path, "chat", "-m", "I'm Grace.", env=env, process=True)
    assert first.returncode == 0, first.stderr
    assert first.stdout == "Hello Grace.\n"  # only the reply on stdout
    assert "memory_insert(human) OK" in first.stderr
    fake.add(fa.text("Your name is Grace."))
    second = tiermem(tmp_path, "chat", "-m", "Who am I?", "--json", env=env, process=True)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["reply"] == "Your name is Grace."
    sent = fake.requests[-1]
    assert sent["model"] == "claude-fake-1"
    assert "I'm Grace." in json.dumps(sent["messages"]) and "Name: Grace" in sent["system"][1]["text"]
    shown = tiermem(tmp_path, "blocks", "show", "human")
    assert shown.stdout.strip() == "Name: Grace"


def test_chat_interactive_reads_stdin(tmp_path: Path, fake: fa.FakeAnthropic) -> None:
    env = {"ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": fake.url}
    fake.add(fa.text("one"), fa.text("two"))
    done = tiermem(tmp_path, "chat", env=env, stdin="hello\n/memory\nagain\n/quit\n", process=True)
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout.splitlines()[0] == "one"
        and "<memory_blocks>" in done.stdout
        and done.stdout.rstrip().endswith("two")
    )
    assert "sitting index of agent" in done.stderr  # built in the background while the user typed (Memory.warm)


def test_chat_without_api_key_explains(tmp_path: Path) -> None:
    env = server_env(tmp_path)
    env.pop("ANTHROPIC_API_KEY", None)
    done = subprocess.run(
        [PYTHON, "-m", "tiermem", "chat", "-m", "hi", "--data-dir", str(tmp_path / "d")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
    )
    assert done.returncode == 1 and "ANTHROPIC_API_KEY" in done.stderr and done.stdout == ""


def test_agents_set(tmp_path: Path) -> None:
    done = tiermem(
        tmp_path, "agents", "set", "default", "--type", "memgpt", "--sleeptime", "3", "--autoclear", "--json"
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["metadata"] == {
        "agent_type": "memgpt",
        "sleeptime_frequency": "3",
        "message_buffer_autoclear": "true",
    }
    shown = tiermem(tmp_path, "agents", "set", "default", "--system", "You are terse.", "--sleeptime", "3")
    assert shown.returncode == 0, shown.stderr
    changed, now = shown.stdout.splitlines()
    assert changed.startswith("default: sleeptime_frequency=3 (unchanged); system prompt set (14 characters, was ")
    assert changed.endswith("): 'You are terse.'")
    assert now == "settings now: agent_type=memgpt, message_buffer_autoclear=true, sleeptime_frequency=3"
    bad = tiermem(tmp_path, "agents", "set", "default")
    assert bad.returncode == 1 and "Nothing to set" in bad.stderr
    missing = tiermem(tmp_path, "agents", "set", "nobody", "--type", "memgpt")
    assert missing.returncode == 1 and "nobody" in missing.stderr


def test_agents_set_shows_the_agents_settings_not_what_tiermem_keeps_for_itself(tmp_path: Path) -> None:
    """An agent with a folder attached keeps its files' views in its metadata (``tiermem_files``): `agents set`
    shows the settings, as `agents show` does, not those views."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text("# Guide\n\nThe quarterly review is in room 4.\n" * 20)
    for args in (
        ("folders", "create", "docs"),
        ("folders", "upload", "docs", str(docs)),
        ("folders", "attach", "docs"),
    ):
        done = tiermem(tmp_path, *args)
        assert done.returncode == 0, done.stderr
    shown = tiermem(tmp_path, "agents", "set", "default", "--timezone", "Europe/Paris")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[1] == "settings now: timezone=Europe/Paris", shown.stdout
    as_json = tiermem(tmp_path, "agents", "set", "default", "--type", "memgpt", "--json")
    assert json.loads(as_json.stdout)["metadata"] == {"agent_type": "memgpt", "timezone": "Europe/Paris"}


async def test_serve_agent_loop_over_stdio(tmp_path: Path, fake: fa.FakeAnthropic) -> None:
    params = stdio_params(tmp_path, "--agent-loop", ANTHROPIC_API_KEY="sk-test", TIERMEM_ANTHROPIC_BASE_URL=fake.url)
    fake.add(fa.tool("archival_memory_insert", {"content": "The launch is on 3 March."}), fa.text("Saved."))
    async with Client(params, cache=None) as c:
        names = {t.name for t in (await c.list_tools()).tools}
        assert "agent_chat" in names
        result = await c.call_tool("agent_chat", {"message": "Remember: the launch is on 3 March."})
        assert text_of(result) == "Saved." and not result.is_error
        found = await c.call_tool("archival_memory_search", {"query": "launch date"})
        assert "3 March" in text_of(found)
    async with Client(stdio_params(tmp_path), cache=None) as c:  # without the flag: no agent_chat
        assert "agent_chat" not in {t.name for t in (await c.list_tools()).tools}


def test_chat_with_an_imported_letta_conversation_sends_a_valid_request(tmp_path: Path, fake: fa.FakeAnthropic) -> None:
    # Letta's example stores some tool results away from their calls; the request must still pair each call with
    # exactly one result in the next turn (the fake server refuses the request otherwise, as the real API does).
    sample = ROOT / "tests" / "fixtures" / "agent-file" / "memgpt_agent_with_convo_v1.af"
    assert tiermem(tmp_path, "import", str(sample)).returncode == 0
    env = {"ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": fake.url}
    fake.add(fa.text("Hello again, Brad."))
    done = tiermem(tmp_path, "--agent", "memgpt_agent_with_convo", "chat", "-m", "Hi", env=env)
    assert fake.invalid == [] and done.returncode == 0, (fake.invalid[:1], done.stderr)
    assert done.stdout == "Hello again, Brad.\n"
    sent = json.dumps(fake.requests[-1]["messages"])
    # the displaced results are moved to their calls, not replaced by "interrupted" ones
    assert "interrupted before it returned" not in sent


def test_chat_interactive_survives_a_bad_line(tmp_path: Path, fake: fa.FakeAnthropic) -> None:
    # A line over max_content_chars, then one that is not UTF-8: each is refused, and the chat goes on.
    env = {"ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": fake.url}
    fake.add(fa.text("still here"))
    lines = b"x" * 100_001 + b"\ncaf\xe9 bytes\nhello\n/quit\n"
    done = subprocess.run(
        [PYTHON, "-m", "tiermem", "chat", "--data-dir", str(tmp_path / "data")],
        capture_output=True,
        cwd=ROOT,
        env=server_env(tmp_path, **env),
        timeout=120,
        input=lines,
    )
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert done.stdout.decode() == "still here\n" and len(fake.requests) == 1
    assert "a message to the agent may have at most 100000" in err and "split it into several calls" not in err
    assert "That line is not valid UTF-8 text; it was not sent." in err


def test_chat_names_the_conversation_id_limit(tmp_path: Path, fake: fa.FakeAnthropic) -> None:
    env = {"ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": fake.url}
    done = tiermem(tmp_path, "chat", "-m", "hi", "--conversation", "c" * 300, env=env)
    assert done.returncode == 1 and fake.requests == []
    assert "The conversation id has 300 characters; a conversation id may have at most 200." in done.stderr
    assert "max_content_chars" not in done.stderr
    assert not (tmp_path / "data").exists()  # refused before the store was made


@pytest.mark.parametrize(
    ("message", "said"),
    [
        ("", "message is empty"),
        (b"caf\xe9", "message is not valid Unicode text (lone surrogate at position 3)"),
        ("x" * 100_001, "a message to the agent may have at most 100000"),
    ],
    ids=["empty", "not-utf8", "too-long"],
)
def test_chat_refuses_a_bad_message_before_the_store_is_made(
    tmp_path: Path, fake: fa.FakeAnthropic, message: str | bytes, said: str
) -> None:
    """A message chat refuses is refused before the data directory is made: nothing is left behind."""
    env = {"ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": fake.url}
    data = tmp_path / "data"
    done = subprocess.run(
        [PYTHON, "-m", "tiermem", "chat", "-m", message, "--data-dir", str(data)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=server_env(tmp_path, **env),
        timeout=120,
    )
    assert done.returncode == 1 and said in done.stderr and fake.requests == [], done.stderr
    assert not data.exists(), sorted(p.name for p in data.iterdir())


def test_chat_stderr_is_not_cluttered_by_http_logs(tmp_path: Path, fake: fa.FakeAnthropic) -> None:
    env = {"ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": fake.url}
    fake.add(fa.error(429, "slow down"), fa.text("ok"))
    done = tiermem(tmp_path, "chat", "-m", "hi", env=env, process=True)  # logging as a process sets it up
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
    assert len(fake.requests) == 2  # retried, quietly
    assert "HTTP Request:" not in done.stderr and "Retrying request" not in done.stderr


def test_chat_says_a_failed_turn_on_stderr_with_json_too(tmp_path: Path, fake: fa.FakeAnthropic) -> None:
    """A turn the API refused: exit 1 and the reason on stderr; with --json stdout holds the turn's result (its
    error in it) and stderr says the reason as well, so a script reading stdout is not left guessing why."""
    env = {"ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": fake.url}
    for json_flag in ((), ("--json",)):
        fake.add(fa.error(401, "invalid x-api-key"))
        done = tiermem(tmp_path, "chat", "-m", "hi", *json_flag, env=env)
        assert done.returncode == 1 and "Anthropic refused the API key (401)" in done.stderr, done.stderr
        if json_flag:
            result = json.loads(done.stdout)
            assert result["stop_reason"] == "error" and "refused the API key" in result["error"]
        else:
            assert done.stdout == ""


def test_chat_shows_a_reply_cut_at_max_tokens(tmp_path: Path, fake: fa.FakeAnthropic) -> None:
    env = {"ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": fake.url, "TIERMEM_MAX_TOKENS": "900"}
    cut = fa.text("The capital of Fra")
    cut["stop_reason"] = "max_tokens"
    fake.add(cut)
    done = tiermem(tmp_path, "chat", "-m", "q", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "The capital of Fra\n"
    assert "(The reply was cut at max_tokens (900 tokens); raise it with the max_tokens setting" in done.stderr


def test_ctrl_c_cancels_the_turn_not_the_chat(tmp_path: Path, fake: fa.FakeAnthropic) -> None:
    released = threading.Event()  # the first answer waits until the test is done: Ctrl-C comes first

    def slow(body: dict[str, Any]) -> dict[str, Any]:
        released.wait(60)
        return fa.text("too late")

    fake.add(slow, fa.text("second reply"))
    env = {"ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": fake.url}
    chat = subprocess.Popen(
        [PYTHON, "-m", "tiermem", "chat", "--data-dir", str(tmp_path / "data")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=server_env(tmp_path, **env),
    )
    try:
        assert chat.stdin is not None
        chat.stdin.write("first message\n")
        chat.stdin.flush()
        for _ in range(1200):  # until the turn's request has reached the model
            if fake.requests:
                break
            time.sleep(0.05)
        chat.send_signal(signal.SIGINT)
        out, err = chat.communicate("second message\n/quit\n", timeout=120)
    finally:
        released.set()
        if chat.poll() is None:
            chat.kill()
    assert chat.returncode == 0, err
    assert out.strip() == "second reply" and "Turn cancelled: your message is kept" in err
    second = json.dumps(fake.requests[-1]["messages"])
    assert "[An earlier message from the user that got no reply.]\\nfirst message" in second


def test_chat_json_reports_the_sleep_time_run_its_turn_started(tmp_path: Path, fake: fa.FakeAnthropic) -> None:
    """`tiermem chat -m ... --json` runs one turn: the sleep-time run it starts is waited for before the result is
    printed, and its tokens are in that result's `sleeptime_usage` (no later result would report them: it printed
    zero). Interactive, the last turn's run ends after its result: stderr says its tokens at exit."""
    env = {"ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": fake.url, "TIERMEM_SLEEPTIME_FREQUENCY": "1"}
    fake.add(fa.text("Noted."), fa.tool("memory_finish_edits", {}))
    done = tiermem(tmp_path, "chat", "-m", "I like tea.", "--json", env=env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["reply"] == "Noted." and result["sleeptime"] == "started"
    assert result["sleeptime_usage"]["input_tokens"] == 100 and result["sleeptime_usage"]["output_tokens"] > 0
    fake.add(fa.text("Hi."), fa.tool("memory_finish_edits", {}))
    typed = tiermem(tmp_path, "chat", env=env, stdin="hello\n/quit\n")
    assert typed.returncode == 0, typed.stderr
    assert "(sleep-time agent since the last reply: 100 input tokens (0 cached)" in typed.stderr, typed.stderr
