"""`refimpl bench serving`: SLO attainment, goodput and capacity of `slo` beside the baselines.

The Azure conversation and code traces (the first requests of each, scaled to each rate; a
synthetic workload fitted to the trace when the file is absent) are served as Llama-3-8B on an
H100, with one SLO class (`default`: TTFT 2 s, TPOT 100 ms) and with an even mix of an
interactive class (priority 0: TTFT 0.5 s, TPOT 50 ms) and a batch class (priority 1: TTFT
30 s, TPOT 0.5 s). For every policy and rate: SLO attainment (share of all requests meeting
both targets) and goodput. Capacity is the highest rate at which at least 90% of requests meet
both targets: found on a grid of rates, then refined by bisection between the last rate that
passed and the first that failed. Admission control is off for every policy here: this
measures the schedulers themselves (`refimpl bench admission` measures admission control).
`--slo NAME` or `--classes NAME:SHARE,...` replaces the two class settings by that one.
"""

from __future__ import annotations

from pathlib import Path

from refimpl.bench._report import publish
from refimpl.bench.engine import find_trace
from refimpl.config.slo_sets import SLOSet, one_class, slo_set
from refimpl.engine import simulate
from refimpl.sched import POLICIES
from refimpl.workloads import Workload, assign_slo_set, head, load_trace, scale_to_rate, synthetic

__all__ = ["capacity", "run"]

TARGET = 0.9  # the attainment that defines capacity
MODEL, HARDWARE = "llama-3-8b", "h100-sxm"
SETTINGS = {"one-class": one_class("default"), "mixed": slo_set("chat-batch")}
TRACES = {"conv": ("AzureLLMInferenceTrace_conv.csv", "azure-conv-like"),
          "code": ("AzureLLMInferenceTrace_code.csv", "azure-code-like")}


def base_workload(trace: str, num_requests: int) -> Workload:
    """The first `num_requests` of a public trace (or its fitted synthetic stand-in)."""
    file_name, synthetic_name = TRACES[trace]
    conv = find_trace()
    path = conv.with_name(file_name) if conv is not None else None
    if path is not None and path.is_file():
        return head(load_trace(path), num_requests)
    return synthetic(synthetic_name, num_requests=num_requests, seed=0)


def attainment(workload: Workload, policy: str, rate: float,
               admission: bool | None = None) -> dict:
    """SLO attainment and goodput of one policy at one rate (admission: simulate's default)."""
    summary = simulate(scale_to_rate(workload, rate), policy, model=MODEL, hardware=HARDWARE,
                       admission=admission).summary()
    return {"rate": rate, "slo_attainment": summary["slo_attainment"],
            "goodput_req_s": summary["goodput_req_s"]}


def capacity(points: list[dict], probe, refinements: int) -> float:
    """Highest rate with attainment >= TARGET: the grid's last pass, bisected toward the
    first failure with `probe(rate) -> point` (points are appended as they are measured)."""
    ordered = sorted(points, key=lambda p: p["rate"])
    passing = [p["rate"] for p in ordered if p["slo_attainment"] >= TARGET]
    if not passing:
        return 0.0
    low = max(passing)
    above = [p["rate"] for p in ordered if p["rate"] > low]
    if not above:
        return low
    high = min(above)
    for _ in range(refinements):
        mid = (low + high) / 2
        point = probe(mid)
        points.append(point)
        low, high = (mid, high) if point["slo_attainment"] >= TARGET else (low, mid)
    return low


def run(*, quick: bool = False, num_threads: int | None = None,
        json_path: Path | None = None, slo_set: SLOSet | None = None) -> dict:
    """Sweep rates for every policy on both traces and both class settings (or `slo_set`
    alone); print, write."""
    del num_threads
    settings = SETTINGS if slo_set is None else {slo_set.name: slo_set}
    num_requests = 600 if quick else 2000
    multiples = (2, 4, 6, 8) if quick else (1, 2, 3, 4, 5, 6, 7, 8, 10)
    refinements = 1 if quick else 3
    results = {}
    for trace in TRACES:
        workload = base_workload(trace, num_requests)
        base_rate = workload.mean_rate
        for setting, classes in settings.items():
            classed = assign_slo_set(workload, classes, seed=0)
            rows = {}
            for policy in POLICIES:
                def probe(rate, policy=policy, classed=classed):
                    return attainment(classed, policy, rate, admission=False)

                points = [probe(m * base_rate) for m in multiples]
                rows[policy] = {"points": points,
                                "capacity_req_s": capacity(points, probe, refinements)}
            results[f"{trace}/{setting}"] = {"trace_rate_req_s": base_rate, "policies": rows,
                                             "grid_req_s": [m * base_rate for m in multiples]}
    report = {"suite": "serving", "model": MODEL, "hardware": HARDWARE,
              "num_requests": num_requests, "target": TARGET, "results": results,
              "slo_sets": {name: classes.describe() for name, classes in settings.items()}}
    return publish(report, print_report, json_path)


def print_report(report: dict) -> None:
    """Attainment per rate and capacity per policy, one table per trace and class setting."""
    print(f"serving quality: {report['num_requests']} requests per run, {report['model']} on "
          f"{report['hardware']}; capacity = highest rate with >= {report['target']:.0%} "
          "meeting both SLOs")
    for name, result in report["results"].items():
        rates = result["grid_req_s"]
        print(f"\n{name} (trace rate {result['trace_rate_req_s']:.2f} req/s): SLO attainment")
        print(f"  {'policy':<14}" + "".join(f"{r:>7.1f}" for r in rates)
              + f"{'capacity':>10}{'vs vllm':>9}")
        vllm = result["policies"]["vllm"]["capacity_req_s"]
        for policy, row in result["policies"].items():
            by_rate = {p["rate"]: p["slo_attainment"] for p in row["points"]}
            ratio = row["capacity_req_s"] / vllm if vllm else float("nan")
            print(f"  {policy:<14}" + "".join(f"{by_rate[r]:>7.0%}" for r in rates)
                  + f"{row['capacity_req_s']:>10.1f}{ratio:>8.2f}x")
