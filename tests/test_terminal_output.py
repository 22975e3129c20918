"""Stored text printed by the CLI for a person cannot drive the terminal: its control characters (an escape sequence
that retitles the terminal or clears the screen, a bell, a carriage return, C1 controls) and bidirectional controls
are shown as escapes (``quoting.printable``, ``cli/terminal.echo``); ``--json`` output keeps the text exact."""

from __future__ import annotations

import json

import pytest

from tiermem.base.config import Settings
from tiermem.base.quoting import printable
from tiermem.cli.main import main
from tiermem.domain.blocks import Rethink
from tiermem.domain.factory import open_memory

HOSTILE = "hello \x1b]0;PWNED\x07\x1b[2J\x1b[31mRED\x1b[0m \u202eevil\r\x9b2J done"
SHOWN = "hello \\x1b]0;PWNED\\x07\\x1b[2J\\x1b[31mRED\\x1b[0m \\u202eevil\\x0d\\x9b2J done"
RAW = ("\x1b", "\x07", "\u202e", "\r", "\x9b")


def test_printable_escapes_controls_and_keeps_lines_and_tabs() -> None:
    assert printable(HOSTILE) == SHOWN
    assert printable("a\tb\nc \u2067x\u2069 \u200f\x7f\x00") == "a\tb\nc \\u2067x\\u2069 \\u200f\\x7f\\x00"
    assert printable("plain text, é, 日本, 👋") == "plain text, é, 日本, 👋"


def test_the_clis_text_output_shows_stored_controls_as_escapes(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = open_memory(settings, start_embedder=False)
    agent = memory.ensure_agent("default").id
    turn = memory.conversation_log(
        agent, [{"role": "user", "content": HOSTILE, "timestamp": "2024-06-01T10:00:00Z"}]
    ).stored[0]
    passage = memory.archival_insert(agent, "passage " + HOSTILE, None).stored[0]
    memory.link(agent, turn.id, passage, note="why \u202ereversed")
    memory.edit(agent, "human", Rethink("Name: " + HOSTILE, check_line_numbers=False), actor="human")
    memory.archival_search(
        agent, "hello", tags=None, tag_match_mode="any", top_k=5, start_datetime=None, end_datetime=None
    )  # a use: stats lists the passage with a preview
    memory.uses.close()
    memory.core.close()
    cli = ["--data-dir", str(settings.resolved_data_dir()), "--embedding-model", "hashing", "--agent", "default"]
    for argv in (
        ["links", turn.id],
        ["timeline", "--period", "2024-06-01"],
        ["search", "hello"],
        ["blocks", "show", "human"],
        ["blocks", "show", "--core"],
        ["blocks", "history", "human"],
        ["stats"],
    ):
        assert main([*argv, *cli]) == 0, argv
        out = capsys.readouterr().out
        assert not any(c in out for c in RAW), (argv, out)
        assert "\\x1b]0;PWNED\\x07" in out, (argv, out)
    assert main(["links", turn.id, *cli]) == 0
    assert "'why \\u202ereversed'" in capsys.readouterr().out  # a link's note too
    assert main(["search", "hello", "--json", *cli]) == 0  # --json: exact
    assert HOSTILE in {r["content"] for r in json.loads(capsys.readouterr().out)}
    assert main(["blocks", "show", "human", "--json", *cli]) == 0
    assert json.loads(capsys.readouterr().out)["value"] == "Name: " + HOSTILE
