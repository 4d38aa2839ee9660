"""The notebooks: committed clean (no outputs, a `parameters` cell with FAST), importing only
the public API, and each one runs top to bottom with `REFIMPL_FAST=1` in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
TIMEOUT_S = 600  # per notebook: a cold Numba cache compiles the kernels on first use
MIN_TASKS = 2  # "predict, then run" questions per notebook
SLOW_NOTEBOOK_S = 60.0  # warm, each notebook runs in under 10 s on 2 cores


def _ids(paths: list[Path]) -> list[str]:
    return [p.stem for p in paths]


WALKTHROUGHS = {"01_tiled_attention_and_sram", "02_cost_model_and_pareto", "03_paged_kv_cache",
                "04_scheduling_slos", "05_decode_batching", "06_admission_and_the_ladder",
                "07_end_to_end"}
EXERCISES_DIR = NOTEBOOKS_DIR.parent / "exercises"


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
def test_notebook_points_to_a_graded_exercise_that_exists(path):
    text = "".join("".join(cell["source"]) for cell in json.loads(path.read_text())["cells"])
    named = set(re.findall(r"exercises/(\w+)", text)) | set(re.findall(r'exercise="(\w+)"', text))
    assert named, f"{path.name} points to no exercise"
    for exercise in named:
        assert (EXERCISES_DIR / exercise / "README.md").is_file(), f"no exercise {exercise!r}"


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
# A learner task (a cell tagged "task" holding `answer_NAME = None`, its check the next code
# cell) runs three times: as committed (the check must pass unanswered), with the cell's
# metadata "wrong_answer" (the check must raise WrongAnswer), then with the true value that
# WrongAnswer carries (the check must pass). Prints "tasks: N" for the test to count.
_RUNNER = """
import json, re, sys, time
from refimpl.grading import WrongAnswer
cells = [c for c in json.load(open(sys.argv[1]))["cells"] if c["cell_type"] == "code"]
namespace = {"__name__": "__main__"}
def run(source, label):
    started = time.perf_counter()
    exec(compile(source, f"{sys.argv[1]}:{label}", "exec"), namespace)
    print(f"{label}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
tasks, checked = 0, set()
for index, cell in enumerate(cells):
    source = "".join(cell["source"])
    run(source, f"cell {index}")
    if "task" not in cell.get("metadata", {}).get("tags", []):
        continue
    name = re.search(r"^(answer_\\w+) = None\\b", source, re.M).group(1)
    wrong = cell["metadata"]["wrong_answer"]
    check = "".join(cells[index + 1]["source"])
    assert f"{name}," in check and "check_answer(" in check, f"cell {index + 1} checks {name}"
    run(check, f"cell {index + 1} unanswered")
    namespace[name] = eval(wrong, namespace)
    try:
        run(check, f"cell {index + 1} answered {wrong}")
    except WrongAnswer as error:
        namespace[name] = error.truth
    else:
        raise AssertionError(f"cell {index + 1} took the wrong answer {wrong} for {name}")
    run(check, f"cell {index + 1} answered right")
    tasks += 1
print(f"tasks: {tasks}")
"""


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_runs_in_fast_mode(path, tmp_path):
    """Every code cell runs top to bottom with REFIMPL_FAST=1, in a fresh interpreter.

    A plain Python process runs the learner tasks' wrong and right answers too;
    `test_notebook_runs_in_a_jupyter_kernel` runs the notebook as committed in a real kernel.
    """
    pytest.importorskip("ipywidgets")
    pytest.importorskip("IPython")
    env = {**os.environ, "REFIMPL_FAST": "1", "MPLBACKEND": "Agg", "TMPDIR": str(tmp_path)}
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", _RUNNER, str(path)], cwd=NOTEBOOKS_DIR,
                            env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert result.returncode == 0, f"{path.name} failed:\n{result.stderr[-3000:]}"
    tasks = int(result.stdout.rsplit("tasks:", 1)[1])
    assert tasks >= MIN_TASKS, f"{path.name} has {tasks} learner tasks, fewer than {MIN_TASKS}"
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


CELL_TIMEOUT_S = 240  # a kernel cell; the plain run above has already warmed the Numba cache


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_runs_in_a_jupyter_kernel(path, tmp_path, monkeypatch):
    """The notebook as committed runs in a real IPython kernel (nbclient), with REFIMPL_FAST=1.

    A cell gets CELL_TIMEOUT_S. The kernel's messaging once lost a reply on this machine and
    stalled a run; a lost reply (a cell timeout or a dead kernel) is retried once, in a fresh
    kernel, and said in a warning. A cell that raises fails at once: that is the notebook's bug.
    """
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    for name, value in {"REFIMPL_FAST": "1", "MPLBACKEND": "Agg", "TMPDIR": str(tmp_path),
                        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
                        "IPYTHONDIR": str(tmp_path / "ipython")}.items():
        monkeypatch.setenv(name, value)  # the kernel inherits them; nothing under $HOME
    for attempt in (1, 2):
        notebook = nbformat.read(path, as_version=4)
        client = nbclient.NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                         resources={"metadata": {"path": str(NOTEBOOKS_DIR)}})
        try:
            client.execute()
            break
        except (CellTimeoutError, DeadKernelError) as lost:
            if attempt == 2:
                raise
            warnings.warn(f"{path.name}: kernel reply lost ({type(lost).__name__}); retried",
                          stacklevel=1)
    errors = [output for cell in notebook.cells for output in cell.get("outputs", [])
              if output.get("output_type") == "error"]
    assert not errors
    printed = "".join(output.get("text", "") for cell in notebook.cells
                      for output in cell.get("outputs", []))
    assert "not answered" in printed  # the learner tasks ran, unanswered as committed
