"""The model benchmark reports every figure, for a shape small enough to time in a test."""

from __future__ import annotations

import json

from refimpl.bench.model import BATCHES, run
from refimpl.model import LlamaConfig


def test_quick_run_reports_step_and_no_cache_figures_for_each_batch(tmp_path, capsys):
    config = LlamaConfig(name="bench-test", hidden_size=64, num_layers=2, num_heads=4,
                         num_kv_heads=2, head_dim=16, intermediate_size=96, vocab_size=97,
                         max_context=512)
    report = run(quick=True, num_threads=1, json_path=tmp_path / "model.json", presets=[config])
    assert json.loads((tmp_path / "model.json").read_text()) == report
    figures = report["models"]["bench-test"]["by_threads"]["1"]
    assert set(figures["step"]) == {str(b) for b in BATCHES}
    for row in [*figures["step"].values(), figures["no_cache_numpy"]]:
        assert row["prefill_tokens_s"] > 0 and row["decode_tokens_s"] > 0
    out = capsys.readouterr().out
    assert "no-cache NumPy" in out and "PyTorch: not installed" in out
