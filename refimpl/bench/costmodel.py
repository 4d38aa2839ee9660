"""`refimpl bench costmodel`: the fitted model's error, the look-up's cost, the profiles' length.

Held-out MAPE per phase of the fitted latency model beside the DistServe-style baseline fitted
on the same points; the table look-up per call from Python and from inside a Numba loop; the
step-time models' per-call cost; wall time of the quick (and, without --quick, full) profile.
Profiles run on one thread whatever --threads says: the cost model describes a serial kernel.
"""

from __future__ import annotations

import timeit
from pathlib import Path

import numpy as np

from refimpl._numba import kernel
from refimpl.bench._report import publish
from refimpl.config import HardwareSpec, ModelConfig
from refimpl.costmodel.fastlookup import lookup_arrays, lookup_time_s
from refimpl.costmodel.profile import run_profile
from refimpl.costmodel.profiled import ProfiledStepModel, build_profiled_table
from refimpl.costmodel.step import RooflineStepModel
from refimpl.costmodel.table import CostTable
from refimpl.report.units import format_spread

__all__ = ["run"]

NUM_LOOKUPS = 20_000


@kernel
def _lookup_loop(log_b, log_t, best_time_s, batches, seq_lens):
    """Sum of look-ups over the shape arrays (the sum keeps the loop from being optimised away)."""
    total = 0.0
    for i in range(batches.shape[0]):
        total += lookup_time_s(log_b, log_t, best_time_s, batches[i], seq_lens[i])
    return total


def _per_call_us(stmt, number: int) -> float:
    """Best of five runs of `number` calls, in microseconds per call."""
    return min(timeit.repeat(stmt, number=number, repeat=5)) / number * 1e6


def bench_lookup(table: CostTable, model: ModelConfig) -> dict:
    """Microseconds per look-up / step-time call, from Python and from Numba."""
    phase = table.phases["decode"]
    rng = np.random.default_rng(0)
    batches = np.exp(rng.uniform(np.log(phase.batches[0]), np.log(phase.batches[-1]),
                                 NUM_LOOKUPS))
    seq_lens = np.exp(rng.uniform(np.log(phase.seq_lens[0]), np.log(phase.seq_lens[-1]),
                                  NUM_LOOKUPS))
    shapes = list(zip(batches.tolist(), seq_lens.tolist(), strict=True))
    lookup = table.lookup
    python_us = _per_call_us(lambda: [lookup("decode", b, s) for b, s in shapes], 1) \
        / NUM_LOOKUPS
    arrays = lookup_arrays(phase)
    _lookup_loop(*arrays, batches, seq_lens)  # compile (or load from the cache) first
    numba_us = _per_call_us(lambda: _lookup_loop(*arrays, batches, seq_lens), 1) / NUM_LOOKUPS
    profiled = ProfiledStepModel(table, model).step_time_parts
    roofline = RooflineStepModel(model, HardwareSpec.preset("h100-sxm")).step_time_parts
    return {
        "lookup_python_us": python_us,
        "lookup_numba_us": numba_us,
        "profiled_step_time_us": _per_call_us(lambda: profiled(100, 60_000, 16, 16_000),
                                              20_000),
        "roofline_step_time_us": _per_call_us(lambda: roofline(100, 60_000, 16, 16_000),
                                              20_000),
    }


def _profile(model: ModelConfig, mode: str, hardware: HardwareSpec) -> tuple[dict, CostTable]:
    result = run_profile(model, mode)
    table = build_profiled_table(result, hardware)
    return {"mode": mode, "duration_s": result.duration_s, "samples": len(result.samples),
            "skipped": len(result.skipped), "heldout_mape": table.info["heldout_mape"],
            "baseline_mape": table.info["baseline_mape"],
            "heldout_spread": table.info["heldout_spread"]}, table


def print_report(report: dict) -> None:
    """The figures as text."""
    print("profiles (tiny model's attention heads and linear layers, one thread):")
    for p in report["profiles"]:
        print(f"  {p['mode']:<6} {p['duration_s']:6.1f} s, {p['samples']} samples, "
              f"{p['skipped']} shapes skipped")
        for phase, mape in p["heldout_mape"].items():
            print(f"    held-out MAPE {phase:<13} fitted {100 * mape:5.1f} %   DistServe "
                  f"baseline {100 * p['baseline_mape'][phase]:5.1f} %   round-to-round "
                  f"spread {format_spread(p['heldout_spread'][phase])}   (goal <= 10 %)")
    lk = report["lookup"]
    print("per call (microseconds):")
    print(f"  table look-up from Python   {lk['lookup_python_us']:6.2f}")
    print(f"  table look-up from Numba    {lk['lookup_numba_us']:6.3f}")
    print(f"  profiled step_time_parts    {lk['profiled_step_time_us']:6.2f}")
    print(f"  roofline step_time_parts    {lk['roofline_step_time_us']:6.2f}")


def run(*, quick: bool = False, num_threads: int | None = None,
        json_path: Path | None = None) -> dict:
    """Run the suite, print it, write JSON to `json_path` if given, and return the figures."""
    del num_threads  # profiles are serial by design (see the module docstring)
    model = ModelConfig.preset("tiny")
    hardware = HardwareSpec.preset("cpu-local")
    profiles = []
    for mode in ("quick",) if quick else ("quick", "full"):
        figures, table = _profile(model, mode, hardware)
        profiles.append(figures)
    report = {"suite": "costmodel", "quick": quick, "profiles": profiles,
              "lookup": bench_lookup(table, model)}
    return publish(report, print_report, json_path)
