"""`refimpl bench`: the suites that serve a workload take --slo/--classes, the others do not."""

from __future__ import annotations

import importlib

import pytest

from refimpl.cli import main
from refimpl.cli.bench import SUITES, WORKLOAD_SUITES


@pytest.fixture
def calls(monkeypatch):
    """Each suite's `run`, replaced by one that records its keyword arguments."""
    seen: dict[str, dict] = {}
    for suite in SUITES:
        module = importlib.import_module(f"refimpl.bench.{suite}")
        monkeypatch.setattr(module, "run", lambda suite=suite, **kw: seen.__setitem__(suite, kw))
    return seen


@pytest.mark.parametrize("suite", WORKLOAD_SUITES)
def test_workload_suites_get_the_slo_set(suite, calls):
    assert main(["bench", suite, "--quick", "--classes", "interactive:0.3,batch:0.7"]) == 0
    slo_set = calls[suite]["slo_set"]
    assert [c.name for c in slo_set.classes] == ["interactive", "batch"]
    assert main(["bench", suite, "--slo", "mlperf-llama2-70b"]) == 0
    assert calls[suite]["slo_set"].classes[0].slo.tpot_s == 0.2
    assert main(["bench", suite]) == 0
    assert calls[suite]["slo_set"] is None  # the suite keeps its own classes


def test_other_suites_take_no_slo_options(calls, capsys):
    assert main(["bench", "kv", "--quick"]) == 0
    assert "slo_set" not in calls["kv"]
    with pytest.raises(SystemExit):
        main(["bench", "kv", "--slo", "interactive"])
    assert "unrecognized arguments" in capsys.readouterr().err


def test_a_bad_slo_set_is_a_one_line_error(calls, capsys):
    assert main(["bench", "serving", "--classes", "interactive:nan"]) == 2
    assert "share='nan'" in capsys.readouterr().err
