"""Trace files in, workloads out: format detection, `load_trace` and `make_workload`.

The format is read from the file itself, not its name: a first line starting with `{` is
Mooncake JSONL; otherwise the first line is a CSV header, whose column names pick the Azure
2023 reader (`TIMESTAMP,ContextTokens,GeneratedTokens`) or the length-only reader
(`num_prefill_tokens,num_decode_tokens,...`).
"""

from __future__ import annotations

import os
from pathlib import Path

from refimpl.errors import ConfigError, TraceFormatError
from refimpl.workloads._columns import read_lines
from refimpl.workloads.azure import AZURE_COLUMNS, read_azure_csv
from refimpl.workloads.lengths_csv import LENGTH_COLUMNS, read_length_csv
from refimpl.workloads.mooncake import read_mooncake_jsonl
from refimpl.workloads.synthetic import DEFAULT_NUM_REQUESTS, SYNTHETIC, synthetic
from refimpl.workloads.transforms import head, scale_to_rate
from refimpl.workloads.workload import Workload

__all__ = ["TRACE_FORMATS", "detect_format", "load_trace", "make_workload"]

# Format name -> what identifies it (shown when a file matches none).
TRACE_FORMATS = {
    "azure": "CSV header " + ",".join(AZURE_COLUMNS),
    "mooncake": "JSON lines with timestamp, input_length, output_length, hash_ids",
    "lengths": "CSV header with " + ",".join(LENGTH_COLUMNS),
}


def detect_format(path: Path, first_line: str) -> str:
    """`azure`, `mooncake` or `lengths`, from the file's first line."""
    if first_line.lstrip().startswith("{"):
        return "mooncake"
    header = {cell.strip() for cell in first_line.split(",")}
    # Any one known column picks the format, so a file missing another gets "missing column".
    if header & set(AZURE_COLUMNS):
        return "azure"
    if header & set(LENGTH_COLUMNS):
        return "lengths"
    raise TraceFormatError(
        "format",
        first_line[:80],
        "unknown trace format",
        choices=TRACE_FORMATS.values(),
        where=f"{path}:1",
    )


def load_trace(path: str | os.PathLike, *, rate: float | None = None, seed: int = 0) -> Workload:
    """A trace file as a workload, format detected. Arrival traces are time-scaled to `rate`
    (requests/s) if given; length-only files need `rate` for their seeded Poisson arrivals."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("path", str(path), "no such trace file")
    lines = read_lines(path)
    trace_format = detect_format(path, lines[0])
    if trace_format == "lengths":
        return read_length_csv(path, lines, rate=rate, seed=seed)
    reader = read_azure_csv if trace_format == "azure" else read_mooncake_jsonl
    workload = reader(path, lines)
    return workload if rate is None else scale_to_rate(workload, rate)


def make_workload(
    spec: str, *, num_requests: int | None = None, rate: float | None = None, seed: int = 0
) -> Workload:
    """A synthetic workload by name or a trace by path; `num_requests` keeps the first N."""
    if spec in SYNTHETIC:
        return synthetic(
            spec,
            num_requests=DEFAULT_NUM_REQUESTS if num_requests is None else num_requests,
            rate=rate,
            seed=seed,
        )
    if not Path(spec).is_file():
        raise ConfigError(
            "workload", spec, "neither a synthetic workload nor a trace file", choices=SYNTHETIC
        )
    workload = load_trace(spec, rate=rate, seed=seed)
    return workload if num_requests is None else head(workload, num_requests)
