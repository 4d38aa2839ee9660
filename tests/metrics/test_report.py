"""The JSON report: strict JSON (no NaN), sorted keys, a faithful round trip, stable bytes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from refimpl.metrics import build_report, json_ready, summarize, write_report

from ._records import make_requests, make_steps, rejected
from .test_summary import MISSION_KEYS, ROWS

SETTINGS = {"policy": "vllm", "rate": np.float64(2.5), "seed": np.int64(7),
            "trace": Path("/tmp/x.csv"), "sizes": (1, 2)}


def _runs():
    return {"vllm": (make_requests(ROWS), make_steps([1.0, 2.0], kv_total_pages=8,
                                                    kv_used_pages=[1, 3])),
            "all-rejected": (make_requests([rejected(0.0, "kv_full")]), None)}


def test_round_trip_keeps_every_figure(tmp_path):
    report = build_report(_runs(), SETTINGS)
    path = write_report(report, tmp_path / "out" / "report.json")
    loaded = json.loads(path.read_text())
    assert loaded == report
    assert loaded["settings"] == {"policy": "vllm", "rate": 2.5, "seed": 7,
                                  "trace": "/tmp/x.csv", "sizes": [1, 2]}
    vllm = loaded["policies"]["vllm"]
    assert set(MISSION_KEYS) <= set(vllm)
    assert vllm["slo_attainment"] == 0.5
    assert vllm["by_class"]["chat"]["num_requests"] == 3
    assert loaded["policies"]["all-rejected"]["ttft_p50_s"] is None


def test_output_is_strict_json_with_sorted_keys_and_stable_bytes(tmp_path):
    first = write_report(build_report(_runs(), SETTINGS), tmp_path / "a.json").read_text()
    second = write_report(build_report(_runs(), SETTINGS), tmp_path / "b.json").read_text()
    assert first == second
    assert "NaN" not in first and "Infinity" not in first

    def check_sorted(value):
        if isinstance(value, dict):
            assert list(value) == sorted(value)
            for item in value.values():
                check_sorted(item)

    check_sorted(json.loads(first, parse_constant=lambda name: math.nan))


def test_json_ready_drops_non_finite_numbers():
    assert json_ready({"a": math.nan, 1: np.float32(np.inf), "b": [np.int32(3), -math.inf]}) == {
        "a": None, "1": None, "b": [3, None]}


def test_summary_values_are_plain_python_types():
    for value in summarize(make_requests(ROWS), make_steps([1.0], kv_total_pages=2,
                                                            kv_used_pages=[1])).values():
        assert value is None or type(value) in (int, float, dict), type(value)
