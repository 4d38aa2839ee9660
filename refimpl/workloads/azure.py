"""Reader of the Azure LLM inference 2023 traces (`TIMESTAMP,ContextTokens,GeneratedTokens`).

Source: Azure/AzurePublicDataset, data/AzureLLMInferenceTrace_{conv,code}.csv (CC BY 4.0;
Patel et al., "Splitwise", ISCA 2024). Timestamps are wall-clock text with seven fractional
digits (`2023-11-16 18:15:46.6805900`, 100 ns resolution), which `datetime.strptime`'s `%f`
(at most six digits) cannot read. We split each at the dot, parse the whole seconds as
`datetime64[s]` and the fraction as an integer count of nanoseconds, and subtract the first row
in integer nanoseconds, so arrival times are exact until the final conversion to float seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import numpy as np

from refimpl.errors import TraceFormatError
from refimpl.workloads._columns import check_non_decreasing, count_column, csv_columns
from refimpl.workloads.workload import Workload, new_workload

__all__ = ["AZURE_COLUMNS", "read_azure_csv"]

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")

_NS_DIGITS = 9  # fractional digits of a nanosecond count


def read_azure_csv(path: Path, lines: list[str]) -> Workload:
    """An Azure 2023 trace from its lines (header first); arrivals relative to the first row."""
    columns = csv_columns(path, lines, AZURE_COLUMNS)
    arrival_ns = _timestamps_ns(path, columns["TIMESTAMP"])  # int64 (n,)
    check_non_decreasing(path, "TIMESTAMP", arrival_ns, first_line=2)
    return new_workload(
        path.stem,
        (arrival_ns - arrival_ns[0]) / 1e9,
        count_column(path, "ContextTokens", columns["ContextTokens"], 2),
        count_column(path, "GeneratedTokens", columns["GeneratedTokens"], 2),
    )


def _timestamps_ns(path: Path, stamps: tuple[str, ...]) -> np.ndarray:
    """`YYYY-MM-DD HH:MM:SS[.fffffff]` texts as int64 (n,) nanoseconds since the epoch."""
    whole, _, fraction = np.char.partition(np.array(stamps), ".").T  # 3 x (n,) str
    is_fraction = (np.char.str_len(fraction) <= _NS_DIGITS) & (
        np.char.isdigit(fraction) | (fraction == "")
    )
    if not is_fraction.all():
        _bad_timestamp(path, stamps, int(np.flatnonzero(~is_fraction)[0]))
    try:
        seconds = np.array(whole, dtype="datetime64[s]").astype(np.int64)  # (n,)
    except ValueError:
        _bad_timestamp(path, stamps, next(i for i, w in enumerate(whole) if not _is_time(w)))
    # "68059" -> "680590000" ns; "" (no fraction) -> "000000000".
    nanoseconds = np.char.ljust(fraction, _NS_DIGITS, "0").astype(np.int64)  # (n,)
    return seconds * 1_000_000_000 + nanoseconds


def _is_time(whole_seconds: str) -> bool:
    """Whether `YYYY-MM-DD HH:MM:SS` parses (the slow path that locates a bad row)."""
    try:
        np.datetime64(whole_seconds, "s")
    except ValueError:
        return False
    return True


def _bad_timestamp(path: Path, stamps: tuple[str, ...], i: int) -> NoReturn:
    """Raise the error for row `i`'s timestamp."""
    raise TraceFormatError(
        "TIMESTAMP", stamps[i], "not a YYYY-MM-DD HH:MM:SS.fffffff time", where=f"{path}:{i + 2}"
    )
