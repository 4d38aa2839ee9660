"""The Pareto frontier under an SRAM budget: the seed's dominance rule, checked exhaustively."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refimpl.costmodel import fastest, pareto_mask
from refimpl.errors import CapacityError

candidate = st.tuples(st.integers(1, 20), st.integers(1, 20), st.integers(1, 100))


def dominates(a: tuple, b: tuple) -> bool:
    return a[0] <= b[0] and a[1] <= b[1] and (a[0] < b[0] or a[1] < b[1])


@settings(max_examples=300, deadline=None)
@given(st.lists(candidate, min_size=1, max_size=25), st.integers(1, 100))
def test_frontier_keeps_exactly_the_undominated_candidates_within_budget(cands, budget):
    times, hbm, sram = (list(x) for x in zip(*cands, strict=True))
    if min(sram) > budget:
        with pytest.raises(CapacityError):
            pareto_mask(times, hbm, sram, budget)
        return
    keep = pareto_mask(times, hbm, sram, budget)
    fits = [c for c in cands if c[2] <= budget]
    for c, kept in zip(cands, keep, strict=True):
        dominated = any(dominates(o, c) for o in fits)
        if kept:
            assert c[2] <= budget and not dominated
        else:
            assert c[2] > budget or dominated
    assert keep[fastest(times, hbm, sram, budget)]


def test_too_small_budget_names_the_smallest_need():
    with pytest.raises(CapacityError, match="smallest needs 300 B") as error:
        pareto_mask([1.0, 2.0], [1.0, 1.0], [400, 300], 100)
    assert error.value.field == "sram_budget_bytes"


def test_equal_candidates_are_both_kept():
    assert pareto_mask([1.0, 1.0, 2.0], [5.0, 5.0, 5.0], [1, 1, 1], 10) == [True, True, False]
