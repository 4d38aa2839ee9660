"""Online calibration: convergence after a slowdown, and the drift detector."""

from __future__ import annotations

import math

import numpy as np
import pytest

from refimpl.costmodel import Calibrator
from refimpl.errors import ConfigError


def base(phase: str, batch: float, seq_len: float) -> float:
    return 1e-5 * batch * seq_len**0.5


SHAPES = [(1, 128), (4, 512), (16, 2048), (64, 1024)]


def test_predictions_follow_a_1_5x_slowdown_within_a_few_dozen_observations():
    rng = np.random.default_rng(0)
    cal = Calibrator(base)
    for n in range(48):
        b, s = SHAPES[n % len(SHAPES)]
        noise = math.exp(rng.normal(0, 0.02))  # 2% timing noise
        cal.observe("decode", b, s, 1.5 * base("decode", b, s) * noise)
    for b, s in SHAPES:
        assert cal.predict_s("decode", b, s) == pytest.approx(1.5 * base("decode", b, s),
                                                              rel=0.05)
    # A bucket never observed falls back on the phase's correction.
    assert cal.correction("decode", 200, 9000) == pytest.approx(1.5, rel=0.05)
    assert cal.correction("prefill", 4, 512) == 1.0  # other phases untouched
    assert cal.drifted("decode") and not cal.drifted("prefill")


def test_the_detector_stays_quiet_under_noise_and_fires_on_drift():
    rng = np.random.default_rng(1)
    cal = Calibrator(base)
    for n in range(500):
        b, s = SHAPES[n % len(SHAPES)]
        cal.observe("prefill", b, s, base("prefill", b, s) * math.exp(rng.normal(0, 0.05)))
    assert not cal.drifted()
    fired_after = None
    for n in range(50):
        cal.observe("prefill", 4, 512, 1.5 * base("prefill", 4, 512))
        if cal.drifted("prefill"):
            fired_after = n + 1
            break
    assert fired_after is not None and fired_after <= 10
    cal.reset()
    assert not cal.drifted() and cal.correction("prefill", 4, 512) == 1.0


def test_a_speed_up_is_detected_too():
    cal = Calibrator(base)
    for _ in range(10):
        cal.observe("decode", 4, 512, 0.6 * base("decode", 4, 512))
    assert cal.drifted("decode") and cal.drift["decode"].lower > 0


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_bad_measurements_are_refused(bad):
    with pytest.raises(ConfigError, match="measured_s"):
        Calibrator(base).observe("decode", 1, 128, bad)
