"""The model benchmark reports every figure, for a shape small enough to time in a test, with the
Hugging Face baseline where torch and transformers are installed and a plain "not measured"
where they are not."""

from __future__ import annotations

import json
import math
import sys

import pytest

from refimpl.bench.model import BATCHES, run
from refimpl.model import LlamaConfig

CONFIG = LlamaConfig(name="bench-test", hidden_size=64, num_layers=2, num_heads=4,
                     num_kv_heads=2, head_dim=16, intermediate_size=96, vocab_size=97,
                     max_context=512)


def _positive(row: dict[str, float]) -> bool:
    return all(math.isfinite(value) and value > 0 for value in row.values())


def test_without_torch_the_report_says_not_measured_and_has_every_other_figure(
        tmp_path, capsys, monkeypatch):
    for name in ("torch", "transformers"):
        monkeypatch.setitem(sys.modules, name, None)  # `import torch` now raises ImportError
    report = run(quick=True, num_threads=1, json_path=tmp_path / "model.json", presets=[CONFIG])
    assert json.loads((tmp_path / "model.json").read_text()) == report
    assert report["torch_baseline"] == "not installed (torch): not measured"
    figures = report["models"]["bench-test"]["by_threads"]["1"]
    assert "hf" not in figures and "vs_hf" not in figures
    assert set(figures["step"]) == {str(b) for b in BATCHES}
    assert all(_positive(row) for row in [*figures["step"].values(), figures["no_cache_numpy"]])
    out = capsys.readouterr().out
    assert "no-cache NumPy" in out and "HF baseline: not installed (torch): not measured" in out


def test_with_transformers_every_batch_has_hugging_face_figures_and_ratios(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    threads_before = torch.get_num_threads()
    report = run(quick=True, num_threads=1, json_path=tmp_path / "model.json", presets=[CONFIG])
    assert json.loads((tmp_path / "model.json").read_text()) == report
    assert report["torch_baseline"].startswith(f"transformers {transformers.__version__}, torch")
    figures = report["models"]["bench-test"]["by_threads"]["1"]
    assert set(figures["hf"]) == set(figures["vs_hf"]) == {str(b) for b in BATCHES}
    for batch, hf in figures["hf"].items():
        assert _positive(hf) and _positive(figures["vs_hf"][batch])
        ours = figures["step"][batch]
        assert figures["vs_hf"][batch]["decode"] == pytest.approx(
            ours["decode_tokens_s"] / hf["decode_tokens_s"])
    assert torch.get_num_threads() == threads_before  # the bench's thread limit is undone
    printed = capsys.readouterr()
    assert "vs HF" in printed.out and "not measured" not in printed.out
    assert "Loading weights" not in printed.err  # transformers' progress bar is kept quiet
