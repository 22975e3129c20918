"""Command line: the composition root. Reads settings, builds the objects, runs.

Heavy modules (lancedb, the MCP SDK, the embedding model) are imported inside the
commands that need them, so ``tiermem --help`` and the stdio handshake stay fast.

Why this module is long: ``build_parser`` declares the arguments of most commands in one place (about 300 lines of
argparse; ``forget`` and ``folders`` bring their own parsers) so ``tiermem --help`` needs no command's module; the
handlers live elsewhere.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import TYPE_CHECKING, Any

from ..base.errors import TiermemError, ValidationError
from ..base.object_deadlines import BULK_COMMANDS
from ..domain.factory import open_memory
from .commands import (
    agent_set_command,
    agent_show_command,
    blocks_command,
    interop_command,
    print_rows,
    search_command,
)
from .folders import add_folders_parser
from .forget import add_forget_parser
from .links import add_links_parser
from .serving import apply_log_level, keep_heap, serve, server_memory  # noqa: F401 (server_memory: re-exported for tests and benchmarks)
from .stats import add_stats_parser
from .suggest import path
from .terminal import echo

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ..base.config import SettingCheck, Settings
    from ..domain.memory import Memory

# commands whose whole work is cli/<command>.py's <command>_command(memory, settings, args)
OWN_MODULE_COMMANDS = frozenset({"folders", "forget", "links", "stats", "remember", "timeline"})

log = logging.getLogger("tiermem")
WATCH_SECONDS = 0.25  # `tiermem sync --watch`: how often it looks for a change on either side

EXAMPLES = {
    "serve": "tiermem serve --agent work            # stdio, for Claude Desktop and other hosts\n"
    "  tiermem serve --transport http --port 8765   # streamable HTTP at http://127.0.0.1:8765/mcp",
    "agents": "tiermem agents list\n  tiermem agents create work --system 'You are my work assistant.'\n"
    "  tiermem agents show Evie     # settings, blocks, and what an import kept but tiermem does not run",
    "blocks": "tiermem blocks list --agent work\n  tiermem blocks set human 'Name: Ada' \n  tiermem blocks history human",
    "optimize": "tiermem optimize --data-dir ~/.local/share/tiermem",
    "reembed": "tiermem reembed --embedding-model hashing",
    "doctor": "tiermem doctor --json",
    "import": "tiermem import agent.af              # a Letta agent file (shared blocks stay shared)\n"
    "  tiermem import backup.jsonl                    # a tiermem backup\n"
    "  tiermem import ~/.mcp/memory.jsonl --agent work  # the reference memory server's graph\n"
    "  tiermem import ./memories --agent work         # an Anthropic memory-tool directory\n"
    "  tiermem import ./memory --agent work           # a MemFS directory (system/ files are pinned)",
    "export": "tiermem export work -o work.af\n  tiermem export Evie companion-sleeptime_copy -o evie.af  # shared blocks and groups stay\n"
    "  tiermem export --all -o everyone.af\n  tiermem export --format jsonl -o backup.jsonl\n"
    "  tiermem export work --format memfs -o ./memory",
    "sync": "tiermem sync ./memory --agent work          # files <-> blocks, both ways\n"
    "  tiermem sync ./memory --prefer file               # settle conflicts with the files' text\n"
    "  tiermem sync ./memory --watch                     # keep both sides in step until Ctrl-C",
    "setup": "tiermem setup letta-code --agent-dir ~/.letta/lc-local-backend/memfs/agent-local-.../memory\n"
    "  tiermem setup letta-code --letta-agent agent-local-... --agent work --host claude-desktop",
    "search": "tiermem search 'launch date'\n  tiermem search tea --recall --limit 10 --json",
    "config": "tiermem config claude-desktop\n  tiermem config claude-code --agent work\n  tiermem config http > tiermem-http.toml",
    "setup claude-code": "tiermem setup claude-code                  # every project: server + hooks, this tiermem's paths\n"
    "  tiermem setup claude-code --agent work --scope project\n  tiermem setup claude-code --uninstall",
    "hook": "tiermem hook claude-code --data-dir DIR --agent NAME < hook-input.json   # what Claude Code runs",
    "ui": "tiermem ui                      # opens the memory inspector in your browser\n"
    "  tiermem ui --agent work --port 8766 --no-browser",
    "remember": "tiermem remember 'Ada drinks green tea, never coffee.' --tags preferences",
    "timeline": "tiermem timeline                          # per month, everything the agent's memory holds\n"
    "  tiermem timeline --by week --from 2024-01-01 --to 2024-03-31 --query dogs\n"
    "  tiermem timeline --period 2024-W19 --kind recall --kind archival   # what that week holds",
    "chat": "ANTHROPIC_API_KEY=sk-... tiermem chat --agent work\n  tiermem chat -m 'What do you remember about me?' --json",
}


def _common(p: argparse.ArgumentParser | argparse._ArgumentGroup, *, agent: bool = True, top: bool = False) -> None:
    """The options every command takes. They go before the command (``top``: the main parser, where they default to
    None) or after it (a command's parser, where a value given there wins and one left out keeps the first's)."""
    default = None if top else argparse.SUPPRESS
    p.add_argument(
        "--data-dir",
        type=path,
        default=default,
        help="data directory (default: $TIERMEM_DATA_DIR or ~/.local/share/tiermem)",
    )
    p.add_argument(
        "--config",
        type=path,
        default=default,
        help="TOML config file (default: $TIERMEM_CONFIG or ~/.config/tiermem/config.toml)",
    )
    p.add_argument("--embedding-model", default=default, help="'default', 'hashing' or a fastembed model name")
    if agent:
        p.add_argument(
            "--agent",
            default=default,
            help="agent name (default: $TIERMEM_AGENT or 'default')"
            + ("; for the commands that work on one agent's memory" if top else ""),
        )
    elif isinstance(p, argparse.ArgumentParser):
        p.set_defaults(takes_agent=False)


def _check_agent_applies(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``tiermem --agent work agents list``: the command has no --agent; say so rather than ignore it."""
    if args.agent is None or getattr(args, "takes_agent", True):
        return
    command = " ".join(str(w) for w in (args.command, getattr(args, "action", None)) if w)
    parser.error(
        f"--agent does not apply to `tiermem {command}`; leave it out (`tiermem {command} --help` shows what it takes)."
    )


def _check_agent_named(args: argparse.Namespace, settings: Settings) -> None:
    """An empty agent name (``TIERMEM_AGENT=``, ``--agent ''``, ``agent = ""``) names no agent: say where it came
    from, rather than that no agent is named '' (only for the commands that work on one agent's memory)."""
    import os

    from ..base.errors import ConfigError

    if settings.agent.strip() or not getattr(args, "takes_agent", True):
        return
    if getattr(args, "agent", None) is not None:
        where, fix = "--agent is empty", "give it an agent's name, or leave it out"
    elif os.environ.get("TIERMEM_AGENT") is not None:
        where, fix = "TIERMEM_AGENT is set but empty", "give it an agent's name, or unset it (`unset TIERMEM_AGENT`)"
    else:
        where = f"agent is empty in {settings.config or 'the configuration'}"
        fix = "give it an agent's name there, or remove the key"
    raise ConfigError(
        f"{where}: {fix} for the agent 'default'; `tiermem agents list` shows the agents. Nothing was opened or "
        "changed."
    )


def _sub(sp: Any, name: str, help_text: str, **kw: Any) -> argparse.ArgumentParser:
    return sp.add_parser(  # type: ignore[no-any-return]
        name,
        help=help_text,
        description=help_text,
        epilog=f"example:\n  {EXAMPLES.get(name.split()[0], '')}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **kw,
    )


def build_parser() -> argparse.ArgumentParser:
    from .suggest import Parser

    parser = Parser(
        prog="tiermem",
        description="MemGPT/Letta-style tiered memory for MCP hosts.",
        epilog="example:\n  tiermem serve\n  tiermem blocks list\n"
        "  tiermem --data-dir ~/work-memory blocks list   # the same as: tiermem blocks list --data-dir ~/work-memory",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"tiermem {__version__}")
    _common(
        parser.add_argument_group(
            "options every command takes, before or after the command (after it wins when given twice)"
        ),
        top=True,
    )
    sp = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = _sub(
        sp,
        "serve",
        "Run the MCP server (stdio by default, for an MCP host to start: `tiermem setup` connects one; logs go to "
        "stderr).",
    )
    _common(serve)
    serve.add_argument(
        "--transport", choices=["stdio", "sse", "http"], help="stdio (default), sse (/sse) or http (/mcp)"
    )
    serve.add_argument("--host", help="address for sse/http (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port for sse/http (default 8765)")
    serve.add_argument("--tools", help="comma-separated presets, groups or tool names (default: 'default')")
    serve.add_argument(
        "--tokens-file", dest="auth_tokens_file", type=path, help="TOML file of bearer tokens for sse/http"
    )
    serve.add_argument(
        "--token",
        dest="http_token",
        metavar="SECRET",
        help="sse/http: a bearer token for every agent; other local users see it in ps, so prefer "
        "$TIERMEM_HTTP_TOKEN or --tokens-file (with no tokens configured at all, a random one per run, printed on "
        "stderr)",
    )
    serve.add_argument(
        "--agent-loop",
        dest="agent_loop",
        action="store_true",
        default=None,
        help="also publish agent_chat: the built-in Letta agent (Anthropic API or the host's model)",
    )
    serve.add_argument(
        "--mcp-apps",
        dest="mcp_apps",
        action="store_true",
        default=None,
        help="also publish the block view as an MCP App (memory_blocks_view, ui://tiermem/blocks.html)",
    )

    agents = _sub(sp, "agents", "List or create agents (memory namespaces).")
    asp = agents.add_subparsers(dest="action", metavar="ACTION", required=True)
    a_list = asp.add_parser("list", help="list agents")
    _common(a_list, agent=False)
    a_list.add_argument("--json", action="store_true")
    a_create = asp.add_parser("create", help="create an agent with the default blocks")
    _common(a_create, agent=False)
    a_create.add_argument("name")
    a_create.add_argument("--system", help="system prompt (default: the configured one)")
    a_del = asp.add_parser(
        "delete",
        help="delete an agent: its blocks (shared ones stay with the other agents), their "
        "history, its messages and passages; shows what will go and asks first",
    )
    _common(a_del, agent=False)
    a_del.add_argument("name")
    a_del.add_argument("--yes", action="store_true", help="do not ask (needed when stdin is not a terminal)")
    a_show = asp.add_parser(
        "show", help="an agent's settings and blocks, and what an import kept that tiermem does not run"
    )
    _common(a_show, agent=False)
    a_show.add_argument("name")
    a_show.add_argument("--json", action="store_true")
    a_set = asp.add_parser(
        "set", help="change an agent's settings: loop style, sleep-time agent, autoclear, system prompt, time zone"
    )
    _common(a_set, agent=False)
    a_set.add_argument("name")
    a_set.add_argument("--type", dest="agent_type", choices=["letta_v1", "memgpt"], help="agent loop style")
    a_set.add_argument("--sleeptime", type=int, metavar="N", help="run the sleep-time agent every N turns (0: off)")
    autoclear = a_set.add_mutually_exclusive_group()
    autoclear.add_argument(
        "--autoclear",
        dest="autoclear",
        action="store_true",
        default=None,
        help="message_buffer_autoclear: keep memory, carry no history between turns",
    )
    autoclear.add_argument("--no-autoclear", dest="autoclear", action="store_false", help="carry history (the default)")
    a_set.add_argument("--system", help="new system prompt ('-' reads stdin, one trailing newline dropped)")
    a_set.add_argument(
        "--timezone",
        metavar="ZONE",
        help="the agent's IANA time zone (Europe/Paris): the search tools read dates and show times in it ('': UTC)",
    )
    a_set.add_argument("--json", action="store_true")

    blocks = _sub(sp, "blocks", "Read and edit core memory blocks (people may edit read-only blocks).")
    bsp = blocks.add_subparsers(dest="action", metavar="ACTION", required=True)
    b_list = bsp.add_parser("list", help="list the agent's blocks")
    _common(b_list)
    b_list.add_argument("--json", action="store_true")
    b_show = bsp.add_parser(
        "show", help="print one block's value (or, with --core or no label, the rendered core memory)"
    )
    _common(b_show)
    b_show.add_argument("label", nargs="?")
    b_show.add_argument("--json", action="store_true")
    b_show.add_argument("--core", action="store_true", help="print the rendered core memory")
    b_set = bsp.add_parser("set", help="replace a block's value ('-' reads stdin); or change its settings")
    _common(b_set)
    b_set.add_argument("label")
    b_set.add_argument(
        "value",
        nargs="?",
        help="the new value; '-' reads it from stdin and drops one trailing newline (the one `echo` adds; "
        "`printf` adds none), so `echo 'Name: Ada' | tiermem blocks set human -` stores 'Name: Ada'",
    )
    b_set.add_argument("--description")
    b_set.add_argument("--label", dest="new_label", metavar="NEW", help="rename the block (a new version)")
    b_set.add_argument("--limit", type=int)
    access = b_set.add_mutually_exclusive_group()
    access.add_argument(
        "--read-only", dest="read_only", action="store_true", default=None, help="the model may not edit it"
    )
    access.add_argument("--writable", dest="read_only", action="store_false", help="the model may edit it")
    shown = b_set.add_mutually_exclusive_group()
    shown.add_argument(
        "--pinned",
        dest="pinned",
        action="store_true",
        default=None,
        help="render the block in core memory every turn (the default)",
    )
    shown.add_argument(
        "--detached",
        dest="pinned",
        action="store_false",
        help="list it in core memory by label and description only; opened with memory_open",
    )
    b_create = bsp.add_parser("create", help="create a block on the agent")
    _common(b_create)
    b_create.add_argument("label")
    b_create.add_argument("--value", default="")
    b_create.add_argument("--description", default="")
    b_create.add_argument("--limit", type=int, default=5000)
    b_create.add_argument("--read-only", action="store_true")
    b_attach = bsp.add_parser("attach", help="share another agent's block with this agent")
    _common(b_attach)
    b_attach.add_argument("label", help="label of the block on --from agent")
    b_attach.add_argument("--from", dest="source", required=True, help="agent that has the block")
    b_hist = bsp.add_parser("history", help="a block's versions, newest first")
    _common(b_hist)
    b_hist.add_argument("label")
    b_hist.add_argument("--limit", type=int, default=20)
    b_hist.add_argument("--json", action="store_true")
    b_edit = bsp.add_parser(
        "edit",
        help="edit a block's value in $EDITOR (saved as a new version when changed; the file's last newline is not "
        "part of the value)",
    )
    _common(b_edit)
    b_edit.add_argument("label")
    b_rev = bsp.add_parser(
        "revert",
        help="restore an earlier version's value (as a new version; the label, description, limit and read-only "
        "setting stay as they are now; nothing is written when the block holds that value already)",
    )
    _common(b_rev)
    b_rev.add_argument("label")
    b_rev.add_argument("version", type=int)
    add_folders_parser(sp, _common)  # tiermem folders ... (cli/folders.py)
    add_forget_parser(sp, _common)  # tiermem forget ... (cli/forget.py)
    add_links_parser(sp, _common)  # tiermem links ... (cli/links.py)
    add_stats_parser(sp, _common)  # tiermem stats (cli/stats.py)

    opt = _sub(sp, "optimize", "Compact tables and bring search indexes up to date.")
    _common(opt, agent=False)
    reembed = _sub(
        sp,
        "reembed",
        "Rebuild every vector with --embedding-model (else the configured model, else 'default'), with progress. "
        "The data directory records the model: commands and servers that set no embedding_model then use it.",
    )
    _common(reembed, agent=False)
    doctor = _sub(sp, "doctor", "Check the data directory, schema, embedding model and indexes.")
    _common(doctor, agent=False)
    doctor.add_argument("--json", action="store_true")
    doctor.add_argument(
        "--secrets",
        action="store_true",
        help="scan the store for credentials (blocks with their history, messages, passages, files)",
    )
    doctor.add_argument("--redact", action="store_true", help="with --secrets: rewrite what was found (with --yes)")
    doctor.add_argument("--yes", action="store_true", help="with --redact: do it")
    imp = _sub(
        sp,
        "import",
        "Import a Letta agent file, a tiermem backup, a memory.jsonl graph, a /memories or a MemFS directory.",
    )
    _common(imp)
    imp.add_argument("path", type=path)
    imp.add_argument("--format", choices=["auto", "af", "jsonl", "memory-graph", "memories", "memfs"], default="auto")
    imp.add_argument("--rename", metavar="NEW", help="import the (first) agent of an .af file under this name")
    imp.add_argument(
        "--replace",
        action="store_true",
        help="overwrite an agent with the same name (.af), blocks with other values (memories), or roll back to the "
        "backup every agent it holds that this data directory changed since or differently (jsonl)",
    )
    imp.add_argument(
        "--include-forgotten",
        action="store_true",
        help="jsonl and .af: import also what `tiermem forget` forgot here since the file was made (left out "
        "otherwise), and take it out of the forget record",
    )
    imp.add_argument("--json", action="store_true")
    exp = _sub(sp, "export", "Export an agent as a Letta agent file, or everything as a jsonl backup.")
    _common(exp, agent=False)
    exp.add_argument(
        "name",
        nargs="*",
        help="agents to export into one .af file (one agent for memfs); default: $TIERMEM_AGENT or 'default' "
        "(a jsonl backup holds every agent: name none)",
    )
    exp.add_argument("--all", dest="all_agents", action="store_true", help=".af: export every agent into one file")
    exp.add_argument("-o", "--output", help="output file (default: stdout); a directory for memfs")
    exp.add_argument("--format", choices=["af", "jsonl", "memfs"], default="af")
    exp.add_argument("--vectors", action="store_true", help="jsonl: include the embedding vectors")
    syn = _sub(sp, "sync", "Keep a MemFS directory (one .md per block) and an agent's blocks in two-way sync.")
    _common(syn)
    syn.add_argument(
        "path",
        type=path,
        help="the MemFS directory; a new one is made (and filled) on the first sync, but only where its parent "
        "directory exists: a path whose parent is missing is refused",
    )
    syn.add_argument("--prefer", choices=["file", "store"], help="settle conflicts (both sides changed) this way")
    syn.add_argument(
        "--watch",
        type=float,
        nargs="?",
        const=WATCH_SECONDS,
        metavar="SECONDS",
        help=f"keep running: sync whenever either side changes, checked every SECONDS (default {WATCH_SECONDS})",
    )
    syn.add_argument("--json", action="store_true")
    setup = _sub(
        sp,
        "setup",
        "Wire tiermem to a host or another memory: `setup claude-code` (or codex, gemini, opencode) registers "
        "tiermem with the host and installs its hooks; `setup letta-code` shares one memory with a Letta Code agent.",
    )
    ssp = setup.add_subparsers(dest="target", metavar="TARGET", required=True)
    s_lc = ssp.add_parser(
        "letta-code",
        help="one memory for a Letta Code agent and every MCP host (its MemFS directory, synced both ways)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"example:\n  {EXAMPLES['setup']}",
    )
    _common(s_lc)
    where = s_lc.add_mutually_exclusive_group()
    where.add_argument("--agent-dir", type=path, help="the Letta Code agent's memory directory")
    where.add_argument("--letta-agent", metavar="ID", help="the Letta Code agent's id (its directory is found)")
    s_lc.add_argument(
        "--host",
        choices=["claude-desktop", "claude-code", "cursor", "vscode"],
        default="claude-code",
        help="print this host's configuration with the directory kept in step (default: claude-code)",
    )
    s_lc.add_argument(
        "--dialect",
        choices=["letta-code", "anthropic"],
        default="letta-code",
        help="the memory tool the hosts get (default: letta-code, Letta Code's own)",
    )
    s_lc.add_argument("--json", action="store_true")
    s_cc = ssp.add_parser(
        "claude-code",
        help="register tiermem with Claude Code and install its hooks (memory that "
        "works on its own); --uninstall removes exactly that",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"example:\n  {EXAMPLES['setup claude-code']}",
    )
    _common(s_cc)
    s_cc.add_argument("--tools", help="comma-separated presets, groups or tool names for the server (as for serve)")
    s_cc.add_argument("--agent-loop", dest="agent_loop", action="store_true", default=None, help="as for serve")
    s_cc.add_argument("--mcp-apps", dest="mcp_apps", action="store_true", default=None, help="as for serve")
    s_cc.add_argument(
        "--scope",
        choices=["user", "project"],
        default="user",
        help="user: every project of this user (default); project: this project's .mcp.json and .claude/",
    )
    s_cc.add_argument(
        "--project-dir", type=path, help="the project for --scope project (default: the current directory)"
    )
    s_cc.add_argument(
        "--uninstall", action="store_true", help="remove exactly what setup added (and put back what it replaced)"
    )
    s_cc.add_argument(
        "--force",
        action="store_true",
        help="replace a `tiermem` MCP server entry setup did not write (--uninstall puts it back)",
    )
    for target, title in (("codex", "Codex CLI"), ("gemini", "Gemini CLI"), ("opencode", "opencode")):
        s_h = ssp.add_parser(
            target,
            help=f"register tiermem with {title} and install its hooks (memory that works on its own); "
            "--uninstall removes exactly that",
            formatter_class=argparse.RawDescriptionHelpFormatter,
            epilog=f"example:\n  tiermem setup {target}\n  tiermem setup {target} --uninstall",
        )
        _common(s_h)
        s_h.add_argument("--tools", help="comma-separated presets, groups or tool names for the server (as for serve)")
        s_h.add_argument("--agent-loop", dest="agent_loop", action="store_true", default=None, help="as for serve")
        s_h.add_argument("--mcp-apps", dest="mcp_apps", action="store_true", default=None, help="as for serve")
        s_h.add_argument("--scope", choices=["user", "project"], default="user", help="user (default) or project")
        s_h.add_argument(
            "--project-dir", type=path, help="the project for --scope project (default: the current directory)"
        )
        s_h.add_argument("--uninstall", action="store_true", help="remove exactly what setup added")
        s_h.add_argument("--force", action="store_true", help="replace a `tiermem` entry setup did not write")
    rem = _sub(sp, "remember", "Store a fact in archival memory, as the model does with archival_memory_insert.")
    _common(rem)
    rem.add_argument("text", help="the fact, written to make sense on its own later ('-' reads stdin)")
    rem.add_argument("--tags", help="comma-separated tags")
    rem.add_argument("--project", help="keep it to this project (a repository path); default: shared by every project")
    rem.add_argument("--json", action="store_true")
    tl = _sub(
        sp,
        "timeline",
        "Count recall, archival passages, file changes and block versions per day, week or month; "
        "list what one period holds.",
    )
    _common(tl)
    tl.add_argument(
        "--from",
        dest="start",
        help="first date or time (ISO 8601, as the search tools take; in the agent's time zone when it names none)",
    )
    tl.add_argument("--to", dest="end", help="last date or time (a day, ISO week, month or year alone: all of it)")
    tl.add_argument("--by", choices=("day", "week", "month"), help="period (default month; weeks are ISO weeks)")
    tl.add_argument("--query", help="only items holding every word of this (a keyword filter)")
    tl.add_argument(
        "--kind",
        action="append",
        choices=("recall", "archival", "files", "blocks"),
        help="only these kinds (repeatable; default: all four)",
    )
    tl.add_argument("--project", help="recall and archival of this project only (as the search tools' project)")
    tl.add_argument("--period", help="list what one period holds: 2024-05-08, 2024-W19 or 2024-05")
    tl.add_argument(
        "--terms", type=int, help="the rising terms of each period, this many (default 0; with --period: 10)"
    )
    tl.add_argument("--limit", type=int, help="with --period: items listed (default 100, at most 1000)")
    tl.add_argument("--json", action="store_true")
    srch = _sub(sp, "search", "Search archival memory and recall (the conversation log) from the terminal.")
    _common(srch)
    srch.add_argument("query")
    which = srch.add_mutually_exclusive_group()
    which.add_argument("--archival", action="store_true", help="archival passages only")
    which.add_argument("--recall", action="store_true", help="conversation messages only")
    srch.add_argument("--limit", type=int, default=5, help="results per memory (default 5, at most 100)")
    srch.add_argument("--tags", help="archival: comma-separated tags (any of them)")
    srch.add_argument("--json", action="store_true")
    cfg = _sub(sp, "config", "Print a host configuration snippet with this machine's paths filled in.")
    _common(cfg)
    cfg.add_argument(
        "host", choices=["claude-desktop", "claude-code", "cursor", "vscode", "codex", "gemini", "opencode", "http"]
    )
    cfg.add_argument(
        "--agent-loop",
        dest="agent_loop",
        action="store_true",
        default=None,
        help="configure the built-in agent loop too (agent_chat)",
    )
    cfg.add_argument("--scope", choices=["user", "project"], default="user", help="as for `setup` (hosts it has)")
    cfg.add_argument("--project-dir", type=path, help="as for `setup` (hosts it has)")
    cfg.add_argument(
        "-o",
        "--output",
        type=path,
        help="write the snippet to this file (mode 0600 when it holds a token) instead of stdout",
    )
    hook = _sub(sp, "hook", "Run a host hook (installed by `tiermem setup`): asks the running server, fails soft.")
    hook.add_argument("host", choices=["claude-code", "codex", "gemini", "opencode"])
    _common(hook)
    ui = _sub(
        sp, "ui", "Open the memory inspector: see, search, edit and undo memory in a local web page (loopback only)."
    )
    _common(ui)
    ui.add_argument("--port", type=int, help="port on 127.0.0.1 (default: a free one)")
    ui.add_argument(
        "--no-browser", dest="open_browser", action="store_false", help="print the URL, do not open a browser"
    )
    chat = _sub(
        sp, "chat", "Talk to the agent in the terminal through the built-in agent loop (needs ANTHROPIC_API_KEY)."
    )
    _common(chat)
    chat.add_argument("-m", "--message", help="send one message, print the reply and exit (otherwise: interactive)")
    chat.add_argument("--conversation", default="default", help="conversation id (default: 'default')")
    chat.add_argument("--model", help="Anthropic model (default: the `model` setting)")
    chat.add_argument("--json", action="store_true", help="print each turn's full result as JSON")
    return parser


TOKEN_IN_ARGV = (
    "--token puts the secret on this process's command line, which every user of this machine can read (ps): set "
    "TIERMEM_HTTP_TOKEN in the server's environment instead, or name a tokens file readable only by you "
    "(--tokens-file or auth_tokens_file)"
)


def settings_from(args: argparse.Namespace, checks: Mapping[str, SettingCheck] | None = None) -> Settings:
    """The settings of a command: its flags over the environment and the config files, checked whole (the checks
    that need the tool registry and the domain's rules of a block too: ``SETTING_CHECKS``, or ``checks``) before
    anything opens."""
    from ..base.config import load_settings

    return load_settings(
        getattr(args, "config", None),
        checks=SETTING_CHECKS if checks is None else checks,
        data_dir=getattr(args, "data_dir", None),
        agent=getattr(args, "agent", None),
        transport=getattr(args, "transport", None),
        host=getattr(args, "host", None),
        port=getattr(args, "port", None),
        tools=getattr(args, "tools", None),
        embedding_model=getattr(args, "embedding_model", None),
        auth_tokens_file=getattr(args, "auth_tokens_file", None),
        http_token=getattr(args, "http_token", None),
        agent_loop=getattr(args, "agent_loop", None),
        mcp_apps=getattr(args, "mcp_apps", None),
        model=getattr(args, "model", None),
    )


def _check_tools(settings: Settings) -> None:
    from ..server.registry import check_tools_setting

    check_tools_setting(settings)


def _check_default_blocks(settings: Settings) -> None:
    """Blocks no agent could be made with (a label twice, a value over its limit, a bad label, a credential): refused
    when the settings are loaded, not when a server first creates its agent (then every tool call failed)."""
    from ..domain.blocks import check_new_blocks

    check_new_blocks(settings.default_blocks, secret_scan=settings.secret_scan == "on")


def _check_http_token(settings: Settings) -> None:
    """A static HTTP token too short, a placeholder, or one no client can send: refused by every command, as when
    ``serve`` takes it (the value is wrong wherever it is read; fixing it is editing the source the error names)."""
    from ..process.netguard import secret_problem

    if settings.http_token is not None and (problem := secret_problem(settings.http_token, "the token")) is not None:
        raise ValueError(problem)


def _check_auth_tokens(settings: Settings) -> None:
    """The inline tokens' secrets and agents, as ``serve`` checks them (their keys are checked by base). The tokens
    file is not read here: only a server needs it, and it may be readable by the server's user alone."""
    from ..process.netguard import tokens_problem

    if (problem := tokens_problem(settings.auth_tokens)) is not None:
        raise ValueError(problem)


# The checks of settings that need more than base knows (base.config.SettingCheck), run by every command
SETTING_CHECKS: dict[str, SettingCheck] = {
    "tools": _check_tools,
    "default_blocks": _check_default_blocks,
    "http_token": _check_http_token,
    "auth_tokens": _check_auth_tokens,
}


# The checks `tiermem doctor` reports as a failed check rather than refusing to start: it is what one runs to find
# such a problem, and nothing it does uses the tokens (``token_checks``)
TOKEN_CHECKS = ("http_token", "auth_tokens")


def token_checks(args: argparse.Namespace, settings: Settings) -> list[dict[str, Any]]:
    """``tiermem doctor``'s check of the static HTTP tokens (``http_token``, ``auth_tokens``), as every other command
    refuses them when it loads the settings (``SETTING_CHECKS``); none when no such token is set."""
    from ..base.errors import ConfigError

    if settings.http_token is None and not settings.auth_tokens:
        return []
    try:
        settings_from(args, {name: SETTING_CHECKS[name] for name in TOKEN_CHECKS})
    except ConfigError as exc:
        return [
            {
                "check": "http tokens",
                "ok": False,
                "detail": str(exc).removeprefix("Invalid settings: "),
                "fix": "change the setting named where it is set (in brackets); until then every command but doctor "
                "refuses to start",
            }
        ]
    return [
        {"check": "http tokens", "ok": True, "detail": "the static tokens are fit (long enough, not a placeholder)"}
    ]


def command_settings(args: argparse.Namespace) -> Settings:
    """The settings a command runs with; a bulk command's (``BULK_COMMANDS``: their uploads are whole data files)
    give LanceDB's store longer deadlines than a server's, never the core state's client (``Settings.for_bulk``)."""
    diagnosing = args.command == "doctor" and not (args.secrets or args.redact)  # a bad token: a failed check
    unchecked = {name: check for name, check in SETTING_CHECKS.items() if name not in TOKEN_CHECKS}
    settings = settings_from(args, unchecked if diagnosing else None)
    _check_agent_named(args, settings)
    return settings.for_bulk() if args.command in BULK_COMMANDS else settings


def run_command(args: argparse.Namespace) -> int:
    if args.command == "serve" and getattr(args, "http_token", None):
        log.warning(TOKEN_IN_ARGV)  # said also when the token is refused (the settings' checks)
    settings = command_settings(args)
    if args.command == "serve":
        serve(settings)
        return 0
    if args.command == "reembed":  # before opening: it exists to fix a model mismatch
        from ..domain.maintenance import reembed
        from .prechecks import check_arguments, configured_model

        check_arguments(args, settings)  # nothing to re-embed in a data directory that holds no memory
        reembed(settings, configured=configured_model(args, settings_from))
        return 0
    if args.command == "doctor":
        if args.secrets or args.redact:
            from ..domain.secret_audit import doctor_secrets
            from .prechecks import check_arguments

            check_arguments(args, settings)  # nothing to audit in a data directory that holds no memory
            return doctor_secrets(settings, redact_found=args.redact, yes=args.yes, as_json=args.json)
        from ..domain.maintenance import doctor
        from ..interop.auto_memory_admin import doctor_check

        return doctor(settings, as_json=args.json, first=token_checks(args, settings), more=doctor_check(settings))
    if (args.command == "setup" and args.target == "claude-code") or (
        args.command == "config" and args.host == "claude-code"
    ):
        from ..interop.claude_code import setup_command

        return setup_command(settings, args, dry_run=args.command == "config")
    if (args.command == "setup" and args.target in ("codex", "gemini", "opencode")) or (
        args.command == "config" and args.host in ("codex", "gemini", "opencode")
    ):
        from ..interop.host_setup import setup_command as setup_host

        host = args.target if args.command == "setup" else args.host
        return setup_host(host, settings, args, dry_run=args.command == "config")
    if args.command == "setup":
        from .commands import setup_letta_code

        return setup_letta_code(settings, args)
    if args.command == "config":
        from .commands import config_command

        return config_command(settings, args)
    from .prechecks import check_arguments

    check_arguments(args, settings)  # before opening: bad arguments change nothing, not even a new data directory
    if args.command == "ui":
        from ..ui.launch import run_ui

        apply_log_level(settings.log_level)  # a server too: its log is the setting's, as `serve`'s is
        keep_heap(settings)  # a long-running server too

        return run_ui(settings, port=args.port, open_browser=args.open_browser)
    if args.command == "chat":
        from functools import partial

        from ..agent.repl import run_chat
        from ..interop.auto_memory_admin import guard_deletions

        # a passage its agent deletes is not stored again from Claude Code's auto memory (as `serve` and `ui` do)
        return run_chat(
            settings,
            message=args.message,
            conversation=args.conversation,
            as_json=args.json,
            opened=partial(guard_deletions, data_dir=settings.resolved_data_dir()),
        )
    # A command of the core state alone opens only that: the archive (LanceDB) opens if something asks for it
    core_only = core_state_only(args)
    memory = open_memory(settings, start_embedder=False, lazy=core_only, archive_now=False)
    if args.command == "agents":
        if args.action == "delete":
            from .commands import agent_delete_command

            return agent_delete_command(memory, args)
        if args.action == "list":
            print_rows(
                [
                    {"name": a.name, "id": a.id, "created": a.created_at.isoformat(timespec="seconds")}
                    for a in memory.list_agents()
                ],
                args.json,
            )
        elif args.action == "set":
            agent_set_command(memory, settings, args)
        elif args.action == "show":
            agent_show_command(memory, args)
        else:
            agent = memory.create_agent(args.name, system=args.system)
            print(f"created agent {agent.name} ({agent.id})")
        return 0
    if args.command == "blocks":
        return blocks_command(memory, settings, args)
    if args.command in OWN_MODULE_COMMANDS:  # cli/<command>.py's <command>_command, imported when it runs
        module = importlib.import_module(f"{__package__}.{args.command}")
        run: Callable[[Memory, Settings, argparse.Namespace], int] = getattr(module, f"{args.command}_command")
        return run(memory, settings, args)
    if args.command == "search":
        # A process that has the model embeds what others stored without vectors, before searching.
        embedded = memory.archive.vectors.catch_up(settings.embedding_wait_seconds, announced_only=True)
        if embedded:
            print(f"embedded {embedded} row(s) stored without vectors", file=sys.stderr)
        return search_command(memory, settings, args)
    if args.command == "import":
        _load_model_for_import(memory, args)
    if args.command in ("import", "export", "sync"):
        return interop_command(memory, settings, args)
    if args.command == "optimize":
        from ..domain.maintenance import optimize

        for line in optimize(memory):
            echo(line)
        return 0
    raise ValidationError(f"Unknown command {args.command!r}; see tiermem --help.")


def core_state_only(args: argparse.Namespace) -> bool:
    """Whether the command reads or changes the core state (agents, blocks) and nothing of the archive: it opens
    only the core state (``open_memory(lazy=True)``), so a store whose archive is slow, broken or unreachable does
    not hold it up (with an object store that does not answer, `blocks list` waited ~35 s for LanceDB's retries and
    then failed on the archive, though it reads only the core state). ``blocks show`` of the whole core memory
    counts the archive's rows: it opens both."""
    if args.command == "agents":
        return args.action in ("list", "create")
    if args.command == "blocks":
        return not (args.action == "show" and (args.core or not args.label))
    return False


def _load_model_for_import(memory: Memory, args: argparse.Namespace) -> None:
    """Imports embed every row: load the model first; without one, import anyway and say so. A MemFS directory
    brings blocks only: no model."""
    from ..base.errors import EmbeddingError
    from ..interop.commands import detect

    if (detect(args.path) if args.format == "auto" else args.format) == "memfs":
        return
    try:
        memory.archive.embedder.wait(None)
    except EmbeddingError as exc:
        print(
            f"tiermem: warning: {exc} Importing without vectors: the imported rows are found by keywords until a "
            "tiermem with a working model opens this data directory (it embeds them).",
            file=sys.stderr,
        )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _check_agent_applies(parser, args)
    if args.command == "timeline":  # flags that contradict each other: a usage error, before anything is opened
        from .timeline import usage_conflict

        if (conflict := usage_conflict(args)) is not None:
            print(f"tiermem: {conflict}", file=sys.stderr)
            return 2
    if args.command == "hook":  # once per prompt: no logging setup, no settings (the server does the work)
        from .hooks import run_hook

        return run_hook(args)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.command:
        parser.print_help()
        return 2
    _warn_unknown_variables()
    try:
        code = run_command(args)
        if not sys.stdout.closed:  # (the stdio transport may close what it wrapped)
            sys.stdout.flush()  # a reader that left is found here, not in the interpreter's last flush
        return code
    except BrokenPipeError:
        return _reader_left()
    except TiermemError as exc:
        print(f"tiermem: {exc.for_person()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _warn_unknown_variables() -> None:
    """One warning on stderr for each ``TIERMEM_*`` environment variable that is no setting (a mistyped name)."""
    import os

    from ..base.config import Settings
    from .suggest import unknown_variables

    for warning in unknown_variables(os.environ, Settings.model_fields):
        print(f"tiermem: warning: {warning}", file=sys.stderr)


def _reader_left() -> int:
    """stdout's reader went away (``tiermem search --json | head -1``): stop quietly, with 128 + SIGPIPE as a
    command killed by the signal exits. stdout is pointed at /dev/null so the interpreter's flush at exit is silent."""
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a file descriptor (a test's capture): nothing to flush later
        pass
    return 141
