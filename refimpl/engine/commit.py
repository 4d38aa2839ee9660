"""The commit: the only code that changes requests and the KV cache, by carrying out a plan.

Two halves around the executor. `prepare` makes the KV cache what the plan says before the
step runs (the kernels of a real step write into those pages): early finishes end a request
with its output kept (one with no output yet ends rejected, with the plan's reason: edf's TTFT
guard refuses waiting requests so), preemptions drop a request's KV (it recomputes its prompt
and output later, vLLM's recompute preemption), pages are quantized, requests spill to the CPU
tier, spilled requests come back, then every scheduled request's KV grows by its tokens.
`commit_tokens` counts the computed tokens once the step has run and emits an output token
for each request whose computed tokens caught up with its known ones (vLLM v1's rule: no
prefill flag, decode is the case of one token left), finishing those that reached their
length. `end_request` is the one way a request reaches a terminal state: status, reason,
time, and its pages back in the pool. With a prefix cache (refimpl.kv.prefix), `prepare`
first starts each waiting prefill on its prompt's cached prefix (it counts as computed, its
pages shared: vLLM's computed blocks at schedule time), and `commit_tokens` caches the prompt
blocks each step completes.
"""

from __future__ import annotations

import math

from refimpl._numba import kernel
from refimpl.kv import manager as kvm
from refimpl.kv import prefix_facade as kvp
from refimpl.sched.plan import (
    DECODE,
    FINISH_REASON,
    NUM_DECODE,
    NUM_FINISH,
    NUM_PREEMPT,
    NUM_PREFILL,
    NUM_QUANTIZE,
    NUM_RESTORE,
    NUM_SPILL,
    PREEMPT,
    PREFILL,
    PREFILL_TOKENS,
    QUANTIZE,
    QUANTIZE_FACTOR,
    RESTORE,
    SPILL,
    entry,
)
from refimpl.sched.plan import FINISH as FINISH_ROW
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
    REJECTED,
    RUNNING,
    STATUS,
    WAITING,
)

__all__ = ["PAGES_SHORT", "TIER_REFUSED", "commit_tokens", "drop_superseded", "end_request",
           "prepare", "use_prefix"]

PAGES_SHORT, TIER_REFUSED = 5, 6  # `prepare`'s errors (refimpl.engine.contract.PLAN_ERRORS)


@kernel
def end_request(ints, floats, kv, i, status, reason, now):
    """Put request `i` in terminal `status` with `reason` at `now`; free its pages."""
    ints[STATUS, i] = status
    ints[REASON, i] = reason
    floats[FINISH, i] = now
    kvm.free(kv, i)


@kernel
def use_prefix(ints, kv, entries, sizes, plans_hits):
    """Start each waiting prefill with nothing computed on its prompt's cached prefix, as
    far as its chunk leaves room: pages attached, tokens computed. A compiled policy planned
    the hit (refimpl.kv.prefix_facade.prefix_start) and its pages; a Python one planned from its
    computed tokens, so without `plans_hits` only blocks others hold (taking no room) count.
    Blocks held by a request the plan quantizes, spills, preempts or ends are not attached:
    the plan counted their pages freed (or unshared), and sharing them would undo that."""
    for rows, count in ((QUANTIZE, sizes[NUM_QUANTIZE]), (SPILL, sizes[NUM_SPILL]),
                        (PREEMPT, sizes[NUM_PREEMPT]), (FINISH_ROW, sizes[NUM_FINISH])):
        for k in range(count):
            kvp.hold_back_prefix(kv, entries[rows, k])
    for k in range(sizes[NUM_PREFILL]):
        i = entries[PREFILL, k]
        if ints[STATUS, i] == WAITING and ints[COMPUTED, i] == 0:
            room = ints[PROMPT, i] + ints[GENERATED, i] - entries[PREFILL_TOKENS, k]
            ints[COMPUTED, i] = kvp.attach_prefix(kv, i, ints[PROMPT, i], room, plans_hits)
    kvp.end_hold_back(kv)


@kernel
def _preempt(ints, kv, i):
    """Drop request `i`'s KV; it waits to recompute everything it had computed."""
    kvm.free(kv, i)
    ints[COMPUTED, i] = 0
    ints[PREEMPTIONS, i] += 1
    ints[STATUS, i] = WAITING


@kernel
def _drops(entries, sizes, i):
    """Whether the plan preempts or ends request `i`."""
    for rows, count in ((PREEMPT, sizes[NUM_PREEMPT]), (FINISH_ROW, sizes[NUM_FINISH])):
        for k in range(count):
            if entries[rows, k] == i:
                return True
    return False


@kernel
def drop_superseded(entries, sizes):
    """Take out of the plan the tier moves of requests it also preempts or ends: dropping a
    request's KV supersedes moving it (`slo` may quantize a request, then preempt it when
    an urgent decode still lacks pages), and the executor then moves no bytes for it."""
    for rows, count in ((QUANTIZE, NUM_QUANTIZE), (SPILL, NUM_SPILL), (RESTORE, NUM_RESTORE)):
        kept = 0
        for k in range(sizes[count]):
            if not _drops(entries, sizes, entries[rows, k]):
                entries[rows, kept] = entries[rows, k]
                if rows == QUANTIZE:
                    entries[QUANTIZE_FACTOR, kept] = entries[QUANTIZE_FACTOR, k]
                kept += 1
        sizes[count] = kept


@kernel
def prepare(ints, floats, kv, entries, sizes, now, finished, started, ones, check_pages,
            plans_hits):
    """Carry out the plan's KV actions, then grow each scheduled request's KV (a decode by
    one token: `ones` is an array of ones); returns (requests finished early, written to
    `finished`; requests started, to `started`; pages moved to or from the CPU tier; an
    error code and its request: TIER_REFUSED where the pool refused a tier move,
    PAGES_SHORT where, with `check_pages` or a prefix cache, the growth needs more pages
    than are free). Prefix hits come first (`use_prefix`), before a restore could evict them;
    the tier moves of requests the plan drops go (`drop_superseded`); then what frees device
    pages (ends, preemptions, quantizations, spills) before what takes them (restores), the
    order a plan counts them in: `slo` restores only once its pool is below its mark, after a
    preemption or a ladder move has freed pages. (The executor's data moves stay right: it
    copies a spilled request out before it writes restored ones in.)"""
    num_finished = num_started = moved = 0
    if kv.prefix.enabled:
        use_prefix(ints, kv, entries, sizes, plans_hits)
        check_pages = True  # (a hit a plan did not count would overdraw the pool: refuse it)
    if (sizes[NUM_PREEMPT] + sizes[NUM_FINISH] > 0
            and sizes[NUM_QUANTIZE] + sizes[NUM_SPILL] + sizes[NUM_RESTORE] > 0):
        drop_superseded(entries, sizes)
    for k in range(sizes[NUM_FINISH]):
        i = entries[FINISH_ROW, k]
        # before its first token nothing was served: ended so, a request is rejected
        status = FINISHED if ints[GENERATED, i] > 0 else REJECTED
        end_request(ints, floats, kv, i, status, entries[FINISH_REASON, k], now)
        finished[num_finished] = i
        num_finished += 1
    for k in range(sizes[NUM_PREEMPT]):
        _preempt(ints, kv, entries[PREEMPT, k])
    for k in range(sizes[NUM_QUANTIZE]):
        if kvm.quantize(kv, entries[QUANTIZE, k], entries[QUANTIZE_FACTOR, k]) < 0:
            return num_finished, 0, moved, TIER_REFUSED, entries[QUANTIZE, k]
    for k in range(sizes[NUM_SPILL]):
        pages = kvm.spill(kv, entries[SPILL, k])
        if pages < 0:
            return num_finished, 0, moved, TIER_REFUSED, entries[SPILL, k]
        moved += pages
    for k in range(sizes[NUM_RESTORE]):
        pages = kvm.restore(kv, entries[RESTORE, k])
        if pages < 0:
            return num_finished, 0, moved, TIER_REFUSED, entries[RESTORE, k]
        moved += pages
    num_decode, num_prefill = sizes[NUM_DECODE], sizes[NUM_PREFILL]
    need = 0
    for k in range(num_decode + num_prefill):
        i, tokens = entry(entries, sizes, k)
        if check_pages:
            need += kvm.pages_needed(kv, i, ints[COMPUTED, i], tokens)
    if need > kvm.num_free_pages(kv):
        return num_finished, 0, moved, PAGES_SHORT, -1
    for k in range(num_decode + num_prefill):
        i, _ = entry(entries, sizes, k)
        if ints[STATUS, i] == WAITING:
            ints[STATUS, i] = RUNNING
            started[num_started] = i
            num_started += 1
    kvm.grow(kv, entries[DECODE], ones, num_decode)
    kvm.grow(kv, entries[PREFILL], entries[PREFILL_TOKENS], num_prefill)
    return num_finished, num_started, moved, 0, -1


@kernel
def commit_tokens(ints, floats, kv, entries, sizes, start_s, end_s, finished, num_finished):
    """Count computed tokens, emit tokens at `end_s`; rows that finish are appended to
    `finished[:num_finished]`; returns the new count."""
    for k in range(sizes[NUM_DECODE] + sizes[NUM_PREFILL]):
        i, tokens = entry(entries, sizes, k)
        if math.isnan(floats[FIRST_SCHEDULED, i]):
            floats[FIRST_SCHEDULED, i] = start_s
        ints[COMPUTED, i] += tokens
        if kv.prefix.enabled and ints[COMPUTED, i] - tokens < ints[PROMPT, i]:
            # prompt tokens computed (never a decode's: a call per decode, passing the facade's
            # arrays, would cost more than the step's bookkeeping)
            kvp.publish_prefix(kv, i, ints[COMPUTED, i] - tokens, ints[COMPUTED, i],
                               ints[PROMPT, i])
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
