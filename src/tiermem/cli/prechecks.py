"""What a command can check about its own arguments before the data directory is opened: a missing file to import,
a sync directory that cannot be made, an export into a directory that does not exist, a data directory holding no
memory for a command that only reads, changes or deletes (a mistyped ``--data-dir``). Bad input then fails at once,
and the data directory (or a model cache) is never created for a command that was going to fail."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ..base.errors import ValidationError

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from ..base.config import Settings


# What may make a new data directory (a command with any action, or with this one): the commands that store
# something new, and those that make the agent `default` on first use (its blocks, its settings: the README's tour
# starts with `tiermem blocks show --core`; `tiermem chat` stores the conversation, and is how a terminal user with
# an API key starts). Every other command only reads, changes or deletes what is there: it refuses a data directory
# that holds no memory (`tiermem ui` too: an inspector of the memory there).
CREATING = frozenset(
    {
        ("import", None),
        ("remember", None),
        ("sync", None),
        ("blocks", None),
        ("chat", None),
        ("agents", "create"),
        ("agents", "show"),
        ("agents", "set"),
        ("folders", "create"),
        ("folders", "upload"),
        ("folders", "sync"),
    }
)


# The arguments that take '-' for stdin: (command, action) -> the argument's name, and as `--help` shows it
FROM_STDIN = {
    ("blocks", "set"): ("value", "VALUE"),
    ("agents", "set"): ("system", "--system"),
    ("remember", None): ("text", "TEXT"),
}


def read_stdin(shown: str) -> str:
    """stdin as the value of an argument given as '-': UTF-8 text (a byte order mark first is dropped), without one
    trailing newline ("\n" or "\r\n": the one `echo` and an editor's last line add). Bytes that are not UTF-8 are
    refused, never stored as replacement characters; a closed stdin (`<&-`) is refused."""
    if sys.stdin is None:
        raise ValidationError(
            f"{shown} is given as '-' but stdin is closed: nothing was stored. Pipe the text in (`echo TEXT | "
            "tiermem ...`) or give it as the argument."
        )
    data = sys.stdin.buffer.read()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValidationError(
            f"stdin ({shown} given as '-') is not UTF-8 text: the byte 0x{data[exc.start]:02x} at byte offset "
            f"{exc.start} is not valid UTF-8 ({exc.reason}). Nothing was stored: send the text as UTF-8 (from "
            "Latin-1, for example: `iconv -f latin1 -t utf-8 FILE | tiermem ...`)."
        ) from None
    return text.removesuffix("\n").removesuffix("\r") if text.endswith("\n") else text


def creates(args: argparse.Namespace) -> bool:
    """Whether the command may make a new data directory (``CREATING``)."""
    return (args.command, None) in CREATING or (args.command, getattr(args, "action", None)) in CREATING


def check_arguments(args: argparse.Namespace, settings: Settings | None = None) -> None:
    """Raise ``ValidationError`` for arguments that cannot work, before anything is opened (and ``StoreError`` for a
    data directory of ``settings`` holding no memory when the command makes none); make a new sync directory (its
    parent exists) and say so. An argument given as '-' is read from stdin here (``FROM_STDIN``), so a value that is
    not UTF-8 is refused before anything is opened, and the handler gets the text."""
    option, shown = FROM_STDIN.get((args.command, getattr(args, "action", None)), ("", ""))
    if option and getattr(args, option) == "-":
        setattr(args, option, read_stdin(shown))
    if args.command == "import" and not args.path.exists():
        raise ValidationError(
            f"{args.path} does not exist; give the agent file, backup, memory.jsonl or directory to import "
            "(`tiermem import --help` lists the formats). Nothing was opened or changed."
        )
    if args.command == "export" and args.format != "memfs":
        from ..interop.commands import output_file

        output_file(args.output)
    if args.command == "timeline":
        from .timeline import check

        check(args)
    if args.command == "sync":
        from ..interop.memfs import make_root

        existed = args.path.is_dir()
        make_root(args.path)
        if not existed:
            print(f"tiermem: created the directory {args.path} (a new MemFS directory)", file=sys.stderr)
    if settings is None:  # last: a bad argument is named first, whatever the directory
        return
    if not creates(args):
        from ..domain.factory import require_memory

        require_memory(settings)
    else:
        refuse_what_a_new_directory_lacks(args, settings)


def refuse_what_a_new_directory_lacks(args: argparse.Namespace, settings: Settings) -> None:
    """A command that may make a new data directory, but works on an agent (or a folder) it does not create: on a
    data directory holding no memory yet, that agent (other than the built-in ``default``, made on first use) or
    folder cannot exist, so the command is refused now, as it would be once opened, and nothing is created
    (``tiermem blocks list --agent wrok --data-dir NEW`` made NEW with an empty store, then said "No agent named").
    The agents it names are ``--agent``'s (or ``agents show/set NAME``) and ``blocks attach --from``'s, the one option
    naming a second agent (``export``'s agents are read from a directory that must hold memory already)."""
    from ..base.errors import NotFoundError
    from ..domain.factory import holds_memory
    from ..domain.memory import DEFAULT_AGENT

    action = getattr(args, "action", None)
    named: list[str] = []  # the agents the command works on: each must exist already
    if args.command == "agents" and action in ("show", "set"):
        named.append(args.name)
    elif args.command in ("blocks", "remember", "chat"):
        named.append(settings.agent)
    if args.command == "blocks" and action == "attach":  # the agent that has the block (`--from`)
        named.append(args.source)
    agent = next((x for x in named if x != DEFAULT_AGENT), None)
    upload = args.command == "folders" and action == "upload"
    if (agent is None and not upload) or holds_memory(settings):
        return
    empty = (
        f"the data directory {settings.resolved_data_dir()} holds no memory yet, and nothing was created (check "
        "--data-dir or TIERMEM_DATA_DIR if it should)"
    )
    if upload:
        raise NotFoundError(
            f"No folder named {args.name!r}: {empty}. Create one with `tiermem folders create {args.name}`, or "
            f"sync a directory into a new one with `tiermem folders sync {args.name} DIR`."
        )
    raise NotFoundError(f"No agent named {agent!r}: {empty}. Create it with `tiermem agents create {agent}`.")


def configured_model(
    args: argparse.Namespace, load: Callable[[argparse.Namespace], Settings]
) -> tuple[str, str] | None:
    """``tiermem reembed --embedding-model M``: the model the configuration names without the flag, and where
    (the environment or the config file); None when the flag is not given or nothing else names a model."""
    import argparse
    import os

    if getattr(args, "embedding_model", None) is None:
        return None
    unflagged = load(argparse.Namespace(**{**vars(args), "embedding_model": None}))
    if unflagged.embedding_model is None:
        return None
    where = (
        "The environment variable TIERMEM_EMBEDDING_MODEL"
        if os.environ.get("TIERMEM_EMBEDDING_MODEL")
        else f"The config file {unflagged.config}"
    )
    return unflagged.embedding_model, where
