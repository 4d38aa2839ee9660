"""The Pareto frontier of kernel candidates on (predicted time, HBM bytes) under an SRAM budget.

Seed section 1: among the candidates whose working set fits `S` (`sram_bytes <= S`), keep those
no other candidate beats on both latency and memory traffic; the fastest kept one is the pick.
A sort and one sweep: O(R log R) for R candidates.
"""

from __future__ import annotations

from collections.abc import Sequence

from refimpl.errors import CapacityError

__all__ = ["check_budget", "fastest", "pareto_mask"]


def check_budget(sram_bytes: Sequence[int], budget_bytes: int) -> None:
    """`CapacityError` naming the smallest candidate's need if none fits `budget_bytes`."""
    need = min(sram_bytes)
    if need > budget_bytes:
        raise CapacityError("sram_budget_bytes", budget_bytes,
                            f"no candidate fits: the smallest needs {need} B of SRAM")


def pareto_mask(time_s: Sequence[float], hbm_bytes: Sequence[float],
                sram_bytes: Sequence[int], budget_bytes: int) -> list[bool]:
    """Which candidates are on the frontier: within budget and not dominated.

    Candidate j dominates i if it is no worse on both time and bytes and better on one; equal
    candidates do not dominate each other, so both are kept.
    """
    check_budget(sram_bytes, budget_bytes)
    order = sorted((t, h, i) for i, (t, h, s) in enumerate(zip(time_s, hbm_bytes, sram_bytes,
                                                               strict=True)) if s <= budget_bytes)
    keep = [False] * len(time_s)
    best_h = float("inf")
    last: tuple[float, float] | None = None
    for t, h, i in order:  # by time, then bytes: a kept point must beat every faster one on bytes
        if h < best_h or (t, h) == last:
            keep[i] = True
            best_h, last = h, (t, h)
    return keep


def fastest(time_s: Sequence[float], hbm_bytes: Sequence[float], sram_bytes: Sequence[int],
            budget_bytes: int) -> int:
    """Index of the fastest candidate within budget (fewer bytes break ties): on the frontier."""
    check_budget(sram_bytes, budget_bytes)
    return min((t, h, i) for i, (t, h, s) in enumerate(zip(time_s, hbm_bytes, sram_bytes,
                                                           strict=True)) if s <= budget_bytes)[2]
