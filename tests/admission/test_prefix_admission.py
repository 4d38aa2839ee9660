"""The gate with a prefix cache: a request's prompt work is what its cached prefix leaves."""

from __future__ import annotations

import pytest

import refimpl
from refimpl.config import SLO
from refimpl.sched import Request

BLOCK = 512
MODEL = "llama-3.1-8b"  # a 128k context
PROMPT = 40 * BLOCK + 100  # 20,580 tokens, of which 20,480 a shared prefix


def _requests():
    """A cold first request with a loose TTFT, then hot ones (its prefix, their own tail)
    with a TTFT their whole prompt misses on one H100 and their uncached tail meets."""
    cold = Request(0, 0.0, PROMPT, 8, slo=SLO(ttft_s=60.0, tpot_s=0.1),
                   block_hashes=tuple(range(41)))
    hot = [Request(i, 20.0 * i, PROMPT, 8, slo=SLO(ttft_s=0.5, tpot_s=0.1),
                   block_hashes=(*range(40), 100 + i)) for i in range(1, 6)]
    return [cold, *hot]


def test_the_gate_admits_a_hit_that_the_whole_prompt_would_miss():
    plain = refimpl.simulate(_requests(), "slo", model=MODEL, admission=True,
                             prefix_cache=False)
    # without the cache the hot requests' 20k-token prompts cannot make 0.5 s: refused
    assert list(plain.requests.reason[1:]) == ["ttft_capacity"] * 5
    cached = refimpl.simulate(_requests(), "slo", model=MODEL, admission=True)
    assert list(cached.requests.status) == ["finished"] * 6
    ttft = cached.requests.first_token_s - cached.requests.arrival_s
    assert (ttft[1:] <= 0.5).all()
    assert cached.summary()["prefix_hit_blocks"] == 5 * 40


@pytest.mark.parametrize("policy", ["vllm", "slo"])
def test_a_prefix_not_cached_yet_is_counted_as_work(policy):
    # the hot requests arrive while the cold one still computes their prefix: nothing is
    # cached when the gate decides, so their whole prompt counts and they are refused
    requests = [Request(r.request_id, 0.05 * r.request_id, r.prompt_tokens, 8, slo=r.slo,
                        block_hashes=r.block_hashes) for r in _requests()]
    run = refimpl.simulate(requests, policy, model=MODEL, admission=True)
    assert list(run.requests.reason[1:]) == ["ttft_capacity"] * 5
