"""The compiled engine's state: requests, queues, page pool and step plan as plain arrays.

The compiled twin of `Request`, `QueuePolicy`'s waiting deque and running list, `KVManager`
and `StepPlan` (refimpl.sched, refimpl.kv): struct-of-arrays indexed by a request's position in
arrival order, grouped in named tuples that Numba passes by value (the arrays inside are shared
and mutable; scalars that change live in small arrays). The helpers below are inlined into the
policies and the loop; each mirrors the Python method named in its docstring, line for line,
so that both engines make the same decisions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from refimpl._numba import inline_kernel
from refimpl.kv import _pool_kernels as K
from refimpl.kv.pool import PagePool, RequestState
from refimpl.sched.request import Request, RequestStatus

__all__ = ["Plan", "Pool", "Queues", "Requests", "new_plan", "new_pool", "new_queues",
           "new_requests"]

WAITING, RUNNING, FINISHED, REJECTED = (int(s) for s in RequestStatus)
_FREE_SLOT, _RESIDENT = int(RequestState.FREE), int(RequestState.RESIDENT)
# Request.finish_reason as codes; index 0 is "no reason yet".
REASONS = ("", "completed", "exceeds_context", "exceeds_kv_capacity", "unschedulable")
COMPLETED, EXCEEDS_CONTEXT, EXCEEDS_KV_CAPACITY, UNSCHEDULABLE = 1, 2, 3, 4
WAIT_HEAD, WAIT_LEN, NUM_RUNNING = 0, 1, 2  # Queues.sizes
NUM_DECODE, NUM_PREFILL = 0, 1  # Plan.sizes


class Requests(NamedTuple):
    """`Request` fields as arrays of shape (n,), rows in arrival order."""

    arrival_s: np.ndarray  # float64
    prompt_tokens: np.ndarray  # int64
    max_new_tokens: np.ndarray  # int64
    status: np.ndarray  # int64: RequestStatus
    num_computed: np.ndarray  # int64
    num_generated: np.ndarray  # int64
    first_scheduled_s: np.ndarray  # float64
    first_token_s: np.ndarray  # float64
    last_token_s: np.ndarray  # float64
    finish_s: np.ndarray  # float64
    reason: np.ndarray  # int64: index into REASONS
    num_preemptions: np.ndarray  # int64
    kv_slot: np.ndarray  # int64: row in the pool's arrays, -1 while it holds no pages
    mark: np.ndarray  # int64: the decision that last scheduled it (budgeted_step's `scheduled`)


class Queues(NamedTuple):
    """The waiting deque as a ring buffer and the running list in start order."""

    waiting: np.ndarray  # (n,) int64 ring: a request waits at most once at a time
    running: np.ndarray  # (max running,) int64
    order: np.ndarray  # (max running,) int64: scratch, the order a policy visits running ones
    sizes: np.ndarray  # (3,) int64: WAIT_HEAD, WAIT_LEN, NUM_RUNNING


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


class Plan(NamedTuple):
    """`StepPlan`: decoding requests, then prompt chunks with their token counts."""

    decode: np.ndarray  # (max running,) int64
    prefill: np.ndarray  # (max running,) int64
    prefill_tokens: np.ndarray  # (max running,) int64
    sizes: np.ndarray  # (2,) int64: NUM_DECODE, NUM_PREFILL


def new_requests(requests: Sequence[Request]) -> Requests:
    """The arrays of `requests` (in the order given), from their current fields."""
    def column(name: str, dtype: type) -> np.ndarray:
        return np.fromiter((getattr(r, name) for r in requests), dtype=dtype,
                           count=len(requests))

    reasons = {reason: code for code, reason in enumerate(REASONS)}
    return Requests(
        *(column(name, np.float64 if name.endswith("_s") else np.int64)
          for name in Requests._fields[:10]),
        reason=np.fromiter((reasons[r.finish_reason] for r in requests), dtype=np.int64,
                           count=len(requests)),
        num_preemptions=column("num_preemptions", np.int64),
        kv_slot=np.full(len(requests), -1, dtype=np.int64),
        mark=np.zeros(len(requests), dtype=np.int64),
    )


def new_queues(num_requests: int, max_running: int) -> Queues:
    """Empty queues for `num_requests` requests, at most `max_running` running at once."""
    return Queues(np.zeros(max(num_requests, 1), np.int64), np.zeros(max_running, np.int64),
                  np.zeros(max_running, np.int64), np.zeros(3, np.int64))


def new_plan(max_running: int) -> Plan:
    """An empty plan with room for `max_running` requests."""
    return Plan(np.zeros(max_running, np.int64), np.zeros(max_running, np.int64),
                np.zeros(max_running, np.int64), np.zeros(2, np.int64))


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
def pages_needed(r, p, i, num_tokens):
    """`KVManager.pages_needed`: new pages request `i` takes for `num_tokens` more tokens."""
    slot = r.kv_slot[i]
    if slot < 0:
        return -(-(r.num_computed[i] + num_tokens) // p.page_size)
    return (-(-(r.num_computed[i] + num_tokens) // p.tokens_per_page[slot])
            - p.num_pages_of[slot])


@inline_kernel
def pages_held(r, p, i):
    """`KVManager.pages_held`."""
    slot = r.kv_slot[i]
    return p.num_pages_of[slot] if slot >= 0 else 0


@inline_kernel
def grow_kv(r, p, i, num_tokens):
    """`KVManager.grow` of one request: a slot on first use (`PagePool.allocate`), then pages."""
    if r.kv_slot[i] < 0:
        height = p.free_slots.shape[0] - 1
        p.free_slots[height] -= 1
        slot = p.free_slots[p.free_slots[height]]
        p.states[slot] = _RESIDENT
        p.tokens_per_page[slot] = p.page_size
        r.kv_slot[i] = slot
    K.take_pages(p.refcount, p.free_stack, p.counters, p.tables, p.num_pages_of, p.lengths,
                 p.tokens_per_page, r.kv_slot[i], num_tokens)


@inline_kernel
def free_kv(r, p, i):
    """`KVManager.free`: release the request's pages and its slot, if it holds any."""
    slot = r.kv_slot[i]
    if slot >= 0:
        K.release_slot(p.refcount, p.free_stack, p.counters, p.tables, p.num_pages_of, slot, 0)
        p.lengths[slot] = 0
        p.states[slot] = _FREE_SLOT
        height = p.free_slots.shape[0] - 1
        p.free_slots[p.free_slots[height]] = slot
        p.free_slots[height] += 1
        r.kv_slot[i] = -1


# ---- queues (QueuePolicy) ----------------------------------------------------------------------
@inline_kernel
def push_waiting(q, i, front):
    """`waiting.append(i)`, or `waiting.appendleft(i)` when `front`."""
    capacity = q.waiting.shape[0]
    if front:
        q.sizes[WAIT_HEAD] = (q.sizes[WAIT_HEAD] - 1) % capacity
        q.waiting[q.sizes[WAIT_HEAD]] = i
    else:
        q.waiting[(q.sizes[WAIT_HEAD] + q.sizes[WAIT_LEN]) % capacity] = i
    q.sizes[WAIT_LEN] += 1


@inline_kernel
def admit(r, q):
    """`QueuePolicy.admit` of the head of the waiting queue; returns the request."""
    i = q.waiting[q.sizes[WAIT_HEAD]]
    q.sizes[WAIT_HEAD] = (q.sizes[WAIT_HEAD] + 1) % q.waiting.shape[0]
    q.sizes[WAIT_LEN] -= 1
    r.status[i] = RUNNING
    q.running[q.sizes[NUM_RUNNING]] = i
    q.sizes[NUM_RUNNING] += 1
    return i


@inline_kernel
def preempt(r, p, q, i):
    """`QueuePolicy.preempt`: drop `i`'s KV and queue it at the front to recompute."""
    n = q.sizes[NUM_RUNNING]
    k = 0
    while q.running[k] != i:
        k += 1
    for m in range(k, n - 1):  # running.remove(i), order kept
        q.running[m] = q.running[m + 1]
    q.sizes[NUM_RUNNING] = n - 1
    free_kv(r, p, i)
    r.num_computed[i] = 0
    r.num_preemptions[i] += 1
    r.status[i] = WAITING
    push_waiting(q, i, True)


@inline_kernel
def drop_finished(r, q):
    """`QueuePolicy.update_from_output`: keep only the running requests still running."""
    kept = 0
    for k in range(q.sizes[NUM_RUNNING]):
        i = q.running[k]
        if r.status[i] == RUNNING:
            q.running[kept] = i
            kept += 1
    q.sizes[NUM_RUNNING] = kept
