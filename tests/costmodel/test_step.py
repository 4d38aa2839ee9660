"""The step-time interface and the analytic roofline model the simulator uses at GPU scale."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refimpl import HardwareSpec, ModelConfig
from refimpl.costmodel import RooflineStepModel, StepShape, step_time_model
from refimpl.errors import ConfigError

LLAMA3 = ModelConfig.preset("llama-3-8b")
H100 = HardwareSpec.preset("h100-sxm")


@pytest.fixture(scope="module")
def h100_model() -> RooflineStepModel:
    return RooflineStepModel(LLAMA3, H100)


def test_decode_step_is_memory_bound_on_h100(h100_model):
    shape = StepShape(0, 0, decode_seqs=32, decode_context_tokens=32 * 2048)
    flops, nbytes = h100_model.counts(shape)
    assert flops / nbytes < H100.ridge_intensity
    # The weights and the KV read at full bandwidth set the time (plus the fixed overhead).
    memory_s = nbytes / H100.memory_bandwidth_bytes_s
    assert h100_model.step_time(shape) == pytest.approx(memory_s + h100_model.overhead_s,
                                                        rel=0.05)


def test_long_prefill_is_compute_bound_on_h100(h100_model):
    prompt = 8192
    shape = StepShape(prompt, StepShape.chunk_pairs(prompt, 0), 0, 0)
    flops, nbytes = h100_model.counts(shape)
    assert flops / nbytes > H100.ridge_intensity
    assert h100_model.step_time(shape) == pytest.approx(flops / H100.peak_flops, rel=0.05)


def test_one_decode_token_costs_about_the_weights_read(h100_model):
    # Llama-3-8B in bf16 is ~16 GB: one token at 3.35 TB/s is ~4.8 ms.
    assert 4e-3 < h100_model.step_time(StepShape(0, 0, 1, 1)) < 6e-3


def test_a100_is_slower_than_h100():
    shape = StepShape(2048, StepShape.chunk_pairs(2048, 0), 16, 16 * 1000)
    a100 = RooflineStepModel(LLAMA3, HardwareSpec.preset("a100-80gb"))
    assert a100.step_time(shape) > RooflineStepModel(LLAMA3, H100).step_time(shape)


def test_empty_step_costs_nothing(h100_model):
    assert h100_model.step_time(StepShape(0, 0, 0, 0)) == 0.0


def test_parts_and_shape_agree(h100_model):
    shape = StepShape(300, StepShape.chunk_pairs(300, 1000), 7, 7000)
    assert h100_model.step_time(shape) == h100_model.step_time_parts(300, shape.prefill_pairs,
                                                                      7, 7000)


counts = st.integers(0, 5000)


@settings(max_examples=200, deadline=None)
@given(counts, counts, counts, counts, st.integers(0, 3), st.integers(1, 5000))
def test_step_time_is_monotone_in_every_argument(tokens, extra_pairs, seqs, extra_ctx, which,
                                                 bump):
    model = RooflineStepModel(LLAMA3, H100)
    args = [tokens, tokens + extra_pairs, seqs, seqs + extra_ctx]
    before = model.step_time_parts(*args)
    args[which] += bump
    if which == 0:  # keep the shape valid: more tokens come with at least as many pairs
        args[1] += bump
    if which == 2:
        args[3] += bump
    assert model.step_time_parts(*args) >= before


@pytest.mark.parametrize(("fields", "name"), [
    ((-1, 0, 0, 0), "prefill_tokens"),
    ((10, 5, 0, 0), "prefill_pairs"),
    ((0, 0, 3, 2), "decode_context_tokens"),
    ((0, 0, 1.5, 2), "decode_seqs"),
])
def test_bad_shapes_name_the_field(fields, name):
    with pytest.raises(ConfigError, match=name):
        StepShape(*fields)


def test_chunk_pairs_counts_prefix_and_triangle():
    assert StepShape.chunk_pairs(3, 0) == 6  # 1 + 2 + 3
    assert StepShape.chunk_pairs(2, 10) == 2 * 10 + 3


def test_factory_gives_the_roofline_by_name_and_for_unfitted_spec_sheets():
    # The GPU presets default to the calibrated model (tests/costmodel/test_calibrated.py).
    assert isinstance(step_time_model(LLAMA3, H100, kind="roofline"), RooflineStepModel)
    unfitted = dataclasses.replace(H100, efficiency=None)
    assert isinstance(step_time_model(LLAMA3, unfitted), RooflineStepModel)


def test_negative_overhead_is_refused():
    with pytest.raises(ConfigError, match="overhead_s"):
        RooflineStepModel(LLAMA3, H100, overhead_s=-1.0)
