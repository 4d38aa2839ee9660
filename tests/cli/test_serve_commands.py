"""`refimpl simulate` and `refimpl demo`: reports, files written, one-line errors."""

from __future__ import annotations

import json

from refimpl.cli import main
from refimpl.sched import POLICIES

MISSION_KEYS = {"ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "tpot_p50_s", "tpot_p95_s",
                "tpot_p99_s", "e2e_p50_s", "e2e_p95_s", "throughput_tok_s", "goodput_req_s",
                "slo_attainment", "num_requests", "num_finished", "num_rejected",
                "num_preempted", "rejected_by_reason"}


def test_simulate_writes_a_json_report_with_the_mission_keys(tmp_path, capsys):
    path = tmp_path / "run.json"
    assert main(["simulate", "--num-requests", "40", "--rate", "10", "--json", str(path)]) == 0
    report = json.loads(path.read_text())
    summary = report["policies"]["slo"]  # the default policy
    assert set(summary) >= MISSION_KEYS
    assert summary["num_requests"] == 40
    assert report["settings"]["model"] == "llama-3-8b"
    assert "TTFT" in capsys.readouterr().out


def test_simulate_is_reproducible_byte_for_byte(tmp_path):
    paths = [tmp_path / f"{i}.json" for i in range(2)]
    for path in paths:
        main(["simulate", "--num-requests", "30", "--policy", "sarathi", "--json", str(path)])
    first, second = (json.loads(p.read_text()) for p in paths)
    for report in (first, second):  # decision times are wall time: the one thing that varies
        summary = report["policies"]["sarathi"]
        for key in [k for k in summary if k.startswith("decision")]:
            del summary[key]
    assert first == second


def test_demo_runs_every_policy_and_writes_report_and_plots(tmp_path, capsys):
    assert main(["demo", "--num-requests", "60", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in POLICIES)
    report = json.loads((tmp_path / "report.json").read_text())
    assert set(report["policies"]) == set(POLICIES)
    for name in ("latency_cdfs.png", "timeline.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_missing_trace_is_a_one_line_error(tmp_path, capsys):
    assert main(["simulate", "--workload", str(tmp_path / "nope.csv")]) == 2
    err = capsys.readouterr().err
    assert "workload=" in err and "nope.csv" in err and "Traceback" not in err
