"""Builds the domain objects from settings: store, embedder (loading in the background), Archive, Memory."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import Settings
    from .memory import Memory


def open_memory(settings: Settings, *, start_embedder: bool = True) -> Memory:
    """Build the store, the embedder (loading in the background) and the Memory facade."""
    from .archive import Archive
    from .embeddings import make_embedder
    from .memory import Memory
    from .core.migrate import open_core
    from .store import Store

    if settings.uri is None:
        try:
            settings.resolved_data_dir().mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            from .errors import StoreError

            raise StoreError(
                f"Cannot create the data directory {settings.resolved_data_dir()}: {exc}. "
                "Choose a writable one with --data-dir or TIERMEM_DATA_DIR."
            ) from exc
    embedder = make_embedder(settings.embedding_model, settings.model_cache_dir(), allow_download=settings.allow_download)
    if start_embedder:
        embedder.start()  # loads while the store opens
    store = Store(
        settings.store_uri(),
        embedding_model=embedder.name,
        embedding_dim=embedder.dim,
        storage_options=settings.storage_options or None,
        optimize_every=settings.optimize_every,
        metadata_cache_bytes=settings.metadata_cache_mb << 20,
        index_cache_bytes=settings.index_cache_mb << 20,
    )
    core = open_core(store, settings.core_backend, settings.resolved_data_dir() if settings.uri is None else None)
    archive = Archive(
        store, embedder, token_budget=settings.search_token_budget, max_content_chars=settings.max_content_chars,
        wait_seconds=settings.embedding_wait_seconds,
    )
    memory = Memory(
        archive,
        core=core,
        default_blocks=settings.default_blocks,
        default_system=settings.system,
        max_content_chars=settings.max_content_chars,
    )
    if start_embedder:
        # Rows any process stored without vectors (a crash may have left them unannounced): announce them
        # to every process's searches and embed them as soon as the model is ready.
        missing = [t for t, n in archive.missing_vectors().items() if n]
        for table in missing:
            if not store.unembedded_marks(table):
                store.mark_unembedded(table)
        if missing:
            archive.start_backfill()
    return memory
