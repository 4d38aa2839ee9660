"""Running policies over one workload and reporting them: shared by `simulate` and `demo`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from refimpl.cli._options import check_export_paths, slo_set_of
from refimpl.cli._paths import check_output_dir, check_output_path
from refimpl.config import SLO_SETS
from refimpl.engine import SimulationResult, prepare_loop, simulate
from refimpl.metrics.plots import plot_latency_cdfs, plot_timeline
from refimpl.metrics.report import build_report, write_report
from refimpl.metrics.table import format_comparison, format_headline, format_run
from refimpl.report.progress import ProgressBar
from refimpl.workloads import assign_slo_set, make_workload


def simulate_policies(args: argparse.Namespace, policies: list[str]) -> dict[str, SimulationResult]:
    """Simulate every policy on the workload the options describe, with a progress bar (the
    report paths checked first: a finished run is never lost to an unwritable path)."""
    if args.json is not None:
        check_output_path("json", args.json)
    if args.out is not None:
        check_output_dir("out", args.out)
    check_export_paths(args)
    slo_set = slo_set_of(args)
    workload = make_workload(args.workload, num_requests=args.num_requests, rate=args.rate,
                             seed=args.seed)
    if slo_set is not None:
        workload = assign_slo_set(workload, slo_set, seed=args.seed)
    show = sys.stderr.isatty()
    prepare_loop()  # the first run in this process compiles, or loads, the loop
    return {
        name: simulate(workload, name, model=args.model, hardware=args.hardware,
                       step_model=args.step_model, seed=args.seed,
                       progress=ProgressBar(f"{name:<14}") if show else None,
                       admission=getattr(args, "admission", None),  # `demo`: the default
                       prefix_cache=getattr(args, "prefix_cache", None),
                       kv_pages=getattr(args, "kv_pages", None))  # `demo`: the hardware's
        for name in policies
    }


def report(args: argparse.Namespace, results: dict[str, SimulationResult]) -> None:
    """Print the table(s); write the JSON report and the plots where asked."""
    summaries = {name: result.summary() for name, result in results.items()}
    first = next(iter(results.values()))
    slo_set = slo_set_of(args)
    # A named set is shown with what it stands for; a spec or a preset name says it already.
    label = "" if slo_set is None else f", SLO {slo_set.name}" + (
        f" ({slo_set.spec})" if slo_set.name in SLO_SETS else "")
    print(f"workload {first.settings['workload']}: {first.settings['num_requests']} requests"
          f"{label}, "
          f"{first.settings['model']} on {first.settings.get('hardware', 'this CPU')} "
          f"({first.settings['step_model']}, {first.settings['kv_pages']} KV pages)")
    if len(results) == 1:
        print(format_run(next(iter(summaries.values())), title=first.policy))
    else:
        print(format_comparison(summaries))
        headline = format_headline(summaries)
        if headline is not None:
            print(headline)
    for name, result in results.items():
        done = "served" if result.settings.get("clock") == "measured" else "simulated"
        # a real run's kernels make their first calls (compile or load) before serving
        first_calls = result.settings.get("kernels_warm_up_s")
        before = "" if first_calls is None else f"; kernels' first calls {first_calls:.2f} s before"
        print(f"  {name}: {done} in {result.wall_s:.2f} s "
              f"({len(result.requests) / max(result.wall_s, 1e-9):,.0f} requests/s{before})")
    runs = {name: (r.requests, r.steps) for name, r in results.items()}
    if args.json is not None:
        settings = {**first.settings, "policies": list(results), "rate": args.rate,
                    "slo_set": None if slo_set is None else slo_set.describe()}
        settings.pop("policy", None)
        print(f"report: {write_report(build_report(runs, settings), args.json)}")
    write_exports(args, results)
    if args.out is not None:
        out = Path(args.out)
        print(f"plots: {plot_latency_cdfs(runs, out / 'latency_cdfs.png')}, "
              f"{plot_timeline(runs, out / 'timeline.png')}")


def write_exports(args: argparse.Namespace, results: dict[str, SimulationResult]) -> None:
    """The per-request and per-step tables and the Perfetto trace, where asked."""
    from refimpl.export import export_requests, export_steps, write_perfetto_trace

    if getattr(args, "requests", None) is not None:
        path = export_requests({n: r.requests for n, r in results.items()}, args.requests)
        print(f"requests: {path}")
    if getattr(args, "steps", None) is not None:
        print(f"steps: {export_steps({n: r.steps for n, r in results.items()}, args.steps)}")
    if getattr(args, "trace", None) is not None:
        path = write_perfetto_trace({n: r.steps for n, r in results.items()}, args.trace)
        print(f"trace: {path} (open it at ui.perfetto.dev)")
