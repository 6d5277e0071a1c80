"""The one Markdown table writer (shopping_companion/markdown.py) of every report."""

from __future__ import annotations

import pytest

from shopping_companion.markdown import markdown_cell, markdown_table


def test_a_table_is_header_rule_and_rows():
    assert markdown_table(["a", "b"], [[1, "x"], [None, 2.5]]) == "| a | b |\n|---|---|\n| 1 | x |\n| | 2.5 |"
    assert markdown_table(["", ""], []) == "| | |\n|---|---|"


def test_pipes_and_line_breaks_cannot_split_a_row():
    row = markdown_table(["k", "v"], [["a|b", "one\ntwo\r\nthree\rfour"]]).splitlines()[2]
    assert row == "| a\\|b | one two three four |"
    assert markdown_cell("x | y") == "x \\| y" and markdown_cell(None) == ""


def test_alignment_per_column_or_for_all():
    assert markdown_table(["a", "b", "c"], [], align=["", "right", "center"]).splitlines()[1] == "|---|---:|:---:|"
    assert markdown_table(["a", "b"], [], align="left").splitlines()[1] == "|:---|:---|"
    with pytest.raises(ValueError, match="align"):
        markdown_table(["a", "b"], [], align=["right"])
    with pytest.raises(ValueError, match="align"):
        markdown_table(["a"], [], align="middle")


def test_a_row_of_another_width_is_refused():
    with pytest.raises(ValueError, match="row 1: 1 cells for 2 columns"):
        markdown_table(["a", "b"], [[1, 2], [3]])
