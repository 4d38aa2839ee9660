"""PagePool, exactly: page ids, refcounts and free-list order after each operation."""

from __future__ import annotations

import numpy as np
import pytest

from refimpl import ModelConfig
from refimpl.errors import CapacityError, ConfigError, KVCacheError
from refimpl.kv import PagePool, RequestState


def free_list(pool: PagePool) -> list[int]:
    """Free pages, the next to be handed out first."""
    return pool.free_stack[: pool.num_free_pages][::-1].tolist()


def test_fresh_pages_come_out_in_ascending_order():
    pool = PagePool(8, 4)
    assert pool.allocate(1, 5) == [0, 1]
    assert pool.allocate(2, 4) == [2]
    assert pool.allocate(3, 0) == []
    assert free_list(pool) == [3, 4, 5, 6, 7]
    assert pool.refcount.tolist() == [1, 1, 1, 0, 0, 0, 0, 0]


def test_append_takes_a_page_only_when_the_last_one_fills():
    pool = PagePool(8, 4)
    pool.allocate(1, 3)
    assert pool.append(1) == [] and pool.page_table(1) == [0]  # 4 tokens: page 0 full
    pool.append(1)
    assert pool.page_table(1) == [0, 1] and pool.length(1) == 5
    pool.append(1, 7)  # 12 tokens: exactly 3 pages
    assert pool.page_table(1) == [0, 1, 2]
    pool.append(1, 0)
    assert pool.page_table(1) == [0, 1, 2] and pool.num_free_pages == 5


def test_free_returns_pages_so_the_next_request_reuses_them_in_order():
    pool = PagePool(8, 4)
    pool.allocate(1, 12)  # pages 0, 1, 2
    pool.allocate(2, 4)  # page 3
    pool.free(1)
    assert free_list(pool) == [0, 1, 2, 4, 5, 6, 7]
    assert pool.allocate(3, 8) == [0, 1]
    assert pool.refcount.tolist() == [1, 1, 0, 1, 0, 0, 0, 0]


def test_fork_shares_pages_and_copies_a_shared_last_page_on_write():
    pool = PagePool(8, 4)
    pool.allocate(1, 6)  # pages 0, 1 (page 1 half full)
    assert pool.fork(1, 2) == [0, 1]
    assert pool.refcount.tolist()[:2] == [2, 2]
    assert pool.append(2) == [(1, 2)]  # page 1 is shared and partly full: copy it to 2
    assert pool.page_table(2) == [0, 2] and pool.page_table(1) == [0, 1]
    assert pool.refcount.tolist()[:3] == [2, 1, 1]
    assert pool.append(1) == []  # the original now owns page 1 alone: no copy
    pool.free(1)
    assert pool.refcount.tolist()[:3] == [1, 0, 1]
    assert free_list(pool)[0] == 1


def test_fork_of_a_full_last_page_needs_no_copy():
    pool = PagePool(8, 4)
    pool.allocate(1, 8)
    pool.fork(1, 2)
    assert pool.append(2) == [] and pool.page_table(2) == [0, 1, 2]
    assert pool.refcount.tolist()[:3] == [2, 2, 1]


def test_batch_append_grows_every_request_in_one_call():
    pool = PagePool(16, 4)
    for request_id, tokens in [(10, 4), (11, 3), (12, 8)]:
        pool.allocate(request_id, tokens)
    slots = np.array([pool.slot(r) for r in (10, 11, 12)], dtype=np.int32)
    cow = pool.append_batch(slots, 1)
    assert cow.shape == (0, 2)
    assert [pool.length(r) for r in (10, 11, 12)] == [5, 4, 9]
    assert pool.page_table(10) == [0, 4] and pool.page_table(11) == [1]
    assert pool.page_table(12) == [2, 3, 5]
    pool.append_batch(slots, np.array([3, 1, 0], dtype=np.int32))
    assert [pool.length(r) for r in (10, 11, 12)] == [8, 5, 9]


def test_batch_append_reports_copy_on_write_pairs():
    pool = PagePool(8, 4)
    pool.allocate(1, 2)
    pool.fork(1, 2)
    cow = pool.append_batch(np.array([pool.slot(2)]), 1)
    assert cow.tolist() == [[0, 1]]


def test_failed_batch_append_changes_nothing():
    pool = PagePool(4, 4)
    pool.allocate(1, 4)
    pool.allocate(2, 4)
    pool.allocate(3, 4)  # one page free, two requests want a new page
    before = (pool.refcount.copy(), pool.tables.copy(), pool.lengths.copy(), free_list(pool))
    with pytest.raises(CapacityError, match="needs 2 pages, 1 are free"):
        pool.append_batch(np.array([pool.slot(1), pool.slot(2)]), 1)
    after = (pool.refcount, pool.tables, pool.lengths, free_list(pool))
    assert all(np.array_equal(a, b) for a, b in zip(before[:3], after[:3], strict=True))
    assert before[3] == after[3]


def test_capacity_errors_name_the_request_and_leave_the_pool_unchanged():
    pool = PagePool(4, 4, max_context=12)
    pool.allocate(1, 8)
    with pytest.raises(CapacityError, match="request 2 needs 3 pages, 2 are free"):
        pool.allocate(2, 9)
    assert 2 not in pool and pool.num_free_pages == 2
    with pytest.raises(CapacityError, match=r"request 1 holds 8 tokens.*max context is 12"):
        pool.append(1, 5)
    assert pool.length(1) == 8 and pool.page_table(1) == [0, 1]
    with pytest.raises(CapacityError, match="max context of 12"):
        pool.allocate(3, 13)
    assert not pool.can_allocate(13) and not pool.can_append(1, 5) and pool.can_append(1, 4)


def test_misuse_names_the_request():
    pool = PagePool(4, 4)
    pool.allocate(1, 1)
    with pytest.raises(KVCacheError, match="request_id=1: already holds pages"):
        pool.allocate(1, 1)
    pool.free(1)
    with pytest.raises(KVCacheError, match="request_id=1: holds no pages"):
        pool.free(1)
    with pytest.raises(KVCacheError, match="request_id=7: holds no pages"):
        pool.append(7)
    with pytest.raises(KVCacheError, match="request_id='a'"):
        pool.allocate("a", 1)
    with pytest.raises(ConfigError, match="num_tokens=-1"):
        pool.allocate(2, -1)
    assert pool.num_free_pages == 4 and pool.request_ids() == []


@pytest.mark.parametrize(("field", "kwargs"), [("page_size", {"page_size": 0}),
                                               ("num_pages", {"num_pages": -3}),
                                               ("page_size", {"page_size": 2.5})])
def test_bad_pool_shapes_are_rejected(field, kwargs):
    args = {"num_pages": 4, "page_size": 4, **kwargs}
    with pytest.raises(ConfigError, match=f"{field}="):
        PagePool(**args)


def test_batch_append_rejects_bad_slots():
    pool = PagePool(4, 4)
    pool.allocate(1, 1)
    with pytest.raises(KVCacheError, match="slots=3"):
        pool.append_batch(np.array([3]))
    with pytest.raises(KVCacheError, match="appears twice in one batch"):
        pool.append_batch(np.array([0, 0]))


def test_sizing_from_a_model_and_a_memory_budget():
    model = ModelConfig.preset("llama-2-7b")  # 512 KiB of KV per token
    pool = PagePool.for_model(model, memory_bytes=2**30, page_size=16)
    assert pool.num_pages == 2**30 // (16 * 524_288) == 128
    assert pool.max_context == model.max_context
    with pytest.raises(CapacityError, match="memory_bytes=1000"):
        PagePool.for_model(model, memory_bytes=1000)


def test_quantize_repacks_tokens_and_frees_the_tail_pages():
    pool = PagePool(8, 4)
    pool.allocate(1, 13)  # pages 0..3
    assert pool.quantize(1, 2) == [2, 3]  # 13 tokens at 8 per page: 2 pages
    assert pool.page_table(1) == [0, 1] and pool.is_quantized(1)
    pool.append(1, 3)  # 16 tokens fill both pages exactly
    assert pool.page_table(1) == [0, 1]
    pool.append(1)
    assert pool.page_table(1) == [0, 1, 2]  # the freed tail comes back in its old order
    pool.fork(1, 2)
    with pytest.raises(KVCacheError, match="shares pages"):
        pool.quantize(1, 2)


def test_spill_and_restore_move_pages_through_the_cpu_tier():
    pool = PagePool(4, 4, cpu_tier_pages=2)
    pool.allocate(1, 6)
    pool.allocate(2, 4)
    assert pool.spill(1) == 2
    assert pool.state(1) is RequestState.SPILLED and pool.num_free_pages == 3
    assert pool.stats().num_spilled_pages == 2
    with pytest.raises(KVCacheError, match="spilled"):
        pool.append(1)
    with pytest.raises(CapacityError, match="needs 1 CPU-tier pages, 0 are free"):
        pool.spill(2)
    pool.allocate(3, 8)  # takes pages 0 and 1; one page left
    assert not pool.can_restore(1)
    pool.free(3)
    assert pool.restore(1) == [0, 1] and pool.length(1) == 6
    assert pool.stats().num_spilled_pages == 0
    with pytest.raises(KVCacheError, match="is not spilled"):
        pool.restore(1)


def test_freeing_a_spilled_request_empties_its_cpu_tier_pages():
    pool = PagePool(4, 4, cpu_tier_pages=4)
    pool.allocate(1, 5)
    pool.spill(1)
    pool.free(1)
    assert pool.stats().num_spilled_pages == 0 and pool.num_free_pages == 4


def test_stats_count_use_waste_and_states():
    pool = PagePool(8, 4, cpu_tier_pages=8)
    pool.allocate(1, 5)  # 2 pages, 3 slots unused
    pool.allocate(2, 4)  # 1 page, full
    pool.allocate(3, 1)
    pool.spill(3)
    stats = pool.stats()
    assert (stats.num_used_pages, stats.num_free_pages) == (3, 5)
    assert stats.utilization == pytest.approx(3 / 8)
    assert stats.wasted_token_slots == 3
    assert (stats.num_resident, stats.num_spilled) == (2, 1)


def test_slots_grow_past_the_initial_capacity():
    pool = PagePool(256, 1, initial_slots=2)
    for request_id in range(100):
        pool.allocate(request_id, 2)
    assert pool.page_table(99) == [198, 199]
    pool.free_all()
    assert pool.num_free_pages == 256 and pool.request_ids() == []


def test_free_batch_releases_resident_and_spilled_requests_together():
    pool = PagePool(8, 4, cpu_tier_pages=4)
    pool.allocate(1, 8)  # pages 0, 1
    pool.allocate(2, 4)  # page 2
    pool.allocate(3, 4)  # page 3
    pool.spill(3)
    pool.free_batch([2, 1, 3])
    assert free_list(pool) == [0, 1, 2, 3, 4, 5, 6, 7]  # 2, then 1's pages last first
    assert pool.num_free_pages == 8 and pool.stats().num_spilled_pages == 0
    assert pool.request_ids() == []
    pool.allocate(4, 1)
    with pytest.raises(KVCacheError, match="names a request twice"):
        pool.free_batch([4, 4])
    assert 4 in pool


def test_tier_and_free_kernels_refuse_without_changing_the_arrays():
    from refimpl.kv import _pool_kernels as K
    from refimpl.kv import _tier_kernels as T

    pool = PagePool(8, 4, cpu_tier_pages=1)
    pool.allocate(1, 8)
    pool.fork(1, 2)  # slots 0 and 1 share pages 0 and 1
    arrays = (pool.refcount, pool.free_stack, pool.counters, pool.tables, pool.num_pages_of,
              pool.lengths, pool.tokens_per_page, pool.states)
    before = [a.copy() for a in arrays]
    assert T.quantize(*arrays, 0, 2) == T.SHARED_PAGE
    assert T.quantize(*arrays, 0, 1) == T.BAD_FACTOR
    assert T.spill(*arrays[:5], pool.states, 0, pool.cpu_tier_pages) == T.NO_TIER_ROOM
    assert T.restore(*arrays, 0) == K.BAD_SLOT
    assert K.free_slots(*arrays[:6], pool.states, np.array([1, 0, 1], np.int32)) == K.DUPLICATE
    assert K.free_slots(*arrays[:6], pool.states, np.array([0, 5], np.int32)) == K.BAD_SLOT
    assert all(np.array_equal(a, b) for a, b in zip(before, arrays, strict=True))
    assert pool.counters[K.SPILLED] == pool.num_spilled_pages == 0


def test_a_batched_free_returns_every_slot_and_page_for_reuse():
    pool = PagePool(64, 16, initial_slots=8, cpu_tier_pages=8)
    for r in range(8):
        pool.allocate(r, 20 + r)
    pool.spill(6)
    freed = [3, 0, 7, 6, 5]
    slots = sorted(pool.slot(r) for r in freed)
    pool.free_batch(freed)
    assert all(pool.states[s] == RequestState.FREE and pool.lengths[s] == 0
               and pool.num_pages_of[s] == 0 for s in slots)
    for r in range(10, 15):  # the freed slots are taken again: none leaked, none added
        pool.allocate(r, 1)
    assert sorted(pool.slot(r) for r in range(10, 15)) == slots
    assert pool.states.shape[0] == 8
    pool.free_batch(pool.request_ids())
    assert pool.num_free_pages == 64 and pool.num_spilled_pages == 0
    assert not pool.states.any() and not pool.lengths.any() and not pool.num_pages_of.any()


@pytest.mark.parametrize(("tokens", "error", "match"), [
    (np.array([2**32 + 5], np.int64), CapacityError, r"num_tokens=4294967301: exceeds"),
    (2**32 + 5, CapacityError, r"num_tokens=4294967301: exceeds"),
    (np.array([2.7]), KVCacheError, r"num_tokens='float64': must be an integer array"),
    (np.array([-1], np.int64), KVCacheError, r"num_tokens=-1: must be >= 0"),
])
def test_batch_token_counts_are_checked_before_the_int32_cast(tokens, error, match):
    pool = PagePool(64, 16)
    pool.allocate(7, 4)
    with pytest.raises(error, match=match):
        pool.append_batch(np.array([pool.slot(7)]), tokens)
    with pytest.raises(CapacityError, match=r"num_tokens=4294967301: exceeds"):
        pool.append(7, 2**32 + 5)
    assert pool.length(7) == 4  # nothing wrapped around to a small growth
