"""Shared set-up of the graded exercises: the `points` marker and the `solution` fixture.

`solution` is the learner's module: the file named by `REFIMPL_SOLUTION` when `refimpl grade`
runs the tests, else the starter beside the tests (`<exercise>/<exercise>.py`), so
`pytest exercises/NAME` grades the file the learner is editing.
"""

from __future__ import annotations

import os
from types import ModuleType

import pytest

from refimpl.grading.loader import SOLUTION_ENV, load_solution


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers the graded tests use."""
    config.addinivalue_line("markers", "points(n): the points a graded test is worth")


@pytest.fixture(scope="module")
def solution(request: pytest.FixtureRequest) -> ModuleType:
    """The learner's solution module for the exercise whose tests are running."""
    exercise_dir = request.path.parent
    path = os.environ.get(SOLUTION_ENV) or exercise_dir / f"{exercise_dir.name}.py"
    return load_solution(path, exercise_dir.name)
