"""Goodput and attainment against rate, from a sweep's table: Figures, one line per policy."""

from __future__ import annotations

from refimpl.sweeps.plots import plot_attainment_vs_rate, plot_goodput_vs_rate, save_sweep_plots


def table():
    rows = [("slo", 10.0, 0, 1.0, 9.5), ("slo", 10.0, 1, 0.98, 9.4), ("slo", 20.0, 0, 0.9, 17.0),
            ("vllm", 10.0, 0, 0.95, 9.0), ("vllm", 20.0, 0, 0.7, 13.0)]
    columns = ("policy", "rate", "seed", "slo_attainment", "goodput_req_s")
    data = {name: [row[k] for row in rows] for k, name in enumerate(columns)}
    data.update(policy_params=["{}"] * 5, workload=["w"] * 5, slo=["default"] * 5,
                mean_rate_req_s=[None] * 5)
    return data


def test_one_line_per_policy_at_the_mean_over_seeds():
    fig = plot_goodput_vs_rate(table())
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    assert set(lines) == {"slo", "vllm"}
    assert list(lines["slo"].get_xdata()) == [10.0, 20.0]
    assert list(lines["slo"].get_ydata()) == [9.45, 17.0]
    fig = plot_attainment_vs_rate(table())
    assert "target 90%" in [line.get_label() for line in fig.axes[0].get_lines()]


def test_pngs_are_written_from_a_saved_table(tmp_path):
    from refimpl.export import write_table

    path = write_table(table(), tmp_path / "sweep.csv")
    for png in save_sweep_plots(path, tmp_path / "plots"):
        assert png.read_bytes()[:4] == b"\x89PNG"
