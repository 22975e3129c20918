"""An open window kept cut (domain/file_windows.py) of an agent that came from an agent file: rendered whole again
for an export and a raised limit when its folder is shared with the file's uploader (whose row holds the hash of the
bytes, not the text: CRLF here), and never shown whole when it cannot be rendered again (lines past the file's end):
then cut, with Letta's ``...[TRUNCATED]`` note."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

from tiermem.domain.file_views import OpenRequest
from tiermem.domain.filesystem import STATE_KEY, AgentFiles, render_agent_directories
from tiermem.domain.memory import Memory
from tiermem.interop import af_export
from tiermem.interop.commands import run_export, run_import

LINE = "the quick brown fox jumps over the lazy dog, line %d"


def _exported(memory: Memory, tmp_path: Path, end: str) -> tuple[str, Path]:
    agent = memory.ensure_agent("default").id
    memory.files.create_folder("docs")
    big = "".join(LINE % i + end for i in range(2_500)).encode()  # ~130,000 characters: kept cut at 50,001
    memory.files.upload_many("docs", [("big.txt", big, "")], embed=False)
    memory.files.attach(agent, "docs")
    out = tmp_path / "default.af"
    run_export(memory, agent="default", fmt="af", output=str(out), vectors=False)
    return agent, out


def _visible(memory: Memory, name: str) -> str:
    data = af_export.export_agent_files(memory, [name])[0]
    return str(data["agents"][0]["files_agents"][0]["visible_content"])


def test_a_crlf_file_shared_by_an_imported_agent_is_rendered_whole_again(memory: Memory, tmp_path: Path) -> None:
    first, out = _exported(memory, tmp_path, "\r\n")
    whole = json.loads(out.read_text())["agents"][0]["files_agents"][0]["visible_content"]
    assert len(whole) > 120_000
    run_import(memory, out, fmt="af", agent="default", rename="second", replace=False)
    assert [f.name for f in memory.files.folders()] == ["docs"]  # shared, not a copy
    second = memory.get_agent("second").id
    view = memory.files.state(second).view("docs/big.txt")
    assert view is not None and view.sha256 == memory.files.files("docs")[0].sha256  # of the row it shows
    assert _visible(memory, "second") == whole  # exported whole, as the first agent's
    memory.files.set_limits(second, None, 200_000)
    shown = render_agent_directories(memory.core.get_agent(second))
    assert f"<value>\n{whole}\n</value>" in shown and "[TRUNCATED]" not in shown
    memory.files.set_limits(first, None, 200_000)
    assert shown == render_agent_directories(memory.core.get_agent(first))


def test_a_window_past_its_files_end_exports_and_raises_its_limit_shown_cut(memory: Memory, tmp_path: Path) -> None:
    _, out = _exported(memory, tmp_path, "\n")
    data = json.loads(out.read_text())
    view = data["agents"][0]["files_agents"][0]
    view["start_line"], view["end_line"] = 3_000, 3_100  # the file has 2,500 lines (a hand-edited agent file)
    out.write_text(json.dumps(data))
    run_import(memory, out, fmt="af", agent="default", rename="third", replace=False)
    third = memory.get_agent("third").id
    kept = _visible(memory, "third")  # not refused: the window as kept, cut, and saying so
    assert kept.endswith("[TRUNCATED]\n" + kept.split("[TRUNCATED]\n")[-1]) and len(kept) == 50_000
    assert kept.startswith(view["visible_content"][:49_000])
    memory.files.set_limits(third, None, 200_000)
    shown = render_agent_directories(memory.core.get_agent(third))
    assert f"<value>\n{kept}\n</value>" in shown and "- chars_limit=200000" in shown
    answer = memory.open_files(third, [OpenRequest("docs/big.txt", offset=10, length=5)])  # opened again: shown
    assert "(previously lines 3000-3100)" in answer, answer
    assert "[TRUNCATED]" not in render_agent_directories(memory.core.get_agent(third))


def test_a_view_holding_its_files_text_hash_is_rendered_whole_again(memory: Memory, tmp_path: Path) -> None:
    """An agent imported before its view took the shared row's hash holds the hash of the file's text: the window is
    recognised by the stored text and rendered whole, not exported as its cut."""
    _, out = _exported(memory, tmp_path, "\r\n")
    whole = json.loads(out.read_text())["agents"][0]["files_agents"][0]["visible_content"]
    run_import(memory, out, fmt="af", agent="default", rename="second", replace=False)
    second = memory.core.get_agent(memory.get_agent("second").id)
    state = AgentFiles.of(second)
    text = memory.files.text("docs", "big.txt")
    state.files[0].sha256 = hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert state.files[0].sha256 != memory.files.files("docs")[0].sha256
    memory.core.update_agent(replace(second, metadata={**second.metadata, STATE_KEY: state.to_json()}))
    assert _visible(memory, "second") == whole


def test_a_window_ending_before_it_starts_is_cut_again_from_its_changed_file(memory: Memory, tmp_path: Path) -> None:
    _, out = _exported(memory, tmp_path, "\n")
    data = json.loads(out.read_text())
    data["agents"][0]["files_agents"][0]["start_line"], data["agents"][0]["files_agents"][0]["end_line"] = 20, 5
    out.write_text(json.dumps(data))
    run_import(memory, out, fmt="af", agent="default", rename="third", replace=False)
    third = memory.get_agent("third").id
    changed = "".join(f"changed {i}\n" for i in range(100)).encode()
    memory.files.upload_many("docs", [("big.txt", changed, "")], embed=False)  # every view of it cut again
    view = memory.files.state(third).view("docs/big.txt")
    assert view is not None and (view.start_line, view.end_line) == (None, None)
    assert view.visible.startswith("[Viewing file start (out of 100 lines)]\n1: changed 0\n")
