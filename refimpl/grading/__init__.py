"""Graded exercises: the catalogue, the isolated pytest runner, reports and practice mode.

`grade(exercise, solution_file)` runs the exercise's graded tests against the file in a
confined child process and returns a `GradeReport` (`runner.py` states the threat model:
what a hostile solution can try, what stops it, what is out of scope); `catalogue()` lists
the exercises. The pytest
plugin (`refimpl.grading.plugin`) and the measuring helpers (`refimpl.grading.measure`)
are used by the exercises' own tests. `check_answer` checks a notebook's "predict, then
run" tasks.
"""

from refimpl.grading.answers import WrongAnswer, check_answer
from refimpl.grading.catalogue import Exercise, GradingError, catalogue, find_exercise
from refimpl.grading.report import GradeReport, TestResult
from refimpl.grading.runner import grade

__all__ = [
    "Exercise",
    "GradeReport",
    "GradingError",
    "TestResult",
    "WrongAnswer",
    "catalogue",
    "check_answer",
    "find_exercise",
    "grade",
]
