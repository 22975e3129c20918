"""docs/ARCHITECTURE.md checked against the tree: the modules it names exist, and the figures it states are the ones
the code defines (read here from the code, so a change to a constant fails until the page says it too)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tiermem.base import gcpause
from tiermem.core import history
from tiermem.core.protocol import LOCAL_POLL_SECONDS
from tiermem.domain import briefing
from tiermem.domain.search import pool, ranking
from tiermem.server import app
from tiermem.store import indexes, schemas, search

from .conftest import ROOT

DOC = ROOT / "docs" / "ARCHITECTURE.md"
SRC = ROOT / "src" / "tiermem"
TEXT = DOC.read_text()
# The page's prose is wrapped for reading: a figure may sit across a line break.
FLAT = re.sub(r"\s+", " ", TEXT)
PACKAGES = sorted(p.name for p in SRC.iterdir() if (p / "__init__.py").exists())
# MCP methods look like paths (``server/discover``); they are not modules.
MCP_METHODS = {"server/discover"}
NUMBER_WORDS = {
    word: n
    for n, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
        "seventeen eighteen nineteen twenty twenty-one twenty-two twenty-three twenty-four twenty-five".split()
    )
}


def _code_spans(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


def _defines(module: Path, name: str) -> bool:
    """Whether ``module`` defines ``name`` at its top level (a function, a class or an assignment)."""
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name:
            return True
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        for target in targets:
            names = target.elts if isinstance(target, ast.Tuple) else [target]
            if any(isinstance(t, ast.Name) and t.id == name for t in names):
                return True
    return False


def missing_paths(text: str) -> list[str]:
    """The modules, packages and repository files ``text`` names in code spans that do not exist: ``domain/archive.py``,
    ``server/``, ``tests/test_layers.py``, ``docs/SCALING.md``, ``agent/service``, ``base/background.Opening`` (the
    module and the name it defines), ``tiermem.server.app``."""
    problems = []
    for span in _code_spans(text):
        if any(c in span for c in "*~<$ (") or span in MCP_METHODS:
            continue
        if re.fullmatch(r"tiermem(\.\w+)+", span):  # a dotted module name, maybe ending in a name it defines
            parts = span.split(".")[1:]
            path = SRC.joinpath(*parts)
            if not (path.with_suffix(".py").exists() or (path / "__init__.py").exists()):
                module = SRC.joinpath(*parts[:-1]).with_suffix(".py")
                if not (module.exists() and _defines(module, parts[-1])):
                    problems.append(span)
            continue
        top = span.split("/")[0]
        if "/" not in span or not (
            top in PACKAGES or (ROOT / top).is_dir() and top in {"src", "tests", "bench", "docs"}
        ):
            continue
        base = SRC if top in PACKAGES else ROOT
        if span.endswith("/"):
            ok = (base / span).is_dir()
        elif re.search(r"\.(py|md|toml|yml|json)$", span):
            ok = (base / span).exists()
        elif "." in span.rsplit("/", 1)[1]:  # pkg/module.Name
            module, name = span.rsplit(".", 1)
            ok = (base / f"{module}.py").exists() and _defines(base / f"{module}.py", name)
        else:  # pkg/module or pkg/package
            ok = (base / f"{span}.py").exists() or (base / span / "__init__.py").exists()
        if not ok:
            problems.append(span)
    return problems


def test_the_path_check_finds_what_is_missing() -> None:
    """Not vacuous: each kind of name is checked, and MCP methods and globs are left alone."""
    text = (
        "`domain/archive.py` `domain/nowhere.py` `server/` `nowhere/` `agent/service` `agent/nowhere` "
        "`base/background.Opening` `base/background.Nothing` `tests/test_layers.py` `tests/test_nothing.py` "
        "`tiermem.server.app` `tiermem.server.nowhere` `tiermem.domain.search.pool.LEG_DEPTH` `server/discover` "
        "`interop/memfs*` `logging/setLevel`"
    )
    assert missing_paths(text) == [
        "domain/nowhere.py",
        "agent/nowhere",
        "base/background.Nothing",
        "tests/test_nothing.py",
        "tiermem.server.nowhere",
    ]


def test_every_module_the_page_names_exists() -> None:
    assert missing_paths(TEXT) == []


def test_the_tree_shows_every_package() -> None:
    """The drawing of the tree names each package of ``src/tiermem`` (``process/`` included)."""
    tree = TEXT.split("```")[1]
    assert [p for p in PACKAGES if not re.search(rf"\b{p}/(\s|$)", tree)] == []


def test_the_module_table_lists_the_process_package() -> None:
    modules = {p.stem for p in (SRC / "process").glob("*.py") if p.stem != "__init__"}
    assert {m for m in modules if f"`process/{m}.py`" not in TEXT} == set()
    assert not re.search(r"`server/(hookserver|netguard|shutdown)\.py`", TEXT)


def constants_named(text: str) -> list[str]:
    """``module.CONSTANT`` spans in ``text`` whose module (a unique file name in the package) lacks the constant."""
    by_name: dict[str, list[Path]] = {}
    for path in SRC.rglob("*.py"):
        by_name.setdefault(path.stem, []).append(path)
    problems = []
    for module, name in re.findall(r"`(\w+)\.([A-Z][A-Z0-9_]+)`", text):
        paths = by_name.get(module, [])
        if len(paths) == 1 and not _defines(paths[0], name):
            problems.append(f"{module}.{name}")
    return problems


def test_every_constant_the_page_names_exists() -> None:
    assert constants_named("`pool.LEG_DEPTH` `pool.NOTHING_HERE`") == ["pool.NOTHING_HERE"]
    assert constants_named(TEXT) == []


def _count_before(phrase: str) -> list[int]:
    return [NUMBER_WORDS[w.lower()] for w in re.findall(rf"\b([\w-]+) {phrase}", FLAT)]


def test_the_feature_count_is_the_rankers() -> None:
    """Wherever the page counts the ranker's cheap features, the count is ``len(ranking.FEATURES)``, and the Search
    decision names every one of them as the code does."""
    counts = _count_before("cheap features")
    assert counts and set(counts) == {len(ranking.FEATURES)}, counts
    search_decision = FLAT.split("**Search.**", 1)[1].split("- **", 1)[0]
    named = set(_code_spans(search_decision))
    assert [f for f in ranking.FEATURES if f not in named] == []


def test_the_candidate_pool_is_the_archives() -> None:
    """The pool a search ranks and how deep recall's legs read, as ``search/pool.py`` sets them."""
    top10 = pool.pool_size(10)
    assert re.search(rf"a pool of {top10} candidates for a top-10 search", FLAT)
    assert re.search(rf"\({pool.POOL_PER_HIT} per hit asked for, at least {pool.MIN_POOL}:", FLAT)
    assert re.search(rf"legs read {pool.LEG_DEPTH} rows each", FLAT)
    assert re.search(rf"the rows either leg ranks within {top10},", FLAT)
    assert re.search(rf"logged within {pool.NEIGHBOURS} turns of a pooled row", FLAT)
    assert not re.search(r"each return \d+ candidates", FLAT)


def _thousands(n: int) -> str:
    return f"{n // 1000}k" if n >= 10_000 and n % 1000 == 0 else f"{n:,}"


def test_the_vector_index_figures_are_the_stores() -> None:
    segments = dict(indexes.REINDEX_SEGMENTS)
    (small, few), (_, many) = sorted(segments.items())
    expected = [
        f"Tables past {_thousands(indexes.VECTOR_INDEX_MIN_ROWS)} rows get an IVF-SQ vector index",
        f"at least {indexes.MIN_PARTITION_ROWS} rows each",
        f"the table has {indexes.REINDEX_GROWTH}x the rows of its last training",
        f"more than {few} segments ({many} past {_thousands(small)} rows), "
        f"up to {_thousands(indexes.REINDEX_MAX_ROWS)} rows",
        f"Up to {_thousands(search.EXACT_PROBE_ROWS)} rows searches probe every partition and re-rank "
        f"{search.EXACT_REFINE}x the limit",
        f"max({search.VECTOR_NPROBES}, partitions / {search.VECTOR_PROBE_SHARE})",
    ]
    assert [e for e in expected if e not in FLAT] == []


@pytest.mark.parametrize(
    ("phrase", "value"),
    [
        ("or after {} changes", f"{history.MAX_STEPS:,}"),
        ("cuts instructions at {}", f"{briefing.HOST_LIMITS['claude-code']:,}"),
        ("waits up to {} s for the core state", f"{app.INSTRUCTIONS_WAIT:g}"),
        ("`SCHEMA_VERSION` ({}:", str(schemas.SCHEMA_VERSION)),
        ("poll it ({} ms", f"{LOCAL_POLL_SECONDS * 1000:g}"),
        ("({} ms when `watch_cheap`", f"{LOCAL_POLL_SECONDS * 1000:g}"),
        ("or {} s release it", f"{gcpause.DEADLINE:g}"),
    ],
)
def test_a_figure_is_the_codes(phrase: str, value: str) -> None:
    assert phrase.format(value) in FLAT, f"docs/ARCHITECTURE.md should say {phrase.format(value)!r}"


def test_the_top_level_limit_is_the_layer_tests() -> None:
    limit = re.search(r"len\(top\) <= (\d+)", (ROOT / "tests" / "test_layers.py").read_text())
    assert limit is not None
    assert f"on more than {limit.group(1)} entries at the package's top level" in FLAT
