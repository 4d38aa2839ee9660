"""`refimpl run`: the real engine from the command line, beside its simulated replay."""

from __future__ import annotations

import json

import pytest

from refimpl.cli import main

pytestmark = pytest.mark.numba


def test_run_serves_on_the_real_engine_and_compares_with_the_simulator(tmp_path, capsys):
    path = tmp_path / "run.json"
    assert main(["run", "--num-requests", "8", "--rate", "4", "--policy", "vllm",
                 "--compare-sim", "--json", str(path), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "tiny on this CPU (LinearStepModel" in out and "served in" in out
    assert "kernels' first calls" in out  # compiled or loaded before serving, said apart
    assert "vllm: real vs simulated" in out and "step time, calibrated prediction" in out
    report = json.loads(path.read_text())
    summary = report["policies"]["vllm"]
    assert summary["num_requests"] == 8 and summary["num_finished"] == 8
    assert report["settings"]["clock"] == "measured"
    profile = report["settings"]["step_profile"]  # the cost model it planned with
    assert profile["heldout_mape"] >= 0 and set(profile["coefficients"]) >= {"per_token_s"}
    assert (tmp_path / "timeline.png").read_bytes()[:4] == b"\x89PNG"


def test_run_refuses_an_unknown_model_in_one_line(tmp_path, capsys):
    assert main(["run", "--model", str(tmp_path / "no-such-checkpoint")]) == 2
    err = capsys.readouterr().err
    assert "no-such-checkpoint" in err and "Traceback" not in err


def test_run_caches_a_traces_shared_prefixes(tmp_path):
    # a Mooncake trace whose requests share their first two 512-token blocks; at 1/32 a
    # block is one page of tokens made from its hash
    rows = [{"timestamp": 500 * k, "input_length": 2048, "output_length": 64,
             "hash_ids": [1, 2, 10 + k, 20 + k]} for k in range(4)]
    trace = tmp_path / "mc.jsonl"
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
    path = tmp_path / "run.json"
    assert main(["run", "--workload", str(trace), "--length-scale", "0.03125", "--policy",
                 "vllm", "--json", str(path), "--out", str(tmp_path)]) == 0
    report = json.loads(path.read_text())
    assert report["settings"]["prefix_cache"] is True
    assert report["policies"]["vllm"]["prefix_hit_blocks"] == 3 * 2


def test_run_prepares_the_serving_loop_on_the_terminal_before_serving(monkeypatch):
    import importlib

    import refimpl.engine

    engine_run = importlib.import_module("refimpl.engine.run")  # (the package names `run` too)

    class Prepared(Exception):
        pass

    def prepare_loop():
        raise Prepared

    def run_real(*args, **kwargs):
        raise AssertionError("served before the loop was prepared")

    monkeypatch.setattr(refimpl.engine, "prepare_loop", prepare_loop)
    monkeypatch.setattr(engine_run, "run", run_real)
    with pytest.raises(Prepared):
        main(["run", "--num-requests", "2", "--policy", "vllm"])


def test_every_policy_of_a_run_plans_with_the_one_step_profile(monkeypatch, tmp_path):
    import importlib

    engine_run = importlib.import_module("refimpl.engine.run")
    measured = []
    profile_steps = engine_run.profile_steps

    def counted(*args, **kwargs):
        measured.append(profile_steps(*args, **kwargs))
        return measured[-1]

    monkeypatch.setattr(engine_run, "profile_steps", counted)
    path = tmp_path / "run.json"
    assert main(["run", "--num-requests", "3", "--policy", "all", "--json", str(path),
                 "--out", str(tmp_path)]) == 0
    assert len(measured) == 1  # measured once, not once a policy
    report = json.loads(path.read_text())
    assert report["settings"]["step_profile"]["coefficients"] == measured[0].model.as_dict()
