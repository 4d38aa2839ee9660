"""The commit: the only code that changes requests and the KV cache, by carrying out a plan.

Two halves around the executor. `prepare` makes the KV cache what the plan says before the
step runs (the kernels of a real step write into those pages): preemptions drop a request's
KV (it recomputes its prompt and output later, vLLM's recompute preemption), early finishes
end a request with its output kept, then every scheduled request's KV grows by its tokens.
`commit_tokens` counts the computed tokens once the step has run and emits an output token
for each request whose computed tokens caught up with its known ones (vLLM v1's rule: no
prefill flag, decode is the case of one token left), finishing those that reached their
length. `end_request` is the one way a request reaches a terminal state: status, reason,
time, and its pages back in the pool.
"""

from __future__ import annotations

import math

from refimpl._numba import kernel
from refimpl.sched.table import (
    COMPLETED,
    COMPUTED,
    FINISH,
    FINISHED,
    FIRST_SCHEDULED,
    FIRST_TOKEN,
    GENERATED,
    LAST_TOKEN,
    LENGTH_CAPPED,
    MAX_NEW,
    OUTPUT_CAP,
    PREEMPTIONS,
    PROMPT,
    REASON,
    RUNNING,
    STATUS,
    WAITING,
)
from refimpl.kv import manager as kvm
from refimpl.sched.plan import (
    DECODE,
    FINISH_REASON,
    NUM_DECODE,
    NUM_FINISH,
    NUM_PREEMPT,
    NUM_PREFILL,
    PREEMPT,
    PREFILL,
    PREFILL_TOKENS,
    entry,
)
from refimpl.sched.plan import FINISH as FINISH_ROW

__all__ = ["commit_tokens", "end_request", "prepare"]


@kernel
def end_request(ints, floats, kv, i, status, reason, now):
    """Put request `i` in terminal `status` with `reason` at `now`; free its pages."""
    ints[STATUS, i] = status
    ints[REASON, i] = reason
    floats[FINISH, i] = now
    kvm.free(kv, i)


@kernel
def _preempt(ints, kv, i):
    """Drop request `i`'s KV; it waits to recompute everything it had computed."""
    kvm.free(kv, i)
    ints[COMPUTED, i] = 0
    ints[PREEMPTIONS, i] += 1
    ints[STATUS, i] = WAITING


@kernel
def prepare(ints, floats, kv, entries, sizes, now, finished, started, ones):
    """Carry out the plan's KV actions, then grow each scheduled request's KV (a decode by
    one token: `ones` is an array of ones); returns (requests finished early, written to
    `finished`; requests started, to `started`)."""
    num_finished = num_started = 0
    for k in range(sizes[NUM_FINISH]):
        i = entries[FINISH_ROW, k]
        end_request(ints, floats, kv, i, FINISHED, entries[FINISH_REASON, k], now)
        finished[num_finished] = i
        num_finished += 1
    for k in range(sizes[NUM_PREEMPT]):
        _preempt(ints, kv, entries[PREEMPT, k])
    num_decode, num_prefill = sizes[NUM_DECODE], sizes[NUM_PREFILL]
    for k in range(num_decode + num_prefill):
        i, _ = entry(entries, sizes, k)
        if ints[STATUS, i] == WAITING:
            ints[STATUS, i] = RUNNING
            started[num_started] = i
            num_started += 1
    kvm.grow(kv, entries[DECODE], ones, num_decode)
    kvm.grow(kv, entries[PREFILL], entries[PREFILL_TOKENS], num_prefill)
    return num_finished, num_started


@kernel
def commit_tokens(ints, floats, kv, entries, sizes, start_s, end_s, finished, num_finished):
    """Count computed tokens, emit tokens at `end_s`; rows that finish are appended to
    `finished[:num_finished]`; returns the new count."""
    for k in range(sizes[NUM_DECODE] + sizes[NUM_PREFILL]):
        i, tokens = entry(entries, sizes, k)
        if math.isnan(floats[FIRST_SCHEDULED, i]):
            floats[FIRST_SCHEDULED, i] = start_s
        ints[COMPUTED, i] += tokens
        if ints[COMPUTED, i] < ints[PROMPT, i] + ints[GENERATED, i]:
            continue  # a prompt chunk short of the end: no token yet
        ints[GENERATED, i] += 1
        if ints[GENERATED, i] == 1:
            floats[FIRST_TOKEN, i] = end_s
        floats[LAST_TOKEN, i] = end_s
        reason = 0
        if ints[GENERATED, i] >= ints[MAX_NEW, i]:
            reason = COMPLETED
        elif ints[OUTPUT_CAP, i] >= 0 and ints[GENERATED, i] >= ints[OUTPUT_CAP, i]:
            reason = LENGTH_CAPPED  # admission degraded it: it ends at its cap
        if reason != 0:
            end_request(ints, floats, kv, i, FINISHED, reason, end_s)
            finished[num_finished] = i
            num_finished += 1
    return num_finished
