"""Text tables: every policy and key figure shows, missing figures show as '-'."""

from __future__ import annotations

from refimpl.metrics import format_comparison, format_run, summarize
from refimpl.metrics.table import COMPARISON_COLUMNS, MISSING

from ._records import make_requests, make_steps
from .test_summary import ROWS

STEPS = make_steps([1.0, 1.0], kv_used_pages=[2, 5], kv_total_pages=10,
                   decision_s=[1e-3, 3e-3])


def test_side_by_side_has_every_policy_and_key_figure():
    runs = {"vllm": summarize(make_requests(ROWS), STEPS),
            "sarathi": summarize(make_requests(ROWS[:3])),
            "prefill-first": summarize(make_requests([]))}
    text = format_comparison(runs)
    lines = text.splitlines()
    assert len(lines) == 2 + len(runs)  # header, rule, a row per policy
    for title, _, _ in COMPARISON_COLUMNS:
        assert title in lines[0]
    for line, name in zip(lines[2:], runs, strict=True):
        assert line.startswith(name)  # rows in the order given
    vllm = lines[2]
    for figure in ("500 ms", "1.94 s", "250 ms", "977 ms", "4.2 s", "3.33", "0.4", "50.0%",
                   "50.0%", "2.98 ms"):
        assert figure in vllm, figure
    assert lines[4].split()[1:] == ["0", "0", "0"] + [MISSING] * (len(COMPARISON_COLUMNS) - 3)


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
