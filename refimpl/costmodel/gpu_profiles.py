"""Read Vidur's public per-operator GPU profiles from a folder the user names.

Vidur (microsoft/vidur, MIT, commit 7d47513363ec447a741ac5e47241580b47724fbf) ships, under
data/profiling, `compute/<gpu>/<model>/mlp.csv` (per-layer milliseconds of each non-attention
operator per (num_tokens, TP degree)) and `network/<gpu>_dgx/all_reduce.csv`. refimpl reads
copies flattened to `compute_<gpu>_<org>_<model>_mlp.csv` and `network_<gpu>_dgx_all_reduce.csv`
and never ships them: only the figures fitted from them (refimpl.config.efficiency).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from refimpl.config import ModelConfig
from refimpl.errors import ConfigError

__all__ = ["GPU_PRESETS", "AllReduceProfile", "OperatorProfile", "read_profiles"]

# Vidur's device names -> refimpl's hardware presets (both profile the 80 GB SXM parts).
GPU_PRESETS = {"a100": "a100-80gb", "h100": "h100-sxm"}
OPERATORS = ("emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
             "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")


@dataclass(frozen=True)
class OperatorProfile:
    """One model shape's operator times on one GPU: rows are (num_tokens, TP) points."""

    gpu: str  # Vidur's name: a100, h100
    model: ModelConfig  # the profiled shape (num_layers is 1: the times are per layer)
    tokens: np.ndarray  # int64 (rows,)
    tp: np.ndarray  # int64 (rows,)
    seconds: dict[str, np.ndarray]  # operator -> median seconds per row


@dataclass(frozen=True)
class AllReduceProfile:
    """All-reduce times within one node: rows are (num_gpus, bytes) points."""

    gpu: str
    num_gpus: np.ndarray  # int64 (rows,)
    nbytes: np.ndarray  # float64 (rows,): Vidur's `size`, taken as bytes (module doc of gpu_fit)
    seconds: np.ndarray  # float64 (rows,)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _shape(row: dict[str, str], name: str) -> ModelConfig:
    heads, hidden = int(row["n_head"]), int(row["n_embd"])
    return ModelConfig(name=name, num_layers=1, num_heads=heads,
                       num_kv_heads=int(row["n_kv_head"]), head_dim=hidden // heads,
                       hidden_size=hidden, intermediate_size=int(row["n_expanded_embd"]),
                       vocab_size=int(row["vocab_size"]), max_context=4096,
                       gated_mlp=row["use_gated_mlp"] == "True")


def _compute(path: Path) -> OperatorProfile:
    gpu, *name = path.stem.removeprefix("compute_").removesuffix("_mlp").split("_")
    rows = _rows(path)
    if not rows:
        raise ConfigError("profile", str(path), "has no rows")
    return OperatorProfile(
        gpu=gpu, model=_shape(rows[0], "/".join(name)),
        tokens=np.array([int(r["num_tokens"]) for r in rows], np.int64),
        tp=np.array([int(r["num_tensor_parallel_workers"]) for r in rows], np.int64),
        seconds={op: np.array([float(r[f"time_stats.{op}.median"]) for r in rows]) * 1e-3
                 for op in OPERATORS})


def _network(path: Path) -> AllReduceProfile:
    # Within one node only (devices_per_node == num_workers): refimpl's presets are one node.
    rows = [r for r in _rows(path) if r["devices_per_node"] == r["num_workers"]]
    return AllReduceProfile(
        gpu=path.stem.removeprefix("network_").split("_")[0],
        num_gpus=np.array([int(r["num_workers"]) for r in rows], np.int64),
        nbytes=np.array([float(r["size"]) for r in rows]),
        seconds=np.array([float(r["time_stats.all_reduce.median"]) for r in rows]) * 1e-3)


def read_profiles(folder: str | Path) -> tuple[list[OperatorProfile], list[AllReduceProfile]]:
    """Every compute and all-reduce profile in `folder`, in name order."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError("profiles", str(folder), "is not a folder")
    compute = [_compute(p) for p in sorted(folder.glob("compute_*_mlp.csv"))]
    network = [_network(p) for p in sorted(folder.glob("network_*_all_reduce.csv"))]
    if not compute:
        raise ConfigError("profiles", str(folder), "holds no compute_<gpu>_<model>_mlp.csv")
    for p in compute:
        if p.gpu not in GPU_PRESETS:
            raise ConfigError("gpu", p.gpu, "no hardware preset for it", choices=GPU_PRESETS)
    return compute, network
