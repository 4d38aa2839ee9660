"""Greedy generation of one request, on the paged model and on the no-cache reference.

These are the loops the tests and the benchmark drive the model with, one request at a time;
the serving engine builds its own steps of many requests from the same `SeqSlice`s.
"""

from __future__ import annotations

import numpy as np

from refimpl.errors import ModelInputError
from refimpl.kv.storage import KVStorage
from refimpl.model.forward import LlamaModel
from refimpl.model.plan import SeqSlice
from refimpl.model.reference import reference_logits
from refimpl.model.weights import LlamaWeights

__all__ = ["greedy_decode", "prefill", "reference_greedy"]


def prefill(model: LlamaModel, storage: KVStorage, request_id: int, tokens: np.ndarray,
            page_table: np.ndarray, *, start: int = 0, chunk_tokens: int | None = None
            ) -> np.ndarray:
    """Write `tokens` at positions [start, start + n) in chunks of `chunk_tokens` (None: one
    chunk); returns the (vocab,) logits of the last token."""
    tokens = np.asarray(tokens, dtype=np.int64)
    chunk = tokens.size if chunk_tokens is None else chunk_tokens
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ModelInputError("chunk_tokens", chunk_tokens, "must be an integer >= 1")
    logits = np.zeros((0, model.config.vocab_size), np.float32)
    for lo in range(0, tokens.size, chunk):
        part = tokens[lo : lo + chunk]
        logits = model.step(storage, [SeqSlice(request_id, part, start + lo, page_table,
                                               lo + chunk >= tokens.size)])
    return logits[0]


def greedy_decode(model: LlamaModel, storage: KVStorage, request_id: int, logits: np.ndarray,
                  length: int, num_new_tokens: int, page_table: np.ndarray) -> np.ndarray:
    """(num_new_tokens,) greedy tokens after a request of `length` tokens whose last
    logits are `logits`: each token is fed back one decode step at a time."""
    out = np.empty(num_new_tokens, dtype=np.int64)
    for i in range(num_new_tokens):
        out[i] = int(np.argmax(logits))
        if i + 1 < num_new_tokens:  # the last token's logits are not needed
            logits = model.step(storage, [SeqSlice(request_id, out[i : i + 1], length + i,
                                                   page_table, True)])[0]
    return out


def reference_greedy(weights: LlamaWeights, prompt: np.ndarray, num_new_tokens: int
                     ) -> np.ndarray:
    """(num_new_tokens,) greedy tokens from `reference_logits` recomputed over the whole
    growing sequence each time (no KV cache: the oracle, and the benchmark's baseline)."""
    sequence = list(np.asarray(prompt, dtype=np.int64))
    for _ in range(num_new_tokens):
        sequence.append(int(np.argmax(reference_logits(weights, np.array(sequence))[-1])))
    return np.array(sequence[len(prompt) :], dtype=np.int64)
