"""The real engine's prompt tokens, and the block hashes its prefix cache is keyed on.

A request served on the real engine needs token ids. They are the caller's (`run(prompts=)`),
or made up: a trace's prefix-block hashes (Mooncake's `hash_ids`) become blocks of tokens
seeded by the hash, so requests that share hashes share their token prefixes, as the trace's
requests did; any other prompt is uniform ids seeded per request. The prefix cache is then keyed
on the tokens themselves, as vLLM keys its automatic prefix caching: one hash per full block
of tokens (the cache chains them, refimpl.kv.prefix.chain_keys), so two prompts share a cached
block exactly when their tokens agree up to its end.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np

from refimpl.errors import ConfigError
from refimpl.sched.request import Request, block_hashes_of
from refimpl.sched.table import arrival_order, new_requests

__all__ = ["prompt_tokens", "seeded_prompt", "token_block_hashes"]


def seeded_prompt(seed: int, request_id: int, length: int, vocab_size: int) -> np.ndarray:
    """The prompt tokens of a request that came without any: uniform ids, seeded per request."""
    return np.random.default_rng([seed, request_id]).integers(0, vocab_size, length)


def hashed_prompt(seed: int, request: Request, hash_block_tokens: int, vocab_size: int
                  ) -> np.ndarray:
    """Tokens for a request with trace block hashes: block k is `hash_block_tokens` ids seeded
    by hash k (equal hashes, equal tokens), cut at the prompt's end; what the hashes do not
    cover is seeded per request."""
    length = request.prompt_tokens
    blocks = [np.random.default_rng([seed, 1, h & (2**63 - 1)]).integers(
        0, vocab_size, hash_block_tokens) for h in block_hashes_of(request)]
    tokens = np.concatenate(blocks)[:length] if blocks else np.zeros(0, np.int64)
    if len(tokens) < length:
        tail = seeded_prompt(seed, request.request_id, length, vocab_size)[len(tokens):]
        tokens = np.concatenate([tokens, tail])
    return tokens.astype(np.int64)


def prompt_tokens(requests: Sequence[Request], prompts: Mapping[int, Sequence[int]] | None,
                  seed: int, vocab_size: int, hash_block_tokens: int
                  ) -> dict[int, np.ndarray]:
    """Every request's prompt: given in `prompts` (by request id), else made from its trace
    block hashes of `hash_block_tokens` tokens, else seeded."""
    new_requests(arrival_order(requests))  # (each request checked before a prompt is made)
    prompts = dict(prompts or {})
    unknown = sorted(set(prompts) - {r.request_id for r in requests})
    if unknown:
        raise ConfigError("prompts", unknown[:5], "name no request of the workload")
    tokens = {}
    for r in requests:
        given = prompts.get(r.request_id)
        if given is not None:
            ids = np.asarray(given)
            if ids.ndim != 1 or len(ids) != r.prompt_tokens or not np.issubdtype(
                    ids.dtype, np.integer):
                raise ConfigError(f"prompts[{r.request_id}]", f"{len(ids)} of {ids.dtype}",
                                  f"must be the request's {r.prompt_tokens} integer token ids")
            if len(ids) and (ids.min() < 0 or ids.max() >= vocab_size):
                raise ConfigError(f"prompts[{r.request_id}]", int(ids.max()),
                                  f"token ids must lie in [0, {vocab_size})")
            tokens[r.request_id] = ids.astype(np.int64)
        elif r.block_hashes:
            tokens[r.request_id] = hashed_prompt(seed, r, hash_block_tokens, vocab_size)
        else:
            tokens[r.request_id] = seeded_prompt(seed, r.request_id, r.prompt_tokens,
                                                 vocab_size)
    return tokens


def token_block_hashes(tokens: np.ndarray, block_tokens: int) -> tuple[int, ...]:
    """A 63-bit hash of each full block of `block_tokens` tokens (the partial last block has
    none: it is never cached)."""
    data = np.ascontiguousarray(tokens, dtype="<i8")
    return tuple(
        int.from_bytes(hashlib.blake2b(data[k:k + block_tokens].tobytes(),
                                       digest_size=8).digest(), "little") & (2**63 - 1)
        for k in range(0, len(data) - block_tokens + 1, block_tokens))
