"""The gate's "lower the class" rung: a request it would reject runs as a looser class of the
run instead, scheduled by that class's targets and priority, judged by its own."""

from __future__ import annotations

import numpy as np
import pytest

from refimpl.admission import Action, AdmissionConfig, AdmissionController, Decision, Gate
from refimpl.admission.state import MAX_CLASSES, slo_classes
from refimpl.config.slo import SLO
from refimpl.errors import ConfigError, SchedulingError
from refimpl.metrics.latency import request_latencies
from refimpl.sched import Request
from tests.admission._gates import PassingOn

TIGHT, LOOSE = SLO(0.3, 0.05), SLO(20.0, 0.2)


def _tight_burst(num_tight: int = 150, num_loose: int = 30, seed: int = 0) -> list[Request]:
    """A burst of tight-class prompts in 0.2 s, more than can start by their TTFT, and
    loose-class (priority 1) ones over 2 s; the pool has room for all."""
    rng = np.random.default_rng(seed)
    specs = []
    for k in range(num_tight + num_loose):
        loose = k >= num_tight
        specs.append((float(rng.uniform(0, 2.0 if loose else 0.2)), int(rng.integers(1000, 3000)),
                      int(rng.integers(10, 200)), loose))
    specs.sort()
    return [Request(i, a, p, n, priority=int(loose), slo=LOOSE if loose else TIGHT,
                    slo_class="loose" if loose else "tight")
            for i, (a, p, n, loose) in enumerate(specs)]


def _run(admitted_engine, lower: bool, requests: list[Request]):
    engine = admitted_engine(num_pages=40_000, config=AdmissionConfig(lower_class=lower))
    return engine, engine.run(requests)


def test_a_request_the_gate_would_reject_is_served_as_the_looser_class(admitted_engine):
    requests = _tight_burst()
    _, plain = _run(admitted_engine, False, requests)
    engine, lowered = _run(admitted_engine, True, requests)
    plain_rejected = int((plain.requests.status == "rejected").sum())
    counts = lowered.steps.admission_counts
    num_lowered = sum(v for k, v in counts.items() if k.startswith("lower:"))
    assert plain_rejected > 50  # most of the tight burst cannot start in time
    assert not any(k.startswith("lower") for k in plain.steps.admission_counts)
    assert num_lowered >= plain_rejected - 5 and counts.get("lower:ttft_capacity", 0) > 0
    assert (lowered.requests.status == "rejected").sum() <= plain_rejected - num_lowered + 5
    # every one of them ends, no page is left behind, and the records keep the asked-for SLO
    assert all(r.is_finished for r in lowered.request_list)
    assert engine.pool.num_free_pages == engine.pool.num_pages
    tight = lowered.requests.slo_class == "tight"
    assert (lowered.requests.ttft_slo_s[tight] == TIGHT.ttft_s).all()
    assert (lowered.requests.priority[~tight] == 1).all()
    # they run in the slack: the loose class keeps its attainment, the run keeps its own
    met, met_plain = (request_latencies(run.requests).meets_slo for run in (lowered, plain))
    assert met[~tight].mean() >= met_plain[~tight].mean() - 0.02
    assert met.mean() >= met_plain.mean() - 0.02


def test_with_one_class_there_is_nothing_to_lower_to(admitted_engine, burst):
    requests = burst(400)
    plain = admitted_engine().run(requests)
    lowered = admitted_engine(config=AdmissionConfig(lower_class=True)).run(requests)
    assert not any(k.startswith("lower") for k in lowered.steps.admission_counts)
    assert list(lowered.requests.reason) == list(plain.requests.reason)
    np.testing.assert_array_equal(lowered.requests.finish_s, plain.requests.finish_s)


def test_a_lowered_decision_names_the_class_and_its_priority(admitted_engine, make_engine):
    seen = []

    class Watching(PassingOn):
        """Passes the lowering controller's decisions on, keeping each one it made."""

        def on_arrival(self, i, now_s):
            decision = self.inner.on_arrival(i, now_s)
            seen.append((i, decision))
            return decision

    make_engine("slo", num_pages=40_000,
                gate=Watching(AdmissionController(AdmissionConfig(lower_class=True)))).run(_tight_burst())
    lowered = [d for _, d in seen if d.action is Action.LOWER]
    assert lowered, "the burst lowers some requests"
    assert all(d.slo == LOOSE and d.priority == 1 and d.reason for d in lowered)


def test_a_python_gate_that_lowers_a_request_schedules_it_by_the_looser_targets(make_engine):
    scheduled_as = set()

    class LowerAll(Gate):
        passes_everything = False

        def on_arrival(self, i, now_s):
            return Decision(Action.LOWER, "ttft_capacity", slo=LOOSE, priority=1)

        def observe(self, plan, finished, duration_s, now_s):
            table = self.ctx.requests  # what the scheduler reads
            scheduled_as.update((float(table.ttft_slo_s[i]), float(table.tpot_slo_s[i]),
                                 int(table.priority[i])) for i in plan.decode)

    requests = [Request(i, 0.0, 2000, 50, slo=TIGHT) for i in range(40)]
    run = make_engine("slo", gate=LowerAll()).run(requests)
    assert scheduled_as == {(LOOSE.ttft_s, LOOSE.tpot_s, 1)}
    assert (run.requests.ttft_slo_s == TIGHT.ttft_s).all()  # judged by what it asked for
    assert (run.requests.status == "finished").all()
    # at the tight targets, the same burst is largely late: the records judge by those
    assert request_latencies(run.requests).meets_slo.mean() < 0.5

    class LowerToNothing(LowerAll):
        def on_arrival(self, i, now_s):
            return Decision(Action.LOWER, "ttft_capacity")

    with pytest.raises(SchedulingError, match=r"decision\.slo"):
        make_engine("slo", gate=LowerToNothing()).run(requests[:2])


def test_the_run_classes_are_its_distinct_targets_by_ttft_with_their_most_urgent_priority():
    ttft = np.array([2.0, 0.5, 2.0, 0.5, 2.0, 10.0])
    tpot = np.array([0.1, 0.03, 0.1, 0.03, 0.2, 0.5])
    priority = np.array([1, 0, 0, 2, 1, 3])
    classes = slo_classes(ttft, tpot, priority)
    np.testing.assert_array_equal(classes[:, :4], [[0.5, 2.0, 2.0, 10.0],
                                                   [0.03, 0.1, 0.2, 0.5],
                                                   [0, 0, 1, 3]])
    assert np.isnan(classes[:, 4:]).all()
    many = np.arange(MAX_CLASSES + 4, dtype=float)
    counts = np.repeat(many, [1] * 4 + [3] * MAX_CLASSES)  # the first four are the rarest
    kept = slo_classes(counts, counts, np.zeros(len(counts), np.int64))
    np.testing.assert_array_equal(kept[0], many[4:])


def test_lower_class_must_be_a_bool():
    with pytest.raises(ConfigError, match="lower_class"):
        AdmissionConfig(lower_class="yes")
