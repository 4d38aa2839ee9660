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
    """The prefix cache of one run (module doc); `enabled` 0 leaves every hook idle."""

    enabled: int
    block_tokens: int
    pages_per_block: int
    keys: np.ndarray  # (blocks of all requests,) int64: chained key of each request's blocks
    key_start: np.ndarray  # (n + 1,) int64: request i's keys are keys[key_start[i]:key_start[i+1]]
    table_keys: np.ndarray  # (capacity,) int64, capacity a power of two
    table_blocks: np.ndarray  # (capacity,) int64: the block of table_keys[h], -1 empty
    block_key: np.ndarray  # (max blocks,) int64
    block_pages: np.ndarray  # (max blocks, pages_per_block) int32
    block_free: np.ndarray  # (max blocks + 1,) int64: free block ids, a stack, height last
    page_block: np.ndarray  # (num_pages,) int64: the cached block a page belongs to, -1 none
    lru_prev: np.ndarray  # (max blocks + 1,) int64: the last entry is the list's sentinel
    lru_next: np.ndarray  # (max blocks + 1,) int64: next[sentinel] is the oldest idle block
    marks: np.ndarray  # (max blocks + 1,) int64: blocks held back from attaching, where the
    # entry equals the last one (the epoch: bumped, every mark expires)
    stats: np.ndarray  # (len(STAT_FIELDS),) int64


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
    block_free = np.append(np.arange(max_blocks - 1, -1, -1), max_blocks).astype(np.int64)
    sentinel = np.full(max_blocks + 1, max_blocks, np.int64)
    return PrefixState(enabled, block_tokens, ppb, keys, starts,
                       np.zeros(capacity, np.int64), np.full(capacity, -1, np.int64),
                       np.zeros(max(max_blocks, 1), np.int64),
                       np.zeros((max(max_blocks, 1), ppb), np.int32), block_free,
                       np.full(num_pages, -1, np.int64), sentinel, sentinel.copy(),
                       np.append(np.full(max_blocks, -1), 0).astype(np.int64),
                       np.zeros(len(STAT_FIELDS), np.int64))


# ---- the key -> block table ------------------------------------------------------------------
@inline_kernel
def _home(p, key):
    """The table slot a key probes first."""
    return (key ^ (key >> 29)) & (p.table_keys.shape[0] - 1)


@inline_kernel
def find(p, key):
    """The cached block of `key`, -1 if none."""
    mask = p.table_keys.shape[0] - 1
    h = _home(p, key)
    while p.table_blocks[h] >= 0:
        if p.table_keys[h] == key:
            return p.table_blocks[h]
        h = (h + 1) & mask
    return -1


@inline_kernel
def _insert(p, key, block):
    """Add `key` -> `block` (the key is not in the table; the table is never full)."""
    mask = p.table_keys.shape[0] - 1
    h = _home(p, key)
    while p.table_blocks[h] >= 0:
        h = (h + 1) & mask
    p.table_keys[h], p.table_blocks[h] = key, block


@kernel
def _delete(p, key):
    """Take `key` out of the table, shifting later entries of its probe run back."""
    mask = p.table_keys.shape[0] - 1
    hole = _home(p, key)
    while p.table_keys[hole] != key or p.table_blocks[hole] < 0:
        hole = (hole + 1) & mask
    p.table_blocks[hole] = -1
    j = hole
    while True:
        j = (j + 1) & mask
        if p.table_blocks[j] < 0:
            return
        home = _home(p, p.table_keys[j])
        # the entry at j may fill the hole unless its home lies cyclically in (hole, j]
        stays = (hole < home <= j) if hole <= j else (home > hole or home <= j)
        if not stays:
            p.table_keys[hole], p.table_blocks[hole] = p.table_keys[j], p.table_blocks[j]
            p.table_blocks[j] = -1
            hole = j


# ---- the LRU list of idle blocks -------------------------------------------------------------
@inline_kernel
def _lru_push(p, block):
    """`block` becomes the newest idle block."""
    sentinel = p.lru_next.shape[0] - 1
    last = p.lru_prev[sentinel]
    p.lru_next[last], p.lru_prev[block] = block, last
    p.lru_next[block], p.lru_prev[sentinel] = sentinel, block


@inline_kernel
def _lru_remove(p, block):
    """Take `block` off the idle list."""
    prev, nxt = p.lru_prev[block], p.lru_next[block]
    p.lru_next[prev], p.lru_prev[nxt] = nxt, prev


# ---- the cache's moves -----------------------------------------------------------------------
@kernel
def match(p, refcount, i, max_blocks, pin_idle):
    """How many of request `i`'s first blocks (at most `max_blocks`) are cached, in a row;
    with `pin_idle` 0 only blocks some page table holds count."""
    lo, epoch = p.key_start[i], p.marks[p.marks.shape[0] - 1]
    count = min(p.key_start[i + 1] - lo, max_blocks)
    for k in range(count):
        block = find(p, p.keys[lo + k])
        if (block < 0 or p.marks[block] == epoch
                or (pin_idle == 0 and refcount[p.block_pages[block, 0]] == 0)):
            return k
    return max(count, 0)


@kernel
def hold_back(p, tables, num_pages, slot):
    """Mark the cached blocks among `slot`'s first `num_pages` pages: `match` stops at them
    until the epoch moves on."""
    epoch = p.marks[p.marks.shape[0] - 1]
    for j in range(num_pages):
        block = p.page_block[tables[slot, j]]
        if block >= 0:
            p.marks[block] = epoch


@kernel
def idle_pages_of(p, refcount, i, count):
    """Pages of request `i`'s first `count` cached blocks that no page table holds now."""
    idle, lo = 0, p.key_start[i]
    for k in range(count):
        if refcount[p.block_pages[find(p, p.keys[lo + k]), 0]] == 0:
            idle += p.pages_per_block
    return idle


@kernel
def take_blocks(p, refcount, counters, tables, shared, i, slot, count):
    """Put request `i`'s first `count` cached blocks into `slot`'s (empty) page table, each
    page held once more (idle blocks leave the LRU list)."""
    ppb, lo = p.pages_per_block, p.key_start[i]
    for k in range(count):
        block = find(p, p.keys[lo + k])
        if refcount[p.block_pages[block, 0]] == 0:
            _lru_remove(p, block)
            p.stats[IDLE_PAGES] -= ppb
        for j in range(ppb):
            page = p.block_pages[block, j]
            refcount[page] += 1
            if refcount[page] == 2:
                counters[shared] += 1
            tables[slot, k * ppb + j] = page


@kernel
def publish(p, tables, slot, i, first, last):
    """Cache request `i`'s blocks `first` to `last - 1` (full, computed, in `slot`'s pages),
    except where a block of the same key is cached already (another request computed it)."""
    ppb, lo = p.pages_per_block, p.key_start[i]
    last = min(last, p.key_start[i + 1] - lo)
    height = p.block_free.shape[0] - 1
    for k in range(first, last):
        key = p.keys[lo + k]
        if find(p, key) >= 0 or p.block_free[height] == 0:
            continue
        p.block_free[height] -= 1
        block = p.block_free[p.block_free[height]]
        p.block_key[block] = key
        for j in range(ppb):
            page = tables[slot, k * ppb + j]
            p.block_pages[block, j] = page
            p.page_block[page] = block
        _insert(p, key, block)
        p.stats[CACHED_PAGES] += ppb
        p.stats[PEAK_CACHED_PAGES] = max(p.stats[PEAK_CACHED_PAGES], p.stats[CACHED_PAGES])
        p.stats[PUBLISHED_BLOCKS] += 1


@kernel
def park(p, free_stack, counters, free, start):
    """Pages just released onto the free stack (from height `start`): cached ones leave it,
    their blocks joining the LRU list as its newest (a request's last block first, so its
    first blocks, the likeliest shared, are evicted last); the others stay, in order."""
    kept = start
    for r in range(start, counters[free]):
        page = free_stack[r]
        block = p.page_block[page]
        if block < 0:
            free_stack[kept] = page
            kept += 1
        elif p.block_pages[block, 0] == page:  # once per block: all its pages are here
            _lru_push(p, block)
            p.stats[IDLE_PAGES] += p.pages_per_block
    counters[free] = kept


@kernel
def evict(p, free_stack, counters, free, need):
    """Evict the oldest idle blocks until `need` pages are on the free stack (or none is
    left); a held block is never on the list, so never evicted."""
    sentinel = p.lru_next.shape[0] - 1
    while counters[free] < need and p.lru_next[sentinel] != sentinel:
        _drop(p, p.lru_next[sentinel], free_stack, counters, free)
        p.stats[EVICTED_BLOCKS] += 1


@inline_kernel
def _drop(p, block, free_stack, counters, free):
    """Idle `block` out of the cache, its pages onto the free stack (its first page on top)."""
    _lru_remove(p, block)
    _delete(p, p.block_key[block])
    for j in range(p.pages_per_block - 1, -1, -1):
        page = p.block_pages[block, j]
        p.page_block[page] = -1
        free_stack[counters[free]] = page
        counters[free] += 1
    height = p.block_free.shape[0] - 1
    p.block_free[p.block_free[height]] = block
    p.block_free[height] += 1
    p.stats[IDLE_PAGES] -= p.pages_per_block
    p.stats[CACHED_PAGES] -= p.pages_per_block


@kernel
def unpublish(p, tables, num_pages, slot):
    """Take the blocks among `slot`'s first `num_pages` pages out of the cache (held by that
    page table alone: its pages are about to be rewritten, e.g. quantized)."""
    ppb = p.pages_per_block
    for j in range(num_pages):
        block = p.page_block[tables[slot, j]]
        if block >= 0 and p.block_pages[block, 0] == tables[slot, j]:
            _delete(p, p.block_key[block])
            for m in range(ppb):
                p.page_block[p.block_pages[block, m]] = -1
            height = p.block_free.shape[0] - 1
            p.block_free[p.block_free[height]] = block
            p.block_free[height] += 1
            p.stats[CACHED_PAGES] -= ppb


@kernel
def flush(p, free_stack, counters, free):
    """Evict every idle block (a run's end: the pool's books then balance without a cache)."""
    sentinel = p.lru_next.shape[0] - 1
    while p.lru_next[sentinel] != sentinel:
        _drop(p, p.lru_next[sentinel], free_stack, counters, free)
