"""The saved cost table: exact on grid points, monotone between, round trip, foreign tables."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refimpl.costmodel.fastlookup import lookup_arrays, lookup_time_s
from refimpl.costmodel.table import ForeignTableWarning, load_table
from refimpl.errors import CapacityError, ConfigError

from ._helpers import GRID, synthetic_table


def test_lookup_is_exact_on_grid_points(table):
    for phase, t in table.phases.items():
        for i, b in enumerate(t.batches):
            for j, s in enumerate(t.seq_lens):
                name, time_s = table.lookup(phase, b, s)
                assert time_s == t.best_time_s[i][j]  # bit for bit
                assert name == t.candidates[t.best[i][j]].name
                assert time_s == min(ts[i][j] for ts, c in zip(t.time_s, t.candidates,
                                                               strict=True)
                                     if c.sram_bytes <= table.sram_budget_bytes)


_TABLE = synthetic_table()  # hypothesis tests cannot take function-scoped fixtures


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(GRID)), st.floats(0, 1), st.floats(0, 1), st.floats(0, 1),
       st.booleans())
def test_lookup_is_monotone_where_the_grid_is(phase, x, y, dx, along_b):
    table = _TABLE
    t = table.phases[phase]
    lo_b, hi_b, lo_t, hi_t = t.batches[0], t.batches[-1], t.seq_lens[0], t.seq_lens[-1]
    b = lo_b * (hi_b / lo_b) ** x
    s = lo_t * (hi_t / lo_t) ** y
    b2, s2 = (b + (hi_b - b) * dx, s) if along_b else (b, s + (hi_t - s) * dx)
    # The synthetic best times grow with B and T at every grid point, so must the look-up.
    assert table.predict_s(phase, b2, s2) >= table.predict_s(phase, b, s) * (1 - 1e-12)



def test_grid_of_the_synthetic_table_is_monotone(table):
    for t in table.phases.values():
        best = np.array(t.best_time_s)
        assert (np.diff(best, axis=0) > 0).all() and (np.diff(best, axis=1) > 0).all()


def test_between_grid_points_a_power_law_is_interpolated_exactly(table):
    t = table.phases["decode"]
    b0, b1 = t.batches[1], t.batches[2]
    mid = math.sqrt(b0 * b1)  # geometric middle
    expected = math.sqrt(t.best_time_s[1][0] * t.best_time_s[2][0])
    assert t.predict_s(mid, t.seq_lens[0]) == pytest.approx(expected, rel=1e-12)


def test_outside_the_grid_raises_or_clamps(table):
    t = table.phases["prefill"]
    with pytest.raises(CapacityError, match=r"T=.*outside the prefill table"):
        table.lookup("prefill", 1, t.seq_lens[-1] * 2)
    with pytest.raises(CapacityError, match="B="):
        table.lookup("prefill", 0.5, t.seq_lens[0])
    edge = table.predict_s("prefill", t.batches[-1], t.seq_lens[-1])
    assert table.predict_s("prefill", 1000, 10**6, clamp=True) == edge


def test_save_and_load_give_an_identical_table(table, tmp_path):
    path = tmp_path / "table.json"
    table.save(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = load_table(path)
    assert loaded == table
    assert loaded.lookup("decode", 7, 300) == table.lookup("decode", 7, 300)


def _tamper(path, **changes):
    data = json.loads(path.read_text())
    for key, value in changes.items():
        if key == "cpu":
            data["fingerprint"]["cpu"] = value
        else:
            data[key] = value
    path.write_text(json.dumps(data))


def test_a_table_from_another_machine_warns_or_is_refused(table, tmp_path):
    path = tmp_path / "foreign.json"
    table.save(path)
    _tamper(path, cpu="Some Other CPU 9000")
    with pytest.warns(ForeignTableWarning, match="cpu: table 'Some Other CPU 9000'"):
        loaded = load_table(path)
    assert loaded.phases == table.phases  # used, with the warning
    with pytest.raises(ConfigError, match="measured elsewhere"):
        load_table(path, refuse_foreign=True)


def test_a_table_from_another_version_is_detected(table, tmp_path):
    path = tmp_path / "old.json"
    table.save(path)
    _tamper(path, version="0.0.1")
    with pytest.warns(ForeignTableWarning, match="refimpl: table 0.0.1"):
        load_table(path)
    _tamper(path, format_version=99)
    with pytest.raises(ConfigError, match="format_version=99"):
        load_table(path)


def test_a_smaller_budget_changes_the_picks_within_it(table):
    t = table.phases["prefill"]
    sizes = sorted({c.sram_bytes for c in t.candidates})
    small = table.with_budget(sizes[0])
    for row in small.phases["prefill"].best:
        assert all(t.candidates[k].sram_bytes == sizes[0] for k in row)
    with pytest.raises(CapacityError, match=f"smallest needs {sizes[0]} B"):
        table.with_budget(sizes[0] - 1)


@pytest.mark.numba
def test_numba_lookup_agrees_with_python(table):
    t = table.phases["decode"]
    arrays = lookup_arrays(t)
    for b, s in [(1, 128), (3, 700), (64, 2048), (10.5, 1000.0)]:
        assert lookup_time_s(*arrays, b, s) == pytest.approx(t.predict_s(b, s), rel=1e-12)
    assert math.isnan(lookup_time_s(*arrays, 1000, 128))
