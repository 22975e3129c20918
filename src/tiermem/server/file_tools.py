"""MCP tool adapters for Letta's filesystem: ``open_files``, ``grep_files``, ``semantic_search_files``.

Published while the server's agent has a folder attached (``ToolsOnDemand`` hides them otherwise, and hosts are told
when that changes). Their docstrings are Letta's, and so are their results and error texts (``domain/file_views``).
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from ..domain.file_views import OpenRequest
from ..domain.memory import Memory
from .runtime import runtime_of


class FileOpenRequest(BaseModel):
    """Provides a file to open and the range of lines to show."""

    file_name: str = Field(description="Name of the file to open")
    offset: int | None = Field(
        default=None,
        description="Optional offset for starting line number (0-indexed). "
        "If not specified, starts from beginning of file.",
    )
    length: int | None = Field(
        default=None,
        description="Optional number of lines to view from offset (inclusive). If not specified, views to end of file.",
    )


async def open_files(
    file_requests: list[FileOpenRequest], ctx: Context[Any, Any], close_all_others: bool = False
) -> str:
    """Open one or more files and load their contents into files section in core memory. Maximum of 5 files can be opened simultaneously.

    Use this when you want to:
    - Inspect or reference file contents during reasoning
    - View specific portions of large files (e.g. functions or definitions)
    - Replace currently open files with a new set for focused context (via `close_all_others=True`)

    Examples:
        Open single file belonging to a directory named `project_utils` (entire content):
            file_requests = [{"file_name": "project_utils/config.py"}]

        Open multiple files with different view ranges:
            file_requests = [
                {"file_name": "project_utils/config.py", "offset": 0, "length": 50},     # Lines 1-50
                {"file_name": "project_utils/main.py", "offset": 100, "length": 100},    # Lines 101-200
                {"file_name": "project_utils/utils.py"}                                  # Entire file
            ]

        Close all other files and open new ones:
            open_files(file_requests, close_all_others=True)

    Args:
        file_requests: List of file open requests, each specifying file name and optional view range.
        close_all_others: If True, closes all other currently open files first. Defaults to False.
    """
    requests = [OpenRequest(file_name=r.file_name, offset=r.offset, length=r.length) for r in file_requests]
    return await runtime_of(ctx).call(ctx, Memory.open_files, requests, close_all_others)


async def grep_files(
    pattern: str,
    ctx: Context[Any, Any],
    include: str | None = None,
    context_lines: int | None = 1,
    offset: int | None = None,
) -> str:
    """Searches file contents for pattern matches with surrounding context.

    Results are paginated - shows 20 matches per call. The response includes:
    - A summary of total matches and which files contain them
    - The current page of matches (20 at a time)
    - Instructions for viewing more matches using the offset parameter

    Example usage:
        First call: grep_files(pattern="TODO")
        Next call: grep_files(pattern="TODO", offset=20)  # Shows matches 21-40

    Args:
        pattern: Keyword or regex pattern to search within file contents.
        include: Optional keyword or regex pattern to filter filenames to include in the search.
        context_lines: Number of lines of context to show before and after each match. Equivalent to `-C` in
            grep_files. Defaults to 1.
        offset: Number of matches to skip before showing results. Used for pagination. For example, offset=20 shows
            matches starting from the 21st match. Use offset=0 (or omit) for first page, offset=20 for second page,
            offset=40 for third page, etc. The tool will tell you the exact offset to use for the next page.
    """
    return await runtime_of(ctx).call(ctx, Memory.grep_files, pattern, include, context_lines, offset)


async def semantic_search_files(query: str, ctx: Context[Any, Any], limit: int = 5) -> str:
    """Searches file contents using semantic meaning rather than exact matches.

    Ideal for:
    - Finding conceptually related information across files
    - Discovering relevant content without knowing exact keywords
    - Locating files with similar topics or themes

    Args:
        query: The search query text to find semantically similar content.
        limit: Maximum number of results to return (default: 5)
    """
    return await runtime_of(ctx).call(ctx, Memory.semantic_search_files, query, limit)
