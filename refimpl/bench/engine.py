"""`refimpl bench engine`: how fast the simulated engine replays a whole public trace.

Each baseline policy serves the Azure conversation trace (19,366 requests; found through
`REFIMPL_TRACES`, or `../shared/traces` beside the checkout) as Llama-3-8B on an H100, with
every scheduling decision computed. Each policy runs in a fresh process so its peak memory is
its own. Without the trace, a synthetic workload with the same size and fitted statistics is
used, and the report says so. For scale: Vidur, the best-known public serving simulator,
simulates about 250 requests per second on this kind of machine (its authors' figure).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

from refimpl.sched import POLICIES

__all__ = ["find_trace", "run"]

TRACE_NAME = "AzureLLMInferenceTrace_conv.csv"
TRACE_REQUESTS = 19_366
QUICK_REQUESTS = 2_000

_CHILD = """
import json, resource, sys, time
from refimpl.engine import simulate
from refimpl.workloads import make_workload
workload = make_workload(sys.argv[1], num_requests=int(sys.argv[3]) or None)
result = simulate(workload, sys.argv[2], model="llama-3-8b", hardware="h100-sxm")
summary = result.summary()
print(json.dumps({"wall_s": result.wall_s, "num_requests": len(result.requests),
                  "num_steps": len(result.steps),
                  "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "decision_p50_s": summary["decision_p50_s"],
                  "decision_p99_s": summary["decision_p99_s"],
                  "slo_attainment": summary["slo_attainment"]}))
"""


def find_trace() -> Path | None:
    """The Azure conversation trace, if this machine has it."""
    folders = [os.environ.get("REFIMPL_TRACES"), Path.cwd().parent / "shared" / "traces",
               Path(__file__).resolve().parents[3] / "shared" / "traces"]
    for folder in folders:
        if folder and (Path(folder) / TRACE_NAME).is_file():
            return Path(folder) / TRACE_NAME
    return None


def _run_policy(workload: str, policy: str, num_requests: int) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, workload, policy, str(num_requests)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(*, quick: bool = False, num_threads: int | None = None,
        json_path: Path | None = None) -> dict:
    """Replay the trace with every baseline; print and optionally write the figures."""
    del num_threads  # the engine is single-threaded
    trace = find_trace()
    workload = str(trace) if trace else "azure-conv-like"
    num_requests = QUICK_REQUESTS if quick else (0 if trace else TRACE_REQUESTS)
    rows = {policy: _run_policy(workload, policy, num_requests) for policy in POLICIES}
    report = {"suite": "engine", "workload": workload, "model": "llama-3-8b",
              "hardware": "h100-sxm", "policies": rows,
              "bench_process_rss_bytes":
                  resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    print_report(report)
    if json_path is not None:
        Path(json_path).write_text(json.dumps(report, indent=2))
    return report


def print_report(report: dict) -> None:
    """The figures as a table."""
    print(f"simulated engine: {report['workload']} as {report['model']} on "
          f"{report['hardware']} (every decision computed)")
    print(f"  {'policy':<14}{'requests':>9}{'steps':>9}{'wall s':>8}{'req/s':>8}"
          f"{'peak MiB':>9}{'decide p50':>11}{'p99':>9}")
    for policy, r in report["policies"].items():
        print(f"  {policy:<14}{r['num_requests']:>9}{r['num_steps']:>9}{r['wall_s']:>8.1f}"
              f"{r['num_requests'] / r['wall_s']:>8.0f}{r['peak_rss_bytes'] / 2**20:>9.0f}"
              f"{r['decision_p50_s'] * 1e6:>9.0f}us{r['decision_p99_s'] * 1e6:>7.0f}us")
    print("  goal: the whole trace in under 10 s per policy (about 2,000 requests/s); "
          "Vidur: about 250 requests/s")
