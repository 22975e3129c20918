"""What the CLI prints for a person: ``echo``, every line of its human-readable output that may hold stored text (a
turn, a passage, a block's value, a name, a link's note, a file name), passed through ``quoting.printable``: each
control character but tab and line feed, and each bidirectional control, is shown as its escape (``\\x1b``,
``\\u202e``), so text logged from anywhere (a hook turn, an import, a model's write) cannot move the cursor, clear the
screen, retitle the terminal or reorder what follows it. ``--json`` output does not pass through here: it stays exact
(JSON escapes the C0 controls itself).
"""

from __future__ import annotations

from ..base.quoting import printable


def echo(text: object = "", *, flush: bool = False) -> None:
    """Print ``text`` to stdout, ``printable``."""
    print(printable(str(text)), flush=flush)
