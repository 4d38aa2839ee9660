"""Running tests leaves the user's home alone: nothing written under `~` or `~/.cache`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# A sample that reaches every writer of refimpl's cache folder: the cpu-local probe (measured
# for real by `refimpl info`, faked by the hardware tests), and practice progress; and an
# embedded Ray cluster (which would write an auth token to ~/.ray unless refimpl gives it one).
SAMPLE = [
    "tests/config/test_hardware.py",
    "tests/cli/test_cli.py::test_info_prints_caches_budget_and_every_preset_with_kv_figures",
    "tests/grading/test_cli_and_report.py::test_a_damaged_progress_file_counts_as_no_progress",
    "tests/sweeps/test_ray.py::test_a_sweep_gives_the_same_table_serially_and_on_ray_with_two_"
    "workers",
]


def test_a_sample_of_the_suite_writes_nothing_under_home(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {key: value for key, value in os.environ.items()
           if key not in {"REFIMPL_CACHE_DIR", "XDG_CACHE_HOME", "REFIMPL_PRACTICE_FILE"}}
    env["HOME"] = str(home)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-p", "no:randomly", *SAMPLE], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    written = sorted(str(path.relative_to(home)) for path in home.rglob("*"))
    assert written == [], f"the tests wrote under HOME: {written}"
