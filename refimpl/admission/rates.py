"""The machine's rates as the admission gate sees them, compiled: the decodes' load and
share, a tick, and the prompt rate the decodes leave (seed section 6's deadline-paced
scheduler).

- **Decode time.** A request decoding at its TPOT target `tau` needs one step's share of its
  sequence, `c_seq + c_kv * context`, every `tau`: a load of `(c_seq + c_kv * context) / tau`
  seconds of machine time per second, at its mean context (prompt plus half its output).
  Every step also pays the fixed part `base` (weights, overhead), once per tick, and a tick
  lasts about the tightest TPOT target decoding. The decode share of the machine is
  `kappa * (base / tick + sum(load))`.
- **Prompt time.** A prompt of `u` tokens after `c` computed costs `a * u + b * pairs` model
  seconds, and a step carrying a chunk costs `F` more, the intercept of that line
  (refimpl.admission.state.linearise_prefill): less than `base` where the weights read hides
  under the chunk's arithmetic, as it does on a GPU. So the decodes leave prompts the rate
  `r = eta * (1 - kappa * (F / tick + sum(load))) / kappa` (0 while the decode share is 1).
The calibrations these rates are scaled by are in refimpl.admission.calibration; what the gate
predicts from them, in refimpl.admission.capacity.
"""

from __future__ import annotations

import numpy as np

from refimpl._numba import inline_kernel, kernel
from refimpl.admission import state as S
from refimpl.admission.calibration import delivery, step_error
from refimpl.sched.table import COMPUTED, PROMPT, TPOT_SLO

__all__ = ["chunk_share", "decode_load", "decode_share", "prompt_rate", "prompt_seconds",
           "remaining_s", "stretched_rate", "tick_s", "wait_s"]


@inline_kernel
def prompt_seconds(f, tokens, computed):
    """Model seconds of `tokens` prompt tokens after `computed` cached ones."""
    pairs = tokens * computed + tokens * (tokens + 1) / 2
    return tokens * f[S.PREFILL_TOKEN_S] + pairs * f[S.PREFILL_PAIR_S]


@inline_kernel
def decode_load(f, ints, floats, i, output):
    """Seconds of decoding per second that request `i` needs at its TPOT pace."""
    if output < 2:
        return 0.0
    context = ints[PROMPT, i] + output // 2
    return (f[S.C_SEQ_S] + f[S.C_KV_S] * context) / floats[TPOT_SLO, i]


@inline_kernel
def tick_s(s, extra_tpot):
    """How long a step lasts: the tightest admitted TPOT target (and `extra_tpot`), within
    the tick bounds, as the `slo` policy paces its ticks."""
    f = s.fparams
    tightest = extra_tpot
    for c in range(S.MAX_CLASSES):
        if s.tpot_counts[c] > 0 and s.tpot_targets[c] < tightest:
            tightest = s.tpot_targets[c]
    return min(max(tightest, f[S.MIN_TICK_S]), f[S.MAX_TICK_S])


@kernel
def decode_share(s, extra_load, extra_tpot):
    """The machine's share spent decoding with `extra_load` added at TPOT `extra_tpot`."""
    return _share(s, extra_load, s.fparams[S.BASE_S], tick_s(s, extra_tpot))


@kernel
def prompt_rate(s, extra_load, extra_tpot):
    """Model prompt seconds per second left by the decodes with `extra_load` added: a step
    that carries a chunk pays the chunk line's fixed part, not the decode step's weights
    read (the read hides under the chunk's arithmetic); none while decodes alone fill the
    machine."""
    return _prompt_rate(s, extra_load, extra_tpot, tick_s(s, extra_tpot))


@inline_kernel
def stretched_rate(s):
    """`prompt_rate` in steps stretched to the longest tick (its fixed part paid once)."""
    return _prompt_rate(s, 0.0, np.inf, s.fparams[S.MAX_TICK_S])


@kernel
def _prompt_rate(s, extra_load, extra_tpot, chunk_tick):
    """`prompt_rate` with steps that carry a chunk lasting `chunk_tick` seconds."""
    if decode_share(s, extra_load, extra_tpot) >= 1.0:
        return 0.0
    share = _share(s, extra_load, s.fparams[S.PREFILL_FIXED_S], chunk_tick)
    return delivery(s) * (1.0 - share) / step_error(s)


@inline_kernel
def chunk_share(s, extra_load, extra_tpot):
    """The decodes' share of a step that carries a prompt chunk (`decode_share`'s, with the
    chunk line's fixed part in place of the weights read)."""
    return _share(s, extra_load, s.fparams[S.PREFILL_FIXED_S], tick_s(s, extra_tpot))


@inline_kernel
def _share(s, extra_load, fixed_s, tick):
    """The decodes' share of the machine, each `tick` seconds paying `fixed_s` once."""
    load = s.totals[S.LOAD] + extra_load
    if load <= 0:
        return 0.0
    return step_error(s) * (fixed_s / tick + load)


@inline_kernel
def remaining_s(f, cached, ints, j):
    """Model seconds of prompt `j`'s work left: after its computed tokens, or, before it
    starts, after the cached prefix the gate saw when it decided on it (`cached`, the gate
    state's array: handed the arrays, not the state, as the hot helpers are)."""
    done = max(ints[COMPUTED, j], cached[j])
    return prompt_seconds(f, max(ints[PROMPT, j] - done, 0), done)


@inline_kernel
def wait_s(work, rate, tighter_rate, tighter_work):
    """Seconds to do `work` at `rate` while tighter work keeps arriving at `tighter_rate`
    (a priority queue's residual rate), no more than when all `tighter_work` that can jump
    ahead is done too."""
    bounded = (work + tighter_work) / rate
    if rate > tighter_rate:
        return min(work / (rate - tighter_rate), bounded)
    return bounded
