"""SLO and priority classes."""

from __future__ import annotations

import pytest

from refimpl import SLO, PriorityClass
from refimpl.errors import ConfigError


def test_slo_is_met_only_when_both_targets_hold():
    slo = SLO(ttft_s=1.0, tpot_s=0.1)
    assert slo.is_met(1.0, 0.1)
    assert not slo.is_met(1.01, 0.05)
    assert not slo.is_met(0.5, 0.11)


@pytest.mark.parametrize(("name", "ttft_s", "tpot_s"), [
    ("mlperf-llama3.1-8b", 2.0, 0.1), ("mlperf-llama3.1-8b-interactive", 0.5, 0.03),
    ("mlperf-llama2-70b", 2.0, 0.2), ("mlperf-llama2-70b-interactive", 0.45, 0.04),
])
def test_mlperf_presets_carry_the_server_scenario_limits(name, ttft_s, tpot_s):
    assert SLO.preset(name) == SLO(ttft_s=ttft_s, tpot_s=tpot_s)


def test_the_literature_presets_stay():
    assert SLO.preset("interactive") == SLO(0.5, 0.05)
    assert SLO.preset("default") == SLO(2.0, 0.1)
    assert SLO.preset("batch") == SLO(30.0, 0.5)


def test_presets_order_interactive_tighter_than_batch():
    interactive, batch = SLO.preset("interactive"), SLO.preset("batch")
    assert interactive.ttft_s < batch.ttft_s and interactive.tpot_s < batch.tpot_s
    with pytest.raises(ConfigError, match=r"slo='realtime'.*interactive"):
        SLO.preset("realtime")


@pytest.mark.parametrize(("ttft", "tpot", "field"), [(0, 0.1, "ttft_s"), (1, -2, "tpot_s"),
                                                     (float("inf"), 0.1, "ttft_s")])
def test_non_positive_targets_are_rejected(ttft, tpot, field):
    with pytest.raises(ConfigError, match=field):
        SLO(ttft_s=ttft, tpot_s=tpot)


def test_priority_class_validation():
    slo = SLO.preset("default")
    assert PriorityClass("chat", 0, slo).weight == 1.0
    with pytest.raises(ConfigError, match="priority=-1"):
        PriorityClass("chat", -1, slo)
    with pytest.raises(ConfigError, match="weight=0"):
        PriorityClass("chat", 1, slo, weight=0)
