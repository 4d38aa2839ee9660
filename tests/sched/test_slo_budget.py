"""The `slo` tick budget's loan: the decodes' slack, and what it is learned from."""

from __future__ import annotations

import numpy as np
import pytest

from refimpl.errors import ConfigError
from refimpl.sched import make_policy
from refimpl.sched.slo.budget import (
    QUIET_RATE,
    decode_slack_s,
    learned_output,
    learned_quiet_share,
)


@pytest.mark.parametrize("quantile", [0.25, 0.5])
def test_the_learned_output_length_settles_at_its_quantile(quantile):
    outputs = np.random.default_rng(0).lognormal(5.0, 1.0, 5000).astype(np.int64)
    estimate = 0.0
    for generated in outputs:
        estimate = learned_output(estimate, int(generated), quantile)
    assert estimate == pytest.approx(np.quantile(outputs, quantile), rel=0.15)
    assert learned_output(0.0, 37, quantile) == 37.0  # the first output sets it


def test_the_quiet_share_is_a_mean_at_first_then_an_exponential_average():
    share, steps = 0.0, 0
    for quiet in [True] * 3 + [False]:
        steps += 1
        share = learned_quiet_share(share, quiet, steps)
    assert share == pytest.approx(0.75)
    for _ in range(int(2 / QUIET_RATE)):
        steps += 1
        share = learned_quiet_share(share, False, steps)
    assert 0.0 < share < 0.75 * (1 - QUIET_RATE) ** (1 / QUIET_RATE)


def test_a_decode_borrows_what_it_should_bank_before_the_quantile_of_outputs():
    # two decodes at 30 ms TPOT in 20 ms quiet steps (10 ms base, 5 ms each), so each quiet
    # step banks 10 ms: one just started with nothing banked, one 20 tokens in with 80 ms
    rows, active = np.array([0, 1]), np.array([True, True])
    est_s, tpot_s = np.array([0.005, 0.005]), np.array([0.03, 0.03])
    first_token_s, generated = np.array([10.0, 9.48]), np.array([0, 20])

    def slack(quiet_share, quantile):
        return decode_slack_s(rows, active, 2, est_s, first_token_s, generated, tpot_s, 10.0,
                              0.01, quiet_share, quantile)

    assert slack(0.5, 10.0) == pytest.approx(0.5 * 10 * 0.01)  # the fresh one: q (m - n) 10 ms
    assert slack(0.5, 30.0) == pytest.approx(0.08 + 0.5 * 10 * 0.01)  # now the other
    assert slack(0.0, 30.0) == pytest.approx(0.0)  # no quiet steps, no loan
    assert slack(1.0, 20.0) == pytest.approx(0.08)  # at the quantile: its bank alone


@pytest.mark.parametrize("value", [0.0, 1.0, 1.5, float("nan")])
def test_a_loan_quantile_outside_zero_to_one_is_refused(value):
    with pytest.raises(ConfigError, match="loan_quantile"):
        make_policy("slo", loan_quantile=value)
