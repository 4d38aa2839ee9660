"""SLO sets: `NAME:SHARE,...` specs, named sets and one-class sets, and their errors."""

from __future__ import annotations

import pytest

from refimpl.config import SLO_PRESETS, SLO_SETS, one_class, slo_set
from refimpl.errors import ConfigError


def test_a_spec_gives_classes_with_normalised_shares_and_priorities_by_tightness():
    mix = slo_set("batch:7, interactive:3")
    assert [c.name for c in mix.classes] == ["batch", "interactive"]  # order as written
    assert mix.shares == pytest.approx((0.7, 0.3))
    assert {c.name: c.priority for c in mix.classes} == {"interactive": 0, "batch": 1}
    assert {c.name: c.slo for c in mix.classes} == {
        "interactive": SLO_PRESETS["interactive"], "batch": SLO_PRESETS["batch"]}
    assert all(c.weight == 1.0 for c in mix.classes)
    assert mix.name == "batch:7, interactive:3"


def test_tightness_ranks_by_ttft_then_tpot_and_equal_targets_share_a_priority():
    mix = slo_set("mlperf-llama2-70b:1,default:1,mlperf-llama3.1-8b-interactive:1,"
                  "mlperf-llama2-70b-interactive:1,interactive:1,mlperf-llama3.1-8b:1")
    assert {c.name: c.priority for c in mix.classes} == {
        "mlperf-llama2-70b-interactive": 0,  # 450 ms
        "mlperf-llama3.1-8b-interactive": 1,  # 500 ms, 30 ms
        "interactive": 2,  # 500 ms, 50 ms
        "default": 3, "mlperf-llama3.1-8b": 3,  # both 2 s, 100 ms
        "mlperf-llama2-70b": 4,  # 2 s, 200 ms
    }


def test_named_sets_parse_and_every_set_round_trips_through_its_spec():
    assert set(SLO_SETS) >= {"chat-batch", "mlperf-llama3.1-8b-mix", "mlperf-llama2-70b-mix"}
    for name in SLO_SETS:
        mix = slo_set(name)
        assert mix.name == name and sum(mix.shares) == pytest.approx(1.0)
        again = slo_set(mix.spec)
        assert (again.classes, again.shares) == (mix.classes, mix.shares)
    chat = slo_set("chat-batch")
    assert [c.name for c in chat.classes] == ["interactive", "batch"]
    assert chat.shares == (0.5, 0.5)


def test_one_class_is_every_request_in_one_preset():
    mix = one_class("interactive")
    assert mix.shares == (1.0,) and mix.classes[0].priority == 0
    assert mix.classes[0].slo == SLO_PRESETS["interactive"]
    with pytest.raises(ConfigError, match=r"slo='fast'.*interactive"):
        one_class("fast")


def test_describe_records_each_class_and_share():
    described = slo_set("interactive:0.25,batch:0.75").describe()
    assert described["spec"] == "interactive:0.25,batch:0.75"
    assert described["classes"][0] == {"name": "interactive", "priority": 0, "ttft_s": 0.5,
                                       "tpot_s": 0.05, "weight": 1.0, "share": 0.25}


@pytest.mark.parametrize(("spec", "field", "value"), [
    ("", "classes", ""),
    ("interactive", "classes", "interactive"),
    ("interactive:1,", "classes", "interactive:1,"),
    ("a:b:c", "classes", "a:b:c"),
    ("realtime:1", "classes", "realtime"),
    ("interactive:1,batch:2,interactive:3", "classes", "interactive"),
    ("interactive:0", "share", "0"),
    ("interactive:-0.5", "share", "-0.5"),
    ("interactive:nan", "share", "nan"),
    ("interactive:inf", "share", "inf"),
    ("interactive:lots", "share", "lots"),
])
def test_bad_specs_name_the_field_and_value(spec, field, value):
    with pytest.raises(ConfigError) as error:
        slo_set(spec)
    assert (error.value.field, error.value.value) == (field, value)
