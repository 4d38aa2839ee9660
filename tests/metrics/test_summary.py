"""summarize on a hand-built run where every figure is worked out by hand in the comments."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refimpl.metrics import RequestRecords, summarize, summarize_by_class
from refimpl.metrics.summary import _STEP_KEYS

from ._records import NAN, make_requests, make_steps, rejected

MISSION_KEYS = (
    "ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "tpot_p50_s", "tpot_p95_s", "tpot_p99_s",
    "e2e_p50_s", "e2e_p95_s", "throughput_tok_s", "goodput_req_s", "slo_attainment",
    "num_requests", "num_finished", "num_rejected", "num_preempted", "rejected_by_reason",
)

# Targets: chat TTFT 1.0 s / TPOT 0.5 s; batch TTFT 10 s / TPOT 0.5 s. Times are binary
# fractions so that every latency below is exact in floating point.
#   id  class  arrival sched  first  finish  tokens  TTFT  TPOT          e2e   queue  meets
#   0   chat   0.0     0.25   0.5    2.5     9       0.5   2.0/8 = 0.25  2.5   0.25   yes
#   1   chat   1.0     1.0    1.5    1.5     1       0.5   (one token)   0.5   0.0    yes
#   2   chat   2.0     3.5    4.0    5.0     5       2.0   1.0/4 = 0.25  3.0   1.5    TTFT miss
#   3   batch  3.0     3.0    3.5    7.5     5       0.5   4.0/4 = 1.0   4.5   0.0    TPOT miss
#   4   batch  4.0     rejected: kv_full                                             no
#   5   batch  5.0     5.0    5.25   6.25    5       0.25  1.0/4 = 0.25  1.25  0.0    yes
ROWS = [
    {"arrival_s": 0.0, "first_scheduled_s": 0.25, "first_token_s": 0.5, "finish_s": 2.5,
     "num_generated": 9},
    {"arrival_s": 1.0, "first_scheduled_s": 1.0, "first_token_s": 1.5, "finish_s": 1.5,
     "num_generated": 1, "max_new_tokens": 1},
    {"arrival_s": 2.0, "first_scheduled_s": 3.5, "first_token_s": 4.0, "finish_s": 5.0,
     "num_generated": 5},
    {"arrival_s": 3.0, "first_scheduled_s": 3.0, "first_token_s": 3.5, "finish_s": 7.5,
     "num_generated": 5, "slo_class": "batch", "ttft_slo_s": 10.0, "num_preemptions": 2},
    rejected(4.0, "kv_full", slo_class="batch", ttft_slo_s=10.0),
    {"arrival_s": 5.0, "first_scheduled_s": 5.0, "first_token_s": 5.25, "finish_s": 6.25,
     "num_generated": 5, "slo_class": "batch", "ttft_slo_s": 10.0, "reason": "length_capped"},
]


@pytest.fixture
def requests() -> RequestRecords:
    return make_requests(ROWS)


def test_counts_and_reasons(requests):
    s = summarize(requests)
    assert (s["num_requests"], s["num_finished"], s["num_rejected"]) == (6, 5, 1)
    assert (s["num_preempted"], s["num_preemptions"]) == (1, 2)
    assert (s["num_slo_met"], s["num_ttft_met"], s["num_tpot_met"]) == (3, 4, 4)
    assert s["rejected_by_reason"] == {"kv_full": 1}
    assert s["finished_by_reason"] == {"completed": 4, "length_capped": 1}
    assert s["num_generated_tokens"] == 9 + 1 + 5 + 5 + 5


def test_ttft_percentiles_interpolate_linearly(requests):
    # Sorted TTFTs of the 5 finished: [0.25, 0.5, 0.5, 0.5, 2.0]; rank of p = p/100 * 4.
    s = summarize(requests)
    assert s["ttft_p50_s"] == 0.5
    assert s["ttft_p90_s"] == pytest.approx(0.5 + 0.6 * 1.5)  # rank 3.6
    assert s["ttft_p95_s"] == pytest.approx(0.5 + 0.8 * 1.5)  # rank 3.8
    assert s["ttft_p99_s"] == pytest.approx(0.5 + 0.96 * 1.5)  # rank 3.96
    assert s["ttft_mean_s"] == pytest.approx(3.75 / 5)


def test_tpot_skips_one_token_requests(requests):
    # TPOTs of the 4 with >= 2 tokens: [0.25, 0.25, 0.25, 1.0]; rank of p = p/100 * 3.
    s = summarize(requests)
    assert s["tpot_p50_s"] == 0.25
    assert s["tpot_p90_s"] == pytest.approx(0.25 + 0.7 * 0.75)
    assert s["tpot_p95_s"] == pytest.approx(0.25 + 0.85 * 0.75)
    assert s["tpot_p99_s"] == pytest.approx(0.25 + 0.97 * 0.75)
    assert s["tpot_mean_s"] == pytest.approx(1.75 / 4)


def test_e2e_and_queueing_delay(requests):
    # e2e sorted: [0.5, 1.25, 2.5, 3.0, 4.5]; queue sorted: [0, 0, 0, 0.25, 1.5].
    s = summarize(requests)
    assert s["e2e_p50_s"] == 2.5
    assert s["e2e_p95_s"] == pytest.approx(3.0 + 0.8 * 1.5)
    assert s["e2e_mean_s"] == pytest.approx(11.75 / 5)
    assert s["queue_p50_s"] == 0.0
    assert s["queue_p99_s"] == pytest.approx(0.25 + 0.96 * 1.25)
    assert s["queue_mean_s"] == pytest.approx(1.75 / 5)


def test_throughput_goodput_and_attainment(requests):
    # Makespan: first arrival 0.0 to last finish 7.5. Met both: requests 0, 1 and 5.
    s = summarize(requests)
    assert s["makespan_s"] == 7.5
    assert s["throughput_tok_s"] == pytest.approx(25 / 7.5)
    assert s["goodput_req_s"] == pytest.approx(3 / 7.5)
    assert s["slo_attainment"] == 0.5  # 3 of all 6 arrived; the rejected one counts


def test_each_request_is_judged_by_its_own_targets(requests):
    looser = dataclasses.replace(requests, ttft_slo_s=np.where(requests.request_id == 2, 2.0,
                                                                requests.ttft_slo_s))
    assert summarize(looser)["num_slo_met"] == 4  # TTFT 2.0 <= 2.0: the bound is inclusive


def test_by_class_uses_the_whole_runs_makespan(requests):
    by_class = summarize_by_class(requests)
    assert list(by_class) == ["batch", "chat"]
    chat, batch = by_class["chat"], by_class["batch"]
    assert (chat["num_requests"], chat["num_slo_met"], chat["slo_attainment"]) == (3, 2, 2 / 3)
    assert (batch["num_requests"], batch["num_slo_met"]) == (3, 1)
    assert batch["rejected_by_reason"] == {"kv_full": 1}
    assert chat["goodput_req_s"] + batch["goodput_req_s"] == pytest.approx(3 / 7.5)
    assert chat["throughput_tok_s"] + batch["throughput_tok_s"] == pytest.approx(25 / 7.5)
    assert chat["ttft_p50_s"] == 0.5 and batch["tpot_p50_s"] == pytest.approx(0.625)


def test_mission_keys_are_all_present(requests):
    s = summarize(requests, make_steps([1.0]))
    assert set(MISSION_KEYS) <= set(s)


def test_step_figures_weight_kv_use_by_duration():
    steps = make_steps([1.0, 1.0, 2.0, 4.0], kv_used_pages=[2, 4, 6, 0], kv_total_pages=10,
                       decision_s=[1e-3, 2e-3, 3e-3, 4e-3], num_decode=[0, 2, 2, 4],
                       num_prefill_tokens=[64, 32, 0, 0])
    s = summarize(make_requests([]), steps)
    assert s["kv_util_mean"] == pytest.approx((0.2 + 0.4 + 2 * 0.6 + 0) / 8)
    assert s["kv_util_peak"] == pytest.approx(0.6)
    assert s["kv_peak_pages"] == 6
    assert s["decision_p50_s"] == pytest.approx(2.5e-3)
    assert s["decision_p99_s"] == pytest.approx(3e-3 + 0.97e-3)
    assert (s["num_steps"], s["busy_s"]) == (4, 8.0)
    assert (s["decode_batch_mean"], s["prefill_tokens_per_step_mean"]) == (2.0, 24.0)


def test_runs_without_steps_report_the_same_keys_as_none(requests):
    with_steps = summarize(requests, make_steps([1.0], kv_total_pages=4, kv_used_pages=[1]))
    without = summarize(requests)
    assert list(with_steps) == list(without)
    assert set(_STEP_KEYS) <= set(without)
    assert all(without[key] is None for key in _STEP_KEYS)


def _no_nan(summary: dict) -> bool:
    return all(not (isinstance(v, float) and np.isnan(v)) for v in summary.values())


def test_an_empty_run_gives_none_not_nan():
    s = summarize(make_requests([]), make_steps([]))
    assert _no_nan(s)
    assert s["num_requests"] == 0 and s["rejected_by_reason"] == {}
    for key in ("ttft_p50_s", "tpot_p99_s", "throughput_tok_s", "goodput_req_s",
                "slo_attainment", "makespan_s", "kv_util_mean", "decision_p50_s"):
        assert s[key] is None, key
    assert summarize_by_class(make_requests([])) == {}


def test_an_all_rejected_run_attains_zero():
    s = summarize(make_requests([rejected(0.0, "kv_full"), rejected(2.0, "too_long")]))
    assert _no_nan(s)
    assert (s["num_rejected"], s["slo_attainment"], s["goodput_req_s"]) == (2, 0.0, 0.0)
    assert s["rejected_by_reason"] == {"kv_full": 1, "too_long": 1}
    assert s["ttft_p50_s"] is None and s["e2e_mean_s"] is None


def test_a_finished_request_without_a_first_token_misses_ttft():
    s = summarize(make_requests([{"arrival_s": 0.0, "finish_s": 1.0, "first_token_s": NAN}]))
    assert (s["num_finished"], s["num_slo_met"], s["ttft_p50_s"]) == (1, 0, None)


times = st.floats(min_value=0.0, max_value=100.0, allow_nan=False)


@st.composite
def random_row(draw) -> dict:
    """A finished or rejected request with consistent times (or first token missing)."""
    arrival_s = draw(times)
    if draw(st.booleans()):
        return rejected(arrival_s, draw(st.sampled_from(["kv_full", "too_long"])))
    queue_s, ttft_extra_s, decode_s = draw(times), draw(times), draw(times)
    return {"arrival_s": arrival_s, "first_scheduled_s": arrival_s + queue_s,
            "first_token_s": arrival_s + queue_s + ttft_extra_s,
            "finish_s": arrival_s + queue_s + ttft_extra_s + decode_s,
            "num_generated": draw(st.integers(1, 50)), "num_preemptions": draw(st.integers(0, 2)),
            "slo_class": draw(st.sampled_from(["chat", "batch"])),
            "ttft_slo_s": draw(times), "tpot_slo_s": draw(times)}


@settings(max_examples=60, deadline=None)
@given(st.lists(random_row(), max_size=12))
def test_random_runs_balance_and_stay_nan_free(rows):
    s = summarize(make_requests(rows))
    assert _no_nan(s)
    assert s["num_finished"] + s["num_rejected"] == s["num_requests"] == len(rows)
    assert sum(s["rejected_by_reason"].values()) == s["num_rejected"]
    assert sum(s["finished_by_reason"].values()) == s["num_finished"]
    assert s["num_slo_met"] <= min(s["num_ttft_met"], s["num_tpot_met"]) <= s["num_finished"]
    if rows:
        assert s["slo_attainment"] == s["num_slo_met"] / len(rows)
    if s["makespan_s"]:
        assert s["goodput_req_s"] * s["makespan_s"] == pytest.approx(s["num_slo_met"])
    by_class = summarize_by_class(make_requests(rows))
    assert sum(c["num_slo_met"] for c in by_class.values()) == s["num_slo_met"]
    if s["ttft_p50_s"] is not None:
        assert s["ttft_p50_s"] <= s["ttft_p90_s"] <= s["ttft_p99_s"]
