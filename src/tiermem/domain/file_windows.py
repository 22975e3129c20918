"""An open file's window as an agent's view keeps it: no more of its text than any rendering of it shows.

Letta keeps an open file's visible text cut to the agent's per-file limit (``truncate_file_visible_content`` before
it is stored). tiermem renders the window whole when the file is opened and cuts it when it is shown
(``file_views.truncate_visible``, with the limit of the model's context window when the agent has none of its own),
so the view keeps the window's first ``kept_chars + 1`` characters: cut at any limit up to ``kept_chars`` they show
exactly what the whole window shows (the one character more makes them cut, and cut at the same place), and a 5 MB
file open in an agent no longer puts 5 MB in the agent's row, rewritten by every change to its files.

What needs the whole window renders it again from the file's text (``Filesystem.whole_window``): an agent file's
export (``visible_content``), and a limit raised past ``kept_chars``.
"""

from __future__ import annotations

from .file_views import DEFAULT_CORE_MEMORY_SOURCE_CHAR_LIMIT


def kept_chars(char_limit: int | None) -> int:
    """The most characters of an open window any rendering shows: the agent's own limit, or else the largest of
    Letta's defaults (a context window's limits are at most ``DEFAULT_CORE_MEMORY_SOURCE_CHAR_LIMIT``)."""
    return max(char_limit or 0, DEFAULT_CORE_MEMORY_SOURCE_CHAR_LIMIT)


def kept(visible: str, char_limit: int | None) -> str:
    """``visible`` as a view keeps it: whole when it fits ``kept_chars``, else its first ``kept_chars + 1``
    characters."""
    most = kept_chars(char_limit)
    return visible if len(visible) <= most else visible[: most + 1]


def is_cut(visible: str, char_limit: int | None) -> bool:
    """Whether a kept window may be cut (``kept``): longer than ``kept_chars``, so not known to be whole."""
    return len(visible) > kept_chars(char_limit)
