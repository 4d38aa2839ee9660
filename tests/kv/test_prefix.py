"""The prefix cache over the KV facade: hits, sharing by refcount, LRU eviction, balanced books."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refimpl.errors import ConfigError
from refimpl.kv import PagePool
from refimpl.kv import _pool_kernels as K
from refimpl.kv import manager as kvm
from refimpl.kv import prefix as P
from refimpl.kv import prefix_facade as kvp

PAGE_SIZE, BLOCK_TOKENS = 4, 8  # two pages per block


ANY = 10**6  # no cap on the tokens an attach may start from


def kv_state(block_hashes, num_pages=16, cpu_pages=8):
    """A facade over a fresh pool, with a prefix cache for requests with these hashes."""
    pool = PagePool(num_pages, PAGE_SIZE, max_context=200, cpu_tier_pages=cpu_pages)
    prefix = P.new_prefix_state(block_hashes, num_pages, PAGE_SIZE, BLOCK_TOKENS)
    return kvm.new_kv_state(pool, len(block_hashes), len(block_hashes), prefix)


def check_books(kv):
    """Every page is exactly one of: free (on the stack), idle in the cache, or held; the
    refcounts are the holders; the cache's table, blocks and LRU list agree."""
    p = kv.prefix
    num_pages = kv.num_pages
    holders = np.zeros(num_pages, np.int64)
    for slot in np.flatnonzero(kv.states == K.RESIDENT):
        np.add.at(holders, kv.tables[slot, :kv.num_pages_of[slot]], 1)
    assert np.array_equal(holders, kv.refcount)
    assert kv.counters[K.SHARED] == np.count_nonzero(kv.refcount > 1)
    free = kv.free_stack[:kv.counters[K.FREE]]
    assert len(set(free.tolist())) == len(free)
    assert not kv.refcount[free].any() and (p.view("page_block")[free] == -1).all()
    idle, sentinel = [], p.view("lru_next").shape[0] - 1
    block = p.view("lru_next")[sentinel]
    while block != sentinel:
        idle.append(int(block))
        assert p.view("lru_next")[p.view("lru_prev")[block]] == block
        block = p.view("lru_next")[block]
    idle_pages = [int(page) for b in idle for page in p.view("block_pages")[b]]
    assert p.view("stats")[P.IDLE_PAGES] == len(idle_pages)
    assert not kv.refcount[idle_pages].any()
    held = np.flatnonzero(kv.refcount > 0)
    assert len(free) + len(idle_pages) + len(held) == num_pages
    assert not set(idle_pages) & set(free.tolist())
    cached = p.view("table_blocks")[p.view("table_blocks") >= 0]
    assert p.view("stats")[P.CACHED_PAGES] == len(cached) * p.pages_per_block
    for b in cached.tolist():
        assert P.find(p, p.view("block_key")[b]) == b
        pages = p.view("block_pages")[b]
        assert (p.view("page_block")[pages] == b).all()
        assert len(set(kv.refcount[pages].tolist())) == 1  # a block is held whole
    assert set(idle) <= set(cached.tolist())
    assert kvm.num_free_pages(kv) == len(free) + len(idle_pages)


def serve(kv, i, prompt_tokens, computed=0):
    """Compute the rest of request `i`'s prompt in one step, caching its full blocks."""
    tokens = prompt_tokens - computed
    kvm.grow(kv, np.array([i], np.int64), np.array([tokens], np.int64), 1)
    kvp.publish_prefix(kv, i, computed, prompt_tokens, prompt_tokens)


def test_chained_keys_name_the_whole_prefix():
    assert P.chain_keys([1, 2])[0] == P.chain_keys([1, 5])[0]
    assert P.chain_keys([1, 2])[1] != P.chain_keys([3, 2])[1]  # same id, other parent
    assert P.chain_keys((7, 8, 9)) == P.chain_keys([7, 8, 9])


def test_a_block_size_that_is_not_whole_pages_is_refused():
    with pytest.raises(ConfigError, match="block_tokens"):
        P.new_prefix_state([(1,)], 16, PAGE_SIZE, block_tokens=6)


def test_a_second_request_shares_the_first_ones_cached_blocks():
    kv = kv_state([(1, 2, 3), (1, 2, 9)])
    assert kvp.attach_prefix(kv, 0, 20, ANY, 1) == 0  # nothing cached yet
    serve(kv, 0, 20)  # blocks 1 and 1-2 full (16 tokens), 4 tokens of a third block
    assert kv.prefix.view("stats")[P.CACHED_PAGES] == 4
    assert kvp.attach_prefix(kv, 1, 20, ANY, 1) == 16  # both full blocks in common
    slot0, slot1 = kv.slot_of[0], kv.slot_of[1]
    assert np.array_equal(kv.tables[slot1, :4], kv.tables[slot0, :4])
    assert (kv.refcount[kv.tables[slot0, :4]] == 2).all()
    check_books(kv)
    kvm.free(kv, 0)
    kvm.free(kv, 1)
    check_books(kv)
    assert kv.prefix.view("stats")[P.IDLE_PAGES] == 4  # kept, unreferenced, for the next request
    kvp.flush_prefix(kv)
    assert kv.counters[K.FREE] == kv.num_pages


def test_a_policy_sees_the_start_and_the_pages_a_hit_takes():
    kv = kv_state([(1, 2, 3), (1, 2, 3), (9,)])
    serve(kv, 0, 24)
    assert kvp.prefix_start(kv, 1, 0, 24) == (16, 0)  # held by request 0: pins nothing
    kvm.free(kv, 0)
    assert kvp.prefix_start(kv, 1, 0, 24) == (16, 4)  # idle now: 4 pages leave the free count
    assert kvp.prefix_start(kv, 1, 5, 24) == (5, 0)  # computed already: no look-up
    assert kvp.prefix_start(kv, 2, 0, 24) == (0, 0)
    free = kvm.num_free_pages(kv)
    # 8 more tokens after the 16 cached: 2 fresh pages, and the 4 idle ones it holds again
    assert kvp.pages_to_start(kv, 1, 0, 16, 4, 8) == 6
    assert kvp.attach_prefix(kv, 1, 24, 8, 1) == 8  # capped: one block leaves room for 16
    kvm.free(kv, 1)
    assert kvp.attach_prefix(kv, 1, 24, ANY, 1) == 16
    kvm.grow(kv, np.array([1], np.int64), np.array([8], np.int64), 1)
    assert kvm.num_free_pages(kv) == free - 6
    kvm.free(kv, 1)
    kvp.flush_prefix(kv)
    check_books(kv)


def test_the_last_prompt_token_is_always_computed():
    kv = kv_state([(1, 2), (1, 2)])
    serve(kv, 0, 16)
    assert kvp.attach_prefix(kv, 1, 16, ANY, 1) == 8  # the second block would leave nothing to do
    kvm.free(kv, 0)
    kvm.free(kv, 1)
    kvp.flush_prefix(kv)
    check_books(kv)


def test_eviction_takes_the_oldest_idle_block_and_never_a_held_one():
    kv = kv_state([(1,), (2,), (3,), (1, 7), (4,)], num_pages=12)
    for i in range(3):
        serve(kv, i, 9)  # one full block (2 pages) and a page of the next
    kvp.attach_prefix(kv, 3, 17, ANY, 1)  # holds block 1 (request 0's)
    for i in range(3):
        kvm.free(kv, i)
    check_books(kv)
    held = kv.tables[kv.slot_of[3], :2].copy()
    # 12 pages: 2 held, 4 idle (the blocks of requests 1 and 2), 6 free; 10 pages evict both
    kvm.grow(kv, np.array([4], np.int64), np.array([40], np.int64), 1)
    check_books(kv)
    assert kv.prefix.view("stats")[P.EVICTED_BLOCKS] == 2
    assert np.array_equal(kv.tables[kv.slot_of[3], :2], held)
    assert not set(kv.tables[kv.slot_of[4], :10].tolist()) & set(held.tolist())
    assert P.find(kv.prefix, P.chain_keys([1])[0]) >= 0  # the held block stays cached
    kvm.free(kv, 3)
    kvm.free(kv, 4)
    kvp.flush_prefix(kv)
    check_books(kv)
    assert kv.counters[K.FREE] == kv.num_pages


def test_a_quantized_request_takes_its_blocks_out_of_the_cache():
    kv = kv_state([(1, 2), (1, 2)])
    serve(kv, 0, 17)
    assert kvm.quantize(kv, 0, 2) >= 0
    check_books(kv)
    assert kvp.attach_prefix(kv, 1, 17, ANY, 1) == 0  # its pages hold other bytes now
    kvm.free(kv, 0)
    check_books(kv)


def test_pinning_only_held_blocks_takes_no_room():
    kv = kv_state([(1, 2), (1, 2), (1, 2)])
    serve(kv, 0, 17)
    serve(kv, 1, 17)  # a duplicate of request 0's blocks: not cached twice
    assert kv.prefix.view("stats")[P.PUBLISHED_BLOCKS] == 2
    kvm.free(kv, 0)
    assert kvp.attach_prefix(kv, 2, 17, ANY, 0) == 0  # request 0's blocks are idle
    check_books(kv)
    kvm.free(kv, 1)
    kvp.flush_prefix(kv)
    check_books(kv)


PREFIXES = ((1, 2, 3), (1, 2, 4), (5, 6, 7))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shapes=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 24)), min_size=6, max_size=6),
    ops=st.lists(st.tuples(st.sampled_from(["arrive", "run", "free", "spill", "restore",
                                            "quantize"]), st.integers(0, 5), st.booleans()),
                 max_size=60),
)
def test_books_balance_under_a_random_mix_of_shared_and_private_requests(shapes, ops):
    # request r: a shared prefix (PREFIXES[k]) or, for k == 3, hashes of its own
    hashes = [PREFIXES[k] if k < 3 else (100 + r, 200 + r, 300 + r)
              for r, (k, _) in enumerate(shapes)]
    prompts = [tokens for _, tokens in shapes]
    kv = kv_state(hashes, num_pages=14)
    computed = [-1] * len(hashes)  # -1: not arrived (or freed)
    for op, r, flag in ops:
        slot = kv.slot_of[r]
        resident = slot >= 0 and kv.states[slot] == K.RESIDENT
        if op == "arrive" and computed[r] < 0:
            computed[r] = kvp.attach_prefix(kv, r, prompts[r], ANY, int(flag))
        elif op == "run" and 0 <= computed[r] < prompts[r] and (slot < 0 or resident):
            tokens = prompts[r] - computed[r] if flag else 1
            if kvm.pages_needed(kv, r, computed[r], tokens) <= kvm.num_free_pages(kv):
                kvm.grow(kv, np.array([r], np.int64), np.array([tokens], np.int64), 1)
                kvp.publish_prefix(kv, r, computed[r], computed[r] + tokens, prompts[r])
                computed[r] += tokens
        elif op == "free" and computed[r] >= 0:
            kvm.free(kv, r)
            computed[r] = -1
        elif op == "spill" and resident:
            kvm.spill(kv, r)
        elif op == "restore" and slot >= 0 and kv.states[slot] == K.SPILLED_SLOT:
            kvm.restore(kv, r)
        elif op == "quantize" and resident:
            kvm.quantize(kv, r, 2)
        check_books(kv)
    for r in range(len(hashes)):
        kvm.free(kv, r)
    kvp.flush_prefix(kv)
    check_books(kv)
    assert kv.counters[K.FREE] == kv.num_pages and kv.counters[K.SPILLED] == 0


def test_blocks_held_back_for_a_step_are_not_attached():
    # the commit holds back the blocks of requests its plan quantizes, spills or frees
    kv = kv_state([(1, 2), (1, 2)])
    serve(kv, 0, 17)
    kvp.hold_back_prefix(kv, 0)
    assert kvp.prefix_start(kv, 1, 0, 17) == (0, 0)
    assert kvp.attach_prefix(kv, 1, 17, ANY, 1) == 0
    kvp.end_hold_back(kv)
    assert kvp.prefix_start(kv, 1, 0, 17) == (16, 0)
    assert kvp.attach_prefix(kv, 1, 17, ANY, 1) == 16
    kvm.free(kv, 0)
    kvm.free(kv, 1)
    kvp.flush_prefix(kv)
    check_books(kv)
