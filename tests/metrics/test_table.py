"""Text tables: every policy and key figure shows, missing figures show as '-'."""

from __future__ import annotations

from refimpl.metrics import format_comparison, format_run, summarize
from refimpl.metrics.table import COMPARISON_COLUMNS, MISSING, format_headline

from ._records import make_requests, make_steps, rejected
from .test_summary import ROWS

STEPS = make_steps([1.0, 1.0], kv_used_pages=[2, 5], kv_total_pages=10,
                   decision_s=[1e-3, 3e-3])


def test_side_by_side_has_every_policy_and_key_figure():
    runs = {"vllm": summarize(make_requests(ROWS), STEPS),
            "sarathi": summarize(make_requests(ROWS[:3])),
            "prefill-first": summarize(make_requests([]))}
    text = format_comparison(runs)
    lines = text.splitlines()[:2 + len(runs)]  # header, rule, a row per policy
    for title, _, _ in COMPARISON_COLUMNS:
        assert title in lines[0]
    for line, name in zip(lines[2:], runs, strict=True):
        assert line.startswith(name)  # rows in the order given
    vllm = lines[2]
    for figure in ("500 ms", "1.94 s", "250 ms", "977 ms", "4.2 s", "3.33", "0.4", "50.0%",
                   "50.0%", "2.98 ms"):
        assert figure in vllm, figure
    assert lines[4].split()[1:] == ["0", "0", "0"] + [MISSING] * (len(COMPARISON_COLUMNS) - 3)


def test_side_by_side_says_why_each_rejecting_policy_rejected():
    many = ROWS + [rejected(5.0 + i, "exceeds_context") for i in range(1203)] + [
        rejected(9.0, "ttft_p95")]
    runs = {"slo": summarize(make_requests(many)), "vllm": summarize(make_requests(ROWS[:3]))}
    lines = format_comparison(runs).splitlines()
    assert "1,205" in lines[2]  # the count column, with thousands separators
    assert lines[4:] == ["", "rejected by reason:",
                         "  slo  rejected 1,205: exceeds_context 1,203, kv_full 1, ttft_p95 1"]


def test_no_rejections_no_reasons_block():
    text = format_comparison({"vllm": summarize(make_requests(ROWS[:3]))})
    assert len(text.splitlines()) == 3 and "reason" not in text


def test_reasons_read_most_first_with_thousands():
    from refimpl.metrics.table import format_reasons

    assert format_reasons({"ttft_p95": 103, "exceeds_context": 1100, "a": 103}) == (
        "exceeds_context 1,100, a 103, ttft_p95 103")
    assert format_reasons({}) == "none" and format_reasons({}, none="-") == "-"


def test_columns_line_up():
    text = format_comparison({"a": summarize(make_requests(ROWS)),
                              "a-much-longer-name": summarize(make_requests(ROWS[:2]))})
    assert len({len(line) for line in text.splitlines()[:2]}) == 1  # header as wide as rule


def test_one_run_in_detail():
    text = format_run(summarize(make_requests(ROWS), STEPS), title="vllm")
    assert text.startswith("vllm: 6 requests, 5 finished, 1 rejected, 1 preempted")
    for fragment in ("rejected by reason: kv_full 1", "length_capped 1", "SLO attainment 50.0%",
                     "goodput 0.4 req/s", "throughput 3.33 tok/s over 7.5 s", "TTFT",
                     "end-to-end", "queueing", "KV use mean 35.0%, peak 50.0% (5 of 10 pages)",
                     "p50 2 ms"):
        assert fragment in text, fragment
    assert "0 ns" not in text  # zero queueing delay reads '0 s'


def test_one_run_without_steps_or_requests():
    text = format_run(summarize(make_requests([])))
    assert "0 requests" in text and "KV use" not in text and "rejected by reason: none" in text


def test_large_rates_read_in_thousands_not_exponents():
    from refimpl.metrics.table import _number

    assert (_number(4561.7), _number(20.94), _number(0.4), _number(None)) == (
        "4,562", "20.9", "0.4", MISSING)


def test_the_headline_says_what_slo_bought_beside_the_best_other():
    summaries = {"slo": {"slo_attainment": 0.954, "goodput_req_s": 16.2},
                 "vllm": {"slo_attainment": 0.44, "goodput_req_s": 7.5},
                 "edf": {"slo_attainment": 0.905, "goodput_req_s": 15.4}}
    line = format_headline(summaries)
    assert line == ("slo met both SLOs for 95.4% of requests (16.2 good req/s); the best "
                    "other policy, edf, for 90.5% (15.4 good req/s): +4.9 points")
    assert format_headline({"slo": summaries["slo"]}) is None
    assert format_headline({"vllm": summaries["vllm"], "edf": summaries["edf"]}) is None
