"""Prefix caching: KV pages of full prompt blocks, kept by a chained block hash, LRU-evicted.

vLLM's automatic prefix caching (a hash per full block chained with its parent's, unreferenced
cached blocks kept in LRU order and evicted only when pages run out) and the effect of
SGLang's radix cache (Zheng et al. 2024), over refimpl's page pool. A *block* is
`block_tokens` prompt tokens (512, the Mooncake traces' hash block) spanning
`pages_per_block` pages; its key chains every block hash before it, so equal keys mean equal
prefixes. State (`PrefixState`, all arrays, held by `KVState.prefix`):
- an open-addressing table key -> block (linear probing, backward-shift deletion: no
  tombstones), each block its key and page ids, and `page_block[page]` (-1: not cached);
- a doubly linked LRU list of *idle* blocks, those no page table holds (refcount 0). Idle
  pages are off the free stack but count as free (`stats[IDLE_PAGES]`): policies see them as
  room, and taking pages evicts the least recently used idle block first.
Only the KV facade (refimpl.kv.manager) calls these; the pool kernels do not know the cache.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from refimpl._numba import inline_kernel, kernel
from refimpl.errors import ConfigError
from refimpl.kv.prefix_index import block_page, delete, find, insert, lru_push, lru_remove

__all__ = ["BLOCK_TOKENS", "STAT_FIELDS", "PrefixState", "chain_keys", "new_prefix_state",
           "no_prefix_state"]

BLOCK_TOKENS = 512  # tokens per hash block: the Mooncake traces' `hash_ids` granularity
# Entries of `PrefixState.stats`, in the names the run's records use.
STAT_FIELDS = ("idle_pages", "cached_pages", "peak_cached_pages", "lookups", "lookup_blocks",
               "hit_blocks", "lookup_tokens", "hit_tokens", "published_blocks",
               "evicted_blocks")
(IDLE_PAGES, CACHED_PAGES, PEAK_CACHED_PAGES, LOOKUPS, LOOKUP_BLOCKS, HIT_BLOCKS,
 LOOKUP_TOKENS, HIT_TOKENS, PUBLISHED_BLOCKS, EVICTED_BLOCKS) = range(len(STAT_FIELDS))
_MASK64 = (1 << 64) - 1


class PrefixState(NamedTuple):
    """The prefix cache of one run (module doc); `enabled` 0 leaves every hook idle.

    Every array of the cache is a region of one int64 buffer, `buf`, at the offsets below:
    a compiled call pays two reference-count updates per array it is handed (the facade's
    `KVState` carries this state into every KV call), so the cache costs one array, not a
    dozen (docs/performance.md). `view(name)` gives a region from Python.
    """

    enabled: int
    block_tokens: int
    pages_per_block: int
    capacity: int  # slots of the key -> block table, a power of two
    max_blocks: int  # block ids 0 .. max_blocks - 1; index max_blocks is each list's end
    keys_at: int  # (blocks of all requests,): chained key of each request's blocks
    key_start_at: int  # (n + 1,): request i's keys are keys[key_start[i]:key_start[i+1]]
    table_keys_at: int  # (capacity,)
    table_blocks_at: int  # (capacity,): the block of table_keys[h], -1 empty
    block_key_at: int  # (max_blocks + 1,)
    block_free_at: int  # (max_blocks + 1,): free block ids, a stack, its height last
    lru_prev_at: int  # (max_blocks + 1,): the last entry is the list's sentinel
    lru_next_at: int  # (max_blocks + 1,): next[sentinel] is the oldest idle block
    marks_at: int  # (max_blocks + 1,): blocks held back from attaching, where the entry
    # equals the last one (the epoch: bumped, every mark expires)
    block_pages_at: int  # (max_blocks, pages_per_block): each block's page ids
    page_block_at: int  # (num_pages,): the cached block a page belongs to, -1 none
    stats_at: int  # (len(STAT_FIELDS),)
    buf: np.ndarray  # int64: the regions

    def view(self, name: str) -> np.ndarray:
        """Region `name` (a field name less `_at`) of the buffer, as an array view."""
        names = [f for f in self._fields if f.endswith("_at")]  # in the buffer's order
        k = names.index(name + "_at")
        at = getattr(self, names[k])
        end = getattr(self, names[k + 1]) if k + 1 < len(names) else len(self.buf)
        region = self.buf[at:end]
        return region.reshape(-1, self.pages_per_block) if name == "block_pages" else region


def _mix(value: int) -> int:
    """splitmix64's finalizer: a 64-bit integer scrambled (deterministic, no salt)."""
    value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9 & _MASK64
    value = (value ^ (value >> 27)) * 0x94D049BB133111EB & _MASK64
    return value ^ (value >> 31)


def chain_keys(hashes: tuple[int, ...] | list[int]) -> list[int]:
    """Chained int64 keys of one request's block hashes: key k depends on hashes[0..k].

    Mooncake's ids already name a prefix, but chaining makes equal keys mean equal prefixes
    for any hash source (e.g. per-block token hashes), as vLLM's parent-hash chaining does.
    """
    keys, parent = [], 0x9E3779B97F4A7C15
    for value in hashes:
        parent = _mix(parent ^ _mix(int(value) & _MASK64))
        keys.append(parent - (1 << 64) if parent >= 1 << 63 else parent)
    return keys


def no_prefix_state() -> PrefixState:
    """A disabled cache (tiny arrays): the state a run without prefix caching carries."""
    return _state(0, BLOCK_TOKENS, 1, np.zeros(0, np.int64), np.zeros(1, np.int64), 1, 1)


def new_prefix_state(block_hashes: list[tuple[int, ...]], num_pages: int, page_size: int,
                     block_tokens: int = BLOCK_TOKENS) -> PrefixState:
    """An empty cache over a pool of `num_pages` pages of `page_size` tokens, for requests
    with these block hashes (one tuple per request, in the run's row order)."""
    if block_tokens < page_size or block_tokens % page_size:
        raise ConfigError("block_tokens", block_tokens,
                          f"must be a multiple of the page size ({page_size} tokens)")
    starts = np.zeros(len(block_hashes) + 1, np.int64)
    starts[1:] = np.cumsum([len(h) for h in block_hashes])
    keys = np.array([k for h in block_hashes for k in chain_keys(h)], np.int64)
    ppb = block_tokens // page_size
    return _state(1, block_tokens, ppb, keys, starts, num_pages // ppb, num_pages)


def _state(enabled, block_tokens, ppb, keys, starts, max_blocks, num_pages):
    capacity = 8
    while capacity < 2 * (max_blocks + 1):
        capacity *= 2
    mb1 = max_blocks + 1
    block_free = np.append(np.arange(max_blocks - 1, -1, -1), max_blocks)
    sentinel = np.full(mb1, max_blocks)
    regions = (keys, starts, np.zeros(capacity), np.full(capacity, -1), np.zeros(mb1),
               block_free, sentinel, sentinel, np.append(np.full(max_blocks, -1), 0),
               np.zeros(max(max_blocks, 1) * ppb), np.full(num_pages, -1),
               np.zeros(len(STAT_FIELDS)))
    offsets = np.cumsum([0] + [len(r) for r in regions])
    # each region int64 before joining: a float region would round the 64-bit keys
    buf = np.concatenate([np.asarray(r).astype(np.int64) for r in regions])
    return PrefixState(enabled, block_tokens, ppb, capacity, max_blocks,
                       *(int(o) for o in offsets[:-1]), buf)


# ---- the cache's moves -----------------------------------------------------------------------
@kernel
def match(p, refcount, i, max_blocks, pin_idle):
    """How many of request `i`'s first blocks (at most `max_blocks`) are cached, in a row;
    with `pin_idle` 0 only blocks some page table holds count."""
    buf = p.buf
    lo, epoch = buf[p.key_start_at + i], buf[p.marks_at + p.max_blocks]
    count = min(buf[p.key_start_at + i + 1] - lo, max_blocks)
    for k in range(count):
        block = find(p, buf[p.keys_at + lo + k])
        if (block < 0 or buf[p.marks_at + block] == epoch
                or (pin_idle == 0 and refcount[block_page(p, block, 0)] == 0)):
            return k
    return max(count, 0)


@kernel
def hold_back(p, tables, num_pages, slot):
    """Mark the cached blocks among `slot`'s first `num_pages` pages: `match` stops at them
    until the epoch moves on."""
    buf = p.buf
    epoch = buf[p.marks_at + p.max_blocks]
    for j in range(num_pages):
        block = buf[p.page_block_at + tables[slot, j]]
        if block >= 0:
            buf[p.marks_at + block] = epoch


@kernel
def idle_pages_of(p, refcount, i, count):
    """Pages of request `i`'s first `count` cached blocks that no page table holds now."""
    buf = p.buf
    idle, lo = 0, buf[p.key_start_at + i]
    for k in range(count):
        if refcount[block_page(p, find(p, buf[p.keys_at + lo + k]), 0)] == 0:
            idle += p.pages_per_block
    return idle


@kernel
def take_blocks(p, refcount, counters, tables, shared, i, slot, count):
    """Put request `i`'s first `count` cached blocks into `slot`'s (empty) page table, each
    page held once more (idle blocks leave the LRU list)."""
    buf = p.buf
    ppb, lo = p.pages_per_block, buf[p.key_start_at + i]
    for k in range(count):
        block = find(p, buf[p.keys_at + lo + k])
        if refcount[buf[p.block_pages_at + block * p.pages_per_block + 0]] == 0:
            lru_remove(p, block)
            buf[p.stats_at + IDLE_PAGES] -= ppb
        for j in range(ppb):
            page = buf[p.block_pages_at + block * p.pages_per_block + j]
            refcount[page] += 1
            if refcount[page] == 2:
                counters[shared] += 1
            tables[slot, k * ppb + j] = page


@kernel
def publish(p, tables, slot, i, first, last):
    """Cache request `i`'s blocks `first` to `last - 1` (full, computed, in `slot`'s pages),
    except where a block of the same key is cached already (another request computed it)."""
    buf = p.buf
    ppb, lo = p.pages_per_block, buf[p.key_start_at + i]
    last = min(last, buf[p.key_start_at + i + 1] - lo)
    height = p.max_blocks
    for k in range(first, last):
        key = buf[p.keys_at + lo + k]
        if find(p, key) >= 0 or buf[p.block_free_at + height] == 0:
            continue
        buf[p.block_free_at + height] -= 1
        block = buf[p.block_free_at + buf[p.block_free_at + height]]
        buf[p.block_key_at + block] = key
        for j in range(ppb):
            page = tables[slot, k * ppb + j]
            buf[p.block_pages_at + block * p.pages_per_block + j] = page
            buf[p.page_block_at + page] = block
        insert(p, key, block)
        buf[p.stats_at + CACHED_PAGES] += ppb
        buf[p.stats_at + PEAK_CACHED_PAGES] = max(buf[p.stats_at + PEAK_CACHED_PAGES],
                                                  buf[p.stats_at + CACHED_PAGES])
        buf[p.stats_at + PUBLISHED_BLOCKS] += 1


@kernel
def park(p, free_stack, counters, free, start):
    """Pages just released onto the free stack (from height `start`): cached ones leave it,
    their blocks joining the LRU list as its newest (a request's last block first, so its
    first blocks, the likeliest shared, are evicted last); the others stay, in order."""
    buf = p.buf
    kept = start
    for r in range(start, counters[free]):
        page = free_stack[r]
        block = buf[p.page_block_at + page]
        if block < 0:
            free_stack[kept] = page
            kept += 1
        elif block_page(p, block, 0) == page:  # once per block: all its pages are here
            lru_push(p, block)
            buf[p.stats_at + IDLE_PAGES] += p.pages_per_block
    counters[free] = kept


@kernel
def evict(p, free_stack, counters, free, need):
    """Evict the oldest idle blocks until `need` pages are on the free stack (or none is
    left); a held block is never on the list, so never evicted."""
    buf = p.buf
    sentinel = p.max_blocks
    while counters[free] < need and buf[p.lru_next_at + sentinel] != sentinel:
        _drop(p, buf[p.lru_next_at + sentinel], free_stack, counters, free)
        buf[p.stats_at + EVICTED_BLOCKS] += 1


@inline_kernel
def _drop(p, block, free_stack, counters, free):
    """Idle `block` out of the cache, its pages onto the free stack (its first page on top)."""
    buf = p.buf
    lru_remove(p, block)
    delete(p, buf[p.block_key_at + block])
    for j in range(p.pages_per_block - 1, -1, -1):
        page = buf[p.block_pages_at + block * p.pages_per_block + j]
        buf[p.page_block_at + page] = -1
        free_stack[counters[free]] = page
        counters[free] += 1
    height = p.max_blocks
    buf[p.block_free_at + buf[p.block_free_at + height]] = block
    buf[p.block_free_at + height] += 1
    buf[p.stats_at + IDLE_PAGES] -= p.pages_per_block
    buf[p.stats_at + CACHED_PAGES] -= p.pages_per_block


@kernel
def unpublish(p, tables, num_pages, slot):
    """Take the blocks among `slot`'s first `num_pages` pages out of the cache (held by that
    page table alone: its pages are about to be rewritten, e.g. quantized)."""
    buf = p.buf
    ppb = p.pages_per_block
    for j in range(num_pages):
        block = buf[p.page_block_at + tables[slot, j]]
        if block >= 0 and buf[p.block_pages_at + block * p.pages_per_block + 0] == tables[slot, j]:
            delete(p, buf[p.block_key_at + block])
            for m in range(ppb):
                buf[p.page_block_at + buf[p.block_pages_at + block * p.pages_per_block + m]] = -1
            height = p.max_blocks
            buf[p.block_free_at + buf[p.block_free_at + height]] = block
            buf[p.block_free_at + height] += 1
            buf[p.stats_at + CACHED_PAGES] -= ppb


@kernel
def flush(p, free_stack, counters, free):
    """Evict every idle block (a run's end: the pool's books then balance without a cache)."""
    buf = p.buf
    sentinel = p.max_blocks
    while buf[p.lru_next_at + sentinel] != sentinel:
        _drop(p, buf[p.lru_next_at + sentinel], free_stack, counters, free)
