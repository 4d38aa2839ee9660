"""Random operation sequences against the page pool, with every invariant checked each step."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from refimpl.errors import CapacityError, KVCacheError
from refimpl.kv import PagePool, RequestState

NUM_PAGES, PAGE_SIZE, MAX_CONTEXT, CPU_PAGES = 24, 4, 40, 12


class PoolMachine(RuleBasedStateMachine):
    """Drives a small pool; `self.lengths` is the model of what each request must hold."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = PagePool(NUM_PAGES, PAGE_SIZE, max_context=MAX_CONTEXT,
                             cpu_tier_pages=CPU_PAGES, initial_slots=2)
        self.lengths: dict[int, int] = {}
        self.next_id = 0

    def _snapshot(self):
        p = self.pool
        return (p.refcount.copy(), p.tables.copy(), p.lengths.copy(), p.states.copy(),
                p.free_stack.copy(), p.counters.copy())

    def _unchanged_since(self, snapshot) -> bool:
        return all(np.array_equal(a, b) for a, b in zip(snapshot, self._snapshot(), strict=True))

    def _resident(self) -> list[int]:
        return [r for r in self.lengths if self.pool.state(r) is RequestState.RESIDENT]

    @rule(tokens=st.integers(0, 50))
    def allocate(self, tokens):
        request_id, before = self.next_id, self._snapshot()
        self.next_id += 1
        expected_ok = self.pool.can_allocate(tokens) if tokens <= MAX_CONTEXT else False
        try:
            self.pool.allocate(request_id, tokens)
        except CapacityError:
            assert not expected_ok and self._unchanged_since(before)
            return
        assert expected_ok
        self.lengths[request_id] = tokens

    @precondition(lambda self: self.lengths)
    @rule(data=st.data(), tokens=st.integers(0, 9))
    def append(self, data, tokens):
        resident = self._resident()
        if not resident:
            return
        request_id = data.draw(st.sampled_from(resident))
        expected_ok, before = self.pool.can_append(request_id, tokens), self._snapshot()
        try:
            self.pool.append(request_id, tokens)
        except CapacityError:
            assert not expected_ok and self._unchanged_since(before)
            return
        assert expected_ok
        self.lengths[request_id] += tokens

    @precondition(lambda self: self.lengths)
    @rule(data=st.data())
    def append_batch(self, data):
        resident = self._resident()
        chosen = data.draw(st.lists(st.sampled_from(resident), unique=True)) if resident else []
        before = self._snapshot()
        slots = np.array([self.pool.slot(r) for r in chosen], dtype=np.int32)
        try:
            self.pool.append_batch(slots, 1)
        except CapacityError:
            assert self._unchanged_since(before)
            return
        for request_id in chosen:
            self.lengths[request_id] += 1

    @precondition(lambda self: self.lengths)
    @rule(data=st.data())
    def fork(self, data):
        resident = self._resident()
        if not resident:
            return
        src = data.draw(st.sampled_from(resident))
        self.pool.fork(src, self.next_id)
        self.lengths[self.next_id] = self.lengths[src]
        self.next_id += 1

    @precondition(lambda self: self.lengths)
    @rule(data=st.data(), preempt=st.booleans())
    def free(self, data, preempt):
        # A preemption frees the pages the same way; the scheduler recomputes later.
        request_id = data.draw(st.sampled_from(sorted(self.lengths)))
        self.pool.free(request_id)
        del self.lengths[request_id]

    @precondition(lambda self: self.lengths)
    @rule(data=st.data(), factor=st.sampled_from([2, 4]))
    def quantize(self, data, factor):
        resident = self._resident()
        if not resident:
            return
        request_id, before = data.draw(st.sampled_from(resident)), self._snapshot()
        try:
            self.pool.quantize(request_id, factor)
        except KVCacheError:
            assert self._unchanged_since(before)

    @precondition(lambda self: self.lengths)
    @rule(data=st.data())
    def spill_or_restore(self, data):
        request_id, before = data.draw(st.sampled_from(sorted(self.lengths))), self._snapshot()
        try:
            if self.pool.state(request_id) is RequestState.RESIDENT:
                self.pool.spill(request_id)
            else:
                self.pool.restore(request_id)
        except CapacityError:
            assert self._unchanged_since(before)

    @invariant()
    def pages_balance(self):
        pool = self.pool
        holders: Counter[int] = Counter()
        for request_id in pool.request_ids():
            if pool.state(request_id) is RequestState.RESIDENT:
                holders.update(pool.page_table(request_id))
        free = pool.free_stack[: pool.num_free_pages].tolist()
        assert len(set(free)) == len(free)
        assert pool.num_used_pages + pool.num_free_pages == NUM_PAGES
        for page in range(NUM_PAGES):
            assert pool.refcount[page] == holders[page]
            assert (page in free) == (holders[page] == 0)
        assert pool.counters[1] == sum(count >= 2 for count in holders.values())  # shared

    @invariant()
    def lengths_and_page_counts_match_the_model(self):
        pool = self.pool
        assert sorted(pool.request_ids()) == sorted(self.lengths)
        spilled = 0
        for request_id, length in self.lengths.items():
            assert pool.length(request_id) == length
            slot = pool.slot(request_id)
            need = -(-length // int(pool.tokens_per_page[slot]))
            assert pool.num_pages_of[slot] == need
            if pool.state(request_id) is RequestState.SPILLED:
                spilled += need
        assert pool.stats().num_spilled_pages == spilled <= CPU_PAGES

    def teardown(self):
        self.pool.free_all()
        assert self.pool.num_free_pages == NUM_PAGES
        assert self.pool.stats().num_spilled_pages == 0
        assert not self.pool.refcount.any()


PoolMachine.TestCase.settings = settings(max_examples=80, stateful_step_count=50,
                                         deadline=None)
TestPoolStateMachine = PoolMachine.TestCase
