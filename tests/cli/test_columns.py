"""Plain aligned columns (``qosched.cli.columns``): what ``qosched status`` prints to a pipe."""

from __future__ import annotations

import pytest

from qosched.cli.columns import plain_table


def test_columns_are_padded_to_their_widest_cell_and_lines_end_without_spaces() -> None:
    lines = plain_table(["ID", "NAME", "QOS"], [["j-1", "a", "on track"], ["j-22", "bbbb", ""]])
    assert lines == [
        "ID    NAME  QOS",
        "j-1   a     on track",
        "j-22  bbbb",
    ]


def test_a_line_break_or_tab_in_a_cell_stays_on_its_row() -> None:
    lines = plain_table(["ID", "QOS"], [["j-1", "✗ failed:\n  Traceback\tline 3 "]])
    assert lines == ["ID   QOS", "j-1  ✗ failed: Traceback line 3"]


def test_nothing_is_cut_however_long() -> None:
    long = "x" * 300
    assert plain_table(["ID", "NAME"], [["j-1", long]])[1] == f"j-1  {long}"


def test_a_row_of_another_width_than_the_header_is_refused() -> None:
    with pytest.raises(ValueError, match="row 1 has 1 cells, the header 2"):
        plain_table(["ID", "NAME"], [["j-1", "a"], ["j-2"]])
