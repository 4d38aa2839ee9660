"""A run's steps as a Chrome trace-event JSON file, which the Perfetto UI and chrome://tracing open.

The Trace Event Format (Google's "Trace Event Format" document, the JSON object form): each
policy is a process (`pid`), with two threads (tracks): `prefill`, one complete slice
(`ph: "X"`) per step that computed prompt chunks, and `decode`, one per step that decoded a
batch; a step that does both shows on both tracks over the same span (one fused batch). Two
counters (`ph: "C"`) per process: `KV pages` in use after each step, and `waiting`, the
requests queued at each step. Metadata events (`ph: "M"`) name the processes and threads.
Timestamps are microseconds on the run's clock (simulated or measured), rounded to the
nanosecond so a step never appears to overlap the next.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from refimpl.metrics.records import StepRecords

__all__ = ["perfetto_trace", "write_perfetto_trace"]

PREFILL_TID, DECODE_TID = 1, 2
_US = 1e6  # microseconds per second: the format's time unit


def perfetto_trace(runs: dict[str, StepRecords] | StepRecords) -> dict:
    """The trace-event JSON object of one run's steps, or of several (`{policy: steps}`, one
    process each)."""
    if isinstance(runs, StepRecords):
        runs = {"run": runs}
    events: list[dict] = []
    for pid, (name, steps) in enumerate(runs.items(), start=1):
        events += _metadata(pid, name)
        events += _step_events(pid, steps)
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"producer": "refimpl", "clock": "seconds of the run, as microseconds"}}


def write_perfetto_trace(runs: dict[str, StepRecords] | StepRecords, path: str | Path) -> Path:
    """Write `perfetto_trace(runs)` to `path` (folders created); return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    with open(partial, "w", encoding="utf-8") as stream:
        json.dump(perfetto_trace(runs), stream, separators=(",", ":"), allow_nan=False)
    os.replace(partial, path)
    return path


def _metadata(pid: int, name: str) -> list[dict]:
    """Names for the process and its two tracks, and the tracks' order in the UI."""
    events = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}}]
    for tid, track in ((PREFILL_TID, "prefill"), (DECODE_TID, "decode")):
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                       "args": {"name": track}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                       "args": {"sort_index": tid}})
    return events


def _step_events(pid: int, steps: StepRecords) -> list[dict]:
    """Slices for the prefill chunks and decode batches of each step, then the counters."""
    start_us = np.round(np.asarray(steps.start_s) * _US, 3)  # (num_steps,)
    end_us = np.round((np.asarray(steps.start_s) + np.asarray(steps.duration_s)) * _US, 3)
    events = []
    for i in range(len(steps)):
        ts, dur = float(start_us[i]), float(end_us[i] - start_us[i])
        chunks, batch = int(steps.num_prefill_chunks[i]), int(steps.num_decode[i])
        if chunks:
            events.append({"name": "prefill", "cat": "prefill", "ph": "X", "ts": ts,
                           "dur": dur, "pid": pid, "tid": PREFILL_TID,
                           "args": {"step": i, "chunks": chunks,
                                    "tokens": int(steps.num_prefill_tokens[i])}})
        if batch:
            events.append({"name": "decode", "cat": "decode", "ph": "X", "ts": ts, "dur": dur,
                           "pid": pid, "tid": DECODE_TID, "args": {"step": i, "batch": batch}})
    # Counters: KV pages as the step left them (at its end), the queue as the step saw it.
    for i in range(len(steps)):
        events.append({"name": "KV pages", "ph": "C", "ts": float(end_us[i]), "pid": pid,
                       "args": {"used": int(steps.kv_used_pages[i])}})
    for i in range(len(steps)):
        events.append({"name": "waiting", "ph": "C", "ts": float(start_us[i]), "pid": pid,
                       "args": {"requests": int(steps.num_waiting[i])}})
    return events
