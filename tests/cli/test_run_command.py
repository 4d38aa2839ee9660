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
