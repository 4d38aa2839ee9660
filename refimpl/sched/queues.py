"""The run's two queues: admitted requests waiting in arrival order, running in start order.

vLLM's waiting and running queues as arrays, kept by the loop for every policy (the baselines
plan from them; a plain-Python policy reads them): `waiting` is a ring buffer (a request waits
at most once at a time; a preempted one goes back to the front, to recompute first), `running`
a list in the order requests started. `update` moves requests by what the committed plan did:
preempted ones to the waiting front (in preemption order), started ones (prefill entries that
were waiting) to the running tail, finished ones out. `order` and `marks` are the decisions'
scratch (the order they visit running requests in; which request the current decision has
scheduled or preempted), so a decision changes no request.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from refimpl._numba import inline_kernel, kernel
from refimpl.sched.plan import NUM_PREEMPT, PREEMPT
from refimpl.sched.table import FINISHED, STATUS

__all__ = ["Queues", "new_queues"]

WAIT_HEAD, WAIT_LEN, NUM_RUNNING, EPOCH = range(4)  # entries of Queues.sizes


class Queues(NamedTuple):
    """The waiting ring, the running list, the decisions' scratch, and their sizes."""

    waiting: np.ndarray  # (n,) int64 ring
    running: np.ndarray  # (max running,) int64
    order: np.ndarray  # (max running,) int64: the order a decision visits running requests
    marks: np.ndarray  # (n,) int64: EPOCH when scheduled by that decision, -EPOCH preempted
    sizes: np.ndarray  # (4,) int64: WAIT_HEAD, WAIT_LEN, NUM_RUNNING, EPOCH


def new_queues(num_requests: int, max_running: int) -> Queues:
    """Empty queues for `num_requests` requests, at most `max_running` running at once."""
    n = max(num_requests, 1)
    return Queues(np.zeros(n, np.int64), np.zeros(max_running, np.int64),
                  np.zeros(max_running, np.int64), np.zeros(n, np.int64), np.zeros(4, np.int64))


@inline_kernel
def waiting_at(q, k):
    """The `k`-th waiting request from the head."""
    return q.waiting[(q.sizes[WAIT_HEAD] + k) % q.waiting.shape[0]]


@kernel
def push_waiting(q, i, front):
    """Queue request `i` at the back (an arrival), or at the front when `front` (preempted)."""
    capacity = q.waiting.shape[0]
    if front:
        q.sizes[WAIT_HEAD] = (q.sizes[WAIT_HEAD] - 1) % capacity
        q.waiting[q.sizes[WAIT_HEAD]] = i
    else:
        q.waiting[(q.sizes[WAIT_HEAD] + q.sizes[WAIT_LEN]) % capacity] = i
    q.sizes[WAIT_LEN] += 1


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
    """Take `i` out of the waiting ring, the order of the others kept (O(1) at the head)."""
    capacity, head, n = q.waiting.shape[0], q.sizes[WAIT_HEAD], q.sizes[WAIT_LEN]
    k = 0
    while q.waiting[(head + k) % capacity] != i:
        k += 1
    for m in range(k, 0, -1):  # shift the ones before it back by one
        q.waiting[(head + m) % capacity] = q.waiting[(head + m - 1) % capacity]
    q.sizes[WAIT_HEAD] = (head + 1) % capacity
    q.sizes[WAIT_LEN] = n - 1


@kernel
def update(ints, q, entries, sizes, started, num_started):
    """Move requests between the queues by what the committed plan did (module doc);
    `started[:num_started]` are the requests the plan started, in plan order."""
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
