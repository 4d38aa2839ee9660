"""Synthetic workloads: fitted statistics reproduced, determinism per seed, Gamma CV."""

from __future__ import annotations

import numpy as np
import pytest

from refimpl.errors import ConfigError
from refimpl.workloads import (
    DEFAULT_CLASS,
    assign_classes,
    gamma_arrivals,
    gamma_cv,
    make_workload,
    synthetic,
    synthetic_names,
)
from refimpl.workloads.synthetic import AZURE_CODE_RATE, AZURE_CONV_RATE

NUM_SAMPLES = 20_000

# Trace statistics (traces README): prompt mean, p50, p95; output mean, p50, p95.
TRACE_STATS = {
    "azure-conv-like": ((1_154.7, 1_020, 4_083), (211.1, 129, 451)),
    "azure-code-like": ((2_047.8, 1_469, 7_303.3), (27.9, 13, 90)),
}
# Tolerances over 20,000 samples. Mean: the quantile table's own bias (within 2%, see
# refimpl.workloads.lengths) plus sampling noise of the heavy tails (~1-2%). Quantiles are
# checked in probability: the share of samples below the trace's p-quantile must be p within
# 4 standard errors, 4 * sqrt(p * (1 - p) / n) (0.014 at p50, 0.006 at p95), so flat stretches
# of a distribution (the code prompts near their median) do not need a loose token tolerance.
MEAN_REL = 0.04


def assert_quantile(tokens: np.ndarray, quantile: float, p: float) -> None:
    """`quantile` is a p-quantile of `tokens`, within sampling error (ties counted both ways)."""
    tolerance = 4 * np.sqrt(p * (1 - p) / len(tokens))
    assert np.mean(tokens < quantile) <= p + tolerance
    assert np.mean(tokens <= quantile) >= p - tolerance


@pytest.mark.parametrize("name", list(TRACE_STATS))
def test_synthetic_lengths_reproduce_the_trace_statistics(name):
    workload = synthetic(name, num_requests=NUM_SAMPLES, seed=1)
    for tokens, (mean, p50, p95) in zip(
        (workload.prompt_tokens, workload.output_tokens), TRACE_STATS[name], strict=True
    ):
        assert tokens.mean() == pytest.approx(mean, rel=MEAN_REL)
        assert_quantile(tokens, p50, 0.50)
        assert_quantile(tokens, p95, 0.95)


@pytest.mark.parametrize(
    ("name", "rate"), [("azure-conv-like", AZURE_CONV_RATE), ("azure-code-like", AZURE_CODE_RATE)]
)
def test_default_rate_is_the_trace_mean_rate(name, rate):
    workload = synthetic(name, num_requests=NUM_SAMPLES)
    assert workload.mean_rate == pytest.approx(rate, rel=0.03)  # Poisson: CV 1/sqrt(n) ~ 0.7%


def test_same_seed_same_arrays_other_seed_other_arrays():
    a, b, c = (synthetic(num_requests=500, seed=s) for s in (7, 7, 8))
    for field in ("arrival_s", "prompt_tokens", "output_tokens"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
        assert not np.array_equal(getattr(a, field), getattr(c, field))


def test_changing_the_rate_keeps_the_lengths():
    slow, fast = (synthetic(num_requests=300, rate=r, seed=2) for r in (1.0, 9.0))
    np.testing.assert_array_equal(slow.prompt_tokens, fast.prompt_tokens)
    assert fast.mean_rate > 5 * slow.mean_rate


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_gaps_have_the_documented_coefficient_of_variation(burstiness):
    arrival_s = gamma_arrivals(50_000, 3.0, burstiness, np.random.default_rng(0))
    gaps_s = np.diff(arrival_s)
    assert arrival_s[0] == 0.0
    assert gaps_s.mean() == pytest.approx(1 / 3.0, rel=0.03)
    assert gaps_s.std() / gaps_s.mean() == pytest.approx(gamma_cv(burstiness), rel=0.05)


def test_bursty_variant_has_cv_two():
    gaps_s = np.diff(synthetic("azure-conv-like-bursty", num_requests=NUM_SAMPLES).arrival_s)
    assert gaps_s.std() / gaps_s.mean() == pytest.approx(2.0, rel=0.06)


def test_every_name_builds_and_the_default_comes_first():
    names = synthetic_names()
    assert names[0] == "azure-conv-like"
    for name in names:
        assert len(make_workload(name, num_requests=10)) == 10


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"num_requests": 0}, "num_requests"),
        ({"rate": -1.0}, "rate"),
        ({"burstiness": 0.0}, "burstiness"),
    ],
)
def test_bad_parameters_name_the_field(kwargs, field):
    with pytest.raises(ConfigError) as error:
        synthetic(**{"num_requests": 10, **kwargs})
    assert error.value.field == field


def test_unknown_name_lists_the_choices():
    with pytest.raises(ConfigError, match="azure-code-like"):
        synthetic("nope")


@pytest.mark.parametrize(("seed", "match"), [(-1, "seed=-1: must be at least 0"),
                                             ("abc", "seed='abc': must be an integer"),
                                             (True, "seed=True: must be an integer")])
def test_a_seed_numpy_would_refuse_is_a_config_error_naming_it(seed, match):
    with pytest.raises(ConfigError, match=match):
        synthetic("azure-conv-like", num_requests=3, seed=seed)
    with pytest.raises(ConfigError, match=match):
        assign_classes(synthetic("azure-conv-like", num_requests=3), [DEFAULT_CLASS], seed=seed)
