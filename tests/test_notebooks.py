"""The notebooks: committed clean (no outputs, a `parameters` cell with FAST), importing only
the public API, and each one runs top to bottom with `REFIMPL_FAST=1` in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
TIMEOUT_S = 600  # per notebook: a cold Numba cache compiles the kernels on first use
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


# Runs a notebook's code cells in order, in one namespace, as a kernel would (no magics are
# used, so plain Python can run them). A fresh interpreter per notebook keeps them apart.
_RUNNER = """
import json, sys, time
cells = json.load(open(sys.argv[1]))["cells"]
namespace = {"__name__": "__main__"}
for index, cell in enumerate(cells):
    if cell["cell_type"] != "code":
        continue
    started = time.perf_counter()
    exec(compile("".join(cell["source"]), f"{sys.argv[1]}:cell {index}", "exec"), namespace)
    print(f"cell {index}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
"""


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_runs_in_fast_mode(path, tmp_path):
    """Every code cell runs top to bottom with REFIMPL_FAST=1, in a fresh interpreter.

    The cells run in a plain Python process rather than a Jupyter kernel: the kernel's
    messaging occasionally lost a reply on this machine and stalled a run for minutes, which
    a test suite cannot afford; `pytest --nbmake notebooks/` runs them in real kernels.
    """
    pytest.importorskip("ipywidgets")
    pytest.importorskip("IPython")
    env = {**os.environ, "REFIMPL_FAST": "1", "MPLBACKEND": "Agg", "TMPDIR": str(tmp_path)}
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", _RUNNER, str(path)], cwd=NOTEBOOKS_DIR,
                            env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert result.returncode == 0, f"{path.name} failed:\n{result.stderr[-3000:]}"
    took_s = time.perf_counter() - started
    if took_s > SLOW_NOTEBOOK_S:  # say where the time went (a cold Numba cache compiles)
        slowest = sorted(result.stderr.splitlines()[-40:], key=_seconds, reverse=True)[:3]
        warnings.warn(f"{path.name} took {took_s:.0f} s; slowest: {slowest}", stacklevel=1)


def _seconds(line: str) -> float:
    """The seconds in a runner line 'cell i: s s' (0 for any other line)."""
    try:
        return float(line.rsplit(":", 1)[1].split()[0])
    except (IndexError, ValueError):
        return 0.0
