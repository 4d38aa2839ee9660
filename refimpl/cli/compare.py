"""`refimpl compare A.json B.json ...`: saved run reports side by side, differences marked."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `compare` subcommand."""
    parser = subparsers.add_parser(
        "compare", help="saved run reports side by side, differences marked",
        description="Show the figures of saved run reports (from simulate/run/demo --json, or "
        "a sweep's runs/*.json) side by side, one column per policy in each; each figure's "
        "change against the first column is shown, marked + (better) or - (worse) from "
        "--threshold on; then the settings that differ.")
    parser.add_argument("reports", nargs="+", type=Path, metavar="REPORT.json")
    parser.add_argument("--threshold", type=float, default=0.05, metavar="SHARE",
                        help="mark changes at least this large (default: 0.05, 5%%)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the comparison."""
    from refimpl.errors import ConfigError
    from refimpl.report.compare import compare_reports, format_compare, load_reports

    if not args.threshold >= 0:
        raise ConfigError("threshold", args.threshold, "must be at least 0")
    comparison = compare_reports(load_reports(args.reports), args.threshold)
    print(format_compare(comparison, color=sys.stdout.isatty()))
    return 0
