"""Helpers for the engine tests: random request specs, and record-by-record equality."""

from __future__ import annotations

import numpy as np

from refimpl.metrics.records import RequestRecords, StepRecords


def random_specs(seed: int, num: int, gap_s: float, max_prompt: int, max_new: int) -> list:
    """(arrival_s, prompt, new) rows; gaps of zero (one instant) and long idle gaps mixed in."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(gap_s, num) * rng.choice([0.0, 1.0, 1.0, 40.0], num)
    return [(float(t), int(p), int(n)) for t, p, n in zip(
        np.cumsum(gaps), rng.integers(1, max_prompt + 1, num), rng.integers(1, max_new + 1, num),
        strict=True)]


def assert_same_records(expected: RequestRecords | StepRecords,
                        actual: RequestRecords | StepRecords) -> None:
    """Every field equal (wall-clock decision times aside)."""
    for name, value in vars(expected).items():
        if name == "decision_s":
            continue
        other = getattr(actual, name)
        if isinstance(value, np.ndarray):
            assert other.dtype == value.dtype, name
            assert np.array_equal(other, value, equal_nan=value.dtype.kind == "f"), name
        else:
            assert other == value, name
