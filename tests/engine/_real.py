"""A small Llama model and a fixed cost model for the real engine's tests (no profile)."""

from __future__ import annotations

from functools import cache

from refimpl.costmodel.linear_step import LinearStepModel
from refimpl.model import LlamaConfig, LlamaModel, LlamaWeights

CONFIG = LlamaConfig(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                     intermediate_size=128, vocab_size=256, max_context=512, name="test")
# A fixed cost model (no profile): 2 ms a step, 0.1 ms a sequence, 10 us a token.
STEP_MODEL = LinearStepModel([2e-3, 0.0, 0.0, 1e-4, 1e-5, 0.0, 0.0, 0.0, 0.0])


@cache
def small_model() -> LlamaModel:
    """CONFIG with seeded random weights, built once per test process."""
    return LlamaModel(LlamaWeights.random(CONFIG, seed=11))
