"""The Perfetto trace follows the Trace Event Format: names, phases, timestamps monotone per
track, slices that do not overlap on a track, and one slice per prefill or decode step."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict

from refimpl.export import perfetto_trace
from refimpl.export.perfetto import write_perfetto_trace

PHASES = {"X", "C", "M"}  # complete slices, counters, metadata: all this trace uses


def check_trace_event_format(trace: dict) -> dict:
    """Assert the JSON-object form's rules; return the events by kind for more checks."""
    assert set(trace) >= {"traceEvents"}
    events = trace["traceEvents"]
    tracks: dict = defaultdict(list)
    counters: dict = defaultdict(list)
    names: dict = {}
    for event in events:
        assert isinstance(event["name"], str) and event["name"]
        assert event["ph"] in PHASES
        assert isinstance(event["pid"], int)
        if event["ph"] == "M":
            assert event["name"] in {"process_name", "thread_name", "thread_sort_index"}
            assert "args" in event
            names[(event["pid"], event["tid"], event["name"])] = event["args"]
            continue
        assert isinstance(event["ts"], (int, float)) and event["ts"] >= 0
        if event["ph"] == "X":
            assert isinstance(event["dur"], (int, float)) and event["dur"] >= 0
            tracks[(event["pid"], event["tid"])].append(event)
        else:
            assert event["args"] and all(isinstance(v, (int, float))
                                         for v in event["args"].values())
            counters[(event["pid"], event["name"])].append(event)
    for slices in tracks.values():  # in file order: monotone, and never overlapping
        for before, after in itertools.pairwise(slices):
            assert before["ts"] + before["dur"] <= after["ts"]
    for samples in counters.values():
        assert all(a["ts"] <= b["ts"] for a, b in itertools.pairwise(samples))
    for pid, tid in tracks:  # every track is named
        assert (pid, tid, "thread_name") in names and (pid, 0, "process_name") in names
    return {"tracks": tracks, "counters": counters, "names": names}


def test_a_run_trace_validates_and_has_a_slice_per_prefill_and_decode_step(small_run, tmp_path):
    path = write_perfetto_trace(small_run.steps, tmp_path / "trace.json")
    trace = json.loads(path.read_text())  # strict JSON: no NaN
    found = check_trace_event_format(trace)
    steps = small_run.steps
    by_name = {found["names"][(1, tid, "thread_name")]["name"]: slices
               for (_, tid), slices in found["tracks"].items()}
    assert len(by_name["prefill"]) == int((steps.num_prefill_chunks > 0).sum()) > 0
    assert len(by_name["decode"]) == int((steps.num_decode > 0).sum()) > 0
    assert [e["args"]["tokens"] for e in by_name["prefill"]] == [
        int(t) for t in steps.num_prefill_tokens[steps.num_prefill_chunks > 0]]
    assert len(found["counters"][(1, "KV pages")]) == len(steps)
    assert len(found["counters"][(1, "waiting")]) == len(steps)
    first = by_name["decode"][0]
    step = first["args"]["step"]
    assert abs(first["ts"] - steps.start_s[step] * 1e6) < 1e-3


def test_several_policies_are_separate_processes(small_run):
    trace = perfetto_trace({"a": small_run.steps, "b": small_run.steps})
    found = check_trace_event_format(trace)
    assert {pid for pid, _ in found["tracks"]} == {1, 2}
    assert found["names"][(2, 0, "process_name")] == {"name": "b"}
