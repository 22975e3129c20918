"""``tiermem folders ...``: folders of files for agents (Letta's filesystem): create, list, show, rename, upload,
attach, detach, delete, sync [--watch]. The parser is built here (``add_folders_parser``, called by ``cli.main``), the
handlers run on the ``Memory`` the composition root opened."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..base.errors import ConflictError, ValidationError
from ..base.quoting import one_line, printable
from .commands import print_rows
from .suggest import path
from .terminal import echo

if TYPE_CHECKING:
    from ..base.config import Settings
    from ..domain.file_embedding import Embedded
    from ..domain.memory import Memory
    from ..interop.folder_sync import Progress, SyncReport

PROGRESS_SECONDS = (
    5.0  # a long upload says how far its embedding is at most this often (none before: a quick one is quiet)
)
FOLDER = "the folder's name or id (an id tells apart folders an older tiermem named alike)"
EXAMPLE = (
    "tiermem folders create docs --description 'Project documentation'\n"
    "  tiermem folders upload docs ./README.md ./docs     # directories walked, .gitignore honoured\n"
    "  tiermem folders attach docs --agent work           # the agent sees it in core memory\n"
    "  tiermem folders sync docs ./docs --watch           # keep the folder equal to the directory\n"
    "  tiermem folders show docs --json"
)


def add_folders_parser(sp: Any, common: Callable[..., None]) -> None:
    """``tiermem folders`` and its actions; ``common`` adds the shared options (--data-dir, --agent, ...)."""
    text = "Folders of files for agents (Letta's filesystem): upload files or directories, attach them to agents."
    folders = sp.add_parser(
        "folders",
        help=text,
        description=text,
        epilog=f"example:\n  {EXAMPLE}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    fsp = folders.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = fsp.add_parser("create", help="create an empty folder")
    common(create, agent=False)
    create.add_argument("name")
    create.add_argument("--description", default="", help="what the folder holds (shown to the agents)")
    create.add_argument("--instructions", default="", help="how agents should use it (shown to them)")
    lst = fsp.add_parser("list", help="every folder: its files, description and the agents it is attached to")
    common(lst, agent=False)
    lst.add_argument("--json", action="store_true")
    show = fsp.add_parser("show", help="a folder's files: status, size, chunks, error")
    common(show, agent=False)
    show.add_argument("name", help=FOLDER)
    show.add_argument("--json", action="store_true")
    rename = fsp.add_parser(
        "rename",
        help="give a folder a new name (the agents it is attached to see its files under it at their next turn); "
        "refused when another folder has that name or that id",
    )
    common(rename, agent=False)
    rename.add_argument("name", help=FOLDER)
    rename.add_argument("new_name", metavar="NEW", help="the new name: a file name without '/', at most 100 characters")
    upload = fsp.add_parser(
        "upload",
        help="upload files and directories (walked: .gitignore honoured, binary and "
        "too large files skipped, links not followed out of the directory); a different file of a name the folder "
        "holds is kept beside it as NAME_(n).EXT, as Letta's upload",
    )
    common(upload, agent=False)
    upload.add_argument("name", help=FOLDER)
    upload.add_argument("paths", nargs="+", type=path, metavar="PATH")
    upload.add_argument(
        "--no-embed",
        dest="embed",
        action="store_false",
        help="store without vectors (found by keywords at once; a later tiermem embeds them)",
    )
    upload.add_argument("--json", action="store_true")
    attach = fsp.add_parser("attach", help="attach a folder to the agent (its files appear in core memory)")
    common(attach)
    attach.add_argument("name", help=FOLDER)
    attach.add_argument("--max-files-open", type=int, metavar="N", help="files the agent may hold open (1-100)")
    attach.add_argument("--char-limit", type=int, metavar="N", help="characters shown per open file (100-1,000,000)")
    detach = fsp.add_parser("detach", help="detach a folder from the agent")
    common(detach)
    detach.add_argument("name", help=FOLDER)
    delete = fsp.add_parser("delete", help="delete a folder with its files (asks for --yes when agents have it)")
    common(delete, agent=False)
    delete.add_argument("name", help=FOLDER)
    delete.add_argument("--yes", action="store_true", help="delete even when attached (it is detached first)")
    sync = fsp.add_parser(
        "sync",
        help="make the folder equal a directory (created when missing): new and changed "
        "files uploaded, files gone from disk deleted",
    )
    common(sync, agent=False)
    sync.add_argument("name", help="the folder's name (created when missing) or id")
    sync.add_argument("directory", type=path)
    sync.add_argument(
        "--watch",
        action="store_true",
        help="keep running: sync whenever the directory changes (a failed round, such as the directory removed, is "
        "said once and synced again once fixed; the folder deleted stops it, exit 1)",
    )
    sync.add_argument(
        "--interval",
        type=float,
        default=None,
        metavar="S",
        help="--watch: seconds between looks at the directory (default 0.5)",
    )
    sync.add_argument(
        "--no-embed",
        dest="embed",
        action="store_false",
        help="store without vectors (found by keywords at once; a later tiermem embeds them)",
    )
    sync.add_argument("--json", action="store_true")


def folders_command(memory: Memory, settings: Settings, args: argparse.Namespace) -> int:
    files = memory.files
    action = args.action
    if action == "create":
        folder = files.create_folder(args.name, description=args.description, instructions=args.instructions)
        echo(f"created folder {folder.name} ({folder.id})")
        return 0
    if action == "list":
        names = {a.id: a.name for a in memory.list_agents()}
        rows = [
            {
                "name": f.name,
                "files": len(files.rows.files([f.id])),  # by id: a name two folders share counts one
                "description": f.description,
                "agents": ", ".join(names.get(a, a) for a in files.agents_of(f.id)),
            }
            for f in files.folders()
        ]
        print_rows(rows if rows or args.json else "no folders (create one: tiermem folders create NAME)", args.json)
        return 0
    if action == "show":
        return _show(memory, args)
    if action == "rename":
        return _rename(memory, args)
    if action == "upload":
        from ..interop.folder_sync import upload_paths

        if args.embed:
            memory.archive.embedder.start()  # loads while the files are read
        with _embedding(memory, args):
            with _progress("uploading") as progress:
                report = upload_paths(
                    memory,
                    args.name,
                    args.paths,
                    embed=None if args.embed else False,
                    progress=progress,
                    embedded=_chunk_lines(args),
                )
            return _finish(memory, settings, args, report)
    if action in ("attach", "detach"):
        agent = memory.named_agent(settings.agent)
        if action == "detach":
            files.detach(agent.id, args.name)
            echo(f"detached folder {args.name} from agent {agent.name}")
            return 0
        made = files.attach_folder(agent.id, args.name, max_files_open=args.max_files_open, char_limit=args.char_limit)
        folder, opened, closed = made.folder, made.opened, made.closed
        max_open, chars = files.state(agent.id).limits
        echo(
            f"attached folder {folder.name} ({len(files.files(folder.id))} files) to agent {agent.name}: "
            f"up to {max_open} files open, {chars:,} characters shown per file"
            + (f"; opened the first {len(opened)} uploaded: {', '.join(opened)}" if opened else "")
        )
        if closed:
            echo(
                f"closed {len(closed)} least recently used file(s) of agent {agent.name} to keep within "
                f"{max_open} open: {', '.join(closed)}"
            )
        return 0
    if action == "delete":
        folder = files.folder(args.name)
        names = {a.id: a.name for a in memory.list_agents()}
        attached = [names.get(a, a) for a in files.agents_of(folder.id)]
        if attached and not args.yes:
            raise ConflictError(
                f"Folder {folder.name!r} is attached to agent(s) {', '.join(attached)}; nothing was deleted. Run "
                f"again with --yes to detach it and delete it with its files, or detach it first "
                f"(tiermem folders detach {folder.name} --agent {attached[0]})."
            )
        done = files.delete_folder(folder.id)
        echo(
            f"deleted folder {folder.name} and its {done['files']} file(s)"
            + (f"; detached from {', '.join(attached)}" if attached else "")
        )
        return 0
    if action == "sync":
        return _sync(memory, settings, args)
    raise ValidationError(f"Unknown folders action {action!r}; see tiermem folders --help.")


def _show(memory: Memory, args: argparse.Namespace) -> int:
    from ..interop.folder_sync import synced_directory

    files = memory.files
    folder = files.folder(args.name)
    names = {a.id: a.name for a in memory.list_agents()}
    stored = files.files(folder.id)
    rows = [
        {"name": f.name, "status": f.status, "size": f.size, "chunks": f.chunks, "type": f.file_type, "error": f.error}
        for f in stored
    ]
    info = {
        "name": folder.name,
        "id": folder.id,
        "description": folder.description,
        "instructions": folder.instructions,
        "agents": [names.get(a, a) for a in files.agents_of(folder.id)],
        "synced_from": synced_directory(memory, folder.id),
        "files": rows,
    }
    if args.json:
        print_rows(info, True)
        return 0
    for key in ("name", "description", "instructions", "agents", "synced_from"):
        value = info[key]
        if value:
            echo(f"{key}: {', '.join(value) if isinstance(value, list) else value}")
    echo(f"files: {len(rows)}")
    if rows:
        echo()
        print_rows([{k: v for k, v in r.items() if k != "type"} for r in rows], False)
    return 0


def _rename(memory: Memory, args: argparse.Namespace) -> int:
    """``folders rename OLD NEW``: the checks are the domain's (``Filesystem.update_folder``: a bad name, a name
    another folder has, another folder's id), made under the store's lock; a refused rename changes nothing."""
    files = memory.files
    folder = files.folder(args.name)
    if args.new_name == folder.name:
        echo(f"folder {folder.name} ({folder.id}) is named so already; nothing changed")
        return 0
    renamed = files.update_folder(folder.id, new_name=args.new_name)
    names = {a.id: a.name for a in memory.list_agents()}
    attached = [names.get(a, a) for a in files.agents_of(renamed.id)]
    echo(
        f"renamed folder {folder.name} to {renamed.name} ({renamed.id})"
        + (f"; agent(s) {', '.join(attached)} see its files as {renamed.name}/FILE" if attached else "")
    )
    return 0


def _sync(memory: Memory, settings: Settings, args: argparse.Namespace) -> int:
    from ..base.errors import NotFoundError
    from ..interop.folder_sync import WATCH_SECONDS, sync_folder, watch

    directory: Path = args.directory
    if not directory.is_dir():  # refused before the folder is made
        raise NotFoundError(f"{directory} is not a directory; give the directory to sync the folder with.")
    if memory.files.ensure_folder(args.name)[1]:  # one folder of the name, also when two syncs start at once
        print(f"created folder {args.name}", file=sys.stderr, flush=True)
    if args.embed:
        memory.archive.embedder.start()
    embed = None if args.embed else False
    if args.watch:
        interval = WATCH_SECONDS if args.interval is None else args.interval
        print(
            f"tiermem: syncing folder {args.name} with {one_line(str(directory))} whenever it changes (checked every "
            f"{interval:g} s); Ctrl-C stops",
            file=sys.stderr,
            flush=True,
        )

        def report(done: SyncReport) -> None:
            _print_report(done, args.json)
            _embed(memory, settings, args)

        try:
            watch(
                memory,
                args.name,
                directory,
                interval=interval,
                embed=embed,
                on_report=report,
                on_error=lambda exc: print(
                    printable(
                        f"tiermem: {exc}\ntiermem: still watching: the folder is synced again once this is fixed; "
                        "the same error is not repeated (Ctrl-C stops)"
                    ),
                    file=sys.stderr,
                    flush=True,
                ),
            )
        except KeyboardInterrupt:
            print("tiermem: stopped watching", file=sys.stderr)
        return 0
    if args.interval is not None:
        raise ValidationError("--interval is for --watch; add --watch, or leave --interval out.")
    with _embedding(memory, args):
        with _progress("syncing") as progress:
            done = sync_folder(
                memory, args.name, directory, embed=embed, progress=progress, embedded=_chunk_lines(args)
            )
        return _finish(memory, settings, args, done)


def _embedding(memory: Memory, args: argparse.Namespace) -> AbstractContextManager[object]:
    """Held from the first chunk stored to the last embedded (many files' chunks are stored without vectors, then
    embedded by ``_finish``), so `tiermem doctor` meanwhile says they are being embedded, not that they were left."""
    return memory.archive.vectors.embedding() if args.embed else nullcontext()


def _finish(memory: Memory, settings: Settings, args: argparse.Namespace, report: SyncReport) -> int:
    _print_report(report, args.json)
    _embed(memory, settings, args)
    return 1 if report.failed else 0


def _print_report(report: SyncReport, as_json: bool) -> None:
    if as_json:  # one line per report (--watch prints one per round)
        # a name on disk that is not UTF-8 holds lone surrogates: written as JSON escapes, not a crash
        text = json.dumps(report.as_dict(), ensure_ascii=False).encode("utf-8", "backslashreplace").decode("utf-8")
        print(text, flush=True)
        return
    echo(report.summary(), flush=True)
    for r in report.problems():
        echo(f"  {r.outcome} {one_line(r.name)}: {one_line(r.reason)}", flush=True)  # a name may hold a line feed


def _embed(memory: Memory, settings: Settings, args: argparse.Namespace) -> None:
    """Embed the chunks stored without vectors (a large batch), as other short-lived commands do; a long one says
    how far it is on stderr (``BackfillLines``: rows done of the total, the rate, the time left)."""
    if not args.embed:
        return
    from ..interop.progress import BackfillLines

    embedded = memory.archive.vectors.catch_up(
        settings.embedding_wait_seconds, announced_only=True, progress=BackfillLines(every=PROGRESS_SECONDS)
    )
    if embedded:
        print(f"embedded {embedded} row(s) stored without vectors", file=sys.stderr, flush=True)


def _chunk_lines(args: argparse.Namespace) -> Embedded | None:
    """A long upload's embedding told on stderr: each file's chunks embedded of its total, a line every
    ``PROGRESS_SECONDS`` at most and none before (stdout, which ``--json`` writes, is left alone)."""
    from ..interop.progress import ChunkLines

    return ChunkLines(every=PROGRESS_SECONDS) if args.embed else None


class _progress:
    """A progress line on stderr (only when it is a terminal), made once the total is known."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.bar: Any = None

    def __enter__(self) -> Progress:
        def advance(done: int, total: int) -> None:
            if self.bar is None:
                from ..interop.progress import Progress as Bar

                self.bar = Bar(self.label, total)
            self.bar.advance(done - self.bar.done)

        return advance

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()
