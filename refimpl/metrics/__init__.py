"""Serving metrics: per-request and per-step records, their summaries, tables and plots."""

from refimpl.metrics.latency import RequestLatencies, request_latencies
from refimpl.metrics.percentiles import PERCENTILES, describe, percentile
from refimpl.metrics.records import FINISHED, REJECTED, RequestRecords, StepRecords
from refimpl.metrics.summary import makespan_s, summarize, summarize_by_class

__all__ = [
    "FINISHED",
    "PERCENTILES",
    "REJECTED",
    "RequestLatencies",
    "RequestRecords",
    "StepRecords",
    "describe",
    "makespan_s",
    "percentile",
    "request_latencies",
    "summarize",
    "summarize_by_class",
]
