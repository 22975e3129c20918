"""The offline MiniLM model, the hashing embedder, chunking and background loading."""

from __future__ import annotations

import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from tiermem.embeddings import (
    DEFAULT_MODEL, BackgroundEmbedder, FastEmbedEmbedder, HashingEmbedder, assemble_minilm, make_embedder,
    packaged_minilm_files, verify_model_file,
)
from tiermem.errors import ConfigError, EmbeddingError, ModelNotReadyError

from .conftest import PYTHON, ROOT


@pytest.fixture(scope="module")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> FastEmbedEmbedder:
    return FastEmbedEmbedder("default", tmp_path_factory.mktemp("models")).load()


def cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b))


def test_minilm_offline_semantics(minilm: FastEmbedEmbedder) -> None:
    tea, drink, rocket = minilm.embed(["I like green tea", "My favourite drink is tea", "The rocket launched at dawn"])
    assert len(tea) == 384 and abs(cos(tea, tea) - 1) < 1e-4
    assert cos(tea, drink) > 0.6 > 0.2 > cos(tea, rocket)
    assert minilm.name == DEFAULT_MODEL and minilm.dim == 384 and minilm.max_tokens == 256


def test_model_loads_with_no_network_and_no_hub(tmp_path: Path) -> None:
    """A fresh process with hub access disabled and an empty cache still loads and embeds."""
    code = ("from pathlib import Path; from tiermem.embeddings import FastEmbedEmbedder;"
            f"e = FastEmbedEmbedder('default', Path({str(tmp_path / 'models')!r})).load();"
            "print(len(e.embed(['hello'])[0]))")
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "HOME": str(tmp_path),
           "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": ""}
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "384"
    assert not (tmp_path / "hf").exists()  # nothing was fetched into a hub cache


def test_tampered_model_file_is_refused(tmp_path: Path) -> None:
    onnx, tok = packaged_minilm_files()
    fake = tmp_path / "model.onnx"
    shutil.copy(onnx, fake)
    with fake.open("r+b") as fh:
        fh.seek(1000)
        fh.write(b"\x00\x01\x02")
    with pytest.raises(EmbeddingError, match="has sha256 .* expected 8199be6f"):
        verify_model_file(fake)
    with pytest.raises(EmbeddingError, match="has sha256"):
        assemble_minilm(tmp_path / "cache", onnx=fake, tok_dir=tok)
    with pytest.raises(EmbeddingError, match="is missing"):
        verify_model_file(tmp_path / "nope.onnx")


def test_unknown_or_undownloadable_models_fail_clearly(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Unknown embedding model 'no/such-model'"):
        make_embedder("no/such-model", tmp_path)
    emb = make_embedder("BAAI/bge-small-en-v1.5", tmp_path / "empty-cache")  # known, but not downloaded
    assert (emb.name, emb.dim) == ("BAAI/bge-small-en-v1.5", 384)
    with pytest.raises(EmbeddingError, match="not available offline: set allow_download = true"):
        emb.wait(60)
    with pytest.raises(EmbeddingError):
        emb.embed(["x"])  # the load failure is kept, not swallowed


def test_chunking_with_the_real_tokenizer(minilm: FastEmbedEmbedder) -> None:
    text = ("Antidisestablishmentarianism " * 3 + "ordinary words follow. ") * 120
    chunks = minilm.chunk(text)
    assert len(chunks) > 3 and all(minilm.count_tokens(c) <= 256 for c in chunks)
    assert sum(c.count("ordinary") for c in chunks) >= 120  # overlap repeats words, never drops them
    assert minilm.chunk("fits") == ["fits"]


def test_hashing_embedder_is_deterministic() -> None:
    a, b = HashingEmbedder(), HashingEmbedder()
    assert a.embed(["same text"]) == b.embed(["same text"])
    x, y, z = a.embed(["green tea leaves", "green tea", "rocket engine"])
    assert cos(x, y) > cos(x, z)


def test_background_loading_states() -> None:
    gate = threading.Event()

    def factory() -> HashingEmbedder:
        gate.wait(10)
        return HashingEmbedder()

    emb = BackgroundEmbedder(factory, name="hashing-384", dim=384, max_tokens=256)
    emb.start()
    assert not emb.ready
    with pytest.raises(ModelNotReadyError):
        emb.embed(["x"])
    assert emb.chunk("a b c") == ["a b c"]  # works before the model is loaded
    gate.set()
    assert emb.wait(10) and len(emb.embed(["x"])[0]) == 384

    def broken() -> HashingEmbedder:
        raise RuntimeError("disk on fire")

    bad = BackgroundEmbedder(broken, name="b", dim=3, max_tokens=5)
    with pytest.raises(EmbeddingError, match="disk on fire"):
        bad.wait(10)
