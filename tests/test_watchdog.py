"""The suite's watchdog (tests/watchdog.py): a run whose worker hangs where pytest-timeout cannot end it ends, with
the test named, instead of waiting forever; a run that keeps reporting is left alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .conftest import ROOT

CONFTEST = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from tests import watchdog

def pytest_configure(config):
    watchdog.install(config)
"""

HANGS = """
import os, time

# the only test: the watchdog's start-up allowance lasts until it starts, its limit from then on (a test before it,
# on a loaded machine, could report more than the limit before this one starts and look like silence)
def test_stuck():
    with open(os.environ["PID_FILE"], "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)
"""


def run(project: Path, env_extra: dict[str, str], *options: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **env_extra}
    # no pytest-timeout: the stuck test stands for a worker that plugin cannot end (native code, a dead process);
    # a temporary directory of its own (pytest's default would clean up older runs', this run's among them)
    command = [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:timeout", "-p", "no:cacheprovider"]
    command += [f"--basetemp={project / 'tmp'}", *options]
    return subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=150)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def project(tmp_path: Path, tests: str) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "conftest.py").write_text(CONFTEST)
    (root / "test_one.py").write_text(tests)
    return root


def test_a_stuck_worker_ends_the_run_naming_its_test(tmp_path: Path) -> None:
    pid_file = tmp_path / "worker.pid"
    done = run(project(tmp_path, HANGS), {"TIERMEM_TEST_WATCHDOG": "4", "PID_FILE": str(pid_file)})
    assert done.returncode == 3, done.stdout + done.stderr
    assert "watchdog: no test report for 4 s" in done.stderr
    assert "test_one.py::test_stuck (started" in done.stderr
    assert not alive(int(pid_file.read_text())), "the stuck worker was left running"


def test_a_run_that_keeps_reporting_is_left_alone(tmp_path: Path) -> None:
    # 10 tests of 1 s on two workers: the run outlasts the 3 s limit, no silence does
    tests = "import time\n" + "".join(f"def test_{i}():\n    time.sleep(1)\n" for i in range(10))
    done = run(project(tmp_path, tests), {"TIERMEM_TEST_WATCHDOG": "3"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "10 passed" in done.stdout
    assert "watchdog" not in done.stderr


def test_a_worker_slow_to_start_is_waited_for(tmp_path: Path) -> None:
    """xdist starts the tests once every worker has collected them: until then (a second worker started late on a
    loaded machine) the watchdog allows its start-up time, not the limit between reports."""
    root = project(tmp_path, "def test_x():\n    pass\n")
    slow = "\nimport os, time\n\ndef pytest_collection_finish(session):\n"
    slow += "    if os.environ.get('PYTEST_XDIST_WORKER') == 'gw1':\n        time.sleep(6)\n"
    (root / "conftest.py").write_text(CONFTEST + slow)
    done = run(root, {"TIERMEM_TEST_WATCHDOG": "2"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "watchdog" not in done.stderr


def test_a_limit_that_is_no_number_is_refused(tmp_path: Path) -> None:
    done = run(project(tmp_path, "def test_x():\n    pass\n"), {"TIERMEM_TEST_WATCHDOG": "ten"})
    assert done.returncode != 0
    assert "TIERMEM_TEST_WATCHDOG must be seconds (a number), not 'ten'" in done.stderr


def test_a_worker_killed_by_a_segmentation_fault_does_not_leave_the_run_waiting(tmp_path: Path) -> None:
    """What CI met: with ``--dist loadfile`` pytest-xdist (3.8) re-runs a crashed worker's test on its replacement,
    and after the third crash mostly waits forever with both workers idle (without the watchdog this run hangs: seen
    twice in two runs of 90 s)."""
    crashes = "import faulthandler, time\n\ndef test_a1():\n    time.sleep(1)\n\n"
    crashes += "def test_a2():\n    faulthandler._sigsegv()\n\ndef test_a3():\n    pass\n"
    root = project(tmp_path, crashes)
    for name in "bcd":
        (root / f"test_{name}.py").write_text(f"import time\n\ndef test_{name}1():\n    time.sleep(2)\n\n")
    done = run(root, {"TIERMEM_TEST_WATCHDOG": "5"}, "--dist", "loadfile")  # a hang ends in run's timeout: failed
    assert "node down: Not properly terminated" in done.stdout
    # mostly the watchdog ends it (3); in some orders of the workers' crashes xdist gives up by itself (1)
    assert done.returncode in (1, 3), done.stdout + done.stderr
    assert (done.returncode == 3) == ("watchdog: no test report for 5 s" in done.stderr)
