"""The gate's capacity estimates, decision by decision: the decode share at each request's
pace, the prompt work ahead in the policy's order, and the online calibration."""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import pytest

from refimpl.admission import Action, AdmissionConfig, AdmissionController
from refimpl.admission import calibration as K
from refimpl.admission import capacity as C
from refimpl.admission import rates as R
from refimpl.admission import state as S
from refimpl.config.slo import SLO
from refimpl.sched import Request
from refimpl.sched.plan import StepPlan
from refimpl.sched.table import COMPUTED, FIRST_TOKEN, GENERATED, PROMPT


@pytest.fixture
def bound_gate(make_engine):
    """`bound_gate(requests, policy="slo", config=None, **policy_params)` -> an
    AdmissionController bound to a laid-out run of `requests` (nothing served yet), its
    decisions called directly."""

    def build(requests, policy="slo", config=None, num_pages=100_000, **policy_params):
        engine = make_engine(policy, num_pages=num_pages, **policy_params)
        _, context = engine._lay_out(requests)
        gate = AdmissionController(config)
        gate.bind(context)
        return gate

    return build


def _prompt_s(gate, tokens, computed=0):
    """The oracle of the gate's prompt seconds (the formula in rates.py's docstring)."""
    f = gate.state.fparams
    pairs = tokens * computed + tokens * (tokens + 1) / 2
    return tokens * f[S.PREFILL_TOKEN_S] + pairs * f[S.PREFILL_PAIR_S]


def test_the_linearised_prompt_cost_matches_the_step_model(bound_gate, step_model):
    gate = bound_gate([Request(0, 0.0, 10, 10)])
    for tokens in (2048, 8192):
        exact = step_model.step_time_parts(tokens, tokens * (tokens + 1) // 2, 0, 0)
        # a chunk's step costs the line's intercept and the chunk's seconds
        fixed = gate.state.fparams[S.PREFILL_FIXED_S]
        assert _prompt_s(gate, tokens) == pytest.approx(exact - fixed, rel=0.05)


def test_a_chunk_step_pays_less_than_the_weights_read_where_the_read_hides_under_it(
        make_engine):
    from refimpl.config import HardwareSpec, ModelConfig
    from refimpl.costmodel.choose import step_time_model

    # on a GPU preset a 2,048-token chunk is compute-bound: the weights read of a decode step
    # (`base`) overlaps its arithmetic, so the line through big chunks meets 0 tokens lower
    model = ModelConfig.preset("llama-3-8b")
    step_model = step_time_model(model, HardwareSpec.preset("h100-sxm"))
    per_token, _, fixed = S.linearise_prefill(step_model)
    base = step_model.step_time_parts(0, 0, 1, 1)
    assert 0 < fixed < 0.7 * base
    for tokens in (2048, 4096):
        assert step_model.step_time_parts(tokens, 0, 0, 0) == pytest.approx(
            fixed + per_token * tokens, rel=0.02)


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


def test_a_newcomers_own_decodes_do_not_slow_its_own_prompt(bound_gate):
    # its decodes start with its first token: on an idle machine the prompt that fits is
    # admitted whatever pace its output asks for, and predicted at the prompt's own time
    probe = bound_gate([Request(0, 0.0, 10, 10)])
    fits = max(p for p in range(1, 8000) if _prompt_s(probe, p) <= 0.9 * 0.05)
    gate = bound_gate([Request(0, 0.0, fits, 500, slo=SLO(ttft_s=0.05, tpot_s=0.02))])
    assert gate.on_arrival(0, 0.0).action is Action.ACCEPT
    assert gate.state.prediction[S.FIRST_TOKEN_S, 0] == pytest.approx(_prompt_s(gate, fits))


def _on_seventy_b(policy, requests):
    """A gate bound to a run of `requests` by `policy` on Llama-2-70B / four H100s (a chunk's
    fixed part, 12 ms, is 40% of a 30 ms tick), all but the last accepted."""
    from refimpl.config import HardwareSpec, ModelConfig
    from refimpl.costmodel.choose import step_time_model
    from refimpl.engine import Engine, SimulatedExecutor
    from refimpl.kv import PagePool
    from refimpl.sched import make_policy

    model, hardware = ModelConfig.preset("llama-2-70b"), HardwareSpec.preset("h100-sxm-x4")
    engine = Engine(make_policy(policy), SimulatedExecutor(step_time_model(model, hardware)),
                    PagePool(20_000, 16, max_context=model.max_context), model,
                    hardware=hardware)
    _, context = engine._lay_out(requests)
    gate = AdmissionController()
    gate.bind(context)
    for i in range(len(requests) - 1):
        assert gate.on_arrival(i, 0.0).action is Action.ACCEPT
    return gate


# eight requests decoding at 30 ms TPOT (their own prompts due last)
_DECODERS = [Request(i, 0.0, 16, 500, slo=SLO(ttft_s=10.0, tpot_s=0.03)) for i in range(8)]


@pytest.mark.parametrize(("policy", "admitted"), [("slo", True), ("vllm", False)])
def test_a_prompt_late_at_the_decodes_pace_is_predicted_in_stretched_steps_under_slo(
        policy, admitted):
    # at the decodes' pace every tick pays a chunk's fixed part; `slo` stretches a step for
    # the most urgent prompt if it would miss (refimpl.sched.slo.budget), an arrival-order
    # policy does not, so only under `slo` does the gate count on it
    def newcomer(ttft_s):
        return Request(8, 0.0, 4000, 20, slo=SLO(ttft_s, 0.1))

    probe = _on_seventy_b(policy, [*_DECODERS, newcomer(10.0)])
    paced, stretched = R.prompt_rate(probe.state, 0.0, np.inf), R.stretched_rate(probe.state)
    assert stretched > 1.2 * paced
    own = _prompt_s(probe, 4000)
    gate = _on_seventy_b(policy, [*_DECODERS, newcomer(0.5 * (own / paced + own / stretched))])
    decision = gate.on_arrival(8, 0.0)
    assert (decision.action is Action.ACCEPT) is admitted
    if admitted:
        assert gate.state.prediction[S.FIRST_TOKEN_S, 8] == pytest.approx(own / stretched,
                                                                      rel=0.01)


def test_behind_another_prompt_a_late_prompt_is_predicted_stretched_once_it_is_the_head():
    # the stretch serves the most urgent prompt: one due sooner (and on time at the decodes'
    # pace) runs first at that pace, then the newcomer, late at it, in stretched steps
    ahead = Request(8, 0.0, 1000, 20, slo=SLO(ttft_s=0.3, tpot_s=0.1))
    gate = _on_seventy_b("slo", [*_DECODERS, ahead, Request(9, 0.0, 4000, 20,
                                                            slo=SLO(0.4, 0.1))])
    paced, stretched = R.prompt_rate(gate.state, 0.0, np.inf), R.stretched_rate(gate.state)
    assert stretched > 1.2 * paced
    gate.on_arrival(9, 0.0)
    first_token_s = _prompt_s(gate, 1000) / paced + _prompt_s(gate, 4000) / stretched
    assert gate.state.prediction[S.FIRST_TOKEN_S, 9] == pytest.approx(first_token_s, rel=0.01)


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


def _chunk(row, tokens):
    return StepPlan(prefill=((row, tokens),))


NO_END = np.zeros(0, np.int64)


def _last_chunk_of_the_first(bound_gate, num_admitted):
    """A gate with `num_admitted` long prompts admitted and calibrated, shown a step of 0.2 s
    whose 64-token chunk ends the first prompt."""
    slo = SLO(ttft_s=1000.0, tpot_s=0.1)
    gate = bound_gate([Request(i, 0.0, 8000, 1, slo=slo) for i in range(2)])
    for i in range(num_admitted):
        assert gate.on_arrival(i, 0.0).action is Action.ACCEPT
    for _ in range(AdmissionConfig().min_observations):
        gate.observe(StepPlan(), NO_END, 0.01, 0.0)
    ints = gate.ctx.arrays.ints
    ints[COMPUTED, 0] = ints[PROMPT, 0]
    gate.observe(_chunk(0, 64), NO_END, 0.2, 0.0)
    return gate


def test_the_prompt_rate_is_learned_only_from_steps_where_prompts_still_waited(bound_gate):
    # the last chunk of request 0: tiny against its long step, but request 1 still waits, so
    # the step says the policy gave prompts a tenth of what the model thought free
    gate = _last_chunk_of_the_first(bound_gate, 2)
    assert gate.state.counts[S.RATE_STEPS] == 1
    assert K.delivery(gate.state) == K.ETA_RANGE[0]
    # the same with nothing waiting after it: it says how little was asked, not what could
    # be given, and the rate is not learned from it
    alone = _last_chunk_of_the_first(bound_gate, 1)
    assert alone.state.counts[S.RATE_STEPS] == 0
    assert K.delivery(alone.state) == 1.0


def test_the_prompt_rate_forgets_exactly_once_its_steps_leave_the_window(bound_gate):
    slo = SLO(ttft_s=1000.0, tpot_s=0.1)
    gate = bound_gate([Request(0, 0.0, 100_000, 1, slo=slo)])
    assert gate.on_arrival(0, 0.0).action is Action.ACCEPT
    # three chunks of different sizes (their sums do not cancel exactly when subtracted)
    for tokens, duration in ((100, 0.1), (200, 0.2), (300, 0.3)):
        gate.observe(_chunk(0, tokens), NO_END, duration, 0.0)
    assert gate.state.counts[S.RATE_STEPS] == 3
    for _ in range(S.RING):
        gate.observe(StepPlan(), NO_END, 0.01, 0.0)
    assert gate.state.counts[S.RATE_STEPS] == 0
    assert gate.state.totals[S.DELIVERED_S] == gate.state.totals[S.AVAILABLE_S] == 0.0
    assert K.delivery(gate.state) == 1.0  # untrusted: no step measured it


def test_a_newcomer_waits_for_the_step_in_flight_not_for_a_whole_tick(bound_gate):
    # a batch request decodes at a 0.5 s pace (the `slo` tick would be 0.25 s), in steps as
    # long as the model says: an interactive prompt of 0.1 s of work meets a 0.2 s target
    patient = Request(0, 0.0, 100, 10_000, slo=SLO(ttft_s=30.0, tpot_s=0.5))
    probe = bound_gate([Request(0, 0.0, 10, 10)])
    tokens = min(p for p in range(1, 8000) if _prompt_s(probe, p) >= 0.1)
    urgent = Request(1, 0.0, tokens, 1, slo=SLO(ttft_s=0.2, tpot_s=0.05))
    gate = bound_gate([patient, urgent])
    f = gate.state.fparams
    assert gate.on_arrival(0, 0.0).action is Action.ACCEPT
    gate.ctx.arrays.ints[COMPUTED, 0] = 100  # its prompt is done: nothing pending
    step = f[S.BASE_S] + f[S.C_SEQ_S] + f[S.C_KV_S] * 100
    for _ in range(AdmissionConfig().min_observations):
        gate.observe(StepPlan(decode=(0,)), NO_END, step, 0.0)
    assert K.step_error(gate.state) == pytest.approx(1.0)
    assert R.tick_s(gate.state, np.inf) == pytest.approx(0.25)
    assert K.granularity_s(gate.state) == pytest.approx(step / 2)  # E[d^2] / (2 E[d])
    assert gate.on_arrival(1, 0.0).action is Action.ACCEPT
    # one long step in the window weighs as the likelier to be in flight
    gate.observe(StepPlan(decode=(0,)), NO_END, 0.5, 0.0)
    durations = np.array([step] * AdmissionConfig().min_observations + [0.5])
    assert K.granularity_s(gate.state) == pytest.approx(
        (durations**2).sum() / (2 * durations.sum()))


def _first_tokens_late(gate, rows, late_per_s):
    """Accept `rows` at 0 s, then let each first token come `late_per_s` of its predicted
    wait after the gate's prediction, and show the gate the step."""
    a = gate.ctx.arrays
    for i in rows:
        assert gate.on_arrival(i, 0.0).action is Action.ACCEPT
    for i in rows:
        decided, predicted = gate.state.prediction[:, i]
        a.floats[FIRST_TOKEN, i] = predicted + late_per_s * (predicted - decided)
        a.ints[COMPUTED, i], a.ints[GENERATED, i] = a.ints[PROMPT, i], 1
    gate.observe(StepPlan(), NO_END, 0.01, 0.0)


def _lateness(gate, target, wait_s, now=0.0):
    """The gate's lateness room for a first token of TTFT class `target` predicted `wait_s`
    ahead, at `now`."""
    a = gate.ctx.arrays
    return K.lateness_s(gate.state, a.ints, a.floats, target, wait_s, now)


def _slack(gate, i):
    a = gate.ctx.arrays
    return C.assess(gate.state, a.ints, a.floats, i, 0.0, 1, 1.0, a.kv.page_size,
                    a.kv.num_pages)[0]


def test_the_gate_keeps_room_for_how_late_first_tokens_came_against_its_predictions(
        bound_gate):
    slo = SLO(ttft_s=5.0, tpot_s=0.1)
    config = AdmissionConfig(min_observations=8)
    requests = [Request(i, 0.0, 100 * (i + 1), 1, slo=slo) for i in range(12)]
    learned, control = bound_gate(requests, config=config), bound_gate(requests, config=config)
    # eight first tokens, each 10% of its (different) predicted wait late
    _first_tokens_late(learned, range(8), 0.1)
    _first_tokens_late(control, range(8), 0.0)
    assert learned.state.lateness[S.SEEN, 0] == 8
    assert _lateness(learned, 5.0, 2.0) == pytest.approx(0.2)  # 10% of 2 s
    assert _lateness(control, 5.0, 2.0) == pytest.approx(0.0, abs=1e-9)
    # a newcomer's slack keeps that room, in proportion to its own predicted wait
    slack_learned, slack_control = _slack(learned, 11), _slack(control, 11)
    wait = learned.state.prediction[S.FIRST_TOKEN_S, 11]
    assert slack_control - slack_learned == pytest.approx(0.1 * wait)
    # another class learned nothing; and too few first tokens are not trusted
    assert _lateness(learned, 0.5, 2.0) == 0.0
    few = bound_gate(requests, config=config)
    _first_tokens_late(few, range(7), 0.1)
    assert _lateness(few, 5.0, 2.0) == 0.0


def test_lateness_spread_widens_the_room_and_early_tokens_never_shorten_it(
        bound_gate):
    slo = SLO(ttft_s=5.0, tpot_s=0.1)
    config = AdmissionConfig(min_observations=8, lateness_quantile=0.9)
    requests = [Request(i, 0.0, 100 * (i + 1), 1, slo=slo) for i in range(8)]
    spread = bound_gate(requests, config=config)
    a = spread.ctx.arrays
    for i in range(8):
        assert spread.on_arrival(i, 0.0).action is Action.ACCEPT
    waits = spread.state.prediction[S.FIRST_TOKEN_S, :8] - spread.state.prediction[S.DECIDED_S, :8]
    ratios = np.array([0.0, 0.2] * 4)  # half on time, half 20% late
    a.floats[FIRST_TOKEN, :8] = spread.state.prediction[S.FIRST_TOKEN_S, :8] + ratios * waits
    a.ints[COMPUTED, :8], a.ints[GENERATED, :8] = a.ints[PROMPT, :8], 1
    spread.observe(StepPlan(), NO_END, 0.01, 0.0)
    slope = (ratios * waits**2).sum() / (waits**2).sum()
    deviation = np.sqrt(((ratios * waits) ** 2).sum() / (waits**2).sum() - slope**2)
    z = NormalDist().inv_cdf(0.9)
    # (the sums decay a little between first tokens that come apart)
    assert _lateness(spread, 5.0, 1.0) == pytest.approx(slope + z * deviation,
                                                                  rel=2e-3)
    early = bound_gate(requests, config=config)
    _first_tokens_late(early, range(8), -0.9)  # every first token far earlier than predicted
    assert early.state.lateness[S.SEEN, 0] == 8
    assert _lateness(early, 5.0, 1.0) == 0.0


def test_admitted_prompts_past_their_predicted_first_token_count_as_late_before_it_comes(
        bound_gate):
    slo, other = SLO(ttft_s=5.0, tpot_s=0.1), SLO(ttft_s=30.0, tpot_s=0.5)
    requests = [Request(i, 0.0, 100 * (i + 1), 1, slo=slo) for i in range(4)]
    requests.append(Request(4, 0.0, 100, 1, slo=other))
    gate = bound_gate(requests)  # min_observations 20: no first token could teach it yet
    for i in range(5):
        assert gate.on_arrival(i, 0.0).action is Action.ACCEPT
    decided, predicted = gate.state.prediction[:, :4]
    waits = predicted - decided
    assert (waits > 0).all() and gate.state.lateness[S.SEEN].sum() == 0
    # before any prediction is due the gate has no lateness to keep room for
    assert _lateness(gate, 5.0, 1.0, now=float(predicted.min()) - 1e-3) == 0.0
    # once they are overdue each is at least as late as it already is: the least-squares
    # slope over those lower bounds, before any of their first tokens came
    now = float(predicted.max()) + 0.5
    slope = ((now - predicted) * waits).sum() / (waits**2).sum()
    assert _lateness(gate, 5.0, 2.0, now=now) == pytest.approx(slope * 2.0)
    # only the class's own prompts count, and only those not yet computed
    assert _lateness(gate, 30.0, 2.0, now=float(gate.state.prediction[1, 4]) - 1e-3) == 0.0
    a = gate.ctx.arrays
    a.ints[COMPUTED, :4] = a.ints[PROMPT, :4]
    a.ints[GENERATED, :4] = 1
    a.floats[FIRST_TOKEN, :4] = predicted  # on time after all
    gate.observe(StepPlan(), NO_END, 0.01, now)
    assert _lateness(gate, 5.0, 2.0, now=now) == 0.0


def test_under_deadline_order_tighter_arrivals_take_the_slots_that_free_first(bound_gate):
    tight, loose = SLO(ttft_s=0.5, tpot_s=0.05), SLO(ttft_s=30.0, tpot_s=0.5)
    requests = [Request(0, 0.0, 100, 50, slo=loose), Request(1, 0.0, 100, 50, slo=loose),
                Request(2, 0.0, 100, 50, slo=tight), Request(3, 0.0, 100, 50, slo=tight),
                Request(4, 1.0, 100, 50, slo=loose)]
    gate = bound_gate(requests, max_batch=2)  # `slo` runs at most two requests at once
    for i in range(4):
        assert gate.on_arrival(i, 0.0).action is Action.ACCEPT
    a = gate.ctx.arrays
    a.ints[COMPUTED, :4], a.ints[GENERATED, :4] = a.ints[PROMPT, :4], 1  # all decoding
    a.floats[FIRST_TOKEN, :4] = gate.state.prediction[S.FIRST_TOKEN_S, :4]
    gate.observe(StepPlan(), np.array([0]), 1.0, 1.0)  # one ended in a 1 s step: 1 a second

    def slot_slack():
        return C.assess(gate.state, a.ints, a.floats, 4, 1.0, 50, 1.0, a.kv.page_size,
                        a.kv.num_pages)[5]

    # the tight class has been arriving at two requests a second (20 over the 10 s horizon),
    # faster than slots free: its arrivals, due first, take them until the newcomer's
    # deadline is within 0.5 s, so its slot would come too late; counting only those ahead
    # now, one frees in 2 s
    tight_class = int(np.flatnonzero(gate.state.ttft_targets == 0.5)[0])
    gate.state.class_requests[tight_class] = 20.0
    gate.state.class_time_s[tight_class] = 1.0
    with_tighter = slot_slack()
    gate.state.class_requests[:] = 0.0  # as if that class took no slots
    without = slot_slack()
    assert without > 25.0 and with_tighter < 0


def test_a_queued_low_priority_request_waits_until_its_own_prompt_could_not_be_on_time(
        bound_gate):
    # 30 prompts due at 1.0 s ahead of a low-priority one due at 1.11 s: on time by the point
    # estimate, late by the margin, so it is queued; nothing is served while it waits
    requests = ([Request(i, 0.0, 2000, 20, slo=SLO(1.0, 0.1)) for i in range(30)]
                + [Request(30, 0.01, 2000, 20, slo=SLO(1.1, 0.1), priority=1),
                   Request(31, 0.01, 2000, 20, slo=SLO(1.1, 0.1), priority=1)])
    gate = bound_gate(requests)
    for i in range(30):
        assert gate.on_arrival(i, 0.0).action is Action.ACCEPT
    for i in (30, 31):
        decision = gate.on_arrival(i, 0.01)
        assert (decision.action, decision.reason) == (Action.QUEUE, "ttft_capacity")
    # at 0.5 s the work ahead still waits: late by the point estimate too, yet its own prompt
    # would still be on time, so neither it nor the one queued behind it is refused
    gate.state.counts[S.FREED] = 1
    assert gate.poll(0.5) == [] and gate.num_queued() == 2
    # past the point where its prompt alone could be on time, both are refused
    gate.state.counts[S.FREED] = 1
    left = gate.poll(1.1)
    assert [(i, d.action, d.reason) for i, d in left] == [
        (30, Action.REJECT, "queue_timeout"), (31, Action.REJECT, "queue_timeout")]


def test_a_request_giving_way_does_not_hold_up_the_queue_behind_it(bound_gate):
    # as above: request 30 is queued, giving way; a patient one queued behind it (put there
    # by hand) would be accepted, and is, though 30 still waits
    requests = ([Request(i, 0.0, 2000, 20, slo=SLO(1.0, 0.1)) for i in range(30)]
                + [Request(30, 0.01, 2000, 20, slo=SLO(1.1, 0.1), priority=1),
                   Request(31, 0.01, 100, 20, slo=SLO(100.0, 0.1), priority=1)])
    gate = bound_gate(requests)
    for i in range(30):
        gate.on_arrival(i, 0.0)
    assert gate.on_arrival(30, 0.01).action is Action.QUEUE
    gate.state.queue[1] = 31
    gate.state.counts[S.NUM_QUEUED] = 2
    gate.state.counts[S.FREED] = 1
    left = gate.poll(0.01)
    assert [(i, d.action) for i, d in left] == [(31, Action.ACCEPT)]
    assert gate.num_queued() == 1


def test_a_low_priority_request_late_only_by_its_class_lateness_gives_way(bound_gate):
    # its class's first tokens came far later than predicted: by that lateness any newcomer
    # of the class is late; by the point estimate it is on time. A low-priority one is queued
    # (the lateness is a guess, as its margin is), a high-priority one refused
    slo = SLO(ttft_s=5.0, tpot_s=0.1)
    requests = [Request(i, 0.0, 100 * (i + 1), 1, slo=slo) for i in range(8)]
    requests += [Request(8, 0.0, 100, 20, slo=slo, priority=1),
                 Request(9, 0.0, 100, 20, slo=slo)]
    gate = bound_gate(requests, config=AdmissionConfig(min_observations=8))
    _first_tokens_late(gate, range(8), 1000.0)
    assert _lateness(gate, 5.0, 0.1) > 5.0
    slack, point_slack = C.assess(gate.state, gate.ctx.arrays.ints, gate.ctx.arrays.floats, 9,
                                  0.0, 20, 1.0, gate.ctx.arrays.kv.page_size,
                                  gate.ctx.arrays.kv.num_pages)[:2]
    assert slack < 0 <= point_slack
    low, high = gate.on_arrival(8, 0.0), gate.on_arrival(9, 0.0)
    assert (low.action, low.reason) == (Action.QUEUE, "ttft_capacity")
    assert (high.action, high.reason) == (Action.REJECT, "ttft_capacity")
