"""`compare`: saved reports side by side, changes marked better or worse, settings that differ."""

from __future__ import annotations

import json

import pytest

from refimpl.errors import ConfigError
from refimpl.report.compare import compare_reports, format_compare, load_reports


def report(policy: str, attainment: float, ttft_p99_s: float, seed: int = 0) -> dict:
    return {"settings": {"seed": seed, "model": "llama-3-8b", "wall_s": 1.0 + seed},
            "policies": {policy: {"slo_attainment": attainment, "ttft_p99_s": ttft_p99_s,
                                  "num_finished": 100}}}


def test_changes_against_the_first_column_are_marked_by_which_way_is_better():
    comparison = compare_reports({"a": report("vllm", 0.50, 2.0),
                                  "b": report("slo", 0.75, 1.0, seed=1)})
    assert comparison["columns"] == ["a", "b"]
    rows = {row["key"]: row["cells"] for row in comparison["rows"]}
    assert rows["slo_attainment"][1]["verdict"] == "better"
    assert rows["slo_attainment"][1]["change"] == pytest.approx(0.5)
    assert rows["ttft_p99_s"][1]["verdict"] == "better"  # lower latency is better
    assert rows["num_finished"][1]["verdict"] is None  # no change
    assert comparison["settings"] == {"seed": {"a": 0, "b": 1}}  # wall_s is not a setting
    text = format_compare(comparison)
    assert "(+50.0%)+" in text and "(-50.0%)+" in text and "settings that differ" in text


def test_a_worse_change_below_the_threshold_is_not_marked():
    comparison = compare_reports({"a": report("vllm", 0.90, 1.0),
                                  "b": report("vllm", 0.89, 1.5)}, threshold=0.05)
    rows = {row["key"]: row["cells"] for row in comparison["rows"]}
    assert rows["slo_attainment"][1]["verdict"] is None
    assert rows["ttft_p99_s"][1]["verdict"] == "worse"
    assert "\033[31m" in format_compare(comparison, color=True)


def test_files_are_labelled_by_name_and_bad_files_are_refused(tmp_path):
    paths = []
    for name, attainment in (("base", 0.8), ("new", 0.9)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(report("vllm", attainment, 1.0)))
        paths.append(path)
    assert list(load_reports(paths)) == ["base", "new"]
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ConfigError, match="not a refimpl run report"):
        load_reports([tmp_path / "bad.json"])
    (tmp_path / "junk.json").write_text("{")
    with pytest.raises(ConfigError, match="is not JSON"):
        load_reports([tmp_path / "junk.json"])


def test_two_real_runs_of_the_same_thing_differ_in_no_setting():
    runs = {}
    for label, seconds in (("a", 0.3), ("b", 7.1)):  # a cached and a cold machine
        runs[label] = report("vllm", 0.9, 1.0)
        runs[label]["settings"].update(
            clock="measured", compile_s=seconds, kernels_warm_up_s=seconds,
            step_profile={"coefficients": {"per_step": seconds}, "profile_s": seconds})
    assert compare_reports(runs)["settings"] == {}
