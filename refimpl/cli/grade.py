"""`refimpl grade`: grade one solution file on one exercise, as a table and optional JSON."""

from __future__ import annotations

import argparse
from pathlib import Path

from refimpl.grading import grade
from refimpl.grading.plugin import DEFAULT_MEMORY_LIMIT_MB, DEFAULT_TIME_LIMIT_S
from refimpl.grading.practice import progress_path, record


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `grade` subcommand."""
    parser = subparsers.add_parser(
        "grade",
        help="grade a solution file on an exercise (pytest in a sandboxed process)",
        description="Run EXERCISE's graded tests against FILE in a separate process, with a "
        "time limit per test and a memory cap; print each test's points and `score: X/Y`. "
        "`refimpl exercises` lists the exercises.",
    )
    parser.add_argument("exercise", metavar="EXERCISE", help="exercise name, e.g. "
                        "linked_level_tree")
    parser.add_argument("--solution", required=True, metavar="FILE", type=Path,
                        help="the Python file to grade")
    parser.add_argument("--json", metavar="PATH", type=Path, help="also write the report as JSON")
    parser.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT_S, metavar="S",
                        help=f"seconds per test (default {DEFAULT_TIME_LIMIT_S:g})")
    parser.add_argument("--memory-limit-mb", type=int, default=DEFAULT_MEMORY_LIMIT_MB,
                        metavar="MIB", help="memory the tests may add, in MiB "
                        f"(default {DEFAULT_MEMORY_LIMIT_MB}; 0: no limit)")
    parser.add_argument("--no-record", action="store_true",
                        help="do not save the result as practice progress")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Grade, print the table, write the JSON and the progress."""
    report = grade(args.exercise, args.solution, time_limit_s=args.time_limit,
                   memory_limit_mb=args.memory_limit_mb)
    print(report.format_table())
    print(f"(graded in {report.duration_s:.1f} s)")
    if args.json is not None:
        report.write_json(args.json)
    if not args.no_record:
        record(report, progress_path())
    return 0
