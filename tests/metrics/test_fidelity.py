"""The fidelity measures: the run's speed, and step errors with that speed taken out."""

from __future__ import annotations

import numpy as np
import pytest

from refimpl.metrics.fidelity import run_speed, step_errors_at_speed


def test_the_runs_speed_is_its_measured_time_over_the_predicted():
    assert run_speed(np.array([1.0, 3.0]), np.array([2.0, 6.0])) == 2.0
    assert np.isnan(run_speed(np.array([]), np.array([])))


def test_errors_at_speed_leave_out_a_machine_uniformly_slower_or_faster():
    predicted = np.array([1.0, 2.0, 4.0])
    measured = np.array([1.5, 2.0, 4.5])  # sums 7 and 8: speed 8/7
    errors = step_errors_at_speed(predicted, measured)
    expected = np.abs(predicted * 8 / 7 / measured - 1).mean()
    assert errors["mape"] == pytest.approx(expected)
    for factor in (0.3, 3.0):  # the same machine at another speed: the same errors
        assert step_errors_at_speed(predicted, measured * factor)["mape"] == pytest.approx(
            errors["mape"])
    assert step_errors_at_speed(predicted, 1.7 * predicted)["mape"] == pytest.approx(0.0)
