"""Letta's filesystem at scale (`python -m bench files`): ingest, search quality, tool latency, re-sync, memory.

The documents are real: the Python standard library's ``.py`` files (``sysconfig.get_paths()["stdlib"]``, sorted by
path; where there are fewer than asked for, the first ones again under a ``copyN/`` prefix: other names, the same text).

1. ingest: ``--files`` files uploaded into one folder with ``memory.files.upload_many(..., embed=False)`` in batches
   of ``--batch``: MB/s of parsed text and files/s; then the backfill that embeds every chunk with the configured
   model (``--model``, default: the packaged MiniLM), timed on its own (``--embed-seconds`` caps it: the rest is
   projected from the rate, and the search parts that need vectors are skipped with the reason).
2. hit@5: 20 chunks picked at random (seeded), each one's most distinctive line (the longest of >= 6 words found in
   no other file) asked of ``semantic_search_files`` as it is, and as a 5-word phrase from its middle; a hit is its
   file among the first 5 passages.
3. latency over ``--search-files`` files (the folder filled up with copies under other names, embedded): p50/p95 of
   ``grep_files`` (a literal, a regex, a rare literal) and ``semantic_search_files`` (three queries), each >= 30 runs
   after a warm-up.
4. re-sync of one changed file: ``tiermem.interop.folder_sync.sync_folder`` of the ingest's files copied to a
   directory, again after one file changed (else ``upload_many`` of that one file), embedded inline and not, with
   the attached agent's view brought up to date.
5. resident memory (VmRSS): before the ingest, after it (and its backfill), after the searches over the big folder.

    python -m bench files                               # 2,000 files, 10,000 for the latency, the packaged MiniLM
    python -m bench files --model hashing               # the same with the hashing embedder (no model time)
    python -m bench files --quick --model hashing       # a smoke run (seconds)
    python -m bench files --out /tmp/files.json         # also write the figures as JSON
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import re
import shutil
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

from tiermem.base.errors import TiermemError

from .common import machine, rss_mb, stats

SEED = 40
PROBES = 20
RUNS = 30
HIT_RE = re.compile(r"^=== (.+) \(passage #\d+\) ===$", re.M)
GREP_PATTERNS = {"literal": "def __init__", "regex": r"raise \w+Error\(f?['\"]", "rare": "xyzzy"}
SEMANTIC_QUERIES = {
    "concept": "parse command line arguments into options",
    "api": "open a socket connection with a timeout",
    "phrase": "read the whole file and return its lines",
}
TARGETS = {"grep_p50_ms": 50.0, "semantic_p50_ms": 50.0, "resync_s": 1.0, "ingest_mb_s": 2.0}


def stdlib_files(n: int) -> list[tuple[str, Path]]:
    """``n`` (name, path) pairs: the standard library's .py files by sorted path, then again as ``copyN/...``."""
    root = Path(sysconfig.get_paths()["stdlib"])
    found = sorted(
        p
        for p in root.rglob("*.py")
        if p.is_file() and not {"site-packages", "dist-packages", "__pycache__"} & set(p.parts)
    )
    out = [(p.relative_to(root).as_posix(), p) for p in found[:n]]
    copy = 1
    while len(out) < n:
        out += [(f"copy{copy}/{p.relative_to(root).as_posix()}", p) for p in found[: n - len(out)]]
        copy += 1
    return out


def upload(memory: Any, folder: str, files: list[tuple[str, Path]], *, embed: bool, batch: int) -> dict[str, Any]:
    """Upload in slices of ``batch`` (one ``upload_many`` call per slice, as a sync would); times it whole."""
    items = [(name, path.read_bytes(), str(path)) for name, path in files]  # read before the clock starts
    started = time.perf_counter()
    outcomes: list[Any] = []
    for i in range(0, len(items), batch):
        outcomes += memory.files.upload_many(folder, items[i : i + batch], embed=embed, batch=batch)
    seconds = time.perf_counter() - started
    chars = sum(u.chars for u in outcomes)
    by: dict[str, int] = {}
    for u in outcomes:
        by[u.outcome] = by.get(u.outcome, 0) + 1
    return {
        "files": len(items),
        "seconds": round(seconds, 2),
        "text_mb": round(chars / 1e6, 2),
        "bytes_mb": round(sum(len(d) for _, d, _ in items) / 1e6, 2),
        "mb_per_s": round(chars / 1e6 / seconds, 2),
        "files_per_s": round(len(items) / seconds, 1),
        "outcomes": by,
        "errors": [f"{u.name}: {u.reason[:80]}" for u in outcomes if u.outcome == "error"][:5],
    }


def backfill(memory: Any, cap: float | None) -> dict[str, Any]:
    """Embed every chunk stored without a vector (what the backfill does), batch by batch, up to ``cap`` seconds."""
    vectors = memory.archive.vectors
    left = vectors.missing()["file_chunks"]
    started = time.perf_counter()
    done = 0
    while True:
        n = vectors.embed_missing("file_chunks", None, limit=1024)
        done += n
        if n < 1024 or (cap is not None and time.perf_counter() - started > cap):
            break
    seconds = time.perf_counter() - started
    remaining = vectors.missing()["file_chunks"]
    rate = done / seconds if seconds else 0.0
    out = {
        "chunks": left,
        "embedded": done,
        "seconds": round(seconds, 1),
        "chunks_per_s": round(rate, 1),
        "complete": remaining == 0,
        "remaining": remaining,
    }
    if remaining:
        out["projected_total_s"] = round(left / rate, 0) if rate else None
    return out


def build_indexes(memory: Any) -> dict[str, Any]:
    """The store's upkeep (compaction, full-text and vector indexes), timed: a server runs it in the background."""
    started = time.perf_counter()
    memory.archive.store.indexes.optimize()
    return {"seconds": round(time.perf_counter() - started, 1)}


def distinctive_line(chunk: str, texts: list[str]) -> str | None:
    """The chunk's longest line of >= 6 words that no other file's text holds (None: it has none)."""
    lines = sorted({ln.strip() for ln in chunk.splitlines() if len(ln.split()) >= 6}, key=len, reverse=True)
    for line in lines[:8]:
        if sum(line in t for t in texts) == 1:
            return line
    return None


def hit_at_5(memory: Any, agent: str, folder: str, files: list[tuple[str, Path]]) -> dict[str, Any]:
    rng = random.Random(SEED)
    texts = {name: memory.files.text(folder, name) for name, _ in files}
    originals = [n for n, _ in files if not n.startswith("copy")]
    all_texts = list(texts.values())
    probes: list[tuple[str, str]] = []
    tries = 0
    while len(probes) < PROBES and tries < 2000:
        tries += 1
        name = rng.choice(originals)
        chunks = memory.archive.embedder.chunk(texts[name]) if texts[name].strip() else []
        if not chunks:
            continue
        line = distinctive_line(rng.choice(chunks), all_texts)
        if line is not None and (name, line) not in probes:
            probes.append((name, line))
    out: dict[str, Any] = {"probes": len(probes)}
    for kind in ("sentence", "phrase5"):
        hits, misses, errors = 0, [], []
        for name, line in probes:
            words = line.split()
            query = line if kind == "sentence" else " ".join(words[len(words) // 2 - 2 : len(words) // 2 + 3])
            try:
                found = HIT_RE.findall(memory.semantic_search_files(agent, query, 5))
            except TiermemError as exc:  # counted as a miss, and shown: the tool failed on this text
                errors.append(f"{query[:60]!r}: {str(exc)[:160]}")
                continue
            if f"{folder}/{name}" in found[:5]:
                hits += 1
            else:
                misses.append(query[:60])
        out[kind] = {
            "hit_at_5": round(hits / max(1, len(probes)), 3),
            "hits": hits,
            "misses": misses[:5],
            "errors": errors,
        }
    return out


def timed(fn: Any, runs: int) -> dict[str, float]:
    fn()  # warm-up
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return stats(samples)


def latency(memory: Any, agent: str, runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {"grep_files": {}, "semantic_search_files": {}}
    for kind, pattern in GREP_PATTERNS.items():
        first = memory.grep_files(agent, pattern, None, 1, None).splitlines()[0][:100]
        out["grep_files"][kind] = {
            "pattern": pattern,
            "answer": first,
            **timed(lambda p=pattern: memory.grep_files(agent, p, None, 1, None), runs),
        }
    for kind, query in SEMANTIC_QUERIES.items():
        first = memory.semantic_search_files(agent, query, 5).splitlines()[0][:100]
        out["semantic_search_files"][kind] = {
            "query": query,
            "answer": first,
            **timed(lambda q=query: memory.semantic_search_files(agent, q, 5), runs),
        }
    return out


def resync(memory: Any, agent: str, files: list[tuple[str, Path]], work: Path, runs: int) -> dict[str, Any]:
    """One file of a synced directory changes (a line appended each time; then, embedded inline, a line inserted in its
    middle): how long until the folder and the agent's view have it. With ``tiermem.interop.folder_sync.sync_folder``: the directory (the ingest's files, copied) synced
    into a folder attached to the agent, then synced again after each change (the walk of every file included);
    without it, ``upload_many`` of that one file. Each embedded inline, and not (the backfill embeds it later)."""
    name, path = next(((n, p) for n, p in files if 20_000 <= p.stat().st_size <= 40_000), files[0])
    out: dict[str, Any] = {"file": name, "bytes": path.stat().st_size}
    if importlib.util.find_spec("tiermem.interop.folder_sync") is not None:
        from tiermem.interop.folder_sync import sync_folder

        tree = work / "tree"
        for n, p in files:
            (tree / n).parent.mkdir(parents=True, exist_ok=True)
            (tree / n).write_bytes(p.read_bytes())
        memory.files.create_folder("synced")
        memory.files.attach(agent, "synced")
        t = time.perf_counter()
        first = sync_folder(memory, "synced", tree, embed=False)
        out["first_sync"] = {"seconds": round(time.perf_counter() - t, 2), "counts": first.counts()}
        out["how"] = f"sync_folder of a {len(files)}-file directory after one file changed"

        def change(data: bytes, embed: bool) -> None:
            (tree / name).write_bytes(data)
            report = sync_folder(memory, "synced", tree, embed=embed)
            assert report.outcome(name) == "updated", report.summary()
    else:
        out["how"] = "upload_many of the one changed file (no tiermem.interop.folder_sync)"

        def change(data: bytes, embed: bool) -> None:
            done = memory.files.upload_many("stdlib", [(name, data, str(path))], embed=embed)
            assert done[0].outcome == "updated", done[0]

    original = path.read_bytes()
    middle = original.index(b"\n", len(original) // 2) + 1
    for embed, where in ((True, "end"), (False, "end"), (True, "middle")):
        samples = []
        for i in range(runs):
            line = f"# changed {embed} {where} {i}\n".encode()
            data = original + b"\n" + line if where == "end" else original[:middle] + line + original[middle:]
            t = time.perf_counter()
            change(data, embed)
            samples.append(time.perf_counter() - t)
        key = "embedded" if embed else "unembedded"
        out[key if where == "end" else f"{key}_middle"] = stats(samples)
    return out


def rss() -> float:
    return round(rss_mb(), 1)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench files")
    parser.add_argument("--files", type=int, default=2000, help="documents for the ingest and hit@5 (default 2000)")
    parser.add_argument("--search-files", type=int, default=10_000, help="files for the latency (default 10000)")
    parser.add_argument("--model", default="default", help="embedding model: default (the packaged MiniLM) or hashing")
    parser.add_argument("--embed-seconds", type=float, default=None, help="cap on the backfill (the rest projected)")
    parser.add_argument("--batch", type=int, default=64, help="files per upload_many call")
    parser.add_argument("--runs", type=int, default=RUNS, help="timed runs per pattern or query (>= 30)")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument(
        "--embed-inline",
        action="store_true",
        help="embed while uploading (the hashing model: seconds) instead of by the backfill",
    )
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    args, _ = parser.parse_known_args(argv if argv is not None else sys.argv[1:])
    if args.quick:
        args.files, args.search_files, args.runs = min(args.files, 40), min(args.search_files, 100), min(args.runs, 5)

    from tiermem.base.config import load_settings
    from tiermem.domain.factory import open_memory

    work = Path(tempfile.mkdtemp(prefix="tiermem-bench-files-"))
    result: dict[str, Any] = {
        "model": args.model,
        "files": args.files,
        "search_files": args.search_files,
        "runs": args.runs,
        "machine": machine(),
        "targets": TARGETS,
    }
    result["rss_mb"] = {"start": rss()}
    memory = open_memory(load_settings(data_dir=work / "data", embedding_model=args.model))
    t = time.perf_counter()
    memory.archive.embedder.wait(None)  # loaded before the clock starts: ingest and model load are not mixed up
    result["model_load_s"] = round(time.perf_counter() - t, 2)
    agent = memory.ensure_agent("default").id
    memory.files.create_folder("stdlib", description="The Python standard library's modules")
    memory.files.attach(agent, "stdlib")
    result["rss_mb"]["before_ingest"] = rss()

    files = stdlib_files(args.files)
    result["ingest"] = upload(memory, "stdlib", files, embed=args.embed_inline, batch=args.batch)
    result["rss_mb"]["after_ingest"] = rss()
    result["backfill"] = backfill(memory, args.embed_seconds)
    result["rss_mb"]["after_backfill"] = rss()
    result["index"] = build_indexes(memory)  # what a server's upkeep does after a bulk upload
    result["query_embed"] = timed(
        lambda: memory.archive.embedder.embed(["open a socket connection with a timeout"]), args.runs
    )
    complete = result["backfill"]["complete"]
    if complete:
        result["hit_at_5"] = hit_at_5(memory, agent, "stdlib", files)
    else:
        result["hit_at_5"] = {
            "skipped": f"{result['backfill']['remaining']} chunks not embedded within "
            f"--embed-seconds {args.embed_seconds:g}: a semantic search would embed them"
        }

    more = stdlib_files(args.search_files)[len(files) :]
    result["fill"] = upload(memory, "stdlib", more, embed=args.embed_inline, batch=256) if more else {"files": 0}
    if complete:
        result["fill"]["backfill"] = backfill(memory, None)
    if more:
        result["fill"]["index"] = build_indexes(memory)
    total = len(memory.files.files("stdlib"))
    result["latency_files"] = total
    if complete:
        result["latency"] = latency(memory, agent, args.runs)
    else:  # grep needs no vectors; a semantic search with rows still unembedded would start embedding them
        result["latency"] = {
            "grep_files": latency_grep_only(memory, agent, args.runs),
            "semantic_search_files": {"skipped": "chunks not embedded (see backfill)"},
        }
    result["rss_mb"]["after_searches"] = rss()
    result["resync"] = resync(memory, agent, files, work, max(5, args.runs // 3))
    report(result)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    memory.archive.store.conn.finish_upkeep()  # no background upkeep may still be reading the store
    shutil.rmtree(work, ignore_errors=True)  # the store it built (hundreds of MB at full size)
    return result


def latency_grep_only(memory: Any, agent: str, runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind, pattern in GREP_PATTERNS.items():
        first = memory.grep_files(agent, pattern, None, 1, None).splitlines()[0][:100]
        out[kind] = {
            "pattern": pattern,
            "answer": first,
            **timed(lambda p=pattern: memory.grep_files(agent, p, None, 1, None), runs),
        }
    return out


def report(r: dict[str, Any]) -> None:
    """The figures, one per line (``key: value``), then the comparison with the issue's targets."""
    ing, bf = r["ingest"], r["backfill"]
    lines = [
        f"model: {r['model']} (loaded in {r['model_load_s']} s); load avg {r['machine']['load_avg']}, {r['machine']['cpus']} cpus",
        f"ingest_files: {ing['files']} ({ing['outcomes']})",
        f"ingest_text_mb: {ing['text_mb']} (bytes {ing['bytes_mb']} MB)",
        f"ingest_seconds: {ing['seconds']}",
        f"ingest_mb_per_s: {ing['mb_per_s']}",
        f"ingest_files_per_s: {ing['files_per_s']}",
        f"backfill_chunks: {bf['chunks']} (embedded {bf['embedded']})",
        f"backfill_seconds: {bf['seconds']}"
        + ("" if bf["complete"] else f" (capped; all: ~{bf.get('projected_total_s')} s)"),
        f"backfill_chunks_per_s: {bf['chunks_per_s']}",
        f"query_embed_p50_ms: {r['query_embed']['p50_ms']}",
    ]
    hit = r["hit_at_5"]
    if "skipped" in hit:
        lines.append(f"hit_at_5: skipped ({hit['skipped']})")
    else:
        lines += [
            f"hit_at_5_sentence: {hit['sentence']['hit_at_5']} ({hit['sentence']['hits']}/{hit['probes']})",
            f"hit_at_5_phrase5: {hit['phrase5']['hit_at_5']} ({hit['phrase5']['hits']}/{hit['probes']})",
        ]
        for kind in ("sentence", "phrase5"):
            lines += [f"  {kind} error: {e}" for e in hit[kind]["errors"]]
            lines += [f"  {kind} miss: {m!r}" for m in hit[kind]["misses"]]
    if r["fill"].get("files"):
        lines.append(
            f"fill_files: {r['fill']['files']} in {r['fill']['seconds']} s"
            + (f", embedded in {r['fill']['backfill']['seconds']} s" if "backfill" in r["fill"] else "")
        )
    lines.append(f"latency_files: {r['latency_files']}")
    for tool, kinds in r["latency"].items():
        if "skipped" in kinds:
            lines.append(f"{tool}: skipped ({kinds['skipped']})")
            continue
        for kind, s in kinds.items():
            lines.append(
                f"{tool}_{kind}_p50_ms: {s['p50_ms']}  p95_ms: {s['p95_ms']}  (n={s['n']}; {s['answer'][:70]!r})"
            )
    rs = r["resync"]
    lines += [
        f"resync: {rs['how']}" + (f" (first sync {rs['first_sync']['seconds']} s)" if "first_sync" in rs else ""),
        f"resync_embedded_p50_s: {rs['embedded']['p50_ms'] / 1000:.3f}  p95_s: {rs['embedded']['p95_ms'] / 1000:.3f}"
        f" ({rs['file']}, {rs['bytes']} bytes)",
        f"resync_unembedded_p50_s: {rs['unembedded']['p50_ms'] / 1000:.3f}  p95_s: {rs['unembedded']['p95_ms'] / 1000:.3f}",
        f"resync_embedded_middle_p50_s: {rs['embedded_middle']['p50_ms'] / 1000:.3f}  "
        f"p95_s: {rs['embedded_middle']['p95_ms'] / 1000:.3f} (a line inserted in the middle)",
    ]
    lines.append("rss_mb: " + ", ".join(f"{k} {v}" for k, v in r["rss_mb"].items()))
    lines.append("targets: " + "; ".join(verdicts(r)))
    print("\n".join(lines), flush=True)


def verdicts(r: dict[str, Any]) -> list[str]:
    out = [
        f"ingest {r['ingest']['mb_per_s']} MB/s vs >= {TARGETS['ingest_mb_s']}: "
        + ("met" if r["ingest"]["mb_per_s"] >= TARGETS["ingest_mb_s"] else "MISSED")
    ]
    lat = r["latency"]
    grep = max(s["p50_ms"] for s in lat["grep_files"].values())
    out.append(f"grep_files worst p50 {grep} ms vs <= 50: " + ("met" if grep <= 50 else "MISSED"))
    if "skipped" not in lat["semantic_search_files"]:
        sem = max(s["p50_ms"] for s in lat["semantic_search_files"].values())
        out.append(f"semantic_search_files worst p50 {sem} ms vs <= 50: " + ("met" if sem <= 50 else "MISSED"))
    rs = r["resync"]["embedded"]["p50_ms"] / 1000
    out.append(f"re-sync {rs:.3f} s vs <= 1: " + ("met" if rs <= 1 else "MISSED"))
    if "skipped" not in r["hit_at_5"]:
        out.append(
            f"hit@5 sentence {r['hit_at_5']['sentence']['hit_at_5']}, phrase {r['hit_at_5']['phrase5']['hit_at_5']}"
        )
    return out


if __name__ == "__main__":
    main()
