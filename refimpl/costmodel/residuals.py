"""The fitted kernel model's held-out residuals per phase, beside the DistServe baseline's."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from refimpl.costmodel.fit import ERROR_KEYS

__all__ = ["plot_residuals"]


def plot_residuals(info: dict, path: str | Path) -> Path:
    """Write a PNG of predicted / measured - 1 against measured time, a panel per phase (and one
    for ragged decode shapes, if profiled), from a profiled table's `info` (its `heldout_s` and
    `heldout_mape` entries; a band of its `heldout_spread`, the measurements' own noise)."""
    from matplotlib.figure import Figure

    keys = [k for k in ERROR_KEYS if k in info["heldout_s"] or k != ERROR_KEYS[-1]]
    fig = Figure(figsize=(4.4 * len(keys), 4.2), layout="constrained")
    axes = fig.subplots(1, len(keys), sharey=True)
    for ax, phase in zip(axes, keys, strict=True):
        points = np.array(info["heldout_s"].get(phase, []), dtype=float).reshape(-1, 3)
        measured, predicted, baseline = points.T
        for values, label, marker, key in (
                (predicted, "fitted", "o", "heldout_mape"),
                (baseline, "DistServe baseline", "x", "baseline_mape")):
            mape = info[key].get(phase, float("nan"))
            ax.scatter(measured, 100 * (values / measured - 1), marker=marker, s=22,
                       label=f"{label}: MAPE {100 * mape:.1f}%")
        ax.axhline(0.0, color="0.3", linewidth=0.8)
        spread = info.get("heldout_spread", {}).get(phase, float("nan"))  # older tables: none
        if np.isfinite(spread):
            ax.axhspan(-100 * spread, 100 * spread, color="0.5", alpha=0.15,
                       label=f"round-to-round spread: {100 * spread:.1f}%")
        if len(measured):
            ax.set_xscale("log")
        ax.set_title(f"{phase} ({len(measured)} held-out points)")
        ax.set_xlabel("measured seconds (log scale)")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper right", fontsize="small")
    axes[0].set_ylabel("predicted / measured - 1 (%)")
    fig.suptitle(f"Kernel latency model: held-out residuals ({info.get('mode', '?')} profile)")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, format="png")
    return path
