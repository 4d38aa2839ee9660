"""vLLM's free-block watermark in the token-budget baselines and prefill-first."""

from __future__ import annotations

import pytest

from refimpl.sched.policies.budget import WATERMARK

# 100 pages of 16 tokens: the watermark holds back int(0.01 * 100) = 1 page.
PAGES, PAGE = 100, 16


@pytest.mark.parametrize("policy", ["vllm", "sarathi", "prefill-first"])
def test_a_new_request_may_not_take_the_last_pages_while_another_runs(policy, make_engine,
                                                                      make_requests):
    # A's prompt fills 50 pages exactly and its first decode needs a 51st. B's 50 pages
    # would leave none free: without the watermark B starts beside A, and A's first decode
    # preempts it; with it, B waits until A has finished, and nothing is preempted.
    a, b = (0.0, 50 * PAGE, 20), (0.0, 50 * PAGE, 4)
    run = make_engine(policy, num_pages=PAGES, page_size=PAGE,
                      token_budget=4096).run(make_requests([a, b]))
    assert WATERMARK == 0.01
    assert run.requests.num_preemptions.tolist() == [0, 0]
    assert run.requests.first_token_s[1] >= run.requests.finish_s[0]


def test_with_nothing_running_a_request_may_take_the_whole_pool(make_engine, make_requests):
    # Nothing can grow when nothing runs: the watermark does not strand a request that needs
    # every page (its prompt and output fill all 100).
    run = make_engine("vllm", num_pages=PAGES, page_size=PAGE).run(
        make_requests([(0.0, PAGES * PAGE - 8, 8)]))
    assert run.requests.num_generated.tolist() == [8]
