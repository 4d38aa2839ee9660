"""The notebooks: committed clean (no outputs, a `parameters` cell with FAST), and each one
runs top to bottom with `REFIMPL_FAST=1` in a fresh kernel, as a learner would run it.

Execution uses nbclient in-process (it comes with nbmake, in the `test` extra) with the current
Python's `python3` kernel (ipykernel); it skips cleanly where those are not installed.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from pathlib import Path

import pytest

NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
TIMEOUT_S = 300  # per cell: a cold Numba cache compiles the kernels on first use
SLOW_NOTEBOOK_S = 60.0  # warm, each notebook runs in under 10 s on 2 cores


def _ids(paths: list[Path]) -> list[str]:
    return [p.stem for p in paths]


WALKTHROUGHS = {"01_tiled_attention_and_sram", "02_cost_model_and_pareto", "03_paged_kv_cache",
                "04_scheduling_slos"}


def test_the_walkthroughs_are_there():
    assert {p.stem for p in NOTEBOOKS} >= WALKTHROUGHS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_is_committed_without_outputs(path):
    notebook = json.loads(path.read_text())
    for i, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [], f"cell {i} has outputs: clear them before committing"
            assert cell.get("execution_count") is None, f"cell {i} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_opens_with_a_parameters_cell(path):
    cells = json.loads(path.read_text())["cells"]
    first_code = next(cell for cell in cells if cell["cell_type"] == "code")
    assert "parameters" in first_code.get("metadata", {}).get("tags", [])
    source = "".join(first_code["source"])
    assert 'FAST = os.environ.get("REFIMPL_FAST") == "1"' in source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_imports_only_the_public_api(path):
    cells = json.loads(path.read_text())["cells"]
    for cell in cells:
        for line in "".join(cell["source"]).splitlines():
            if cell["cell_type"] == "code" and "refimpl." in line and "import" in line:
                module = line.split()[1]
                assert not any(part.startswith("_") for part in module.split(".")), line
                assert module.count(".") <= 1, f"import from a documented subpackage: {line}"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_runs_in_fast_mode(path, monkeypatch, tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("ipywidgets")
    # The kernel inherits this environment: fast sizes, and scratch files
    # (plots some cells write) in a temporary folder rather than the checkout.
    monkeypatch.setenv("REFIMPL_FAST", "1")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=TIMEOUT_S, kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS_DIR)}},
    )
    # jupyter_client runs a kernel whose command is plain `python` with sys.executable, so
    # the kernel sees the same environment (and refimpl) as this test process.
    assert os.path.exists(sys.executable)
    started = time.perf_counter()
    client.execute()
    took_s = time.perf_counter() - started
    if took_s > SLOW_NOTEBOOK_S:  # say where the time went (a cold Numba cache compiles)
        warnings.warn(f"{path.name} took {took_s:.0f} s; per cell: {_cell_times(notebook)}",
                      stacklevel=1)


def _cell_times(notebook) -> str:
    """'cell i: seconds' of the slowest cells, from the timings nbclient records."""
    from datetime import datetime

    times = []
    for i, cell in enumerate(notebook.cells):
        stamps = cell.get("metadata", {}).get("execution", {})
        if "iopub.execute_input" in stamps and "shell.execute_reply" in stamps:
            start, end = (datetime.fromisoformat(stamps[key].replace("Z", "+00:00"))
                          for key in ("iopub.execute_input", "shell.execute_reply"))
            times.append(((end - start).total_seconds(), i))
    return ", ".join(f"cell {i}: {s:.1f} s" for s, i in sorted(times, reverse=True)[:3])
