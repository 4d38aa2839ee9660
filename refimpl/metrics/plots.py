"""Plots of serving runs: latency CDFs per policy, and a timeline of steps and KV use.

Each `*_figure` function takes `{policy_name: (RequestRecords, StepRecords)}` and returns a
matplotlib Figure (a notebook shows it, a learner keeps and restyles it); each `plot_*`
function writes that figure to a PNG and returns its path. Matplotlib is imported inside the
functions (importing refimpl stays cheap) and used through `matplotlib.figure.Figure`, not
pyplot, so no global backend or figure state is touched: the plots render off screen (Agg)
from scripts, tests and notebooks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from refimpl.metrics.latency import request_latencies
from refimpl.metrics.records import RequestRecords, StepRecords
from refimpl.report.units import format_seconds

__all__ = ["latency_cdfs_figure", "plot_latency_cdfs", "plot_timeline", "timeline_figure"]

Runs = dict[str, tuple[RequestRecords, StepRecords]]

LOG_SPAN = 30.0  # use a log axis when the largest value is this many times the smallest
TIMELINE_BINS = 300  # steps are averaged into this many time bins when there are more steps
DPI = 120
TARGET_STYLES = ("--", ":", "-.")  # one line style per distinct SLO target


def _colors(runs: Runs) -> dict[str, str]:
    """One colour per policy, the same in every plot (matplotlib's tab10 cycle)."""
    return {name: f"C{i % 10}" for i, name in enumerate(runs)}


def _save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, format="png")
    return path


def _slo_targets(requests: RequestRecords, column: np.ndarray) -> dict[float, list[str]]:
    """Each distinct target value in `column` and the SLO classes that have it."""
    targets: dict[float, list[str]] = {}
    for value, name in sorted({(float(v), str(c)) for v, c in zip(column, requests.slo_class,
                                                                   strict=True)}):
        targets.setdefault(value, []).append(name)
    return targets


def _cdf_panel(ax, samples: dict[str, np.ndarray], targets: dict[float, list[str]],
               colors: dict[str, str], title: str) -> None:
    """Empirical CDFs of each policy's sample, with the SLO targets as dashed vertical lines."""
    # The axis must hold the targets too: a far target squeezes the curves on a linear axis.
    everything = np.concatenate([np.zeros(0), *samples.values(), np.array(list(targets))])
    positive = everything[everything > 0]
    for name, sample in samples.items():
        sorted_s = np.sort(sample)  # (n,)
        if sorted_s.size:
            share = np.arange(1, sorted_s.size + 1) / sorted_s.size
            ax.step(sorted_s, share, where="post", color=colors[name], label=name)
    for i, (value, classes) in enumerate(targets.items()):
        ax.axvline(value, color="0.3", linestyle=TARGET_STYLES[i % len(TARGET_STYLES)],
                   linewidth=1.2,
                   label=f"target {'/'.join(classes)}: {format_seconds(value)}")
    if positive.size and positive.max() > LOG_SPAN * positive.min():
        ax.set_xscale("log")  # latencies under load span orders of magnitude
    ax.set_title(title)
    ax.set_xlabel("seconds" + (" (log scale)" if ax.get_xscale() == "log" else ""))
    ax.set_ylabel("share of finished requests at or below")
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="major", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # nothing to explain when there is no data
        ax.legend(loc="lower right", fontsize="small")


def latency_cdfs_figure(runs: Runs):
    """TTFT and TPOT CDFs per policy (finished requests), SLO targets as dashed lines."""
    from matplotlib.figure import Figure

    colors = _colors(runs)
    latencies = {name: request_latencies(requests) for name, (requests, _) in runs.items()}
    # The policies replay one workload, so the first run's requests carry every target.
    first_requests = next(iter(runs.values()))[0] if runs else None
    fig = Figure(figsize=(12, 4.8), layout="constrained")
    ttft_ax, tpot_ax = fig.subplots(1, 2)
    for ax, attribute, slo_column, title in (
        (ttft_ax, "ttft_s", "ttft_slo_s", "TTFT: arrival to first token"),
        (tpot_ax, "tpot_s", "tpot_slo_s", "TPOT: mean time between later tokens"),
    ):
        samples = {}
        for name, lat in latencies.items():
            values = getattr(lat, attribute)
            samples[name] = values[~np.isnan(values)]
        targets = ({} if first_requests is None
                   else _slo_targets(first_requests, getattr(first_requests, slo_column)))
        _cdf_panel(ax, samples, targets, colors, title)
    fig.suptitle("Latency CDFs of finished requests, per policy")
    return fig


def plot_latency_cdfs(runs: Runs, path: str | Path) -> Path:
    """Write `latency_cdfs_figure(runs)` to the PNG at `path`."""
    return _save(latency_cdfs_figure(runs), path)


def _time_bins(steps: StepRecords, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(times, values): per step, or duration-weighted means over TIMELINE_BINS time bins."""
    start_s = np.asarray(steps.start_s, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    if len(steps) <= TIMELINE_BINS:
        return start_s, values
    edges = np.linspace(start_s[0], start_s[-1] + steps.duration_s[-1], TIMELINE_BINS + 1)
    # Weight each step by its duration so a bin shows the time average within it.
    weights = np.maximum(steps.duration_s, 1e-12)  # (num_steps,)
    busy, _ = np.histogram(start_s, bins=edges, weights=weights)
    total, _ = np.histogram(start_s, bins=edges, weights=weights * values)
    mean = np.divide(total, busy, out=np.full(TIMELINE_BINS, np.nan), where=busy > 0)
    return edges[:-1], mean


def timeline_figure(runs: Runs):
    """Per step over time, a column per policy: decode sequences, prefill tokens, KV use, queue."""
    from matplotlib.figure import Figure

    colors = _colors(runs)
    panels = (
        ("decoding sequences\nper step", lambda s: s.num_decode),
        ("prefill tokens\nper step", lambda s: s.num_prefill_tokens),
        ("KV pages in use (%)",
         lambda s: 100 * s.kv_used_pages / s.kv_total_pages if s.kv_total_pages
         else np.full(len(s), np.nan)),
        ("waiting requests", lambda s: s.num_waiting),
    )
    num_columns = max(len(runs), 1)
    fig = Figure(figsize=(4 + 3.5 * num_columns, 8.5), layout="constrained")
    # A column per policy (overlaid noisy series are unreadable); rows share their y scale so
    # the policies compare at a glance.
    axes = fig.subplots(len(panels), num_columns, sharex=True, sharey="row", squeeze=False)
    binned = any(len(steps) > TIMELINE_BINS for _, steps in runs.values())
    for column, (name, (_, steps)) in enumerate(runs.items()):
        axes[0, column].set_title(name, color=colors[name], fontweight="bold")
        axes[-1, column].set_xlabel("time (s)")
        for row, (label, values_of) in enumerate(panels):
            ax = axes[row, column]
            if len(steps):
                times, values = _time_bins(steps, values_of(steps))
                ax.step(times, values, where="post", color=colors[name], linewidth=0.9)
            ax.grid(True, alpha=0.3)
            if column == 0:
                ax.set_ylabel(label)
    axes[2, 0].set_ylim(0, 105)
    fig.suptitle("Engine steps over time" + (
        f" (duration-weighted mean per time bin, {TIMELINE_BINS} bins)" if binned
        else " (one point per step)"))
    return fig


def plot_timeline(runs: Runs, path: str | Path) -> Path:
    """Write `timeline_figure(runs)` to the PNG at `path`."""
    return _save(timeline_figure(runs), path)
