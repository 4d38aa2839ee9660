"""Kernel candidates and their analytic costs, against the FlashAttention I/O analysis."""

from __future__ import annotations

import pytest

from refimpl.costmodel.candidates import (
    PHASES,
    AttentionDims,
    Candidate,
    enumerate_candidates,
    ragged_context_lens,
)
from refimpl.errors import ConfigError
from refimpl.kernels import PagedTiles, PrefillTiles, decode_costs
from refimpl.kernels.costs import PAGE_ID_BYTES

DIMS = AttentionDims(num_q_heads=32, num_kv_heads=8, head_dim=128)
FLOAT_BYTES = 4


def prefill_hbm(tile: int, seq_len: int) -> int:
    cand = Candidate("prefill", PrefillTiles(tile, tile, 1))
    return cand.costs(DIMS, 1, seq_len).hbm_bytes


def test_tiled_prefill_traffic_falls_as_the_tile_grows():
    traffic = [prefill_hbm(tile, 8192) for tile in (16, 32, 64, 128, 256)]
    assert traffic == sorted(traffic, reverse=True)
    assert traffic[0] > 4 * traffic[-1]  # K/V are re-read once per query tile: ~T / tile


def test_tiled_prefill_traffic_is_far_below_untiled_attention_at_long_t():
    seq_len, budget = 16384, 512 * 1024
    # Untiled attention writes the T x T scores and reads them back for softmax and for P @ V
    # (the FlashAttention paper's standard implementation): 3 T^2 floats per query head.
    untiled = DIMS.num_q_heads * 3 * seq_len * seq_len * FLOAT_BYTES
    # FlashAttention: Theta(T^2 d^2 / M) for SRAM of M floats. The kernels' scratch also holds
    # scores and two accumulators, so the best tile within 512 KiB saves ~6x at d = 128.
    best = min(c.costs(DIMS, 1, seq_len).hbm_bytes for c in enumerate_candidates("prefill", DIMS)
               if c.sram_bytes(DIMS) <= budget)
    assert best < untiled / 5


def test_every_phase_enumerates_distinct_named_candidates():
    for phase in PHASES:
        cands = enumerate_candidates(phase, DIMS)
        assert len({c.name for c in cands}) == len(cands) > 1
        for c in cands:
            costs = c.costs(DIMS, 2, 256)
            assert costs.sram_bytes == c.sram_bytes(DIMS) > 0
            assert costs.flops > 0 and costs.hbm_bytes > 0
            assert costs.arithmetic_intensity == costs.flops / costs.hbm_bytes


def test_more_stacked_heads_read_kv_fewer_times():
    one, four = (Candidate("decode", c.tiles) for c in enumerate_candidates("decode", DIMS)
                 if c.tiles.pages_per_tile == 4 and c.tiles.heads_per_tile in (1, 4)
                 and c.tiles.kv_heads_per_tile == 1)
    assert four.costs(DIMS, 8, 4096).hbm_bytes < one.costs(DIMS, 8, 4096).hbm_bytes


def test_decode_offers_all_kv_heads_at_once_which_reads_each_page_id_once():
    by_name = {c.name: c for c in enumerate_candidates("decode", DIMS)}
    kv = DIMS.num_kv_heads
    whole, apart = by_name[f"decode/p4-h{DIMS.group_size}-kv{kv}"], by_name["decode/p4-h4"]
    assert whole.params()["kv_heads_per_tile"] == kv
    pages = 8 * 4096 // DIMS.page_size
    saved = apart.costs(DIMS, 8, 4096).hbm_bytes - whole.costs(DIMS, 8, 4096).hbm_bytes
    assert saved == pages * (kv - 1) * PAGE_ID_BYTES  # ids once per page, not per KV head
    assert whole.tile_steps(DIMS, 8, 4096)[0] == 8  # one work item per sequence


def test_tile_steps_count_causal_key_tiles():
    cand = Candidate("prefill", PrefillTiles(64, 64, 1))
    items, steps = cand.tile_steps(DIMS, 1, 256)
    assert items == 32 * 4  # heads x query tiles
    assert steps == 32 * (1 + 2 + 3 + 4)  # query tile i attends to i + 1 key tiles


def test_unknown_phase_is_refused():
    with pytest.raises(ConfigError, match="phase"):
        enumerate_candidates("verify", DIMS)


def test_ragged_decode_lengths_are_reproducible_spread_around_t_and_mostly_inside_a_page():
    lens = ragged_context_lens(64, 512)
    assert lens == ragged_context_lens(64, 512)  # seeded by the shape
    assert min(lens) >= 128 and max(lens) <= 7 * 512 // 4
    assert abs(sum(lens) / len(lens) - 512) < 512 * 0.15
    assert len(set(lens)) > 32
    assert sum(n % DIMS.page_size != 0 for n in lens) > 48


def test_a_ragged_decode_shape_costs_its_sequences_page_by_page():
    cand = Candidate("decode", PagedTiles(1, 2, 4))
    lens = ragged_context_lens(16, 100)
    heads = {"num_q_heads": 32, "num_kv_heads": 8, "head_dim": 128}
    assert cand.costs(DIMS, 16, 100, ragged=True) == decode_costs(
        cand.tiles, context_lens=lens, page_size=DIMS.page_size, **heads)
    tile_keys = 2 * DIMS.page_size
    per_seq = [-(-n // tile_keys) for n in lens]  # key tiles of each sequence
    items = 32 // 4
    assert cand.tile_steps(DIMS, 16, 100, ragged=True) == (items * 16, items * sum(per_seq))
    slots = sum(-(-n // DIMS.page_size) * DIMS.page_size for n in lens)
    assert cand.footprint_bytes(DIMS, 16, 100, ragged=True) == (
        2 * 16 * 32 + 2 * slots * 8) * 128 * FLOAT_BYTES
    # Equal lengths are the one-length case of the same rule.
    assert cand.tile_steps(DIMS, 16, 100) == (items * 16, items * 16 * -(-100 // tile_keys))


def test_only_decode_shapes_are_ragged():
    with pytest.raises(ConfigError, match="ragged"):
        Candidate("prefill", PrefillTiles(64, 64, 1)).costs(DIMS, 1, 256, ragged=True)
