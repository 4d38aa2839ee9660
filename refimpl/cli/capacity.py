"""`refimpl capacity`: each policy's capacity (highest rate meeting an attainment target)."""

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
    """Add the `capacity` subcommand."""
    parser = subparsers.add_parser(
        "capacity", help="each policy's capacity: the highest rate meeting an SLO attainment",
        description="Search each policy's capacity (DistServe's definition: the highest "
        "arrival rate at which --target of all requests meet both their TTFT and TPOT "
        "targets) by doubling or halving from --start-rate until a rate passes and a higher "
        "one fails, then bisecting to --tolerance; the searches of all policies run side by "
        "side on Ray (or serially). Reports attainment at the answer and at the failing rate "
        "just above it, and vLLM's goodput (good requests/s) at both. Probes are cached like "
        "sweep cells: the same command again resumes.")
    add_grid_options(parser, rates=False)
    add_execution_options(parser, "refimpl-capacity")
    parser.add_argument("--target", type=float, default=0.9, metavar="SHARE",
                        help="attainment that must hold (default: 0.9)")
    parser.add_argument("--tolerance", type=float, default=0.02, metavar="SHARE",
                        help="precision of the answer as a share of it: the rate this much "
                        "above it was measured to fail (default: 0.02)")
    parser.add_argument("--start-rate", type=float, metavar="REQ_PER_S",
                        help="the first rate probed (default: the workload's own)")
    parser.add_argument("--max-rate", type=float, default=1e4, metavar="REQ_PER_S",
                        help="doubling stops here (default: 10000)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the searches and print one row per policy."""
    from refimpl.sweeps.run_capacity import capacity

    check_output_dir("out", args.out)
    if args.serial and args.address:
        raise ConfigError("address", args.address, "cannot be used with --serial")
    result = capacity(grid_from_args(args), args.out, target=args.target,
                      tolerance=args.tolerance, start_rate=args.start_rate,
                      max_rate=args.max_rate, workers=workers_of(args), address=args.address,
                      progress=progress_bar("capacity"))
    print(format_capacity(result.rows, args.target, args.tolerance))
    print(f"{result.num_cells} runs in {result.num_rounds} rounds ({result.num_cached} from the "
          f"cache) in {result.wall_s:.1f} s; report: {result.paths[0]}")
    return 0


def format_capacity(rows: list[dict], target: float, tolerance: float) -> str:
    """One line per search: capacity, attainment and goodput at it and just above."""
    from refimpl.metrics.table import render_columns

    varied = [k for k in ("workload", "slo", "policy_params")
              if len({str(r[k]) for r in rows}) > 1]
    header = ["policy", *varied, "capacity req/s", "SLO met", "good req/s", "above req/s",
              "SLO met above", "good req/s above", "probes"]

    def num(value):
        return "-" if value is None else f"{value:.3g}"

    def pct(value):
        return "-" if value is None else f"{100 * value:.1f}%"

    body = []
    for r in rows:
        answer = num(r["capacity_req_s"]) + {"bracketed": "", "at_max_rate": " (max)",
                                             "below_min_rate": " (none)"}[r["bounded"]]
        body.append([r["policy"], *(str(r[k]) for k in varied), answer,
                     pct(r["attainment_at_capacity"]), num(r["goodput_at_capacity_req_s"]),
                     num(r["rate_above_req_s"]), pct(r["attainment_above"]),
                     num(r["goodput_above_req_s"]), str(len(r["probes"]))])
    return (f"capacity: highest rate with >= {target:.0%} of requests meeting both SLOs "
            f"(DistServe), to {tolerance:.1%}; good req/s: requests meeting both SLOs per "
            f"second (vLLM's goodput)\n" + render_columns(header, body))
