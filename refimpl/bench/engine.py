"""`refimpl bench engine`: how fast the one serving loop replays a whole public trace.

Every built-in policy (`slo` with its admission gate, and each baseline) serves the Azure
conversation trace (19,366 requests; found through `REFIMPL_TRACES`, or `../shared/traces`
beside the checkout) as Llama-3-8B on an H100, every scheduling decision computed, and so
does a plain-Python policy (the README's `ShortestPromptFirst`, run through the loop's bridge
to Python). Each run is a fresh process, so its peak memory is its own, and the loop's first
call (compiling, or loading the compiled code from Numba's cache) is timed apart from the run;
one more process starts on an empty cache, for the cold compile time a new machine waits (its
second core helping, refimpl.engine.compile_loop). Each policy runs in
`ROUNDS` rounds, interleaved (every policy once, then again), and its row is the round of median
wall time, with the fastest and slowest beside it: one run of a policy on this kind of shared
machine differs from the next by up to a third. Without the trace, a
synthetic workload with the same size and fitted statistics is used, and the report says so.
`--slo`/`--classes` serve it in that SLO set (default: the trace's own, one `default` class).
For scale: Vidur, the best-known public serving simulator, simulates about 250 requests per
second on this kind of machine (its authors' figure).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from refimpl.bench._report import publish
from refimpl.config.slo_sets import SLOSet
from refimpl.sched import BASELINES, POLICIES

__all__ = ["find_trace", "median_round", "run"]

TRACE_NAME = "AzureLLMInferenceTrace_conv.csv"
TRACE_REQUESTS = 19_366
QUICK_REQUESTS = 2_000
# The goals (the serving-core issue): the whole trace under 3 s for `slo` with admission and
# under 2 s for each baseline, after compiling; a plain-Python policy at 2,000 requests/s.
GOAL_S = {"slo": 3.0, **{policy: 2.0 for policy in BASELINES}}
GOAL_PYTHON_REQ_S = 2_000
PYTHON_POLICY = "python:spf"  # the README's example policy, by this name in the report
ROUNDS = 3  # runs of each policy, interleaved (one with --quick)

# argv: workload, policy, number of requests (0: all), README path, SLO set spec ("": the
# workload's own classes). The loop is called once on a few
# requests first, so that its compile (or cache load) is not counted in `wall_s`.
_CHILD = """
import json, re, resource, sys, time
from pathlib import Path
from refimpl.config import slo_set
from refimpl.engine import simulate
from refimpl.workloads import assign_slo_set, make_workload
workload, policy, num, spec = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[5]
if policy == "python:spf":  # the README's example, as a user would paste it
    readme = Path(sys.argv[4]).read_text().split("## Writing a policy", 1)[1]
    code = re.findall(r"```python\\n(.*?)```", readme, re.S)[0].split("result =")[0]
    namespace = {}
    exec(code, namespace)
    policy = namespace["ShortestPromptFirst"]
started = time.perf_counter()
simulate(make_workload(workload, num_requests=10), policy)
first_call_s = time.perf_counter() - started
load_started = time.perf_counter()
workload = make_workload(workload, num_requests=num or None)
if spec:
    workload = assign_slo_set(workload, slo_set(spec), seed=0)
load_s = time.perf_counter() - load_started
result = simulate(workload, policy, model="llama-3-8b", hardware="h100-sxm")
summary = result.summary()
print(json.dumps({"wall_s": result.wall_s, "first_call_s": first_call_s, "load_s": load_s,
                  "admission": result.settings["admission"], "num_requests": len(result.requests),
                  "num_steps": len(result.steps),
                  "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "decision_p50_s": summary["decision_p50_s"],
                  "decision_p99_s": summary["decision_p99_s"],
                  "slo_attainment": summary["slo_attainment"],
                  "slo_classes": sorted({str(c) for c in result.requests.slo_class})}))
"""


def find_trace() -> Path | None:
    """The Azure conversation trace, if this machine has it."""
    folders = [os.environ.get("REFIMPL_TRACES"), Path.cwd().parent / "shared" / "traces",
               Path(__file__).resolve().parents[3] / "shared" / "traces"]
    for folder in folders:
        if folder and (Path(folder) / TRACE_NAME).is_file():
            return Path(folder) / TRACE_NAME
    return None


_README = Path(__file__).resolve().parents[2] / "README.md"


def _run_child(workload: str, policy: str, num_requests: int, env: dict | None = None,
               spec: str = "") -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, workload, policy, str(num_requests),
                          str(_README), spec], check=True, capture_output=True, text=True,
                         env={**os.environ, **(env or {})})
    return json.loads(out.stdout.strip().splitlines()[-1])


def median_round(runs: list[dict]) -> dict:
    """The run of median wall time (the slower of the middle two), with every run's wall time
    as `wall_s_rounds`."""
    walls = [r["wall_s"] for r in runs]
    middle = sorted(range(len(runs)), key=walls.__getitem__)[len(runs) // 2]
    return {**runs[middle], "wall_s_rounds": walls}


def run(*, quick: bool = False, num_threads: int | None = None,
        json_path: Path | None = None, slo_set: SLOSet | None = None) -> dict:
    """Replay the trace with every policy on the one loop; print and optionally write."""
    del num_threads  # the loop is single-threaded
    trace = find_trace()
    workload = str(trace) if trace else "azure-conv-like"
    whole = QUICK_REQUESTS if quick else (0 if trace else TRACE_REQUESTS)
    # Compiling from scratch once, as a new machine does (an empty cache, which the compile's
    # helper process hands its part through): every policy runs the same compiled loop.
    with tempfile.TemporaryDirectory(prefix="refimpl-cold-cache-") as empty:
        cold = _run_child(workload, BASELINES[0], 10,
                          {"NUMBA_CACHE_DIR": empty, "REFIMPL_NUMBA_CACHE": "1"})
    spec = "" if slo_set is None else slo_set.spec
    policies = (*POLICIES, PYTHON_POLICY)
    rounds = [{policy: _run_child(workload, policy, whole, spec=spec) for policy in policies}
              for _ in range(1 if quick else ROUNDS)]
    rows = {policy: median_round([r[policy] for r in rounds]) for policy in policies}
    report = {"suite": "engine", "workload": workload, "model": "llama-3-8b",
              "hardware": "h100-sxm", "cold_compile_s": cold["first_call_s"],
              "rounds": len(rounds),
              "slo_set": None if slo_set is None else slo_set.describe(),
              "goal_s": GOAL_S, "goal_python_req_s": GOAL_PYTHON_REQ_S, "policies": rows,
              "bench_process_rss_bytes":
                  resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    return publish(report, print_report, json_path)


def print_report(report: dict) -> None:
    """The figures as a table, one row per policy."""
    print(f"serving loop: {report['workload']} as {report['model']} on "
          f"{report['hardware']} (every decision computed)")
    print(f"  {'policy':<14}{'requests':>9}{'steps':>9}{'wall s':>8}{'min-max':>12}"
          f"{'req/s':>8}{'goal':>8}{'1st call s':>11}{'peak MiB':>9}{'decide p50':>11}"
          f"{'p99':>9}")
    for policy, r in report["policies"].items():
        goal_s = report["goal_s"].get(policy)
        goal = (f"<{goal_s:.0f} s" if goal_s is not None
                else f">{report['goal_python_req_s']}/s")
        name = policy + ("+adm" if r["admission"] else "")
        walls = r.get("wall_s_rounds", [r["wall_s"]])
        spread = f"{min(walls):.2f}-{max(walls):.2f}"
        print(f"  {name:<14}{r['num_requests']:>9}{r['num_steps']:>9}{r['wall_s']:>8.2f}"
              f"{spread:>12}{r['num_requests'] / r['wall_s']:>8.0f}{goal:>8}"
              f"{r['first_call_s']:>11.2f}{r['peak_rss_bytes'] / 2**20:>9.0f}"
              f"{r['decision_p50_s'] * 1e6:>9.2f}us{r['decision_p99_s'] * 1e6:>7.2f}us")
    print(f"  compiling the loop from scratch (an empty Numba cache): "
          f"{report['cold_compile_s']:.1f} s, once per machine; later processes load it "
          f"(the '1st call' column). Wall s: the median of {report.get('rounds', 1)} interleaved "
          f"round(s). Vidur: about 250 requests/s")
