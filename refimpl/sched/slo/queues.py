"""The `slo` policy's two queues: prompts by TTFT deadline, decoding requests by token deadline.

`PrefillQueue` is a binary heap of requests whose prompt is not fully computed (new ones, ones
part-way through a chunked prefill, and preempted ones recomputing). Its key is

    (deadline, remaining prompt tokens, priority, arrival, request id)

Earliest deadline first is optimal for meeting deadlines when the load is feasible (Liu and
Layland, 1973); among equal deadlines the shorter prompt goes first (it frees its share of the
tick sooner and lowers the mean TTFT, as shortest-job-first does); then the more urgent class,
then arrival order, and the id makes the order total, so runs are reproducible. The deadline
is the request's next-token deadline: its TTFT deadline before its first token, and its
per-token deadline when it recomputes after a preemption. Push and pop are O(log N).

`DecodeSet` holds the requests producing one token per step, as arrays indexed by a slot (what
the Numba knapsack reads): next-token deadline, context length, weight and an active flag.
Adding, updating and removing a request are O(1); its slot is reused through a free list.
"""

from __future__ import annotations

import heapq

import numpy as np

from refimpl.sched.request import Request

__all__ = ["DecodeSet", "PrefillQueue"]


class PrefillQueue:
    """Requests with prompt tokens left, earliest deadline first (key in the module doc)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, float, int, Request]] = []

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, request: Request) -> None:
        """Queue a request (its key is read now)."""
        key = (request.next_token_deadline_s(), request.num_uncomputed, request.priority,
               request.arrival_s, request.request_id)
        heapq.heappush(self._heap, (*key, request))

    def pop(self) -> Request:
        """Take the first request."""
        return heapq.heappop(self._heap)[-1]

    def remove(self, request: Request) -> None:
        """Take a given request out (O(N): only for the rare preemption of a queued prompt)."""
        self._heap = [entry for entry in self._heap if entry[-1] is not request]
        heapq.heapify(self._heap)

    def requests(self) -> list[Request]:
        """The queued requests (heap order, not sorted)."""
        return [entry[-1] for entry in self._heap]


class DecodeSet:
    """Decoding requests as slot-indexed arrays, grown by doubling."""

    def __init__(self, capacity: int = 256) -> None:
        self.requests: list[Request | None] = [None] * capacity
        self.deadline_s = np.zeros(capacity, np.float64)
        self.context = np.zeros(capacity, np.int64)  # tokens of KV it holds (num_computed)
        self.weight = np.zeros(capacity, np.float64)
        self.active = np.zeros(capacity, np.bool_)
        self._free = list(range(capacity - 1, -1, -1))
        self._slot_of: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, request: Request) -> bool:
        return request.request_id in self._slot_of

    def add(self, request: Request) -> None:
        """Start tracking a request that has produced its first token."""
        if not self._free:
            self._grow()
        slot = self._free.pop()
        self._slot_of[request.request_id] = slot
        self.requests[slot] = request
        self.weight[slot] = request.weight
        self.active[slot] = True
        self.update(request)

    def update(self, request: Request) -> None:
        """Refresh a request's deadline and context after a step."""
        slot = self._slot_of[request.request_id]
        self.deadline_s[slot] = request.next_token_deadline_s()
        self.context[slot] = request.num_computed

    def remove(self, request: Request) -> None:
        """Stop tracking a request (finished or preempted)."""
        slot = self._slot_of.pop(request.request_id)
        self.requests[slot] = None
        self.active[slot] = False
        self._free.append(slot)

    def _grow(self) -> None:
        old = len(self.requests)
        self.requests.extend([None] * old)
        for name in ("deadline_s", "context", "weight", "active"):
            array = getattr(self, name)
            setattr(self, name, np.concatenate([array, np.zeros_like(array)]))
        self._free.extend(range(2 * old - 1, old - 1, -1))
