"""`refimpl bench kernels`: the prefill tile it reports is the fastest one within the budget."""

from __future__ import annotations

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
