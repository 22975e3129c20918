"""An open file's window is kept bounded in the agent's row (domain/file_windows.py): a large open file no longer
makes every change to the agent's files rewrite megabytes, while what the model is shown, the limits' effect and an
agent file's export of the window stay as they were."""

from __future__ import annotations

import json

from tiermem.domain.file_views import OpenRequest, file_defaults, render_window, truncate_visible, view_lines
from tiermem.domain.file_windows import kept, kept_chars
from tiermem.domain.filesystem import STATE_KEY, render_agent_directories
from tiermem.domain.memory import Memory
from tiermem.interop import af_export

LINE = "the quick brown fox jumps over the lazy dog, line %d\n"
BIG = "".join(LINE % i for i in range(2_500))  # ~130,000 characters: a window over every default limit


def _whole(name: str) -> str:
    """The whole window of docs/big.txt opened from its start, as Letta renders it."""
    return render_window(name, view_lines(BIG, "line_based"), "line_based", None, None)


def _big_open(memory: Memory) -> str:
    agent = memory.ensure_agent("default")
    memory.files.create_folder("docs")
    memory.files.upload_many("docs", [("big.txt", BIG.encode(), ""), ("small.txt", b"tiny", "")], embed=False)
    memory.files.attach(agent.id, "docs")  # opens both, as Letta's attach
    return agent.id


def _stored(memory: Memory, agent_id: str) -> str:
    return str(memory.core.get_agent(agent_id).metadata[STATE_KEY])


def test_a_large_open_file_is_kept_bounded_and_shown_as_before(memory: Memory) -> None:
    agent_id = _big_open(memory)
    memory.files.open_files(agent_id, [OpenRequest("docs/small.txt")])
    whole = _whole("docs/big.txt")
    assert len(whole) > 120_000
    stored = _stored(memory, agent_id)
    assert len(stored) < kept_chars(None) + 5_000  # not the whole window (~130 KB before)
    agent = memory.core.get_agent(agent_id)
    for window in (None, 8_000, 32_000, 200_000, 1_000_000):  # every default limit: cut where the whole one is
        limit = file_defaults(window)[1]
        shown = render_agent_directories(agent, window)
        assert f"<value>\n{truncate_visible(whole, limit)}\n</value>" in shown
        assert f"- chars_current={limit}\n" in shown


def test_a_raised_limit_shows_more_of_a_window_kept_cut(memory: Memory) -> None:
    agent_id = _big_open(memory)
    memory.files.set_limits(agent_id, None, 100_000)
    shown = render_agent_directories(memory.core.get_agent(agent_id))
    assert f"<value>\n{truncate_visible(_whole('docs/big.txt'), 100_000)}\n</value>" in shown
    memory.files.set_limits(agent_id, None, 1_000_000)  # the whole window fits: shown whole, not cut
    assert f"<value>\n{_whole('docs/big.txt')}\n</value>" in render_agent_directories(memory.core.get_agent(agent_id))


def test_an_agent_file_exports_the_whole_window(memory: Memory) -> None:
    agent_id = _big_open(memory)
    memory.files.open_files(agent_id, [OpenRequest("docs/big.txt", offset=10, length=2_000)])
    data = af_export.export_agent_files(memory, ["default"])[0]
    views = {fa["file_name"]: fa for fa in data["agents"][0]["files_agents"]}
    big = views["docs/big.txt"]
    lines = view_lines(BIG, "line_based")
    assert big["visible_content"] == render_window("docs/big.txt", lines, "line_based", 10, 2_010)
    assert (big["start_line"], big["end_line"]) == (11, 2_010)
    assert views["docs/small.txt"]["visible_content"] == "[Viewing file start (out of 1 lines)]\n1: tiny"
    assert json.loads(_stored(memory, agent_id))  # still one JSON value


def test_kept_cuts_where_every_smaller_limit_cuts() -> None:
    text = "x" * 60_000
    assert kept("short", None) == "short" and len(kept(text, None)) == kept_chars(None) + 1
    assert kept_chars(200_000) == 200_000 and kept(text, 200_000) == text
    for limit in (100, 5_000, 49_999, 50_000):
        assert truncate_visible(kept(text, None), limit) == truncate_visible(text, limit)


def test_file_views_counts_the_characters_the_agent_is_shown(memory: Memory) -> None:
    """``Memory.file_views`` (the MCP file resources' ``visible_chars``) is what ``<directories>`` shows the agent,
    not the longer cut the view keeps (``kept``)."""
    agent_id = _big_open(memory)
    whole = _whole("docs/big.txt")
    for char_limit in (None, 5_000, 100_000):
        memory.files.set_limits(agent_id, None, char_limit)
        limit = char_limit or file_defaults(None)[1]
        views = {name: (chars, is_open) for name, chars, is_open in memory.file_views(agent_id)}
        shown = render_agent_directories(memory.core.get_agent(agent_id))
        assert f"<value>\n{truncate_visible(whole, limit)}\n</value>" in shown
        assert views["docs/big.txt"] == (len(truncate_visible(whole, limit)), True) == (limit, True)
        assert views["docs/small.txt"][1] and 0 < views["docs/small.txt"][0] < 100
