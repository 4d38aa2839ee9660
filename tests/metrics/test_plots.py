"""Plots are written as non-trivial PNG files for one and several policies, and for no data."""

from __future__ import annotations

import pytest

from refimpl.metrics import latency_cdfs_figure, plot_latency_cdfs, plot_timeline, timeline_figure

from ._records import make_requests, make_steps, rejected
from .test_summary import ROWS

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _run(num_steps: int):
    steps = make_steps([0.01 * (1 + i % 3) for i in range(num_steps)],
                       kv_used_pages=[i % 50 for i in range(num_steps)], kv_total_pages=64,
                       num_decode=[i % 7 for i in range(num_steps)],
                       num_prefill_tokens=[(i * 37) % 512 for i in range(num_steps)])
    return make_requests(ROWS), steps


def _assert_png(path, min_bytes: int = 20_000) -> None:
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert len(data) > min_bytes  # axes, curves and labels, not a blank canvas


@pytest.mark.parametrize("policies", [["vllm"], ["vllm", "sarathi", "prefill-first"]])
@pytest.mark.parametrize("plot", [plot_latency_cdfs, plot_timeline])
def test_plot_writes_a_png(tmp_path, plot, policies):
    # 400 steps is above the timeline's bin count, so the binned path runs too.
    runs = {name: _run(40 if i else 400) for i, name in enumerate(policies)}
    path = plot(runs, tmp_path / "sub" / f"{plot.__name__}.png")
    assert path.is_file()
    _assert_png(path)


@pytest.mark.parametrize("plot", [plot_latency_cdfs, plot_timeline])
def test_plot_without_finished_requests_or_steps(tmp_path, plot, recwarn):
    runs = {"vllm": (make_requests([rejected(0.0, "kv_full")]), make_steps([]))}
    _assert_png(plot(runs, tmp_path / "empty.png"), min_bytes=5_000)
    assert not [w for w in recwarn if issubclass(w.category, (UserWarning, RuntimeWarning))]


@pytest.mark.parametrize("figure", [latency_cdfs_figure, timeline_figure])
def test_figure_is_returned_with_a_panel_per_quantity_and_a_curve_per_policy(figure):
    runs = {name: _run(40) for name in ("vllm", "sarathi")}
    fig = figure(runs)
    assert fig.savefig  # a matplotlib Figure the learner keeps
    axes = fig.axes
    # CDFs: a TTFT and a TPOT panel; timeline: four quantities x a column per policy.
    assert len(axes) == (2 if figure is latency_cdfs_figure else 4 * len(runs))
    assert all(ax.lines for ax in axes)
    if figure is latency_cdfs_figure:
        labels = axes[0].get_legend_handles_labels()[1]
        assert {"vllm", "sarathi"} <= set(labels)
