"""The KV facade the serving loop uses: slots come back on every free, so a few serve many."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.mark.parametrize("policy", ["vllm", "sarathi"])
def test_more_requests_than_slots_are_served_on_the_slots_freed(make_engine, make_requests,
                                                                policy):
    # The pool has 64 slots and at most two requests hold KV at once, so the 65th request
    # onwards takes a slot a finished one freed: a free that kept its slot would leave it none.
    specs = [(0.01 * i, 30 + i, 5 + i % 7) for i in range(100)]
    engine = make_engine(policy, max_num_seqs=2)
    run = engine.run(make_requests(specs))
    assert set(run.requests.reason) == {"completed"}
    assert np.array_equal(run.requests.num_generated, run.requests.max_new_tokens)
    assert engine.pool.states.shape[0] < 100
    assert not engine.pool.states.any() and engine.pool.num_free_pages == engine.pool.num_pages


def test_the_views_page_query_on_arrays_is_its_query_on_each_row():
    from refimpl.kv import PagePool
    from refimpl.kv.manager import grow, new_kv_state
    from refimpl.kv.view import KVView

    kv = new_kv_state(PagePool(64, 16, max_context=4096, cpu_tier_pages=0), 6, 6)
    computed = np.array([0, 20, 0, 33, 0, 16], np.int64)
    rows = np.array([1, 3, 5], np.int64)
    grow(kv, rows, computed[rows], 3)  # rows 1, 3, 5 hold 2, 3 and 1 pages
    view = KVView(kv, computed)
    rows = np.array([0, 1, 2, 3, 4, 5, 3], np.int64)
    tokens = np.array([1, 12, 40, 15, 0, 1, 16], np.int64)
    expected = [view.pages_needed(int(i), int(t)) for i, t in zip(rows, tokens, strict=True)]
    assert expected == [1, 0, 3, 0, 0, 1, 1]
    assert view.pages_needed(rows, tokens).tolist() == expected  # the compiled path
    assert view.pages_needed(rows.astype(np.int32), tokens).tolist() == expected  # NumPy's
    with pytest.raises(IndexError, match="row 6"):
        view.pages_needed(np.array([0, 6], np.int64), np.array([1, 1], np.int64))

    # how many fit, in order: the NumPy form a policy would write, in one compiled call
    for free_tokens in (rows, rows[::-1]):
        for tokens_k in (tokens, np.maximum(tokens, 1), tokens * 3):
            need = view.pages_needed(free_tokens, tokens_k)
            fits = (tokens_k > 0) & (np.cumsum(need) <= view.num_free_pages)
            expected = len(fits) if fits.all() else int(fits.argmin())
            assert view.num_fitting(free_tokens, tokens_k) == expected
            assert view.num_fitting(free_tokens.tolist(), tokens_k.astype(np.int32)) == expected
    assert view.num_fitting(np.zeros(0, np.int64), np.zeros(0, np.int64)) == 0
    with pytest.raises(IndexError, match="row 6"):
        view.num_fitting(np.array([0, 6], np.int64), np.array([0, 1], np.int64))
