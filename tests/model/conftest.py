"""Fixtures of the model tests: a small random Llama and a prompt (fast on two cores)."""

from __future__ import annotations

import numpy as np
import pytest

from refimpl.model import LlamaModel, LlamaWeights

from ._helpers import SMALL


@pytest.fixture(scope="session")
def weights() -> LlamaWeights:
    """Random weights of a 2-layer GQA model (4 query heads over 2 KV heads)."""
    return LlamaWeights.random(SMALL, seed=7)


@pytest.fixture(scope="session")
def model(weights) -> LlamaModel:
    """The paged model over `weights`."""
    return LlamaModel(weights)


@pytest.fixture
def prompt() -> np.ndarray:
    """A fixed 37-token prompt: not a multiple of any page size the tests use."""
    return np.random.default_rng(11).integers(0, SMALL.vocab_size, 37)
