"""`refimpl bench fidelity`: the simulator against the real engine, at three loads and a drift.

The tiny Llama preset serves a synthetic Azure-conversation workload scaled to this CPU
(`refimpl.engine.run.CPU_LENGTH_SCALE`) on the real engine, and the same requests are replayed
on the simulated clock with this machine's step profile of the model (the issue's "simulated
vs real"). Loads are set from the simulated capacity: the highest rate, in a doubling sweep
refined by bisection, at which the policy meets 90% of SLOs on the simulated clock; then 0.5x
(light), 1x (near capacity) and 2x (overloaded). Per load: p50 and p95 TTFT and TPOT on both
clocks with the relative error, the per-step MAPE of the offline and the calibrated
predictions, and the latency errors again for a replay at the run's speed (its clock scaled
by the machine's measured / predicted step time in that run). Last, a run with a slowdown
switched on mid-run (x1.5 from step 100): the steps the calibrated prediction takes to be
back within 10%. Goals (the real-engine issue): latency
errors within 5%, per-step MAPE at most 10%, the drift absorbed within 200 steps, and the
100-request run under a minute.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from refimpl.bench._report import publish
from refimpl.config.slo_sets import SLOSet, one_class
from refimpl.costmodel.linear_step import ROWS_MOD_4, LinearStepModel
from refimpl.engine.model_executor import Slowdown, StepLog
from refimpl.engine.run import (
    CPU_LENGTH_SCALE,
    DEFAULT_KV_MEMORY_BYTES,
    load_model,
    replay_simulated,
)
from refimpl.engine.run import run as run_real
from refimpl.engine.simulate import gate_for, requests_from_workload
from refimpl.engine.step_profile import profile_steps
from refimpl.metrics.fidelity import LATENCY_KEYS, step_errors_at_speed, steps_to_absorb
from refimpl.sched.policy import make_policy
from refimpl.workloads import assign_slo_set, make_workload, scale_to_rate
from refimpl.workloads.transforms import clip_to_context, scale_lengths

__all__ = ["run_suite"]

MODEL = "tiny"
POLICIES = ("vllm", "slo")
LOADS = {"light": 0.5, "near capacity": 1.0, "overloaded": 2.0}
SLOWDOWN = Slowdown(after_step=100, factor=1.5)
GOALS = {"latency_error": 0.05, "step_mape": 0.10, "absorb_steps": 200, "run_100_s": 60.0}


def run(*, quick: bool = False, num_threads: int | None = None, json_path: Path | None = None,
        slo_set: SLOSet | None = None) -> dict:
    """The CLI's entry (`refimpl bench fidelity`)."""
    del num_threads  # the real engine runs on one core
    return run_suite(quick=quick, json_path=json_path, slo_set=slo_set)


def run_suite(*, quick: bool = False, json_path: Path | None = None,
              slo_set: SLOSet | None = None) -> dict:
    """Measure; print and return the figures."""
    model = load_model(MODEL)
    config = model.config.to_model_config()
    num_requests = 40 if quick else 100
    base = make_workload("azure-conv-like", num_requests=num_requests, seed=0)
    base = clip_to_context(scale_lengths(base, CPU_LENGTH_SCALE), config)
    base = assign_slo_set(base, slo_set or one_class("default"), seed=0)
    profile = profile_steps(model)
    report = {"suite": "fidelity", "model": MODEL, "num_requests": num_requests,
              "profile": profile.summary(),
              "goals": GOALS, "policies": {}}
    # the baseline of the fit's terms by rows mod 4: the same profile fitted without them
    smooth = LinearStepModel.fit(profile.counts, profile.seconds, omit=ROWS_MOD_4)
    for policy in POLICIES[:1] if quick else POLICIES:
        capacity = _capacity(base, policy, profile.model, config)
        loads = {}
        for label, factor in LOADS.items():
            workload = scale_to_rate(base, factor * capacity)
            started = time.perf_counter()
            result = run_real(workload, policy, model=model, step_model=profile.model,
                         compare_sim=True)
            loads[label] = {"rate": factor * capacity, "wall_s": time.perf_counter() - started,
                            **result.fidelity,
                            "smooth_at_speed": _at_speed(smooth, result.step_log)}
        drift = run_real(scale_to_rate(base, 0.5 * capacity), policy, model=model,
                    step_model=profile.model, slowdown=SLOWDOWN)
        log = drift.step_log
        report["policies"][policy] = {
            "capacity_req_s": capacity, "loads": loads,
            "drift": {"after_step": SLOWDOWN.after_step, "factor": SLOWDOWN.factor,
                      "steps": len(log["measured_s"]), "detected": drift.drift,
                      "absorbed_in": steps_to_absorb(log["predicted_s"], log["measured_s"],
                                                     SLOWDOWN.after_step)}}
    return publish(report, print_report, json_path)


def _at_speed(step_model: LinearStepModel, log: dict) -> dict:
    """`step_model`'s per-step errors on a real run's steps, scaled to that run's speed."""
    counts = np.column_stack([log[k] for k in StepLog.FIELDS[:4]]).astype(np.int64)
    return step_errors_at_speed(step_model.predict(counts), log["measured_s"])


def _capacity(workload, policy: str, step_model, config) -> float:
    """The highest rate at which `policy` meets 90% of SLOs on the simulated clock."""
    def attained(rate: float) -> float:
        requests = requests_from_workload(scale_to_rate(workload, rate))
        made = make_policy(policy)
        replay = replay_simulated(requests, made, gate_for(None, made), step_model, config,
                                  DEFAULT_KV_MEMORY_BYTES, 16, {})
        return replay.summary()["slo_attainment"]

    low, high = 0.25, 0.5
    while attained(high) >= 0.9 and high < 1e4:
        low, high = high, 2 * high
    for _ in range(5):
        middle = (low + high) / 2
        low, high = (middle, high) if attained(middle) >= 0.9 else (low, middle)
    return low


def print_report(report: dict) -> None:
    """The figures, one table per policy."""
    p = report["profile"]
    print(f"fidelity of the simulator against the real engine: {report['model']} preset, "
          f"{report['num_requests']} requests of Azure conversation lengths x "
          f"{CPU_LENGTH_SCALE}")
    print(f"step profile: {p['profile_s']:.1f} s, held-out MAPE {100 * p['heldout_mape']:.1f}%")
    for policy, row in report["policies"].items():
        print(f"\n{policy}: simulated capacity {row['capacity_req_s']:.2f} req/s")
        print(f"{'load':<14}{'rate':>6}  " + "  ".join(f"{k[:-2]:>18}" for k in LATENCY_KEYS)
              + f"  {'step MAPE':>9}  {'calibrated':>10}  {'wall':>6}")
        for label, load in row["loads"].items():
            print(f"{label:<14}{load['rate']:6.2f}  " + _cells(load["latency"])
                  + f"  {load['offline']['mape']:9.1%}  {load['calibrated']['mape']:10.1%}"
                  f"  {load['wall_s']:5.1f}s")
            if "latency_at_speed" in load:
                print(f"{'  at speed':<11}x{load['speed']:4.2f}  "
                      + _cells(load["latency_at_speed"])
                      + f"  {load['offline_at_speed']['mape']:9.1%}  "
                      f"{load['smooth_at_speed']['mape']:>10.1%} (w/o rows mod 4)")
        d = row["drift"]
        print(f"drift x{d['factor']} from step {d['after_step']} of {d['steps']}: detected "
              f"{d['detected']}, calibrated prediction back within 10% after "
              f"{d['absorbed_in']} steps (goal {GOALS['absorb_steps']})")
    print("(latency cells: real ms / simulated ms, and the simulator's error; 'at speed': the "
          "replay on a clock scaled to the machine's speed in that run, measured / predicted,"
          " and the step MAPE at that speed of the model and of its fit without the terms by "
          "rows mod 4)")


def _cells(latency: dict) -> str:
    """The four latency cells of one row: real ms / simulated ms and the error."""
    cells = [f"{v['real'] * 1e3:6.1f}/{v['simulated'] * 1e3:6.1f} {v['error']:+5.0%}"
             for v in (latency[k] for k in LATENCY_KEYS)]
    return "  ".join(f"{c:>18}" for c in cells)
