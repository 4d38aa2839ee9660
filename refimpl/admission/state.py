"""The admission gate's state as arrays (what its compiled decisions read and write).

Built once per run by `new_gate_state` from the gate's configuration, the run's step model
(linearised into a few seconds-per-unit coefficients, so any `StepTimeModel` works) and the
policy's prompt order. The layout names below index the parameter and aggregate arrays; the
compiled gate (refimpl.admission.decide and .observe) is their only writer.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["GateState", "linearise_prefill", "new_gate_state", "no_gate_state", "slo_classes"]

# Entries of `fparams`: a decode step's fixed seconds, its seconds per sequence and per
# context token; a prompt's seconds per token and per causal pair, and the fixed seconds of
# a step that carries a prompt chunk (see `linearise_prefill`); the KV watermark; the decode
# share the gate admits up to; the tick bounds; the low-priority margin; the horizon over
# which arrivals' prompt work is averaged into a rate; the normal quantile of the first
# tokens' lateness the gate plans for.
(BASE_S, C_SEQ_S, C_KV_S, PREFILL_TOKEN_S, PREFILL_PAIR_S, PREFILL_FIXED_S, WATERMARK,
 DECODE_CAP, MIN_TICK_S, MAX_TICK_S, LOW_MARGIN, RATE_HORIZON_S, LATENESS_Z) = range(13)
NUM_FPARAMS = 13
# Entries of `iparams`: the policy's prompt order, the queue's capacity, the first low
# priority, the long-context length, the shortest cap, steps before calibration is trusted,
# the most requests the policy runs at once (0: no cap), whether a request it would reject
# may be lowered to a looser class of the run (1) or not (0).
(ORDER, MAX_QUEUE, LOW_PRIORITY, LONG_CONTEXT, MIN_CAPPED, MIN_OBSERVATIONS, MAX_RUNNING,
 LOWER_CLASS) = range(8)
NUM_IPARAMS = 8
ARRIVAL_ORDER, DEADLINE_ORDER = range(2)  # values of ORDER
# Entries of `totals` (floats): the admitted decode load (seconds of decoding per second);
# then the calibration window's sums: measured step seconds, the model's step seconds, the
# model's prompt seconds delivered, the prompt seconds the model said were available, the KV
# pages that admitted requests returned, the squares of the measured step seconds, and the
# admitted requests that ended.
(LOAD, MEASURED_S, MODELLED_S, DELIVERED_S, AVAILABLE_S, RETURNED_PAGES, MEASURED_SQ,
 ENDED) = range(8)
# Entries of `counts` (ints): admitted requests not ended (`admitted`), admitted prompts not
# computed (`pending`), queued requests, whether capacity came back since the last poll, the
# calibration ring's next slot and fill, and how many of the ring's steps measured the
# prompt rate (their sums are zeroed when none is left, not left to rounding).
NUM_ADMITTED, NUM_PENDING, NUM_QUEUED, FREED, RING_NEXT, RING_LEN, RATE_STEPS = range(7)
MAX_CLASSES = 16  # distinct SLO targets the gate keeps apart (more share the last slot)
# Rows of `lateness`, per TTFT class: first tokens seen; then, decayed over the rate horizon,
# the sums of `w^2`, `e * w` and `e^2` over their predicted waits `w` and the seconds `e` they
# came after the prediction; and when they were last decayed.
SEEN, SUM_WW, SUM_EW, SUM_EE, LATENESS_T = range(5)
# Rows of `prediction`, per request: when the gate last decided on it, and the first token's
# time it predicted then (NaN: never predicted, e.g. forced in).
DECIDED_S, FIRST_TOKEN_S = range(2)
# Rows of `classes`, per SLO class of the run (by TTFT target, then TPOT; NaN: no class): its
# TTFT and TPOT targets and its priority, what a request lowered to it is scheduled by.
CLASS_TTFT, CLASS_TPOT, CLASS_PRIORITY = range(3)
RING = 256  # steps in the calibration window
MAX_REASONS = 64  # reason codes the decision counts cover


class GateState(NamedTuple):
    """Everything the compiled gate keeps between calls (module doc)."""

    fparams: np.ndarray  # float64, BASE_S ...
    iparams: np.ndarray  # int64, ORDER ...
    totals: np.ndarray  # float64, LOAD ...
    counts: np.ndarray  # int64, NUM_ADMITTED ...
    pages: np.ndarray  # int64 per request: its KV peak while admitted (0: not admitted)
    admitted: np.ndarray  # int64: admitted requests not ended
    load: np.ndarray  # float64 per request: its decode load while admitted
    pending: np.ndarray  # int64: admitted requests whose prompt is not computed yet
    queue: np.ndarray  # int64: queued requests, in arrival order
    tpot_targets: np.ndarray  # float64 per class: the admitted requests' TPOT targets
    tpot_counts: np.ndarray  # int64 per class: admitted requests with that target
    ttft_targets: np.ndarray  # float64 per class: TTFT targets seen at arrival
    class_work_s: np.ndarray  # float64 per class: admitted prompt seconds, decayed
    class_requests: np.ndarray  # float64 per class: admitted requests, decayed alike
    class_time_s: np.ndarray  # float64 per class: when the two above were last decayed
    ring: np.ndarray  # float64 (RING, 7): a step's measured, modelled, delivered, available
    # seconds, returned pages, measured seconds squared and ended requests
    decisions: np.ndarray  # int64 (5, MAX_REASONS): decisions by action and reason
    scratch_f: np.ndarray  # float64 per request: sort keys
    scratch_i: np.ndarray  # int64 per request: sorted rows
    cached: np.ndarray  # int64 per request: prompt tokens cached when last decided on
    prediction: np.ndarray  # float64 (2, per request): DECIDED_S, FIRST_TOKEN_S rows
    lateness: np.ndarray  # float64 (5, MAX_CLASSES): SEEN ... LATENESS_T rows
    classes: np.ndarray  # float64 (3, MAX_CLASSES): CLASS_TTFT ... CLASS_PRIORITY rows


def linearise_prefill(step_model, probe_tokens: int = 2048) -> tuple[float, float, float]:
    """A prompt chunk's seconds per token and per causal pair, by finite differences of
    `step_model` where prompts are compute-bound, so that a prompt of `u` tokens after `c`
    computed costs about `a * u + b * (u * c + u * (u + 1) / 2)`; and that line's intercept,
    the fixed seconds of a step carrying a chunk: below the weights read of a decode step
    wherever the read hides under the chunk's arithmetic (a roofline's max, not a sum)."""
    step = step_model.step_time_parts
    t = probe_tokens
    one = step(t, 0, 0, 0)
    per_token = max((step(2 * t, 0, 0, 0) - one) / t, 0.0)
    pairs = t * t
    per_pair = max((step(t, 2 * pairs, 0, 0) - step(t, pairs, 0, 0)) / pairs, 0.0)
    return per_token, per_pair, max(one - per_token * t, 0.0)


def slo_classes(ttft_s: np.ndarray, tpot_s: np.ndarray, priority: np.ndarray) -> np.ndarray:
    """The run's SLO classes as `classes` rows: each distinct (TTFT, TPOT) target pair with
    the most urgent priority its requests carry, by TTFT then TPOT; the MAX_CLASSES most
    common where there are more."""
    pairs, inverse, counts = np.unique(np.stack([ttft_s, tpot_s], axis=1), axis=0,
                                       return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    keep = np.sort(np.argsort(-counts, kind="stable")[:MAX_CLASSES])
    classes = np.full((3, MAX_CLASSES), np.nan)
    for k, c in enumerate(keep):
        classes[:, k] = (*pairs[c], priority[inverse == c].min())
    return classes


def new_gate_state(fparams: np.ndarray, iparams: np.ndarray, num_requests: int,
                   classes: np.ndarray | None = None) -> GateState:
    """A fresh state for a run of `num_requests` (parameters and `classes` laid out as
    above; none: no class to lower a request to)."""
    n = max(num_requests, 1)
    if classes is None:
        classes = np.full((3, MAX_CLASSES), np.nan)
    return GateState(
        np.asarray(fparams, np.float64), np.asarray(iparams, np.int64), np.zeros(8),
        np.zeros(7, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n),
        np.zeros(n, np.int64),
        np.zeros(n, np.int64), np.zeros(MAX_CLASSES), np.zeros(MAX_CLASSES, np.int64),
        np.full(MAX_CLASSES, np.nan), np.zeros(MAX_CLASSES), np.zeros(MAX_CLASSES),
        np.zeros(MAX_CLASSES),
        np.zeros((RING, 7)), np.zeros((5, MAX_REASONS), np.int64), np.zeros(n),
        np.zeros(n, np.int64), np.zeros(n, np.int64), np.full((2, n), np.nan),
        np.zeros((5, MAX_CLASSES)), np.asarray(classes, np.float64))


def no_gate_state() -> GateState:
    """A tiny state for runs without the compiled gate (the loop takes one either way)."""
    return new_gate_state(np.zeros(NUM_FPARAMS), np.zeros(NUM_IPARAMS, np.int64), 1)
