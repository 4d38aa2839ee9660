"""The exercise catalogue: where the exercises folder is, and what each exercise is.

The folder is found, in order: `REFIMPL_EXERCISES` (any copy of the folder); then
`exercises/` beside the `refimpl` package, which is where it is in a source checkout and in
an editable install (`pip install -e .`, the course's install). A wheel does not carry the
exercises, so an installed refimpl needs `REFIMPL_EXERCISES` pointing at a checkout's folder.
Each exercise folder holds `<name>.py` (the starter), `test_<name>.py` (graded tests),
`README.md`, and `.meta/` with `solution.py` and `config.toml` (topic, difficulty, points).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from refimpl.errors import GradingError

__all__ = ["EXERCISES_ENV", "Exercise", "GradingError", "catalogue", "exercises_dir",
           "find_exercise"]

EXERCISES_ENV = "REFIMPL_EXERCISES"
DIFFICULTIES = ("warm-up", "easy", "medium", "hard")  # the catalogue lists them in this order


@dataclass(frozen=True)
class Exercise:
    """One exercise folder and its catalogue entry."""

    name: str
    path: Path
    topic: str
    difficulty: str
    points: int  # the sum of the graded tests' points
    source: str

    @property
    def starter(self) -> Path:
        """The file the learner edits."""
        return self.path / f"{self.name}.py"

    @property
    def tests(self) -> Path:
        """The graded tests."""
        return self.path / f"test_{self.name}.py"

    @property
    def solution(self) -> Path:
        """The reference solution."""
        return self.path / ".meta" / "solution.py"

    @property
    def readme(self) -> Path:
        """The instructions."""
        return self.path / "README.md"


def exercises_dir() -> Path:
    """The exercises folder (see the module docstring for the search order)."""
    if os.environ.get(EXERCISES_ENV):
        path = Path(os.environ[EXERCISES_ENV])
        if not (path / "pytest.ini").is_file():
            raise GradingError(EXERCISES_ENV, str(path), "is not an exercises folder "
                               "(no pytest.ini in it)")
        return path
    path = Path(__file__).resolve().parents[2] / "exercises"
    if not (path / "pytest.ini").is_file():
        raise GradingError(EXERCISES_ENV, None, f"not set, and no exercises folder at {path} "
                           "(refimpl is not a source checkout): point it at a checkout's "
                           "exercises/ folder")
    return path


def _load(path: Path) -> Exercise:
    meta = tomllib.loads((path / ".meta" / "config.toml").read_text(encoding="utf-8"))
    return Exercise(name=path.name, path=path, topic=meta["topic"],
                    difficulty=meta["difficulty"], points=int(meta["points"]),
                    source=meta.get("source", ""))


def catalogue(root: Path | None = None) -> list[Exercise]:
    """Every exercise, warm-ups first, then by difficulty and name."""
    root = root if root is not None else exercises_dir()
    found = [_load(path) for path in root.iterdir() if (path / ".meta" / "config.toml").is_file()]
    return sorted(found, key=lambda ex: (DIFFICULTIES.index(ex.difficulty), ex.name))


def find_exercise(name: str, root: Path | None = None) -> Exercise:
    """The exercise called `name`; a `GradingError` listing the catalogue if there is none."""
    exercises = catalogue(root)
    for exercise in exercises:
        if exercise.name == name:
            return exercise
    raise GradingError("exercise", name, "unknown exercise",
                       choices=[exercise.name for exercise in exercises])
