"""The `slo` policy's two queues: prompts by TTFT deadline, decoding requests by token deadline.

Both hold requests by their row `i` in the run's request table.

`PrefillQueue` is a binary heap of requests whose prompt is not fully computed (new ones, ones
part-way through a chunked prefill, and preempted ones recomputing). Its key is

    (deadline, remaining prompt tokens, priority, arrival, request id)

Earliest deadline first is optimal for meeting deadlines when the load is feasible (Liu and
Layland, 1973); among equal deadlines the shorter prompt goes first (it frees its share of the
tick sooner and lowers the mean TTFT, as shortest-job-first does); then the more urgent class,
then arrival order, and the id makes the order total, so runs are reproducible. The deadline
is the request's next-token deadline: its TTFT deadline before its first token, and its
per-token deadline when it recomputes after a preemption. A key is read when the request is
pushed. Push and pop are O(log N); `ordered` walks the queue in key order without changing it
(the k first in O(k log k)), so planning a tick leaves the queue as it was.

`DecodeSet` holds the requests producing one token per step, as arrays indexed by a slot (what
the Numba knapsack reads): next-token deadline, context length, weight and an active flag.
Adding, updating and removing a request are O(1); its slot is reused through a free list (the
last freed first), and a tie in the knapsack goes to the lower slot, so the order of the moves
is part of the decision. `DecodeSet.draft` is the set as a planned tick's moves would leave
it, the set itself unchanged.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from refimpl.sched.table import RequestTable

__all__ = ["DecodeDraft", "DecodeSet", "PrefillKey", "PrefillQueue", "next_token_deadline_s",
           "next_token_deadlines_s", "prefill_key"]

PrefillKey = tuple[float, int, int, float, int]  # the heap key of a row (module doc)


def next_token_deadline_s(requests: RequestTable, i: int) -> float:
    """When request `i`'s next output token is due (its TTFT deadline before the first)."""
    if requests.num_generated[i] == 0:
        return float(requests.arrival_s[i] + requests.ttft_slo_s[i])
    return float(requests.last_token_s[i] + requests.tpot_slo_s[i])


def next_token_deadlines_s(requests: RequestTable, rows: np.ndarray) -> np.ndarray:
    """`next_token_deadline_s` of each of `rows`."""
    return np.where(requests.num_generated[rows] == 0,
                    requests.arrival_s[rows] + requests.ttft_slo_s[rows],
                    requests.last_token_s[rows] + requests.tpot_slo_s[rows])


def prefill_key(requests: RequestTable, i: int, num_computed: int) -> PrefillKey:
    """Request `i`'s key in the prefill queue, with `num_computed` tokens cached."""
    return (next_token_deadline_s(requests, i),
            int(requests.prompt_tokens[i] + requests.num_generated[i]) - num_computed,
            int(requests.priority[i]), float(requests.arrival_s[i]),
            int(requests.request_id[i]))


class PrefillQueue:
    """Rows with prompt tokens left, earliest deadline first (key in the module doc)."""

    def __init__(self) -> None:
        self._heap: list[tuple[PrefillKey, int]] = []

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, i: int, key: PrefillKey) -> None:
        """Queue row `i` under `key`."""
        heapq.heappush(self._heap, (key, i))

    def remove(self, i: int) -> None:
        """Take row `i` out (O(N): only for the rare preemption of a queued prompt)."""
        self._heap = [entry for entry in self._heap if entry[1] != i]
        heapq.heapify(self._heap)

    def take(self, rows: Iterable[int]) -> None:
        """Take `rows` out, rows at the front of the order (the prompts a step computed):
        popped, the others popped on the way pushed back."""
        wanted = set(rows)
        passed = []
        while wanted and self._heap:
            entry = heapq.heappop(self._heap)
            if entry[1] in wanted:
                wanted.discard(entry[1])
            else:
                passed.append(entry)
        for entry in passed:
            heapq.heappush(self._heap, entry)

    def entries(self) -> list[tuple[PrefillKey, int]]:
        """The queued `(key, row)` entries (heap order, not sorted; do not change them)."""
        return self._heap

    def ordered(self, extra: Iterable[tuple[PrefillKey, int]] = (),
                skip: frozenset[int] | set[int] = frozenset()) -> Iterator[tuple[PrefillKey, int]]:
        """`(key, row)` in key order, with `extra` entries merged in and rows in `skip` left
        out; the queue is not changed (a heap walk: the k first cost O(k log k))."""
        heap = self._heap
        frontier: list[tuple[PrefillKey, int, int]] = [(key, i, -1) for key, i in extra]
        if heap:
            frontier.append((*heap[0], 0))
        heapq.heapify(frontier)
        while frontier:
            key, i, at = heapq.heappop(frontier)
            if at >= 0:  # a heap entry: its children come next in line
                for child in (2 * at + 1, 2 * at + 2):
                    if child < len(heap):
                        heapq.heappush(frontier, (*heap[child], child))
                if i in skip:
                    continue
            yield key, i


class DecodeSet:
    """Decoding rows as slot-indexed arrays, grown by doubling."""

    def __init__(self, capacity: int = 256) -> None:
        self.rows = np.full(capacity, -1, np.int64)  # the row in each slot, -1 for none
        self.deadline_s = np.zeros(capacity, np.float64)
        self.context = np.zeros(capacity, np.int64)  # tokens of KV it holds (num_computed)
        self.weight = np.zeros(capacity, np.float64)
        self.active = np.zeros(capacity, np.bool_)
        self._free = list(range(capacity - 1, -1, -1))
        self._slot_of: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, i: int) -> bool:
        return i in self._slot_of

    def decoding(self) -> np.ndarray:
        """The rows, in slot order."""
        return self.rows[np.flatnonzero(self.active)]

    def add(self, i: int, deadline_s: float, context: int, weight: float) -> None:
        """Start tracking row `i`, which decodes from now on."""
        if not self._free:
            self._grow()
        slot = self._free.pop()
        self._slot_of[i] = slot
        self.rows[slot] = i
        self.weight[slot] = weight
        self.active[slot] = True
        self.update(i, deadline_s, context)

    def update(self, i: int, deadline_s: float, context: int) -> None:
        """Refresh row `i`'s deadline and context after a step."""
        slot = self._slot_of[i]
        self.deadline_s[slot] = deadline_s
        self.context[slot] = context

    def update_rows(self, rows: np.ndarray, deadline_s: np.ndarray, context: np.ndarray) -> None:
        """`update` of many rows at once."""
        slot_of = self._slot_of
        slots = np.fromiter((slot_of[i] for i in rows.tolist()), np.int64, len(rows))
        self.deadline_s[slots] = deadline_s
        self.context[slots] = context

    def remove(self, i: int) -> None:
        """Stop tracking row `i` (finished, preempted or spilled)."""
        slot = self._slot_of.pop(i)
        self.rows[slot] = -1
        self.active[slot] = False
        self._free.append(slot)

    def draft(self) -> DecodeDraft:
        """The set as the moves of a tick being planned will leave it (a copy on write)."""
        return DecodeDraft(self)

    def adopt(self, draft: DecodeDraft) -> None:
        """Take on the moves of `draft` (drafted from this set, which has not changed since)."""
        if draft._free is not None:
            for name in DecodeDraft._ARRAYS:
                setattr(self, name, getattr(draft, name))
            self._free, self._slot_of = draft._free, draft._slot_of

    def _grow(self) -> None:
        old = len(self.rows)
        self.rows = np.concatenate([self.rows, np.full(old, -1, np.int64)])
        for name in ("deadline_s", "context", "weight", "active"):
            array = getattr(self, name)
            setattr(self, name, np.concatenate([array, np.zeros_like(array)]))
        self._free.extend(range(2 * old - 1, old - 1, -1))


class DecodeDraft:
    """A `DecodeSet` under a tick's planned moves: the set's own arrays until the first move,
    then copies; the same free-list rules, so a row added gets the slot the set will give it."""

    _ARRAYS = ("rows", "deadline_s", "context", "weight", "active")

    def __init__(self, base: DecodeSet) -> None:
        self._base = base
        for name in self._ARRAYS:
            setattr(self, name, getattr(base, name))
        self._free: list[int] | None = None  # copied on the first move
        self._slot_of: dict[int, int] | None = None

    def __len__(self) -> int:
        return len(self._slot_of if self._slot_of is not None else self._base._slot_of)

    def __contains__(self, i: int) -> bool:
        return i in (self._slot_of if self._slot_of is not None else self._base._slot_of)

    def slot(self, i: int) -> int:
        """Row `i`'s slot."""
        return (self._slot_of if self._slot_of is not None else self._base._slot_of)[i]

    def decoding(self) -> np.ndarray:
        """The rows, in slot order."""
        return self.rows[np.flatnonzero(self.active)]

    def _own(self) -> None:
        if self._free is None:
            for name in self._ARRAYS:
                setattr(self, name, getattr(self._base, name).copy())
            self._free = list(self._base._free)
            self._slot_of = dict(self._base._slot_of)

    def add(self, i: int, deadline_s: float, context: int, weight: float) -> None:
        """As `DecodeSet.add`."""
        self._own()
        if not self._free:
            old = len(self.rows)
            self.rows = np.concatenate([self.rows, np.full(old, -1, np.int64)])
            for name in self._ARRAYS[1:]:
                array = getattr(self, name)
                setattr(self, name, np.concatenate([array, np.zeros_like(array)]))
            self._free.extend(range(2 * old - 1, old - 1, -1))
        slot = self._free.pop()
        self._slot_of[i] = slot
        self.rows[slot], self.deadline_s[slot], self.context[slot] = i, deadline_s, context
        self.weight[slot], self.active[slot] = weight, True

    def remove(self, i: int) -> None:
        """As `DecodeSet.remove`."""
        self._own()
        slot = self._slot_of.pop(i)
        self.rows[slot] = -1
        self.active[slot] = False
        self._free.append(slot)
