"""`refimpl bench engine`: how fast the simulated engine replays a whole public trace.

Each baseline policy serves the Azure conversation trace (19,366 requests; found through
`REFIMPL_TRACES`, or `../shared/traces` beside the checkout) as Llama-3-8B on an H100, with
every scheduling decision computed, on the compiled engine; the Python engine, the reference,
serves the first 2,000 requests beside it (the whole trace would take minutes). Each run is a
fresh process, so its peak memory is its own, and the compiled engine's first call (compiling,
or loading the compiled code from Numba's cache) is timed apart from the run; one more process
compiles with the cache off, for the cold compile time. Without the trace, a synthetic workload
with the same size and fitted statistics is used, and the report says so. For scale: Vidur,
the best-known public serving simulator, simulates about 250 requests per second on this kind
of machine (its authors' figure).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

from refimpl.bench._report import publish
from refimpl.sched import BASELINES

__all__ = ["find_trace", "run"]

TRACE_NAME = "AzureLLMInferenceTrace_conv.csv"
TRACE_REQUESTS = 19_366
QUICK_REQUESTS = 2_000
GOAL_S = 10.0  # the goal: the whole trace in under 10 s per policy

# argv: workload, policy, number of requests (0: all), engine. The compiled engine is called
# once on a few requests first, so that its compile (or cache load) is not counted in `wall_s`.
_CHILD = """
import json, resource, sys, time
from refimpl.engine import simulate
from refimpl.workloads import make_workload
workload, policy, num, engine = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
first_call_s = 0.0
if engine == "compiled":
    started = time.perf_counter()
    simulate(make_workload(workload, num_requests=10), policy, engine=engine)
    first_call_s = time.perf_counter() - started
load_started = time.perf_counter()
workload = make_workload(workload, num_requests=num or None)
load_s = time.perf_counter() - load_started
result = simulate(workload, policy, model="llama-3-8b", hardware="h100-sxm", engine=engine)
summary = result.summary()
print(json.dumps({"wall_s": result.wall_s, "first_call_s": first_call_s, "load_s": load_s,
                  "engine": result.settings["engine"], "num_requests": len(result.requests),
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


def _run_child(workload: str, policy: str, num_requests: int, engine: str,
               env: dict | None = None) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, workload, policy, str(num_requests),
                          engine], check=True, capture_output=True, text=True,
                         env={**os.environ, **(env or {})})
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(*, quick: bool = False, num_threads: int | None = None,
        json_path: Path | None = None) -> dict:
    """Replay the trace with every baseline on both engines; print and optionally write."""
    del num_threads  # the engine is single-threaded
    trace = find_trace()
    workload = str(trace) if trace else "azure-conv-like"
    whole = QUICK_REQUESTS if quick else (0 if trace else TRACE_REQUESTS)
    # Compiling from scratch (cache off) once: all three policies share the same kernels.
    cold = _run_child(workload, BASELINES[0], 10, "compiled", {"REFIMPL_NUMBA_CACHE": "0"})
    rows = {policy: {"compiled": _run_child(workload, policy, whole, "compiled"),
                     "python": _run_child(workload, policy, QUICK_REQUESTS, "python")}
            for policy in BASELINES}
    if not quick:  # the compiled engine on the Python engine's size too: a like-for-like ratio
        for policy, row in rows.items():
            row["compiled_quick"] = _run_child(workload, policy, QUICK_REQUESTS, "compiled")
    report = {"suite": "engine", "workload": workload, "model": "llama-3-8b",
              "hardware": "h100-sxm", "cold_compile_s": cold["first_call_s"],
              "goal_s": GOAL_S, "policies": rows,
              "bench_process_rss_bytes":
                  resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    return publish(report, print_report, json_path)


def print_report(report: dict) -> None:
    """The figures as a table, one row per policy and engine run."""
    print(f"simulated engine: {report['workload']} as {report['model']} on "
          f"{report['hardware']} (every decision computed)")
    print(f"  {'policy':<14}{'engine':<10}{'requests':>9}{'steps':>9}{'wall s':>8}"
          f"{'req/s':>8}{'1st call s':>11}{'peak MiB':>9}{'decide p50':>11}{'p99':>9}")
    for policy, runs in report["policies"].items():
        for label, r in runs.items():
            print(f"  {policy:<14}{label.replace('_quick', ''):<10}{r['num_requests']:>9}"
                  f"{r['num_steps']:>9}{r['wall_s']:>8.2f}{r['num_requests'] / r['wall_s']:>8.0f}"
                  f"{r['first_call_s']:>11.2f}{r['peak_rss_bytes'] / 2**20:>9.0f}"
                  f"{r['decision_p50_s'] * 1e6:>9.2f}us{r['decision_p99_s'] * 1e6:>7.2f}us")
    print(f"  compiling the engine from scratch (Numba cache off): "
          f"{report['cold_compile_s']:.1f} s, once per machine; later processes load it "
          f"(the '1st call' column)")
    slowest = max((runs["compiled"] for runs in report["policies"].values()),
                  key=lambda r: r["wall_s"])
    print(f"  goal: the whole trace in under {report['goal_s']:.0f} s per policy (about 2,000 "
          f"requests/s); here the slowest policy took {slowest['wall_s']:.2f} s for "
          f"{slowest['num_requests']} requests; Vidur: about 250 requests/s")
