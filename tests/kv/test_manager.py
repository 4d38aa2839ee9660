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
