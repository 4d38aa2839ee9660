"""The `slo` policy's whole tick compiled: `plan_slo`, and its hooks `slo_add` and `slo_update`.

The same decision as `SLOPolicy.schedule` (refimpl.sched.slo.policy, the oracle it is tested
against), over arrays the loop passes on (`SLOState`): the prefill queue as an indexed binary
heap over request rows, keyed as `PrefillQueue` (next-token deadline, prompt tokens left,
priority, arrival, request id, row); the decode set as slot arrays with `DecodeSet`'s slot
assignment (a LIFO stack of freed slots, fresh slots in increasing order: knapsack ties go to
the lower slot); the spilled rows in spill order; the ladder's holding flag and counts; the
parameters, the decode-cost fit and the cost table's kernel picks, looked up once at bind.

The Python policy drafts a tick on views and adopts the draft once the plan is committed. The
loop commits every plan that does something, and an empty plan carries no move of the queues
(only the ladder's holding flag and counts, which stand either way), so the compiled decision
takes its own queue moves at once; the KV cache it plans against is a projection kept in
per-row overlay arrays stamped with the tick's epoch (refimpl.kv.projection's rules, no page
shared: the loop never forks). The step time is the compiled roofline, so the policy runs
here only with a roofline executor; any other step model runs the Python policy.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from refimpl._numba import inline_kernel
from refimpl.sched.slo.knapsack import KnapsackWork, bucket_of, new_knapsack_work
from refimpl.sched.table import ARRIVAL, GENERATED, LAST_TOKEN, MAX_NEW, PROMPT, TPOT_SLO, TTFT_SLO

__all__ = ["SLOState", "for_policy", "new_slo_state", "no_slo_state"]

MAX_HEADS = 64  # refimpl.sched.slo.prefill.MAX_HEADS
# Entries of `SLOState.ip` (int parameters) and `fp` (float parameters, then from LAST_BUDGET
# on what the tick keeps between steps: the last budget, and what the budget lends on, as
# `SLOPolicy.quiet_share`, `.output_quantile` and the steps seen).
(MAX_BATCH, MIN_CHUNK, MAX_CHUNK, FIRST_BUCKET, VALUE_MODE, HAS_LADDER, LOW_PRIORITY,
 LONG_CONTEXT, QUANTIZE_FACTOR, HAS_PICKS) = range(10)
NUM_IP = 10
(MIN_TICK, MAX_TICK, HORIZON, LATENESS, WATERMARK, QUEUE_NEW_ABOVE, CAP_ABOVE,
 QUANTIZE_ABOVE, SPILL_ABOVE, PREEMPT_ABOVE, BASE_S, C_SEQ, C_KV, LOAN_QUANTILE, LAST_BUDGET,
 QUIET_SHARE, OUTPUT_QUANTILE, NUM_STEPS) = range(18)
NUM_FP = 18
# Entries of `SLOState.st` (the state's counters); COUNTS.. are the ladder's, by step code.
(HEAP_LEN, DEC_HI, DEC_COUNT, FREE_TOP, SPILL_HEAD, SPILL_LEN, HOLDING, EPOCH, PJ_FREE, PJ_CPU,
 PJ_TOUCHED, COUNTS) = range(12)
NUM_ST = COUNTS + 5
# Overlay flags of the projection.
F_FREED, F_PREEMPTED, F_PAGES, F_TPP, F_STATE = 1, 2, 4, 8, 16



class SLOState(NamedTuple):
    """The compiled `slo` policy's parameters and state (module doc); per-row arrays are
    indexed by request row, per-slot ones by decode slot."""

    ip: np.ndarray  # (NUM_IP,) int64
    fp: np.ndarray  # (NUM_FP,) float64
    st: np.ndarray  # (NUM_ST,) int64
    heap: np.ndarray  # rows in heap order
    pos: np.ndarray  # per row: its heap position, -1 when not queued
    key_deadline: np.ndarray  # per row: the deadline of its key (float64)
    key_left: np.ndarray  # per row: the prompt tokens left of its key
    rows: np.ndarray  # per slot: the row, -1 for none
    deadline_s: np.ndarray  # per slot
    context: np.ndarray  # per slot
    weight: np.ndarray  # per slot
    active: np.ndarray  # per slot (bool)
    slot_of: np.ndarray  # per row: its decode slot, -1 for none
    free: np.ndarray  # the stack of freed slots
    spilled: np.ndarray  # a ring of rows in spill order
    pj_epoch: np.ndarray  # per row: the tick whose overlay it holds
    pj_flags: np.ndarray  # per row
    pj_pages: np.ndarray  # per row
    pj_tpp: np.ndarray  # per row
    pj_state: np.ndarray  # per row
    pj_touched: np.ndarray  # rows with an overlay this tick
    out: np.ndarray  # per slot: the knapsack's output
    stats: np.ndarray  # (2,) the knapsack's stats
    frontier: np.ndarray  # the heap walk's frontier (heap positions)
    pick_decode: np.ndarray  # (max_batch + 1, buckets) kernel code per (batch, bucket)
    pick_prefill: np.ndarray  # (64,) kernel code per power of two of the chunk's tokens
    work: KnapsackWork  # the knapsack's work arrays, per slot


def new_slo_state(n: int, ip: np.ndarray, fp: np.ndarray, pick_decode: np.ndarray,
                  pick_prefill: np.ndarray) -> SLOState:
    """An empty state for a run of `n` requests."""
    n = max(n, 1)

    def ints(fill=0):
        return np.full(n, fill, np.int64)

    return SLOState(ip.astype(np.int64), fp.astype(np.float64), np.zeros(NUM_ST, np.int64),
                    ints(), ints(-1), np.zeros(n), ints(), ints(-1), np.zeros(n), ints(),
                    np.zeros(n), np.zeros(n, np.bool_), ints(-1), ints(), ints(), ints(-1),
                    ints(), ints(), ints(), ints(), ints(), ints(), np.zeros(2, np.int64),
                    np.zeros(n + 2, np.int64), pick_decode.astype(np.int64),
                    pick_prefill.astype(np.int64), new_knapsack_work(n))


def no_slo_state() -> SLOState:
    """A tiny state for runs of other policies (the loop's signature is the same); its
    LAST_BUDGET holds a plain-Python policy's `tick_budget_s` (NaN: no tick)."""
    fp = np.zeros(NUM_FP)
    fp[LAST_BUDGET] = np.nan
    return new_slo_state(1, np.zeros(NUM_IP), fp, np.zeros((1, 1)), np.zeros(1))


# ---- the request table ---------------------------------------------------------------------
@inline_kernel
def _deadline(ints, floats, i):
    """Request `i`'s next-token deadline (its TTFT deadline before the first token)."""
    if ints[GENERATED, i] == 0:
        return floats[ARRIVAL, i] + floats[TTFT_SLO, i]
    return floats[LAST_TOKEN, i] + floats[TPOT_SLO, i]


def for_policy(policy, ints: np.ndarray, picks, costs, ladder) -> tuple[SLOState, tuple[str, ...]]:
    """The state of a run of `ints.shape[1]` requests for a bound `SLOPolicy`: its parameters,
    its decode-cost fit `costs`, the cost table's kernel picks (looked up here, once, through
    `picks`) and the names of the picked kernels, by code."""
    ip = np.zeros(NUM_IP, np.int64)
    ip[[MAX_BATCH, MIN_CHUNK, MAX_CHUNK, FIRST_BUCKET, VALUE_MODE, HAS_LADDER, LOW_PRIORITY,
        LONG_CONTEXT, QUANTIZE_FACTOR, HAS_PICKS]] = (
        policy.max_batch, policy.min_chunk, policy.max_chunk, policy.first_bucket_tokens,
        policy.value_mode, policy.ladder is not None, ladder.low_priority,
        ladder.long_context_tokens, ladder.quantize_factor, policy.cost_table is not None)
    fp = np.zeros(NUM_FP)
    fp[[MIN_TICK, MAX_TICK, HORIZON, LATENESS, WATERMARK, QUEUE_NEW_ABOVE, CAP_ABOVE,
        QUANTIZE_ABOVE, SPILL_ABOVE, PREEMPT_ABOVE, BASE_S, C_SEQ, C_KV, LOAN_QUANTILE]] = (
        policy.min_tick_s, policy.max_tick_s, policy.horizon_ticks, policy.lateness_scale_s,
        policy.kv_watermark, ladder.queue_new_above, ladder.cap_above, ladder.quantize_above,
        ladder.spill_above, ladder.preempt_above, costs.base_s, costs.c_seq_s, costs.c_kv_s,
        policy.loan_quantile)
    names: list[str] = []
    codes: dict[str, int] = {}

    def code(name: str) -> int:
        if name not in codes:
            codes[name] = len(names)
            names.append(name)
        return codes[name]

    # Decode contexts stay below the longest request's prompt and output.
    longest = int((ints[PROMPT] + ints[MAX_NEW]).max()) if ints.shape[1] else 1
    num_buckets = int(bucket_of(longest, policy.first_bucket_tokens)) + 1
    pick_decode = np.full((policy.max_batch + 1, num_buckets), -1, np.int64)
    pick_prefill = np.full(64, -1, np.int64)
    if policy.cost_table is not None:
        for batch in range(1, policy.max_batch + 1):
            for bucket in range(num_buckets):
                pick_decode[batch, bucket] = code(picks.lookup(
                    "decode", batch, policy.first_bucket_tokens << bucket))
        for bits in range((policy.max_chunk - 1).bit_length() + 1):
            pick_prefill[bits] = code(picks.lookup("prefill", 1, 1 << bits))
    return new_slo_state(ints.shape[1], ip, fp, pick_decode, pick_prefill), tuple(names)
