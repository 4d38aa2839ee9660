"""Finished cells are cached: a killed or interrupted sweep resumes without redoing them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import refimpl.sweeps.serial as serial
from refimpl.sweeps import MEASURED_COLUMNS, sweep

ROOT = Path(__file__).resolve().parents[2]

# A sweep that kills itself (SIGKILL: no clean-up of any kind) once 3 of its cells are stored.
KILLED_SWEEP = """
import os, signal, sys
from refimpl.sweeps import SweepGrid, sweep
grid = SweepGrid(policies=("slo", "vllm"), rates=(20.0, 60.0), num_requests=120)
def progress(done, total, detail):
    if done >= 3:
        os.kill(os.getpid(), signal.SIGKILL)
sweep(grid, sys.argv[1], workers=0, progress=progress)
"""


@pytest.fixture
def counted_runs(monkeypatch):
    """The cells the serial executor runs in this process, in order."""
    ran = []
    real = serial.run_cell

    def counting(cell, with_requests=False):
        ran.append(cell)
        return real(cell, with_requests)

    monkeypatch.setattr(serial, "run_cell", counting)
    return ran


def _deterministic(table: dict) -> dict:
    return {k: v for k, v in table.items() if k not in MEASURED_COLUMNS}


@pytest.mark.slow
def test_a_killed_sweep_resumes_without_redoing_its_finished_cells(
        tmp_path, small_grid, counted_runs):
    out = tmp_path / "sweep"
    killed = subprocess.run([sys.executable, "-c", KILLED_SWEEP, str(out)], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert killed.returncode == -9, killed.stderr[-2000:]
    finished = sorted(p.name for p in (out / "runs").glob("*.json"))
    assert len(finished) == 3
    resumed = sweep(small_grid, out, workers=0)
    assert resumed.num_cached == 3
    assert len(counted_runs) == 1  # only the cell the kill left undone
    fresh = sweep(small_grid, tmp_path / "fresh", workers=0)
    assert _deterministic(resumed.table) == _deterministic(fresh.table)


def test_an_interrupted_sweep_keeps_what_finished_and_a_damaged_entry_is_redone(
        tmp_path, small_grid, counted_runs, monkeypatch):
    from refimpl.sweeps.work import run_cell as real

    def interrupted(cell, with_requests=False):
        if len(counted_runs) == 2:
            raise KeyboardInterrupt
        counted_runs.append(cell)
        return real(cell, with_requests)

    monkeypatch.setattr(serial, "run_cell", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sweep(small_grid, tmp_path, workers=0)
    entries = sorted((tmp_path / "runs").glob("*.json"))
    assert len(entries) == 2
    entries[0].write_text(entries[0].read_text()[:40])  # a damaged entry: not JSON any more
    (tmp_path / "runs" / ".stray.json.1.partial").write_text("{")  # left by a kill
    monkeypatch.setattr(serial, "run_cell", real)
    resumed = sweep(small_grid, tmp_path, workers=0)
    assert resumed.num_cached == 1
    assert all(json.loads(p.read_text())["settings"]["key"] == p.stem
               for p in (tmp_path / "runs").glob("*.json"))


def test_asking_for_request_records_reruns_cells_cached_without_them(tmp_path, counted_runs):
    from refimpl.export import read_table
    from refimpl.sweeps import SweepGrid

    grid = SweepGrid(policies=("vllm",), rates=(20.0,), num_requests=30)
    sweep(grid, tmp_path, workers=0)
    again = sweep(grid, tmp_path, workers=0, with_requests=True)
    assert again.num_cached == 0 and len(counted_runs) == 2
    key = again.table["key"][0]
    records = read_table(tmp_path / "runs" / f"{key}.requests.parquet")
    assert len(records["request_id"]) == 30
    assert sweep(grid, tmp_path, workers=0, with_requests=True).num_cached == 1
