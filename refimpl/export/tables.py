"""Column tables written as CSV or Parquet, chosen by the file's suffix.

A table is a dict of equal-length columns (NumPy arrays or lists: numbers, strings, bools, or
None/NaN for a missing value). CSV goes through the standard library, floats written with
`repr` (they read back exactly) and a missing value as an empty field; Parquet through
`pyarrow`, which keeps the column types. Files are written beside their final name and moved
into place, so a reader (or a resumed sweep) never sees half a file.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from refimpl.errors import ConfigError

__all__ = ["TABLE_SUFFIXES", "concat_columns", "read_table", "write_table"]

TABLE_SUFFIXES = (".csv", ".parquet")

Columns = Mapping[str, Sequence | np.ndarray]


def _suffix(field: str, path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise ConfigError(field, str(path), "must end in .csv or .parquet", choices=TABLE_SUFFIXES)
    return suffix


def _plain(value: object) -> object:
    """A cell as a plain Python value: NumPy scalars unwrapped, NaN -> None."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _rows(columns: Columns) -> tuple[list[str], int]:
    names = list(columns)
    lengths = {len(columns[name]) for name in names}
    if len(lengths) > 1:
        raise ConfigError("columns", {n: len(columns[n]) for n in names},
                          "must all have the same length")
    return names, lengths.pop() if lengths else 0


def concat_columns(tables: Sequence[Columns]) -> dict[str, np.ndarray]:
    """Tables with the same columns, one after another."""
    return {name: np.concatenate([np.asarray(t[name]) for t in tables]) for name in tables[0]}


def write_table(columns: Columns, path: str | Path, field: str = "path") -> Path:
    """Write `columns` to `path` (.csv or .parquet; folders created); return the path."""
    path = Path(path)
    suffix = _suffix(field, path)
    names, num_rows = _rows(columns)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    if suffix == ".csv":
        with open(partial, "w", newline="", encoding="utf-8") as stream:
            writer = csv.writer(stream, lineterminator="\n")
            writer.writerow(names)
            for i in range(num_rows):
                writer.writerow(_csv_cell(columns[name][i]) for name in names)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table({name: pa.array([_plain(v) for v in columns[name]]) for name in names})
        pq.write_table(table, partial)
    os.replace(partial, path)
    return path


def _csv_cell(value: object) -> str:
    value = _plain(value)
    if value is None:
        return ""
    return repr(value) if isinstance(value, float) else str(value)


def read_table(path: str | Path) -> dict[str, list]:
    """The columns of a table `write_table` wrote, as lists (CSV cells are strings, and a
    missing value is '')."""
    path = Path(path)
    if _suffix("path", path) == ".csv":
        with open(path, newline="", encoding="utf-8") as stream:
            reader = csv.reader(stream)
            names = next(reader)
            rows = list(reader)
        return {name: [row[k] for row in rows] for k, name in enumerate(names)}
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pydict()
