"""`refimpl bench robustness`: does `slo` hold on traffic it was not tuned on (issue 14, part 5)?

The matrix, every cell served on the simulated clock:
- workloads: the first N requests (N = 2,000; 400 with `--quick`) of every public trace format
  found (`REFIMPL_TRACES`, or `../shared/traces`): Azure conversation and Azure code (their
  fitted synthetic stand-ins when the files are absent), Mooncake synthetic (JSONL), and the
  ShareGPT lengths CSV on seeded Poisson arrivals and on bursty ones (Gamma gaps, shape 0.25,
  CV 2); a file that is absent is listed as such and its rows skipped. Prompts are clipped to
  the model's context (`clip_to_context`, the count reported), so that a cell measures
  scheduling rather than how many prompts a context limit refuses;
- models: `llama-3-8b` (8k context) and `llama-3.1-8b` (128k) on `h100-sxm`, and
  `llama-2-70b` on four of them with tensor parallelism (`h100-sxm-x4`);
- SLO sets: one class (`default`, 2 s / 100 ms), an interactive/batch mix (`chat-batch`) and
  MLPerf's Llama-3.1-8B pair (`mlperf-llama3.1-8b-mix`: interactive 500 / 30 ms beside server
  2,000 / 100 ms; the server preset alone has `default`'s targets, so it would repeat that row);
  `--slo`/`--classes` replace the three by the one set given;
- loads: 0.25x to 8x of the capacity of the best baseline, capacity being the highest rate at
  which >= 90% of requests meet both SLOs (doubling or halving from the trace's own rate until
  the verdict flips, then `refimpl.bench.serving.capacity`'s bisection) and the best baseline
  the one of highest capacity among the non-`slo` policies of `refimpl.sched.POLICIES`; where
  none reaches 90% at any rate probed, loads are multiples of the trace's rate, and flagged;
- runs: every baseline and bare `slo` without admission control, and `slo` with its default
  admission, audited by an ungated replay (false rejects, late admits: refimpl.metrics.audit).

Per cell: attainment over all arrivals, goodput, rejections by reason, false-reject and
late-admit shares of arrivals. The checks (issue 14's acceptance): (a) at loads up to 1x,
slo+admission's attainment >= the best baseline's - 0.02 and >= bare slo's - 0.02, and false
rejects < 2% of arrivals; (b) past capacity (> 1x), its goodput >= 90% of its own peak over
that load and the lower ones of that (workload, model, SLO set): the check is for collapse, and
with a fixed number of requests goodput (met / makespan) may keep climbing to 8x, which a peak
over the whole sweep would count against the lower loads; (c) nothing lost in any run: every arrival
finished or was rejected with a reason. Cells run in a process pool, one worker per core
(`--threads N`: N workers).
"""

from __future__ import annotations

import functools
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from refimpl.bench._report import publish
from refimpl.bench.engine import find_trace
from refimpl.bench.serving import TARGET, base_workload, capacity
from refimpl.config import ModelConfig
from refimpl.config.slo_sets import SLOSet, one_class, slo_set
from refimpl.engine import simulate
from refimpl.engine.compile_loop import warm_up
from refimpl.metrics.table import format_reasons
from refimpl.sched import POLICIES
from refimpl.workloads import (
    Workload,
    assign_slo_set,
    clip_to_context,
    gamma_arrivals,
    head,
    load_trace,
    new_workload,
    scale_to_rate,
)
from refimpl.workloads.synthetic import BURSTY_SHAPE

__all__ = ["check", "run"]

WORKLOADS = ("conv", "code", "mooncake", "sharegpt-poisson", "sharegpt-bursty")
MOONCAKE = "mooncake_synthetic_trace.jsonl"
SHAREGPT = "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
HARDWARE = {"llama-3-8b": "h100-sxm", "llama-3.1-8b": "h100-sxm", "llama-2-70b": "h100-sxm-x4"}
MODELS = tuple(HARDWARE)
SLO_SETS = {"default": one_class("default"), "chat-batch": slo_set("chat-batch"),
            "mlperf-llama3.1-8b-mix": slo_set("mlperf-llama3.1-8b-mix")}
LOADS = (0.25, 0.5, 1, 2, 4, 8)  # multiples of the best baseline's capacity
GATED = "slo+admission"
MARGIN, FALSE_REJECT_LIMIT, GOODPUT_KEPT = 0.02, 0.02, 0.90  # the acceptance figures
MAX_STEPS = 8  # doublings or halvings of the rate when looking for capacity's bracket
NO_REASON = ("", "None", "none")  # what a rejection without a reason is recorded as


def runs() -> dict[str, tuple[str, bool]]:
    """Run name -> (policy, admission): each baseline and bare slo ungated, slo gated."""
    baselines = {p: (p, False) for p in POLICIES if p != "slo"}
    return {**baselines, "slo": ("slo", False), GATED: ("slo", True)}


def _trace_file(file_name: str) -> Path | None:
    """A public trace beside the Azure conversation trace, if this machine has it."""
    conv = find_trace()
    path = None if conv is None else conv.with_name(file_name)
    return path if path is not None and path.is_file() else None


@functools.cache
def workload(trace: str, model: str, num_requests: int) -> Workload | None:
    """The first requests of `trace`, clipped to `model`'s context (None: the file is absent)."""
    if trace in ("conv", "code"):
        base = base_workload(trace, num_requests)
    elif trace == "mooncake":
        path = _trace_file(MOONCAKE)
        if path is None:
            return None
        base = head(load_trace(path), num_requests)
    else:
        path = _trace_file(SHAREGPT)
        if path is None:
            return None
        lengths = head(load_trace(path, rate=1.0, seed=0), num_requests)
        shape = 1.0 if trace == "sharegpt-poisson" else BURSTY_SHAPE
        arrival_s = gamma_arrivals(len(lengths), 1.0, shape, np.random.default_rng(0))
        base = new_workload(trace, arrival_s, lengths.prompt_tokens, lengths.output_tokens)
    return clip_to_context(base, ModelConfig.preset(model))


@functools.cache
def _classed(key: tuple) -> Workload:
    """`key`'s workload, each request given a class of its SLO set (seeded)."""
    trace, model, classes, num_requests = key
    return assign_slo_set(workload(trace, model, num_requests), classes, seed=0)


def serve(key: tuple, policy: str, admission: bool, rate: float) -> dict:
    """One cell's figures: `key`'s workload at `rate` req/s (gated runs are audited)."""
    s = simulate(scale_to_rate(_classed(key), rate), policy, model=key[1],
                 hardware=HARDWARE[key[1]], admission=admission, audit=admission).summary()
    figures = {name: s[name] for name in (
        "slo_attainment", "goodput_req_s", "num_requests", "num_finished", "num_rejected",
        "rejected_by_reason")}
    for name in ("false_rejects", "false_reject_share", "late_admits", "late_admit_share"):
        figures[name] = s.get(name)  # only audited runs have them
    return {"rate": rate, **figures}


def measure_capacity(key: tuple, policy: str, refinements: int) -> dict:
    """Capacity of one ungated policy on `key`'s workload, and the rates probed."""
    def probe(rate: float) -> dict:
        return serve(key, policy, False, rate)

    points = [probe(_classed(key).mean_rate)]
    step = 2.0 if points[0]["slo_attainment"] >= TARGET else 0.5
    for _ in range(MAX_STEPS):
        if (points[-1]["slo_attainment"] >= TARGET) != (points[0]["slo_attainment"] >= TARGET):
            break
        points.append(probe(points[-1]["rate"] * step))
    found = capacity(points, probe, refinements)
    return {"capacity_req_s": found, "probes": sorted(  # [rate, attainment], as JSON has them
        [p["rate"], p["slo_attainment"]] for p in points)}


def check(group: dict) -> list[dict]:
    """The acceptance checks of one (workload, model, SLO set): its failing cells, each with
    the check (a, b or c), the load, the run and the figure."""
    cells, best, failures = group["cells"], group["best_baseline"], []

    def fail(test: str, load: str, run: str, figure: str) -> None:
        failures.append({"check": test, "load": load, "run": run, "figure": figure})

    peak = 0.0  # the highest goodput at this load or a lower one
    for load, cell in sorted(cells[GATED].items(), key=lambda item: float(item[0][:-1])):
        attained, goodput = cell["slo_attainment"], cell["goodput_req_s"] or 0.0
        peak = max(peak, goodput)
        if float(load[:-1]) <= 1:
            for rival in (best, "slo"):
                if attained < cells[rival][load]["slo_attainment"] - MARGIN:
                    fail("a", load, GATED, f"attainment {attained:.3f} < {rival}'s "
                         f"{cells[rival][load]['slo_attainment']:.3f} - {MARGIN}")
            if (cell["false_reject_share"] or 0.0) >= FALSE_REJECT_LIMIT:
                fail("a", load, GATED, f"false rejects {cell['false_reject_share']:.1%} of "
                     f"arrivals (limit {FALSE_REJECT_LIMIT:.0%}; rejected: {_why(cell)})")
        elif goodput < GOODPUT_KEPT * peak:
            fail("b", load, GATED, f"goodput {goodput:.2f} req/s = {goodput / peak:.0%} of "
                 f"its peak {peak:.2f} (limit {GOODPUT_KEPT:.0%}; late admits "
                 f"{cell['late_admit_share'] or 0.0:.1%} of arrivals, rejected: {_why(cell)})")
    for run, by_load in cells.items():
        for load, cell in by_load.items():
            reasoned = sum(n for r, n in cell["rejected_by_reason"].items() if r not in NO_REASON)
            lost = cell["num_requests"] - cell["num_finished"] - reasoned
            if lost:
                fail("c", load, run, f"{lost} of {cell['num_requests']} arrivals neither "
                     "finished nor rejected with a reason")
    return failures


def _why(cell: dict) -> str:
    """A cell's rejections by reason, for a failure's figure (the gate's side of the why)."""
    return format_reasons(cell["rejected_by_reason"])


def _label(load: float) -> str:
    return f"{load:g}x"


def run(*, quick: bool = False, num_threads: int | None = None, json_path: Path | None = None,
        slo_set: SLOSet | None = None, workloads: tuple[str, ...] = WORKLOADS,
        models: tuple[str, ...] = MODELS, loads: tuple[float, ...] = LOADS,
        num_requests: int | None = None) -> dict:
    """Serve the matrix, check it; print the tables and the summary, write the figures."""
    started = time.perf_counter()
    loads = tuple(sorted(loads))
    num_requests = num_requests or (400 if quick else 2000)
    refinements = 2 if quick else 4
    sets = SLO_SETS if slo_set is None else {slo_set.name: slo_set}
    unavailable = sorted({t for t in workloads for m in models
                          if workload(t, m, num_requests) is None})
    keys = [(t, m, classes, num_requests) for t in workloads if t not in unavailable
            for m in models for classes in sets.values()]
    baselines = [name for name, (policy, _) in runs().items() if policy != "slo"]
    compile_s = warm_up()  # compiled once here: the forked workers inherit the loop
    workers = num_threads or len(os.sched_getaffinity(0))
    print(f"robustness: {len(keys)} (workload, model, SLO set) groups, {len(loads)} loads, "
          f"{len(runs())} runs each, on {workers} workers", file=sys.stderr, flush=True)
    with ProcessPoolExecutor(workers) as pool:
        searches = {(key, p): pool.submit(measure_capacity, key, p, refinements)
                    for key in keys for p in baselines}
        found = {k: job.result() for k, job in searches.items()}
        groups, jobs = [], {}
        for key in keys:
            capacities = {p: found[key, p] for p in baselines}
            best = max(baselines, key=lambda p: capacities[p]["capacity_req_s"])
            reached = capacities[best]["capacity_req_s"] > 0
            reference = (capacities[best]["capacity_req_s"] if reached
                         else _classed(key).mean_rate)
            for load in loads:
                for name, (policy, admission) in runs().items():
                    jobs[key, name, load] = pool.submit(serve, key, policy, admission,
                                                        load * reference)
            groups.append({"workload": key[0], "model": key[1], "slo_set": key[2].name,
                           "source": workload(key[0], key[1], num_requests).name,
                           "num_clipped": workload(key[0], key[1], num_requests).num_clipped,
                           "capacities": capacities, "best_baseline": best,
                           "capacity_reached": reached, "reference_rate_req_s": reference,
                           "cells": {name: {_label(load): jobs[key, name, load]
                                            for load in loads} for name in runs()}})
        for group in groups:
            group["cells"] = {name: {load: job.result() for load, job in by_load.items()}
                              for name, by_load in group["cells"].items()}
            group["failures"] = check(group)
    report = {"suite": "robustness", "hardware": {m: HARDWARE[m] for m in models},
              "num_requests": num_requests,
              "target": TARGET, "loads": [_label(load) for load in loads],
              "runs": {name: {"policy": p, "admission": a} for name, (p, a) in runs().items()},
              "slo_sets": {name: s.describe() for name, s in sets.items()},
              "models": list(models),
              "workloads_not_available": unavailable, "groups": groups,
              "checks": _tally(groups), "workers": workers,
              "wall_s": time.perf_counter() - started, "compile_s": compile_s}
    return publish(report, print_report, json_path)


def _tally(groups: list[dict]) -> dict:
    """Per check: how many cells it covered and which failed."""
    counts = {"a": 0, "b": 0, "c": 0}
    for group in groups:
        for load in group["cells"][GATED]:
            counts["a" if float(load[:-1]) <= 1 else "b"] += 1
        counts["c"] += sum(len(by_load) for by_load in group["cells"].values())
    failing = {test: sorted({(g["workload"], g["model"], g["slo_set"], f["load"], f["run"])
                             for g in groups for f in g["failures"] if f["check"] == test})
               for test in counts}
    return {test: {"cells": counts[test], "failing": len(failing[test])} for test in counts}


def print_report(report: dict) -> None:
    """A table per (workload, model, SLO set), then the checks and every failing cell."""
    hardware = ", ".join(f"{m} on {hw}" for m, hw in report["hardware"].items())
    print(f"robustness: {report['num_requests']} requests per cell, {hardware}; "
          f"loads are multiples of the best baseline's capacity (highest rate with >= "
          f"{report['target']:.0%} meeting both SLOs)")
    loads = report["loads"]
    for g in report["groups"]:
        caps = ", ".join(f"{p} {c['capacity_req_s']:.2f}" for p, c in g["capacities"].items())
        print(f"\n{g['workload']} / {g['model']} / {g['slo_set']} ({g['source']}, "
              f"{g['num_clipped']} clipped to context): capacity req/s {caps}; "
              f"best {g['best_baseline']}"
              + ("" if g["capacity_reached"] else " (none reached 90%: loads x trace rate)"))
        best = g["best_baseline"]
        unloaded = max([att for _, att in g["capacities"][best]["probes"]]
                       + [cell["slo_attainment"] for cell in g["cells"][best].values()])
        if unloaded < 0.95:  # then capacity is a rate at which the backlog barely matters
            print(f"  note: at most {unloaded:.1%} meet both SLOs under {best} at any rate "
                  "served (requests that miss even unloaded): capacity is ill-defined")
        print(f"  {'attainment':<18}" + "".join(f"{load:>8}" for load in loads))
        for name, by_load in g["cells"].items():
            print(f"  {name:<18}" + "".join(f"{by_load[load]['slo_attainment']:>8.1%}"
                                            for load in loads))
        gated = g["cells"][GATED]
        for title, field, spec in (("goodput req/s", "goodput_req_s", ">8.2f"),
                                   ("false rejects", "false_reject_share", ">8.1%"),
                                   ("late admits", "late_admit_share", ">8.1%")):
            print(f"  {title:<18}" + "".join(format(gated[load][field] or 0.0, spec)
                                            for load in loads))
        reasons = format_reasons(gated[loads[-1]]["rejected_by_reason"])
        print(f"  {GATED} rejected at {loads[-1]}: {reasons}")
        failing = {f["check"]: [] for f in g["failures"]}
        for f in g["failures"]:
            failing[f["check"]] += [] if f["load"] in failing[f["check"]] else [f["load"]]
        print("  checks: " + ("all pass" if not failing else "; ".join(
            f"({test}) fails at {', '.join(at)}" for test, at in sorted(failing.items()))))
    print(f"\nsummary ({len(report['groups'])} groups, {report['workers']} workers, "
          f"{report['wall_s']:.0f} s, compiling the loop {report['compile_s']:.0f} s of it):")
    names = {"a": "up to capacity: attainment vs best baseline and bare slo, false rejects",
             "b": "past capacity: goodput >= 90% of the peak at or below that load",
             "c": "nothing lost"}
    for test, tally in report["checks"].items():
        print(f"  ({test}) {names[test]}: {tally['cells'] - tally['failing']} of "
              f"{tally['cells']} cells pass")
    for g in report["groups"]:
        figures: dict[tuple, list[str]] = {}  # one line per failing cell, its figures joined
        for f in g["failures"]:
            figures.setdefault((f["check"], f["load"], f["run"]), []).append(f["figure"])
        for (test, load, run), text in figures.items():
            print(f"  FAIL ({test}) {g['workload']}/{g['model']}/{g['slo_set']} {load} {run}: "
                  + "; ".join(text))
    for name in report["workloads_not_available"]:
        print(f"  not available: {name} (trace file absent)")
