"""`refimpl run`: serve a workload on a real model executed by refimpl's kernels, and report."""

from __future__ import annotations

import argparse
import sys

from refimpl.cli._options import (
    add_export_options,
    add_policy_option,
    add_prefix_cache_option,
    add_workload_options,
    check_export_paths,
    slo_set_of,
)
from refimpl.model import LLAMA_PRESETS
from refimpl.report.progress import ProgressBar
from refimpl.sched import POLICIES


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `run` subcommand."""
    parser = subparsers.add_parser(
        "run", help="serve a workload on a real Llama-style model on this CPU",
        description="Serve a workload on a Llama-style model executed by refimpl's own kernels "
        "over the paged KV cache, with the same loop, policies and admission as `simulate`; "
        "the clock advances by each step's measured time. Named workloads have their lengths "
        "scaled to this CPU. This machine's step times are profiled first (the cost model the "
        "policies plan with).")
    add_workload_options(parser, model="tiny", hardware=None, num_requests=100, rate=None,
                         model_help=f"a model preset ({', '.join(LLAMA_PRESETS)}, seeded random "
                         "weights) or a local Hugging Face Llama checkpoint folder")
    add_policy_option(parser, default="slo")
    add_export_options(parser)
    parser.add_argument("--admission", action=argparse.BooleanOptionalAction, default=None,
                        help="admission control (default: on for slo only)")
    parser.add_argument("--length-scale", type=float, default=None, metavar="FACTOR",
                        help="scale a named workload's prompt and output lengths (default: "
                        "1/8, Azure conversation prompts of about 125 tokens)")
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="sampling temperature, seeded per request (default: 0, greedy)")
    add_prefix_cache_option(parser, "the trace has block hashes (the prompts are made from "
                            "them, and the cache is keyed on their tokens)")
    parser.add_argument("--compare-sim", action="store_true",
                        help="replay the same requests on the simulated clock with the profiled "
                        "cost model and print both, with the simulator's error")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run on the real engine (and the simulated clock) and report."""
    from refimpl.cli._serve import report
    from refimpl.engine import prepare_loop
    from refimpl.engine.run import CPU_LENGTH_SCALE
    from refimpl.engine.run import run as run_real
    from refimpl.metrics.table import format_fidelity
    from refimpl.workloads import assign_slo_set, make_workload

    check_export_paths(args)
    policies = list(POLICIES) if args.policy == "all" else [args.policy]
    workload = make_workload(args.workload, num_requests=args.num_requests, rate=args.rate,
                             seed=args.seed)
    slo_set = slo_set_of(args)
    if slo_set is not None:
        workload = assign_slo_set(workload, slo_set, seed=args.seed)
    show = sys.stderr.isatty()
    prepare_loop()  # said on the terminal: a new machine's first run compiles the loop here
    results = {}
    profile = None  # measured by the first run, planned with by all: one cost model compared
    for name in policies:
        results[name] = run_real(
            workload, name, model=args.model, seed=args.seed,
            length_scale=CPU_LENGTH_SCALE if args.length_scale is None else args.length_scale,
            admission=args.admission, temperature=args.temperature,
            compare_sim=args.compare_sim, prefix_cache=args.prefix_cache, step_profile=profile,
            progress=ProgressBar(f"{name:<14}") if show else None,
            profile_progress=ProgressBar("step profile  ") if show else None)
        profile = results[name].profile
    report(args, results)
    if args.compare_sim:
        for name, result in results.items():
            print(format_fidelity(result.fidelity, title=f"{name}: real vs simulated"))
    return 0
