"""The calibrated step model: its fit recovers known efficiencies, it runs compiled, it is the
default on the GPU presets, and it lands near Vidur's measured steps."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from refimpl import HardwareSpec, ModelConfig
from refimpl.config.efficiency import Efficiency, GemmFit, LinkFit, OpFit
from refimpl.costmodel import CalibratedStepModel, RooflineStepModel, step_time_model
from refimpl.costmodel.choose import compiled_coefficients
from refimpl.costmodel.gpu_fit import (
    MEMORY_OPS,
    _without_unseen_kink,
    fit_efficiency,
    linear_layers_s,
    score,
)
from refimpl.costmodel.gpu_ops import block_threads, gemm_terms, layer_gemms, memory_terms, op_s
from refimpl.costmodel.gpu_profiles import GPU_PRESETS, read_profiles
from refimpl.costmodel.step import (
    COUNT,
    DECODE_ONLY,
    FIXED,
    LAUNCH,
    PER_SPILL_ROW,
    SHARPNESS,
    SPILL_ROWS,
    step_s,
)
from refimpl.errors import ConfigError

from ._vidur import VIDUR, write_compute_csv, write_network_csv

H100 = HardwareSpec.preset("h100-sxm")
A100 = HardwareSpec.preset("a100-80gb")
LLAMA2 = ModelConfig.preset("llama-2-7b")
KNOWN = Efficiency(
    gemm=GemmFit(5e-6, 0.70, 0.85, 4.0, 3.0, 64),
    # the per-token kernels share a one-row floor of 0.1 ns a byte and 1 ns a row
    norm=OpFit(3e-6, 0.60, 2.0, 8e6, 0.30, 1e-10, 1e-9),
    rope=OpFit(2e-6, 0.50, 1.5, math.inf, 1.0, 1e-10, 1e-9),
    act=OpFit(2e-6, 0.55, 1.2, math.inf, 1.0, 1e-10, 1e-9),
    add=OpFit(2e-6, 0.90, 2.0), emb=OpFit(3e-6, 0.20, 1.5),
    all_reduce=(LinkFit(2, 20e-6, 250e9), LinkFit(4, 30e-6, 200e9)))


def _shape(name: str, **fields) -> ModelConfig:
    return dataclasses.replace(ModelConfig.preset("llama-2-7b"), name=name, num_layers=1,
                               **fields)


def test_the_fit_recovers_known_efficiencies_from_a_synthetic_profile(tmp_path):
    write_compute_csv(tmp_path, "h100", "small", _shape("small"), KNOWN, H100)
    write_compute_csv(tmp_path, "h100", "wide", _shape("wide", num_kv_heads=8,
                      intermediate_size=14336), KNOWN, H100)
    write_network_csv(tmp_path, "h100", KNOWN.all_reduce)
    compute, network = read_profiles(tmp_path)
    fitted = fit_efficiency(compute, network, H100, "synthetic")
    g = fitted.gemm
    assert g.tile_rows == 64
    assert g.compute_efficiency == pytest.approx(0.70, rel=0.02)
    assert g.weight_read_efficiency == pytest.approx(0.85, rel=0.02)
    assert g.launch_s == pytest.approx(5e-6, rel=0.1)
    # the norm's L2 kink: its bytes past 8 MB at half its in-cache pace
    assert fitted.norm.cache_bytes == pytest.approx(8e6, rel=0.05)
    assert fitted.norm.efficiency == pytest.approx(0.60, rel=0.05)
    assert fitted.norm.spill_efficiency == pytest.approx(0.30, rel=0.05)
    for op in ("norm", "rope", "act"):  # the row terms they share, recovered
        assert getattr(fitted, op).row_latency_s_per_byte == pytest.approx(1e-10, rel=0.1)
        assert getattr(fitted, op).row_s == pytest.approx(1e-9, rel=0.1)
    assert fitted.add.row_s == fitted.emb.row_latency_s_per_byte == 0.0
    for op in ("rope", "act", "add", "emb"):  # no kink: every byte at one pace
        want, got = getattr(KNOWN, op), getattr(fitted, op)
        in_rows = got.efficiency if got.cache_bytes > 2 * 4096 * 4096 else got.spill_efficiency
        assert in_rows == pytest.approx(want.efficiency, rel=0.05), op
    for want, got in zip(KNOWN.all_reduce, fitted.all_reduce, strict=True):
        assert got.bytes_per_s == pytest.approx(want.bytes_per_s, rel=1e-6)
        assert got.launch_s == pytest.approx(want.launch_s, rel=1e-6)
    held = score(compute, network, H100, "org/wide", "synthetic")
    assert max(held.held_rows.values()) < 1.0 and max(held.held_shape_mape.values()) < 1.0


def test_a_held_out_shape_that_is_not_profiled_is_refused_by_name(tmp_path):
    write_compute_csv(tmp_path, "h100", "small", _shape("small"), KNOWN, H100)
    write_compute_csv(tmp_path, "h100", "wide", _shape("wide", intermediate_size=14336),
                      KNOWN, H100)
    compute, network = read_profiles(tmp_path)
    with pytest.raises(ConfigError, match=r"held_shape='llama-2-70b'.*org/small, org/wide"):
        score(compute, network, H100, "llama-2-70b", "")
    with pytest.raises(ConfigError, match="two or more"):  # nothing left to fit on
        score(compute[:1], network, H100, "org/small", "")


def test_the_compiled_formula_is_the_sum_of_the_operators():
    # step_s writes gpu_ops.op_s out (Numba cannot call a plain function): hold them equal.
    model = CalibratedStepModel(LLAMA2, H100)
    g = H100.efficiency.gemm
    for tokens in (1, 37, 64, 1000):
        expected = 0.0
        for gemm in layer_gemms(LLAMA2, 1):
            terms = gemm_terms(gemm, g, H100.peak_flops, H100.memory_bandwidth_bytes_s, 2)
            expected += LLAMA2.num_layers * (g.launch_s + op_s(*terms, g.sharpness, tokens))
        ops = model.coefficients.ops
        linear = sum(ops[k, COUNT] * (ops[k, LAUNCH] + op_s(*ops[k, FIXED:SHARPNESS],
                                                            ops[k, SHARPNESS], tokens))
                     for k in range(4))
        assert linear == pytest.approx(expected, rel=1e-12)


def test_the_compiled_formula_charges_every_operator_row_its_bytes_past_the_cache():
    # step_s's linear part, with and without the operator rows counted, is the rows' op_s sum
    c = CalibratedStepModel(LLAMA2, H100).coefficients
    uncounted = c._replace(ops=c.ops * (np.arange(c.ops.shape[1]) != COUNT))  # 0 runs
    spilled = False
    for tokens in (1, 37, 1000, 4096):
        ops = c.ops
        expected = sum(ops[k, COUNT] * (ops[k, LAUNCH] + op_s(*ops[k, FIXED:SHARPNESS],
                                                              ops[k, SHARPNESS], tokens))
                       for k in range(ops.shape[0])
                       if ops[k, DECODE_ONLY] == 0.0)  # no decodes: no LM head
        linear = step_s(c, tokens, 0, 0, 0) - step_s(uncounted, tokens, 0, 0, 0)
        assert linear == pytest.approx(expected, rel=1e-12)
        spilled |= bool(np.any((ops[:, PER_SPILL_ROW] > 0) & (tokens > ops[:, SPILL_ROWS])))
    assert spilled  # a 4,096-token prefill's norms run past the cache


def test_the_gpu_presets_default_to_the_calibrated_model_and_keep_the_roofline_by_name():
    assert isinstance(step_time_model(LLAMA2, H100), CalibratedStepModel)
    assert isinstance(step_time_model(LLAMA2, A100, kind="roofline"), RooflineStepModel)
    calibrated = step_time_model(LLAMA2, H100)
    assert compiled_coefficients(calibrated) is calibrated.coefficients  # runs compiled
    with pytest.raises(ConfigError, match="step_model='fast'"):
        step_time_model(LLAMA2, H100, kind="fast")
    with pytest.raises(ConfigError, match="no fitted efficiencies"):
        CalibratedStepModel(LLAMA2, dataclasses.replace(H100, efficiency=None))


@pytest.mark.parametrize("field", ["row_latency_s_per_byte", "row_s"])
def test_a_bad_row_term_is_named(field):
    with pytest.raises(ConfigError, match=field):
        OpFit(2e-6, 0.5, 1.5, **{field: -1e-9})


def test_a_per_token_kernels_floor_grows_with_its_rows_width():
    fit = KNOWN.rope  # 0.1 ns a byte of the row
    narrow, wide = (op_s(*memory_terms(fit, b, H100.memory_bandwidth_bytes_s), fit.sharpness,
                         np.array([1.0]))[0] for b in (16_384, 65_536))
    assert wide - narrow == pytest.approx((65_536 - 16_384) * 1e-10, rel=0.05)


def test_the_calibrated_clock_lands_near_vidurs_steps_where_the_roofline_did_not():
    # Vidur's predicted steps, Llama-2-7B on one A100 (issue 21): a 1,000-token prefill
    # 70.8 ms, 32 decodes at context 1,000 19.3 ms; the ideal roofline said 42.4 and 14.8.
    calibrated, roofline = CalibratedStepModel(LLAMA2, A100), RooflineStepModel(LLAMA2, A100)
    prefill, decode = (1000, 1000 * 1001 // 2, 0, 0), (0, 0, 32, 32 * 1000)
    assert calibrated.step_time_parts(*prefill) == pytest.approx(70.8e-3, rel=0.10)
    assert calibrated.step_time_parts(*decode) == pytest.approx(19.3e-3, rel=0.10)
    assert roofline.step_time_parts(*prefill) < 0.65 * 70.8e-3
    # decode time grows with the batch, where the roofline sat at its weight-read floor
    steps = [calibrated.step_time_parts(0, 0, n, n) for n in (1, 32, 128)]
    assert steps == sorted(steps) and steps[-1] > 1.15 * steps[0]


def test_the_attention_assumption_moves_a_long_prefill_by_a_bounded_share():
    # Attention is analytic at an assumed 50% of peak; 35% or 70% moves a 1,000-token
    # prefill by under a tenth (the share stated in docs/calibration.md).
    times = [CalibratedStepModel(LLAMA2, dataclasses.replace(A100, efficiency=dataclasses.replace(
        A100.efficiency, attention_efficiency=e))).step_time_parts(1000, 500500, 0, 0)
        for e in (0.35, 0.5, 0.7)]
    assert times[0] / times[1] < 1.10 and times[2] / times[1] > 0.95


@pytest.fixture(scope="module")
def vidur():
    """Vidur's public profiles; the tests that need them skip cleanly when absent."""
    if not VIDUR.is_dir():
        pytest.skip(f"Vidur's profiles not found at {VIDUR} (set REFIMPL_VIDUR_PROFILES)")
    return read_profiles(VIDUR)


# Each GPU's default held-out shape (the last in name order), and the H100's other one: with
# two shapes there, each is predicted from a fit on the other alone.
HELD_OUT = [("a100", "meta-llama/Meta-Llama-3-8B"), ("h100", "meta-llama/Llama-2-7b-hf"),
            ("h100", "meta-llama/Llama-2-70b-hf")]


@pytest.mark.parametrize(("gpu", "held"), HELD_OUT, ids=[f"{g}-{h.split('/')[1]}"
                                                          for g, h in HELD_OUT])
def test_the_fit_is_within_the_acceptance_on_held_out_rows_and_shapes(vidur, gpu, held):
    compute, network = vidur
    mine = [p for p in compute if p.gpu == gpu]
    result = score(mine, [n for n in network if n.gpu == gpu],
                   HardwareSpec.preset(GPU_PRESETS[gpu]), held, "")
    assert max(result.held_rows.values()) < 10.0
    memory_bound = {g: v for g, v in result.held_shape_mape.items() if g in MEMORY_OPS}
    assert max(memory_bound.values()) < 10.0, memory_bound  # 12.5-12.9 before block_threads
    # the linear layers: one GEMM fit for every shape; Llama-2-70B on an H100 predicted from
    # Llama-2-7B alone misses by a little (docs/calibration.md)
    limit = 10.5 if held.endswith("70b-hf") and gpu == "h100" else 10.0
    assert max(result.held_shape_mape[g] for g in ("attn_proj", "mlp_proj")) < limit


def test_vllms_per_token_kernels_launch_blocks_of_their_rows_width():
    threads = {tp: block_threads(LLAMA2, tp) for tp in (1, 8)}
    assert threads[1] == {"norm": 1024, "rope": 512, "act": 1024, "add": 1024, "emb": 1024}
    assert threads[8]["rope"] == 4 * 128 // 2  # 4 query heads a GPU, pairs of a 128-dim head
    assert threads[8]["norm"] == 1024 and threads[8]["act"] == 1024  # 11008 / 8 still > 1024


def test_a_row_in_a_smaller_block_pays_its_share_of_the_row_cost():
    fit = KNOWN.rope  # row_s 1 ns for a 1,024-thread block
    full, half = (memory_terms(fit, 16_384, H100.memory_bandwidth_bytes_s, t)[1]
                  for t in (1024, 512))
    assert full - half == pytest.approx(fit.row_s / 2, rel=1e-12)


def test_a_cache_edge_past_every_fitted_run_is_dropped():
    # No profiled run reaches the edge, so its spill rate is unfitted: it must not rule
    # larger runs (it had made a held-out shape's 32k-token runs 12x too slow).
    edge_past = OpFit(3e-6, 0.2, 1.5, 137e6, 0.009)
    kept = _without_unseen_kink(edge_past, largest_bytes=67e6)
    assert kept.cache_bytes == math.inf and kept.spill_efficiency == kept.efficiency == 0.2
    edge_seen = dataclasses.replace(edge_past, cache_bytes=20e6, spill_efficiency=0.1)
    assert _without_unseen_kink(edge_seen, largest_bytes=67e6) == edge_seen


def test_the_presets_linear_layers_match_vidurs_a100_batches(vidur):
    compute, _ = vidur
    shape = next(p for p in compute if p.gpu == "a100" and p.model.name.endswith("Llama-2-7b-hf"))
    for rows in (1000, 1, 8, 32, 64, 128):
        ours, theirs = linear_layers_s(A100.efficiency, A100, shape, rows, LLAMA2.num_layers)
        assert ours == pytest.approx(theirs, rel=0.10), rows
