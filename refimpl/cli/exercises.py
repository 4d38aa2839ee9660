"""`refimpl exercises`: the catalogue of graded exercises."""

from __future__ import annotations

import argparse

from refimpl.grading import catalogue
from refimpl.grading.catalogue import exercises_dir


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `exercises` subcommand."""
    parser = subparsers.add_parser(
        "exercises",
        help="list the graded exercises (name, topic, difficulty, points)",
        description="List the graded exercises. Attempt one by editing EXERCISE/EXERCISE.py "
        "in the folder shown, then `refimpl grade EXERCISE --solution FILE`.",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the catalogue."""
    exercises = catalogue()
    width = max(len(exercise.name) for exercise in exercises)
    print(f"{'name':<{width}}  {'difficulty':<10}  {'points':>6}  topic")
    for exercise in exercises:
        print(f"{exercise.name:<{width}}  {exercise.difficulty:<10}  {exercise.points:>6}  "
              f"{exercise.topic}")
    print(f"\n{len(exercises)} exercises, {sum(e.points for e in exercises)} points, "
          f"in {exercises_dir()}")
    return 0
