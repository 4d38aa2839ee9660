"""The notebooks' "predict, then run" tasks: a learner's prediction checked against the run.

A task is two cells: one where the learner writes a prediction (`answer_NAME = None` as
committed), and one that computes the true value from the run and calls `check_answer`.
An unanswered task shows the value and moves on, so the notebook still runs top to bottom;
a wrong prediction raises `WrongAnswer` (an `AssertionError`: the check failed), which keeps
the true value for tests and hides it from the message, so the learner can try again.
"""

from __future__ import annotations

import math
from numbers import Real

from refimpl.errors import ConfigError

__all__ = ["WrongAnswer", "check_answer"]


class WrongAnswer(AssertionError):
    """A prediction that is not the run's value (within the task's tolerance)."""

    def __init__(self, task: str, answer: object, truth: object, hint: str = "") -> None:
        self.task, self.answer, self.truth = task, answer, truth
        message = f"task {task!r}: {answer!r} is not it."
        if hint:
            message += f" Hint: {hint.rstrip('.')}."
        message += f" Try again, or set answer_{task} = None to see the value."
        super().__init__(message)


def _matches(answer: object, truth: object, rel_tol: float) -> bool:
    """Numbers within `rel_tol` of the truth (relative), anything else equal (a yes/no is
    not a count: True is not 1)."""
    if isinstance(answer, bool) or isinstance(truth, bool):
        return isinstance(answer, bool) and isinstance(truth, bool) and answer == truth
    if isinstance(answer, Real) and isinstance(truth, Real):
        return math.isclose(float(answer), float(truth), rel_tol=rel_tol, abs_tol=0.0)
    if isinstance(truth, str) and isinstance(answer, str):
        return answer.strip().lower() == truth.strip().lower()
    return answer == truth


def check_answer(task: str, answer: object, truth: object, *, rel_tol: float = 0.0,
                 hint: str = "", exercise: str = "") -> bool:
    """Whether the learner's `answer` to `task` is the run's `truth`; False when unanswered,
    `WrongAnswer` when wrong. Prints the verdict and, if given, the matching exercise."""
    if not task.isidentifier():
        raise ConfigError("task", task, "must be a Python identifier (it names answer_<task>)")
    if not (isinstance(rel_tol, Real) and 0.0 <= rel_tol < 1.0):
        raise ConfigError("rel_tol", rel_tol, "must be a relative tolerance in [0, 1)")
    then = f" Drill it: exercises/{exercise} (`pytest exercises/{exercise}`)." if exercise else ""
    if answer is None:
        print(f"task {task!r}: not answered. The run says {truth!r}.{then}")
        return False
    if not _matches(answer, truth, rel_tol):
        raise WrongAnswer(task, answer, truth, hint)
    tolerance = f" (within {rel_tol:.0%})" if rel_tol else ""
    print(f"task {task!r}: right{tolerance}, the run says {truth!r}.{then}")
    return True
