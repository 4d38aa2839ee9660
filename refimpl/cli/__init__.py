"""The `refimpl` command: one module per subcommand, each adding its parser in `register`.

A subcommand module defines `register(subparsers)`, which adds its parser and sets
`run=<function(args) -> int>` as the parser default. Bad input surfaces as a `RefimplError`,
printed as one line on stderr with exit status 2, never as a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from refimpl._version import __version__
from refimpl.errors import RefimplError

__all__ = ["build_parser", "main"]

# Subcommand modules, in the order `refimpl --help` lists them.
SUBCOMMANDS = (
    "info", "demo", "simulate", "run", "sweep", "capacity", "compare", "profile", "pareto",
    "calibrate-gpu", "bench", "grade", "exercises", "practice",
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="refimpl",
        description="A measured reference implementation of an SLA-aware LLM serving stack.",
    )
    parser.add_argument("--version", action="version", version=f"refimpl {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"refimpl.cli.{name.replace('-', '_')}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line `argv` (default: `sys.argv[1:]`) and return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return int(args.run(args) or 0)
    except RefimplError as error:
        print(f"refimpl {args.command}: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `refimpl info | head`: the reader left; that is not an error
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps the exit flush quiet
        return 0
