"""Shared parsing for the trace readers: rows of a file, checked columns, located errors.

Columns are converted in one vectorized NumPy pass; only when that fails does a reader walk
the column again to find the first bad cell, so the error names its file, line and field
while the common case stays fast (the 19,366-row Azure trace loads in milliseconds).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from refimpl.errors import TraceFormatError

__all__ = ["check_non_decreasing", "count_column", "csv_columns", "read_lines"]


def read_lines(path: Path) -> list[str]:
    """The file's lines without trailing blank ones; an empty file is a `TraceFormatError`."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # -sig: tolerate a byte-order mark
    except UnicodeDecodeError as error:
        raise TraceFormatError(
            "encoding", "not UTF-8", f"cannot decode ({error.reason})", where=f"{path}:1"
        ) from None
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise TraceFormatError("file", "", "the file is empty", where=f"{path}:1")
    return lines


def csv_columns(
    path: Path, lines: list[str], required: tuple[str, ...]
) -> dict[str, tuple[str, ...]]:
    """The cells of each `required` column, by name, from a CSV's lines (header first)."""
    header = [cell.strip() for cell in lines[0].split(",")]
    for column in required:
        if column not in header:
            raise TraceFormatError(column, lines[0], "missing column", where=f"{path}:1")
    columns = list(zip(*_split_csv(path, lines[1:], header), strict=True))  # one tuple per column
    return {column: columns[header.index(column)] for column in required}


def _split_csv(path: Path, rows: list[str], header: list[str]) -> list[list[str]]:
    """Rows after the header split on commas; each must have as many cells as the header."""
    if not rows:
        raise TraceFormatError("rows", 0, "a header but no requests", where=f"{path}:2")
    cells = [row.split(",") for row in rows]
    num_cells = np.fromiter(map(len, cells), dtype=np.int64, count=len(cells))  # (n,)
    bad = np.flatnonzero(num_cells != len(header))
    if len(bad):
        i = int(bad[0])
        missing = header[num_cells[i]] if num_cells[i] < len(header) else "(extra cell)"
        raise TraceFormatError(
            missing,
            rows[i],
            f"expected {len(header)} comma-separated cells ({','.join(header)}), "
            f"found {num_cells[i]}",
            where=f"{path}:{i + 2}",  # line 1 is the header
        )
    return cells


def count_column(path: Path, field: str, values: Sequence[str], first_line: int) -> np.ndarray:
    """A token-count column as int64 (n,), each >= 1; row i is on line `first_line + i`."""
    try:
        counts = np.array(values).astype(np.int64)  # (n,)
    except (ValueError, OverflowError):
        i = next(i for i, value in enumerate(values) if not _is_int(value))
        raise TraceFormatError(
            field, values[i], "not a whole number", where=f"{path}:{first_line + i}"
        ) from None
    bad = np.flatnonzero(counts < 1)
    if len(bad):
        i = int(bad[0])
        problem = "zero tokens" if counts[i] == 0 else "negative token count"
        raise TraceFormatError(
            field, int(counts[i]), f"{problem}: must be >= 1", where=f"{path}:{first_line + i}"
        )
    return counts


def check_non_decreasing(path: Path, field: str, times: np.ndarray, first_line: int) -> None:
    """Raise at the first row whose time is earlier than the row before it."""
    backwards = np.flatnonzero(np.diff(times) < 0)
    if len(backwards):
        i = int(backwards[0]) + 1
        raise TraceFormatError(
            field,
            times[i].item(),
            f"goes backwards (previous row: {times[i - 1].item()})",
            where=f"{path}:{first_line + i}",
        )


def _is_int(value: str) -> bool:
    """Whether `int()` accepts `value` within int64 (the slow path that locates a bad cell)."""
    try:
        return abs(int(value)) < 2**63
    except ValueError:
        return False
