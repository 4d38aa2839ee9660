"""Exports of a run's records: per-request and per-step tables (CSV or Parquet) and a
Perfetto trace of its steps."""

from refimpl.export.perfetto import perfetto_trace, write_perfetto_trace
from refimpl.export.requests import REQUEST_COLUMNS, export_requests, request_columns
from refimpl.export.steps import STEP_COLUMNS, export_steps, step_columns
from refimpl.export.tables import TABLE_SUFFIXES, read_table, write_table

__all__ = [
    "REQUEST_COLUMNS",
    "STEP_COLUMNS",
    "TABLE_SUFFIXES",
    "export_requests",
    "export_steps",
    "perfetto_trace",
    "read_table",
    "request_columns",
    "step_columns",
    "write_perfetto_trace",
    "write_table",
]
