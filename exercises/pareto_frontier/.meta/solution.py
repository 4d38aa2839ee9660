"""Reference solution: sort by (latency, traffic), then one sweep keeping strict new minima of
traffic: O(n log n). A candidate survives if and only if every faster one moves more bytes."""

from __future__ import annotations

import math


def pareto_frontier(candidates: list[tuple[str, int, float, int]],
                    sram_budget_bytes: int) -> list[str]:
    """Names of the candidates on the latency / HBM-traffic Pareto frontier within the budget."""
    if sram_budget_bytes < 0:
        raise ValueError(f"sram_budget_bytes={sram_budget_bytes!r}: must be at least 0")
    fitting = sorted((latency, hbm, name) for name, sram, latency, hbm in candidates
                     if sram <= sram_budget_bytes)
    kept: list[str] = []
    best_hbm = math.inf  # least traffic among strictly faster candidates, or equal ones kept
    best_key: tuple[float, int] | None = None  # (latency, hbm) of the last kept candidate
    for latency, hbm, name in fitting:
        if hbm < best_hbm or (latency, hbm) == best_key:  # exact ties dominate neither way
            kept.append(name)
            best_hbm, best_key = hbm, (latency, hbm)
    return kept
