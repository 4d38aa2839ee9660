"""`refimpl bench robustness` serves every cell of its matrix, loses nothing, and says so."""

from __future__ import annotations

import json

import pytest

from refimpl.bench import robustness
from refimpl.config import one_class


@pytest.mark.slow
def test_a_tiny_matrix_reports_every_cell_and_loses_nothing(tmp_path, capsys):
    report = robustness.run(workloads=("conv",), models=("llama-3-8b",),
                            slo_set=one_class("default"), loads=(0.5, 2), num_requests=60,
                            num_threads=2, json_path=tmp_path / "robustness.json")
    assert json.loads((tmp_path / "robustness.json").read_text()) == report
    (group,) = report["groups"]
    assert set(group["cells"]) == set(robustness.runs()) >= {"slo", "slo+admission", "vllm"}
    assert all(set(by_load) == {"0.5x", "2x"} for by_load in group["cells"].values())
    assert group["best_baseline"] in group["capacities"]
    assert report["checks"]["c"] == {"cells": 2 * len(robustness.runs()), "failing": 0}
    gated = group["cells"]["slo+admission"]["2x"]
    assert gated["false_reject_share"] is not None and gated["num_requests"] == 60
    out = capsys.readouterr().out
    assert "conv / llama-3-8b / default" in out and "(c) nothing lost" in out
    assert robustness.HARDWARE["llama-2-70b"] == "h100-sxm-x4"  # 70B served with TP 4


def _cell(attainment: float, goodput: float, **figures) -> dict:
    return {"slo_attainment": attainment, "goodput_req_s": goodput, "num_requests": 10,
            "num_finished": 10, "rejected_by_reason": {}, "false_reject_share": 0.0,
            "late_admit_share": 0.0, **figures}


def test_the_checks_name_each_failing_cell_and_its_figure():
    cells = {"vllm": {"1x": _cell(0.95, 9.0), "2x": _cell(0.5, 9.0)},
             "slo": {"1x": _cell(0.96, 9.5), "2x": _cell(0.6, 9.5)},
             "slo+admission": {"1x": _cell(0.90, 10.0, false_reject_share=0.03),
                               "2x": _cell(0.7, 8.0, num_finished=7,
                                           rejected_by_reason={"queue_full": 2, "None": 1})}}
    failures = robustness.check({"cells": cells, "best_baseline": "vllm"})
    found = {(f["check"], f["load"], f["run"]) for f in failures}
    assert found == {("a", "1x", "slo+admission"), ("b", "2x", "slo+admission"),
                     ("c", "2x", "slo+admission")}
    figures = " / ".join(f["figure"] for f in failures)
    assert "vllm's 0.950" in figures and "slo's 0.960" in figures
    assert "false rejects 3.0%" in figures and "80% of its peak 10.00" in figures
    assert "1 of 10 arrivals neither finished nor rejected with a reason" in figures
