"""A grading result: per-test points and messages, as a text table and as JSON.

The JSON shape is an interface (instructors' scripts read it): `exercise`, `score`,
`max_score`, and `tests`, each with `name`, `points`, `max_points`, `passed` and `message`;
`title`, `solution`, `error` and `duration_s` are extra.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["GradeReport", "TestResult"]


@dataclass(frozen=True)
class TestResult:
    """One graded test: the points it earned of those it was worth, and why it failed."""

    __test__ = False  # not a pytest test class, despite the name

    name: str  # the test function, e.g. "test_a_single_node_has_no_next"
    title: str  # its docstring's first line: what learners read
    points: int  # earned: max_points if passed, else 0
    max_points: int
    passed: bool
    message: str  # "" when passed; one line saying what went wrong otherwise


@dataclass(frozen=True)
class GradeReport:
    """The grade of one solution file on one exercise."""

    exercise: str
    solution: str  # path of the graded file
    tests: tuple[TestResult, ...]
    max_score: int
    error: str = ""  # set when the tests could not run at all (then every test is lost)
    duration_s: float = 0.0

    @property
    def score(self) -> int:
        """Points earned over all tests."""
        return sum(test.points for test in self.tests)

    def to_dict(self) -> dict[str, object]:
        """The JSON-ready form."""
        return {
            "exercise": self.exercise,
            "score": self.score,
            "max_score": self.max_score,
            "tests": [asdict(test) for test in self.tests],
            "solution": self.solution,
            "error": self.error,
            "duration_s": round(self.duration_s, 3),
        }

    def write_json(self, path: str | Path) -> None:
        """Write the report as JSON to `path` (folders created as needed)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")

    def format_table(self) -> str:
        """A table of the tests (points, pass/fail, title, message) ending in `score: X/Y`."""
        lines = [f"{self.exercise}: {self.solution}", ""]
        for test in self.tests:
            mark = "PASS" if test.passed else "FAIL"
            lines.append(f"  {test.points:>3}/{test.max_points:<3} {mark}  {test.title}")
            if test.message:
                lines.append(f"              {test.message}")
        if self.error:
            lines.append(f"  error: {self.error}")
        lines += ["", f"score: {self.score}/{self.max_score}"]
        return "\n".join(lines)
