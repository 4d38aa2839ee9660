"""The KV benchmark compares like with like: its pure-Python baseline hands out the same pages."""

from __future__ import annotations

import json

from refimpl.bench.kv import PythonPool, run
from refimpl.kv import PagePool


def test_baseline_and_pool_agree_on_every_page_table():
    ours, baseline = PagePool(64, 4), PythonPool(64, 4)
    for request_id, tokens in [(1, 9), (2, 4), (3, 1)]:
        ours.allocate(request_id, tokens)
        baseline.allocate(request_id, tokens)
    for _ in range(6):
        for request_id in (1, 3):
            ours.append(request_id)
            baseline.append(request_id)
    ours.free(2)
    baseline.release(2)
    ours.allocate(4, 8)
    baseline.allocate(4, 8)
    for request_id in (1, 3, 4):
        assert ours.page_table(request_id) == baseline.tables[request_id]


def test_quick_run_reports_every_figure(tmp_path, capsys):
    report = run(quick=True, json_path=tmp_path / "kv.json")
    assert json.loads((tmp_path / "kv.json").read_text()) == report
    assert set(report["pages_per_s"]) == {"python_api", "batch_api", "pure_python"}
    assert report["decode_append_s"] > 0 and report["decode_append_speedup"] > 0
    assert "append_batch" in capsys.readouterr().out
