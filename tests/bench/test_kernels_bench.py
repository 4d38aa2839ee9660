"""`refimpl bench kernels`: the prefill tiles it reports are the fastest within the budget, and
PyTorch's SDPA is timed apart from our kernels."""

from __future__ import annotations

import sys
from functools import partial

import numpy as np
import pytest

from refimpl.bench import kernels
from refimpl.errors import CapacityError


def _fake_seconds(call, repeats):
    """Bigger tiles are faster here, so the largest within the budget must win."""
    keywords = call.keywords
    return 1.0 / (keywords["tile_q"] * keywords["tile_k"] * keywords["heads_per_tile"])


def test_the_fastest_prefill_tile_within_the_budget_is_picked(monkeypatch):
    monkeypatch.setattr(kernels, "best_seconds", _fake_seconds)
    sizes = {t: t.sram_bytes(kernels.PREFILL["head_dim"]) for t in kernels.PREFILL_CHOICES}
    budget = sorted(sizes.values())[len(sizes) // 2]  # about half of the choices fit
    picked = kernels.pick_prefill_tiles(1, np.random.default_rng(0), budget)
    fitting = [t for t, size in sizes.items() if size <= budget]
    assert sizes[picked] <= budget < max(sizes.values())
    assert picked == min(fitting, key=lambda t: _fake_seconds(
        kernels._prefill_call(t, None, None, None, False), 1))


def test_a_budget_no_tile_fits_is_refused(monkeypatch):
    monkeypatch.setattr(kernels, "best_seconds", _fake_seconds)
    with pytest.raises(CapacityError, match="sram_budget_bytes"):
        kernels.pick_prefill_tiles(1, np.random.default_rng(0), 1024)


def test_each_length_takes_the_pick_of_the_longest_tuning_length_at_or_below_it():
    short, long = kernels.PREFILL_CHOICES[:2]
    picks = {1024: short, 4096: long}
    assert [kernels.tiles_for(n, picks) for n in (512, 1024, 2048, 4096, 16384)] == [
        short, short, short, long, long]


def test_sdpa_is_timed_in_a_process_of_its_own():
    """Its threads and Numba's would contend in one process; the parent never imports torch."""
    pytest.importorskip("torch")
    had_torch = "torch" in sys.modules
    seconds = kernels._torch_sdpa(64, 1, 1)
    assert seconds > 0
    assert ("torch" in sys.modules) == had_torch


def test_without_torch_sdpa_is_reported_missing(monkeypatch):
    monkeypatch.setattr(kernels, "_torch_installed", lambda: False)
    assert kernels._torch_sdpa(64, 1, 1) is None


def test_long_prompts_alternate_ours_and_torch_and_keep_each_sides_fastest_round(monkeypatch):
    calls = []
    ours_times = iter([3.0, 2.0])  # the second round of ours is the faster
    torch_times = iter([1.0, 4.0])  # the first round of torch is

    def ours(call, repeats):
        calls.append("ours")
        return next(ours_times)

    def torch(seq_len, num_threads, repeats):
        calls.append("torch")
        return next(torch_times)

    monkeypatch.setattr(kernels, "best_seconds", ours)
    monkeypatch.setattr(kernels, "_torch_sdpa", torch)
    monkeypatch.setattr(kernels, "_torch_installed", lambda: True)
    monkeypatch.setattr(kernels, "_oracle_seconds", lambda q, k, v: 1.0)
    monkeypatch.setattr(kernels, "_gemm_gflops", lambda repeats: 1.0)
    monkeypatch.setattr(kernels, "LONG_SEQ_LEN", 16)
    tiles = kernels.PREFILL_CHOICES[0]
    (row,) = kernels.bench_prefill([16], [1], 3, np.random.default_rng(0), {16: tiles})
    assert calls == ["ours", "torch"] * kernels.LONG_ROUNDS
    assert row["ours_s"] == 2.0
    assert row["torch_gflops"] == pytest.approx(kernels._causal_flops(16) / 1.0 / 1e9)


@pytest.mark.numba
@pytest.mark.parametrize("workers", [1, 3])
def test_the_paged_read_reads_exactly_the_pages_of_the_tables(workers):
    rng = np.random.default_rng(0)
    k_words = rng.integers(-2**40, 2**40, (12, 8))
    v_words = rng.integers(-2**40, 2**40, (12, 8))
    tables = np.array([[7, 2, 9], [0, 11, 4]], dtype=np.int32)  # pages 1, 3, 5, 6, 8, 10 unread
    expected = int(k_words[tables.ravel()].sum() + v_words[tables.ravel()].sum())
    read = kernels._read_pages.parallel if workers > 1 else kernels._read_pages.serial
    assert read(k_words, v_words, tables, workers) == expected


def test_alternated_rounds_run_every_timer_in_turn_and_keep_each_ones_fewest_seconds():
    order = []
    times = {"a": iter([2.0, 1.0, 3.0]), "b": iter([0.5, 0.7, 0.6])}

    def timer(name):
        order.append(name)
        return next(times[name])

    best = kernels.alternated_best({name: partial(timer, name) for name in times}, 3)
    assert order == ["a", "b"] * 3
    assert best == {"a": 1.0, "b": 0.5}
