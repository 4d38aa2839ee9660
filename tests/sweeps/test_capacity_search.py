"""Capacity search: the highest rate where attainment holds, found within the tolerance."""

from __future__ import annotations

import math

import pytest

import refimpl.sweeps.serial as serial
from refimpl.errors import ConfigError
from refimpl.sweeps import SweepGrid, capacity
from refimpl.sweeps.bisect import CapacitySearch, find_capacity
from refimpl.sweeps.work import CellResult


def step(threshold: float):
    """Attainment 1 up to `threshold` requests/s, 0.5 above: the answer is `threshold`."""
    return lambda rate: 1.0 if rate <= threshold else 0.5


def logistic(center: float, width: float):
    """A smooth fall; attainment 0.9 exactly at center + width * ln(1/9)."""
    return lambda rate: 1 / (1 + math.exp((rate - center) / width))


@pytest.mark.parametrize("start", [0.5, 17.3, 40.0, 1000.0])
@pytest.mark.parametrize("tolerance", [0.1, 0.02, 0.001])
def test_a_step_in_attainment_is_found_within_the_tolerance_from_any_start(start, tolerance):
    search = find_capacity(step(17.3), start, tolerance=tolerance)
    assert search.bounded == "bracketed"
    assert search.capacity <= 17.3 < search.high
    assert search.high - search.capacity <= tolerance * search.capacity
    assert search.capacity >= 17.3 / (1 + tolerance)


def test_a_smooth_curve_is_crossed_at_the_target_within_the_tolerance():
    answer = 30.0 + 4.0 * math.log(1 / 9)  # where 1 / (1 + e^((r - 30) / 4)) = 0.9
    search = find_capacity(logistic(30.0, 4.0), 5.0, tolerance=0.01, target=0.9)
    assert search.capacity <= answer <= search.capacity * 1.01
    assert search.probes[search.capacity] >= 0.9 > search.probes[search.high]


def test_a_system_that_never_fails_or_always_fails_is_reported_so():
    never = find_capacity(lambda rate: 1.0, 10.0, max_rate=100.0)
    assert never.capacity == 100.0 and never.bounded == "at_max_rate"
    always = find_capacity(lambda rate: 0.0, 10.0)
    assert always.capacity == 0.0 and always.bounded == "below_min_rate"
    assert len(always.probes) == 13  # the start, then 12 halvings


@pytest.mark.parametrize(("settings", "field"), [
    ({"tolerance": 0.0}, "tolerance"), ({"tolerance": -0.1}, "tolerance"),
    ({"tolerance": 1.5}, "tolerance"), ({"target": 0.0}, "target"),
    ({"target": 1.2}, "target"), ({"start_rate": 0.0}, "start_rate"),
    ({"start_rate": -3.0}, "start_rate"), ({"max_rate": 1.0}, "max_rate"),
])
def test_bad_search_settings_are_refused_naming_the_field(settings, field):
    values = {"start_rate": 10.0, "target": 0.9, "tolerance": 0.02, "max_rate": 1e4, **settings}
    with pytest.raises(ConfigError) as caught:
        CapacitySearch(**values)
    assert caught.value.field == field


def _fake_cell(cell, with_requests=False):
    """A run report whose attainment is a known curve of the rate, per policy and seed."""
    threshold = {"slo": 42.0, "vllm": 25.0}[cell.policy]
    attainment = (1.0 if cell.rate <= threshold else 0.6) - 0.01 * cell.seed
    summary = {"slo_attainment": attainment, "goodput_req_s": attainment * cell.rate}
    settings = {**cell.settings(), "key": cell.key()}
    return CellResult(cell.key(), {"settings": settings, "policies": {cell.policy: summary}})


def test_capacity_runs_one_search_per_policy_side_by_side_and_reports_both_goodputs(
        tmp_path, monkeypatch):
    monkeypatch.setattr(serial, "run_cell", _fake_cell)
    monkeypatch.setattr(serial, "prepare_loop", lambda: 0.0)
    grid = SweepGrid(policies=("slo", "vllm"), seeds=(0, 1), num_requests=100)
    result = capacity(grid, tmp_path, start_rate=10.0, tolerance=0.01, workers=0)
    by_policy = {row["policy"]: row for row in result.rows}
    for policy, threshold in (("slo", 42.0), ("vllm", 25.0)):
        row = by_policy[policy]
        assert row["capacity_req_s"] <= threshold < row["rate_above_req_s"]
        assert row["rate_above_req_s"] <= row["capacity_req_s"] * 1.01
        assert row["attainment_at_capacity"] == pytest.approx(0.995)  # mean over 2 seeds
        assert row["attainment_above"] == pytest.approx(0.595)
        assert row["goodput_at_capacity_req_s"] == pytest.approx(0.995 * row["capacity_req_s"])
    assert result.num_cells == 2 * sum(len(r["probes"]) for r in result.rows)
    assert (tmp_path / "capacity.json").is_file()
    again = capacity(grid, tmp_path, start_rate=10.0, tolerance=0.01, workers=0)
    assert again.num_cached == again.num_cells  # every probe read back
    assert again.rows == result.rows


def test_a_real_capacity_search_brackets_the_target(tmp_path):
    grid = SweepGrid(policies=("vllm",), num_requests=150)
    row = capacity(grid, tmp_path, tolerance=0.1, workers=0).rows[0]
    assert row["bounded"] == "bracketed"
    assert row["attainment_at_capacity"] >= 0.9 > row["attainment_above"]
    assert row["rate_above_req_s"] <= 1.1 * row["capacity_req_s"]
