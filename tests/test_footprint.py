"""Memory that must not grow: bounded LanceDB caches and bounded per-conversation state.

The growth under HTTP load came from LanceDB's metadata cache, which kept a manifest per table version
(a version per write) with a default bound of GiBs. The regression test writes in a fresh process, as a
long-running server does, and compares resident memory after a warm-up of 100 writes with resident memory after
300 more: with caches bounded only at GiBs (as LanceDB's defaults) it rose about 100 MB over these writes, now about
10 MB.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from tiermem.base.config import Settings
from tiermem.domain.archive import Archive
from tiermem.domain.memory import Memory
from tiermem.embedding.embedders import BackgroundEmbedder, HashingEmbedder

from .conftest import PYTHON

WRITER = textwrap.dedent(
    """
    import gc, json, sys
    from tiermem.base.config import load_settings
    from tiermem.domain.factory import open_memory

    def rss_mb():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS"))

    memory = open_memory(load_settings(data_dir=sys.argv[1], embedding_model="hashing", optimize_every=0))
    agent = memory.ensure_agent("default").id
    marks = []
    for i in range(400):
        memory.archive.log_messages(agent, [{"role": "user", "content": f"message {i} about the garden"}])
        if i % 4 == 0:
            memory.archive.conversation_search(agent, f"garden {i}")
        if i + 1 in (100, 400):
            gc.collect()
            marks.append(rss_mb())
    print(json.dumps(marks))
    """
)


def test_resident_memory_levels_off_under_writes(tmp_path: Path) -> None:
    # optimize_every=0: no compaction, so every write adds a fragment and a table version (the worst case)
    out = subprocess.run([PYTHON, "-c", WRITER, str(tmp_path / "data")], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    warm, after = json.loads(out.stdout.strip().splitlines()[-1])
    # LanceDB's default caches: +100 MB or more between the marks; bounded caches: the 32 MiB metadata cap at most.
    # Each write costs more than the last (a version and a fragment more to read): 300 writes after 100 are enough.
    assert after - warm < 50, f"RSS grew {after - warm} MB over 300 writes (from {warm} MB)"


def _archive(memory: Memory) -> Archive:
    embedder = BackgroundEmbedder(HashingEmbedder, "hashing-384", 384, 256)
    embedder.start()
    assert embedder.wait(30)
    return Archive(memory.archive.store, embedder)


def _text_of(memory: Memory, message_id: str) -> str:
    return next(r["text"] for r in memory.archive.store.rows.all_rows("messages") if r["id"] == message_id)


def test_latest_turns_are_bounded_and_evicted_turns_come_back_from_the_store(
    settings: Settings, memory: Memory
) -> None:
    archive = _archive(memory)
    archive.max_last_turns = 3
    agent = memory.ensure_agent("default").id
    for n in range(5):
        archive.log_messages(
            agent, [{"role": "user", "content": f"first words of conversation {n}", "conversation_id": f"c{n}"}]
        )
    assert len(archive._last_turn) == 3  # c2, c3, c4: the least recently written are forgotten
    # c0 was forgotten: its next turn still carries the turn before it, read back from the store
    (reply,) = archive.log_messages(agent, [{"role": "assistant", "content": "a reply", "conversation_id": "c0"}])
    assert _text_of(memory, reply.id).endswith("a reply first words of conversation 0")
    assert list(archive._last_turn)[-1] == (agent, "c0")


def test_a_failed_write_leaves_no_turn_behind(settings: Settings, memory: Memory) -> None:
    archive = _archive(memory)
    agent = memory.ensure_agent("default").id
    archive.log_messages(agent, [{"role": "user", "content": "stored turn"}])
    bad = [{"role": "user", "content": "never stored"}, {"role": "nobody", "content": "x"}]
    try:
        archive.log_messages(agent, bad)
    except Exception as exc:  # the second message is refused: nothing of the batch is written
        assert "role" in str(exc)
    else:
        raise AssertionError("a message with an unknown role was accepted")
    (msg,) = archive.log_messages(agent, [{"role": "user", "content": "next turn"}])
    assert _text_of(memory, msg.id).endswith("next turn stored turn")


def test_serving_process_caps_malloc_arenas(tmp_path: Path) -> None:
    # mallopt(M_ARENA_MAX) is write-only in glibc; check the effect: with the cap, threads share arenas, so many
    # threads allocating at once create at most that many (counted from malloc_info's <heap> entries)
    probe = textwrap.dedent(
        """
        import ctypes, os, re, sys, threading, tempfile
        from tiermem.base.memtrim import limit_arenas, trim
        assert limit_arenas(int(sys.argv[1])) or sys.argv[1] == "0"
        keep = []
        gate = threading.Barrier(16)
        def work():
            gate.wait()  # all at once: contention is what makes glibc open another arena
            for _ in range(20):
                keep.append([bytearray(256) for _ in range(2000)])
        threads = [threading.Thread(target=work) for _ in range(16)]
        [t.start() for t in threads]; [t.join() for t in threads]
        libc = ctypes.CDLL("libc.so.6")
        libc.fdopen.restype = ctypes.c_void_p
        libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.fflush.argtypes = [ctypes.c_void_p]
        fd, path = tempfile.mkstemp()
        f = libc.fdopen(fd, b"w"); libc.malloc_info(0, f); libc.fflush(f)
        print(len(re.findall(r'<heap nr="', open(path).read())))
        trim()
        """
    )
    counts = {}
    for cap in ("2", "0"):
        out = subprocess.run([PYTHON, "-c", probe, cap], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        counts[cap] = int(out.stdout.split()[-1])
    assert counts["2"] <= 2 < counts["0"], counts  # e.g. {"2": 2, "0": 9} here


MMAP_PROBE = textwrap.dedent(
    """
    import ctypes, json, sys
    from tiermem.cli.serving import keep_heap
    from tiermem.base.config import load_settings

    keep_heap(load_settings(malloc_mmap_threshold_kb=int(sys.argv[1]), heap_trim_seconds=0))  # as `tiermem serve`
    libc = ctypes.CDLL("libc.so.6")
    class Info(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
    libc.mallinfo2.restype = Info
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    libc.free(libc.malloc(8 << 20))  # a large buffer come and gone (LanceDB's reads): glibc raises its threshold to 8 MiB
    before = libc.mallinfo2().hblkhd
    block = libc.malloc(1 << 20)  # then 1 MiB: its own mapping, or carved from the heap?
    mapped = libc.mallinfo2().hblkhd - before
    libc.free(block)
    print(json.dumps(mapped >> 10))
    """
)


def test_serving_process_maps_large_blocks_on_their_own_after_large_frees() -> None:
    # glibc's default threshold rises to the size of each freed mapped block, so later MiB-sized buffers come from
    # the heap and leave holes there; the serving commands fix it (malloc_mmap_threshold_kb), and a freed block
    # of 128 KiB or more goes back to the system
    mapped = {}
    for kb in ("128", "0"):
        out = subprocess.run([PYTHON, "-c", MMAP_PROBE, kb], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        mapped[kb] = int(out.stdout.split()[-1])
    assert mapped["128"] >= 1024 and mapped["0"] == 0, mapped  # KiB in mappings of their own after the 1 MiB malloc


def test_heap_keeper_trims_after_growth_and_leaves_a_steady_process_alone() -> None:
    # in a fresh process: 64 MB of small objects allocated and freed stay resident in glibc's heap until trimmed
    probe = textwrap.dedent(
        """
        import json, threading
        from tiermem.base.memtrim import HeapKeeper, _resident_bytes
        keeper = HeapKeeper(interval=3600, grow_bytes=16 << 20)  # checked by hand below, never by its thread
        assert keeper.start()
        steady = keeper.check()  # nothing grew since start
        junk = [bytearray(1000) for _ in range(64_000)]  # 64 MB in small chunks: the heap, not mmap
        junk.append(bytearray(1000))  # pins the top of the heap, so glibc's automatic trim cannot shrink it
        pin = junk.pop()
        del junk
        before = _resident_bytes()
        trimmed = keeper.check()
        after = _resident_bytes()
        again = keeper.check()  # nothing grew since that trim
        keeper.stop()
        print(json.dumps([steady, trimmed, again, keeper.trims, (before - after) >> 20,
                          any(t.name == "tiermem-heap-keeper" for t in threading.enumerate())]))
        """
    )
    out = subprocess.run([PYTHON, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    steady, trimmed, again, trims, released_mb, alive = json.loads(out.stdout.strip().splitlines()[-1])
    assert (steady, trimmed, again, trims, alive) == (False, True, False, 1, False)
    assert released_mb > 16, released_mb  # the freed 64 MB went back to the system (most of it)


def test_the_heap_controls_find_glibc_without_a_subprocess() -> None:
    """A server sets its heap controls before it answers ``initialize``: finding glibc must not run ``ldconfig``
    (``ctypes.util.find_library`` does, in a subprocess). Seen by the interpreter's audit events."""
    probe = textwrap.dedent(
        """
        import json, sys
        spawned = []
        sys.addaudithook(lambda event, args: spawned.append(event) if event in ("subprocess.Popen", "os.posix_spawn",
                                                                                 "os.fork", "os.exec") else None)
        from tiermem.base import memtrim
        print(json.dumps([memtrim._glibc() is not None, memtrim.limit_arenas(2), spawned]))
        """
    )
    out = subprocess.run([PYTHON, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    found, limited, spawned = json.loads(out.stdout.strip().splitlines()[-1])
    assert (found, limited, spawned) == (True, True, [])  # this machine runs glibc: the controls work


def test_heap_keeper_refuses_a_zero_interval() -> None:
    from tiermem.base.memtrim import HeapKeeper

    with pytest.raises(ValueError, match="interval must be > 0 seconds, got 0"):
        HeapKeeper(0)


def test_lancedb_is_imported_with_its_rest_models_built_on_first_use() -> None:
    """store/loading.py: LanceDB's unused REST-client models defer their validators (~8 MB); the rest is unchanged."""
    code = textwrap.dedent(
        """
        import json
        import tiermem.store
        from pydantic import BaseModel
        from pydantic._internal._config import config_defaults
        from lance_namespace_urllib3_client.models import CreateNamespaceRequest

        class Later(BaseModel):
            x: int

        deferred = CreateNamespaceRequest.__pydantic_complete__
        made = CreateNamespaceRequest(id=["a"]).id  # first use builds it
        print(json.dumps([deferred, made, CreateNamespaceRequest.__pydantic_complete__, config_defaults["defer_build"],
                          Later.__pydantic_complete__]))
        """
    )
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [False, ["a"], True, False, True]


def test_lancedb_is_imported_without_its_rest_client_api_modules() -> None:
    """store/loading.py: the REST client's package ``__init__`` (its nine API modules, urllib3) runs only when a
    name defined there is first read; its models import as before, and so does every name it defines."""
    code = textwrap.dedent(
        """
        import json, sys, threading
        import tiermem.store
        from tiermem.store.loading import import_lancedb
        lancedb = import_lancedb()
        def loaded():
            return sorted(m for m in sys.modules if m.startswith("lance_namespace_urllib3_client.api"))
        before = loaded()
        from lance_namespace_urllib3_client.models import CreateNamespaceRequest
        import lance_namespace_urllib3_client as client
        try:
            client.no_such_name
            missing = "no error"
        except AttributeError as exc:
            missing = str(exc)
        got = []  # two threads reading at once: both see the finished package
        threads = [threading.Thread(target=lambda: got.append(client.ApiClient.__name__)) for _ in range(2)]
        [t.start() for t in threads]; [t.join() for t in threads]
        from lance_namespace_urllib3_client import Configuration, TableApi
        print(json.dumps([before, CreateNamespaceRequest.__name__, missing, got, TableApi.__name__,
                          "lance_namespace_urllib3_client.api.table_api" in loaded(), client.__version__ != "",
                          type(lancedb.connect).__name__]))
        """
    )
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, check=False, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    before, model, missing, got, api, api_loaded, version, connect = json.loads(out.stdout.strip().splitlines()[-1])
    assert before == []  # nothing of the API side imported with LanceDB
    assert model == "CreateNamespaceRequest"
    # the first read of a name runs the __init__; a name it does not define is still an AttributeError
    assert missing == "module 'lance_namespace_urllib3_client' has no attribute 'no_such_name'"
    assert got == ["ApiClient", "ApiClient"] and api == "TableApi" and api_loaded and version
    assert connect == "function"


def test_deferred_package_init_leaves_an_imported_or_missing_package_alone() -> None:
    from tiermem.store.loading import defer_package_init

    assert defer_package_init("json") is False  # already imported
    assert defer_package_init("tiermem_no_such_package") is False
    code = "from tiermem.store.loading import defer_package_init as d; import sys; print(d('colorsys'), 'colorsys' in sys.modules)"
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, check=False, timeout=60)
    assert out.stdout.split() == ["False", "False"]  # a plain module (not a package) is imported as usual, later


ARROW_POOL = textwrap.dedent(
    """
    import os, sys
    from tiermem.cli.serving import keep_heap
    from tiermem.base.config import load_settings
    if sys.argv[1]:
        os.environ["ARROW_DEFAULT_MEMORY_POOL"] = sys.argv[1]
    else:
        os.environ.pop("ARROW_DEFAULT_MEMORY_POOL", None)
    keep_heap(load_settings(heap_trim_seconds=0))  # as `tiermem serve`, before anything imports pyarrow
    import pyarrow
    print(pyarrow.default_memory_pool().backend_name)
    """
)


def test_serving_process_allocates_arrow_buffers_from_the_system_heap() -> None:
    # pyarrow's default is its bundled jemalloc, a second heap the glibc settings above do not reach; Arrow's own
    # variable, when a user sets it, still decides
    pools = {}
    for chosen in ("", "jemalloc"):
        out = subprocess.run(
            [PYTHON, "-c", ARROW_POOL, chosen], capture_output=True, text=True, check=False, timeout=120
        )
        assert out.returncode == 0, out.stderr[-2000:]
        pools[chosen] = out.stdout.split()[-1]
    assert pools == {"": "system", "jemalloc": "jemalloc"}
