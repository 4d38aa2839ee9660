"""Your solution to the Pareto-frontier exercise: fill in `pareto_frontier`."""

from __future__ import annotations


def pareto_frontier(candidates: list[tuple[str, int, float, int]],
                    sram_budget_bytes: int) -> list[str]:
    """Names of the candidates on the latency / HBM-traffic Pareto frontier within the budget.

    Each candidate is (name, sram_bytes, latency_s, hbm_bytes). Only those with
    sram_bytes <= sram_budget_bytes count; of those, keep each one that no other beats on
    both latency and traffic (no worse on both, better on one). Return the kept names ordered
    by (latency_s, hbm_bytes, name). Raises ValueError naming sram_budget_bytes if negative.
    """
    raise NotImplementedError("pareto_frontier: not written yet")
