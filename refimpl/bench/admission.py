"""`refimpl bench admission`: goodput and SLOs under overload, with and without admission control.

The issue-8 overload benchmark. The first 2,000 requests of the Azure conversation trace (its
fitted synthetic stand-in when the file is absent) are served as Llama-3-8B on an H100 at 1x,
2x, 4x and 8x the capacity of `slo` (highest rate with >= 90% of requests meeting both SLOs,
found in the same run by `refimpl.bench.serving`'s search, slo without admission control),
by `slo` with and without admission control and by `vllm`. Per run: goodput, SLO attainment
of all and of accepted requests (accepted = not rejected, so degraded ones count), rejections
by reason, the peak queue length (policy and admission queue) and the simulator's peak memory
(each run in a fresh process, its peak resident set, imports included). Goals: with admission,
goodput at 4x >= 90% of goodput at 1x, and >= 95% of accepted requests meeting both SLOs at
every load. `--slo`/`--classes` serve the trace in that SLO set (default: the one `default`
class).
"""

from __future__ import annotations

import multiprocessing
import resource
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from refimpl.bench._report import publish
from refimpl.bench.serving import HARDWARE, MODEL, attainment, base_workload, capacity
from refimpl.config.slo_sets import SLOSet, one_class
from refimpl.engine import simulate
from refimpl.metrics.table import format_reasons
from refimpl.workloads import Workload, assign_slo_set, scale_to_rate

__all__ = ["run"]

LOADS = (1, 2, 4, 8)  # multiples of the measured capacity
RUNS = {"slo+admission": ("slo", True), "slo": ("slo", False), "vllm": ("vllm", False)}
GOODPUT_KEPT, ACCEPTED_MET = 0.90, 0.95  # the goals


def _serve(workload: Workload, policy: str, admission: bool) -> dict:
    """One run's figures (in a fresh process, so the peak memory is this run's alone)."""
    result = simulate(workload, policy, model=MODEL, hardware=HARDWARE, admission=admission)
    s = result.summary()
    return {
        "goodput_req_s": s["goodput_req_s"], "slo_attainment": s["slo_attainment"],
        "accepted_attainment": s["num_slo_met"] / s["num_finished"] if s["num_finished"]
        else None,
        "num_requests": s["num_requests"], "num_rejected": s["num_rejected"],
        "rejected_by_reason": s["rejected_by_reason"],
        "finished_by_reason": s["finished_by_reason"],
        "admission_by_decision": s["admission_by_decision"],
        "ttft_p95_s": s["ttft_p95_s"], "tpot_p95_s": s["tpot_p95_s"],
        "waiting_peak": s["waiting_peak"], "decision_p99_s": s["decision_p99_s"],
        "wall_s": result.wall_s,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


def measure_capacity(workload: Workload, quick: bool) -> float:
    """Capacity of `slo` without admission control, in requests per second."""
    multiples = (2, 4, 6, 8) if quick else (4, 5, 6, 7, 8)

    def probe(rate: float) -> dict:
        return attainment(workload, "slo", rate, admission=False)

    points = [probe(m * workload.mean_rate) for m in multiples]
    return capacity(points, probe, refinements=1 if quick else 3)


def run(*, quick: bool = False, num_threads: int | None = None, json_path: Path | None = None,
        capacity_req_s: float | None = None, slo_set: SLOSet | None = None) -> dict:
    """Serve the trace at each load with and without admission; print, write the figures."""
    del num_threads  # the engine is single-threaded
    slo_set = slo_set or one_class("default")
    workload = assign_slo_set(base_workload("conv", 600 if quick else 2000), slo_set, seed=0)
    if capacity_req_s is None:
        capacity_req_s = measure_capacity(workload, quick)
    rows: dict[str, dict[str, dict]] = {name: {} for name in RUNS}
    context = multiprocessing.get_context("spawn")  # a fresh interpreter per run
    for load in LOADS:
        scaled = scale_to_rate(workload, load * capacity_req_s)
        for name, (policy, admission) in RUNS.items():
            with ProcessPoolExecutor(1, mp_context=context) as pool:
                rows[name][str(load)] = pool.submit(_serve, scaled, policy, admission).result()
    kept = _ratio(rows["slo+admission"]["4"]["goodput_req_s"],
                  rows["slo+admission"]["1"]["goodput_req_s"])
    worst = min(r["accepted_attainment"] or 0.0 for r in rows["slo+admission"].values())
    report = {"suite": "admission", "workload": workload.name, "model": MODEL,
              "hardware": HARDWARE, "num_requests": len(workload),
              "capacity_req_s": capacity_req_s, "loads": list(LOADS), "runs": rows,
              "slo_set": slo_set.describe(),
              "goals": {"goodput_4x_over_1x": kept, "goodput_goal": GOODPUT_KEPT,
                        "accepted_attainment_min": worst, "accepted_goal": ACCEPTED_MET,
                        "met": bool(kept is not None and kept >= GOODPUT_KEPT
                                    and worst >= ACCEPTED_MET)}}
    return publish(report, print_report, json_path)


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator is not None and denominator else None


def print_report(report: dict) -> None:
    """One table: a row per configuration and load."""
    print(f"overload: {report['num_requests']} requests of {report['workload']} "
          f"(SLO {report['slo_set']['spec']}), "
          f"{report['model']} on {report['hardware']}; capacity of slo "
          f"{report['capacity_req_s']:.1f} req/s (>= 90% meeting both SLOs, no admission)")
    print(f"  {'run':<14}{'load':>5}{'goodput':>9}{'attain':>8}{'accepted':>9}{'rejected':>9}"
          f"{'queue pk':>9}{'MiB':>6}  rejections by reason")
    for name, by_load in report["runs"].items():
        for load, r in by_load.items():
            accepted = r["accepted_attainment"]
            reasons = format_reasons(r["rejected_by_reason"], none="-")
            print(f"  {name:<14}{load + 'x':>5}{r['goodput_req_s']:>9.2f}"
                  f"{r['slo_attainment']:>8.1%}"
                  f"{accepted if accepted is None else format(accepted, '.1%'):>9}"
                  f"{r['num_rejected']:>9}{r['waiting_peak']:>9}"
                  f"{r['peak_rss_bytes'] / 2**20:>6.0f}  {reasons}")
    goals = report["goals"]
    kept = goals["goodput_4x_over_1x"]
    print(f"  goals (slo+admission): goodput at 4x / at 1x = "
          f"{'n/a' if kept is None else format(kept, '.1%')} (>= {goals['goodput_goal']:.0%}); "
          f"accepted meeting both SLOs, worst load {goals['accepted_attainment_min']:.1%} "
          f"(>= {goals['accepted_goal']:.0%}): {'met' if goals['met'] else 'NOT met'}")
