"""Reader of Mooncake JSONL traces (`timestamp` ms, `input_length`, `output_length`, `hash_ids`).

Source: kvcache-ai/Mooncake, FAST25-release/traces/*.jsonl (Apache-2.0; Qin et al.,
"Mooncake", FAST 2025). One JSON object per line, sorted by `timestamp` (milliseconds from the
start of the trace). `hash_ids` are remapped prefix-block hashes, one per 512-token block of
the input: equal ids at the same position mean a reusable KV-cache prefix block. We keep them,
per request, for prefix-sharing policies.
"""

from __future__ import annotations

import json
from numbers import Real
from pathlib import Path

import numpy as np

from refimpl.errors import TraceFormatError
from refimpl.workloads._columns import check_non_decreasing, count_column
from refimpl.workloads.workload import Workload, new_workload

__all__ = ["MOONCAKE_FIELDS", "read_mooncake_jsonl"]

MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


def read_mooncake_jsonl(path: Path, lines: list[str]) -> Workload:
    """A Mooncake trace from its lines; arrivals in seconds relative to the first row."""
    timestamp_ms = np.empty(len(lines))  # float64 (n,)
    input_length: list[str] = []  # kept as text so `count_column` checks them in one pass
    output_length: list[str] = []
    hash_ids: list[tuple[int, ...]] = []
    for i, line in enumerate(lines):
        where = f"{path}:{i + 1}"
        row = _parse_row(line, where)
        timestamp_ms[i] = _timestamp(row["timestamp"], where)
        input_length.append(_count_text(row["input_length"]))
        output_length.append(_count_text(row["output_length"]))
        hash_ids.append(_hashes(row["hash_ids"], where))
    check_non_decreasing(path, "timestamp", timestamp_ms, first_line=1)
    return new_workload(
        path.stem,
        (timestamp_ms - timestamp_ms[0]) / 1000.0,
        count_column(path, "input_length", input_length, first_line=1),
        count_column(path, "output_length", output_length, first_line=1),
        hash_ids=tuple(hash_ids),
    )


def _parse_row(line: str, where: str) -> dict:
    """One line as a JSON object holding every Mooncake field."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as error:
        raise TraceFormatError("json", line[:80], f"not JSON ({error.msg})", where=where) from None
    if not isinstance(row, dict):
        raise TraceFormatError("json", line[:80], "not a JSON object", where=where)
    for field in MOONCAKE_FIELDS:
        if field not in row:
            raise TraceFormatError(field, line[:80], "missing field", where=where)
    return row


def _timestamp(value: object, where: str) -> float:
    """A finite millisecond timestamp."""
    if isinstance(value, bool) or not isinstance(value, Real) or not np.isfinite(value):
        raise TraceFormatError("timestamp", value, "not a number of milliseconds", where=where)
    return float(value)


def _count_text(value: object) -> str:
    """A JSON token count as text for `count_column`: whole numbers pass, anything else fails."""
    if type(value) is int:  # JSON integers decode to exactly int; bool is rejected
        return str(value)
    return repr(value)  # e.g. "1.5", "'12'", "None": rejected as "not a whole number"


def _hashes(value: object, where: str) -> tuple[int, ...]:
    """The block hash ids, a list of whole numbers."""
    # JSON integers decode to exactly `int` (bool is a subclass, so `type`, not isinstance);
    # comparing the set of types is ~10x faster than an ABC check per id on 120k ids.
    if not isinstance(value, list) or not set(map(type, value)) <= {int}:
        raise TraceFormatError("hash_ids", value, "not a list of integers", where=where)
    return tuple(value)
