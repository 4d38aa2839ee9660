"""`refimpl simulate` and `refimpl demo`: reports, files written, one-line errors."""

from __future__ import annotations

import json

import pytest

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
    assert "SLO mlperf-llama3.1-8b-mix" in out  # the demo's own mix when none is given
    assert "slo met both SLOs for" in out and "the best other policy," in out
    report = json.loads((tmp_path / "report.json").read_text())
    assert set(report["policies"]) == set(POLICIES)
    assert report["settings"]["slo_set"]["name"] == "mlperf-llama3.1-8b-mix"
    for name in ("latency_cdfs.png", "timeline.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_missing_trace_is_a_one_line_error(tmp_path, capsys):
    assert main(["simulate", "--workload", str(tmp_path / "nope.csv")]) == 2
    err = capsys.readouterr().err
    assert "workload=" in err and "nope.csv" in err and "Traceback" not in err


def _report(path) -> dict:
    return json.loads(path.read_text())


def test_slo_interactive_puts_every_request_in_that_class_and_the_report_says_so(tmp_path,
                                                                                capsys):
    path = tmp_path / "run.json"
    assert main(["simulate", "--num-requests", "50", "--policy", "vllm", "--slo", "interactive",
                 "--json", str(path)]) == 0
    assert "SLO interactive" in capsys.readouterr().out
    report = _report(path)
    assert report["settings"]["slo_set"]["classes"] == [
        {"name": "interactive", "priority": 0, "ttft_s": 0.5, "tpot_s": 0.05, "weight": 1.0,
         "share": 1.0}]
    assert set(report["policies"]["vllm"]["by_class"]) == {"interactive"}


def test_classes_mix_is_drawn_seeded_and_recorded(tmp_path):
    paths = [tmp_path / f"{i}.json" for i in range(2)]
    for path in paths:
        assert main(["simulate", "--num-requests", "50", "--policy", "vllm", "--classes",
                     "interactive:0.3,batch:0.7", "--json", str(path)]) == 0
    first, second = (_report(p) for p in paths)
    by_class = first["policies"]["vllm"]["by_class"]
    assert set(by_class) == {"interactive", "batch"}
    assert by_class["interactive"]["num_requests"] < by_class["batch"]["num_requests"]
    assert first["settings"]["slo_set"]["spec"] == "interactive:0.3,batch:0.7"
    assert [by_class[c]["num_requests"] for c in by_class] == [
        second["policies"]["vllm"]["by_class"][c]["num_requests"] for c in by_class]


def test_the_default_is_the_one_default_class(tmp_path):
    path = tmp_path / "run.json"
    assert main(["simulate", "--num-requests", "20", "--policy", "vllm", "--json",
                 str(path)]) == 0
    assert _report(path)["settings"]["slo_set"]["name"] == "default"


def test_demo_takes_a_named_slo_set(tmp_path, capsys):
    assert main(["demo", "--num-requests", "50", "--classes", "chat-batch",
                 "--out", str(tmp_path)]) == 0
    assert "SLO chat-batch (interactive:0.5,batch:0.5)" in capsys.readouterr().out
    report = _report(tmp_path / "report.json")
    assert report["settings"]["slo_set"]["name"] == "chat-batch"
    for summary in report["policies"].values():
        assert set(summary["by_class"]) == {"interactive", "batch"}


def test_an_explicit_slo_replaces_the_demos_mix(tmp_path, capsys):
    assert main(["demo", "--num-requests", "30", "--slo", "batch", "--out", str(tmp_path)]) == 0
    assert _report(tmp_path / "report.json")["settings"]["slo_set"]["name"] == "batch"


def test_slo_and_classes_together_are_refused(capsys):
    with pytest.raises(SystemExit) as info:
        main(["simulate", "--slo", "interactive", "--classes", "batch:1"])
    assert info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "fragment"), [
    (["--slo", "realtime"], "slo='realtime': unknown SLO preset"),
    (["--classes", "interactive:0"], "share='0'"),
    (["--classes", "interactive:1,interactive:1"], "classes='interactive': named twice"),
    (["--classes", "nope"], "classes='nope'"),
])
def test_bad_slo_options_are_one_line_errors(argv, fragment, capsys):
    assert main(["simulate", "--num-requests", "5", *argv]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err


def test_policy_all_says_why_requests_were_rejected(tmp_path, capsys):
    trace = tmp_path / "long.csv"  # half the prompts exceed opt-13b's 2,048-token context
    trace.write_text("num_prefill_tokens,num_decode_tokens\n"
                     + "".join(f"{4000 if i % 2 else 100},20\n" for i in range(20)))
    assert main(["simulate", "--workload", str(trace), "--rate", "5", "--model", "opt-13b",
                 "--policy", "all"]) == 0
    out = capsys.readouterr().out
    assert "rejected by reason:" in out
    reasons = out.split("rejected by reason:", 1)[1]
    for policy in POLICIES:
        assert f"{policy}" in reasons
    assert "rejected 10: exceeds_context 10" in reasons


def test_simulate_caches_a_mooncake_traces_prefixes_unless_told_not_to(tmp_path, capsys):
    trace = tmp_path / "mooncake.jsonl"
    rows = [{"timestamp": 30000 * i, "input_length": 1800, "output_length": 4,
             "hash_ids": [1, 2, 3, 100 + i]} for i in range(4)]
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
    common = ["simulate", "--workload", str(trace), "--policy", "vllm", "--model",
              "llama-3.1-8b"]
    assert main([*common, "--json", str(tmp_path / "on.json")]) == 0
    assert "prefix cache: hits" in capsys.readouterr().out
    assert main([*common, "--no-prefix-cache", "--json", str(tmp_path / "off.json")]) == 0
    assert "prefix cache" not in capsys.readouterr().out
    on = json.loads((tmp_path / "on.json").read_text())
    off = json.loads((tmp_path / "off.json").read_text())
    assert on["settings"]["prefix_cache"] and not off["settings"]["prefix_cache"]
    assert on["policies"]["vllm"]["prefix_hit_blocks"] == 3 * 3  # 3 blocks, 3 later requests
    assert "prefix_hit_blocks" not in off["policies"]["vllm"]


def test_kv_pages_sizes_the_pool_and_a_small_one_puts_the_kv_under_pressure(tmp_path):
    reports = {}
    for pages in (None, 64):
        path = tmp_path / f"{pages}.json"
        extra = [] if pages is None else ["--kv-pages", str(pages)]
        assert main(["simulate", "--num-requests", "60", "--rate", "20", "--policy", "vllm",
                     "--json", str(path), *extra]) == 0
        reports[pages] = json.loads(path.read_text())
    assert reports[64]["settings"]["kv_pages"] == 64
    assert reports[None]["settings"]["kv_pages"] > 10_000  # the H100's memory after weights
    assert (reports[64]["policies"]["vllm"]["num_preempted"]
            > reports[None]["policies"]["vllm"]["num_preempted"])


@pytest.mark.parametrize("pages", ["0", "-3"])
def test_a_bad_kv_pages_is_a_one_line_error(pages, capsys):
    assert main(["simulate", "--num-requests", "5", "--kv-pages", pages]) == 2
    err = capsys.readouterr().err
    assert f"kv_pages={pages}" in err and "Traceback" not in err
