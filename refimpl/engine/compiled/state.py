"""The compiled engine's state: requests, queues, page pool and step plan as plain arrays.

The compiled twin of `Request`, `QueuePolicy`'s waiting deque and running list, `KVManager`
and `StepPlan` (refimpl.sched, refimpl.kv). Requests are struct-of-arrays: one row per field
of a 2-D array, one column per request in arrival order (`ints[STATUS, i]`), so that a hot
loop holds two arrays, not fourteen. That matters: Numba updates the reference count of every
array a helper receives, even an inlined one (about 5 ns each), which would cost more than the
work. So the helpers here that take arrays run on rare paths (admit, preempt, finish, a fresh
page) and are ordinary compiled calls (compiled once, not inlined at every call site, which
keeps compile time down); the per-request work of each step is written inline in the policies
and the loop. Each helper mirrors the Python method its docstring names, so both engines
decide alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from refimpl._numba import inline_kernel, kernel
from refimpl.kv import _pool_kernels as K
from refimpl.kv.pool import PagePool, RequestState
from refimpl.sched.request import Request, RequestStatus

__all__ = ["Pool", "Queues", "new_pool", "new_queues", "new_requests"]

WAITING, RUNNING, FINISHED, REJECTED = (int(s) for s in RequestStatus)
_FREE_SLOT, _RESIDENT = int(RequestState.FREE), int(RequestState.RESIDENT)
# Request.finish_reason as codes; index 0 is "no reason yet".
REASONS = ("", "completed", "exceeds_context", "exceeds_kv_capacity", "unschedulable")
COMPLETED, EXCEEDS_CONTEXT, EXCEEDS_KV_CAPACITY, UNSCHEDULABLE = 1, 2, 3, 4

# Rows of the request arrays: `ints` (int64) and `floats` (float64), shape (fields, n).
INT_FIELDS = ("status", "prompt_tokens", "max_new_tokens", "num_computed", "num_generated",
              "reason", "num_preemptions", "kv_slot", "mark")
FLOAT_FIELDS = ("arrival_s", "first_scheduled_s", "first_token_s", "last_token_s", "finish_s")
STATUS, PROMPT, MAX_NEW, COMPUTED, GENERATED, REASON, PREEMPTIONS, SLOT, MARK = range(9)
ARRIVAL, FIRST_SCHEDULED, FIRST_TOKEN, LAST_TOKEN, FINISH = range(5)
# `kv_slot`: the request's row in the pool's arrays, -1 while it holds no pages (a running
# request always holds one, a waiting one never). `mark`: the decision that last scheduled it
# (`budgeted_step`'s `scheduled` set).

WAIT_HEAD, WAIT_LEN, NUM_RUNNING, NUM_DECODE, NUM_PREFILL = range(5)  # Queues.sizes
DECODE, PREFILL, PREFILL_TOKENS = range(3)  # rows of Queues.plan


class Queues(NamedTuple):
    """The waiting deque (a ring buffer), the running list in start order, and the plan."""

    waiting: np.ndarray  # (n,) int64 ring: a request waits at most once at a time
    running: np.ndarray  # (max running,) int64
    order: np.ndarray  # (max running,) int64: scratch, the order a policy visits running ones
    plan: np.ndarray  # (3, max running) int64: `StepPlan`'s decodes; chunks and their tokens
    sizes: np.ndarray  # (5,) int64: WAIT_HEAD, WAIT_LEN, NUM_RUNNING, NUM_DECODE, NUM_PREFILL


class Pool(NamedTuple):
    """A `PagePool`'s own arrays (shared, not copied), and a stack of its free slots."""

    refcount: np.ndarray
    free_stack: np.ndarray
    counters: np.ndarray
    tables: np.ndarray
    num_pages_of: np.ndarray
    lengths: np.ndarray
    tokens_per_page: np.ndarray
    states: np.ndarray
    free_slots: np.ndarray  # (num slots + 1,) int64: the stack; its height in the last entry
    page_size: int
    num_pages: int


def new_requests(requests: Sequence[Request]) -> tuple[np.ndarray, np.ndarray]:
    """The `ints` and `floats` arrays of `requests` (in the order given), from their fields."""
    reasons = {reason: code for code, reason in enumerate(REASONS)}
    ints = np.empty((len(INT_FIELDS), len(requests)), dtype=np.int64)
    for row, name in enumerate(INT_FIELDS[:REASON]):
        ints[row] = [getattr(r, name) for r in requests]
    ints[REASON] = [reasons[r.finish_reason] for r in requests]
    ints[PREEMPTIONS] = [r.num_preemptions for r in requests]
    ints[SLOT] = -1
    ints[MARK] = 0
    floats = np.array([[getattr(r, name) for r in requests] for name in FLOAT_FIELDS],
                      dtype=np.float64).reshape(len(FLOAT_FIELDS), len(requests))
    return ints, floats


def new_queues(num_requests: int, max_running: int) -> Queues:
    """Empty queues for `num_requests` requests, at most `max_running` running at once."""
    return Queues(np.zeros(max(num_requests, 1), np.int64), np.zeros(max_running, np.int64),
                  np.zeros(max_running, np.int64), np.zeros((3, max_running), np.int64),
                  np.zeros(5, np.int64))


def new_pool(pool: PagePool, max_running: int) -> Pool:
    """The arrays of an empty `pool`, with slots for `max_running` requests."""
    pool.reserve_slots(max_running)
    free = np.flatnonzero(pool.states == _FREE_SLOT)[::-1]  # lowest slot on top, as the pool
    free_slots = np.append(free, len(free)).astype(np.int64)
    return Pool(pool.refcount, pool.free_stack, pool.counters, pool.tables, pool.num_pages_of,
                pool.lengths, pool.tokens_per_page, pool.states, free_slots, pool.page_size,
                pool.num_pages)


# ---- KV accounting (KVManager) -----------------------------------------------------------------
@inline_kernel
def pages_for(num_tokens, tokens_per_page):
    """Pages that hold `num_tokens` tokens (a ceiling division)."""
    return -(-num_tokens // tokens_per_page)


@kernel
def grow_kv(ints, p, i, num_tokens):
    """`KVManager.grow` of one request: a slot on first use (`PagePool.allocate`), then pages."""
    if ints[SLOT, i] < 0:
        height = p.free_slots.shape[0] - 1
        p.free_slots[height] -= 1
        slot = p.free_slots[p.free_slots[height]]
        p.states[slot] = _RESIDENT
        p.tokens_per_page[slot] = p.page_size
        ints[SLOT, i] = slot
    K.take_pages(p.refcount, p.free_stack, p.counters, p.tables, p.num_pages_of, p.lengths,
                 p.tokens_per_page, ints[SLOT, i], num_tokens)


@kernel
def free_kv(ints, p, i):
    """`KVManager.free`: release the request's pages and its slot, if it holds any."""
    slot = ints[SLOT, i]
    if slot >= 0:
        K.release_slot(p.refcount, p.free_stack, p.counters, p.tables, p.num_pages_of, slot, 0)
        p.lengths[slot] = 0
        p.states[slot] = _FREE_SLOT
        height = p.free_slots.shape[0] - 1
        p.free_slots[p.free_slots[height]] = slot
        p.free_slots[height] += 1
        ints[SLOT, i] = -1


# ---- queues (QueuePolicy) ----------------------------------------------------------------------
@kernel
def push_waiting(waiting, sizes, i, front):
    """`waiting.append(i)`, or `waiting.appendleft(i)` when `front`."""
    capacity = waiting.shape[0]
    if front:
        sizes[WAIT_HEAD] = (sizes[WAIT_HEAD] - 1) % capacity
        waiting[sizes[WAIT_HEAD]] = i
    else:
        waiting[(sizes[WAIT_HEAD] + sizes[WAIT_LEN]) % capacity] = i
    sizes[WAIT_LEN] += 1


@kernel
def admit(ints, q):
    """`QueuePolicy.admit` of the head of the waiting queue; returns the request."""
    i = q.waiting[q.sizes[WAIT_HEAD]]
    q.sizes[WAIT_HEAD] = (q.sizes[WAIT_HEAD] + 1) % q.waiting.shape[0]
    q.sizes[WAIT_LEN] -= 1
    ints[STATUS, i] = RUNNING
    q.running[q.sizes[NUM_RUNNING]] = i
    q.sizes[NUM_RUNNING] += 1
    return i


@kernel
def preempt(ints, p, q, i):
    """`QueuePolicy.preempt`: drop `i`'s KV and queue it at the front to recompute."""
    n = q.sizes[NUM_RUNNING]
    k = 0
    while q.running[k] != i:
        k += 1
    for m in range(k, n - 1):  # running.remove(i), order kept
        q.running[m] = q.running[m + 1]
    q.sizes[NUM_RUNNING] = n - 1
    free_kv(ints, p, i)
    ints[COMPUTED, i] = 0
    ints[PREEMPTIONS, i] += 1
    ints[STATUS, i] = WAITING
    push_waiting(q.waiting, q.sizes, i, True)


@kernel
def drop_finished(ints, running, sizes):
    """`QueuePolicy.update_from_output`: keep only the running requests still running."""
    kept = 0
    for k in range(sizes[NUM_RUNNING]):
        i = running[k]
        if ints[STATUS, i] == RUNNING:
            running[kept] = i
            kept += 1
    sizes[NUM_RUNNING] = kept
