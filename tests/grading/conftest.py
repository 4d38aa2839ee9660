"""Shared set-up of the grader's tests: grading jobs run two at a time, and a private cache.

Each grading run is a child process that spends most of its time starting Python and pytest,
so the tests submit their runs to one pool up front and collect the reports as they finish.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from refimpl.grading import GradeReport, grade

GradeJob = Callable[..., "Future[GradeReport]"]


@pytest.fixture(scope="session")
def submit() -> Iterator[GradeJob]:
    """`submit(exercise, file, **limits)` starts grading in the pool and returns a future."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield lambda exercise, path, **limits: pool.submit(grade, exercise, path, **limits)


@pytest.fixture(scope="session")
def solutions_dir() -> Path:
    """The folder of hand-written (mostly wrong) solutions, one subfolder per exercise."""
    return Path(__file__).parent / "solutions"


@pytest.fixture(autouse=True)
def private_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Keep practice progress out of the user's cache."""
    path = tmp_path / "practice.json"
    monkeypatch.setenv("REFIMPL_PRACTICE_FILE", str(path))
    return path

