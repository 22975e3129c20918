"""The command-line parser with a suggestion for a mistyped command or action: ``tiermem serch`` is refused, as
before, with "did you mean 'search'?" (argparse before Python 3.14 has no ``suggest_on_error``); and ``path``, the
type of every path argument, which refuses an empty one."""

from __future__ import annotations

import argparse
import difflib
import re
from pathlib import Path
from typing import NoReturn

_INVALID = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)$")


def did_you_mean(message: str) -> str:
    """``message`` with the closest choice added, when it is argparse's "invalid choice" and one is close."""
    match = _INVALID.search(message)
    if match is None:
        return message
    choices = re.findall(r"'([^']*)'", match.group(2))
    close = difflib.get_close_matches(match.group(1), choices, n=1)
    return f"{message}; did you mean {close[0]!r}?" if close else message


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose usage errors suggest the closest command or action (its subparsers are
    of this class too: argparse makes them of the parent's)."""

    def error(self, message: str) -> NoReturn:
        super().error(did_you_mean(message))


def path(text: str) -> Path:
    """A path argument; an empty one (``--data-dir ""``, ``--data-dir "$UNSET"``) is a usage error naming the flag,
    not the current directory (``Path("")`` is ``.``)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; give a path, or leave the option out for its default")
    return Path(text)
