"""The prefix cache's buffer, read and written by name: its counters, its key -> block table
(open addressing, linear probing, backward-shift deletion: no tombstones) and the doubly
linked LRU list of idle blocks. refimpl.kv.prefix holds the state (`PrefixState`, whose
regions these index) and the cache's moves.
"""

from __future__ import annotations

from refimpl._numba import inline_kernel, kernel

__all__ = [
    "add_stat",
    "block_page",
    "delete",
    "find",
    "home",
    "insert",
    "lru_push",
    "lru_remove",
    "next_epoch",
    "num_blocks",
    "stat",
]


@inline_kernel
def stat(p, k):
    """Entry `k` of the cache's counters (STAT_FIELDS)."""
    return p.buf[p.stats_at + k]


@inline_kernel
def add_stat(p, k, value):
    """Add `value` to entry `k` of the cache's counters."""
    p.buf[p.stats_at + k] += value


@inline_kernel
def block_page(p, block, j):
    """Page `j` of cached `block`."""
    return p.buf[p.block_pages_at + block * p.pages_per_block + j]


@inline_kernel
def num_blocks(p, i):
    """How many block keys request `i` has."""
    return p.buf[p.key_start_at + i + 1] - p.buf[p.key_start_at + i]


@inline_kernel
def next_epoch(p):
    """Every block held back becomes attachable again (the marks' epoch moves on)."""
    p.buf[p.marks_at + p.max_blocks] += 1


# ---- the key -> block table ------------------------------------------------------------------
@inline_kernel
def home(p, key):
    """The table slot a key probes first."""
    return (key ^ (key >> 29)) & (p.capacity - 1)


@inline_kernel
def find(p, key):
    """The cached block of `key`, -1 if none."""
    buf = p.buf
    mask = p.capacity - 1
    h = home(p, key)
    while buf[p.table_blocks_at + h] >= 0:
        if buf[p.table_keys_at + h] == key:
            return buf[p.table_blocks_at + h]
        h = (h + 1) & mask
    return -1


@inline_kernel
def insert(p, key, block):
    """Add `key` -> `block` (the key is not in the table; the table is never full)."""
    buf = p.buf
    mask = p.capacity - 1
    h = home(p, key)
    while buf[p.table_blocks_at + h] >= 0:
        h = (h + 1) & mask
    buf[p.table_keys_at + h], buf[p.table_blocks_at + h] = key, block


@kernel
def delete(p, key):
    """Take `key` out of the table, shifting later entries of its probe run back."""
    buf = p.buf
    mask = p.capacity - 1
    hole = home(p, key)
    while buf[p.table_keys_at + hole] != key or buf[p.table_blocks_at + hole] < 0:
        hole = (hole + 1) & mask
    buf[p.table_blocks_at + hole] = -1
    j = hole
    while True:
        j = (j + 1) & mask
        if buf[p.table_blocks_at + j] < 0:
            return
        start = home(p, buf[p.table_keys_at + j])
        # the entry at j may fill the hole unless its home lies cyclically in (hole, j]
        stays = (hole < start <= j) if hole <= j else (start > hole or start <= j)
        if not stays:
            buf[p.table_keys_at + hole] = buf[p.table_keys_at + j]
            buf[p.table_blocks_at + hole] = buf[p.table_blocks_at + j]
            buf[p.table_blocks_at + j] = -1
            hole = j


# ---- the LRU list of idle blocks -------------------------------------------------------------
@inline_kernel
def lru_push(p, block):
    """`block` becomes the newest idle block."""
    buf = p.buf
    sentinel = p.max_blocks
    last = buf[p.lru_prev_at + sentinel]
    buf[p.lru_next_at + last], buf[p.lru_prev_at + block] = block, last
    buf[p.lru_next_at + block], buf[p.lru_prev_at + sentinel] = sentinel, block


@inline_kernel
def lru_remove(p, block):
    """Take `block` off the idle list."""
    buf = p.buf
    prev, nxt = buf[p.lru_prev_at + block], buf[p.lru_next_at + block]
    buf[p.lru_next_at + prev], buf[p.lru_prev_at + nxt] = nxt, prev
