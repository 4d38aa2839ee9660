"""`refimpl practice`: today's exercise and what passed when each was last graded."""

from __future__ import annotations

import argparse
from datetime import date

from refimpl.grading import catalogue
from refimpl.grading.practice import exercise_of_the_day, load_progress, progress_path


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `practice` subcommand."""
    parser = subparsers.add_parser(
        "practice",
        help="today's exercise and your progress",
        description="Show the exercise of the day (the same for everyone on a given date) and "
        "the last grade of each exercise, which `refimpl grade` records.",
    )
    parser.add_argument("--date", type=date.fromisoformat, default=None, metavar="YYYY-MM-DD",
                        help="pick for this day instead of today")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print today's exercise, its last result test by test, and the progress table."""
    exercises = catalogue()
    day = args.date or date.today()
    today = exercise_of_the_day(exercises, day)
    path = progress_path()
    progress = load_progress(path)
    print(f"exercise of {day.isoformat()}: {today.name} ({today.difficulty}, {today.points} "
          f"points) - {today.topic}")
    print(f"  read  {today.readme}")
    print(f"  edit  {today.starter}")
    print(f"  grade refimpl grade {today.name} --solution {today.starter}")
    last = progress.get(today.name)
    if last:
        print(f"\nlast time ({last['graded_at']}): {last['score']}/{last['max_score']}")
        for name in last["passed"]:
            print(f"  passed  {name}")
        for name in last["failed"]:
            print(f"  failed  {name}")
    print(f"\nprogress ({path}):")
    for exercise in exercises:
        entry = progress.get(exercise.name)
        status = f"{entry['score']}/{entry['max_score']}" if entry else "not graded yet"
        print(f"  {exercise.name:<24}{status}")
    return 0
