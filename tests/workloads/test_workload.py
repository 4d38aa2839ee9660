"""The Workload dataclass: construction from arrays and validation naming the field."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from refimpl.errors import ConfigError
from refimpl.workloads import new_workload

GOOD = new_workload("w", np.array([5.0, 6.0, 6.0]), np.array([3, 4, 5]), np.array([1, 2, 3]))


def test_new_workload_rebases_arrivals_and_fills_the_default_class():
    np.testing.assert_array_equal(GOOD.arrival_s, [0.0, 1.0, 1.0])
    assert len(GOOD) == 3 and GOOD.num_clipped == 0 and GOOD.hash_ids is None
    assert GOOD.slo_class.dtype == object and GOOD.priority.dtype == np.int64
    assert GOOD.mean_rate == pytest.approx(2.0) and GOOD.duration_s == 1.0


@pytest.mark.parametrize(
    ("changes", "field", "match"),
    [
        ({"prompt_tokens": np.array([3, 4])}, "prompt_tokens", "length"),
        ({"output_tokens": np.array([1.0, 2.0, 3.0])}, "output_tokens", "dtype"),
        ({"priority": [0, 0, 0]}, "priority", "numpy"),
        ({"arrival_s": np.array([0.0, 2.0, 1.0])}, "arrival_s", "non-decreasing"),
        ({"arrival_s": np.array([1.0, 2.0, 3.0])}, "arrival_s", "first arrival"),
        ({"arrival_s": np.array([0.0, np.nan, 3.0])}, "arrival_s", "finite"),
        ({"prompt_tokens": np.array([3, 0, 5])}, "prompt_tokens", ">= 1"),
        ({"output_tokens": np.array([3, -1, 5])}, "output_tokens", ">= 1"),
        ({"priority": np.array([0, -1, 0])}, "priority", ">= 0"),
        ({"ttft_slo_s": np.array([1.0, 0.0, 1.0])}, "ttft_slo_s", "> 0"),
        ({"hash_ids": ((1,),)}, "hash_ids", "length"),
        ({"num_clipped": 4}, "num_clipped", r"\[0, 3\]"),
    ],
)
def test_invalid_fields_are_named(changes, field, match):
    with pytest.raises(ConfigError, match=match) as error:
        replace(GOOD, **changes)
    assert error.value.field == field


def test_an_empty_workload_is_refused():
    with pytest.raises(ConfigError, match="at least one"):
        new_workload("empty", np.array([]), np.array([]), np.array([]))
