"""The KV facade's prefix-cache operations, keyed by request (refimpl.kv.prefix underneath).

What a policy asks before scheduling a waiting request (where it would start, and the idle
cached pages that start takes), and what the commit does with hits: attach a request to its
cached prefix, hold back the blocks of requests a plan frees, publish the blocks a step
completes, flush the cache at a run's end. Beside `refimpl.kv.manager`, whose page moves
(grow, free, spill, restore, quantize) keep the cache's books themselves.
"""

from __future__ import annotations

from refimpl._numba import inline_kernel, kernel
from refimpl.kv import _pool_kernels as K
from refimpl.kv import prefix as P
from refimpl.kv import prefix_index as PI
from refimpl.kv.manager import pages_needed, take_slot

__all__ = ["attach_prefix", "end_hold_back", "flush_prefix", "hold_back_prefix",
           "pages_to_start", "prefix_start", "publish_prefix"]

_RESIDENT = K.RESIDENT


@inline_kernel
def prefix_start(kv, i, num_computed, prompt_tokens):
    """(tokens request `i` would start from if scheduled now, idle cached pages that start
    takes out of the free count): its computed tokens, or, where it holds no pages and has
    computed nothing, its prompt's longest cached prefix in whole blocks, short of its last
    prompt token (its first output token needs that one computed)."""
    p = kv.prefix
    if p.enabled == 0 or num_computed > 0 or kv.slot_of[i] >= 0:
        return num_computed, 0
    count = P.match(p, kv.refcount, i, (prompt_tokens - 1) // p.block_tokens, 1)
    if count == 0:
        return 0, 0
    return count * p.block_tokens, P.idle_pages_of(p, kv.refcount, i, count)


@inline_kernel
def pages_to_start(kv, i, num_computed, start, pinned, num_tokens):
    """Pages scheduling `num_tokens` of request `i` from `start` (`prefix_start`) takes from
    the free count: fresh pages, and the idle cached ones its prefix holds again."""
    return (pages_needed(kv, i, start, num_tokens) - (start - num_computed) // kv.page_size
            + pinned)


@kernel
def attach_prefix(kv, i, prompt_tokens, max_start, pin_idle):
    """Start request `i` (holding no pages, nothing computed) on its prompt's cached prefix,
    at most `max_start` tokens of it (`prefix_start`'s rule); returns the tokens attached.
    With `pin_idle` 0 only blocks another request holds count (taking no room)."""
    p = kv.prefix
    if p.enabled == 0 or kv.slot_of[i] >= 0:
        return 0
    eligible = min((prompt_tokens - 1) // p.block_tokens, PI.num_blocks(p, i))
    PI.add_stat(p, P.LOOKUPS, 1)
    PI.add_stat(p, P.LOOKUP_BLOCKS, eligible)
    PI.add_stat(p, P.LOOKUP_TOKENS, prompt_tokens)
    count = P.match(p, kv.refcount, i, min(eligible, max_start // p.block_tokens), pin_idle)
    if count == 0:
        return 0
    slot = take_slot(kv, i)
    P.take_blocks(p, kv.refcount, kv.counters, kv.tables, K.SHARED, i, slot, count)
    kv.num_pages_of[slot] = count * p.pages_per_block
    kv.lengths[slot] = count * p.block_tokens
    PI.add_stat(p, P.HIT_BLOCKS, count)
    PI.add_stat(p, P.HIT_TOKENS, count * p.block_tokens)
    return count * p.block_tokens


@kernel
def hold_back_prefix(kv, i):
    """Until `end_hold_back`, no attach takes the cached blocks request `i` holds."""
    slot = kv.slot_of[i]
    if kv.prefix.enabled and slot >= 0 and kv.states[slot] == _RESIDENT:
        P.hold_back(kv.prefix, kv.tables, kv.num_pages_of[slot], slot)


@inline_kernel
def end_hold_back(kv):
    """Every block held back becomes attachable again (the marks' epoch moves on)."""
    PI.next_epoch(kv.prefix)


@kernel
def publish_prefix(kv, i, computed_before, computed_after, prompt_tokens):
    """Cache the prompt blocks of request `i` that its computed tokens just completed."""
    p = kv.prefix
    slot = kv.slot_of[i]
    if p.enabled == 0 or slot < 0 or kv.tokens_per_page[slot] != kv.page_size:
        return  # (a quantized request's pages hold other bytes than a full-precision block)
    first = min(computed_before, prompt_tokens) // p.block_tokens
    last = min(computed_after, prompt_tokens) // p.block_tokens
    if last > first:
        P.publish(p, kv.tables, slot, i, first, last)


@kernel
def flush_prefix(kv):
    """Evict every idle cached block (at a run's end, when no request holds any)."""
    P.flush(kv.prefix, kv.free_stack, kv.counters, K.FREE)
