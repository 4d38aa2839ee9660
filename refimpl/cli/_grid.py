"""Options shared by `sweep` and `capacity`: the grid (a TOML file and/or flags) and where
its cells run (Ray workers, a cluster's address, or serially)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from refimpl.config import MODEL_PRESETS, SLO_PRESETS, SLO_SETS, preset_names
from refimpl.costmodel.choose import STEP_MODELS
from refimpl.sched import POLICIES
from refimpl.sweeps.grid import SweepGrid, load_grid
from refimpl.workloads import synthetic_names


def add_grid_options(parser: argparse.ArgumentParser, *, rates: bool = True) -> None:
    """GRID (a TOML file), and one flag per axis or shared setting (each replaces the file's)."""
    parser.add_argument("grid", nargs="?", type=Path, metavar="GRID.toml",
                        help="a grid file (TOML: workload, policy, rate, slo, classes, seed, "
                        "num_requests, model, hardware, step_model, admission, policy_params); "
                        "flags replace what it says")
    parser.add_argument("--workload", nargs="+", metavar="NAME_OR_PATH",
                        help=f"synthetic workloads ({', '.join(synthetic_names())}) or trace "
                        "files (default: azure-conv-like)")
    parser.add_argument("--policy", nargs="+", choices=[*POLICIES, "all"], metavar="POLICY",
                        help=f"policies ({', '.join(POLICIES)}, or all) (default: slo)")
    if rates:
        parser.add_argument("--rate", nargs="+", type=float, metavar="REQ_PER_S",
                            help="arrival rates in requests/s (default: the workload's own)")
    parser.add_argument("--slo", nargs="+", metavar="NAME",
                        help=f"SLO presets, one class for every request ({', '.join(SLO_PRESETS)}"
                        ") (default: default)")
    parser.add_argument("--classes", nargs="+", metavar="NAME:SHARE,...",
                        help="SLO class mixes, e.g. interactive:0.3,batch:0.7, or named sets "
                        f"({', '.join(SLO_SETS)}); with --slo, both are on the axis")
    parser.add_argument("--seed", nargs="+", type=int, metavar="N",
                        help="seeds of the workloads and their classes (default: 0)")
    parser.add_argument("--num-requests", type=int, metavar="N",
                        help="requests per run (default: 500)")
    parser.add_argument("--model", choices=list(MODEL_PRESETS),
                        help="model preset (default: llama-3-8b)")
    parser.add_argument("--hardware", choices=list(preset_names()),
                        help="hardware preset (default: h100-sxm)")
    parser.add_argument("--step-model", choices=list(STEP_MODELS),
                        help="the simulated clock (default: auto)")
    parser.add_argument("--admission", action=argparse.BooleanOptionalAction, default=None,
                        help="admission control for every policy (default: on for slo only)")


def add_execution_options(parser: argparse.ArgumentParser, out: str) -> None:
    """--out, --workers, --serial, --address."""
    parser.add_argument("--out", type=Path, default=Path(out), metavar="DIR",
                        help="tables, plots, per-run JSON and the cache of finished runs (run "
                        f"again into the same folder to resume) (default: ./{out})")
    parser.add_argument("--workers", type=int, metavar="N",
                        help="Ray workers, one core each (default: one per core; 0: no Ray, "
                        "in this process)")
    parser.add_argument("--serial", action="store_true",
                        help="run in this process without Ray (the same as --workers 0)")
    parser.add_argument("--address", metavar="HOST:PORT",
                        help="join the Ray cluster at this address (default: start one here)")


def grid_from_args(args: argparse.Namespace) -> SweepGrid:
    """The grid the file and the flags describe (flags win, axis by axis)."""
    slos = [*(args.slo or []), *(args.classes or [])] or None
    values = {"workloads": args.workload, "policies": args.policy,
              "rates": getattr(args, "rate", None), "slos": slos, "seeds": args.seed,
              "num_requests": args.num_requests, "model": args.model,
              "hardware": args.hardware, "step_model": args.step_model,
              "admission": args.admission}
    if args.grid is not None:
        return load_grid(args.grid, **values)
    return SweepGrid(**{k: v for k, v in values.items() if v is not None})


def workers_of(args: argparse.Namespace) -> int | None:
    """0 for --serial, else --workers (None: one per core)."""
    return 0 if args.serial else args.workers


def progress_bar(label: str):
    """A progress bar on stderr when it is a terminal, else None."""
    from refimpl.report.progress import ProgressBar

    return ProgressBar(label) if sys.stderr.isatty() else None
