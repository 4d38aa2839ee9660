"""`refimpl simulate`: serve a workload with a policy on the simulated clock and report."""

from __future__ import annotations

import argparse

from refimpl.cli._options import (
    add_export_options,
    add_policy_option,
    add_prefix_cache_option,
    add_workload_options,
)
from refimpl.cli._serve import report, simulate_policies
from refimpl.sched import POLICIES


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `simulate` subcommand."""
    parser = subparsers.add_parser(
        "simulate", help="replay a workload through a policy on a simulated clock",
        description="Replay a synthetic workload or a public trace through a scheduling "
        "policy; step times come from the cost model (analytic for spec-sheet GPUs).")
    add_workload_options(parser, model="llama-3-8b", hardware="h100-sxm", num_requests=None)
    add_policy_option(parser, default="slo")
    add_export_options(parser)
    parser.add_argument("--admission", action=argparse.BooleanOptionalAction, default=None,
                        help="admission control: accept, queue, degrade or reject each arrival "
                        "by predicted TTFT/TPOT p95 and KV peak (default: on for slo only)")
    add_prefix_cache_option(parser, "the trace has block hashes, as Mooncake's")
    parser.add_argument("--kv-pages", type=int, metavar="N",
                        help="KV pool of N pages (and a CPU tier as large) instead of the memory "
                        "the weights leave on the hardware: to study KV pressure")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Simulate and report."""
    policies = list(POLICIES) if args.policy == "all" else [args.policy]
    report(args, simulate_policies(args, policies))
    return 0
