"""A refused folder name's suggestion is itself a folder name the rules accept (``file_views.check_folder_name``):
trimmed, within 100 characters, without characters no name may hold; ``docs`` when nothing usable is left."""

from __future__ import annotations

import re

import pytest

from tiermem.base.errors import ValidationError
from tiermem.domain.file_views import check_folder_name


@pytest.mark.parametrize(
    ("name", "suggested"),
    [
        ("x" * 99 + " y/z", "x" * 99),  # cut at 100 it would end in a space
        ("a" * 99 + " /b", "a" * 99),  # ... or in the joining '-'
        ("a/\udce9b", "a-b"),  # a byte that is not UTF-8 (os.fsdecode's lone surrogate)
        ("a/\u2028b", "a-b"),
        ("a\x01/b", "a-b"),
        ("a/ b /c", "a-b-c"),
        (" /..", "docs"),
        ("a\\b", "a-b"),
    ],
)
def test_a_refused_folder_names_suggestion_passes_the_same_check(name: str, suggested: str) -> None:
    with pytest.raises(ValidationError) as refused:
        check_folder_name(name)
    found = re.search(r"use e\.g\. '(.*)'\.$", str(refused.value), re.DOTALL)
    assert found is not None, str(refused.value)
    assert found.group(1) == suggested
    assert check_folder_name(found.group(1)) == suggested
