"""Serving metrics: per-request and per-step records, their summaries, tables, plots and JSON."""

from refimpl.metrics.latency import RequestLatencies, request_latencies
from refimpl.metrics.percentiles import PERCENTILES, describe, percentile
from refimpl.metrics.plots import (
    latency_cdfs_figure,
    plot_latency_cdfs,
    plot_timeline,
    timeline_figure,
)
from refimpl.metrics.records import FINISHED, REJECTED, RequestRecords, StepRecords
from refimpl.metrics.report import build_report, json_ready, write_report
from refimpl.metrics.summary import makespan_s, summarize, summarize_by_class
from refimpl.metrics.table import format_comparison, format_run

__all__ = [
    "FINISHED",
    "PERCENTILES",
    "REJECTED",
    "RequestLatencies",
    "RequestRecords",
    "StepRecords",
    "build_report",
    "describe",
    "format_comparison",
    "format_run",
    "json_ready",
    "latency_cdfs_figure",
    "makespan_s",
    "percentile",
    "plot_latency_cdfs",
    "plot_timeline",
    "request_latencies",
    "summarize",
    "summarize_by_class",
    "timeline_figure",
    "write_report",
]
