"""Shared by the model tests: the small model's shape and the error measure."""

from __future__ import annotations

import numpy as np

from refimpl.model import LlamaConfig

SMALL = LlamaConfig(name="test", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                    head_dim=16, intermediate_size=96, vocab_size=97, max_context=256)
REL_TOL = 1e-4  # float32 paged forward vs the float32 NumPy reference, relative to max |logit|


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """max |actual - expected| / max |expected|."""
    return float(np.abs(actual - expected).max() / np.abs(expected).max())
