"""Builds the domain objects from settings: store, embedder (loading in the background), Archive, Memory."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..base.config import Settings
    from ..core.protocol import CoreStore
    from ..store import Store
    from .archive import Archive
    from .memory import Memory
    from .uses import UseCounter


def open_memory(
    settings: Settings,
    *,
    start_embedder: bool = True,
    lazy: bool = False,
    archive_now: bool = True,
    on_archive_wait: Callable[[float | None], None] | None = None,
) -> Memory:
    """Build the store, the embedder (loading in the background) and the Memory facade.

    ``lazy`` (the server): when the core state is a local SQLite file, or objects on object storage, that need
    no migration, open only that now and return; the store, the embedder and the archive open in a background thread started
    here (``Memory.archive`` waits for them; ``on_archive_wait`` hears when a caller has to, and when that wait
    ends: ``Opening.on_wait``). Nothing of lancedb, pyarrow or onnxruntime is imported on the caller's thread, so
    block tools answer at once.
    ``archive_now=False`` (with ``lazy``): that thread starts when ``Memory.open_archive`` is called or something
    needs the archive, not here (the server answers ``initialize`` first: the archive's imports would compete with it).
    """
    from .memory import Memory

    check_model(settings)  # a mistyped model, or one a new store could never embed with: nothing is made
    if settings.uri is None:
        try:
            make_data_dir(settings.resolved_data_dir())
        except OSError as exc:
            from ..base.errors import StoreError

            raise StoreError(
                f"Cannot create the data directory {settings.resolved_data_dir()}: {exc}. "
                "Choose a writable one with --data-dir or TIERMEM_DATA_DIR."
            ) from exc
    from ..base.background import Opening

    core: CoreStore | None = _core_without_store(settings) if lazy else None
    archive: Archive | Opening[Archive]
    if core is not None:
        lazy_core = core

        def opened() -> Archive:
            from ..core.migrate import retire_lance_core

            archive, store = _open_archive(settings, start_embedder)
            _share_upkeep(store, lazy_core)
            retire_lance_core(store, lazy_core)  # after a move an earlier open made and did not finish
            return archive

        archive = Opening(opened, thread_name="tiermem-open-archive", on_wait=on_archive_wait)
    else:
        from ..core.migrate import open_core

        archive, store = _open_archive(settings, start_embedder)
        core = open_core(
            store,
            settings.core_backend,
            settings.resolved_data_dir() if settings.uri is None else None,
            settings.storage_options or None,
        )
        _share_upkeep(store, core)
    memory = Memory(
        archive,
        core=core,
        default_blocks=settings.default_blocks,
        default_system=settings.system,
        max_content_chars=settings.max_content_chars,
        file_max_bytes=settings.file_max_bytes,
        folder_max_files=settings.folder_max_files,
        secret_scan=settings.secret_scan == "on",
        uses=use_counter(settings),
    )
    if isinstance(archive, Opening) and archive_now:
        archive.start()
    _finish_deletions(memory)
    return memory


def use_counter(settings: Settings) -> UseCounter:
    """The use counters: records in ``<data_dir>/uses.sqlite3`` (opened on the first flush or read), kept in the
    process for a store on object storage."""
    from ..core.uses import USES_FILE, MemoryUses, SqliteUses, UseStore
    from .uses import Rules, UseCounter

    rules = Rules(settings.use_half_life_days, settings.use_hot_score, settings.use_warm_score)
    store: UseStore = (
        SqliteUses(settings.resolved_data_dir() / USES_FILE, rules.half_life_us)
        if settings.uri is None
        else MemoryUses(rules.half_life_us)
    )
    return UseCounter(store, rules, flush_seconds=settings.use_flush_seconds)


def make_data_dir(data: Path) -> None:
    """Make a local data directory if it is missing: the directory itself private to its user (0700), since every
    file in it holds memory (parents it needs are made as ``mkdir -p`` makes them). An existing directory is left as
    the user made it; ``tiermem doctor`` says when others can reach it."""
    data.mkdir(mode=0o700, parents=True, exist_ok=True)


def make_dir_inside(data: Path, path: Path) -> None:
    """Make ``path``, a directory inside the local data directory ``data``, with the data directory itself made as
    ``make_data_dir`` makes it (0700) and every directory missing between them private to its user too. A
    ``path.mkdir(parents=True)`` would make a missing data directory with the umask's mode (0755: open to every
    user of the machine)."""
    data, path = data.expanduser().resolve(), path.expanduser().resolve()
    make_data_dir(data)
    made = data
    for part in path.relative_to(data).parts:
        made = made / part
        made.mkdir(mode=0o700, exist_ok=True)


NEW_DATA_DIR = (
    "memory is first stored in a data directory by `tiermem agents create NAME` or `tiermem remember TEXT`, or by a "
    "host's first request to `tiermem serve` (`tiermem setup` connects a host)"
)


def holds_memory(settings: Settings) -> bool:
    """Whether the data directory holds a memory (its core state or its store; object storage: taken as yes)."""
    from ..core.migrate import CORE_FILE

    if settings.uri is not None:
        return True
    data = settings.resolved_data_dir()
    return (data / CORE_FILE).is_file() or Path(settings.store_uri()).is_dir()


def require_memory(settings: Settings) -> None:
    """Raise ``StoreError`` when the data directory holds no memory: a command that only reads, changes or deletes
    would otherwise make an empty one (a mistyped ``--data-dir``) and report on it as if all were well."""
    from ..base.errors import StoreError

    if holds_memory(settings):
        return
    data = settings.resolved_data_dir()
    state = "does not exist" if not data.exists() else "holds no tiermem memory"
    raise StoreError(
        f"The data directory {data} {state}: there is nothing to read, change or delete there, and nothing was "
        f"created. Check the path given to --data-dir or TIERMEM_DATA_DIR; {NEW_DATA_DIR}."
    )


def check_data_dir(settings: Settings) -> None:
    """What ``open_memory`` needs of a local data directory, checked at once and cheaply (the standard library only:
    no LanceDB, no model), for a server to refuse to start rather than fail every call: a directory (made if
    missing), writable (or, read-only, holding a memory to read), and its core-state database, if any, one this
    tiermem reads. Raises ``StoreError`` or ``SchemaError`` naming the problem and the way out. Object storage is
    checked when it opens."""
    import os

    from ..base.errors import StoreError
    from ..core.migrate import CORE_FILE
    from ..core.sqlite import check_readable

    if settings.uri is not None:
        return
    data = settings.resolved_data_dir()
    if data.exists() and not data.is_dir():
        raise StoreError(
            f"The data directory {data} is a file. Choose a directory with --data-dir or TIERMEM_DATA_DIR."
        )
    try:
        make_data_dir(data)
    except OSError as exc:
        raise StoreError(
            f"Cannot create the data directory {data}: {exc}. Choose a writable one with --data-dir or "
            "TIERMEM_DATA_DIR."
        ) from exc
    core = data / CORE_FILE
    if not os.access(data, os.R_OK | os.X_OK) or not (os.access(data, os.W_OK) or core.exists()):
        raise StoreError(
            f"The data directory {data} is not writable (its permissions, or a read-only disk): no memory can be "
            "made there. Make it writable, or choose another with --data-dir or TIERMEM_DATA_DIR."
        )
    if core.exists():
        check_readable(core)
    if not os.access(data, os.W_OK):  # a read-only disk or directory: its memory is served, edits are refused
        import logging

        logging.getLogger("tiermem").warning("the data directory %s is not writable: edits will be refused", data)


def _share_upkeep(store: Store, core: CoreStore) -> None:
    """Replicas on one object store take turns at the store's background upkeep (a lease object next to the core
    state): two at once would only conflict, and each lost commit leaves files LanceDB keeps for days."""
    from ..core.lease import Lease
    from ..core.objects import ObjectCore

    if isinstance(core, ObjectCore) and store.conn.remote:
        store.conn.upkeep_lease = Lease(core.bucket).held


def _creation_lease(settings: Settings) -> Callable[[], AbstractContextManager[object]] | None:
    """On object storage, replicas opening a new store at once take turns at creating its tables (a lease object
    next to the core state; ``Connection.creating``). None for a local directory (a lock file there) and for stores
    the object core does not reach."""
    from ..core.bucket import supports

    if settings.uri is None or not supports(settings.uri):
        return None
    uri, options = settings.uri, settings.storage_options or None

    def held() -> AbstractContextManager[object]:
        from ..core.bucket import Bucket
        from ..core.lease import CREATE_LEASE, CREATE_SECONDS, Lease

        return Lease(Bucket(uri, options), CREATE_LEASE, CREATE_SECONDS).waiting(timeout=CREATE_SECONDS * 1.5)

    return held


_LOCKED = {"file-chunks": "a folder file's chunks", "keyword-texts": "keyword texts made from other messages"}


def _write_leases(settings: Settings) -> Callable[[str], AbstractContextManager[object]] | None:
    """On object storage, replicas take turns at writes of several commits that must not interleave (a file's chunks
    replaced: ``Connection.exclusive``), one lease object per name next to the core state. None for a local directory
    (a lock file there) and for stores the object core does not reach."""
    from ..core.bucket import supports

    if settings.uri is None or not supports(settings.uri):
        return None
    uri, options = settings.uri, settings.storage_options or None
    buckets: list[Any] = []  # one client for every lease of this process, made at the first (not per write)

    def held(name: str) -> AbstractContextManager[object]:
        from ..core.bucket import Bucket
        from ..core.lease import WRITE_SECONDS, Lease, write_lease

        if not buckets:
            buckets.append(Bucket(uri, options))
        return Lease(buckets[0], write_lease(name), WRITE_SECONDS).waiting(
            timeout=WRITE_SECONDS * 1.5,
            doing=f"writing under the lock {name!r} ({_LOCKED.get(name, 'writes that must not interleave')})",
        )

    return held


def _finish_deletions(memory: Memory) -> None:
    """Finish agent deletions an earlier process started and did not finish (``Memory.delete_agent``)."""
    import logging

    from ..base.errors import TiermemError

    try:
        if not memory.pending_deletions():
            return
        for name in memory.finish_deletions():
            logging.getLogger("tiermem").warning(
                "finished deleting agent %r (an earlier deletion was interrupted)", name
            )
    except TiermemError as exc:  # a read-only store, say: the agent stays marked, and the next opening tries again
        logging.getLogger("tiermem").warning("could not finish an interrupted agent deletion: %s", exc)


def _core_without_store(settings: Settings) -> CoreStore | None:
    """The core state, if it opens without the LanceDB store: a local SQLite file (or a new directory), or the
    objects of an object-storage uri that holds them (or nothing yet); None when core tables of an older tiermem
    must be moved out of LanceDB first (``open_core`` does it, with the store)."""
    from ..core.migrate import CORE_FILE, check_backend, open_objects, open_without_store

    check_backend(settings.core_backend)
    if settings.uri is not None:
        from ..core.bucket import supports

        if settings.core_backend not in ("auto", "object") or not supports(settings.uri):
            return None
        return open_objects(settings.uri, settings.storage_options or None, None)
    if settings.core_backend not in ("auto", "sqlite"):
        return None
    return open_without_store(settings.resolved_data_dir() / CORE_FILE, Path(settings.store_uri()))


def check_model(settings: Settings) -> None:
    """Refuse, before anything is made, an ``embedding_model`` setting that cannot work: an unknown name
    (``ConfigError``), or, for a store not made yet, a fastembed model that is not on this machine while
    ``allow_download`` is off (``EmbeddingError``). A new store records its model: one that cannot load would keep
    every row without vectors and refuse the bundled model later (the store "holds vectors" of the other).

    Unset, or the default or hashing model: nothing to check (they need no files). A model in the data
    directory's model cache is loaded here to be sure (a new store only), once: the store's embedder takes it."""
    from ..embedding.names import hashing_dim

    model = settings.embedding_model
    if model is None or hashing_dim(model) is not None:
        return
    from ..base.errors import EmbeddingError
    from ..embedding.embedders import DEFAULT_MODEL, describe_model, prove_loads

    name = describe_model(model)[0]  # ConfigError for a name no embedder has
    if name == DEFAULT_MODEL or settings.allow_download or _store_exists(settings):
        return
    cache = settings.model_cache_dir()
    refusal = (
        f"The embedding model {name!r} is not on this machine, and a new store would record it: its rows would "
        f"have no vectors. Set allow_download = true (TIERMEM_ALLOW_DOWNLOAD=1) to fetch it into {cache}, or "
        "leave embedding_model unset for the bundled all-MiniLM-L6-v2. Nothing was created."
    )
    if not cache.is_dir() or not any(cache.iterdir()):
        raise EmbeddingError(refusal)
    try:
        prove_loads(name, cache)
    except EmbeddingError as exc:
        raise EmbeddingError(f"{refusal} ({exc})") from exc


def _store_exists(settings: Settings) -> bool:
    """Whether the store has been made (a local one: its directory; on object storage: it records a model)."""
    if settings.uri is None:
        return Path(settings.store_uri()).is_dir()
    from ..store import Store

    return bool(Store.recorded_meta(settings.store_uri(), settings.storage_options or None).get("embedding_model"))


def embedding_model(settings: Settings) -> str:
    """The model to embed with: the ``embedding_model`` setting; unset, the one the store's vectors were built with
    (``tiermem reembed`` records the model it switches to), and "default" for a store not made yet."""
    if settings.embedding_model is not None:
        return settings.embedding_model
    from ..store import Store

    recorded = Store.recorded_meta(settings.store_uri(), settings.storage_options or None).get("embedding_model")
    return recorded or "default"


def _open_archive(settings: Settings, start_embedder: bool) -> tuple[Archive, Store]:
    """The store, the embedder (loading in the background) and the archive over them."""
    from ..embedding.embedders import make_embedder
    from ..store import Store
    from .archive import Archive

    embedder = make_embedder(
        embedding_model(settings), settings.model_cache_dir(), allow_download=settings.allow_download
    )
    if start_embedder:
        embedder.start()  # loads while the store opens
    store = Store(
        settings.store_uri(),
        embedding_model=embedder.name,
        embedding_dim=embedder.dim,
        storage_options=settings.lance_storage_options(),  # a bulk command's longer deadlines (never the core's)
        optimize_every=settings.optimize_every,
        optimize_every_commits=settings.optimize_every_commits,
        read_staleness=timedelta(milliseconds=settings.object_read_staleness_ms),
        metadata_cache_bytes=settings.metadata_cache_mb << 20,
        index_cache_bytes=settings.index_cache_mb << 20,
        session_renew_writes=settings.session_renew_writes,
        version_retention=timedelta(seconds=settings.version_retention_seconds)
        if settings.version_retention_seconds
        else None,
        creation_lock=_creation_lease(settings),
        leases=_write_leases(settings),
    )
    archive = Archive(
        store,
        embedder,
        token_budget=settings.search_token_budget,
        max_content_chars=settings.max_content_chars,
        wait_seconds=settings.embedding_wait_seconds,
    )
    if start_embedder:
        # Rows any process stored without vectors (a crash may have left them unannounced): announce them
        # to every process's searches and embed them as soon as the model is ready.
        missing = [t for t, n in archive.vectors.missing().items() if n]
        for table in missing:
            if not store.rows.unembedded_marks(table):
                store.rows.mark_unembedded(table)
        if missing:
            archive.vectors.start_backfill()
    return archive, store
