"""Fitted GPU efficiencies: how far below its spec sheet a device runs each kind of operator.

The figures are fitted by `refimpl calibrate-gpu` (refimpl.costmodel.gpu_fit) to Vidur's
public per-operator profiles (microsoft/vidur, MIT licence, commit
7d47513363ec447a741ac5e47241580b47724fbf, data/profiling/compute and network); the profiles
themselves are not shipped. Each operator takes a fixed launch cost plus its roofline time
at a fitted fraction of peak FLOP/s or bandwidth (refimpl.costmodel.gpu_ops says how).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from refimpl.config._validate import positive_int, positive_real
from refimpl.errors import ConfigError

__all__ = ["Efficiency", "GemmFit", "LinkFit", "OpFit"]


def _fraction(field: str, value: float) -> None:
    positive_real(field, value)
    if value > 1.5:  # a little above 1 is a fit absorbing caches; far above is a wrong peak
        raise ConfigError(field, value, "an efficiency must be a fraction of peak (<= 1.5)")


def _seconds(field: str, value: float) -> None:
    if not (isinstance(value, float | int) and 0 <= value < 1):
        raise ConfigError(field, value, "must be seconds in [0, 1)")


@dataclass(frozen=True)
class GemmFit:
    """Linear layers: t = launch + (t_mem^p + t_flop^p)^(1/p), a smooth roofline; t_flop
    counts the rows padded to whole tiles."""

    launch_s: float  # fixed cost of one GEMM kernel
    compute_efficiency: float  # fraction of peak FLOP/s a large GEMM reaches
    weight_read_efficiency: float  # fraction of bandwidth a weight-bound GEMM reaches
    rows_half: float  # rows of FLOP time every GEMM pays beyond its tiles (under-filled SMs)
    sharpness: float  # p: how sharply the memory and compute limits meet (inf: max())
    tile_rows: int = 64  # rows per tile: a batch's rows are padded up to a multiple

    def __post_init__(self) -> None:
        _seconds("launch_s", self.launch_s)
        _fraction("compute_efficiency", self.compute_efficiency)
        _fraction("weight_read_efficiency", self.weight_read_efficiency)
        positive_real("rows_half", self.rows_half)
        positive_real("sharpness", self.sharpness)
        positive_int("tile_rows", self.tile_rows)


@dataclass(frozen=True)
class OpFit:
    """A memory-bound operator: the smooth max of its launch and its bytes' time, the first
    `cache_bytes` of a run at `efficiency` x bandwidth, the rest at `spill_efficiency`."""

    launch_s: float
    efficiency: float  # while the operator's bytes fit in cache (its input still in L2)
    sharpness: float  # p of the smooth max (refimpl.costmodel.gpu_ops.op_s)
    # A run's bytes past this no longer stay in the GPU's L2 and go at HBM's pace: fitted to
    # Vidur's profiles, norms, rotary embeddings and adds move bytes past 18-37 MB at 0.6-0.9x
    # their in-cache pace (L2: A100 40 MB, H100 50 MB).
    cache_bytes: float = math.inf
    spill_efficiency: float = 1.0  # beyond `cache_bytes` (unused while it is inf)
    # vLLM's RMSNorm, rotary and SiLU-and-mul kernels run one thread block per token, so a
    # small batch is bound by one block streaming its row (a floor that grows with the row's
    # bytes) and every row pays a block's fixed cost, in proportion to the block's threads
    # (refimpl.costmodel.gpu_ops.block_threads). Fitted to Vidur's profiles, shared by those
    # three operators of a GPU (their widths vary with the model and the TP degree); 0 for
    # the element-wise torch operators (adds, embedding).
    row_latency_s_per_byte: float = 0.0
    row_s: float = 0.0  # a row's cost in a block of gpu_ops.MAX_BLOCK (1,024) threads

    def __post_init__(self) -> None:
        _seconds("launch_s", self.launch_s)
        _fraction("efficiency", self.efficiency)
        positive_real("sharpness", self.sharpness)
        if isinstance(self.cache_bytes, bool) or not (isinstance(self.cache_bytes, float | int)
                                                      and self.cache_bytes > 0):
            raise ConfigError("cache_bytes", self.cache_bytes, "must be bytes > 0 (inf: none)")
        _fraction("spill_efficiency", self.spill_efficiency)
        _seconds("row_latency_s_per_byte", self.row_latency_s_per_byte)
        _seconds("row_s", self.row_s)


@dataclass(frozen=True)
class LinkFit:
    """An all-reduce over `num_gpus`: t = launch + bytes / bytes_per_s (its bus bandwidth)."""

    num_gpus: int
    launch_s: float
    bytes_per_s: float

    def __post_init__(self) -> None:
        positive_int("num_gpus", self.num_gpus)
        _seconds("launch_s", self.launch_s)
        positive_real("bytes_per_s", self.bytes_per_s)


@dataclass(frozen=True)
class Efficiency:
    """One GPU's fitted figures (module doc), and the attention figure that is assumed."""

    gemm: GemmFit
    norm: OpFit  # RMSNorm (input and post-attention; read and write the hidden state)
    rope: OpFit  # rotary embedding of Q and K
    act: OpFit  # SiLU(gate) * up
    add: OpFit  # a residual add
    emb: OpFit  # the token-embedding look-up
    all_reduce: tuple[LinkFit, ...]  # one per TP degree profiled
    # Not fitted: Vidur's attention profiles are not among the public figures used here.
    # FlashAttention-2 reports 50-73% of peak on A100 forward (Dao 2023); 0.5 is its low end.
    attention_efficiency: float = 0.5
    source: str = ""

    def __post_init__(self) -> None:
        _fraction("attention_efficiency", self.attention_efficiency)

    def link(self, num_gpus: int) -> LinkFit:
        """The all-reduce figures for `num_gpus` GPUs."""
        for fit in self.all_reduce:
            if fit.num_gpus == num_gpus:
                return fit
        raise ConfigError("num_gpus", num_gpus, "no all-reduce figures for this TP degree",
                          choices=[fit.num_gpus for fit in self.all_reduce])
