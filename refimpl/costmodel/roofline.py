"""Analytic cost tables for spec-sheet hardware: the roofline of each candidate's counts.

ANALYTIC, NOT MEASURED: a candidate's time on an A100 or H100 preset is
max(FLOPs / peak FLOP/s, HBM bytes / bandwidth) of its exact analytic counts (Williams,
Waterman & Patterson's roofline, 2009), with no launch overhead, occupancy or cache effects.
The counts are those of refimpl's float32 kernels, so they rank tiles; they do not model a GPU.
"""

from __future__ import annotations

from refimpl._version import __version__
from refimpl.config import HardwareSpec, ModelConfig
from refimpl.costmodel.candidates import PHASES, AttentionDims, Candidate, enumerate_candidates
from refimpl.costmodel.table import CostTable, build_phase
from refimpl.kernels import KernelCosts

__all__ = ["ANALYTIC_GRID", "roofline_table", "roofline_time_s"]

# (B values, T values) per phase: GPU-scale batches and contexts.
ANALYTIC_GRID: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "prefill": ((1, 2, 4, 8, 16), (128, 512, 2048, 8192)),
    "chunk": ((64, 256, 1024, 2048), (128, 512, 2048, 8192)),
    "decode": ((1, 4, 16, 64, 256), (128, 512, 2048, 8192, 32768)),
}


def roofline_time_s(costs: KernelCosts, hardware: HardwareSpec) -> float:
    """Seconds at the roofline: bound by FLOPs at peak or by HBM bytes at full bandwidth."""
    return max(costs.flops / hardware.peak_flops,
               costs.hbm_bytes / hardware.memory_bandwidth_bytes_s)


def roofline_table(model: ModelConfig, hardware: HardwareSpec,
                   grid: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] | None = None,
                   ) -> CostTable:
    """A `CostTable` of every candidate's roofline time for `model` on `hardware` (analytic)."""
    dims = AttentionDims.of(model)
    grid = ANALYTIC_GRID if grid is None else grid

    def time_fn(cand: Candidate, batch: int, seq_len: int) -> float:
        return roofline_time_s(cand.costs(dims, batch, seq_len), hardware)

    phases = {phase: build_phase(phase, enumerate_candidates(phase, dims), dims, *grid[phase],
                                 time_fn, hardware.sram_bytes) for phase in PHASES if phase in grid}
    return CostTable(phases=phases, sram_budget_bytes=hardware.sram_bytes, dims=dims,
                     model_name=model.name, fingerprint={"analytic": hardware.name},
                     version=__version__, info={"source": hardware.source})
