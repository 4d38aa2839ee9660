"""`refimpl bench SUITE`: run one benchmark suite, print its figures and optionally write JSON.

Each suite is a module `refimpl.bench.<name>` with `run(quick=, num_threads=, json_path=)`;
adding a suite is one more name in `SUITES`. The suites that serve a workload (`WORKLOAD_SUITES`)
also take `--slo`/`--classes`, passed on as `run(slo_set=)`.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from refimpl.cli._options import add_slo_options, slo_set_of
from refimpl.cli._paths import check_output_path

SUITES = {
    "kernels": "attention kernels: prefill vs PyTorch/oracle/GEMM, decode vs memory read",
    "kv": "page pool: allocate/free and decode-batch append vs a pure-Python allocator",
    "engine": "the serving loop: a whole public trace through every policy, and a Python one",
    "sched": "slo policy: decision time per tick at 100 to 10,000 active requests",
    "serving": "SLO attainment, goodput and capacity of slo beside the baselines on traces",
    "costmodel": "cost model: held-out MAPE vs DistServe baseline, look-up cost, profile time",
    "admission": "overload at 1x-8x capacity: goodput and SLOs of slo with/without admission, vllm",
    "model": "the Llama model: prefill and decode tokens/s at batch 1/8/32 vs Hugging Face "
             "transformers (if installed) and no-cache NumPy",
    "robustness": "every trace format x model x SLO set x 0.25x-8x load x policy, with issue 14's "
                  "acceptance checks (--threads N: N worker processes)",
    "fidelity": "the real engine (tiny Llama on this CPU) against the simulator at three loads, "
                "and a drift absorbed",
    "sweep": "a 48-cell sweep on Ray (--threads N workers, default 2) against the same sweep "
             "serially, and Ray's start-up",
    "prefix": "prefix caching on the Mooncake trace: hit rate, TTFT, capacity and cost per "
              "step of every policy with and without the cache",
}
# The suites whose runs serve a workload.
WORKLOAD_SUITES = ("engine", "serving", "admission", "robustness", "fidelity", "prefix")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `bench` subcommand and one sub-subcommand per suite."""
    parser = subparsers.add_parser(
        "bench", help="benchmark suites: figures measured side by side in one run",
        description="Run a benchmark suite; speeds are printed beside baselines timed in the "
        "same process, since absolute figures drift with machine load.")
    suites = parser.add_subparsers(dest="suite", metavar="SUITE", required=True)
    for name, summary in SUITES.items():
        suite = suites.add_parser(name, help=summary, description=summary)
        suite.add_argument("--json", metavar="PATH", type=Path, help="also write the figures "
                           "as JSON")
        suite.add_argument("--quick", action="store_true", help="fewer and smaller shapes")
        suite.add_argument("--threads", type=int, metavar="N", help="measure with N threads "
                           "only (default: 1 and 2)")
        if name in WORKLOAD_SUITES:  # no default: each suite keeps its own classes unless told
            add_slo_options(suite, default=None)
        suite.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the chosen suite."""
    if args.threads is not None and args.threads < 1:
        from refimpl.errors import ConfigError

        raise ConfigError("--threads", args.threads, "must be at least 1")
    if args.json is not None:
        check_output_path("json", args.json)
    module = importlib.import_module(f"refimpl.bench.{args.suite}")
    options = {"slo_set": slo_set_of(args)} if args.suite in WORKLOAD_SUITES else {}
    module.run(quick=args.quick, num_threads=args.threads, json_path=args.json, **options)
    return 0
