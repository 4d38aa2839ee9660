"""The estimates: the cost model's figures for a lone request, the backlog's effect, the
residual window, the output predictor; and where admission is on by default."""

from __future__ import annotations

import numpy as np
import pytest

from refimpl.admission import AdmissionController, LoadPredictor
from refimpl.engine import simulate
from refimpl.kv import PagePool
from refimpl.kv.manager import KVView, new_kv_state
from refimpl.sched import Request


@pytest.fixture
def predictor(step_model):
    kv = new_kv_state(PagePool(4096, 16), 8, 8)
    return LoadPredictor(step_model, KVView(kv, np.zeros(8, np.int64)), min_observations=3)


def test_a_lone_request_is_predicted_by_the_cost_model_alone(predictor, step_model):
    request = Request(0, 1.0, 1000, 101)
    p = predictor.predict(request, now_s=1.5)
    prefill_s = step_model.step_time_parts(1000, 1000 * 1001 // 2, 0, 0)
    assert p.ttft_s == pytest.approx(0.5 + prefill_s)  # waited 0.5 s, then its own prefill
    assert p.tpot_s == pytest.approx(step_model.step_time_parts(0, 0, 1, 1000 + 50 + 1))
    assert (p.ttft_p95_s, p.tpot_p95_s) == (p.ttft_s, p.tpot_s)  # no residuals yet
    assert p.kv_peak_pages == -(-1101 // 16)


def test_admitting_a_request_delays_the_next_and_its_class_only(predictor):
    from refimpl.config.slo import SLO

    newcomer = Request(1, 0.0, 500, 10)
    before = predictor.predict(newcomer, 0.0)
    first = Request(0, 0.0, 4000, 10)
    predictor.on_admit(first, predictor.predict(first, 0.0))
    assert predictor.predict(newcomer, 0.0).ttft_s > before.ttft_s
    assert predictor.reserved_pages == -(-4010 // 16)
    tighter = Request(2, 0.0, 500, 10, slo=SLO(ttft_s=0.5, tpot_s=0.05))  # due before `first`
    assert predictor.predict(tighter, 0.0).ttft_s == pytest.approx(before.ttft_s)


def test_the_p95_adds_the_recent_residuals_of_its_own_class(predictor):
    from refimpl.config.slo import SLO

    request = Request(0, 0.0, 100, 10)  # the default class: TTFT target 2 s
    for residual_s in (0.1, 0.2, 0.3, 0.4):
        predictor._window(predictor.ttft_residual_s, request.slo.ttft_s).add(residual_s)
    for residual_s in (20.0, 25.0, 22.0):  # a loose class served late on purpose ...
        predictor._window(predictor.ttft_residual_s, 30.0).add(residual_s)
    p = predictor.predict(request, 0.0)
    assert p.ttft_p95_s == pytest.approx(p.ttft_s + 0.385)  # np.percentile([.1,.2,.3,.4], 95)
    loose = predictor.predict(Request(1, 0.0, 100, 10, slo=SLO(ttft_s=30.0, tpot_s=0.5)), 0.0)
    assert loose.ttft_p95_s > p.ttft_p95_s + 19  # ... sees only its own residuals


def test_unknown_outputs_are_predicted_by_the_rolling_p90(step_model):
    kv = KVView(new_kv_state(PagePool(4096, 16), 1, 1), np.zeros(1, np.int64))
    predictor = LoadPredictor(step_model, kv, min_observations=3, output_known=False,
                              default_output_tokens=64)
    request = Request(0, 0.0, 100, 1000)
    assert predictor.expected_output_tokens(request) == 64  # nothing observed yet
    for length in (10, 20, 30, 40, 50):
        predictor.output_tokens.add(length)
    assert predictor.expected_output_tokens(request) == 46  # ceil(p90) of the window


def test_admission_is_on_by_default_for_slo_only():
    runs = {policy: simulate("azure-conv-like", policy, num_requests=20)
            for policy in ("slo", "vllm")}
    assert runs["slo"].settings["admission"] and not runs["vllm"].settings["admission"]
    with_it = simulate("azure-conv-like", "vllm", num_requests=20, admission=True)
    assert with_it.summary()["admission_by_decision"]["accept"] == 20
    mine = AdmissionController()
    simulate("azure-conv-like", "sarathi", num_requests=20, admission=mine)
    assert sum(mine.counts.values()) == 20


def test_the_cli_turns_admission_off(tmp_path):
    import json

    from refimpl.cli import main

    path = tmp_path / "run.json"
    assert main(["simulate", "--num-requests", "20", "--no-admission", "--json",
                 str(path)]) == 0
    assert json.loads(path.read_text())["policies"]["slo"]["admission_by_decision"] == {}


def test_the_tpot_p95_is_the_observed_share_of_the_target_plus_the_model_change(predictor):
    for ratio in (0.5, 0.6, 0.7, 0.8):
        predictor._window(predictor.tpot_ratio, 0.1).add(ratio)
    predictor._window(predictor.tpot_ratio, 0.5).add(0.99)  # another class: not this one's
    p = predictor.predict(Request(0, 0.0, 100, 10), 0.0)  # default class: TPOT target 0.1 s
    assert p.tpot_p95_s == pytest.approx(0.785 * 0.1 + p.tpot_s)  # the batch was empty


def test_queued_prompts_count_as_ahead(predictor):
    newcomer = Request(1, 0.0, 500, 10)
    before = predictor.predict(newcomer, 0.0).ttft_s
    predictor.on_queue(Request(0, 0.0, 3000, 10), 1)
    assert predictor.predict(newcomer, 0.0).ttft_s > before


def test_a_slower_measured_drain_rate_replaces_the_model(predictor):
    from refimpl.sched.plan import StepPlan
    from refimpl.sched.table import RequestTable, new_requests

    first = Request(0, 0.0, 4000, 10)
    table = RequestTable(*new_requests([first]), [first.slo])
    predictor.on_admit(first, predictor.predict(first, 0.0))
    for _ in range(3):  # 100 prompt tokens per 10 s step: 10 tokens/s while prompts wait
        predictor.observe(StepPlan(prefill=((0, 100),)), np.zeros(0, np.int64), 10.0, table)
    newcomer = Request(1, 0.0, 500, 10)
    assert predictor.predict(newcomer, 0.0).ttft_s == pytest.approx((3700 + 500) / 10)
