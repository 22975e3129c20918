"""Settings layering (packaged defaults < TOML file < TIERMEM_* env < flags) and store URIs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiermem.base.config import load_settings
from tiermem.base.errors import ConfigError
from tiermem.domain import blocks as b
from tiermem.store import Store

from .conftest import ROOT, memory_over


def test_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('agent = "from-file"\nport = 9000\ntools = ["minimal"]\n')
    s = load_settings(cfg)
    assert (s.agent, s.port, s.tools, s.transport) == ("from-file", 9000, ["minimal"], "stdio")
    monkeypatch.setenv("TIERMEM_AGENT", "from-env")
    monkeypatch.setenv("TIERMEM_TOOLS", "letta,recall")
    s = load_settings(cfg)
    assert (s.agent, s.port, s.tools) == ("from-env", 9000, ["letta", "recall"])
    s = load_settings(cfg, agent="from-flag", port=None)
    assert (s.agent, s.port) == ("from-flag", 9000)
    monkeypatch.setenv("TIERMEM_CONFIG", str(cfg))
    assert load_settings().port == 9000


def test_comma_lists_refuse_json(monkeypatch: pytest.MonkeyPatch) -> None:
    """TIERMEM_ALLOWED_HOSTS and the other comma-separated lists: a JSON array is refused with the plain form to
    write, not read as the hosts '["a"' and '"b"]'; an IPv6 host in brackets is a host."""
    monkeypatch.setenv("TIERMEM_ALLOWED_HOSTS", '["memory.example.com:443", "b.example:80"]')
    with pytest.raises(ConfigError, match=r"allowed_hosts.*\(memory\.example\.com:443, b\.example:80\)"):
        load_settings()
    monkeypatch.setenv("TIERMEM_ALLOWED_HOSTS", "[::1]:8765, memory.example.com:443")
    assert load_settings().allowed_hosts == ["[::1]:8765", "memory.example.com:443"]
    monkeypatch.setenv("TIERMEM_OAUTH_ALGORITHMS", "[RS256]")
    with pytest.raises(ConfigError, match="oauth_algorithms.*not a comma-separated list"):
        load_settings()


def test_data_dir_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert load_settings().resolved_data_dir() == tmp_path / "xdg" / "tiermem"
    monkeypatch.setenv("TIERMEM_DATA_DIR", str(tmp_path / "env"))
    assert load_settings().resolved_data_dir() == tmp_path / "env"
    assert load_settings(data_dir=tmp_path / "flag").resolved_data_dir() == tmp_path / "flag"
    assert load_settings(data_dir=tmp_path / "flag").store_uri() == str(tmp_path / "flag" / "db")


def test_packaged_defaults_match_configs_dir() -> None:
    s = load_settings()
    assert [x.label for x in s.default_blocks] == ["persona", "human"] and all(
        x.limit == 5000 for x in s.default_blocks
    )
    assert (ROOT / "configs" / "default.toml").read_text() == (
        ROOT / "src" / "tiermem" / "base" / "default.toml"
    ).read_text()


def test_bad_settings_are_clear(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("port = [")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        load_settings(bad)
    bad.write_text('port = "lots"\n')
    with pytest.raises(ConfigError, match="Invalid settings: port"):
        load_settings(bad)
    bad.write_text('colour = "blue"\n')
    with pytest.raises(ConfigError, match="colour"):
        load_settings(bad)
    with pytest.raises(ConfigError, match="Cannot read config file"):
        load_settings(tmp_path / "missing.toml")
    # a setting written after a [[default_blocks]] table is inside that table in TOML: refused, not ignored
    bad.write_text('[[default_blocks]]\nlabel = "human"\nagent_loop = true\n')
    with pytest.raises(ConfigError, match="agent_loop"):
        load_settings(bad)


def test_object_store_uri_without_local_paths() -> None:
    """The store only needs a URI: LanceDB's in-memory object store stands in for s3:// here."""
    store = Store("memory://tiermem-config-test", embedding_model="hashing-384", embedding_dim=384)
    m = memory_over(store, default_blocks=load_settings().default_blocks)
    agent = m.ensure_agent("default").id
    assert m.edit(agent, "human", b.Append("remote")).value == "\nremote"
    assert [v.version for v in m.history(agent, "human", 5)] == [2, 1]


def test_the_file_read_is_recorded_and_cannot_name_another(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().config is None  # no file at the XDG location
    cfg = tmp_path / "c.toml"
    cfg.write_text('agent = "from-file"\n')
    assert (load_settings(cfg).config, load_settings(cfg).agent) == (cfg, "from-file")
    xdg = tmp_path / "xdg-config" / "tiermem" / "config.toml"  # conftest points XDG_CONFIG_HOME here
    xdg.parent.mkdir(parents=True)
    xdg.write_text('agent = "from-xdg"\n')
    assert (load_settings().config, load_settings().agent) == (xdg, "from-xdg")
    monkeypatch.setenv("TIERMEM_CONFIG", str(cfg))
    assert (load_settings().config, load_settings().agent) == (cfg, "from-file")
    cfg.write_text(f'config = "{xdg}"\n')
    with pytest.raises(ConfigError, match="cannot name another one"):
        load_settings()


def test_an_empty_path_variable_is_unset_and_an_empty_path_elsewhere_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``TIERMEM_DATA_DIR=`` (what a script leaves when the value it meant is unset) is the default data directory, not
    the current one (``Path("")`` is ``.``: memory was stored wherever the command ran); so are the other path
    variables. ``data_dir = ""`` in a config file and ``--data-dir ""`` are refused, naming the key or the flag, and
    nothing is made."""
    from tiermem.cli.main import main

    for name in ("TIERMEM_DATA_DIR", "TIERMEM_AUTH_TOKENS_FILE", "TIERMEM_SYNC"):
        monkeypatch.setenv(name, "")
    s = load_settings()
    assert s.resolved_data_dir() == tmp_path / "xdg-data" / "tiermem"
    assert (s.data_dir, s.auth_tokens_file, s.sync) == (None, None, None)
    monkeypatch.setenv("TIERMEM_CONFIG", "  ")  # spaces alone: unset too, not a file named "  " to read
    assert load_settings().config is None
    monkeypatch.delenv("TIERMEM_CONFIG")
    cfg = tmp_path / "c.toml"
    cfg.write_text('data_dir = ""\n')
    with pytest.raises(ConfigError, match=rf"data_dir \(config file {cfg}\): .*an empty path"):
        load_settings(cfg)
    monkeypatch.chdir(tmp_path)
    refused = {
        "--data-dir": ["--data-dir", "", "blocks", "list"],
        "--data-dir ": ["blocks", "list", "--data-dir", " "],
        "--config": ["search", "x", "--config", ""],
    }
    for flag, args in refused.items():
        with pytest.raises(SystemExit) as exit:
            main(args)
        assert exit.value.code == 2
        assert f"argument {flag.strip()}: an empty path" in capsys.readouterr().err
    assert not (tmp_path / "core.sqlite3").exists() and not (tmp_path / "db").exists()


@pytest.mark.parametrize(
    ("variable", "value", "kind"),
    [
        ("TIERMEM_STORAGE_OPTIONS", "notjson", "object"),
        ("TIERMEM_AUTH_TOKENS", "notjson", "array"),
        ("TIERMEM_DEFAULT_BLOCKS", "notjson", "array"),
        ("TIERMEM_OAUTH_SHARED_AGENTS", "{bad", "object"),
    ],
)
def test_a_json_variable_that_is_not_json_is_named(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, kind: str
) -> None:
    """pydantic-settings raises its own SettingsError ("error parsing value for field ...") for these, which the CLI
    printed as a traceback: now an "Invalid settings" error naming the variable and the JSON it takes."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(
        ConfigError, match=rf"^Invalid settings: {variable} is not valid JSON .* a JSON {kind}, such as"
    ):
        load_settings()


def test_errors_name_where_the_bad_value_came_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The config file (also the one read without being named, at ~/.config/tiermem/config.toml), the TIERMEM_*
    variable or the flag: whichever gave the value the error is about; a setting written after a [[default_blocks]]
    header gets the TOML rule that put it there; a missing TIERMEM_CONFIG file names TIERMEM_CONFIG."""
    implicit = tmp_path / "xdg-config" / "tiermem" / "config.toml"  # conftest points XDG_CONFIG_HOME here
    implicit.parent.mkdir(parents=True)
    implicit.write_text("search_token_budjet = 100\n")
    with pytest.raises(ConfigError, match=rf"search_token_budjet \(config file {implicit}\): .*search_token_budget"):
        load_settings()
    implicit.unlink()
    monkeypatch.setenv("TIERMEM_PORT", "x")
    with pytest.raises(ConfigError, match=r"port \(TIERMEM_PORT\): Input should be a valid integer"):
        load_settings()
    monkeypatch.setenv("TIERMEM_PORT", "")  # set to nothing: still the variable's value (not a path setting)
    with pytest.raises(ConfigError, match=r"port \(TIERMEM_PORT\)"):
        load_settings()
    monkeypatch.delenv("TIERMEM_PORT")
    with pytest.raises(ConfigError, match=r"port \(--port\): Input should be less than or equal to 65535"):
        load_settings(port=70000)
    cfg = tmp_path / "c.toml"
    cfg.write_text('[[default_blocks]]\nlabel = "notes"\nagent = "work"\n')
    with pytest.raises(ConfigError) as refused:
        load_settings(cfg)
    assert f"default_blocks.0.agent (config file {cfg})" in str(refused.value)
    assert "every key after a [[default_blocks]] header belongs to that block: move it above" in str(refused.value)
    monkeypatch.setenv("TIERMEM_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError, match="Check the path given to TIERMEM_CONFIG"):
        load_settings()
    with pytest.raises(ConfigError, match="Check the path given to --config"):
        load_settings(tmp_path / "other-missing.toml")
