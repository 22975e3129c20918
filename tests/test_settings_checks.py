"""Settings that cannot work are refused when they are loaded, in the form ``Invalid settings: NAME (SOURCE): ...``,
by every command and before anything is written: bearer tokens that name no agents (or a misspelt key), default
blocks no agent could be made with, a `tools` setting that publishes nothing, a core backend that does not fit the
store, empty values that would mean something else than unset, numbers that are not finite, scores that contradict
each other, an empty system prompt."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tiermem.base.config import load_settings
from tiermem.base.errors import ConfigError, LabelTakenError, ValidationError
from tiermem.cli.main import SETTING_CHECKS
from tiermem.domain.memory import Memory
from tiermem.process.netguard import load_tokens_file, make_tokens

from .conftest import PYTHON, ROOT, spec
from .test_transports import server_env

TOKEN = "3f9c2a7e1b4d6f8a0c2e4b6d8f1a3c5e"


def cli_settings(**flags: object):  # type: ignore[no-untyped-def]
    """The settings as a command loads them (with the checks that need more than base)."""
    return load_settings(checks=SETTING_CHECKS, **flags)


def tiermem(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-m", "tiermem", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=server_env(tmp_path, **env),
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


def test_a_token_names_its_agents_with_no_other_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A token entry whose `agents` is misspelt (`agent`) or left out got every agent ("*"), silently: refused, in
    the settings (every command) and in a tokens file (`serve`), with the key meant; ["*"] is said, never assumed."""
    monkeypatch.setenv("TIERMEM_AUTH_TOKENS", f'[{{"name": "laptop", "token": "{TOKEN}", "agent": ["work"]}}]')
    with pytest.raises(ConfigError) as typo:
        load_settings()
    assert str(typo.value).startswith("Invalid settings: auth_tokens (TIERMEM_AUTH_TOKENS): token #1 ('laptop'): ")
    assert "`agent` is not a key of a token (did you mean `agents`?)" in str(typo.value)
    assert TOKEN not in str(typo.value)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'auth_tokens = [{{ token = "{TOKEN}" }}]\n')
    monkeypatch.delenv("TIERMEM_AUTH_TOKENS")
    with pytest.raises(ConfigError, match=rf"auth_tokens \(config file {cfg}\): token #1: it has no `agents`"):
        load_settings(cfg)
    cfg.write_text(f'auth_tokens = [{{ token = "{TOKEN}", agents = ["*"] }}]\n')
    assert load_settings(cfg).auth_tokens == [{"token": TOKEN, "agents": ["*"]}]

    tokens = tmp_path / "tokens.toml"
    tokens.write_text(f'[[tokens]]\nname = "laptop"\ntoken = "{TOKEN}"\nagent = ["work"]\n')
    with pytest.raises(ConfigError, match=r"token #1 \('laptop'\): `agent` is not a key of a token \(did you mean"):
        load_tokens_file(tokens)
    tokens.write_text(f'[[tokens]]\ntoken = "{TOKEN}"\n')
    with pytest.raises(ConfigError, match=rf"tokens file {tokens}: token #1: it has no `agents`"):
        load_tokens_file(tokens)
    tokens.write_text(f'[[token]]\ntoken = "{TOKEN}"\nagents = ["work"]\n')  # no [[tokens]]: no token at all
    with pytest.raises(ConfigError, match=r"has `token`, which is not a table of a tokens file"):
        load_tokens_file(tokens)
    tokens.write_text(f'[[tokens]]\ntoken = "{TOKEN}"\nagents = ["work"]\n')
    (token,) = load_tokens_file(tokens)
    assert token.allows("work") and not token.allows("private")
    with pytest.raises(ConfigError, match="it has no `agents`"):
        make_tokens([{"token": TOKEN}], "auth_tokens")


def test_a_bad_static_token_is_refused_by_every_command_at_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A static token too short, a placeholder or one no client can send was refused by `serve` alone: `doctor` and
    every other command took it silently. Refused when the settings are loaded, naming the setting and its source,
    with what to do (never the secret in full); a good token loads."""
    bad = {
        "short": "the token must be a string of at least 16 characters; generate one with `openssl rand -hex 32`",
        "replace-with-your-own-token": "the token (replace-with-your-own-to...) is a placeholder, not a secret",
        "pässwörd-tökén-0123456789": "the token has characters other than visible ASCII",
    }
    for value, problem in bad.items():
        monkeypatch.setenv("TIERMEM_HTTP_TOKEN", value)
        with pytest.raises(ConfigError) as refused:
            cli_settings()
        assert str(refused.value).startswith(f"Invalid settings: http_token (TIERMEM_HTTP_TOKEN): {problem}")
    monkeypatch.setenv("TIERMEM_HTTP_TOKEN", TOKEN)
    assert cli_settings().http_token == TOKEN
    monkeypatch.delenv("TIERMEM_HTTP_TOKEN")
    monkeypatch.setenv(
        "TIERMEM_AUTH_TOKENS", '[{"name": "laptop", "token": "changeme-changeme-1234", "agents": ["*"]}]'
    )
    with pytest.raises(
        ConfigError, match=r"^Invalid settings: auth_tokens \(TIERMEM_AUTH_TOKENS\): token #1 \('laptop'\)"
    ):
        cli_settings()
    monkeypatch.delenv("TIERMEM_AUTH_TOKENS")

    data = tmp_path / "data"
    status = tiermem(tmp_path, "stats", "--data-dir", str(data), TIERMEM_HTTP_TOKEN="changeme")
    assert status.returncode == 1, status.stderr
    assert "tiermem: Invalid settings: http_token (TIERMEM_HTTP_TOKEN): the token must be a string" in status.stderr
    assert not data.exists()


def test_doctor_reports_a_bad_static_token_as_a_failed_check(tmp_path: Path) -> None:
    """Every other command refuses a bad static token; doctor, run to find such a problem, reported nothing else:
    it runs its checks and reports the token as a failed one (exit 1), naming the setting and its source."""
    import json

    data = tmp_path / "data"
    assert tiermem(tmp_path, "agents", "create", "ada", "--data-dir", str(data)).returncode == 0
    doctor = tiermem(tmp_path, "doctor", "--json", "--data-dir", str(data), TIERMEM_HTTP_TOKEN="changeme")
    assert doctor.returncode == 1, doctor.stderr
    checks = {c["check"]: c for c in json.loads(doctor.stdout)["checks"]}
    token = checks["http tokens"]
    assert not token["ok"] and token["detail"].startswith(
        "http_token (TIERMEM_HTTP_TOKEN): the token must be a string of at least 16 characters"
    ), token
    assert "changeme" not in doctor.stdout and "fix" in token
    assert checks["schema"]["ok"] and list(checks)[0] == "http tokens"  # the store checked too
    missing = tiermem(tmp_path, "doctor", "--data-dir", str(tmp_path / "none"), TIERMEM_HTTP_TOKEN="changeme")
    assert missing.returncode == 1 and "http tokens" in missing.stdout and "data directory" in missing.stdout
    good = tiermem(tmp_path, "doctor", "--json", "--data-dir", str(data), TIERMEM_HTTP_TOKEN=TOKEN)
    assert {c["check"]: c["ok"] for c in json.loads(good.stdout)["checks"]}["http tokens"], good.stdout


def test_an_empty_http_token_variable_is_unset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`TIERMEM_HTTP_TOKEN=${TOKEN}` in a host's config with TOKEN unset leaves it empty: that is no token (as an
    empty path or host variable is unset), not a token too short that stopped every command, the stdio server and
    doctor included. Empty in a config file or a flag it is refused, as an empty path is."""
    monkeypatch.setenv("TIERMEM_HTTP_TOKEN", "")
    assert cli_settings().http_token is None
    monkeypatch.setenv("TIERMEM_HTTP_TOKEN", "  ")
    assert cli_settings().http_token is None
    with pytest.raises(ConfigError, match=r"http_token \(--token\): empty; give a value"):
        cli_settings(http_token="")
    data = tmp_path / "data"
    status = tiermem(tmp_path, "agents", "create", "ada", "--data-dir", str(data), TIERMEM_HTTP_TOKEN="")
    assert status.returncode == 0, status.stderr


def test_serve_refuses_a_tokens_file_entry_without_agents(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(f'[[tokens]]\nname = "laptop"\ntoken = "{TOKEN}"\nagent = ["work"]\n')
    tokens.chmod(0o600)
    data = tmp_path / "data"
    done = tiermem(
        tmp_path, "serve", "--transport", "http", "--port", "0", "--tokens-file", str(tokens), "--data-dir", str(data)
    )
    assert done.returncode == 1 and "(did you mean `agents`?)" in done.stderr, done.stderr
    assert not data.exists()


def test_default_blocks_no_agent_could_be_made_with_are_refused_at_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """A label twice (`agents create` made two blocks labelled alike; a server dropped the second), a value over its
    own limit (every tool call of a server failed), an empty label, a credential: each refused when the settings are
    loaded, with the checks the domain applies when it creates an agent."""
    variable = "TIERMEM_DEFAULT_BLOCKS"
    bad = {
        '[{"label": "a", "value": "first"}, {"label": "a", "value": "second"}]': "Two blocks are labelled 'a'",
        '[{"label": "notes", "value": "hello world", "limit": 3}]': "has 11 characters, more than its limit (3)",
        '[{"label": "", "value": "x"}]': "Invalid block label '': it is empty",
        '[{"label": "n", "value": "ghp_abcdefghijklmnopqrstuvwxyz0123456789"}]': "would store a GitHub token",
    }
    for value, problem in bad.items():
        monkeypatch.setenv(variable, value)
        with pytest.raises(ConfigError) as refused:
            cli_settings()
        assert str(refused.value).startswith(f"Invalid settings: default_blocks ({variable}): ")
        assert problem in str(refused.value)
    monkeypatch.setenv("TIERMEM_SECRET_SCAN", "off")  # a credential is text like any other then
    assert cli_settings().default_blocks[0].label == "n"
    monkeypatch.delenv(variable)
    assert [b.label for b in cli_settings().default_blocks] == ["persona", "human"]


def test_an_agent_is_not_made_with_two_blocks_of_one_label(memory: Memory) -> None:
    with pytest.raises(LabelTakenError, match="Two blocks are labelled 'a'"):
        memory.create_agent("twice", blocks=[spec("a", "first"), spec("a", "second")])
    with pytest.raises(ValidationError, match="more than its limit"):
        memory.create_agent("long", blocks=[spec("a", "hello world", limit=3)])
    assert {a.name for a in memory.list_agents()} & {"twice", "long"} == set()


def test_bad_default_blocks_leave_no_store_behind(tmp_path: Path) -> None:
    data = tmp_path / "data"
    blocks = '[{"label": "a", "value": "first"}, {"label": "a", "value": "second"}]'
    created = tiermem(tmp_path, "agents", "create", "a1", "--data-dir", str(data), TIERMEM_DEFAULT_BLOCKS=blocks)
    assert created.returncode == 1 and "Invalid settings: default_blocks (TIERMEM_DEFAULT_BLOCKS)" in created.stderr
    blocks = '[{"label": "notes", "value": "hello world", "limit": 3}]'
    served = tiermem(tmp_path, "serve", "--data-dir", str(data), TIERMEM_DEFAULT_BLOCKS=blocks)
    assert served.returncode == 1 and "more than its limit (3)" in served.stderr
    assert not data.exists()


def test_tools_that_publish_nothing_are_refused_by_every_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`tools = ["agent"]` without the agent loop published no tool at all; an unknown or empty `tools` is refused
    by every command (doctor said healthy), naming where it came from (a config file's `tools = []` blamed
    TIERMEM_TOOLS)."""
    monkeypatch.setenv("TIERMEM_TOOLS", "agent")
    with pytest.raises(ConfigError, match=r"^Invalid settings: tools \(TIERMEM_TOOLS\): it names only agent_chat"):
        cli_settings()
    assert cli_settings(agent_loop=True).tools == ["agent"]
    monkeypatch.setenv("TIERMEM_TOOLS", "memory_replce")
    with pytest.raises(ConfigError, match=r"tools \(TIERMEM_TOOLS\): 'memory_replce' is no tool, group or preset"):
        cli_settings()
    monkeypatch.delenv("TIERMEM_TOOLS")
    cfg = tmp_path / "c.toml"
    cfg.write_text("tools = []\n")
    with pytest.raises(ConfigError, match=rf"^Invalid settings: tools \(config file {cfg}\): it is empty"):
        cli_settings(config_file=cfg)
    doctor = tiermem(tmp_path, "doctor", "--data-dir", str(tmp_path / "data"), TIERMEM_TOOLS="bogus")
    assert doctor.returncode == 1 and "Invalid settings: tools (TIERMEM_TOOLS): 'bogus'" in doctor.stderr


def test_a_core_backend_that_does_not_fit_the_store_is_refused_before_a_store_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIERMEM_CORE_BACKEND", "lancedb")
    with pytest.raises(ConfigError, match=r"^Invalid settings: core_backend \(TIERMEM_CORE_BACKEND\): 'lancedb' is no"):
        load_settings()
    monkeypatch.setenv("TIERMEM_CORE_BACKEND", "object")
    with pytest.raises(ConfigError, match=r"core_backend \(TIERMEM_CORE_BACKEND\): 'object' keeps core state on obj"):
        load_settings()
    assert load_settings(uri="memory://bucket").core_backend == "object"
    monkeypatch.setenv("TIERMEM_CORE_BACKEND", "sqlite")
    with pytest.raises(ConfigError, match=r"core_backend \(TIERMEM_CORE_BACKEND\): 'sqlite' needs a local data"):
        load_settings(uri="memory://bucket")
    data = tmp_path / "data"
    done = tiermem(tmp_path, "remember", "a fact", "--data-dir", str(data), TIERMEM_CORE_BACKEND="object")
    assert done.returncode == 1 and "Invalid settings: core_backend" in done.stderr and not data.exists()


def test_an_empty_uri_or_host_variable_is_unset_and_refused_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`TIERMEM_URI=` made a store and then failed ("relative URL without a base"); `TIERMEM_HOST=` bound every
    interface without the notice 0.0.0.0 gets. Set to nothing they are unset, as the path variables are; empty in a
    config file or a flag they are refused."""
    monkeypatch.setenv("TIERMEM_URI", "")
    monkeypatch.setenv("TIERMEM_HOST", " ")
    settings = load_settings()
    assert (settings.uri, settings.host) == (None, "127.0.0.1")
    cfg = tmp_path / "c.toml"
    for key in ("uri", "host"):
        cfg.write_text(f'{key} = ""\n')
        with pytest.raises(ConfigError, match=rf"^Invalid settings: {key} \(config file {cfg}\): empty; give a value"):
            load_settings(cfg)
    with pytest.raises(ConfigError, match=r"host \(--host\): empty"):
        load_settings(host="")


def test_non_finite_numbers_and_contradicting_scores_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """`inf` made `tiermem stats --json` print `Infinity` (not JSON); a hot score below the warm one left nothing
    ever warm."""
    for name, value in (("USE_HOT_SCORE", "inf"), ("WATCH_SECONDS", "1e400"), ("USE_WARM_SCORE", "nan")):
        monkeypatch.setenv(f"TIERMEM_{name}", value)
        with pytest.raises(ConfigError, match=rf"{name.lower()} \(TIERMEM_{name}\): Input should be a finite number"):
            load_settings()
        monkeypatch.delenv(f"TIERMEM_{name}")
    monkeypatch.setenv("TIERMEM_USE_WARM_SCORE", "5")
    with pytest.raises(ConfigError, match=r"use_warm_score \(TIERMEM_USE_WARM_SCORE\): use_hot_score \(2.5\) is below"):
        load_settings()
    monkeypatch.setenv("TIERMEM_USE_HOT_SCORE", "5")
    assert load_settings().use_hot_score == 5.0


def test_an_empty_system_prompt_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`TIERMEM_SYSTEM=` gave new agents a system prompt of 0 characters, silently (`TIERMEM_AGENT=` is refused)."""
    monkeypatch.setenv("TIERMEM_SYSTEM", "")
    with pytest.raises(ConfigError, match=r"^Invalid settings: system \(TIERMEM_SYSTEM\): empty: new agents would"):
        load_settings()
    monkeypatch.delenv("TIERMEM_SYSTEM")
    cfg = tmp_path / "c.toml"
    cfg.write_text('system = "  "\n')
    with pytest.raises(ConfigError, match=rf"system \(config file {cfg}\): empty"):
        load_settings(cfg)


def test_the_inspector_logs_at_the_log_level(tmp_path: Path) -> None:
    """`log_level = "ERROR"` quieted `tiermem serve`, but `tiermem ui` still logged uvicorn's INFO lines."""
    import httpx

    from tiermem.domain.factory import open_memory

    from .test_transports import free_port

    data = tmp_path / "data"
    open_memory(load_settings(data_dir=data, embedding_model="hashing"), start_embedder=False).ensure_agent("default")
    port = free_port()
    proc = subprocess.Popen(
        [PYTHON, "-m", "tiermem", "ui", "--no-browser", "--port", str(port), "--data-dir", str(data)],
        cwd=ROOT,
        env=server_env(tmp_path, TIERMEM_LOG_LEVEL="ERROR"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.startswith("tiermem memory inspector: "), line
        assert "memory inspector" in httpx.get(f"http://127.0.0.1:{port}/ui/", timeout=30).text  # uvicorn is up
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    assert " INFO " not in err, err


def test_a_server_says_which_blocks_the_agent_it_creates_has(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """With `sync`, the agent a server creates starts with the synced directory's blocks, not the default ones: its
    log said "with the default blocks"."""
    import logging

    from tiermem.cli.serving import server_memory

    settings = load_settings(data_dir=tmp_path / "data", embedding_model="hashing", sync=tmp_path / "memory")
    with caplog.at_level(logging.INFO, logger="tiermem"):
        memory, agent_id = server_memory(settings)()
    memory.settle(30)
    assert memory.blocks(agent_id) == []
    assert f"created agent 'default' with no blocks: the synced directory {tmp_path / 'memory'}" in caplog.text
    assert "with the default blocks" not in caplog.text
