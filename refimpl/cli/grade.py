"""`refimpl grade`: grade one solution file on one exercise, as a table and optional JSON.

Exit status: 0 when the score reaches `--min-score` (default: full marks), 1 below it, as CI
scripts expect; 2 for bad input (an unknown exercise, a missing file, impossible limits, a
`--json` path that cannot be written), which is refused before any test runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from refimpl.cli._paths import check_output_path
from refimpl.errors import ConfigError
from refimpl.grading import find_exercise, grade
from refimpl.grading.plugin import DEFAULT_MEMORY_LIMIT_MB, DEFAULT_TIME_LIMIT_S
from refimpl.grading.practice import PRACTICE_ENV, progress_path, record
from refimpl.grading.runner import check_limits


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `grade` subcommand."""
    parser = subparsers.add_parser(
        "grade",
        help="grade a solution file on an exercise (pytest in an isolated process)",
        description="Run EXERCISE's graded tests against FILE in a confined child process, "
        "with a time limit per test and a memory cap; print each test's points and "
        "`score: X/Y`. Exits 0 at --min-score or above (default: full marks), 1 below. "
        "`refimpl exercises` lists the exercises.",
    )
    parser.add_argument("exercise", metavar="EXERCISE", help="exercise name, e.g. "
                        "linked_level_tree")
    parser.add_argument("--solution", required=True, metavar="FILE", type=Path,
                        help="the Python file to grade")
    parser.add_argument("--json", metavar="PATH", type=Path, help="also write the report as JSON")
    parser.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT_S, metavar="S",
                        help=f"seconds per test, above 0 (default {DEFAULT_TIME_LIMIT_S:g})")
    parser.add_argument("--memory-limit-mb", type=int, default=DEFAULT_MEMORY_LIMIT_MB,
                        metavar="MIB", help="memory the tests may add, in MiB "
                        f"(default {DEFAULT_MEMORY_LIMIT_MB}; 0: no limit)")
    parser.add_argument("--min-score", type=int, default=None, metavar="POINTS",
                        help="exit 0 from this score up, 1 below (default: full marks)")
    parser.add_argument("--no-record", action="store_true",
                        help="do not save the result as practice progress")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Check the inputs, grade, print the table, write the JSON and the progress."""
    check_limits(args.time_limit, args.memory_limit_mb)
    exercise = find_exercise(args.exercise)
    if args.min_score is not None and not 0 <= args.min_score <= exercise.points:
        raise ConfigError("min_score", args.min_score,
                          f"must be between 0 and {exercise.name}'s {exercise.points} points")
    if args.json is not None:
        check_output_path("json", args.json)
    if not args.no_record:
        check_output_path(PRACTICE_ENV, progress_path())
    report = grade(args.exercise, args.solution, time_limit_s=args.time_limit,
                   memory_limit_mb=args.memory_limit_mb)
    print(report.format_table())
    print(f"(graded in {report.duration_s:.1f} s)")
    if args.json is not None:
        report.write_json(args.json)
    if not args.no_record:
        record(report, progress_path())
    needed = report.max_score if args.min_score is None else args.min_score
    return 0 if report.score >= needed else 1
