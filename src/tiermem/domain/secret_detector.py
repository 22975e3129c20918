"""What a credential detector is: a pattern and the kind it finds, the cheap tests that skip text it cannot match
(needles, a probe), and the checks its secret must pass; ``secret_scan`` runs them over a text."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Detector:
    kind: str
    pattern: re.Pattern[str]
    needles: tuple[str, ...]  # lower-case; text holding none of them is skipped (a str search, much cheaper)
    group: int | str = 0  # the group holding the secret (0: the whole match)
    check: Callable[[str], bool] | None = None  # a further test of the secret (a JWT decodes, entropy, ...)
    specific: bool = True  # a format of its own; a generic one (keyword, entropy) loses a tie on kind
    per_line: bool = False  # run on the lines holding a needle only (assignment patterns: slow on long prose)
    probe: re.Pattern[str] | None = None  # matches inside every match of ``pattern``: text it misses is skipped
    min_chars: int = 4  # a shorter secret is not one (but a password given as one: its own check decides)
    name_group: int = 0  # the group of the keyword in the name a value is given to (``_names_no_secret``), 0: none
    names: bool = False  # a bare value (not in quotes) that names a secret is code or a reference (``names_a_secret``)
    lines: bool = False  # its secret spans lines (a key block); else, in JSON text, it ends at an escaped "\n"
    # a test of the text before the secret on its line (up to ``numbers.BEFORE`` characters): a cue it needs ("card"),
    # or a label it must not follow ("ticket", "tel")
    before: Callable[[str], bool] | None = None
    # a test of the text before it and after it on its line (up to ``numbers.BEFORE`` and ``numbers.AFTER``)
    around: Callable[[str, str], bool] | None = None
