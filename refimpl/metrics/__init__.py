"""Serving metrics: per-request and per-step records, their summaries, tables and plots."""

from refimpl.metrics.records import FINISHED, REJECTED, RequestRecords, StepRecords

__all__ = ["FINISHED", "REJECTED", "RequestRecords", "StepRecords"]
