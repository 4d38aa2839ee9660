"""Plots of a sweep's table: goodput against rate, and SLO attainment against rate.

Each function takes the tidy table (`SweepResult.table`, or a path to `sweep.parquet` /
`sweep.csv`) and returns a matplotlib `Figure` (not pyplot: no global state, renders off
screen); `save_sweep_plots` writes both as PNGs. One line per policy (and parameter set, and
workload and SLO set where the sweep has several), the mean over seeds, with the seeds'
range shaded where there is more than one.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from refimpl.export.tables import read_table

__all__ = ["plot_attainment_vs_rate", "plot_goodput_vs_rate", "save_sweep_plots"]

DPI = 120


def _columns(table: dict | str | Path) -> dict[str, list]:
    return read_table(table) if isinstance(table, (str, Path)) else table


def _float(value: object) -> float:
    return float("nan") if value in (None, "") else float(value)


def _series(table: dict[str, list], metric: str) -> dict[str, tuple[np.ndarray, ...]]:
    """Label -> (rates, mean, min, max) of `metric` over seeds, rates ascending."""
    rows = len(table["policy"])
    varied = [name for name in ("policy_params", "workload", "slo")
              if len(set(table[name])) > 1]
    points: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for i in range(rows):
        label = " · ".join([str(table["policy"][i]), *(str(table[n][i]) for n in varied)])
        rate = _float(table["rate"][i])
        if rate != rate:  # the workload's own rate: plotted at its measured mean
            rate = _float(table["mean_rate_req_s"][i])
        points[label][rate].append(_float(table[metric][i]))
    series = {}
    for label, by_rate in points.items():
        rates = np.array(sorted(by_rate))
        values = [np.array(by_rate[r]) for r in rates]
        series[label] = (rates, np.array([np.nanmean(v) for v in values]),
                         np.array([np.nanmin(v) for v in values]),
                         np.array([np.nanmax(v) for v in values]))
    return series


def _plot(table, metric: str, ylabel: str, title: str, percent: bool = False):
    from matplotlib.figure import Figure

    series = _series(_columns(table), metric)
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    scale = 100.0 if percent else 1.0
    for k, (label, (rates, mean, low, high)) in enumerate(series.items()):
        color = f"C{k % 10}"
        ax.plot(rates, mean * scale, marker="o", color=color, label=label)
        if np.any(high > low):
            ax.fill_between(rates, low * scale, high * scale, color=color, alpha=0.15)
    ax.set_xlabel("arrival rate (requests/s)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def plot_goodput_vs_rate(table: dict | str | Path):
    """Goodput (requests/s meeting both SLOs, vLLM's definition) against the arrival rate."""
    return _plot(table, "goodput_req_s", "goodput (good requests/s)", "Goodput vs rate")


def plot_attainment_vs_rate(table: dict | str | Path, target: float | None = 0.9):
    """SLO attainment (share of all requests meeting both SLOs) against the arrival rate, with
    the capacity target (DistServe's 90%) as a dashed line."""
    fig = _plot(table, "slo_attainment", "SLO attainment (%)", "SLO attainment vs rate",
                percent=True)
    if target is not None:
        ax = fig.axes[0]
        ax.axhline(100 * target, linestyle="--", color="grey", linewidth=1,
                   label=f"target {target:.0%}")
        ax.legend(fontsize="small")
    return fig


def save_sweep_plots(table: dict | str | Path, folder: str | Path) -> tuple[Path, Path]:
    """Write `goodput_vs_rate.png` and `attainment_vs_rate.png` into `folder`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = folder / "goodput_vs_rate.png", folder / "attainment_vs_rate.png"
    for path, fig in zip(paths, (plot_goodput_vs_rate(table), plot_attainment_vs_rate(table)),
                         strict=True):
        fig.savefig(path, dpi=DPI, format="png")
    return paths
