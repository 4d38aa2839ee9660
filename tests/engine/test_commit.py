"""The commit's order: a plan's drops supersede its tier moves of the same requests, and what
frees pages is done before what takes them."""

from __future__ import annotations

import numpy as np
import pytest

from refimpl.engine.commit import drop_superseded
from refimpl.sched import StepPlan
from refimpl.sched.plan import new_plan_arrays, read_plan, write_plan

pytestmark = pytest.mark.numba


def _arrays(plan: StepPlan):
    arrays = new_plan_arrays(16)
    write_plan(plan, arrays, {"length_capped": 3}.__getitem__, str)
    return arrays


def test_a_preempted_or_ended_request_moves_no_bytes_in_the_same_plan():
    plan = StepPlan(preempt=(5,), finish=((6, "length_capped"),),
                    quantize=((5, 2), (7, 4), (6, 2)), spill=(5, 8, 6), restore=(9, 5))
    arrays = _arrays(plan)
    drop_superseded(arrays.entries, arrays.sizes)
    left = read_plan(arrays, ["", "", "", "length_capped"], [])
    assert left.quantize == ((7, 4),)  # its factor stays with it
    assert left.spill == (8,) and left.restore == (9,)
    assert left.preempt == (5,) and left.finish == ((6, "length_capped"),)


def test_a_plan_without_drops_keeps_every_move():
    plan = StepPlan(quantize=((1, 2), (2, 4)), spill=(3,), restore=(4,), decode=(0,))
    arrays = _arrays(plan)
    before = arrays.entries.copy()
    drop_superseded(arrays.entries, arrays.sizes)
    assert np.array_equal(arrays.entries, before)
    assert read_plan(arrays, [""], []) == plan
