"""Transforms: rate scaling, head and window, context clipping, seeded class assignment."""

from __future__ import annotations

import numpy as np
import pytest

from refimpl.config import SLO_PRESETS, ModelConfig, PriorityClass, one_class, slo_set
from refimpl.errors import ConfigError
from refimpl.workloads import (
    DEFAULT_CLASS,
    assign_classes,
    assign_slo_set,
    clip_to_context,
    head,
    new_workload,
    scale_lengths,
    scale_to_rate,
    synthetic,
    window,
)

# Arrivals at 0, 1, 2, 4 s; prompts and outputs chosen around a 100-token context.
SMALL = new_workload(
    "small",
    np.array([0.0, 1.0, 2.0, 4.0]),
    np.array([10, 150, 95, 99]),
    np.array([5, 3, 20, 1]),
    hash_ids=((1,), (2, 3, 4), (5,), (6,)),
)
CONTEXT_100 = ModelConfig.preset("tiny", max_context=100)


def test_scale_to_rate_sets_the_mean_rate_and_keeps_the_order():
    scaled = scale_to_rate(SMALL, 6.0)  # 3 gaps over 0.5 s
    np.testing.assert_allclose(scaled.arrival_s, [0.0, 0.125, 0.25, 0.5])
    assert scaled.mean_rate == pytest.approx(6.0)
    assert SMALL.mean_rate == pytest.approx(0.75)  # the input is untouched


def test_scale_to_rate_cannot_stretch_a_single_instant():
    with pytest.raises(ConfigError, match="rate"):
        scale_to_rate(head(SMALL, 1), 2.0)


def test_head_keeps_the_first_n_rows_of_every_field():
    first = head(SMALL, 2)
    np.testing.assert_array_equal(first.prompt_tokens, [10, 150])
    assert first.hash_ids == ((1,), (2, 3, 4))
    assert len(head(SMALL, 99)) == 4


def test_window_selects_half_open_interval_and_rebases_to_zero():
    middle = window(SMALL, 1.0, 4.0)
    np.testing.assert_array_equal(middle.arrival_s, [0.0, 1.0])
    np.testing.assert_array_equal(middle.prompt_tokens, [150, 95])
    assert middle.hash_ids == ((2, 3, 4), (5,))


@pytest.mark.parametrize(("start_s", "end_s"), [(2.5, 3.5), (3.0, 1.0), (-1.0, 2.0)])
def test_window_without_arrivals_or_inverted_is_an_error(start_s, end_s):
    with pytest.raises(ConfigError):
        window(SMALL, start_s, end_s)


def test_clip_cuts_the_prompt_first_then_the_output_and_counts_the_clipped():
    clipped = clip_to_context(SMALL, CONTEXT_100)
    # 10+5 fits; 150+3 -> 99+1; 95+20 -> 95+5; 99+1 fits.
    np.testing.assert_array_equal(clipped.prompt_tokens, [10, 99, 95, 99])
    np.testing.assert_array_equal(clipped.output_tokens, [5, 1, 5, 1])
    assert clipped.num_clipped == 2
    assert np.all(clipped.prompt_tokens + clipped.output_tokens <= 100)
    assert clipped.hash_ids[1] == (2,)  # 99 tokens keep one 512-token block
    assert clip_to_context(clipped, CONTEXT_100).num_clipped == 2  # idempotent


def test_selecting_after_clipping_is_refused():
    with pytest.raises(ConfigError, match="before clip_to_context"):
        head(clip_to_context(SMALL, CONTEXT_100), 2)


def test_clip_on_a_real_model_counts_long_synthetic_prompts():
    workload = synthetic(num_requests=5_000, seed=0)
    model = ModelConfig.preset("llama-2-7b")  # 4,096 tokens
    clipped = clip_to_context(workload, model)
    expected = int(np.sum(workload.prompt_tokens + workload.output_tokens > 4_096))
    assert clipped.num_clipped == expected > 0


INTERACTIVE = PriorityClass("interactive", 0, SLO_PRESETS["interactive"])
BATCH = PriorityClass("batch", 2, SLO_PRESETS["batch"])


def test_fresh_workloads_are_all_in_the_default_class():
    assert set(SMALL.slo_class) == {"default"}
    assert DEFAULT_CLASS.priority == 0 and np.all(SMALL.priority == 0)
    np.testing.assert_array_equal(SMALL.ttft_slo_s, SLO_PRESETS["default"].ttft_s)


def test_assign_classes_follows_the_weights_and_is_seeded():
    workload = synthetic(num_requests=20_000)
    assigned = assign_classes(workload, [INTERACTIVE, BATCH], [3.0, 1.0], seed=5)
    is_interactive = assigned.slo_class == "interactive"  # (n,) bool
    assert is_interactive.mean() == pytest.approx(0.75, abs=0.015)  # ~5 standard errors
    np.testing.assert_array_equal(assigned.priority, np.where(is_interactive, 0, 2))
    np.testing.assert_array_equal(assigned.tpot_slo_s, np.where(is_interactive, 0.05, 0.5))
    again = assign_classes(workload, [INTERACTIVE, BATCH], [3.0, 1.0], seed=5)
    np.testing.assert_array_equal(assigned.slo_class, again.slo_class)
    other = assign_classes(workload, [INTERACTIVE, BATCH], [3.0, 1.0], seed=6)
    assert not np.array_equal(assigned.slo_class, other.slo_class)


def test_assign_slo_set_draws_the_shares_seeded_and_one_class_changes_every_request():
    workload = synthetic(num_requests=20_000)
    mixed = assign_slo_set(workload, slo_set("interactive:0.3,batch:0.7"), seed=3)
    is_interactive = mixed.slo_class == "interactive"  # (n,) bool
    assert is_interactive.mean() == pytest.approx(0.3, abs=0.02)
    np.testing.assert_array_equal(mixed.priority, np.where(is_interactive, 0, 1))
    reordered = assign_slo_set(workload, slo_set("batch:0.7,interactive:0.3"), seed=3)
    is_interactive = reordered.slo_class == "interactive"  # priority follows tightness
    np.testing.assert_array_equal(reordered.priority, np.where(is_interactive, 0, 1))
    same = assign_slo_set(workload, slo_set("interactive:0.3,batch:0.7"), seed=3)
    np.testing.assert_array_equal(mixed.slo_class, same.slo_class)
    one = assign_slo_set(SMALL, one_class("mlperf-llama2-70b-interactive"))
    assert set(one.slo_class) == {"mlperf-llama2-70b-interactive"}
    np.testing.assert_array_equal(one.ttft_slo_s, 0.45)
    np.testing.assert_array_equal(one.tpot_slo_s, 0.04)


@pytest.mark.parametrize(
    ("classes", "weights", "field"),
    [([], None, "classes"), ([BATCH], [1.0, 2.0], "weights"), ([BATCH], [0.0], "weights")],
)
def test_assign_classes_rejects_bad_classes_or_weights(classes, weights, field):
    with pytest.raises(ConfigError) as error:
        assign_classes(SMALL, classes, weights)
    assert error.value.field == field


def test_scaling_lengths_scales_the_hash_blocks_with_the_prompts():
    trace = new_workload("mc", np.array([0.0, 1.0, 2.0]), np.array([1024, 600, 513]),
                         np.array([8, 16, 3]), hash_ids=((1, 2), (1, 3), (4, 5)))
    scaled = scale_lengths(trace, 0.125)
    assert scaled.prompt_tokens.tolist() == [128, 75, 64]
    assert scaled.output_tokens.tolist() == [1, 2, 1]  # (rounded, at least one)
    assert scaled.hash_block_tokens == 64  # each id still covers one block of the prompt
    # 513 tokens spanned two blocks; 64 (64.1 rounded) span one: its second id goes
    assert scaled.hash_ids == ((1, 2), (1, 3), (4,))
    assert trace.hash_block_tokens == 512 and trace.hash_ids[2] == (4, 5)  # input untouched


def test_scaling_lengths_refuses_hash_blocks_of_fractional_tokens():
    trace = new_workload("mc", np.array([0.0]), np.array([600]), np.array([8]),
                         hash_ids=((1, 2),))
    with pytest.raises(ConfigError, match="factor"):
        scale_lengths(trace, 0.3)  # 153.6-token blocks
    plain = new_workload("plain", np.array([0.0]), np.array([600]), np.array([8]))
    assert scale_lengths(plain, 0.3).prompt_tokens.tolist() == [180]  # no hashes: any factor
