"""A `StepPlan` written into the plan arrays reads back the same, whatever form its parts take."""

from __future__ import annotations

import numpy as np
import pytest

from refimpl.errors import SchedulingError
from refimpl.sched import StepPlan
from refimpl.sched.plan import new_plan_arrays, read_plan, write_plan

REASONS = ["", "length_capped", "slo_cap"]
KERNELS = ["decode_a", "prefill_b"]


def _round_trip(plan: StepPlan) -> StepPlan:
    arrays = new_plan_arrays(64, max_kernels=4)
    write_plan(plan, arrays, REASONS.index, KERNELS.index)
    return read_plan(arrays, REASONS, KERNELS)


EVERY_KIND = StepPlan(decode=(3, 1), prefill=((4, 7), (9, 2)), preempt=(5,),
                      finish=((6, "slo_cap"),), spill=(8, 10), restore=(11,),
                      quantize=((12, 2), (13, 4)), kernels=("prefill_b", "decode_a"))


@pytest.mark.parametrize("plan", [
    EVERY_KIND,
    StepPlan(decode=(0,)),
    StepPlan(prefill=((2, 5),)),
    StepPlan(finish=((1, "length_capped"),)),
    StepPlan(spill=(7,)),
    StepPlan(kernels=("decode_a",), decode=(4,)),
    StepPlan(),
], ids=["every-kind", "decode", "prefill", "finish", "spill", "kernels", "empty"])
def test_a_plan_of_tuples_reads_back_equal(plan):
    assert _round_trip(plan) == plan


def test_arrays_lists_and_long_runs_of_pairs_read_back_as_the_same_plan():
    pairs = [(k, k + 1) for k in range(20, 40)]  # more than the one-by-one path takes
    plan = StepPlan(decode=np.array([3, 1]), prefill=np.array(pairs, np.int64),
                    quantize=pairs[:3], preempt=[5], spill=np.array([8], np.int32))
    back = _round_trip(plan)
    assert back == StepPlan(decode=(3, 1), prefill=tuple(pairs), quantize=tuple(pairs[:3]),
                            preempt=(5,), spill=(8,))
    assert _round_trip(StepPlan(prefill=pairs)).prefill == tuple(pairs)


def test_only_the_kinds_a_plan_has_are_written():
    arrays = new_plan_arrays(16)
    write_plan(StepPlan(decode=(2,)), arrays, REASONS.index, KERNELS.index)
    assert arrays.sizes.tolist() == [1, 0, 0, 0, 0, 0, 0, 0]


@pytest.mark.parametrize("field", ["prefill", "quantize"])
def test_a_pairs_array_of_the_wrong_shape_is_refused_by_its_field(field):
    with pytest.raises(SchedulingError, match=f"StepPlan.{field}"):
        _round_trip(StepPlan(**{field: np.array([1, 2, 3])}))
