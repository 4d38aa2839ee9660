"""`refimpl pareto` on an analytic table: the JSON report's shape, and a too-small budget."""

from __future__ import annotations

import json

from refimpl.cli import main


def test_pareto_json_lists_every_candidate_per_shape(tmp_path, capsys):
    out = tmp_path / "pareto.json"
    assert main(["pareto", "--hardware", "h100-sxm", "--model", "llama-3-8b", "--json",
                 str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["sram_budget_bytes"] == 228 * 1024 and data["analytic"]
    assert {e["phase"] for e in data["shapes"]} == {"prefill", "chunk", "decode"}
    for entry in data["shapes"]:
        assert {"B", "T", "candidates"} <= set(entry)
        for c in entry["candidates"]:
            assert set(c) == {"name", "params", "sram_bytes", "hbm_bytes", "flops", "time_s",
                              "within_budget", "on_frontier"}
            assert not c["on_frontier"] or c["within_budget"]
        assert any(c["on_frontier"] for c in entry["candidates"])
    assert "analytic" in capsys.readouterr().out


def test_pareto_with_a_budget_too_small_fails_cleanly(capsys):
    assert main(["pareto", "--hardware", "a100-80gb", "--model", "tiny",
                 "--sram-budget", "1024"]) == 2
    assert "smallest needs" in capsys.readouterr().err


def test_pareto_without_a_profiled_table_says_what_to_run(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("REFIMPL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("refimpl.config.probe._measure", lambda l3: {
        "memory_bandwidth_bytes_s": 1e10, "copy_bandwidth_bytes_s": 1e10, "peak_flops": 1e11})
    assert main(["pareto"]) == 2
    assert "refimpl profile" in capsys.readouterr().err
