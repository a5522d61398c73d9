"""CSV files read at the boundary: a file that is not UTF-8 text, or not CSV, is an InputError
naming the file and line, never a traceback from the codec or the csv module."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from qosched.core.errors import InputError

# A byte-order mark, as spreadsheet programs write, is accepted and dropped.
ENCODING = "utf-8-sig"


class CsvRows:
    """The rows of an open CSV file, like ``csv.reader``, with its ``line_num``."""

    def __init__(self, handle, path: Path) -> None:
        self._reader = csv.reader(handle)
        self._path = path

    @property
    def line_num(self) -> int:
        return self._reader.line_num

    def __iter__(self) -> CsvRows:
        return self

    def __next__(self) -> list[str]:
        try:
            return next(self._reader)
        except UnicodeDecodeError as exc:
            line = first_undecodable_line(self._path)
            raise InputError(
                f"not UTF-8 text: {exc.reason}", source=self._path, line=line
            ) from None
        except csv.Error as exc:
            raise InputError(
                f"not a CSV file: {exc}", source=self._path, line=self._reader.line_num
            ) from None


@contextmanager
def open_csv(path: str | Path, what: str) -> Iterator[CsvRows]:
    """``with open_csv(path, "trace") as rows``: the file's rows; InputError when it cannot be
    opened (``cannot read trace: ...``), is not UTF-8 text, or is not CSV."""
    path = Path(path)
    try:
        handle = path.open(newline="", encoding=ENCODING)
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror}", source=path) from exc
    with handle:
        yield CsvRows(handle, path)


def read_text(path: str | Path, what: str) -> str:
    """A whole small file's text (a cluster spec, a speed table); the same errors as `open_csv`."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror}", source=path) from exc
    try:
        return data.decode(ENCODING)
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(f"not UTF-8 text: {exc.reason}", source=path, line=line) from None


def first_undecodable_line(path: Path) -> int | None:
    """The number of the first line that is not UTF-8 (None if the file now reads cleanly).

    The text reader decodes in chunks, so its error does not say which line; reading again line
    by line does. No UTF-8 sequence contains a newline byte, so splitting first is safe.
    """
    try:
        with path.open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                try:
                    raw.decode(ENCODING if number == 1 else "utf-8")
                except UnicodeDecodeError:
                    return number
    except OSError:
        return None
    return None


def header_columns(
    rows: CsvRows, path: Path, needed: tuple[str, ...], layout: str = ""
) -> dict[str, int]:
    """Where each of the ``needed`` columns is in the header row (the first), by name: a file
    whose header lacks one is an InputError naming them all (and ``layout``, the kind of file
    expected, when given)."""
    try:
        header = [name.strip() for name in next(rows)]
    except StopIteration:
        raise InputError("empty file; expected a header row", source=path) from None
    missing = [name for name in needed if name not in header]
    if missing:
        raise InputError(
            f"missing column(s) {', '.join(missing)}; expected {','.join(needed)}"
            + (f" ({layout})" if layout else ""),
            source=path,
            line=1,
        )
    return {name: header.index(name) for name in needed}


def data_rows(
    rows: CsvRows, path: Path, columns: dict[str, int]
) -> Iterator[tuple[int, list[str]]]:
    """The non-blank rows with their line numbers, their cells stripped, each long enough to
    hold every column read (by the header's place of each, which need not be the first ones)."""
    last = max(columns, key=columns.__getitem__)
    width = columns[last] + 1
    for row in rows:
        if not any(cell.strip() for cell in row):
            continue
        if len(row) < width:
            raise InputError(
                f"expected at least {width} fields ({last} is field {width}), got {len(row)}",
                source=path,
                line=rows.line_num,
            )
        yield rows.line_num, [cell.strip() for cell in row]
