"""The plan contract a plain-Python policy's plan is checked against before the commit.

Compiled policies are tested to keep it; a Python one's plan is checked every step, so a
broken plan ends the run with a `SchedulingError` that names the rule (`PLAN_ERRORS`) and the
request, instead of corrupting the request table or the KV books.
"""

from __future__ import annotations

from refimpl._numba import kernel
from refimpl.sched import plan as p
from refimpl.sched.table import COMPUTED, FINISHED, GENERATED, PROMPT, STATUS

__all__ = ["PLAN_ERRORS", "check_plan"]

# `serve`'s error codes for a plan that breaks the contract (the wrapper names them).
PLAN_ERRORS = ("", "names no request of the run", "names a request that has ended",
               "names a request twice", "computes no tokens, or more than the request has "
               "left", "needs more KV pages than are free", "moves a request between tiers "
               "that the pool refused (not resident, shared pages, or no room)",
               "made no progress: it computed no token and ended no request in MAX_IDLE_STEPS "
               "steps in a row (the run would never end)")


@kernel
def check_plan(ints, entries, sizes, kind, epoch):
    """(error code, request) of a plan that breaks the contract; (0, -1) for a sound one.
    Whether its pages fit is checked by the commit, once the plan's KV actions are done.

    `kind[i] - 4 * epoch` says what the plan does with request `i` (1 preempts it, 2 ends
    it, 3 computes it; anything else: nothing yet), so the scratch is never cleared.
    """
    n = ints.shape[1]
    base = 4 * epoch
    for row, count in ((p.RESTORE, p.NUM_RESTORE), (p.QUANTIZE, p.NUM_QUANTIZE),
                       (p.SPILL, p.NUM_SPILL)):
        for k in range(sizes[count]):
            i = entries[row, k]
            if i < 0 or i >= n:
                return 1, i
            if ints[STATUS, i] >= FINISHED:
                return 2, i
    for k in range(sizes[p.NUM_PREEMPT] + sizes[p.NUM_FINISH]):
        if k < sizes[p.NUM_PREEMPT]:
            i, mark = entries[p.PREEMPT, k], 1
        else:
            i, mark = entries[p.FINISH, k - sizes[p.NUM_PREEMPT]], 2
        if i < 0 or i >= n:
            return 1, i
        if ints[STATUS, i] >= FINISHED:
            return 2, i
        if kind[i] > base:
            return 3, i
        kind[i] = base + mark
    for k in range(sizes[p.NUM_DECODE] + sizes[p.NUM_PREFILL]):
        i, tokens = p.entry(entries, sizes, k)
        if i < 0 or i >= n:
            return 1, i
        if ints[STATUS, i] >= FINISHED:
            return 2, i
        if kind[i] >= base + 2:
            return 3, i
        computed = 0 if kind[i] == base + 1 else ints[COMPUTED, i]  # preempted: all again
        if tokens < 1 or tokens > ints[PROMPT, i] + ints[GENERATED, i] - computed:
            return 4, i
        kind[i] = base + 3
    return 0, -1
