"""Profiling end to end on a tiny grid, and the profiled step model the CPU engine uses."""

from __future__ import annotations

import dataclasses
import math
import re
import time

import pytest

from refimpl import HardwareSpec, ModelConfig
from refimpl.costmodel import ProfiledStepModel, RooflineStepModel, StepShape, step_time_model
from refimpl.costmodel.profile import MODES, run_profile
from refimpl.costmodel.profiled import build_profiled_table
from refimpl.costmodel.residuals import plot_residuals
from refimpl.costmodel.table import default_table_path
from refimpl.errors import ConfigError

TINY = ModelConfig.preset("tiny")
# A grid of a second or two: the logic is under test, not the machine.
MINI = dataclasses.replace(
    MODES["quick"], name="quick",
    batches={"prefill": (1, 2), "chunk": (16, 32), "decode": (1, 4)},
    seq_lens={"prefill": (32, 64), "chunk": (32, 64), "decode": (32, 64)},
    tile_q=(16,), tile_k=(32,), pages_per_tile=(2,), gemm_tokens=(1, 4, 16), repeats=1,
    ragged_batches=(2, 4))


@pytest.mark.numba
def test_a_tiny_profile_runs_fits_and_tabulates(monkeypatch, tmp_path):
    monkeypatch.setitem(MODES, "quick", MINI)
    result = run_profile(TINY, "quick", progress=False)
    assert result.fingerprint["cpu"] and result.version
    for name in {s.candidate for s in result.samples}:  # each on its phase's 4 shapes
        mine = [s for s in result.samples if s.candidate == name]
        assert sum(not s.ragged for s in mine) == 4
        assert sum(s.ragged for s in mine) == (4 if name.startswith("decode/") else 0)
    table = build_profiled_table(result, HardwareSpec("cpu", 512 * 1024, 1 << 34, 10e9, 20e9,
                                                      10e9, False, "test"))
    assert set(table.info["heldout_mape"]) == {"prefill", "chunk", "decode", "decode_ragged"}
    for phase, points in table.info["heldout_s"].items():  # the residuals behind each MAPE
        assert points, phase
        assert all(len(p) == 3 and min(p) > 0 for p in points)
    png = plot_residuals(table.info, tmp_path / "plots" / "residuals.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert table.lookup("decode", 2, 48)[1] > 0
    monkeypatch.setenv("REFIMPL_CACHE_DIR", str(tmp_path))
    table.save(default_table_path(TINY.name))
    model = step_time_model(TINY, dataclasses.replace(HardwareSpec.preset("h100-sxm"),
                                                      analytic=False))
    assert isinstance(model, ProfiledStepModel)


@pytest.mark.numba
def test_compiling_the_kernels_is_not_spent_from_the_time_budget(monkeypatch):
    from refimpl.costmodel import profile

    monkeypatch.setitem(MODES, "quick", MINI)
    compile_kernels = profile._compile_kernels

    def slow_compile(*args):  # a cold cache: compiling takes longer than the whole budget
        compile_kernels(*args)
        time.sleep(0.5)

    monkeypatch.setattr(profile, "_compile_kernels", slow_compile)
    result = run_profile(TINY, "quick", budget_s=0.4, progress=False)
    assert result.samples  # the first grid point starts inside the budget


def test_profiled_step_time_is_monotone_and_adds_up(table):
    model = ProfiledStepModel(table, TINY)
    decode = model.step_time(StepShape(0, 0, 8, 8 * 1000))
    prefill = model.step_time(StepShape(256, StepShape.chunk_pairs(256, 0), 0, 0))
    both = model.step_time(StepShape(256, StepShape.chunk_pairs(256, 0), 8, 8 * 1000))
    assert 0 < decode < both and 0 < prefill < both
    assert model.step_time(StepShape(0, 0, 0, 0)) == 0.0
    assert model.step_time_parts(0, 0, 16, 16000) > model.step_time_parts(0, 0, 16, 8000)
    assert model.step_time_parts(0, 0, 32, 16000) > model.step_time_parts(0, 0, 16, 16000)
    assert model.step_time_parts(512, 10**6, 0, 0) > model.step_time_parts(256, 10**6, 0, 0)


def test_a_table_of_other_heads_is_refused(table):
    with pytest.raises(ConfigError, match="attention shape"):
        ProfiledStepModel(table, ModelConfig.preset("llama-3-8b"))


def test_without_a_table_measured_hardware_falls_back_on_the_roofline(monkeypatch, tmp_path):
    monkeypatch.setenv("REFIMPL_CACHE_DIR", str(tmp_path))
    measured = dataclasses.replace(HardwareSpec.preset("h100-sxm"), analytic=False)
    assert isinstance(step_time_model(TINY, measured), RooflineStepModel)


def test_each_point_keeps_its_fastest_call_and_spread_over_the_rounds(monkeypatch):
    from refimpl.costmodel import profile
    from refimpl.costmodel.candidates import AttentionDims

    mode = dataclasses.replace(MINI, rounds=3)
    monkeypatch.setitem(MODES, "quick", mode)
    monkeypatch.setattr(profile, "_compile_kernels", lambda *args: None)
    dims = AttentionDims.of(TINY)
    points, _ = profile._plan(mode, dims)
    per_round = sum(len(profile.candidates_of(mode, phase, dims)) for phase, *_ in points)
    calls = []

    def timings(call, repeats, max_total_s, warm_up):  # (median, fastest); round 2 is quiet
        calls.append(call)
        return {1: (2.0, 1.0), 2: (3.0, 1.5)}.get((len(calls) - 1) // per_round, (5.0, 4.0))

    monkeypatch.setattr(profile, "time_calls", timings)
    result = run_profile(TINY, "quick", progress=False)
    assert len(calls) == 3 * per_round
    assert len(result.samples) == per_round
    assert all(s.min_s == 1.0 and s.time_s == 2.0 for s in result.samples)
    assert all(s.spread == pytest.approx(0.5) for s in result.samples)  # 1.5 / 1.0 - 1


def _points_timed(monkeypatch, profile):
    """Patch `profile` to time nothing and record, per call, (point, warm-up asked)."""
    monkeypatch.setattr(profile, "_compile_kernels", lambda *args: None)
    made, calls = {}, []
    inputs = profile._inputs

    def tagged(phase, dims, batch, seq_len, ragged, rng):
        run = inputs(phase, dims, batch, seq_len, ragged, rng)
        made[id(run)] = (phase, batch, seq_len, ragged)
        return run

    def timings(call, repeats, max_total_s, warm_up):
        calls.append((made[id(call.func)], warm_up))
        return 2.0, 1.0

    monkeypatch.setattr(profile, "_inputs", tagged)
    monkeypatch.setattr(profile, "time_calls", timings)
    return calls


def test_only_a_points_first_candidate_warms_up(monkeypatch):
    """Its warm-up faults the point's fresh inputs in; the others run on the same inputs."""
    from refimpl.costmodel import profile

    monkeypatch.setitem(MODES, "quick", dataclasses.replace(MINI, rounds=2, pages_per_tile=(1, 2)))
    calls = _points_timed(monkeypatch, profile)
    run_profile(TINY, "quick", progress=False)
    points, _ = profile._plan(MODES["quick"], profile.AttentionDims.of(TINY))
    assert sum(warm for _, warm in calls) == 2 * len(points)  # one per point and round
    assert all(warm != (i > 0 and calls[i - 1][0] == point)
               for i, (point, warm) in enumerate(calls))


def test_later_rounds_retime_first_the_points_above_the_fit(monkeypatch):
    """A point timed 3x slow stands above a fit of the rest, so the next round takes it first,
    and a budget cutting that round would cut the points least in need of it."""
    from refimpl.costmodel import profile
    from refimpl.costmodel.candidates import AttentionDims
    from refimpl.costmodel.sample import Sample

    dims = AttentionDims.of(TINY)
    points, _ = profile._plan(MINI, dims)
    slow = points[len(points) // 2]
    samples = []
    for phase, batch, seq_len, ragged in points:
        for cand in profile.candidates_of(MINI, phase, dims):
            costs = cand.costs(dims, batch, seq_len, ragged)
            t = (1e-6 + costs.flops / 20e9 + costs.hbm_bytes / 5e9) * (
                3.0 if (phase, batch, seq_len, ragged) == slow else 1.0)
            samples.append(Sample(phase, cand.name, batch, seq_len, t, t, ragged))
    never = ("decode", 999, 999, False)
    order = profile._retime_order([never, *points], samples, MINI, dims)
    assert order[0] == slow and order[-1] == never
    assert sorted(order) == sorted([never, *points])


def test_points_past_the_call_cap_are_listed_and_never_timed(monkeypatch):
    from refimpl.costmodel import profile

    dims = profile.AttentionDims.of(TINY)
    everything, _ = profile._plan(MINI, dims)
    estimate = {p: profile._call_estimate_s(profile.candidates_of(MINI, p[0], dims)[0], dims,
                                            *p[1:]) for p in everything}
    cap = sorted(estimate.values())[len(estimate) // 2]
    mode = dataclasses.replace(MINI, max_call_s=cap, rounds=1)
    monkeypatch.setitem(MODES, "quick", mode)
    calls = _points_timed(monkeypatch, profile)
    result = run_profile(TINY, "quick", progress=False)
    timed = {point for point, _ in calls}
    assert timed == {p for p, e in estimate.items() if e <= cap}
    assert 0 < len(timed) < len(everything)
    assert sorted(result.skipped) == sorted((profile._label(p[0], p[3]), p[1], p[2])
                                            for p in everything if p not in timed)


def test_a_point_timed_in_one_round_has_no_spread_and_the_report_says_so(monkeypatch):
    """A budget that ends in the first round leaves nothing to compare: not a spread of 0."""
    from refimpl.costmodel import profile
    from refimpl.report.units import format_spread

    monkeypatch.setitem(MODES, "quick", dataclasses.replace(MINI, rounds=1))
    monkeypatch.setattr(profile, "_compile_kernels", lambda *args: None)
    monkeypatch.setattr(profile, "time_calls", lambda call, *args, **kwargs: (2.0, 1.0))
    result = run_profile(TINY, "quick", progress=False)
    assert result.samples and all(math.isnan(s.spread) for s in result.samples)
    table = build_profiled_table(result, HardwareSpec("cpu", 512 * 1024, 1 << 34, 10e9, 20e9,
                                                      10e9, False, "test"))
    assert all(math.isnan(s) for s in table.info["heldout_spread"].values())
    assert format_spread(table.info["heldout_spread"]["decode"]) == "one round"
    assert format_spread(0.023) == "2.3 %"


@pytest.mark.parametrize(("change", "field"), [
    ({"repeats": 0}, "repeats"), ({"rounds": 1.5}, "rounds"), ({"budget_s": 0.0}, "budget_s"),
    ({"max_call_s": -1.0}, "max_call_s"), ({"max_point_s": math.nan}, "max_point_s"),
    ({"max_kv_tokens": True}, "max_kv_tokens"), ({"tile_q": ()}, "tile_q"),
    ({"pages_per_tile": (2, 0)}, "pages_per_tile"), ({"ragged_batches": [3]}, "ragged_batches"),
    ({"batches": {"prefill": (1,), "decode": (1,)}}, "batches"),
    ({"seq_lens": {"prefill": (32,), "chunk": (32,), "decode": (-4,)}}, "seq_lens['decode']"),
])
def test_a_bad_profile_mode_is_refused_by_name(change, field):
    with pytest.raises(ConfigError, match=re.escape(field)):
        dataclasses.replace(MINI, **change)


def test_no_limit_is_a_limit_too_and_a_bad_budget_is_refused_before_any_timing(monkeypatch):
    from refimpl.costmodel import profile

    assert dataclasses.replace(MINI, budget_s=math.inf, max_call_s=math.inf).budget_s == math.inf
    assert dataclasses.replace(MINI, ragged_batches=()).ragged_batches == ()

    def never(*args):
        raise AssertionError("a kernel ran")

    monkeypatch.setattr(profile, "_compile_kernels", never)
    with pytest.raises(ConfigError, match="budget_s"):
        run_profile(TINY, MINI, budget_s=-1.0, progress=False)
