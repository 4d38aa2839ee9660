"""`refimpl sweep`: a grid of simulated runs on Ray (or serially), one tidy table, cached."""

from __future__ import annotations

import argparse

from refimpl.cli._grid import (
    add_execution_options,
    add_grid_options,
    grid_from_args,
    progress_bar,
    workers_of,
)
from refimpl.cli._paths import check_output_dir
from refimpl.errors import ConfigError


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `sweep` subcommand."""
    parser = subparsers.add_parser(
        "sweep", help="a grid of runs (workload x policy x rate x SLO set x seed) on Ray",
        description="Simulate every cell of a grid (workload x SLO set x policy x its "
        "parameters x rate x seed), each one reproducible run, on Ray workers (embedded, or "
        "a cluster with --address) or serially; write one tidy table (sweep.parquet, "
        "sweep.csv), each run's JSON report, and goodput and attainment against rate (PNG). "
        "Finished runs are cached in the output folder by a hash of their settings and "
        "refimpl's version: the same command again resumes an interrupted sweep.")
    add_grid_options(parser)
    add_execution_options(parser, "refimpl-sweep")
    parser.add_argument("--requests", action="store_true",
                        help="also keep each run's per-request records "
                        "(runs/KEY.requests.parquet)")
    parser.add_argument("--no-plots", action="store_true", help="write no PNGs")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the sweep, print its table, write the files."""
    from refimpl.metrics.table import render_columns
    from refimpl.sweeps import sweep
    from refimpl.sweeps.plots import save_sweep_plots

    check_output_dir("out", args.out)
    if args.serial and args.address:
        raise ConfigError("address", args.address, "cannot be used with --serial")
    grid = grid_from_args(args)
    cells = grid.cells()
    num_policies = sum(len(grid.policy_params.get(p, [{}])) for p in grid.policies)
    print(f"sweep: {len(cells)} runs ({len(grid.workloads)} workloads x {len(grid.slos)} SLO "
          f"sets x {num_policies} policy settings x {len(grid.rates)} rates x "
          f"{len(grid.seeds)} seeds) into {args.out}")
    result = sweep(grid, args.out, workers=workers_of(args), address=args.address,
                   with_requests=args.requests, progress=progress_bar("sweep"))
    print(render_columns(*_rows(result.table)))
    where = "serially" if workers_of(args) == 0 else (
        f"on Ray, {result.num_workers} workers (start-up {result.startup_s:.1f} s)"
        if result.startup_s else "on Ray (nothing to run)")
    print(f"{len(cells) - result.num_cached} runs {where}, {result.num_cached} from the "
          f"cache, in {result.wall_s:.1f} s")
    print(f"table: {', '.join(str(p) for p in result.paths)}; runs: {result.folder / 'runs'}")
    if not args.no_plots:
        print(f"plots: {', '.join(str(p) for p in save_sweep_plots(result.table, args.out))}")
    return 0


def _rows(table: dict[str, list]) -> tuple[list[str], list[list[str]]]:
    """The printed summary: the axes that vary, then the headline figures."""
    from refimpl.report.units import format_seconds

    axes = [name for name in ("workload", "slo", "policy", "policy_params", "rate", "seed")
            if len(set(map(str, table[name]))) > 1 or name == "policy"]
    header = [*axes, "SLO met", "good req/s", "TTFT p99", "TPOT p99", "rejected"]

    def seconds(value):
        return "-" if value is None else format_seconds(value)

    rows = []
    for i in range(len(table["cell"])):
        rows.append([*(str(table[name][i]) for name in axes),
                     "-" if table["slo_attainment"][i] is None
                     else f"{100 * table['slo_attainment'][i]:.1f}%",
                     "-" if table["goodput_req_s"][i] is None
                     else f"{table['goodput_req_s'][i]:.3g}",
                     seconds(table["ttft_p99_s"][i]), seconds(table["tpot_p99_s"][i]),
                     f"{table['num_rejected'][i]:,}"])
    return header, rows
