"""Practice mode: an exercise of the day, and the learner's progress kept between runs.

The pick is `date.toordinal() % len(catalogue)`, so everyone gets the same exercise on the
same day and the catalogue comes round in order. Progress is the last grade of each
exercise, stored as JSON in refimpl's cache folder (`practice.json`, or the file named by
`REFIMPL_PRACTICE_FILE`); `refimpl grade` writes it, `refimpl practice` reads it.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, date, datetime
from pathlib import Path

from refimpl.config.probe import cache_dir
from refimpl.grading.catalogue import Exercise
from refimpl.grading.report import GradeReport

__all__ = ["PRACTICE_ENV", "exercise_of_the_day", "load_progress", "progress_path", "record"]

PRACTICE_ENV = "REFIMPL_PRACTICE_FILE"


def progress_path() -> Path:
    """Where progress is kept: `REFIMPL_PRACTICE_FILE`, else `practice.json` in the cache."""
    return Path(os.environ.get(PRACTICE_ENV) or cache_dir() / "practice.json")


def exercise_of_the_day(exercises: list[Exercise], day: date) -> Exercise:
    """The exercise for `day`: the same for everyone, cycling through the catalogue."""
    return exercises[day.toordinal() % len(exercises)]


def load_progress(path: Path) -> dict[str, dict]:
    """Last grade per exercise name; an absent or damaged file counts as no progress."""
    try:
        progress = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return progress if isinstance(progress, dict) else {}


def record(report: GradeReport, path: Path) -> None:
    """Store `report` as the last grade of its exercise."""
    progress = load_progress(path)
    progress[report.exercise] = {
        "score": report.score,
        "max_score": report.max_score,
        "passed": [test.name for test in report.tests if test.passed],
        "failed": [test.name for test in report.tests if not test.passed],
        "graded_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(progress, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)  # atomic: a reader sees the old file or the new one
