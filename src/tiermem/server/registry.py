"""The one registry of tool definitions; every tool list in tiermem derives from ``TOOLS``.

A definition names the tool, where its function lives (``"module:function"``, imported when the tool
is first registered, so a server answers ``initialize`` before any tool module loads; ``None`` for
``agent_chat``, which the agent service registers itself when the loop is enabled), its annotations and title, its group (what ``tools``
in the settings selects), and whether it edits a block and which argument names that block:
``label`` for the Letta tools, ``path`` / ``old_path`` (``/memories/<label>``) for the ``memory``
tool, whose ``view`` command edits nothing. Derived here: the groups and presets (server.py), the
tool table the server registers from, the edited-block report of the agent loop, the tools the
agent and the sleep-time agent are offered, and the tool names a Letta agent file may reference
that tiermem provides itself (interop).
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from ..base.errors import ConfigError, ValidationError

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    from ..base.config import Settings


class Hints(NamedTuple):
    """A tool's MCP annotations as plain values: the table below is read without the MCP SDK (an agent file's import
    asks which tool names tiermem runs); ``mcp()`` is the SDK's ``ToolAnnotations`` a server publishes."""

    read_only_hint: bool
    destructive_hint: bool
    idempotent_hint: bool
    open_world_hint: bool

    def mcp(self) -> ToolAnnotations:
        from mcp.types import ToolAnnotations

        return ToolAnnotations(**self._asdict())


# What a tool does to memory, for hosts (MCP tool annotations). A block edit is versioned: history keeps every
# version and memory_revert restores any, so it is not destructive (hosts such as Codex refuse destructive tools
# unless a person approves each call). Deleting a passage, or a block from the agent (the memory tool's delete),
# cannot be undone by the model: destructive.
READ = Hints(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
ADD = Hints(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
EDIT = Hints(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
SET = Hints(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
CHANGE = Hints(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)
CHAT = Hints(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True)


@dataclass(frozen=True)
class ToolDef:
    name: str
    # "module:function" under tiermem, imported when the tool is first registered (a server answers `initialize`
    # before any tool module loads); None: registered elsewhere (agent_chat, by agent/service.py)
    target: str | None
    annotations: Hints
    title: str
    group: str
    block_args: tuple[str, ...] = ()  # the arguments naming the block an edit changes; () edits no block
    path_args: bool = False  # block_args hold /memories/<label> paths, not labels
    read_commands: tuple[str, ...] = ()  # values of ``command`` that edit nothing (the memory tool's view)
    for_agent: bool = True  # offered to the built-in agent loop
    sleeptime: bool = False  # offered to the sleep-time agent
    labels_fn: str | None = (
        None  # "module:function" giving the labels a call edited, for arguments block_args cannot name
    )

    @property
    def fn(self) -> Callable[..., Awaitable[object]] | None:
        """The tool's function (its module is imported on first use)."""
        if self.target is None:
            return None
        module, attr = self.target.split(":")
        fn: Callable[..., Awaitable[object]] = getattr(importlib.import_module(f"tiermem.{module}"), attr)
        return fn

    def edited_labels(self, arguments: Mapping[str, object]) -> list[str]:
        """The labels of the blocks a successful call with ``arguments`` edited (empty for a read)."""
        if self.labels_fn is not None:
            module, attr = self.labels_fn.split(":")
            found: list[str] = getattr(importlib.import_module(f"tiermem.{module}"), attr)(dict(arguments))
            return found
        if not self.block_args or arguments.get("command") in self.read_commands:
            return []
        out: list[str] = []
        for arg in self.block_args:
            value = arguments.get(arg)
            if not isinstance(value, str):
                continue
            if self.path_args:
                from ..domain.blocks import label_from_path

                try:
                    value = label_from_path(value)
                except ValidationError:
                    continue  # not a block path; a call that succeeded with it edited no block through it
            if value not in out:
                out.append(value)
        return out


LABEL = ("label",)
TOOLS: tuple[ToolDef, ...] = (
    ToolDef(
        "memory_replace",
        "server.tools:memory_replace",
        EDIT,
        "Replace unique text in a memory block",
        "letta",
        LABEL,
        sleeptime=True,
    ),
    ToolDef(
        "memory_insert",
        "server.tools:memory_insert",
        ADD,
        "Insert lines into a memory block",
        "letta",
        LABEL,
        sleeptime=True,
    ),
    ToolDef(
        "memory_rethink", "server.tools:memory_rethink", SET, "Rewrite a memory block", "letta", LABEL, sleeptime=True
    ),
    ToolDef("core_memory_append", "server.tools:core_memory_append", ADD, "Append to a memory block", "classic", LABEL),
    ToolDef(
        "core_memory_replace",
        "server.tools:core_memory_replace",
        EDIT,
        "Replace text in a memory block",
        "classic",
        LABEL,
    ),
    ToolDef(
        "memory_apply_patch",
        "server.tools:memory_apply_patch",
        EDIT,
        "Patch memory blocks",
        "patch",
        LABEL,
        labels_fn="domain.block_patch:edited_labels",  # a multi-block patch names its blocks in its headers
    ),
    ToolDef(
        "memory",
        "server.memory_tool:memory_tool",
        CHANGE,
        "Manage memory blocks as /memories files",
        "memory_tool",
        ("path", "old_path"),
        path_args=True,
        read_commands=("view",),
    ),
    ToolDef(
        "core_memory_view", "server.tools:core_memory_view", READ, "View core memory", "read", for_agent=False
    ),  # in the system prompt
    ToolDef("memory_open", "server.tools:memory_open", READ, "Open a memory block", "read"),
    ToolDef("memory_history", "server.tools:memory_history", READ, "Block version history", "history"),
    ToolDef(
        "memory_revert", "server.tools:memory_revert", EDIT, "Revert a block to an earlier version", "history", LABEL
    ),
    ToolDef(
        "conversation_log",
        "server.search_tools:conversation_log",
        ADD,
        "Record conversation turns",
        "recall",
        for_agent=False,
    ),  # the loop logs itself
    ToolDef(
        "conversation_search", "server.search_tools:conversation_search", READ, "Search past conversations", "recall"
    ),
    ToolDef(
        "archival_memory_insert",
        "server.search_tools:archival_memory_insert",
        ADD,
        "Save to archival memory",
        "archival",
    ),
    ToolDef(
        "archival_memory_search",
        "server.search_tools:archival_memory_search",
        READ,
        "Search archival memory",
        "archival",
    ),
    ToolDef(
        "archival_memory_delete",
        "server.search_tools:archival_memory_delete",
        CHANGE,
        "Delete an archival passage",
        "archival",
    ),
    ToolDef(
        "archival_memory_list", "server.search_tools:archival_memory_list", READ, "List archival memory", "archival"
    ),
    ToolDef("memory_links", "server.link_tools:memory_links", CHANGE, "Show or make links between memories", "links"),
    ToolDef("open_files", "server.file_tools:open_files", SET, "Open files into core memory", "files"),
    ToolDef("grep_files", "server.file_tools:grep_files", READ, "Search attached files by pattern", "files"),
    ToolDef(
        "semantic_search_files",
        "server.file_tools:semantic_search_files",
        READ,
        "Search attached files by meaning",
        "files",
    ),
    ToolDef("agent_chat", None, CHAT, "Chat with the memory agent", "agent", for_agent=False),
)
BY_NAME: dict[str, ToolDef] = {d.name: d for d in TOOLS}

TOOL_GROUPS: dict[str, tuple[str, ...]] = {}
for _d in TOOLS:
    TOOL_GROUPS[_d.group] = (*TOOL_GROUPS.get(_d.group, ()), _d.name)
del _d
# The default set is lean (every definition is in every request a host makes): one way to edit a block (Letta's
# memory_replace / memory_insert / memory_rethink), opening detached blocks, undo, recall and archival search and
# writes. The classic names, the memory tool, core_memory_view, conversation_log and archival_memory_list are in
# their groups and in "all".
PRESETS: dict[str, tuple[str, ...]] = {
    "default": (
        "letta",
        "memory_open",
        "history",
        "conversation_search",
        "archival_memory_insert",
        "archival_memory_search",
        "archival_memory_delete",
        "files",
    ),
    "minimal": ("letta", "memory_open", "conversation_search", "archival_memory_insert", "archival_memory_search"),
    "all": tuple(g for g in TOOL_GROUPS if g != "agent"),
}


def published_tools(settings: Settings) -> list[str]:
    """The tools a server publishes: the ``tools`` setting, plus Letta Code's ``memory`` and ``memory_apply_patch``
    when ``memory_tool_dialect`` chooses that dialect (choosing the memory tool's dialect means wanting the tool);
    ``ConfigError`` for a ``tools`` setting that cannot work (``check_tools_setting``)."""
    try:
        return _published(settings)
    except ValueError as exc:
        raise ConfigError(f"Invalid settings: tools: {exc}.") from exc


def check_tools_setting(settings: Settings) -> None:
    """``ValueError`` naming what is wrong with the ``tools`` setting: an unknown name, none at all, or only
    ``agent_chat`` without ``agent_loop`` (published only with the loop: the server would publish no tools). The CLI
    checks the setting with it when it loads the settings (cli/main.py), so every command refuses a bad one."""
    _published(settings)


def resolve_tools(items: Iterable[str]) -> list[str]:
    """Expand presets and groups into tool names, in a stable order; unknown names are an error, and so is none at
    all (``TIERMEM_TOOLS=`` set from an empty variable: a server with no tools is of no use to its host)."""
    try:
        return _resolve(items)
    except ValueError as exc:
        raise ConfigError(f"Invalid settings: tools: {exc}.") from exc


def _published(settings: Settings) -> list[str]:
    names = _resolve(settings.tools)
    if settings.memory_tool_dialect == "letta-code":
        names += [n for n in ("memory", "memory_apply_patch") if n not in names]
    if not settings.agent_loop and all(BY_NAME[n].target is None for n in names):
        raise ValueError(
            f"it names only {', '.join(names)}, which is published only with agent_loop = true (--agent-loop, "
            "TIERMEM_AGENT_LOOP), so the server would publish no tools; turn the agent loop on, or name other tools "
            "too"
        )
    return names


def _resolve(items: Iterable[str]) -> list[str]:
    """``resolve_tools``, its errors ``ValueError`` naming the problem (to follow "Invalid settings: tools: ")."""
    every = [name for group in TOOL_GROUPS.values() for name in group]
    chosen: set[str] = set()
    items = list(items)
    if not items:
        raise ValueError(
            f"it is empty, so the server would publish no tools; name presets, "
            f"groups or tools ({', '.join(PRESETS)}, ...), or leave the setting out for the default"
        )

    def add(item: str) -> None:
        if item in PRESETS:
            for sub in PRESETS[item]:
                add(sub)
        elif item in TOOL_GROUPS:
            chosen.update(TOOL_GROUPS[item])
        elif item in every:
            chosen.add(item)
        else:
            import difflib

            known = ", ".join([*PRESETS, *TOOL_GROUPS])
            close = difflib.get_close_matches(item, [*PRESETS, *TOOL_GROUPS, *every], n=1)
            raise ValueError(
                f"{item!r} is no tool, group or preset"
                + (f" (did you mean {close[0]!r}?)" if close else "")
                + f"; use one of: {known}, or a tool name"
            )

    for item in items:
        add(item)
    return [name for name in every if name in chosen]


# Tools the built-in agent loop provides itself, not the server (agent/loop.py, agent/sleeptime.py).
SEND_MESSAGE = "send_message"
FINISH_EDITS = "memory_finish_edits"

NOT_FOR_AGENT = frozenset(d.name for d in TOOLS if not d.for_agent)
SLEEPTIME_TOOLS = tuple(d.name for d in TOOLS if d.sleeptime)
# The tool names of a Letta agent file that tiermem runs itself (the others are kept, not run).
KNOWN_TOOLS = frozenset(d.name for d in TOOLS if d.target is not None) | {SEND_MESSAGE, FINISH_EDITS}


# Letta Code's dialect of two tools (setting memory_tool_dialect = "letta-code"): the same names with Letta Code's
# arguments (`reason`, relative file paths; a codex-style patch) in place of the definitions above.
LETTA_CODE_TOOLS: tuple[ToolDef, ...] = (
    ToolDef(
        "memory",
        "server.letta_memory_tool:memory",
        CHANGE,
        "Edit memory files (Letta Code)",
        "memory_tool",
        labels_fn="server.letta_memory_tool:edited_labels",
    ),
    ToolDef(
        "memory_apply_patch",
        "server.letta_memory_tool:memory_apply_patch",
        CHANGE,
        "Patch memory files (Letta Code)",
        "patch",
        labels_fn="server.letta_memory_tool:edited_labels",
    ),
)
DIALECTS = ("anthropic", "letta-code")


def tools_for(dialect: str) -> tuple[ToolDef, ...]:
    """The tool definitions of a ``memory_tool_dialect``: ``TOOLS``, with Letta Code's two in place for "letta-code"."""
    if dialect not in DIALECTS:
        raise ValidationError(f"memory_tool_dialect must be one of {', '.join(DIALECTS)}, got {dialect!r}.")
    if dialect == "anthropic":
        return TOOLS
    swap = {d.name: d for d in LETTA_CODE_TOOLS}
    return tuple(swap.get(d.name, d) for d in TOOLS)


def label_editors(dialect: str) -> tuple[str, ...]:
    """The tools of ``dialect`` that edit a block named by its label (what the instructions tell a model to keep its
    memory current with), in registry order; ``memory_revert`` (history) is not one of them."""
    return tuple(d.name for d in tools_for(dialect) if d.block_args == LABEL and d.group != "history")


def edited_labels(name: str, arguments: Mapping[str, object], dialect: str = "anthropic") -> list[str]:
    """The blocks a successful call of tool ``name`` with ``arguments`` edited (empty: none, or not a tool here), as
    the tools of ``memory_tool_dialect`` ``dialect`` read their arguments (``tools_for``)."""
    d = next((x for x in tools_for(dialect) if x.name == name), None)
    return d.edited_labels(arguments) if d is not None else []


def register_tools(server: MCPServer[Any], definitions: Iterable[ToolDef], names: list[str]) -> None:
    """Register the chosen tools (names already resolved from presets and groups) from their ``definitions``.

    A tool whose function is annotated ``Annotated[CallToolResult, Model]`` publishes ``Model`` as its
    output schema and returns structured content; the others return text only.
    """
    from .arguments import describe
    from .tools import idempotent, model_errors, returns_structured, tidy_published_schema

    table = {d.name: d for d in definitions}
    for name in names:
        d = table.get(name)
        if d is None or d.fn is None:
            continue  # agent_chat, registered by the agent loop when enabled
        fn, annotations, title = d.fn, d.annotations, d.title  # the tool's module is imported here
        structured = returns_structured(fn)
        if not annotations.read_only_hint:
            fn = idempotent(name, fn)
        server.add_tool(
            model_errors(fn),
            name=name,
            title=title,
            annotations=annotations.mcp(),
            description=describe(fn.__doc__ or ""),
            structured_output=structured,
        )
        tidy_published_schema(server, name)
