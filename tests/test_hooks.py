"""Memory that works on its own: hooks ask the running server over a private Unix socket.

The listener (``hookserver.HookListener``) runs in this process over a real store with the real embedding model; the
hook client (``hooks.run``) is called as ``tiermem hook claude-code`` runs it, with Claude Code's hook input on stdin.
The real Claude Code drives the same path in ``tests/test_claude_code.py``.
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import pytest

from tiermem.base import rendezvous
from tiermem.base.config import Settings, load_settings
from tiermem.base.errors import ConfigError
from tiermem.cli import hooks
from tiermem.domain import autorecall
from tiermem.domain.blocks import Rethink
from tiermem.domain.memory import Memory
from tiermem.interop.claude_code import HOOK_TIMEOUT
from tiermem.process.hookserver import HookListener
from tiermem.process.shutdown import Shutdown
from tiermem.server.app import resolve_tools
from tiermem.server.runtime import MemoryHandle

from .conftest import PYTHON, ROOT
from .test_transports import server_env

FACT = "Ada's cat is called Miso; he is a grey tabby who sleeps on the piano."


@pytest.fixture(scope="module")
def model_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return load_settings(data_dir=tmp_path_factory.mktemp("hooks") / "data", embedding_model="default")


@pytest.fixture(scope="module")
def opened(model_settings: Settings) -> tuple[Memory, str]:
    """One store with the real embedding model for the module (loading it costs a second), holding one fact."""
    from tiermem.domain.factory import open_memory

    memory = open_memory(model_settings)
    agent = memory.ensure_agent(model_settings.agent).id
    memory.archive.insert(agent, FACT)
    return memory, agent


@pytest.fixture
def listener(model_settings: Settings, opened: tuple[Memory, str]) -> Iterator[tuple[HookListener, Memory, str]]:
    """The server's hook listener over that store, in this test's own socket directory."""
    memory, agent = opened
    hl = HookListener(MemoryHandle(lambda: opened), model_settings, resolve_tools(["default"]), Shutdown())
    assert hl.start() is not None
    yield hl, memory, agent
    hl.close()


def hook(
    settings: Settings, data: dict[str, Any], capsys: pytest.CaptureFixture[str], listener: HookListener | None = None
) -> tuple[dict[str, Any] | None, str]:
    """Run the hook client on ``data``; (the JSON it printed or None, what it said on stderr). With ``listener``:
    after the write it does once the hook has its answer."""
    assert hooks.run(str(settings.resolved_data_dir()), settings.agent, stdin=io.StringIO(json.dumps(data))) == 0
    if listener is not None and listener.stop is not None:
        assert listener.stop.wait_idle(60)
    out, err = capsys.readouterr()
    return (json.loads(out) if out.strip() else None), err


def prompt(session: str, text: str, turn: str) -> dict[str, Any]:
    return {
        "hook_event_name": "UserPromptSubmit",
        "session_id": session,
        "prompt_id": turn,
        "prompt": text,
        "transcript_path": "/nonexistent",
        "cwd": "/tmp",
    }


def turns(memory: Memory, agent: str, session: str) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in memory.archive.rows.messages_of(agent) if m.conversation_id == session]


def test_session_start_gives_core_memory_whole(
    listener: tuple[HookListener, Memory, str], model_settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    _, memory, agent = listener
    memory.edit(agent, "human", Rethink("Name: Ada Lovelace. " + "Likes long walks. " * 150))  # ~2,700 chars
    out, _ = hook(model_settings, {"hook_event_name": "SessionStart", "session_id": "s0", "source": "startup"}, capsys)
    assert out is not None
    context = out["hookSpecificOutput"]["additionalContext"]
    assert out["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    assert memory.block(agent, "human").value in context  # whole: not the 2,048 characters of the instructions
    assert len(context) <= 10_000  # what Claude Code passes whole
    resumed, _ = hook(
        model_settings, {"hook_event_name": "SessionStart", "session_id": "s0", "source": "resume"}, capsys
    )
    assert resumed is None  # a resumed session still has it


def test_prompts_and_replies_are_logged_once(
    listener: tuple[HookListener, Memory, str], model_settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    hl, memory, agent = listener
    first = prompt("s1", "Please remember that my sister is called Grace.", "p1")
    stop = {
        "hook_event_name": "Stop",
        "session_id": "s1",
        "prompt_id": "p1",
        "stop_hook_active": False,
        "last_assistant_message": "Noted: your sister is Grace.",
    }
    for _ in range(2):  # a hook that fires again writes nothing
        hook(model_settings, first, capsys, hl)
        hook(model_settings, stop, capsys, hl)
    hook(
        model_settings, prompt("s1", "Please remember that my sister is called Grace.", "p2"), capsys, hl
    )  # said again
    logged = turns(memory, agent, "s1")
    assert logged == [
        ("user", "Please remember that my sister is called Grace."),
        ("assistant", "Noted: your sister is Grace."),
        ("user", "Please remember that my sister is called Grace."),
    ]
    stamps = [m.created_at for m in memory.archive.rows.messages_of(agent) if m.conversation_id == "s1"]
    assert stamps == sorted(stamps)


def test_a_stop_without_the_reply_reads_it_from_the_transcript(
    listener: tuple[HookListener, Memory, str],
    model_settings: Settings,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    hl, memory, agent = listener
    transcript = tmp_path / "session.jsonl"
    lines = [
        {"type": "user", "message": {"role": "user", "content": "hi"}},
        {
            "type": "assistant",
            "message": {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "t", "name": "Read", "input": {}},
                    {"type": "text", "text": "Hello Ada."},
                ],
            },
        },
        {"type": "last-prompt", "lastPrompt": "hi"},
    ]
    transcript.write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n")
    hook(
        model_settings,
        {"hook_event_name": "Stop", "session_id": "s6", "prompt_id": "p", "transcript_path": str(transcript)},
        capsys,
        hl,
    )
    assert turns(memory, agent, "s6") == [("assistant", "Hello Ada.")]


def test_a_relevant_prompt_gets_the_stored_fact_and_an_unrelated_one_nothing(
    listener: tuple[HookListener, Memory, str], model_settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = hook(model_settings, prompt("s2", "What is the name of my cat?", "q1"), capsys)
    assert out is not None and out["hookSpecificOutput"]["hookEventName"] == "UserPromptSubmit"
    assert FACT in out["hookSpecificOutput"]["additionalContext"]
    unrelated, _ = hook(model_settings, prompt("s2", "How do I reverse a linked list in C?", "q2"), capsys)
    assert unrelated is None  # below the threshold: the prompt goes through with nothing added


def test_recall_never_returns_the_prompt_or_its_own_session(
    listener: tuple[HookListener, Memory, str], model_settings: Settings
) -> None:
    _, memory, agent = listener
    for text, role in (
        ("My favourite mountain is Ben Nevis in Scotland.", "user"),
        ("Ben Nevis is the highest mountain in the British Isles.", "assistant"),
    ):
        autorecall.log_turn(memory, agent, session="s3", turn="t1", role=role, content=text)  # type: ignore[arg-type]
    question = "Which mountain is my favourite?"
    autorecall.log_turn(
        memory, agent, session="s4", turn="t0", role="user", content=question
    )  # asked before, elsewhere
    low = autorecall.RecallSettings(threshold=0.0, limit=20, max_chars=4000)
    same = autorecall.recall(memory, agent, question, session="s3", settings=low)
    assert not any("Ben Nevis" in r.content for r in same if r.source == "recall")  # its own session's turns
    other = autorecall.recall(memory, agent, question, session="s5", settings=low)
    assert any("My favourite mountain is Ben Nevis" in r.content for r in other)  # another session's are memories
    assert all(r.content != question for r in same + other)  # the prompt itself is never a memory of itself


def test_no_server_fails_soft_and_says_why(model_settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    out, err = hook(model_settings, prompt("s9", "What is my cat called?", "x"), capsys)
    assert out is None  # nothing printed: the prompt goes through unchanged
    assert "no tiermem server is running for this memory" in err
    assert "no tiermem server is running" in hooks.log_file().read_text()
    # the log names the user's paths and sessions: its directory and the file are the user's alone
    assert hooks.log_file().stat().st_mode & 0o777 == 0o600
    assert hooks.log_file().parent.stat().st_mode & 0o777 == 0o700
    hooks.log_file().chmod(0o644)  # as an older tiermem left it: made private at the next line
    hook(model_settings, prompt("s9", "And my dog?", "x"), capsys)
    assert hooks.log_file().stat().st_mode & 0o777 == 0o600


def test_garbage_input_fails_soft(model_settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    assert hooks.run("/d", "a", stdin=io.StringIO("not json")) == 0
    out, err = capsys.readouterr()
    assert out == "" and "unreadable hook input" in err


def test_a_server_of_another_memory_is_not_asked(
    listener: tuple[HookListener, Memory, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = load_settings(data_dir=tmp_path / "elsewhere", embedding_model="hashing")
    out, err = hook(other, {"hook_event_name": "SessionStart", "session_id": "x", "source": "startup"}, capsys)
    assert out is None and "no tiermem server is running" in err


def test_the_socket_directory_is_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = tmp_path / "rt"
    base.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(base))
    made = rendezvous.private_dir(create=True)
    assert made == base / "tiermem" and (made.stat().st_mode & 0o777) == 0o700
    made.chmod(0o755)
    with pytest.raises(ConfigError, match="open to others"):
        rendezvous.private_dir(create=False)
    made.rmdir()
    (base / "elsewhere").mkdir(mode=0o700)
    made.symlink_to(base / "elsewhere")
    with pytest.raises(ConfigError, match="symlink"):
        rendezvous.private_dir(create=True)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to act as another user")
def test_another_user_cannot_reach_a_server(listener: tuple[HookListener, Memory, str]) -> None:
    python = shutil.which("python3", path="/usr/bin:/bin")  # one another user may run (the venv's may be private)
    if python is None:
        pytest.skip("no system python3 for another user to run")
    hl, _, _ = listener
    assert hl.path is not None and (hl.path.stat().st_mode & 0o777) == 0o600
    code = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n    s.connect(sys.argv[1])\nexcept OSError as e:\n    print(type(e).__name__)\nelse:\n    print('connected')\n"
    )
    done = subprocess.run(
        [python, "-c", code, str(hl.path)], capture_output=True, text=True, timeout=30, cwd="/", user=65534, check=False
    )
    assert done.stdout.strip() == "PermissionError", done.stdout + done.stderr


def test_a_request_for_another_memory_is_refused(listener: tuple[HookListener, Memory, str]) -> None:
    hl, _, _ = listener
    assert hl.path is not None
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(hl.path))
        s.sendall(b'{"key": "wrong", "event": "SessionStart", "input": {}}\n')
        answer = json.loads(s.makefile().readline())
    assert answer == {"ok": False, "error": "this server serves another data directory or agent"}


@pytest.mark.skipif(os.getuid() != 0 or not hasattr(socket, "SO_PEERCRED"), reason="needs root and SO_PEERCRED")
def test_a_peer_of_another_user_is_refused_even_through_an_open_door(
    listener: tuple[HookListener, Memory, str],
) -> None:
    """The second guard: were the directory and socket opened to others by hand, the server still serves only its
    own user (the peer's credentials, SO_PEERCRED)."""
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        pytest.skip("no system python3 for another user to run")
    hl, _, _ = listener
    assert hl.path is not None
    for d in (hl.path.parent, hl.path.parent.parent):
        d.chmod(0o711)
    hl.path.chmod(0o666)
    code = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\n"
        "try:\n    s.sendall(sys.argv[2].encode() + b'\\n')\n    got = s.recv(65536)\n"
        "except (ConnectionResetError, BrokenPipeError):\n    got = b''\nprint('answered' if got else 'refused')\n"
    )
    request = json.dumps({"key": hl.key, "event": "SessionStart", "input": {"source": "startup"}})
    done = subprocess.run(
        [python, "-c", code, str(hl.path), request],
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
        user=65534,
        check=False,
    )
    assert done.stdout.strip() == "refused", done.stdout + done.stderr  # connected, then closed without an answer


def test_tiermem_serve_listens_and_the_hook_command_asks_it(tmp_path: Path) -> None:
    """The real commands: `tiermem serve` (stdio, kept open as a host does) and `tiermem hook claude-code`."""
    data = tmp_path / "data"
    env = server_env(tmp_path)
    server = subprocess.Popen(
        [PYTHON, "-m", "tiermem", "serve", "--data-dir", str(data)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        hook_cmd = [PYTHON, "-m", "tiermem", "hook", "claude-code", "--data-dir", str(data), "--agent", "default"]
        start = subprocess.run(
            hook_cmd,
            input=json.dumps({"hook_event_name": "SessionStart", "session_id": "c1", "source": "startup"}),
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=60,
            check=False,
        )
        assert start.returncode == 0, start.stderr
        assert "<memory_blocks>" in json.loads(start.stdout)["hookSpecificOutput"]["additionalContext"]
        for _ in range(2):
            sent = subprocess.run(
                hook_cmd,
                input=json.dumps(prompt("c1", "Remember: the launch is on Friday.", "p")),
                capture_output=True,
                text=True,
                cwd=ROOT,
                env=env,
                timeout=60,
                check=False,
            )
            assert sent.returncode == 0, sent.stderr
    finally:
        server.send_signal(2)
        server.wait(timeout=60)
    from tiermem.domain.factory import open_memory

    memory = open_memory(load_settings(data_dir=data, embedding_model="hashing"), start_embedder=False)
    agent = memory.ensure_agent("default").id
    assert turns(memory, agent, "c1") == [("user", "Remember: the launch is on Friday.")]
    assert not list(rendezvous.runtime_dir().glob("*.sock"))  # the server removed its socket when it stopped


def test_a_hook_waits_only_for_a_server_that_has_not_opened_its_socket(tmp_path: Path) -> None:
    """A hook that finds no socket for its memory waits (up to hooks.START_WAIT) while a young `tiermem serve` of its
    host has not opened its socket yet; one that already listens serves another memory: no wait."""
    env = server_env(tmp_path)
    directory = rendezvous.runtime_dir()
    host = [os.getpid()]  # this test plays the host that started the server and runs the hook
    server = subprocess.Popen(
        [PYTHON, "-m", "tiermem", "serve", "--data-dir", str(tmp_path / "data")],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    starting = subprocess.Popen(
        [PYTHON, "-c", "import sys; sys.stdin.read()", "tiermem", "serve"], cwd=ROOT, stdin=subprocess.PIPE
    )  # looks like a server that is still starting: no socket
    try:
        deadline = time.monotonic() + 60
        while not any(str(server.pid) in p.name for p in directory.glob("*.sock")):
            assert server.poll() is None and time.monotonic() < deadline, "the server did not open its socket"
            time.sleep(0.05)
        assert rendezvous.starting_server(directory, lineage=host)  # the one without a socket
        starting.communicate(b"", timeout=30)
        assert not rendezvous.starting_server(directory, lineage=host)  # the listening one serves another memory
    finally:
        starting.kill()
        server.send_signal(2)
        server.wait(timeout=60)


def test_the_hook_command_imports_little(tmp_path: Path) -> None:
    """`tiermem hook ...` runs once per prompt: it loads neither the CLI, pydantic, the SDK nor the store."""
    code = (
        "import io, json, sys\n"
        "sys.stdin = io.StringIO('{}')\n"
        "from tiermem.cli import main\n"
        "main(['hook', 'claude-code', '--data-dir', sys.argv[1], '--agent', 'a'])\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [PYTHON, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=server_env(tmp_path),
        timeout=60,
        check=True,
    )
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
    assert {"tiermem.cli.hooks", "tiermem.base.rendezvous"} <= loaded
    assert not loaded & {
        "tiermem.cli.main",
        "tiermem.base.config",
        "pydantic",
        "mcp",
        "lancedb",
        "argparse",
        "tempfile",
    }


def test_other_commands_and_help_go_to_the_cli() -> None:
    from tiermem.cli import _hook_options

    assert _hook_options(["hook", "claude-code", "--data-dir", "/d", "--agent", "a"]) == {
        "--data-dir": "/d",
        "--agent": "a",
    }
    for other in (
        ["hook", "claude-code", "--help"],
        ["hook", "claude-code", "--agent"],
        ["serve"],
        [],
        ["hook", "claude-code", "--agent", "a", "--agent", "b"],
    ):
        assert _hook_options(other) is None
    done = subprocess.run(
        [PYTHON, "-m", "tiermem", "hook", "claude-code", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and "usage: tiermem hook" in done.stdout


def transcript_line(kind: str, content: object, **more: object) -> str:
    return json.dumps({"type": kind, "message": {"role": kind, "content": content}, **more}) + "\n"


def test_without_a_prompt_id_the_same_words_again_are_a_new_turn(
    listener: tuple[HookListener, Memory, str],
    model_settings: Settings,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Hosts that send no prompt_id: the turn is its place in the transcript. "yes" said twice is logged twice; a hook
    fired twice for one prompt (same transcript) once."""
    hl, memory, agent = listener
    transcript = tmp_path / "t.jsonl"  # Claude Code writes the prompt to it after the UserPromptSubmit hooks
    said = {
        "hook_event_name": "UserPromptSubmit",
        "session_id": "s7",
        "prompt": "yes",
        "transcript_path": str(transcript),
    }
    done = {
        "hook_event_name": "Stop",
        "session_id": "s7",
        "last_assistant_message": "Done.",
        "transcript_path": str(transcript),
    }
    for _turn in range(2):
        for _ in range(2):  # fired twice
            hook(model_settings, said, capsys, hl)
        with transcript.open("a") as f:
            f.write(transcript_line("user", "yes"))
            f.write(transcript_line("user", [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]))
            f.write(transcript_line("user", "<command-output>meta</command-output>", isMeta=True))
        for _ in range(2):
            hook(model_settings, done, capsys, hl)
        with transcript.open("a") as f:
            f.write(transcript_line("assistant", [{"type": "text", "text": "Done."}]))
    assert turns(memory, agent, "s7") == [("user", "yes"), ("assistant", "Done.")] * 2


def test_without_a_prompt_id_or_transcript_a_hook_fired_again_at_once_logs_once(
    listener: tuple[HookListener, Memory, str], model_settings: Settings
) -> None:
    hl, memory, agent = listener
    request = {"key": hl.key, "event": "UserPromptSubmit", "input": {"session_id": "s8", "prompt": "ok"}}
    for _ in range(2):
        _, then = hl.answer(request)
        assert then is not None
        then()
    assert turns(memory, agent, "s8") == [("user", "ok")]
    later = HookListener(hl.handle, model_settings, resolve_tools(["default"]), refire_window=0.0)  # past the window
    _, then = later.answer(request)
    assert then is not None
    then()
    assert turns(memory, agent, "s8") == [("user", "ok")] * 2


def ask_raw(path: Path, payload: bytes) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(path))
        s.sendall(payload)
        answer: dict[str, Any] = json.loads(s.makefile("rb").readline())
    return answer


def test_bad_input_is_refused_as_such_and_a_failure_of_tiermem_is_reported_as_one(
    listener: tuple[HookListener, Memory, str], model_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    hl, _, _ = listener
    assert hl.path is not None
    assert ask_raw(hl.path, b"not json\n")["error"].startswith("bad hook request: not one JSON line")
    missing = ask_raw(hl.path, json.dumps({"key": hl.key, "event": "Stop"}).encode() + b"\n")
    assert missing == {"ok": False, "error": "bad hook request: `input` (the hook's input, a JSON object) is missing"}
    wrong = ask_raw(
        hl.path,
        json.dumps(
            {"key": hl.key, "event": "UserPromptSubmit", "input": {"session_id": "s", "prompt": ["a", "list"]}}
        ).encode()
        + b"\n",
    )
    assert wrong == {"ok": False, "error": "bad hook request: `input.prompt` is not a string"}

    broken = HookListener(
        MemoryHandle(lambda: cast("tuple[Memory, str]", (object(), "agent"))),
        model_settings,
        resolve_tools(["default"]),
    )  # a memory without blocks: a bug of tiermem's, not bad input
    assert broken.start() is not None and broken.path is not None
    try:
        with caplog.at_level(logging.ERROR, logger="tiermem.process.hookserver"):
            answer = ask_raw(
                broken.path,
                json.dumps({"key": broken.key, "event": "SessionStart", "input": {"source": "startup"}}).encode()
                + b"\n",
            )
    finally:
        broken.close()
    assert answer["ok"] is False and "bad hook request" not in answer["error"]
    assert answer["error"].startswith("tiermem failed on this hook request (AttributeError: ")
    assert "the server's log (stderr) has the traceback" in answer["error"]
    failed = [r for r in caplog.records if "tiermem failed on it" in r.getMessage()]
    assert failed and failed[0].exc_info is not None  # with its traceback


def test_an_over_long_request_is_refused_whole_not_cut(
    listener: tuple[HookListener, Memory, str], model_settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    hl, memory, agent = listener
    assert hl.path is not None
    huge = "word " * (rendezvous.MAX_REQUEST // 5 + 10)
    request = {"key": hl.key, "event": "UserPromptSubmit", "input": {"session_id": "s10", "prompt": huge}}
    answer = ask_raw(hl.path, json.dumps(request).encode() + b"\n")
    assert answer == {
        "ok": False,
        "error": f"bad hook request: it is over {rendezvous.MAX_REQUEST:,} bytes, the most "
        "a hook request may be (a prompt or reply that long is neither logged "
        "nor searched)",
    }
    out, err = hook(model_settings, prompt("s10", huge, "p"), capsys, hl)  # the hook itself does not send it
    assert out is None and f"over the {rendezvous.MAX_REQUEST:,} a hook request may be" in err
    assert turns(memory, agent, "s10") == []


@pytest.mark.parametrize("stopping", [False, True], ids=["answered", "shutting-down"])
def test_a_hook_gone_before_its_answer_leaves_no_traceback(
    tmp_path: Path, stopping: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A hook that stops reading (the host went on without it) before the server writes its answer, a refusal or the
    "shutting down" one: the server notes it and carries on; no exception escapes the connection's thread."""
    settings = load_settings(data_dir=tmp_path / "data")
    stop = Shutdown(drain_seconds=5)
    if stopping:
        stop.stopping.set()
    hl = HookListener(MemoryHandle(lambda: cast("tuple[Memory, str]", (object(), "agent"))), settings, [], stop)
    escaped: list[threading.ExceptHookArgs] = []
    previous, threading.excepthook = threading.excepthook, escaped.append
    try:
        assert hl.start() is not None and hl.path is not None
        with caplog.at_level(logging.INFO, logger="tiermem.process.hookserver"), socket.socket(socket.AF_UNIX) as s:
            s.connect(str(hl.path))
            s.shutdown(socket.SHUT_RD)  # gone: whatever the server writes now fails (EPIPE)
            s.sendall(b"not json\n")
            deadline = time.monotonic() + 30
            while not escaped and not any("went away" in r.getMessage() for r in caplog.records):
                assert time.monotonic() < deadline, "the server neither noted the gone hook nor failed"
                time.sleep(0.01)
            time.sleep(0.2)  # the connection's thread closes its files after the note
    finally:
        threading.excepthook = previous
        hl.close()
    assert [f"{e.exc_type.__name__}: {e.exc_value}" for e in escaped] == []
    assert not [r for r in caplog.records if r.exc_info is not None]


# -- a server that does not answer, input the host got wrong ------------------------------------------------------------


def test_a_stopped_server_does_not_keep_the_host_waiting(tmp_path: Path) -> None:
    """A stopped (SIGSTOP) or hung server keeps its socket, and the kernel still completes connections to it: the hook
    gives up on it once it has not taken the request within hooks.TAKE_TIMEOUT (a live server acknowledges a request
    in milliseconds, even while it loads its model), not after the answer's budget, and fails soft."""
    data = tmp_path / "data"
    key = rendezvous.memory_key(data, "default")
    path = rendezvous.private_dir(create=True) / rendezvous.socket_name(key, os.getpid(), os.getpid())
    with socket.socket(socket.AF_UNIX) as hung:
        hung.bind(str(path))
        hung.listen(4)  # never accepted, never answered: what a stopped server's socket does
        said = prompt("s20", "What is my cat called?", "p")
        # the answer's budget would be over by then
        done = run_hook_command(data, said, server_env(tmp_path), hooks.ANSWER_TIMEOUT["UserPromptSubmit"])
    assert done.returncode == 0 and done.stdout == ""
    assert f"did not take the request within {hooks.TAKE_TIMEOUT:g} s (it is stopped or hung)" in done.stderr


def run_hook_command(data: Path, said: dict[str, Any], env: dict[str, str], timeout: float) -> Any:
    """The real ``tiermem hook claude-code`` process for ``data``'s default agent, ``said`` on its stdin, as a host
    runs it (given ``timeout`` s); its completed process (text output)."""
    return subprocess.run(
        [PYTHON, "-m", "tiermem", "hook", "claude-code", "--data-dir", str(data), "--agent", "default"],
        input=json.dumps(said),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=timeout,
        check=False,
    )


@contextmanager
def two_servers_sockets(data: Path) -> Iterator[tuple[socket.socket, socket.socket]]:
    """Two listening sockets where the hook of ``data``'s default agent looks for its servers: the first (the hook's
    parent's) is asked first, the second next; both closed afterwards."""
    key = rendezvous.memory_key(data, "default")
    directory = rendezvous.private_dir(create=True)
    with socket.socket(socket.AF_UNIX) as first, socket.socket(socket.AF_UNIX) as second:
        first.bind(str(directory / rendezvous.socket_name(key, os.getpid(), os.getpid())))  # the hook's parent's
        second.bind(str(directory / rendezvous.socket_name(key, os.getppid(), os.getpid())))  # asked second
        for sock in (first, second):
            sock.listen(1)
            sock.settimeout(HOOK_TIMEOUT)  # a hook that never comes does not hold the test
        yield first, second


def started_server(data: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A real `tiermem serve` of ``data`` (stdio, kept open as a host does), once it listens for hooks; its stderr
    goes to ``log``."""
    with log.open("wb") as err:
        server = subprocess.Popen(
            [PYTHON, "-m", "tiermem", "serve", "--data-dir", str(data)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    deadline = time.monotonic() + 60
    while not any(str(server.pid) in p.name for p in rendezvous.runtime_dir().glob("*.sock")):
        assert server.poll() is None and time.monotonic() < deadline, "the server did not open its socket"
        time.sleep(0.05)
    return server


def stored_turns(data: Path, session: str) -> list[tuple[str, str]]:
    from tiermem.domain.factory import open_memory

    memory = open_memory(load_settings(data_dir=data, embedding_model="hashing"), start_embedder=False)
    return turns(memory, memory.ensure_agent("default").id, session)


def test_a_request_the_hook_gave_up_on_is_dropped_when_its_server_resumes(tmp_path: Path) -> None:
    """A stopped server (SIGSTOP) keeps the hook's request in its socket's queue. The hook gives up on it after
    hooks.TAKE_TIMEOUT and asks the next server of the same memory, which logs the prompt. When the stopped one
    resumes (SIGCONT) it takes the request, finds the hook gone (no ``{"go": true}`` after its acknowledgement) and
    drops it: a turn without a prompt id or transcript to tell it by is logged once, not once per server."""
    data = tmp_path / "data"
    env = server_env(tmp_path)
    other = started_server(data, env, tmp_path / "other.log")
    resumed_log = tmp_path / "resumed.log"
    resumed = started_server(data, env, resumed_log)  # the newer socket: the hook asks it first
    said = {"hook_event_name": "UserPromptSubmit", "session_id": "s24", "prompt": "Ship it on Friday.", "cwd": "/tmp"}
    try:
        os.kill(resumed.pid, signal.SIGSTOP)
        try:
            done = run_hook_command(data, said, env, HOOK_TIMEOUT)
        finally:
            os.kill(resumed.pid, signal.SIGCONT)
        assert done.returncode == 0 and done.stderr == "", done.stderr  # the other server answered
        deadline = time.monotonic() + 60  # until the resumed server has dropped the request, or done it after all
        while "dropped, nothing done" not in resumed_log.read_text() and len(stored_turns(data, "s24")) < 2:
            assert resumed.poll() is None and time.monotonic() < deadline, resumed_log.read_text()
            time.sleep(0.1)
    finally:
        for server in (resumed, other):
            server.send_signal(signal.SIGCONT)
            server.send_signal(signal.SIGINT)  # each finishes the requests it has in flight first
            server.wait(timeout=60)
    assert stored_turns(data, "s24") == [("user", "Ship it on Friday.")]
    assert "a hook gave up on this server before it took the request" in resumed_log.read_text()


def test_a_server_that_closes_without_a_word_passes_the_request_to_the_next(tmp_path: Path) -> None:
    """A server that closes the connection before taking the request (going away) did nothing: the hook asks the
    next server of the memory, whose answer it prints (it took that first close for the answer, and the turn was
    lost while a healthy server existed)."""
    data = tmp_path / "data"
    heard: list[bytes] = []
    with two_servers_sockets(data) as (closing, other):

        def close_at_once() -> None:
            conn, _ = closing.accept()
            with conn, conn.makefile("rb") as lines:
                heard.append(lines.readline())  # the request read, then closed without a word

        def answer() -> None:
            conn, _ = other.accept()
            with conn, conn.makefile("rb") as lines:
                heard.append(lines.readline())
                conn.sendall(json.dumps({"ack": True}).encode() + b"\n")
                heard.append(lines.readline())  # the hook's go
                conn.sendall(json.dumps({"ok": True, "context": "the cat is called Miso"}).encode() + b"\n")

        servers = [threading.Thread(target=f, daemon=True) for f in (close_at_once, answer)]
        for t in servers:
            t.start()
        try:
            done = run_hook_command(
                data, prompt("s26", "What is my cat called?", "p"), server_env(tmp_path), HOOK_TIMEOUT
            )
        finally:
            for t in servers:
                t.join(HOOK_TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"] == "the cat is called Miso"
    first, *second = heard
    assert json.loads(first)["input"]["session_id"] == "s26" == json.loads(second[0])["input"]["session_id"]
    assert json.loads(second[1]) == {"go": True}


def test_a_server_that_took_the_request_then_went_silent_does_not_keep_the_host_waiting(tmp_path: Path) -> None:
    """A server that acknowledged the request in time (and had the hook's go) and then answers nothing (stopped or
    hung after it took it): the hook gives up after its event's hooks.ANSWER_TIMEOUT, within the time the host gives
    a hook, prints nothing and exits 0. It asks no other server: the silent one has the request and does it if it
    resumes, so asking another would log the turn twice."""
    data = tmp_path / "data"
    heard: list[bytes] = []
    with two_servers_sockets(data) as (silent, other):

        def take_then_fall_silent() -> None:
            conn, _ = silent.accept()
            with conn, conn.makefile("rb") as lines:
                heard.append(lines.readline())
                conn.sendall(json.dumps({"ack": True}).encode() + b"\n")
                heard.append(lines.readline())  # the hook's go
                heard.append(lines.readline())  # nothing more: read until the hook has gone

        taking = threading.Thread(target=take_then_fall_silent, daemon=True)
        taking.start()
        try:  # given what the host gives a hook
            done = run_hook_command(
                data, prompt("s25", "What is my cat called?", "p"), server_env(tmp_path), HOOK_TIMEOUT
            )
        finally:
            taking.join(HOOK_TIMEOUT)
        other.setblocking(False)
        with pytest.raises(BlockingIOError):
            other.accept()  # the other server was never asked
    assert done.returncode == 0 and done.stdout == ""
    limit = hooks.ANSWER_TIMEOUT["UserPromptSubmit"]
    assert f"the server took the request but did not answer within {limit:g} s" in done.stderr
    assert json.loads(heard[0])["input"]["session_id"] == "s25"
    assert json.loads(heard[1]) == {"go": True} and heard[2] == b""


def test_the_hook_tries_no_more_servers_once_its_time_is_spent(tmp_path: Path) -> None:
    """Each stopped or hung server costs the hook up to hooks.TAKE_TIMEOUT: however many there are, the hook stops
    trying them once hooks.BUDGET (from its start) is spent, so the host's limit is never passed. Time is a clock the
    test moves: each hung server it reaches costs 30 s of it, so after two the budget is gone and the other two are
    never asked."""
    key = rendezvous.memory_key(tmp_path / "data", "default")
    directory = rendezvous.private_dir(create=True)
    moved = [0.0]
    lock = threading.Lock()

    def clock() -> float:
        with lock:
            return time.monotonic() + moved[0]

    hung = []
    for host in range(4):
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(directory / rendezvous.socket_name(key, 900_000 + host, os.getpid())))  # none the hook's host
        s.listen(1)
        s.settimeout(HOOK_TIMEOUT)
        hung.append(s)

    def hang(server: socket.socket) -> None:
        try:
            conn, _ = server.accept()
        except OSError:
            return  # never asked (closed at the end)
        with conn, conn.makefile("rb") as lines:
            lines.readline()
            with lock:
                moved[0] += 30.0  # this server cost the hook 30 s
            lines.readline()  # no acknowledgement, ever: until the hook gives up on it

    threads = [threading.Thread(target=hang, args=(s,), daemon=True) for s in hung]
    for t in threads:
        t.start()
    try:
        with pytest.raises(hooks.Unavailable, match="before the hook's time ran out") as raised:
            hooks.ask(key, {"v": 1, "key": key}, wait=0, until=clock() + hooks.BUDGET, clock=clock)
    finally:
        for s in hung:
            s.shutdown(socket.SHUT_RDWR)
            s.close()
        for t in threads:
            t.join(HOOK_TIMEOUT)
    assert moved[0] == 60.0  # two servers asked, not four
    assert str(raised.value).count("it is stopped or hung") == 2
    assert hooks.BUDGET + 1 < HOOK_TIMEOUT  # Python's start and the input fit in what is left


def test_a_server_shutting_down_passes_the_request_to_the_next(
    listener: tuple[HookListener, Memory, str], model_settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server that is shutting down refuses a hook's request undone (``"retry": true``): the hook asks the next
    server of the memory, which logs the prompt and answers it."""
    hl, memory, agent = listener
    assert hl.path is not None
    healthy = hl.path.with_name(rendezvous.socket_name(hl.key, os.getppid(), os.getppid()))  # a live pid: asked
    hl.path.rename(healthy)  # a Unix socket is reached at its new name
    hl.path = healthy
    os.utime(healthy, (time.time() - 100, time.time() - 100))  # older: asked after the one shutting down
    stop = Shutdown(drain_seconds=5)
    stop.stopping.set()
    stopping = HookListener(MemoryHandle(lambda: (memory, agent)), model_settings, [], stop)
    assert stopping.start() is not None and stopping.path is not None
    try:
        refused = ask_raw(stopping.path, json.dumps({"v": 1, "key": hl.key, "ack": True}).encode() + b"\n")
        assert refused["ok"] is False and refused["retry"] is True and "shutting down" in refused["error"]
        out, err = hook(model_settings, prompt("s26", "What is my cat called?", "p26"), capsys, hl)
    finally:
        stopping.close()
    assert err == "" and out is not None and "Miso" in out["hookSpecificOutput"]["additionalContext"]
    assert turns(memory, agent, "s26") == [("user", "What is my cat called?")]


@pytest.mark.parametrize("acknowledges", [False, True], ids=["older-than-ack", "older-than-confirm"])
def test_an_older_server_is_still_heard(
    model_settings: Settings, capsys: pytest.CaptureFixture[str], acknowledges: bool
) -> None:
    """A server older than acknowledgements (``"ack"`` in the request unknown to it) answers at once: the hook takes
    that first line as the answer. One older than confirmations (``"confirm"`` unknown to it) acknowledges, answers
    and closes without reading the hook's go: the hook still takes its answer (and asks no other server)."""
    key = rendezvous.memory_key(model_settings.resolved_data_dir(), model_settings.agent)
    path = rendezvous.private_dir(create=True) / rendezvous.socket_name(key, os.getpid(), os.getpid())
    with socket.socket(socket.AF_UNIX) as old:
        old.bind(str(path))
        old.listen(1)

        def serve() -> None:
            conn, _ = old.accept()
            with conn, conn.makefile("rb") as lines:
                lines.readline()
                if acknowledges:
                    conn.sendall(json.dumps({"ack": True}).encode() + b"\n")
                conn.sendall(json.dumps({"ok": True, "context": "from an older server"}).encode() + b"\n")

        answering = threading.Thread(target=serve)
        answering.start()
        out, _ = hook(model_settings, prompt("s21", "hello", "p"), capsys)
        answering.join(30)
    assert out is not None and out["hookSpecificOutput"]["additionalContext"] == "from an older server"


def test_deeply_nested_input_fails_soft(
    listener: tuple[HookListener, Memory, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """JSON nested deeper than Python's recursion limit: the hook exits 0 and says why; the server refuses such a
    request as bad input (its connection's thread does not die)."""
    hl, _, _ = listener
    deep = '{"hook_event_name": "UserPromptSubmit", "session_id": "s22", "prompt": "hi", "x": ' + "[" * 100_000
    deep += "]" * 100_000 + "}"
    assert hooks.run("/d", "a", stdin=io.StringIO(deep)) == 0
    out, err = capsys.readouterr()
    assert out == "" and "unreadable hook input: its JSON is nested too deeply to read" in err
    assert hl.path is not None
    assert ask_raw(hl.path, deep.encode() + b"\n") == {
        "ok": False,
        "error": "bad hook request: its JSON is nested too deeply",
    }


def test_undecodable_text_is_replaced_not_the_turn_dropped(
    listener: tuple[HookListener, Memory, str], model_settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    """A byte that is not UTF-8 in the hook's input, or a lone surrogate escape, becomes U+FFFD (as in an uploaded
    file's text): the prompt is logged and searched with the rest of its words."""
    hl, memory, agent = listener
    raw = (
        b'{"hook_event_name": "UserPromptSubmit", "session_id": "s23", "prompt_id": "p1", "cwd": "/tmp", '
        b'"prompt": "caf\xe9 \xff on the terrace"}'
    )
    assert hooks.run(str(model_settings.resolved_data_dir()), model_settings.agent, stdin=io.BytesIO(raw)) == 0
    escaped = prompt("s23", "a lone \ud800 surrogate", "p2")
    assert (
        hooks.run(str(model_settings.resolved_data_dir()), model_settings.agent, stdin=io.StringIO(json.dumps(escaped)))
        == 0
    )
    assert hl.stop is not None and hl.stop.wait_idle(60)
    assert turns(memory, agent, "s23") == [
        ("user", "caf\ufffd \ufffd on the terrace"),
        ("user", "a lone \ufffd surrogate"),
    ]
    _, err = capsys.readouterr()
    assert "failed" not in err and "unreadable" not in err, err


def test_a_session_hook_finds_a_server_that_comes_after_it(
    model_settings: Settings, opened: tuple[Memory, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A host may run a session's first hook before it has started its server at all (no server process yet, so
    none is "starting"): SessionStart looks for one a little while (``SESSION_GRACE``) and gets its context; a prompt
    hook does not wait for a server no one is starting."""
    memory, agent = opened
    hl = HookListener(MemoryHandle(lambda: opened), model_settings, resolve_tools(["default"]), Shutdown())
    timer = threading.Timer(1.0, hl.start)
    timer.start()
    try:
        started = time.monotonic()
        out, err = hook(
            model_settings, {"hook_event_name": "SessionStart", "session_id": "g1", "source": "startup"}, capsys
        )
        assert out is not None and "no tiermem server" not in err, err
        assert time.monotonic() - started < hooks.SESSION_GRACE + hooks.TAKE_TIMEOUT
    finally:
        timer.join()
        hl.close()
    out, err = hook(model_settings, prompt("g2", "What is my cat called?", "x"), capsys)
    assert out is None and "no tiermem server is running" in err
