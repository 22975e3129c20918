"""Run the tiermem CLI in a process where the heavy libraries cannot be imported at all.

    python without_heavy.py lancedb,pyarrow,... serve --data-dir DIR

Whatever the server answers in such a process, it answered without those libraries. Each refused
import is reported on stderr with the name of the thread that asked for it, so a test can tell the
background opener (thread ``tiermem-open``) from the code that answers requests.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

BLOCKED = frozenset(sys.argv[1].split(","))


class Refuse:
    """A meta path finder that refuses the blocked top-level packages and reports who asked."""

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name.split(".")[0] in BLOCKED:
            line = f"refused import of {name} in thread {threading.current_thread().name}\n"
            sys.stderr.flush()
            os.write(2, line.encode())  # one write: a log line from another thread cannot land inside it
            raise ImportError(f"{name} is refused by tests/harness/without_heavy.py")
        return None


already = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
if already:
    raise SystemExit(f"already imported before the harness ran: {already}")
sys.meta_path.insert(0, Refuse())

from tiermem.cli.main import main  # noqa: E402

sys.exit(main(sys.argv[2:]))
