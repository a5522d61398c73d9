"""Plain aligned columns, for a table whose reader is a program: what ``qosched status``
prints when its output is not a terminal.

As ``squeue`` and ``kubectl get`` print theirs: a header line, then one line per row, the
cells padded with spaces to the widest of their column and two spaces between columns. Nothing
is wrapped or cut, whatever the width of a terminal (a line is as long as its cells need), and
no line ends in spaces.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

GAP = "  "
_WHITESPACE = re.compile(r"\s+")


def cell(text: str) -> str:
    """``text`` on one line: a line break or a tab in it (an error message quoted in a cell)
    would split its row, so each run of white space becomes one space."""
    return _WHITESPACE.sub(" ", text).strip()


def plain_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The header and each row as one line of aligned columns."""
    width = len(header)
    for number, row in enumerate(rows):
        if len(row) != width:
            raise ValueError(f"row {number} has {len(row)} cells, the header {width}")
    lines = [[cell(text) for text in row] for row in (header, *rows)]
    widths = [max(len(line[column]) for line in lines) for column in range(width)]
    return [
        GAP.join(text.ljust(widths[column]) for column, text in enumerate(line)).rstrip()
        for line in lines
    ]
