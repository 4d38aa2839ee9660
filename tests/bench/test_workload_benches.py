"""The benchmarks that serve a workload serve it in the SLO set they are given."""

from __future__ import annotations

import os

import pytest

from refimpl.bench import admission, engine, serving
from refimpl.config import one_class, slo_set


def test_serving_keeps_its_two_settings_unless_given_a_set(monkeypatch):
    seen: dict[str, set] = {}

    def fake_attainment(workload, policy, rate, admission=None):
        seen.setdefault(workload.name, set()).update(
            zip(workload.slo_class.tolist(), workload.priority.tolist(), strict=True))
        return {"rate": rate, "slo_attainment": 1.0, "goodput_req_s": rate}

    monkeypatch.setattr(serving, "attainment", fake_attainment)
    monkeypatch.setattr(serving, "TRACES", {"conv": serving.TRACES["conv"]})
    monkeypatch.setattr(serving, "publish", lambda report, printer, path: report)
    report = serving.run(quick=True)
    assert set(report["results"]) == {"conv/one-class", "conv/mixed"}
    assert report["slo_sets"]["mixed"]["spec"] == "interactive:0.5,batch:0.5"
    report = serving.run(quick=True, slo_set=slo_set("mlperf-llama2-70b-mix"))
    assert set(report["results"]) == {"conv/mlperf-llama2-70b-mix"}
    assert set().union(*seen.values()) >= {("mlperf-llama2-70b-interactive", 0),
                                           ("mlperf-llama2-70b", 1)}


@pytest.mark.parametrize(("spec", "classes"), [("", ["default"]),
                                               ("interactive:0.3,batch:0.7",
                                                ["batch", "interactive"])])
def test_the_engine_bench_child_serves_the_set_it_is_given(spec, classes):
    row = engine._run_child("azure-conv-like", "vllm", 40, spec=spec)
    assert row["num_requests"] == 40 and row["slo_classes"] == classes


def test_one_class_sets_spec_round_trips_for_the_child():
    assert slo_set(one_class("interactive").spec).classes == one_class("interactive").classes


def test_the_admission_table_names_the_set_and_the_rejection_reasons(capsys):
    row = {"goodput_req_s": 9.5, "slo_attainment": 0.8, "accepted_attainment": 0.96,
           "num_rejected": 1203, "rejected_by_reason": {"ttft_p95": 103, "kv_full": 1100},
           "waiting_peak": 7, "peak_rss_bytes": 2**28}
    admission.print_report({
        "num_requests": 2000, "workload": "conv", "model": "llama-3-8b", "hardware": "h100",
        "capacity_req_s": 30.0, "slo_set": slo_set("chat-batch").describe(),
        "runs": {"slo+admission": {"1": row}},
        "goals": {"goodput_4x_over_1x": 1.0, "goodput_goal": 0.9, "accepted_attainment_min": 0.96,
                  "accepted_goal": 0.95, "met": True}})
    out = capsys.readouterr().out
    assert "(SLO interactive:0.5,batch:0.5)" in out
    assert "kv_full 1,100, ttft_p95 103" in out


def test_the_engine_bench_row_is_the_round_of_median_wall_time():
    runs = [{"wall_s": 3.0, "tag": "a"}, {"wall_s": 1.0, "tag": "b"}, {"wall_s": 2.0, "tag": "c"}]
    row = engine.median_round(runs)
    assert row["tag"] == "c" and row["wall_s_rounds"] == [3.0, 1.0, 2.0]
    assert engine.median_round(runs[:1])["tag"] == "a"


def test_the_engine_table_shows_each_rows_spread_and_the_rounds(capsys):
    row = {"admission": False, "num_requests": 100, "num_steps": 900, "wall_s": 2.0,
           "wall_s_rounds": [2.5, 2.0, 1.5], "first_call_s": 0.4, "peak_rss_bytes": 2**28,
           "decision_p50_s": 1e-6, "decision_p99_s": 4e-6}
    engine.print_report({"workload": "w", "model": "m", "hardware": "h", "cold_compile_s": 9.0,
                         "rounds": 3, "goal_s": {"vllm": 2.0}, "goal_python_req_s": 2000,
                         "policies": {"vllm": row}})
    out = capsys.readouterr().out
    assert "1.50-2.50" in out and "median of 3 interleaved" in out


def test_the_engine_bench_compiles_cold_on_an_empty_cache_as_a_new_machine_does(monkeypatch):
    calls = []

    def child(workload, policy, num_requests, env=None, spec=""):
        calls.append(dict(env or {}))
        if env:  # the cold run: its cache folder is there, and empty
            assert os.path.isdir(env["NUMBA_CACHE_DIR"]) and not os.listdir(env["NUMBA_CACHE_DIR"])
        return {"wall_s": 1.0, "first_call_s": 0.5}

    monkeypatch.setattr(engine, "_run_child", child)
    monkeypatch.setattr(engine, "print_report", lambda report: None)
    engine.run(quick=True)
    cold = [env for env in calls if env]
    assert len(cold) == 1 and cold[0]["REFIMPL_NUMBA_CACHE"] == "1"  # the cache on: the split
    assert not os.path.exists(cold[0]["NUMBA_CACHE_DIR"])  # removed after
