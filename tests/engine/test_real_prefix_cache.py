"""Prefix caching on the real engine: hits on real K/V give the tokens a recompute gives.

The cache is keyed on the prompts' tokens (one hash per page of them); a hit attaches pages
another request's forward pass wrote, so the model reads K/V it did not compute itself.
Greedy outputs with the cache must equal those without it (and the plain forward's), for
prompts given by the caller, under preemption, and for trace prompts made from block hashes.
"""

from __future__ import annotations

import numpy as np
import pytest

from refimpl import Request
from refimpl.engine.prompts import prompt_tokens, token_block_hashes
from refimpl.engine.run import run
from refimpl.errors import ConfigError
from refimpl.model import reference_logits
from refimpl.workloads import head, load_trace, new_workload, scale_lengths

from ._real import CONFIG, STEP_MODEL, small_model

pytestmark = pytest.mark.numba

SEED = 5
SYSTEM = np.random.default_rng(1).integers(0, CONFIG.vocab_size, 72)  # 4.5 pages of 16


def _shared_prompts():
    """Eight requests: a shared 72-token system prompt, then each its own question; request
    5 asks request 1's question again, request 7 is request 6's prompt cut short."""
    rng = np.random.default_rng(2)
    questions = [rng.integers(0, CONFIG.vocab_size, n) for n in (9, 30, 3, 17, 40, 0, 25, 0)]
    questions[5] = questions[1]
    prompts = {i: np.concatenate([SYSTEM, q]) for i, q in enumerate(questions)}
    prompts[7] = prompts[6][:80]
    return prompts


def _requests(prompts, gap_s, new=6):
    return [Request(i, i * gap_s, len(p), new) for i, p in prompts.items()]


def _greedy(prompt, new):
    tokens = [int(t) for t in prompt]
    for _ in range(new):
        tokens.append(int(np.argmax(reference_logits(small_model().weights,
                                                     np.array(tokens))[-1])))
    return tokens[len(prompt):]


def _serve(requests, policy, **options):
    options.setdefault("step_model", STEP_MODEL)
    options.setdefault("admission", False)
    return run(requests, policy, model=small_model(), seed=SEED, **options)


@pytest.mark.parametrize(("policy", "params"), [
    ("vllm", {"token_budget": 16}),  # prompts in chunks of 16 beside the decodes
    ("slo", {}),
])
def test_hits_on_real_kv_give_the_tokens_a_recompute_gives(policy, params):
    prompts = _shared_prompts()
    # half a second apart (the clock jumps idle gaps): each prompt's pages are cached by then
    cached = _serve(_requests(prompts, 0.5), policy, prompts=prompts, policy_params=params)
    plain = _serve(_requests(prompts, 0.5), policy, prompts=prompts, policy_params=params,
                   prefix_cache=False)
    assert cached.settings["prefix_cache"] and not plain.settings["prefix_cache"]
    assert cached.outputs == plain.outputs == {i: _greedy(p, 6) for i, p in prompts.items()}
    hits = cached.steps.prefix_cache["hit_blocks"]
    # each later request finds the system prompt's 4 full pages; 5 finds all 6 of 1's (its
    # 102nd token, on the 7th page, is computed), 7 only 4 (its 80th token ends the 5th page)
    assert hits == 4 * 7 + 2
    saved = (plain.steps.num_prefill_tokens.sum() - cached.steps.num_prefill_tokens.sum())
    assert saved == 16 * hits


def test_preemption_under_a_shared_prefix_keeps_the_tokens():
    # 10 pages of 16 tokens for eight prompts of 80-112 tokens arriving together, 40 tokens
    # out each: sharing the system prompt's pages, more run at once, then are preempted
    # as their decodes grow, and recompute, partly from pages the cache kept
    prompts = _shared_prompts()
    page_bytes = 16 * CONFIG.to_model_config().kv_bytes_per_token()
    options = dict(prompts=prompts, kv_memory_bytes=10 * page_bytes)
    cached = _serve(_requests(prompts, 0.0, new=40), "vllm", **options)
    plain = _serve(_requests(prompts, 0.0, new=40), "vllm", prefix_cache=False, **options)
    assert cached.requests.num_preemptions.sum() > 0
    assert cached.steps.prefix_cache["hit_blocks"] > 0
    assert cached.outputs == plain.outputs


def test_trace_prompts_share_tokens_where_their_hashes_agree():
    # a Mooncake-shaped trace scaled 1/32: 512-token hash blocks become 16 tokens, one page
    trace = new_workload("mc", np.array([0.0, 0.5, 1.0, 1.5]), np.array([2048, 1500, 2048, 700]),
                         np.array([96, 64, 128, 32]),
                         hash_ids=((1, 2, 3, 4), (1, 2, 5), (1, 2, 3, 6), (7, 8)))
    scaled = scale_lengths(trace, 1 / 32)
    assert scaled.hash_block_tokens == 16
    cached = _serve(scaled, "sarathi", policy_params={"token_budget": 32})
    plain = _serve(scaled, "sarathi", policy_params={"token_budget": 32}, prefix_cache=False)
    assert cached.outputs == plain.outputs
    assert cached.steps.prefix_cache["hit_blocks"] == 2 + 3  # request 1: (1, 2); 2: (1, 2, 3)


def test_the_mooncake_trace_hits_on_the_real_engine(traces_dir):
    path = traces_dir / "mooncake_synthetic_trace.jsonl"
    if not path.is_file():
        pytest.skip(f"{path.name} not found")
    # its first reuse is at request 49 (of 57 blocks); at 1/32 a block is one page, and the
    # long prompts are clipped to the model's 512 tokens (with their hashes)
    workload = scale_lengths(head(load_trace(path), 60), 1 / 32)
    cached = _serve(workload, "vllm")
    plain = _serve(workload, "vllm", prefix_cache=False)
    assert cached.outputs == plain.outputs
    assert cached.steps.prefix_cache["hit_blocks"] >= 20


def test_prompts_made_from_hashes_agree_exactly_where_the_hashes_do():
    requests = [Request(0, 0.0, 56, 1, block_hashes=(3, 4, 5)),  # its tail seeded
                Request(1, 0.0, 40, 1, block_hashes=(3, 4, 9)),
                Request(2, 0.0, 20, 1)]
    tokens = prompt_tokens(requests, {2: list(range(20))}, SEED, 256, hash_block_tokens=16)
    assert [len(t) for t in tokens.values()] == [56, 40, 20]
    assert np.array_equal(tokens[0][:32], tokens[1][:32])
    assert not np.array_equal(tokens[0][32:40], tokens[1][32:40])
    assert tokens[2].tolist() == list(range(20))
    hashes = [token_block_hashes(tokens[i], 16) for i in (0, 1)]
    assert len(hashes[0]) == 3 and len(hashes[1]) == 2  # full pages only: never a partial
    assert hashes[0][:2] == hashes[1][:2]


def test_bad_prompts_are_named():
    requests = _requests({0: SYSTEM[:10]}, 0.0)
    with pytest.raises(ConfigError, match=r"prompts\[0\]"):
        prompt_tokens(requests, {0: [1, 2]}, SEED, 256, 16)
    with pytest.raises(ConfigError, match=r"prompts\[0\]"):
        prompt_tokens(requests, {0: [300] * 10}, SEED, 256, 16)
    with pytest.raises(ConfigError, match="prompts"):
        prompt_tokens(requests, {4: [1] * 10}, SEED, 256, 16)
    with pytest.raises(ConfigError, match="prefix_cache"):
        _serve(requests, "vllm", prefix_cache="on")
    with pytest.raises(ConfigError, match="prompt_tokens"):  # before any prompt is made
        prompt_tokens([Request(0, 0.0, -3, 1)], None, SEED, 256, 16)
    with pytest.raises(ConfigError, match="block_hashes"):
        prompt_tokens([Request(0, 0.0, 30, 1, block_hashes=("a",))], None, SEED, 256, 16)
