"""Tensor parallelism: the GPUs split the work and the KV memory, and all-reduce per layer."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from refimpl import HardwareSpec, ModelConfig
from refimpl.costmodel import CalibratedStepModel, RooflineStepModel
from refimpl.engine.simulate import kv_pool_for
from refimpl.errors import CapacityError, ConfigError

H100 = HardwareSpec.preset("h100-sxm")
LLAMA2 = ModelConfig.preset("llama-2-7b")
LLAMA70 = ModelConfig.preset("llama-2-70b")


def test_tensor_parallel_splits_the_gemms_and_adds_two_all_reduces_per_layer():
    one, two = CalibratedStepModel(LLAMA2, H100), CalibratedStepModel(
        LLAMA2, HardwareSpec.preset("h100-sxm-x2"))
    a, b = one.coefficients.ops, two.coefficients.ops
    np.testing.assert_allclose(b[:5, 2], a[:5, 2] / 2)  # each GPU reads half the weights
    np.testing.assert_allclose(b[:5, 4], a[:5, 4] / 2)  # and does half the FLOPs
    assert a.shape[0] + 1 == b.shape[0]  # one more operator: the all-reduce
    link = H100.efficiency.link(2)
    hidden_bytes = LLAMA2.hidden_size * 2
    assert b[-1, 0] == 2 * LLAMA2.num_layers and b[-1, 1] == link.launch_s
    assert b[-1, 3] == pytest.approx(hidden_bytes / link.bytes_per_s)
    assert two.coefficients.kv_s_per_context_token == pytest.approx(
        one.coefficients.kv_s_per_context_token / 2)
    with pytest.raises(ConfigError, match="num_gpus=3"):
        CalibratedStepModel(LLAMA2, dataclasses.replace(H100, num_gpus=3))


def test_the_ideal_roofline_divides_every_part_over_the_gpus():
    one, four = RooflineStepModel(LLAMA2, H100), RooflineStepModel(
        LLAMA2, HardwareSpec.preset("h100-sxm-x4"))
    for parts in ((1000, 500500, 0, 0), (0, 0, 32, 32000)):
        assert four.step_time_parts(*parts) - four.overhead_s == pytest.approx(
            (one.step_time_parts(*parts) - one.overhead_s) / 4)


def test_70b_fits_four_gpus_kv_being_their_memory_less_the_weights():
    with pytest.raises(CapacityError, match="llama-2-70b"):
        kv_pool_for(LLAMA70, H100)
    x4 = HardwareSpec.preset("h100-sxm-x4")
    pool = kv_pool_for(LLAMA70, x4)
    budget = int(4 * H100.memory_bytes * 0.9) - 2 * LLAMA70.num_parameters()
    assert pool.num_pages == budget // (16 * LLAMA70.kv_bytes_per_token())
    assert x4.num_gpus == 4 and x4.efficiency is H100.efficiency
    assert isinstance(CalibratedStepModel(LLAMA70, x4), CalibratedStepModel)
