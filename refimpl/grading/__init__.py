"""Graded exercises: the catalogue, the sandboxed pytest runner, reports and practice mode.

`grade(exercise, solution_file)` runs the exercise's graded tests against the file in a
child process and returns a `GradeReport`; `catalogue()` lists the exercises. The pytest
plugin (`refimpl.grading.plugin`) and the measuring helpers (`refimpl.grading.measure`)
are used by the exercises' own tests.
"""

from refimpl.grading.catalogue import Exercise, GradingError, catalogue, find_exercise
from refimpl.grading.report import GradeReport, TestResult
from refimpl.grading.runner import grade

__all__ = [
    "Exercise",
    "GradeReport",
    "GradingError",
    "TestResult",
    "catalogue",
    "find_exercise",
    "grade",
]
