"""Graded tests for the page allocator: exact page ids, against a brute-force list model."""

from __future__ import annotations

import random

import pytest

from refimpl.grading.measure import elapsed_s


class ListModel:
    """The oracle: the free queue as a plain list, counts in a dict; O(pool) per call."""

    def __init__(self, num_pages):
        self.free_queue = list(range(num_pages))
        self.counts = dict.fromkeys(range(num_pages), 0)

    def allocate(self, num):
        if num > len(self.free_queue):
            return None
        pages, self.free_queue = self.free_queue[:num], self.free_queue[num:]
        for page in pages:
            self.counts[page] = 1
        return pages

    def can_release(self, pages):
        return all(self.counts.get(page, 0) >= pages.count(page) for page in pages)

    def share(self, pages):
        for page in pages:
            self.counts[page] += 1

    def free(self, pages):
        for page in pages:
            self.counts[page] -= 1
            if self.counts[page] == 0:
                self.free_queue.append(page)


@pytest.mark.points(1)
def test_a_fresh_pool_hands_out_pages_in_order(solution):
    """A new pool of 8 pages gives [0, 1, 2], then [3, 4]; 3 pages stay free."""
    pool = solution.PageAllocator(8)
    assert pool.allocate(3) == [0, 1, 2]
    assert pool.allocate(2) == [3, 4]
    assert pool.num_free == 3
    assert pool.refcount(0) == 1 and pool.refcount(7) == 0


@pytest.mark.points(1)
def test_allocation_is_all_or_nothing(solution):
    """Asking for more pages than are free gives None and takes none; 0 pages gives []."""
    pool = solution.PageAllocator(4)
    assert pool.allocate(3) == [0, 1, 2]
    assert pool.allocate(2) is None
    assert pool.num_free == 1
    assert pool.allocate(0) == []
    assert pool.allocate(1) == [3]


@pytest.mark.points(1)
def test_freed_pages_rejoin_the_back_of_the_queue_in_order(solution):
    """Pages freed as [2, 0] come back after the never-used ones, 2 before 0."""
    pool = solution.PageAllocator(5)
    pool.allocate(3)
    pool.free([2, 0])
    assert pool.num_free == 4
    assert pool.allocate(4) == [3, 4, 2, 0]


@pytest.mark.points(2)
def test_a_shared_page_is_freed_by_its_last_holder(solution):
    """A page shared by two requests returns to the pool only after both free it."""
    pool = solution.PageAllocator(3)
    prefix = pool.allocate(2)
    pool.share(prefix)  # a second request reuses the same prompt prefix
    assert [pool.refcount(page) for page in prefix] == [2, 2]
    pool.free(prefix)
    assert pool.num_free == 1 and pool.refcount(0) == 1
    pool.free(prefix)
    assert pool.num_free == 3 and pool.refcount(0) == 0
    assert pool.allocate(3) == [2, 0, 1]


@pytest.mark.points(1)
def test_a_double_free_raises_and_changes_nothing(solution):
    """Freeing a free page (or the same page twice in one call) raises ValueError; no change."""
    pool = solution.PageAllocator(4)
    pool.allocate(2)
    pool.free([1])
    for bad in ([1], [0, 0], [0, 3], [99]):
        with pytest.raises(ValueError, match="page"):
            pool.free(bad)
        assert pool.num_free == 3 and pool.refcount(0) == 1, f"free({bad}) changed the pool"
    with pytest.raises(ValueError, match="page"):
        pool.share([2])
    assert pool.allocate(3) == [2, 3, 1]


@pytest.mark.points(3)
def test_random_operations_match_a_list_model(solution):
    """3,000 random allocate / share / free calls give the model's exact ids and counts."""
    rng = random.Random(7)
    pool, model = solution.PageAllocator(32), ListModel(32)
    held: list[list[int]] = []
    for step in range(3000):
        action = rng.random()
        if action < 0.45 or not held:
            num = rng.randrange(0, 7)
            got, want = pool.allocate(num), model.allocate(num)
            assert got == want, f"step {step}: allocate({num})"
            if want:
                held.append(want)
        elif action < 0.6:
            pages = rng.choice(held)
            pool.share(pages)
            model.share(pages)
            held.append(pages)
        else:
            pages = held.pop(rng.randrange(len(held)))
            pool.free(pages)
            model.free(pages)
        assert pool.num_free == len(model.free_queue), f"step {step}: num_free"
    assert [pool.refcount(page) for page in range(32)] == [model.counts[p] for p in range(32)]


@pytest.mark.points(1)
def test_calls_cost_the_pages_asked_for_not_the_pool_size(solution):
    """On a pool of 1,000,000 pages, 20,000 allocate+free of 4 pages take under 2 s."""
    pool = solution.PageAllocator(1_000_000)

    def churn():
        for _ in range(20_000):
            pool.free(pool.allocate(4))

    _, seconds = elapsed_s(churn)
    assert seconds < 2.0, f"took {seconds:.1f} s: a list's pop(0) moves the whole pool"


@pytest.mark.points(1)
def test_bad_sizes_raise_value_error_naming_the_argument(solution):
    """PageAllocator(0) and allocate(-1) raise ValueError naming num_pages / num."""
    with pytest.raises(ValueError, match="num_pages"):
        solution.PageAllocator(0)
    with pytest.raises(ValueError, match="num"):
        solution.PageAllocator(2).allocate(-1)
