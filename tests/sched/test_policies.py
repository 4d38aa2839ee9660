"""The baseline policies: what each puts in a step, per the engine it mirrors."""

from __future__ import annotations

import pytest

from refimpl.errors import ConfigError
from refimpl.sched import POLICIES, make_policy
from refimpl.sched.policies.vllm import VLLMPolicy


def steps_of(run):
    return list(zip(run.steps.num_decode, run.steps.num_prefill_tokens, strict=True))


def test_vllm_chunks_a_long_prompt_to_the_token_budget(make_engine, make_requests):
    run = make_engine("vllm", token_budget=512).run(make_requests([(0.0, 1300, 3)]))
    assert steps_of(run)[:3] == [(0, 512), (0, 512), (0, 276)]


def test_vllm_serves_running_requests_before_new_ones(make_engine, make_requests):
    run = make_engine("vllm", token_budget=600).run(
        make_requests([(0.0, 100, 50), (0.0001, 1000, 2)]))
    # step 2: the first request decodes (1 token) and the second gets the other 599
    assert steps_of(run)[1] == (1, 599)


def test_sarathi_puts_decodes_first_and_keeps_the_budget(make_engine, make_requests):
    run = make_engine("sarathi").run(make_requests([(0.0, 100, 30), (0.001, 3000, 2)]))
    assert max(d + p for d, p in steps_of(run)) <= 512
    assert all(d == 1 for d, _ in steps_of(run)[1:7])  # the decode never stalls


def test_prefill_first_never_mixes_prefill_and_decode(make_engine, make_requests):
    run = make_engine("prefill-first").run(
        make_requests([(0.0, 100, 30), (0.001, 3000, 2), (0.002, 50, 5)]))
    assert all(d == 0 or p == 0 for d, p in steps_of(run))
    assert (0, 3000) in steps_of(run)  # whole prompt, no chunking


def test_factory_takes_names_classes_and_instances():
    assert isinstance(make_policy("vllm"), VLLMPolicy)
    assert make_policy(VLLMPolicy, token_budget=64).token_budget == 64
    policy = VLLMPolicy()
    assert make_policy(policy) is policy
    assert set(POLICIES) == {"slo", "vllm", "sarathi", "prefill-first", "edf", "sarathi-edf"}
    assert POLICIES[0] == "slo"  # the default


def test_bad_policy_names_and_parameters_are_refused():
    with pytest.raises(ConfigError, match=r"policy='fifo'.*vllm"):
        make_policy("fifo")
    with pytest.raises(ConfigError, match="token_budget=0"):
        make_policy("sarathi", token_budget=0)
    with pytest.raises(ConfigError, match=r"refimpl\.Policy"):
        make_policy(object())
    with pytest.raises(ConfigError, match="policy_params"):
        make_policy("vllm", chunk=3)
