"""The documentation site: reference pages that match the code, a strict offline build, no machine paths."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic.fields import FieldInfo

from tiermem.base.config import Settings, default_config_text
from tiermem.cli import docgen

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# No network: a fetch through urllib, requests or httpx would go to a closed port and fail the build.
OFFLINE = {
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "NO_PROXY": "",
    "no_proxy": "",
    "NO_MKDOCS_2_WARNING": "1",  # Material's banner about its successor (not a warning about this site)
}


def _mkdocs(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=ROOT,
        env={**os.environ, **OFFLINE},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_reference_pages_match_the_code() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tiermem.cli.docgen", "--check"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr + "\nRun `python -m tiermem.cli.docgen` and commit docs/reference/."


def test_check_names_a_page_that_no_longer_matches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pages = docgen.generate()
    monkeypatch.setattr(docgen, "generate", lambda: pages)  # generated once (a second each)
    for path in docgen.PAGES:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DOCS / path, tmp_path / path)
    assert docgen.main(["--check", "--docs-dir", str(tmp_path)]) == 0
    page = tmp_path / "reference" / "settings.md"
    page.write_text(page.read_text(encoding="utf-8").replace("TIERMEM_AGENT", "TIERMEM_AGENT_NAME"), encoding="utf-8")
    (tmp_path / "reference" / "resources.md").unlink()
    capsys.readouterr()
    assert docgen.main(["--check", "--docs-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "docs/reference/settings.md" in err and "docs/reference/resources.md" in err
    assert "docs/reference/cli.md" not in err
    assert docgen.main(["--docs-dir", str(tmp_path)]) == 0  # writes them again
    assert docgen.main(["--check", "--docs-dir", str(tmp_path)]) == 0


def test_a_changed_command_line_or_setting_changes_its_page() -> None:
    from tiermem.cli.main import _common, build_parser

    probe = argparse.ArgumentParser(add_help=False)
    _common(probe)
    page = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    assert docgen.render_cli(build_parser(), probe._actions) == page
    parser = build_parser()
    serve = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["serve"]
    serve.add_argument("--colour", default="blue", help="a new option")
    changed = docgen.render_cli(parser, probe._actions)
    assert changed != page and "| `--colour COLOUR` | `blue` | a new option |" in changed

    fields = dict(Settings.model_fields)
    settings_page = (DOCS / "reference" / "settings.md").read_text(encoding="utf-8")
    assert docgen.render_settings(fields, default_config_text(), docgen.source_comments(Settings)) == settings_page
    fields["colour"] = FieldInfo(annotation=str, default="blue")
    with pytest.raises(SystemExit, match="'colour' has no description"):  # a setting must be described
        docgen.render_settings(fields, default_config_text(), docgen.source_comments(Settings))
    notes = docgen.source_comments(Settings)
    described = docgen.render_settings(fields, "# The colour.\ncolour = 'red'\n\n" + default_config_text(), notes)
    assert "### `colour`" in described and "`TIERMEM_COLOUR`" in described and '`"red"`' in described


def test_the_tools_guide_names_every_group_of_each_preset() -> None:
    """docs/tools.md's preset table, written by hand, names each group a preset publishes beyond `default`."""
    from tiermem.server.registry import PRESETS, TOOL_GROUPS

    text = (DOCS / "tools.md").read_text(encoding="utf-8").split("| preset | what |", 1)[1].split("\n\n", 1)[0]
    rows = dict(re.findall(r"^\| `(\w+)` \| (.*) \|$", text, re.M))
    for preset, items in PRESETS.items():
        beyond = [g for g in items if g in TOOL_GROUPS and (preset == "default" or g not in PRESETS["default"])]
        missing = [g for g in beyond if not re.search(rf"\b{g}\b", rows[preset])]
        assert not missing, f"docs/tools.md, preset `{preset}`: no word of the groups {missing}"


def test_no_setting_text_is_cut_short() -> None:
    """A setting's text is its comment in default.toml up to the examples: none ends with a colon that announced
    them ("e.g.:"), as the examples are listed apart."""
    text = (DOCS / "reference" / "settings.md").read_text(encoding="utf-8")
    cut = [p for p in text.split("\n\n") if not p.startswith(("#", "-", "|", "`")) and p.rstrip().endswith(":")]
    assert not cut, cut


def test_the_content_limit_and_the_search_budget_have_their_own_texts() -> None:
    """max_content_chars and search_token_budget shared one comment, so each was described as both (a characters
    limit "and the token budget of search results"): each says what it is alone."""
    text = (DOCS / "reference" / "settings.md").read_text(encoding="utf-8")

    def about(name: str) -> str:
        return text.split(f"### `{name}`", 1)[1].split("\n### ", 1)[0]

    assert "token" not in about("max_content_chars") and "argument" not in about("search_token_budget")
    assert "semantic\\_search\\_files" in about("search_token_budget")


def test_allow_download_has_its_own_text_and_types_read_as_english() -> None:
    """allow_download was described with embedding_model's paragraph (the comment above both); oauth_shared_agents'
    type read "table of list of stringss"."""
    text = (DOCS / "reference" / "settings.md").read_text(encoding="utf-8")

    def section(name: str) -> str:
        return text.split(f"### `{name}`", 1)[1].split("\n### ", 1)[0]

    def about(name: str) -> str:
        return section(name).split("\n\n", 2)[2]

    assert about("allow_download") != about("embedding_model") and "offline" in about("allow_download")
    assert "- **type**: table of lists of strings\n" in section("oauth_shared_agents") and "stringss" not in text
    assert docgen.type_name(list[str]) == "list of strings"


def test_settings_page_has_no_machine_values() -> None:
    text = (DOCS / "reference" / "settings.md").read_text(encoding="utf-8")
    assert str(Path.home()) not in text
    for name in Settings.model_fields:
        assert f"### `{name}`" in text
    assert set(docgen.MORE_DESCRIPTIONS) <= set(Settings.model_fields)  # no description of a setting that is gone


def test_root_links_resolve_in_the_site() -> None:
    lines = ["in [the history](docs/benchmarks-history.md) and [x](docs/a.md#b)", "[README](README.md)"]
    assert docgen.root_links(lines) == [
        "in [the history](benchmarks-history.md) and [x](a.md#b)",
        "[README](README.md)",
    ]


def test_docs_hold_no_machine_paths() -> None:
    machine = re.compile(r"/work/|/tmp/[A-Za-z0-9_.-]+/|/root/|" + re.escape(str(Path.home())) + "/")
    found = []
    for page in sorted([*DOCS.rglob("*.md"), ROOT / "mkdocs.yml"]):
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if machine.search(line):
                found.append(f"{page.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert found == []


def _config() -> dict[str, object]:
    """mkdocs.yml, its ``!relative`` tags read as plain strings."""

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, tag, node: loader.construct_scalar(node))
    loaded: dict[str, object] = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=Loader)
    return loaded


def test_nav_lists_every_page() -> None:
    def pages(items: object) -> list[str]:
        if isinstance(items, str):
            return [items]
        if isinstance(items, list):
            return [p for item in items for p in pages(item)]
        if isinstance(items, dict):
            return [p for value in items.values() for p in pages(value)]
        return []

    listed = pages(_config()["nav"])
    assert sorted(listed) == sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))


def test_site_builds_strict_and_offline(tmp_path: Path) -> None:
    done = _mkdocs(ROOT / "mkdocs.yml", tmp_path / "site")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "WARNING" not in output, output
    assert (tmp_path / "site" / "reference" / "tools" / "index.html").is_file()
    bench = (tmp_path / "site" / "benchmarks" / "index.html").read_text(encoding="utf-8")
    assert "Current figures" in bench  # BENCHMARKS.md, included from the repository root
    assert "fonts.googleapis.com" not in (tmp_path / "site" / "index.html").read_text(encoding="utf-8")


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The site's own settings (strict, link and anchor validation) refuse a link to a page or anchor that is not
    there: the same configuration over a two-page site."""
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [the page](page.md#no-such-heading).\n", encoding="utf-8")
    (docs / "page.md").write_text("# Page\n\n[gone](missing.md)\n", encoding="utf-8")
    text = text.replace("docs_dir: docs\n", f"docs_dir: {docs}\n")
    text = text.replace("  - src/tiermem/cli/docgen.py\n", f"  - {ROOT / 'src' / 'tiermem' / 'cli' / 'docgen.py'}\n")
    text = text[: text.index("\nnav:")] + "\nnav:\n  - index.md\n  - page.md\n"
    (tmp_path / "mkdocs.yml").write_text(text, encoding="utf-8")
    done = _mkdocs(tmp_path / "mkdocs.yml", tmp_path / "site")
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "missing.md" in output and "no-such-heading" in output


def test_paths_the_pages_name_exist() -> None:
    """A file of the repository a page names in code (`src/tiermem/...`, `tests/...`, `configs/...`, `bench/...`)
    is there: a page goes stale when code moves. The benchmark history records the past and is not checked."""
    named = re.compile(r"`((?:src/tiermem|tests|configs|bench)/[A-Za-z0-9_./-]*[A-Za-z0-9_])/?`")
    # What runs write and the repository ignores (bench/results.json, tests/artifacts/): named, never committed.
    ignored = {line.strip().rstrip("/") for line in (ROOT / ".gitignore").read_text().splitlines() if "/" in line}
    missing = []
    for page in sorted(DOCS.rglob("*.md")):
        if page.name == "benchmarks-history.md":
            continue
        for path in named.findall(page.read_text(encoding="utf-8")):
            if not (ROOT / path).exists() and path not in ignored:
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert missing == []
