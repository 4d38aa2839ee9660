"""`refimpl bench prefix`: what prefix caching buys each policy on the Mooncake trace, and costs.

The Mooncake synthetic trace (`mooncake_synthetic_trace.jsonl`, with `hash_ids`: one per
512-token prompt block; skipped, with a message, where this machine lacks it) is served as
Llama-3.1-8B (128k context) on one H100 (its first 1,000 requests) and on eight (tensor
parallel: eight times the KV pool; the whole trace), one SLO class (`default` unless `--slo`),
admission off (the schedulers themselves, as `bench serving`). For every policy, with and
without the prefix cache (refimpl.kv.prefix), over a grid of loads: the prefix hit rate (prompt
tokens and blocks), TTFT p50/p95, SLO attainment, blocks evicted, and the simulation's wall
time per step (the cache's own cost); and the capacity, the highest rate with at least 90% of
requests meeting both targets (the grid, then bisection).
"""

from __future__ import annotations

from pathlib import Path

from refimpl.bench._report import publish
from refimpl.bench.engine import find_trace
from refimpl.bench.serving import TARGET, capacity
from refimpl.config.slo_sets import SLOSet, one_class
from refimpl.engine import simulate
from refimpl.engine.run import run as run_real
from refimpl.sched import POLICIES
from refimpl.workloads import (
    Workload,
    assign_slo_set,
    head,
    load_trace,
    scale_lengths,
    scale_to_rate,
)

__all__ = ["mooncake_trace", "run"]

MODEL = "llama-3.1-8b"
TRACE_NAME = "mooncake_synthetic_trace.jsonl"
# (hardware, requests (quick, full), loads x the trace's rate (quick, full), the two loads the
# table shows). One H100's KV pool holds 912 blocks of 512 tokens, far less than the trace's
# reuse distances (an ideal LRU of that size hits 0.7% of the first 1,000 requests' blocks):
# eight hold 8,976 (an ideal LRU hits 42% of the whole trace's blocks).
SETTINGS = {
    "1x H100": ("h100-sxm", (400, 1000), ((0.05, 0.15, 0.4, 1.0),
                                          (0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.6, 1.0)),
                (0.15, 1.0)),
    "8x H100": ("h100-sxm-x8", (1000, 3993), ((0.5, 1.0, 2.0), (0.25, 0.5, 0.75, 1.0, 1.5, 2.0)),
                (0.5, 1.0)),
}


# The real engine's part: requests (quick, full), lengths scaled so that 512-token blocks are
# 16 (one page) and prompts of ~300-1,300 tokens serve in seconds; the trace's first reuse is at
# its 49th request.
REAL_REQUESTS, REAL_SCALE, REAL_POLICIES = (60, 200), 1 / 32, ("vllm", "slo")


def mooncake_trace() -> Path | None:
    """The Mooncake synthetic trace, where this machine has it (beside the Azure traces)."""
    azure = find_trace()
    path = azure.with_name(TRACE_NAME) if azure is not None else None
    return path if path is not None and path.is_file() else None


def _run(workload: Workload, policy: str, hardware: str, rate: float, cache: bool) -> dict:
    """One simulation's figures."""
    served = scale_to_rate(workload, rate)
    result = simulate(served, policy, model=MODEL, hardware=hardware, admission=False,
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
    classes = slo_set if slo_set is not None else one_class("default")
    trace = load_trace(path)
    results = {}
    for setting, (hardware, sizes, grids, shown) in SETTINGS.items():
        workload = assign_slo_set(head(trace, sizes[not quick]), classes, seed=0)
        base_rate = workload.mean_rate
        rows: dict[str, dict] = {}
        for policy in POLICIES:
            for cache in (True, False):
                def probe(rate, policy=policy, cache=cache, hardware=hardware,
                          workload=workload):
                    return _run(workload, policy, hardware, rate, cache)

                points = [{**probe(m * base_rate), "multiple": m} for m in grids[not quick]]
                rows[f"{policy}/{'cache' if cache else 'no-cache'}"] = {
                    "points": points,
                    "capacity_req_s": capacity(points, probe, 1 if quick else 2)}
        results[setting] = {"hardware": hardware, "num_requests": len(workload),
                            "trace_rate_req_s": base_rate, "shown": shown, "policies": rows}
    report = {"suite": "prefix", "model": MODEL, "trace": path.name, "target": TARGET,
              "slo_set": classes.describe(), "results": results,
              "real_engine": _real_engine(trace, REAL_REQUESTS[not quick])}
    return publish(report, print_report, json_path)


def _real_engine(trace: Workload, num_requests: int) -> dict:
    """The first requests at 1/32 of their lengths (a 512-token hash block is one page of
    tokens made from its hash) on the real engine's `tiny` model, with and without the
    cache: hits on real K/V, measured TTFT, and whether the tokens are the same."""
    workload = scale_lengths(head(trace, num_requests), REAL_SCALE)
    rows = {}
    for policy in REAL_POLICIES:
        runs = {cache: run_real(workload, policy, admission=False, prefix_cache=cache)
                for cache in (True, False)}
        for cache, result in runs.items():
            s = result.summary()
            rows[f"{policy}/{'cache' if cache else 'no-cache'}"] = {
                "hit_rate_tokens": s.get("prefix_hit_rate_tokens"),
                "hit_rate_blocks": s.get("prefix_hit_rate_blocks"),
                "ttft_p50_s": s["ttft_p50_s"], "ttft_p95_s": s["ttft_p95_s"],
                "prefill_tokens": int(result.steps.num_prefill_tokens.sum()),
                "wall_s": result.wall_s,
                "same_tokens": runs[True].outputs == runs[False].outputs}
    return {"model": "tiny", "num_requests": len(workload), "length_scale": REAL_SCALE,
            "policies": rows}


def print_report(report: dict) -> None:
    """Per setting, one row per policy and cache setting: figures at two loads, capacity."""
    print(f"prefix caching: {report['trace']}, {report['model']}; capacity = highest rate with "
          f">= {report['target']:.0%} meeting both SLOs; us/step = simulation wall time per step")

    def pct(value):
        return "-" if value is None else f"{value:.1%}"

    def sec(value):
        return "-" if value is None else f"{value:.3f}"

    for setting, result in report["results"].items():
        for shown in result["shown"]:
            print(f"\n{setting} ({result['hardware']}), first {result['num_requests']} requests "
                  f"at {shown:g}x the trace rate ({shown * result['trace_rate_req_s']:.2f} "
                  "req/s)")
            print(f"  {'policy/cache':<24}{'hits tok':>9}{'hits blk':>9}{'TTFT p50':>10}"
                  f"{'TTFT p95':>10}{'SLO met':>9}{'evicted':>9}{'us/step':>9}"
                  f"{'capacity':>10}")
            for name, row in result["policies"].items():
                t = next(p for p in row["points"] if p.get("multiple") == shown)
                print(f"  {name:<24}{pct(t['hit_rate_tokens']):>9}"
                      f"{pct(t['hit_rate_blocks']):>9}{sec(t['ttft_p50_s']):>10}"
                      f"{sec(t['ttft_p95_s']):>10}{pct(t['slo_attainment']):>9}"
                      f"{t['evicted_blocks'] or 0:>9}{t['wall_per_step_us']:>9.1f}"
                      f"{row['capacity_req_s']:>10.3f}")
    real = report.get("real_engine")
    if real:
        print(f"\nreal engine ({real['model']} on this CPU), first {real['num_requests']} "
              f"requests, lengths x {real['length_scale']:g}, the trace's arrivals; TTFT "
              "measured")
        print(f"  {'policy/cache':<24}{'hits tok':>9}{'hits blk':>9}{'TTFT p50':>10}"
              f"{'TTFT p95':>10}{'prefill tok':>12}{'wall s':>8}{'same tokens':>12}")
        for name, t in real["policies"].items():
            print(f"  {name:<24}{pct(t['hit_rate_tokens']):>9}{pct(t['hit_rate_blocks']):>9}"
                  f"{sec(t['ttft_p50_s']):>10}{sec(t['ttft_p95_s']):>10}"
                  f"{t['prefill_tokens']:>12}{t['wall_s']:>8.1f}"
                  f"{'yes' if t['same_tokens'] else 'NO':>12}")
