"""`tiermem setup codex|gemini|opencode` with the real hosts (npm, pinned; skipped with the reason when missing), offline.

Each host gets a throwaway HOME holding its own model configuration (a fake model API on loopback:
``fake_models.FakeModel``), then `tiermem setup HOST` exactly as a user runs it, then two one-turn sessions: a
prompt about a stored fact and an unrelated one. Asserted from what the host sent its model: core memory from the
session hook (not only the server's instructions), the stored fact added to the prompt about it and nothing to the
unrelated one; and from the store: both prompts and both replies in recall, once each, under the host's session id,
naming the host. No model calls a tool. Codex's project scope runs the real Codex too (it loads a project's
``.codex/`` only when the project is trusted); the other file-level tests (idempotent setup, uninstall restores,
project files) need no host.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tiermem.base.config import load_settings
from tiermem.domain.factory import open_memory

from .conftest import PYTHON, ROOT
from .fake_models import FakeModel, Turn
from .host_harness import base_env, codex_fake_provider, run
from .install_hosts import install

HUMAN = "Name: Ada Lovelace. Prefers tea over coffee. Works on analytical engines."
FACT = "Ada's cat is called Miso, a grey tabby who sleeps on the piano."
ABOUT_THE_FACT = "What is my cat called?"
UNRELATED = "Explain how quicksort partitions an array."
RECALLED = "Memories from tiermem for this prompt"  # the head of what a prompt hook adds
REPLIES = ("Your cat is Miso.", "It picks a pivot and partitions around it.")


def tiermem(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [PYTHON, "-m", "tiermem", *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


class Host:
    """One throwaway HOME for ``name``, its memory set up with a human block and one archival fact."""

    def __init__(self, name: str, root: Path) -> None:
        exe, why = install(name)
        if exe is None:
            pytest.skip(why)
        self.name, self.exe, self.home, self.work = name, exe, root / "home", root / "work"
        self.data = root / "memory"
        self.runtime = Path(tempfile.mkdtemp(prefix="tmh-"))  # socket paths are short: not under tmp_path
        self.runtime.chmod(0o700)
        for d in (self.home, self.work):
            d.mkdir(parents=True)

    def env(self, **extra: str) -> dict[str, str]:
        return base_env(self.home, XDG_RUNTIME_DIR=str(self.runtime), **extra)

    def prepare_memory(self, *, fact: bool = True) -> None:
        env = self.env()
        tiermem(env, "agents", "create", "default", "--data-dir", str(self.data))
        tiermem(env, "blocks", "set", "human", HUMAN, "--data-dir", str(self.data))
        if fact:
            memory = open_memory(load_settings(data_dir=self.data, embedding_model="default"))
            memory.archive.insert(memory.ensure_agent("default").id, FACT)
            memory.settle(30)

    def setup(self) -> str:
        return tiermem(self.env(), "setup", self.name, "--data-dir", str(self.data))

    def logged(self) -> list[Any]:
        memory = open_memory(load_settings(data_dir=self.data, embedding_model="default"), start_embedder=False)
        return memory.archive.rows.messages_of(memory.ensure_agent("default").id)

    def close(self) -> None:
        shutil.rmtree(self.runtime, ignore_errors=True)


# -- each host's own configuration (what a user has before running setup) --------------------------------------


def codex_config(host: Host, fake: FakeModel) -> None:
    (host.home / ".codex").mkdir()
    (host.home / ".codex" / "config.toml").write_text("\n".join(codex_fake_provider(fake.url)) + "\n")


def gemini_config(host: Host, fake: FakeModel) -> None:
    (host.home / ".gemini").mkdir()
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
    }
    (host.home / ".gemini" / "settings.json").write_text(json.dumps(settings, indent=2))


def opencode_config(host: Host, fake: FakeModel) -> None:
    folder = host.home / ".config" / "opencode"
    folder.mkdir(parents=True)
    config = {
        "$schema": "https://opencode.ai/config.json",
        "model": "fake/fake-model",
        "autoupdate": False,
        "share": "disabled",
        "provider": {
            "fake": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Fake",
                "options": {"baseURL": f"{fake.url}/v1", "apiKey": "sk-fake"},
                "models": {"fake-model": {"name": "Fake model", "tool_call": True}},
            }
        },
    }
    (folder / "opencode.json").write_text(json.dumps(config, indent=2))
    # Offline, opencode would npm-install its plugin package into its config dir; an installed-looking one stops it.
    (folder / "node_modules").mkdir()
    (folder / "package.json").write_text(json.dumps({"dependencies": {"@opencode-ai/plugin": "*"}}))
    lock = {"name": "opencode", "lockfileVersion": 3, "requires": True}
    lock["packages"] = {"": {"dependencies": {"@opencode-ai/plugin": "*"}}}
    (folder / "package-lock.json").write_text(json.dumps(lock))


def one_turn(host: Host, fake: FakeModel, prompt: str) -> subprocess.CompletedProcess[str]:
    if host.name == "codex":
        env = host.env(FAKE_API_KEY="sk-fake", CODEX_HOME=str(host.home / ".codex"))
        cmd = [str(host.exe), "exec", "--skip-git-repo-check", "--json", "-C", str(host.work), prompt]
    elif host.name == "gemini":
        env = host.env(GEMINI_API_KEY="fake-key", GOOGLE_GEMINI_BASE_URL=fake.url, GEMINI_CLI_NO_RELAUNCH="true")
        cmd = [str(host.exe), "-p", prompt, "-o", "json", "--skip-trust"]
    else:
        off = ("MODELS_FETCH", "AUTOUPDATE", "LSP_DOWNLOAD", "DEFAULT_PLUGINS")
        env = host.env(**{f"OPENCODE_DISABLE_{k}": "1" for k in off})
        cmd = [str(host.exe), "run", "--format", "json", prompt]
    return run(cmd, env, host.work)


DIALECT = {"codex": "responses", "gemini": "gemini", "opencode": "chat"}
CONFIGURE = {"codex": codex_config, "gemini": gemini_config, "opencode": opencode_config}


@pytest.fixture(scope="module", params=["codex", "gemini", "opencode"])
def sessions(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A new user's first two sessions in one host after `tiermem setup HOST` (the real embedding model)."""
    host = Host(request.param, tmp_path_factory.mktemp(request.param))
    try:
        host.prepare_memory()
        with FakeModel(DIALECT[host.name], [Turn(text=REPLIES[0]), Turn(text=REPLIES[1])]) as fake:  # type: ignore[arg-type]
            CONFIGURE[host.name](host, fake)
            print(host.setup())
            runs = []
            for prompt in (ABOUT_THE_FACT, UNRELATED):
                before = len(fake.requests)
                done = one_turn(host, fake, prompt)
                assert done.returncode == 0, done.stderr[-3000:]
                main = [s.body for s in fake.requests[before:] if s.main]
                assert main, f"{host.name} sent its model nothing: {done.stderr[-2000:]}"
                runs.append({"first": main[0], "stdout": done.stdout, "stderr": done.stderr})
        yield {"host": host, "runs": runs}
    finally:
        host.close()


def hook_context(name: str, request: dict[str, Any]) -> str:
    """What the host's hooks added to a request (not the server's instructions, which also carry core memory)."""
    if name == "codex":  # developer messages in the input (the instructions are the tool namespace's description)
        items = [i for i in request.get("input", []) if i.get("role") == "developer"]
        return "\n".join(c.get("text", "") for i in items for c in i.get("content", []) if isinstance(c, dict))
    if name == "gemini":  # <hook_context> parts of the user message (the instructions are a part of their own)
        texts = [p.get("text", "") for c in request.get("contents", []) for p in c.get("parts", [])]
        return "\n".join(t for t in texts if "<hook_context>" in t)
    parts = []  # opencode: system messages other than the main one (which holds <mcp_instructions>) and user parts
    for m in request.get("messages", []):
        content = m.get("content")
        texts = [content] if isinstance(content, str) else [b.get("text", "") for b in content or []]
        if m.get("role") == "system":
            parts += [t for t in texts if "<mcp_instructions>" not in t]
        elif m.get("role") == "user":
            parts += texts[1:]  # the prompt is the first part; a synthetic part after it is the plugin's
    return "\n".join(parts)


def test_core_memory_reaches_the_first_request_from_the_session_hook(sessions: dict[str, Any]) -> None:
    host = sessions["host"]
    for run_ in sessions["runs"]:
        assert HUMAN in hook_context(host.name, run_["first"]), host.name


def test_a_prompt_about_a_stored_fact_carries_it_and_an_unrelated_one_nothing(sessions: dict[str, Any]) -> None:
    host = sessions["host"]
    about, unrelated = (hook_context(host.name, r["first"]) for r in sessions["runs"])
    assert FACT in about and RECALLED in about, host.name
    assert FACT not in unrelated and RECALLED not in unrelated, host.name


def test_recall_holds_both_prompts_and_both_replies_once_naming_the_host(sessions: dict[str, Any]) -> None:
    host = sessions["host"]
    logged = host.logged()
    sessions_seen = {m.conversation_id for m in logged}
    assert len(sessions_seen) == 2, [(m.conversation_id, m.role, m.content) for m in logged]
    for prompt, reply in zip((ABOUT_THE_FACT, UNRELATED), REPLIES, strict=True):
        turns = [m for m in logged if prompt in m.content or m.content == reply]
        session = {m.conversation_id for m in turns}
        assert len(session) == 1 and [m.role for m in turns] == ["user", "assistant"], [
            (m.conversation_id, m.role, m.content) for m in logged
        ]
        assert turns[1].content == reply
        assert turns[0].content.strip('"') == prompt  # opencode run quotes the prompt it was given
        assert all(json.loads(m.payload)["host"] == host.name for m in turns)
    assert not any("<hook_context>" in m.content for m in logged)  # Gemini's session context is no part of a prompt


def test_no_hook_had_to_fail_soft(sessions: dict[str, Any]) -> None:
    log = sessions["host"].home / ".local" / "state" / "tiermem" / "hooks.log"
    assert not log.exists(), log.read_text()


# -- the files (no host needed) ------------------------------------------------------------------------------------


def setup_env(home: Path) -> dict[str, str]:
    return base_env(home)


@pytest.mark.parametrize("name", ["codex", "gemini", "opencode"])
def test_setup_is_idempotent_and_uninstall_restores_your_files(tmp_path: Path, name: str) -> None:
    home = tmp_path / "home"
    files = {
        "codex": {
            home / ".codex" / "config.toml": 'model = "o4"\n\n[features]\nplugins = false\n\n[mcp_servers.other]\n'
            'command = "other"\n',
            home / ".codex" / "hooks.json": json.dumps(
                {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]}}
            ),
        },
        "gemini": {
            home / ".gemini" / "settings.json": json.dumps(
                {"mcpServers": {"other": {"command": "other"}}, "hooks": {"AfterAgent": [{"hooks": []}]}}
            )
        },
        "opencode": {home / ".config" / "opencode" / "opencode.json": json.dumps({"model": "x/y", "mcp": {}})},
    }[name]
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    env = setup_env(home)
    args = ["setup", name, "--data-dir", str(tmp_path / "d"), "--agent", "work"]
    tiermem(env, *args)
    after = {p: p.read_text() for p in sorted(home.rglob("*")) if p.is_file() and ".local" not in p.parts}
    again = tiermem(env, *args)
    assert again.count("unchanged") == len(after), again
    assert {p: p.read_text() for p in after} == after
    if name == "codex":
        config = tomllib.loads((home / ".codex" / "config.toml").read_text())
        assert config["features"] == {"plugins": False, "hooks": True}  # in your [features] table
        assert config["mcp_servers"]["tiermem"]["args"][:5] == [
            "serve",
            "--data-dir",
            str(tmp_path / "d"),
            "--agent",
            "work",
        ]
        hooks = json.loads((home / ".codex" / "hooks.json").read_text())["hooks"]
        assert hooks["Stop"][0]["hooks"][0]["command"] == "notify-send done"  # yours first
        assert set(config["hooks"]["state"]) == {
            f"{home / '.codex' / 'hooks.json'}:{e}:{1 if e == 'stop' else 0}:0"
            for e in ("session_start", "user_prompt_submit", "stop")
        }
    shown = tiermem(env, "config", name, "--data-dir", str(tmp_path / "d"), "--agent", "work")
    assert f"hook {name} --data-dir" in shown or f'"hook", "{name}", "--data-dir"' in shown  # the plugin: argv
    gone = tiermem(env, "setup", name, "--uninstall", "--data-dir", str(tmp_path / "d"), "--agent", "work")
    assert "unchanged" not in gone.split("\n")[0], gone
    left = {p: p.read_text() for p in home.rglob("*") if p.is_file() and ".local" not in p.parts}
    assert {p: json.loads(t) if p.suffix == ".json" else t for p, t in left.items()} == {
        p: json.loads(t) if p.suffix == ".json" else t for p, t in files.items()
    }


def test_codex_project_scope_works_in_a_trusted_project_and_says_so_otherwise(tmp_path: Path) -> None:
    """Codex loads a project's .codex/ only for a trusted project (measured: otherwise neither the server nor the
    hooks load); the hooks' trust goes in the user's config.toml, which Codex alone reads it from."""
    host = Host("codex", tmp_path)
    try:
        host.prepare_memory()
        args = ["setup", "codex", "--scope", "project", "--project-dir", str(host.work), "--data-dir", str(host.data)]
        with FakeModel("responses", [Turn(text=REPLIES[0])]) as fake:
            codex_config(host, fake)
            assert "only in a project you trust" in tiermem(host.env(), *args)
            user = host.home / ".codex" / "config.toml"
            with user.open("a") as f:
                f.write(f'\n[projects.{json.dumps(str(host.work.resolve()))}]\ntrust_level = "trusted"\n')
            assert "only in a project you trust" not in tiermem(host.env(), *args)
            done = one_turn(host, fake, ABOUT_THE_FACT)
            assert done.returncode == 0, done.stderr[-3000:]
        context = hook_context("codex", fake.turns[0])
        assert HUMAN in context and FACT in context and RECALLED in context
        state = tomllib.loads(user.read_text())["hooks"]["state"]
        assert all(key.startswith(str(host.work.resolve() / ".codex" / "hooks.json")) for key in state)
        tiermem(host.env(), *args, "--uninstall")
        assert not (host.work / ".codex").exists()  # setup created it: gone with what it held
        assert "tiermem setup" not in user.read_text() and "trust_level" in user.read_text()  # yours stays
    finally:
        host.close()


@pytest.mark.parametrize("name", ["gemini", "opencode"])
def test_project_scope_writes_the_project_files_only(tmp_path: Path, name: str) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    args = ["setup", name, "--scope", "project", "--project-dir", str(project), "--data-dir", str(tmp_path / "d")]
    tiermem(setup_env(home), *args)
    written = sorted(str(p.relative_to(project)) for p in project.rglob("*") if p.is_file())
    assert (
        written
        == {
            "gemini": [".gemini/settings.json"],
            "opencode": [".opencode/plugin/tiermem.js", "opencode.json"],
        }[name]
    )
    assert not [p for p in home.rglob("*") if p.is_file() and ".local" not in p.parts]  # nothing at user scope
    tiermem(setup_env(home), *args, "--uninstall")
    assert not [p for p in project.rglob("*") if p.is_file()]


def test_codex_keeps_a_tiermem_table_of_yours_unless_force_and_uninstall_puts_it_back(tmp_path: Path) -> None:
    """E.g. the one an earlier `tiermem config codex` printed, pasted by hand."""
    home = tmp_path / "home"
    config = home / ".codex" / "config.toml"
    config.parent.mkdir(parents=True)
    yours = (
        'model = "o4"\n\n[mcp_servers.tiermem]\ncommand = "tiermem"\nargs = ["serve"]\n'
        '[mcp_servers.tiermem.env]\nTIERMEM_DATA_DIR = "/data"\n\n[mcp_servers.other]\ncommand = "other"\n'
    )
    config.write_text(yours)
    args = ["setup", "codex", "--data-dir", str(tmp_path / "d")]
    refused = subprocess.run(
        [PYTHON, "-m", "tiermem", *args], capture_output=True, text=True, cwd=ROOT, env=setup_env(home), check=False
    )
    assert refused.returncode == 1 and "--force" in refused.stderr and config.read_text() == yours
    tiermem(setup_env(home), *args, "--force")
    replaced = tomllib.loads(config.read_text())["mcp_servers"]
    assert replaced["tiermem"]["args"][:2] == ["serve", "--data-dir"] and replaced["other"] == {"command": "other"}
    assert "unchanged" in tiermem(setup_env(home), *args)  # setup's own table now: no --force needed
    tiermem(setup_env(home), *args, "--uninstall")
    assert tomllib.loads(config.read_text()) == tomllib.loads(yours)


@pytest.mark.parametrize(
    ("yours", "features"),
    [
        ('features.hooks = false\nmodel = "o3"\n', {"hooks": True}),
        ("features.plugins = false\n", {"plugins": False, "hooks": True}),
        ("features = { plugins = false }\n", {"plugins": False, "hooks": True}),
        (
            'model = "x"\r\n\r\n[features]\r\n  hooks=false  # not yet\r\nplugins = false\r\n',
            {"hooks": True, "plugins": False},
        ),
        ('model = "x"', {"hooks": True}),
        ('model = "x"\n\n\n', {"hooks": True}),
    ],
    ids=["dotted-hooks", "dotted-other", "inline-table", "crlf-indented", "no-final-newline", "blank-lines-at-end"],
)
def test_codex_setup_writes_into_any_form_of_features_and_uninstall_puts_back_the_bytes(
    tmp_path: Path, yours: str, features: dict[str, bool]
) -> None:
    """TOML defines a table once: setup sets `hooks = true` in your `features` however it is written (a [features]
    table, dotted `features.x` keys, an inline table) instead of adding a second one; it keeps your line ends, and
    uninstall puts back the file byte for byte."""
    home = tmp_path / "home"
    config = home / ".codex" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_bytes(yours.encode())
    args = ["setup", "codex", "--data-dir", str(tmp_path / "d")]
    tiermem(setup_env(home), *args)
    written = config.read_bytes()
    parsed = tomllib.loads(written.decode())
    assert parsed["features"] == features and "tiermem" in parsed["mcp_servers"]
    if b"\r\n" in yours.encode():
        assert written.count(b"\r\n") == written.count(b"\n")  # CRLF kept throughout
    assert "config.toml: unchanged" in tiermem(setup_env(home), *args)
    tiermem(setup_env(home), *args, "--uninstall")
    assert config.read_bytes() == yours.encode()


def test_codex_setup_refuses_an_inline_features_table_it_cannot_extend(tmp_path: Path) -> None:
    home = tmp_path / "home"
    config = home / ".codex" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("features = { hooks = false }\n")
    refused = subprocess.run(
        [PYTHON, "-m", "tiermem", "setup", "codex", "--data-dir", str(tmp_path / "d")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=setup_env(home),
        check=False,
    )
    assert refused.returncode == 1 and "sets `features` as an inline table" in refused.stderr
    assert "Set `hooks = true` in it yourself" in refused.stderr and "Nothing was changed" in refused.stderr
    assert config.read_text() == "features = { hooks = false }\n"
    assert not (home / ".codex" / "hooks.json").exists()
