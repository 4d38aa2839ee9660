"""`refimpl bench prefix`: what prefix caching buys each policy on the Mooncake trace, and costs.

The Mooncake synthetic trace (`mooncake_synthetic_trace.jsonl`, with `hash_ids`: one per
512-token prompt block; skipped, with a message, where this machine lacks it) is served as
Llama-3.1-8B (128k context) on an H100, one SLO class (`default` unless `--slo`), admission off
(the schedulers themselves, as `bench serving`). For every policy, with and without the
prefix cache (refimpl.kv.prefix): at the trace's own rate the prefix hit rate (prompt tokens
and blocks), TTFT p50/p95, SLO attainment, the cache's peak pages and evictions, and the
simulation's wall time per step (the cache's own cost); and the capacity, the highest rate
with at least 90% of requests meeting both targets (a grid of rates, then bisection).
"""

from __future__ import annotations

from pathlib import Path

from refimpl.bench._report import publish
from refimpl.bench.engine import find_trace
from refimpl.bench.serving import TARGET, capacity
from refimpl.config.slo_sets import SLOSet, one_class
from refimpl.engine import simulate
from refimpl.sched import POLICIES
from refimpl.workloads import Workload, assign_slo_set, head, load_trace, scale_to_rate

__all__ = ["mooncake_trace", "run"]

MODEL, HARDWARE = "llama-3.1-8b", "h100-sxm"
TRACE_NAME = "mooncake_synthetic_trace.jsonl"
# The loads the table shows (x the trace's rate): a moderate one, and the trace's own (which
# overloads one H100: its prompts average 15k tokens).
SHOWN = (0.15, 1.0)


def mooncake_trace() -> Path | None:
    """The Mooncake synthetic trace, where this machine has it (beside the Azure traces)."""
    azure = find_trace()
    path = azure.with_name(TRACE_NAME) if azure is not None else None
    return path if path is not None and path.is_file() else None


def _run(workload: Workload, policy: str, rate: float, cache: bool) -> dict:
    """One simulation's figures."""
    served = scale_to_rate(workload, rate)
    result = simulate(served, policy, model=MODEL, hardware=HARDWARE, admission=False,
                      prefix_cache=cache)
    s = result.summary()
    return {"rate": rate, "slo_attainment": s["slo_attainment"], "ttft_p50_s": s["ttft_p50_s"],
            "ttft_p95_s": s["ttft_p95_s"], "num_rejected": s["num_rejected"],
            "num_preempted": s["num_preempted"], "num_steps": s["num_steps"],
            "wall_s": result.wall_s,
            "wall_per_step_us": 1e6 * result.wall_s / max(s["num_steps"] or 0, 1),
            "hit_rate_tokens": s.get("prefix_hit_rate_tokens"),
            "hit_rate_blocks": s.get("prefix_hit_rate_blocks"),
            "cached_pages_peak": s.get("prefix_cached_pages_peak"),
            "evicted_blocks": s.get("prefix_evicted_blocks")}


def run(*, quick: bool = False, num_threads: int | None = None,
        json_path: Path | None = None, slo_set: SLOSet | None = None) -> dict:
    """Every policy with and without the cache: figures at the trace rate and capacity."""
    del num_threads
    path = mooncake_trace()
    if path is None:
        print(f"bench prefix: skipped, {TRACE_NAME} not found (set REFIMPL_TRACES to its "
              "folder)")
        return {"suite": "prefix", "skipped": f"{TRACE_NAME} not found"}
    num_requests = 400 if quick else 1000
    # the trace's own rate overloads one H100 (long prompts): capacity is well below it
    multiples = (0.05, SHOWN[0], 0.4, SHOWN[1]) if quick else (0.05, 0.1, SHOWN[0], 0.2, 0.3, 0.4,
                                                                0.6, SHOWN[1])
    refinements = 1 if quick else 2
    classes = slo_set if slo_set is not None else one_class("default")
    workload = assign_slo_set(head(load_trace(path), num_requests), classes, seed=0)
    base_rate = workload.mean_rate
    rows: dict[str, dict] = {}
    for policy in POLICIES:
        for cache in (True, False):
            def probe(rate, policy=policy, cache=cache):
                return _run(workload, policy, rate, cache)

            points = [{**probe(m * base_rate), "multiple": m} for m in multiples]
            rows[f"{policy}/{'cache' if cache else 'no-cache'}"] = {
                "points": points, "capacity_req_s": capacity(points, probe, refinements)}
    report = {"suite": "prefix", "model": MODEL, "hardware": HARDWARE, "trace": path.name,
              "num_requests": len(workload), "trace_rate_req_s": base_rate, "target": TARGET,
              "slo_set": classes.describe(), "results": rows}
    return publish(report, print_report, json_path)


def print_report(report: dict) -> None:
    """One row per policy and cache setting: figures at the shown loads, capacity, cost."""
    print(f"prefix caching: {report['trace']}, first {report['num_requests']} requests "
          f"(trace rate {report['trace_rate_req_s']:.2f} req/s), {report['model']} on "
          f"{report['hardware']}; capacity = highest rate with >= {report['target']:.0%} "
          "meeting both SLOs; us/step = simulation wall time per step")

    def pct(value):
        return "-" if value is None else f"{value:.1%}"

    def sec(value):
        return "-" if value is None else f"{value:.3f}"

    for shown in SHOWN:
        print(f"\nat {shown:g}x the trace rate")
        print(f"  {'policy/cache':<24}{'hits tok':>9}{'hits blk':>9}{'TTFT p50':>10}"
              f"{'TTFT p95':>10}{'SLO met':>9}{'evicted':>9}{'us/step':>9}{'capacity':>10}")
        for name, row in report["results"].items():
            t = next(p for p in row["points"] if p.get("multiple") == shown)
            print(f"  {name:<24}{pct(t['hit_rate_tokens']):>9}{pct(t['hit_rate_blocks']):>9}"
                  f"{sec(t['ttft_p50_s']):>10}{sec(t['ttft_p95_s']):>10}"
                  f"{pct(t['slo_attainment']):>9}{t['evicted_blocks'] or 0:>9}"
                  f"{t['wall_per_step_us']:>9.1f}{row['capacity_req_s']:>10.3f}")
