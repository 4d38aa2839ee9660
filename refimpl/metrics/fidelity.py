"""How far the simulated clock is from the real one: per step, per run, and after a drift.

Per step, a real run's log holds each step's prediction (the offline cost model, and the same
corrected online by the calibrator, both made before the step ran) beside its measured time:
their mean absolute percentage error and signed mean error. Per run, the p50 and p95 TTFT and
TPOT of the real run against the same requests replayed on the simulated clock, and the
relative error of each (simulated / real - 1). A shared machine's speed drifts from minute to
minute (up to 2x here, docs/real_engine.md), so the report also gives the run's speed against
the offline model, and where the caller replayed at that speed too (a simulated clock scaled
by it, the policies planning with the offline model as on the real engine), the same errors
at the run's speed: what is left is the model's and the scheduling's, not the machine's.
"""

from __future__ import annotations

import numpy as np

from refimpl.errors import ConfigError

__all__ = ["LATENCY_KEYS", "fidelity_report", "run_speed", "step_errors", "step_errors_at_speed",
           "steps_to_absorb"]

LATENCY_KEYS = ("ttft_p50_s", "ttft_p95_s", "tpot_p50_s", "tpot_p95_s")


def step_errors(predicted_s: np.ndarray, measured_s: np.ndarray) -> dict[str, float]:
    """MAPE and signed mean error of predicted against measured step times."""
    predicted_s, measured_s = np.asarray(predicted_s), np.asarray(measured_s)
    if predicted_s.shape != measured_s.shape:
        raise ConfigError("predicted_s", predicted_s.shape, f"must match measured_s "
                          f"{measured_s.shape}")
    if len(measured_s) == 0:
        return {"mape": float("nan"), "signed": float("nan"), "steps": 0}
    ratio = predicted_s / measured_s - 1.0
    return {"mape": float(np.abs(ratio).mean()), "signed": float(ratio.mean()),
            "steps": len(ratio)}


def run_speed(offline_s: np.ndarray, measured_s: np.ndarray) -> float:
    """How much slower the machine ran than profiled: the steps' measured seconds over the
    offline model's prediction of them, summed (1.0: as profiled; NaN: no steps)."""
    predicted = float(np.sum(offline_s))
    return float(np.sum(measured_s)) / predicted if predicted > 0 else float("nan")


def step_errors_at_speed(predicted_s: np.ndarray, measured_s: np.ndarray) -> dict[str, float]:
    """`step_errors` of the predictions scaled by the run's speed (`run_speed`): the error
    of the model's shape, the machine's drift taken out."""
    speed = run_speed(predicted_s, measured_s)
    return step_errors(np.asarray(predicted_s) * speed, measured_s)


def fidelity_report(real, simulated, at_speed=None) -> dict:
    """Per-step errors of `real`'s predictions and per-run latency errors of `simulated`
    against `real` (a `RunResult` and a `SimulationResult` of the same requests), and of
    `at_speed` (the same replayed on a clock scaled by the run's speed) where given."""
    log = real.step_log
    real_summary, sim_summary = real.summary(), simulated.summary()
    report = {"offline": step_errors(log["offline_s"], log["measured_s"]),
              "calibrated": step_errors(log["predicted_s"], log["measured_s"]),
              "speed": run_speed(log["offline_s"], log["measured_s"]),
              "offline_at_speed": step_errors_at_speed(log["offline_s"], log["measured_s"]),
              "latency": _latency(real_summary, sim_summary),
              "slo_attainment": {"real": real_summary["slo_attainment"],
                                 "simulated": sim_summary["slo_attainment"]}}
    if at_speed is not None:
        at_speed_summary = at_speed.summary()
        report["latency_at_speed"] = _latency(real_summary, at_speed_summary)
        report["slo_attainment"]["at_speed"] = at_speed_summary["slo_attainment"]
    return report


def _latency(real_summary: dict, sim_summary: dict) -> dict:
    """Each latency percentile on both clocks, and the simulator's relative error."""
    latency = {}
    for key in LATENCY_KEYS:
        r, s = real_summary[key], sim_summary[key]
        latency[key] = {"real": r, "simulated": s,
                        "error": s / r - 1.0 if r and np.isfinite(r) else float("nan")}
    return latency


def steps_to_absorb(predicted_s: np.ndarray, measured_s: np.ndarray, after_step: int, *,
                    tolerance: float = 0.1, window: int = 20) -> int | None:
    """Steps after `after_step` until the calibrated prediction is back within `tolerance`
    (the median absolute relative error of the next `window` steps); None if never."""
    error = np.abs(np.asarray(predicted_s) / np.asarray(measured_s) - 1.0)
    for k in range(after_step, len(error) - window + 1):
        if np.median(error[k:k + window]) <= tolerance:
            return k - after_step
    return None
