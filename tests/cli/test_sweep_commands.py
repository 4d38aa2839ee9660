"""`refimpl sweep`, `capacity` and `compare`, and the exports of `simulate` and `run`."""

from __future__ import annotations

import json

import pytest

from refimpl.cli import main
from refimpl.export import read_table


def test_sweep_writes_the_table_the_runs_and_the_plots_and_resumes(tmp_path, capsys):
    out = tmp_path / "sweep"
    args = ["sweep", "--policy", "slo", "vllm", "--rate", "20", "40", "--num-requests", "60",
            "--serial", "--out", str(out)]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "sweep: 4 runs" in text and "4 runs serially, 0 from the cache" in text
    table = read_table(out / "sweep.parquet")
    assert table["policy"] == ["slo", "slo", "vllm", "vllm"]
    assert table["rate"] == [20.0, 40.0, 20.0, 40.0]
    assert read_table(out / "sweep.csv")["key"] == table["key"]
    assert len(list((out / "runs").glob("*.json"))) == 4
    for name in ("goodput_vs_rate.png", "attainment_vs_rate.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    assert main(args) == 0
    assert "0 runs serially, 4 from the cache" in capsys.readouterr().out


def test_sweep_reads_a_toml_grid_and_flags_replace_its_axes(tmp_path, capsys):
    grid = tmp_path / "grid.toml"
    grid.write_text('policy = ["vllm", "sarathi"]\nrate = [15]\nnum_requests = 40\n'
                    'classes = ["chat-batch"]\n')
    assert main(["sweep", str(grid), "--policy", "vllm", "--seed", "0", "1", "--serial",
                 "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    table = read_table(tmp_path / "out" / "sweep.csv")
    assert table["policy"] == ["vllm", "vllm"] and table["seed"] == ["0", "1"]
    assert table["slo"] == ["chat-batch"] * 2
    assert "sweep: 2 runs" in capsys.readouterr().out


@pytest.mark.parametrize(("args", "message"), [
    (["sweep", "--rate", "0", "--serial"], "rate=0.0: must be a finite number"),
    (["sweep", "--slo", "impatient", "--serial"], "slo='impatient': unknown SLO"),
    (["capacity", "--tolerance", "0", "--serial"], "tolerance=0.0: must be a finite number"),
    (["capacity", "--start-rate", "-2", "--serial"], "start_rate=-2.0"),
    (["sweep", "--serial", "--address", "auto"], "address='auto': cannot be used with"),
])
def test_bad_sweep_and_capacity_options_are_one_line_errors(tmp_path, capsys, args, message):
    assert main([*args, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_cluster_address_nothing_answers_at_is_refused_at_once(tmp_path, capsys):
    pytest.importorskip("ray", reason="Ray is not installed")
    assert main(["sweep", "--address", "127.0.0.1:1", "--out", str(tmp_path)]) == 2
    assert "address='127.0.0.1:1': nothing answers there" in capsys.readouterr().err


def test_capacity_prints_each_policys_answer_and_writes_its_report(tmp_path, capsys):
    assert main(["capacity", "--policy", "vllm", "--num-requests", "100", "--tolerance", "0.2",
                 "--serial", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "capacity: highest rate with >= 90%" in text and "vllm" in text
    rows = json.loads((tmp_path / "capacity.json").read_text())["capacity"]
    assert rows[0]["policy"] == "vllm" and rows[0]["capacity_req_s"] > 0


def test_simulate_exports_requests_steps_and_a_trace(tmp_path, capsys):
    paths = {"requests": tmp_path / "r.csv", "steps": tmp_path / "s.parquet",
             "trace": tmp_path / "t.json"}
    assert main(["simulate", "--num-requests", "30", "--rate", "10", "--policy", "vllm",
                 *(f"--{k}={v}" for k, v in paths.items())]) == 0
    assert "trace:" in capsys.readouterr().out
    assert len(read_table(paths["requests"])["request_id"]) == 30
    assert read_table(paths["steps"])["step"][0] == 0
    assert json.loads(paths["trace"].read_text())["traceEvents"]


def test_an_export_path_that_is_not_a_table_is_refused_before_the_run(tmp_path, capsys):
    assert main(["simulate", "--requests", str(tmp_path / "r.txt")]) == 2
    assert "requests=" in capsys.readouterr().err


def test_compare_shows_two_saved_runs_side_by_side(tmp_path, capsys):
    for policy in ("vllm", "sarathi"):
        assert main(["simulate", "--num-requests", "40", "--rate", "30", "--policy", policy,
                     "--json", str(tmp_path / f"{policy}.json")]) == 0
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "vllm.json"), str(tmp_path / "sarathi.json")]) == 0
    text = capsys.readouterr().out
    assert "vllm" in text and "sarathi" in text and "TTFT p99" in text
    assert "settings that differ:" in text and "policies" in text


@pytest.mark.numba
def test_run_exports_its_requests_and_trace(tmp_path):
    assert main(["run", "--num-requests", "4", "--rate", "4", "--policy", "vllm",
                 "--requests", str(tmp_path / "r.parquet"),
                 "--trace", str(tmp_path / "t.json")]) == 0
    assert len(read_table(tmp_path / "r.parquet")["request_id"]) == 4
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
