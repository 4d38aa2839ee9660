"""The gate's capacity estimates, decision by decision: the decode share at each request's
pace, the prompt work ahead in the policy's order, and the online calibration."""

from __future__ import annotations

import numpy as np
import pytest

from refimpl.admission import Action, AdmissionConfig, AdmissionController
from refimpl.admission import state as S
from refimpl.config.slo import SLO
from refimpl.sched import Request
from refimpl.sched.plan import StepPlan


@pytest.fixture
def bound_gate(make_engine):
    """`bound_gate(requests, policy="slo", config=None)` -> an AdmissionController bound to a
    laid-out run of `requests` (nothing served yet), its decisions called directly."""

    def build(requests, policy="slo", config=None, num_pages=100_000):
        engine = make_engine(policy, num_pages=num_pages)
        _, context = engine._lay_out(requests)
        gate = AdmissionController(config)
        gate.bind(context)
        return gate

    return build


def _prompt_s(gate, tokens, computed=0):
    """The oracle of the gate's prompt seconds (the formula in capacity.py's docstring)."""
    f = gate.state.fparams
    pairs = tokens * computed + tokens * (tokens + 1) / 2
    return tokens * f[S.PREFILL_TOKEN_S] + pairs * f[S.PREFILL_PAIR_S]


def test_the_linearised_prompt_cost_matches_the_step_model(bound_gate, step_model):
    gate = bound_gate([Request(0, 0.0, 10, 10)])
    for tokens in (2048, 8192):
        exact = step_model.step_time_parts(tokens, tokens * (tokens + 1) // 2, 0, 0)
        # the fixed part of a step is the decodes' (base) share; a chunk adds the rest (for a
        # small chunk the gate over-counts the tokens that ride under the weights' read: a
        # safe error, which the delivery calibration takes back)
        assert _prompt_s(gate, tokens) == pytest.approx(exact - gate.state.fparams[S.BASE_S],
                                                        rel=0.25)


def test_decode_admits_up_to_the_decode_cap_at_each_requests_pace(bound_gate):
    slo = SLO(ttft_s=1000.0, tpot_s=0.02)  # prompts never the limit
    requests = [Request(i, 0.0, 1000, 1001, slo=slo) for i in range(400)]
    gate = bound_gate(requests)
    f = gate.state.fparams
    per_request = (f[S.C_SEQ_S] + f[S.C_KV_S] * (1000 + 1001 // 2)) / 0.02  # mean context
    fixed = f[S.BASE_S] / 0.02
    expected = int(np.floor((AdmissionConfig().decode_cap - fixed) / per_request))
    decisions = [gate.on_arrival(i, 0.0) for i in range(len(requests))]
    accepted = [d.action is Action.ACCEPT for d in decisions]
    first_held = accepted.index(False)
    assert first_held == pytest.approx(expected, abs=1)  # the share crosses the cap there
    assert decisions[first_held].action is Action.QUEUE
    assert decisions[first_held].reason == "tpot_capacity"


def test_a_prompt_that_cannot_be_done_by_its_deadline_is_rejected(bound_gate):
    slo = SLO(ttft_s=0.05, tpot_s=0.1)
    probe = bound_gate([Request(0, 0.0, 10, 10)])
    fits = max(p for p in range(1, 8000) if _prompt_s(probe, p) <= 0.9 * 0.05)
    late = min(p for p in range(1, 8000) if _prompt_s(probe, p) >= 1.1 * 0.05)
    # (one output token each: nothing decodes, so no tick is added to the prompt's work)
    assert bound_gate([Request(0, 0.0, fits, 1, slo=slo)]).on_arrival(0, 0.0).action is (
        Action.ACCEPT)
    assert bound_gate([Request(0, 0.0, late, 1, slo=slo)]).on_arrival(0, 0.0).reason == (
        "ttft_capacity")


def _pair(gate, tokens_a, tokens_b, policy):
    """Request 0 (loose deadline) admitted, then request 1 (tighter) decided."""
    a = Request(0, 0.0, tokens_a, 1, slo=SLO(ttft_s=0.1, tpot_s=0.1))  # (nothing decodes)
    b = Request(1, 0.0, tokens_b, 1, slo=SLO(ttft_s=0.05, tpot_s=0.1))
    g = gate([a, b], policy)
    assert g.on_arrival(0, 0.0).action is Action.ACCEPT
    return g.on_arrival(1, 0.0)


def test_deadline_order_protects_admitted_prompts_and_arrival_order_counts_them_ahead(
        bound_gate):
    probe = bound_gate([Request(0, 0.0, 10, 10)])
    # A needs 0.06 of its 0.1 s; B 0.045 of its 0.05 s: B first still fits B, but pushes A
    # to 0.105 s, past its deadline
    a = min(p for p in range(1, 8000) if _prompt_s(probe, p) >= 0.06)
    b = min(p for p in range(1, 8000) if _prompt_s(probe, p) >= 0.045)
    held = _pair(bound_gate, a, b, "slo")
    assert (held.action, held.reason) == (Action.QUEUE, "delays_admitted")
    # served in arrival order, B would wait behind A's whole prompt: it cannot make 0.05 s
    rejected = _pair(bound_gate, a, b, "vllm")
    assert (rejected.action, rejected.reason) == (Action.REJECT, "ttft_capacity")
    # a B small enough for both deadlines is accepted
    small = min(p for p in range(1, 8000) if _prompt_s(probe, p) >= 0.02)
    assert _pair(bound_gate, a, small, "slo").action is Action.ACCEPT


def test_the_step_error_is_learned_and_halves_the_decode_room(bound_gate):
    slo = SLO(ttft_s=1000.0, tpot_s=0.02)  # prompts never the limit
    requests = [Request(i, 0.0, 1000, 1001, slo=slo) for i in range(400)]
    honest, slow = bound_gate(requests), bound_gate(requests)
    f = slow.state.fparams
    # the machine runs every step twice as long as the model says
    for _ in range(AdmissionConfig().min_observations):
        slow.observe(StepPlan(), np.zeros(0, np.int64), 2 * f[S.BASE_S], 0.0)

    def room(gate):
        return [gate.on_arrival(i, 0.0).action for i in range(400)].index(Action.QUEUE)
    fixed = f[S.BASE_S] / 0.02
    per_request = (f[S.C_SEQ_S] + f[S.C_KV_S] * 1500) / 0.02
    cap = AdmissionConfig().decode_cap
    assert room(slow) == pytest.approx((cap / 2 - fixed) / per_request, abs=1.5)
    assert room(honest) == pytest.approx((cap - fixed) / per_request, abs=1.5)
