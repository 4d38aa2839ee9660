"""The run's two queues: admitted requests waiting in arrival order, running in start order.

vLLM's waiting and running queues as arrays, kept by the loop for every policy (the baselines
plan from them; a plain-Python policy reads them): `waiting` is a ring buffer (a request waits
at most once at a time; a preempted one goes back to the front, to recompute first), `running`
a list in the order requests started. A policy may ask, before the run, for the waiting queue
in an order of its own instead (`order_waiting_by`: each request's rank, e.g. by deadline);
then every request that joins it, arrival or preempted, is inserted at its rank. `update`
moves requests by what the committed plan did: preempted ones to the waiting front (in
preemption order), started ones (prefill entries that were waiting) to the running tail,
ended ones out of either. `order` and `marks` are the decisions' scratch (the order they visit
running requests in; which request the current decision has scheduled, preempted or ended),
so a decision changes no request.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from refimpl._numba import inline_kernel, kernel
from refimpl.errors import ConfigError
from refimpl.sched.plan import FINISH, NUM_FINISH, NUM_PREEMPT, PREEMPT
from refimpl.sched.table import FINISHED, STATUS

__all__ = ["Queues", "new_queues", "order_waiting_by"]

# Entries of Queues.sizes; BY_RANK is 1 where the waiting queue is kept in `ranks` order.
WAIT_HEAD, WAIT_LEN, NUM_RUNNING, EPOCH, BY_RANK = range(5)


class Queues(NamedTuple):
    """The waiting ring, the running list, the decisions' scratch, and their sizes."""

    waiting: np.ndarray  # (n,) int64 ring
    running: np.ndarray  # (max running,) int64
    order: np.ndarray  # (max running,) int64: the order a decision visits running requests
    marks: np.ndarray  # (n,) int64: EPOCH when scheduled by that decision, -EPOCH preempted
    ranks: np.ndarray  # (n,) int64: each request's place in the waiting order, where BY_RANK
    sizes: np.ndarray  # (5,) int64: WAIT_HEAD, WAIT_LEN, NUM_RUNNING, EPOCH, BY_RANK


def new_queues(num_requests: int, max_running: int) -> Queues:
    """Empty queues for `num_requests` requests, at most `max_running` running at once."""
    n = max(num_requests, 1)
    return Queues(np.zeros(n, np.int64), np.zeros(max_running, np.int64),
                  np.zeros(max_running, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64),
                  np.zeros(5, np.int64))


def order_waiting_by(q: Queues, keys: np.ndarray) -> None:
    """Keep the waiting queue in ascending `keys` (one per request; ties in row order, so the
    order is total) from now on; only before the run's first arrival."""
    if q.sizes[WAIT_LEN] or q.sizes[NUM_RUNNING]:
        raise ConfigError("queues", int(q.sizes[WAIT_LEN] + q.sizes[NUM_RUNNING]),
                          "must be empty when a policy orders the waiting queue")
    keys = np.asarray(keys, np.float64)
    if keys.shape != (len(q.ranks),) and len(keys):
        raise ConfigError("keys", keys.shape, f"must hold one key per request ({len(q.ranks)})")
    q.ranks[np.lexsort((np.arange(len(keys)), keys))] = np.arange(len(keys))
    q.sizes[BY_RANK] = 1


@inline_kernel
def waiting_at(q, k):
    """The `k`-th waiting request from the head."""
    return q.waiting[(q.sizes[WAIT_HEAD] + k) % q.waiting.shape[0]]


@kernel
def push_waiting(q, i, front):
    """Queue request `i` at the back (an arrival), or at the front when `front` (preempted);
    at its rank instead where the queue is ordered by rank."""
    capacity = q.waiting.shape[0]
    if q.sizes[BY_RANK]:
        _insert_by_rank(q, i)
    elif front:
        q.sizes[WAIT_HEAD] = (q.sizes[WAIT_HEAD] - 1) % capacity
        q.waiting[q.sizes[WAIT_HEAD]] = i
    else:
        q.waiting[(q.sizes[WAIT_HEAD] + q.sizes[WAIT_LEN]) % capacity] = i
    q.sizes[WAIT_LEN] += 1


@kernel
def _insert_by_rank(q, i):
    """Put request `i` into the rank-ordered waiting ring at its place (the caller counts
    it): a binary search, then the shorter side moves over by one (the front, for a
    preempted request of an early rank)."""
    capacity, head, n = q.waiting.shape[0], q.sizes[WAIT_HEAD], q.sizes[WAIT_LEN]
    rank = q.ranks[i]
    lo, hi = 0, n  # the first place whose rank is above `rank` (ranks are distinct)
    while lo < hi:
        mid = (lo + hi) // 2
        if q.ranks[q.waiting[(head + mid) % capacity]] < rank:
            lo = mid + 1
        else:
            hi = mid
    if lo < n - lo:  # fewer before it: those move one place towards the front
        head = (head - 1) % capacity
        for m in range(lo):
            q.waiting[(head + m) % capacity] = q.waiting[(head + m + 1) % capacity]
        q.sizes[WAIT_HEAD] = head
    else:
        for m in range(n, lo, -1):
            q.waiting[(head + m) % capacity] = q.waiting[(head + m - 1) % capacity]
    q.waiting[(head + lo) % capacity] = i


@inline_kernel
def new_decision(q):
    """Start a decision: a fresh epoch for `marks`; returns it."""
    q.sizes[EPOCH] += 1
    return q.sizes[EPOCH]


@kernel
def _remove_running(q, i):
    """Take `i` out of the running list, the order of the others kept."""
    n = q.sizes[NUM_RUNNING]
    k = 0
    while q.running[k] != i:
        k += 1
    for m in range(k, n - 1):
        q.running[m] = q.running[m + 1]
    q.sizes[NUM_RUNNING] = n - 1


@kernel
def _remove_waiting(q, i):
    """Take `i` out of the waiting ring, the order of the others kept (O(1) at the head);
    nothing if it is not there."""
    capacity, head, n = q.waiting.shape[0], q.sizes[WAIT_HEAD], q.sizes[WAIT_LEN]
    k = 0
    while k < n and q.waiting[(head + k) % capacity] != i:
        k += 1
    if k == n:
        return
    for m in range(k, 0, -1):  # shift the ones before it back by one
        q.waiting[(head + m) % capacity] = q.waiting[(head + m - 1) % capacity]
    q.sizes[WAIT_HEAD] = (head + 1) % capacity
    q.sizes[WAIT_LEN] = n - 1


@inline_kernel
def _is_running(q, i):
    """Whether request `i` is in the running list."""
    for k in range(q.sizes[NUM_RUNNING]):  # noqa: SIM110 (a plain loop compiles simplest)
        if q.running[k] == i:
            return True
    return False


@kernel
def update(ints, q, entries, sizes, started, num_started):
    """Move requests between the queues by what the committed plan did (module doc);
    `started[:num_started]` are the requests the plan started, in plan order."""
    for k in range(sizes[NUM_FINISH]):  # ended by the plan: running ones leave below
        if not _is_running(q, entries[FINISH, k]):
            _remove_waiting(q, entries[FINISH, k])  # (edf's guard rejects waiting ones)
    for k in range(sizes[NUM_PREEMPT]):
        i = entries[PREEMPT, k]
        _remove_running(q, i)
        push_waiting(q, i, True)
    for k in range(num_started):
        _remove_waiting(q, started[k])
        q.running[q.sizes[NUM_RUNNING]] = started[k]
        q.sizes[NUM_RUNNING] += 1
    kept = 0
    for k in range(q.sizes[NUM_RUNNING]):
        i = q.running[k]
        if ints[STATUS, i] < FINISHED:
            q.running[kept] = i
            kept += 1
    q.sizes[NUM_RUNNING] = kept
