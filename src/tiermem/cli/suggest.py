"""The command-line parser with a suggestion for a mistyped command, action or option: ``tiermem serch`` is refused,
as before, with "did you mean 'search'?", ``tiermem blocks list --jsn`` with "did you mean '--json'?" (argparse
before Python 3.14 has no ``suggest_on_error``, and none suggests options). A mistyped option before the command
(``tiermem --data-dri x blocks list``) is named as such, not as a bad command ``x``; so is a ``TIERMEM_*`` environment
variable that is no setting (``unknown_variables``). ``path``, the type of every path argument, refuses an empty one."""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

_INVALID = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)$")
_UNRECOGNIZED = "unrecognized arguments: "


def did_you_mean(message: str) -> str:
    """``message`` with the closest choice added, when it is argparse's "invalid choice" and one is close."""
    match = _INVALID.search(message)
    if match is None:
        return message
    choices = re.findall(r"'([^']*)'", match.group(2))
    close = difflib.get_close_matches(match.group(1), choices, n=1)
    return f"{message}; did you mean {close[0]!r}?" if close else message


def _close_option(parser: argparse.ArgumentParser, word: str) -> str | None:
    """The option of ``parser`` closest to ``word`` (``--jsn``, ``--limt=3``), if one is close."""
    flags = [f for f in parser._option_string_actions if f.startswith("--")]
    close = difflib.get_close_matches(word.split("=", 1)[0], flags, n=1)
    return close[0] if close else None


def _unknown_option(parser: argparse.ArgumentParser, word: str) -> bool:
    """Whether ``word`` looks like an option and is none of ``parser``'s (nor the start of one: argparse takes
    ``--data`` for ``--data-dir``)."""
    if not word.startswith("-") or word == "-" or word.lstrip("-").replace(".", "").isdigit():
        return False
    name = word.split("=", 1)[0]
    return not any(f.startswith(name) for f in parser._option_string_actions)


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose usage errors suggest the closest command, action or option (its
    subparsers are of this class too: argparse makes them of the parent's)."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._words = list(sys.argv[1:] if args is None else args)  # for ``error``
        return super().parse_known_args(args, namespace)

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:  # refused by the command's own parser: its usage line, and the closest of its options
            chosen = _chosen(self, parsed)
            misplaced = [w for w in extras if w.split("=", 1)[0] in chosen._option_string_actions]
            if misplaced:  # `tiermem --json blocks list`: an option of the command, given before it
                chosen.error(
                    f"{_UNRECOGNIZED}{' '.join(extras)}; {', '.join(map(repr, misplaced))} is an option of "
                    f"`{chosen.prog}`: give it after the command"
                )
            close = {w: c for w in extras if (c := _close_option(chosen, w)) is not None}
            said = ", ".join(f"{c!r}" + (f" for {w!r}" if len(close) > 1 else "") for w, c in close.items())
            chosen.error(_UNRECOGNIZED + " ".join(extras) + (f"; did you mean {said}?" if said else ""))
        return parsed

    def error(self, message: str) -> NoReturn:
        match = _INVALID.search(message)
        if match is not None:  # `--data-dri x blocks`: the unknown option made its value look like the command
            words: list[str] = getattr(self, "_words", [])
            at = words.index(match.group(1)) if match.group(1) in words else -1
            if at > 0 and _unknown_option(self, words[at - 1]):
                option = words[at - 1]
                close = _close_option(self, option)
                super().error(
                    f"unrecognized option {option!r}"
                    + (f" (did you mean {close!r}?)" if close else "")
                    + f"; the {match.group(1)!r} after it was read as {message.split(':', 1)[0].removeprefix('argument ')}"
                )
        super().error(did_you_mean(message))


def path(text: str) -> Path:
    """A path argument; an empty one (``--data-dir ""``, ``--data-dir "$UNSET"``) is a usage error naming the flag,
    not the current directory (``Path("")`` is ``.``)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; give a path, or leave the option out for its default")
    return Path(text)


def _chosen(parser: argparse.ArgumentParser, parsed: Any) -> argparse.ArgumentParser:
    """The parser of the command (and action) ``parsed`` chose: ``tiermem blocks list``'s for its options."""
    while True:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        name = getattr(parsed, sub.dest, None) if sub is not None else None
        if sub is None or name not in sub.choices:
            return parser
        parser = sub.choices[name]


# TIERMEM_* variables that are no setting but are read elsewhere: the benchmarks' and the test tools' (bench/, tests/)
NOT_SETTINGS = frozenset(
    {
        "TIERMEM_TRACE",
        "TIERMEM_TRACE_SECONDS",
        "TIERMEM_TRACE_MALLOC",
        "TIERMEM_LOCOMO_DEV",
        "TIERMEM_HOSTS_DIR",
        "TIERMEM_OAUTH_DIR",
        "TIERMEM_NET_LOG",
    }
)


def unknown_variables(environ: Mapping[str, str], settings: Iterable[str]) -> list[str]:
    """A warning for each ``TIERMEM_*`` variable of ``environ`` that names none of ``settings`` (a mistyped
    ``TIERMEM_TOOOLS`` is otherwise ignored without a word), with the closest variable that does, if one is close.
    Case as the settings read them: ``tiermem_tools`` is ``TIERMEM_TOOLS``."""
    known = [name.upper() for name in settings]
    out = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith("TIERMEM_") or upper[8:] in known or upper in NOT_SETTINGS:
            continue
        close = difflib.get_close_matches(upper[8:], known, n=1)  # (the common prefix would make any name close)
        out.append(
            f"{name} is not a tiermem setting, so it is ignored"
            + (f"; did you mean TIERMEM_{close[0]}?" if close else "")
        )
    return out
