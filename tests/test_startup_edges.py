"""Rough edges a new user meets in the first minutes, each as the user meets it (the real CLI, in process; the server
and a first model load in real processes).

A sync target whose parent is missing is refused (never created silently); ``reembed`` records the model it
switched to, so the next command uses it; a server over an unusable data directory exits at once with the reason
instead of answering the handshake and failing every call; an import of a missing file fails before anything is
opened or created, and the model's one-time cache step says nothing at INFO; a MemFS export writes only
frontmatter keys Letta Code's hook accepts, and tiermem still reads back which blocks are pinned.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from .cli_inproc import run_cli
from .conftest import PYTHON, ROOT
from .test_transports import server_env

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
GRAPH = {"type": "entity", "name": "Launch", "entityType": "event", "observations": ["The launch is on 3 March"]}


def run(
    tmp_path: Path,
    *args: str,
    data: Path | None = None,
    stdin: str | None = None,
    model: str | None = "hashing",
    process: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``tiermem ARGS --data-dir DATA`` with the fast model (``model=None``: no model configured at all): in this
    process (``run_cli``) unless ``process`` asks for a real ``python -m tiermem`` (a server over stdio, which
    claims fd 0, and what a fresh interpreter prints)."""
    env = server_env(tmp_path)
    if model is None:
        env.pop("TIERMEM_EMBEDDING_MODEL")
    else:
        env["TIERMEM_EMBEDDING_MODEL"] = model
    full = [*args, "--data-dir", str(data or tmp_path / "data")]
    if not process:
        return run_cli(*full, env=env, stdin=stdin)
    return subprocess.run(
        [PYTHON, "-m", "tiermem", *full],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
        check=False,
    )


def tree(path: Path) -> list[str]:
    return sorted(p.relative_to(path).as_posix() for p in path.rglob("*")) if path.exists() else []


# -- 1. sync never creates a missing parent ----------------------------------------------------------------------


def test_sync_refuses_a_directory_whose_parent_is_missing(tmp_path: Path) -> None:
    target = tmp_path / "nope" / "deeper" / "memory"
    done = run(tmp_path, "sync", str(target))
    assert done.returncode == 1, done.stderr
    assert f"{target.parent} does not exist" in done.stderr and "mkdir -p" in done.stderr, done.stderr
    assert not (tmp_path / "nope").exists() and not (tmp_path / "data").exists()  # nothing made, not even data
    watched = run(tmp_path, "sync", str(target), "--watch", "0.1")
    assert watched.returncode == 1 and "does not exist" in watched.stderr and not (tmp_path / "nope").exists()
    # its last component is made when the parent exists (a new MemFS directory), and the report says so
    fresh = tmp_path / "memory"
    made = run(tmp_path, "sync", str(fresh))
    assert made.returncode == 0, made.stderr
    assert fresh.is_dir() and f"created the directory {fresh}" in made.stderr
    assert "parent" in run(tmp_path, "sync", "--help").stdout
    exported = run(tmp_path, "export", "default", "--format", "memfs", "-o", str(target))  # an export: the same rule
    assert exported.returncode == 1 and "does not exist" in exported.stderr and not (tmp_path / "nope").exists()


# -- 2. reembed records the model --------------------------------------------------------------------------------


def test_reembed_records_the_model_so_later_commands_use_it(tmp_path: Path) -> None:
    graph = tmp_path / "graph.jsonl"
    graph.write_text(json.dumps(GRAPH) + "\n")
    assert run(tmp_path, "import", str(graph), model=None).returncode == 0  # the bundled default model
    switched = run(tmp_path, "reembed", "--embedding-model", "hashing", model=None)
    assert switched.returncode == 0, switched.stderr
    assert "re-embedded 1 rows with hashing-384" in switched.stderr
    found = run(tmp_path, "search", "launch", "--archival", model=None)  # no model configured: the store's own
    assert found.returncode == 0 and "3 March" in found.stdout, found.stderr
    doctor = run(tmp_path, "doctor", model=None)
    assert doctor.returncode == 0 and "embedding model hashing-384" in doctor.stdout, doctor.stdout + doctor.stderr
    # a model the configuration names explicitly still wins, and the mismatch says which setting to change
    named = run(tmp_path, "search", "launch", "--archival", model="default")
    assert named.returncode == 1 and "TIERMEM_EMBEDDING_MODEL" in named.stderr and "hashing-384" in named.stderr


def test_reembed_refuses_a_model_the_configuration_contradicts(tmp_path: Path) -> None:
    assert run(tmp_path, "agents", "create", "work").returncode == 0  # a store on hashing-384
    refused = run(tmp_path, "reembed", "--embedding-model", "default")  # TIERMEM_EMBEDDING_MODEL=hashing is set
    assert refused.returncode == 1
    assert "TIERMEM_EMBEDDING_MODEL" in refused.stderr and "'hashing'" in refused.stderr, refused.stderr
    config = tmp_path / "cfg" / "tiermem" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('embedding_model = "hashing"\n')
    in_file = run(tmp_path, "reembed", "--embedding-model", "default", model=None)
    assert in_file.returncode == 1 and str(config) in in_file.stderr, in_file.stderr
    doctor = run(tmp_path, "doctor")  # nothing was re-embedded
    assert doctor.returncode == 0 and "embedding model hashing-384" in doctor.stdout


# -- 3. serve over an unusable data directory --------------------------------------------------------------------


def serve(tmp_path: Path, data: Path) -> subprocess.CompletedProcess[str]:
    lines = [INIT, {"jsonrpc": "2.0", "method": "notifications/initialized"}]
    return run(tmp_path, "serve", data=data, stdin="".join(json.dumps(m) + "\n" for m in lines), process=True)


def test_serve_exits_with_the_reason_when_the_data_directory_is_unusable(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    under_a_file = a_file / "data"
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "core.sqlite3").write_text("this is not an SQLite database, it is text" * 100)
    for data, why in (
        (a_file, "is a file"),
        (under_a_file, "Cannot create the data directory"),
        (damaged, "core.sqlite3"),
    ):
        done = serve(tmp_path, data)
        assert done.returncode == 1, (data, done.stdout, done.stderr)
        assert done.stdout == "", done.stdout  # nothing answered: the host shows the server as failed
        assert why in done.stderr and "--data-dir" in done.stderr, done.stderr
    assert a_file.read_text() == "not a directory" and sorted(os.listdir(damaged)) == ["core.sqlite3"]


def read_only(path: Path) -> bool:
    """Make ``path`` read-only: for root (whom permissions do not stop) a read-only bind mount of it over itself,
    else its mode. False when that cannot be done here."""
    if os.geteuid() != 0:
        path.chmod(0o500)
        return True
    if subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True).returncode:
        return False
    if subprocess.run(["mount", "-o", "remount,ro,bind", str(path)], capture_output=True).returncode:
        writable(path)
        return False
    return True


def writable(path: Path) -> None:
    if os.geteuid() != 0:
        path.chmod(0o700)
    else:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def test_serve_refuses_a_read_only_directory_without_memory_and_serves_one_with(tmp_path: Path) -> None:
    empty, kept = tmp_path / "empty", tmp_path / "kept"
    empty.mkdir()
    assert run(tmp_path, "agents", "create", "default", data=kept).returncode == 0
    made: list[Path] = []
    try:
        for path in (empty, kept):
            if not read_only(path):
                pytest.skip("cannot make a directory read-only here (needs root to mount, or a user)")
            made.append(path)
        refused, served = serve(tmp_path, empty), serve(tmp_path, kept)
    finally:
        for path in made:
            writable(path)
    assert refused.returncode == 1 and refused.stdout == "" and "is not writable" in refused.stderr, refused.stderr
    # a memory on a read-only disk is still read (edits are refused, each with the reason)
    assert served.returncode == 0 and "serverInfo" in served.stdout, served.stderr
    assert "not writable: edits will be refused" in served.stderr


def test_serve_over_a_new_data_directory_still_answers(tmp_path: Path) -> None:
    done = serve(tmp_path, tmp_path / "new" / "data")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0])["result"]["serverInfo"]["name"] == "tiermem"


# -- 4. import: fail fast, no model chatter ------------------------------------------------------------------------


def test_import_of_a_missing_file_fails_before_anything_is_opened(tmp_path: Path) -> None:
    done = run(tmp_path, "import", str(tmp_path / "missing.jsonl"), model=None)
    assert done.returncode == 1
    assert f"{tmp_path / 'missing.jsonl'} does not exist" in done.stderr, done.stderr
    assert not (tmp_path / "data").exists()  # no data directory, no model cache


def test_the_first_model_load_says_nothing_at_info(tmp_path: Path) -> None:
    graph = tmp_path / "graph.jsonl"
    graph.write_text(json.dumps(GRAPH) + "\n")
    done = run(tmp_path, "import", str(graph), model=None, process=True)  # the bundled model, a new data directory
    assert done.returncode == 0, done.stderr
    assert "model.onnx" not in done.stderr and " INFO tiermem.embedding" not in done.stderr, done.stderr


def test_a_memfs_import_loads_no_model(tmp_path: Path) -> None:
    memfs = tmp_path / "memory" / "system"
    memfs.mkdir(parents=True)
    (memfs / "human.md").write_text("---\ndescription: The human\n---\nName: Ada\n")
    done = run(tmp_path, "import", str(tmp_path / "memory"), "--agent", "work", model=None)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "data" / "models").exists(), tree(tmp_path / "data" / "models")  # blocks need no vectors


# -- 5. a MemFS export Letta Code's hook accepts -------------------------------------------------------------------


def pinned_of(tmp_path: Path, agent: str) -> dict[str, bool]:
    listed = run(tmp_path, "blocks", "list", "--agent", agent, "--json")
    assert listed.returncode == 0, listed.stderr
    return {b["label"]: b["pinned"] for b in json.loads(listed.stdout)}


def test_a_memfs_export_has_only_frontmatter_letta_code_accepts_and_keeps_pinned(tmp_path: Path) -> None:
    from tiermem.domain import memfs_format as fmt

    assert run(tmp_path, "agents", "create", "fresh").returncode == 0
    for label, description, shown in (
        ("reference/team", "The team", "--pinned"),
        ("system/scratch", "Scratch", "--detached"),
    ):
        assert (
            run(
                tmp_path,
                "blocks",
                "create",
                label,
                "--value",
                "Ada leads",
                "--description",
                description,
                "--agent",
                "fresh",
            ).returncode
            == 0
        )
        assert run(tmp_path, "blocks", "set", label, shown, "--agent", "fresh").returncode == 0
    want = {"persona": True, "human": True, "reference/team": True, "system/scratch": False}
    assert pinned_of(tmp_path, "fresh") == want
    out = tmp_path / "memory"
    done = run(tmp_path, "export", "fresh", "--format", "memfs", "-o", str(out))
    assert done.returncode == 0, done.stderr
    files = {p.relative_to(out).as_posix(): p.read_text() for p in out.rglob("*.md")}
    assert sorted(files) == ["human.md", "persona.md", "reference/team.md", "system/scratch.md"]
    for rel, text in files.items():  # every file as Letta Code's hook checks system/ and reference/ (all, when shared)
        assert fmt.hook_problems(rel, text, None, "v1") == [], (rel, text)
    # tiermem reads back which blocks are pinned: an import into another agent, and two-way sync
    assert run(tmp_path, "import", str(out), "--agent", "copy").returncode == 0
    assert pinned_of(tmp_path, "copy") == want
    first = run(tmp_path, "sync", str(out), "--agent", "fresh")
    assert first.returncode == 0 and "conflicts" not in first.stdout and "to_files" not in first.stdout, first.stdout
    assert pinned_of(tmp_path, "fresh") == want
    (out / "reference" / "team.md").write_text(files["reference/team.md"].replace("Ada leads", "Ada and Sam lead"))
    edited = run(tmp_path, "sync", str(out))
    assert edited.returncode == 0 and "to_store: reference/team" in edited.stdout, edited.stdout + edited.stderr
    assert pinned_of(tmp_path, "fresh") == want
    assert "pinned" not in (out / "reference" / "team.md").read_text()
