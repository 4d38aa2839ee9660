"""Synthetic profiles in Vidur's CSV layout (the tests write them themselves), and the real
ones' folder when this machine has it."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np

from refimpl.config import ModelConfig
from refimpl.costmodel.gpu_fit import predict
from refimpl.costmodel.gpu_profiles import OPERATORS, OperatorProfile

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
VIDUR = Path(os.environ.get("REFIMPL_VIDUR_PROFILES", SHARED / "profiles" / "vidur"))
TOKENS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 4096)
SHAPE_COLUMNS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size",
                 "use_gated_mlp", "num_tokens", "num_tensor_parallel_workers")


def write_compute_csv(folder: Path, gpu: str, name: str, model: ModelConfig, eff, hw,
                      tps=(1, 2)) -> Path:
    """A compute profile whose times are exactly the model `eff` predicts on `hw`."""
    tokens = np.array([t for _ in tps for t in TOKENS], np.int64)
    tp = np.array([t for t in tps for _ in TOKENS], np.int64)
    blank = OperatorProfile(gpu, model, tokens, tp, {})
    seconds = {op: predict(eff, hw, blank, op) for op in OPERATORS}
    path = folder / f"compute_{gpu}_org_{name}_mlp.csv"
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow([f"time_stats.{op}.median" for op in OPERATORS] + list(SHAPE_COLUMNS))
        for k in range(len(tokens)):
            out.writerow([seconds[op][k] * 1e3 for op in OPERATORS] + [
                model.num_heads, model.num_kv_heads, model.hidden_size,
                model.intermediate_size, model.vocab_size, str(model.gated_mlp),
                tokens[k], tp[k]])
    return path


def write_network_csv(folder: Path, gpu: str, links) -> Path:
    """An all-reduce profile, exact for the `LinkFit`s given."""
    path = folder / f"network_{gpu}_dgx_all_reduce.csv"
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["time_stats.all_reduce.median", "num_workers", "size", "devices_per_node"])
        for link in links:
            for size in (2048, 65536, 1 << 20, 1 << 24):
                out.writerow([(link.launch_s + size / link.bytes_per_s) * 1e3, link.num_gpus,
                              size, link.num_gpus])
    return path
