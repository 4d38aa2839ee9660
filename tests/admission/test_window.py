"""The rolling-window percentile against a brute-force percentile of the last W values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refimpl.admission import RollingWindow
from refimpl.errors import ConfigError

finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None)
@given(size=st.integers(1, 20), values=st.lists(finite, min_size=1, max_size=80),
       q=st.floats(0, 100))
def test_every_percentile_matches_numpy_over_the_last_w_values(size, values, q):
    window = RollingWindow(size)
    for count, value in enumerate(values, start=1):
        window.add(value)
        recent = values[max(0, count - size):count]
        assert len(window) == len(recent)
        assert window.percentile(q) == pytest.approx(np.percentile(recent, q), abs=1e-6)


def test_an_empty_window_has_no_percentile():
    assert math.isnan(RollingWindow(4).percentile(95))


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_a_non_finite_observation_is_refused(value):
    with pytest.raises(ConfigError, match="value"):
        RollingWindow(4).add(value)


def test_percentile_and_size_are_checked():
    with pytest.raises(ConfigError, match="size"):
        RollingWindow(0)
    with pytest.raises(ConfigError, match="q"):
        RollingWindow(3).percentile(101)
