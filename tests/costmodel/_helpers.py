"""Helpers of the cost-model tests: a small synthetic table, built without profiling."""

from __future__ import annotations

from refimpl._version import __version__
from refimpl.config.probe import machine_fingerprint
from refimpl.costmodel.candidates import AttentionDims, Candidate, enumerate_candidates
from refimpl.costmodel.gemm import GemmProfile
from refimpl.costmodel.table import CostTable, build_phase

DIMS = AttentionDims(num_q_heads=8, num_kv_heads=2, head_dim=64, page_size=16)
GRID = {"prefill": ((1, 2, 4), (128, 256, 512, 1024)),
        "chunk": ((64, 128, 256), (128, 512, 2048)),
        "decode": ((1, 4, 16, 64), (128, 512, 2048))}


def synthetic_time_s(cand: Candidate, batch: int, seq_len: int) -> float:
    """A made-up but plausible latency: 20 us per call, 20 GFLOP/s, 10 GB/s, per-tile cost."""
    costs = cand.costs(DIMS, batch, seq_len)
    _, steps = cand.tile_steps(DIMS, batch, seq_len)
    return 20e-6 + costs.flops / 20e9 + costs.hbm_bytes / 10e9 + steps * 0.2e-6


def synthetic_table(budget_bytes: int = 512 * 1024) -> CostTable:
    """Every candidate of the default enumeration, timed by `synthetic_time_s`."""
    phases = {p: build_phase(p, enumerate_candidates(p, DIMS, tile_q=(32, 64), tile_k=(64, 128),
                                                     pages_per_tile=(2, 8)),
                             DIMS, *GRID[p], synthetic_time_s, budget_bytes) for p in GRID}
    gemm = GemmProfile(tokens=(1, 16, 256, 1024), layer_s=(2e-4, 6e-4, 6e-3, 2.4e-2),
                       lm_head_s=(1e-4, 3e-4, 3e-3, 1.2e-2))
    return CostTable(phases=phases, sram_budget_bytes=budget_bytes, dims=DIMS,
                     model_name="tiny", fingerprint=machine_fingerprint(), version=__version__,
                     gemm=gemm, info={"mode": "synthetic"})
