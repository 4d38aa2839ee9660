"""`refimpl bench prefix`: skips cleanly without the trace, and prints a row per run."""

from __future__ import annotations

from refimpl.bench import prefix


def test_without_the_mooncake_trace_the_bench_says_so_and_skips(monkeypatch, capsys):
    monkeypatch.setattr(prefix, "mooncake_trace", lambda: None)
    report = prefix.run(quick=True)
    assert report["skipped"] and "skipped" in capsys.readouterr().out


def test_the_report_shows_each_policy_with_and_without_the_cache(capsys):
    point = {"multiple": 1.0, "hit_rate_tokens": 0.4, "hit_rate_blocks": 0.41,
             "ttft_p50_s": 0.1, "ttft_p95_s": 0.5, "slo_attainment": 0.99,
             "evicted_blocks": 3, "wall_per_step_us": 12.0}
    off = {**point, "hit_rate_tokens": None, "hit_rate_blocks": None, "evicted_blocks": None}
    report = {"trace": "t.jsonl", "model": "m", "target": 0.9, "results": {"8x H100": {
        "hardware": "h100-sxm-x8", "num_requests": 10, "trace_rate_req_s": 2.0,
        "shown": (1.0,), "policies": {
            "vllm/cache": {"points": [point], "capacity_req_s": 7.3},
            "vllm/no-cache": {"points": [off], "capacity_req_s": 3.9}}}}}
    prefix.print_report(report)
    out = capsys.readouterr().out
    assert "vllm/cache" in out and "40.0%" in out and "7.300" in out
    assert "vllm/no-cache" in out and "3.900" in out


def test_the_report_shows_the_real_engine_and_whether_its_tokens_agree(capsys):
    row = {"hit_rate_tokens": 0.06, "hit_rate_blocks": 0.07, "ttft_p50_s": 0.02,
           "ttft_p95_s": 0.2, "prefill_tokens": 9000, "wall_s": 4.0, "same_tokens": True}
    report = {"trace": "t.jsonl", "model": "m", "target": 0.9, "results": {},
              "real_engine": {"model": "tiny", "num_requests": 60, "length_scale": 1 / 32,
                              "policies": {"slo/cache": row,
                                           "slo/no-cache": {**row, "same_tokens": False}}}}
    prefix.print_report(report)
    out = capsys.readouterr().out
    assert "real engine (tiny" in out and "6.0%" in out and "9000" in out
    assert "yes" in out and "NO" in out
