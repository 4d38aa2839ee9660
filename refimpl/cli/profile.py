"""`refimpl profile`: time the kernel candidates and GEMMs, fit the model, save the cost table."""

from __future__ import annotations

import argparse
from pathlib import Path

from refimpl.cli._paths import check_output_path
from refimpl.report.units import format_bytes, format_seconds, format_spread


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `profile` subcommand."""
    parser = subparsers.add_parser(
        "profile", help="profile kernel candidates on this CPU and save the cost table",
        description="Time every kernel candidate over a grid of (B, T) (one thread), fit the "
        "latency model, report its held-out error beside the DistServe baseline, and save the "
        "table `refimpl pareto` and the engine read.")
    parser.add_argument("--quick", action="store_true", help="small grid and few candidates "
                        "(well under a minute; the default is the full grid, about 20 minutes)")
    parser.add_argument("--out", metavar="FILE", type=Path, help="where to save the table "
                        "(default: this machine's table in refimpl's cache folder)")
    parser.add_argument("--model", default="tiny", help="model preset whose attention heads "
                        "and linear layers are profiled (default: tiny)")
    parser.add_argument("--budget-s", type=float, metavar="S", help="wall-clock budget of the "
                        "kernel grid (default: the mode's)")
    parser.add_argument("--sram-budget", type=int, metavar="BYTES", help="SRAM budget S for "
                        "the picks (default: this CPU's L2 per core)")
    parser.add_argument("--plot", metavar="PNG", type=Path, help="also plot the model's "
                        "held-out residuals per phase, beside the baseline's, to this file")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Profile, fit, save and summarise."""
    from refimpl.config import HardwareSpec, ModelConfig
    from refimpl.costmodel.candidates import RAGGED_DECODE
    from refimpl.costmodel.profile import run_profile
    from refimpl.costmodel.profiled import build_profiled_table
    from refimpl.costmodel.table import default_table_path

    model = ModelConfig.preset(args.model)
    hardware = HardwareSpec.preset("cpu-local")
    out = args.out or default_table_path(model.name)
    check_output_path("out", out)  # minutes of profiling are not lost to an unwritable path
    if args.plot is not None:
        check_output_path("plot", args.plot)
    result = run_profile(model, "quick" if args.quick else "full", budget_s=args.budget_s)
    table = build_profiled_table(result, hardware, args.sram_budget)
    table.save(out)
    print(f"profiled {len(result.samples)} (candidate, shape) points of {model.name} in "
          f"{result.duration_s:.1f} s ({result.mode} mode); "
          f"{len(result.skipped)} shapes skipped (over the time budget, or a cap on KV "
          f"tokens or call time)")
    print(f"held-out MAPE per phase (fitted model vs DistServe-style a + b*tokens + "
          f"c*sum(len^2)), SRAM budget {format_bytes(table.sram_budget_bytes)}:")
    for phase, mape in table.info["heldout_mape"].items():
        caches = [table.info[key]["decode" if phase == RAGGED_DECODE else phase]
                  for key in ("cache_bytes", "reuse_cache_bytes")]
        call, reuse = ("none" if c is None else format_bytes(c) for c in caches)
        print(f"  {phase:<13} {100 * mape:6.1f} %   baseline "
              f"{100 * table.info['baseline_mape'][phase]:6.1f} %   round-to-round spread "
              f"{format_spread(table.info['heldout_spread'][phase])}   fitted caches "
              f"{call} (a call), {reuse} (a sequence's re-reads)")
    for phase, t in table.phases.items():
        name, time_s = t.lookup(t.batches[-1], t.seq_lens[-1])
        print(f"  {phase:<8} pick at B={t.batches[-1]} T={t.seq_lens[-1]}: {name} "
              f"({format_seconds(time_s)})")
    print(f"saved {out}")
    if args.plot is not None:
        from refimpl.costmodel.residuals import plot_residuals

        print(f"wrote {plot_residuals(table.info, args.plot)}")
    return 0
