"""`refimpl bench sched`: the `slo` policy's decision time per tick as the active set grows.

A tick's whole decision is timed: deadline and tick budget, both queues, the bucketed knapsack,
the adaptive prefill chunk, the kernel look-up and the KV projection (`SLOPolicy.schedule`,
which changes nothing, so repeated calls time the same decision with warm caches, as in a
running engine). N requests are decoding (contexts spread over the buckets, deadlines spread
over the next 200 ms) and N/10 prompts wait. The same policy with the knapsack written in
plain Python is timed in the same run, and the growth exponent is the slope of log(time) over
log(N).
The seed asks for under a millisecond per tick; the goal is under 100 us at 1,000 active
requests and under 500 us at 10,000.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from refimpl.bench._report import publish
from refimpl.config import HardwareSpec, ModelConfig
from refimpl.costmodel.step import RooflineStepModel
from refimpl.engine import Engine, SimulatedExecutor
from refimpl.engine.simulate import cost_table_for
from refimpl.kv import PagePool
from refimpl.kv import manager as kvm
from refimpl.sched import Request
from refimpl.sched.slo import SLOPolicy
from refimpl.sched.slo.knapsack_python import select_decode_batch_python
from refimpl.sched.table import COMPUTED, GENERATED, LAST_TOKEN, RUNNING, STATUS, TPOT_SLO

__all__ = ["run"]

SIZES = (100, 1_000, 10_000)
MODEL, HARDWARE = "llama-3-8b", "h100-sxm"


class _PythonKnapsackSLOPolicy(SLOPolicy):
    """The slo policy with the knapsack in plain Python: the baseline."""

    @staticmethod
    def _select(*args):
        *inputs, out, stats = args
        chosen = select_decode_batch_python(*inputs)
        out[: len(chosen)] = chosen
        deadline_s, kv_need, active, now_s, horizon_s = (inputs[0], inputs[4], inputs[5],
                                                         inputs[6], inputs[7])
        taken = set(chosen)
        stats[0] = sum(kv_need[s] for s in chosen)
        stats[1] = sum(kv_need[s] for s in range(len(active)) if active[s] and s not in taken
                       and deadline_s[s] < now_s + horizon_s)
        return len(chosen)


def _policy(cls: type[SLOPolicy], num_active: int, seed: int) -> SLOPolicy:
    """A policy mid-run: `num_active` decoding requests, a tenth as many prompts waiting."""
    model, hardware = ModelConfig.preset(MODEL), HardwareSpec.preset(HARDWARE)
    rng = np.random.default_rng(seed)
    pool = PagePool(num_active * 300 + 10_000, 16, max_context=model.max_context)
    contexts = rng.integers(16, 4000, num_active)
    prompts = rng.integers(50, 3000, num_active // 10)
    requests = [Request(i, 0.0, int(c), 10_000) for i, c in enumerate(contexts)]
    requests += [Request(num_active + i, 0.0, int(p), 100) for i, p in enumerate(prompts)]
    policy = cls()
    engine = Engine(policy, SimulatedExecutor(RooflineStepModel(model, hardware)), pool, model,
                    hardware=hardware, cost_table=cost_table_for(model, hardware))
    arrays, context = engine._lay_out(requests)
    ints, floats = arrays.ints, arrays.floats
    decoding = np.arange(num_active)
    ints[STATUS, decoding], ints[COMPUTED, decoding], ints[GENERATED, decoding] = (
        RUNNING, contexts, 1)
    floats[LAST_TOKEN, decoding] = rng.uniform(0.0, 0.2, num_active) - floats[TPOT_SLO, decoding]
    kvm.grow(arrays.kv, decoding, contexts.astype(np.int64), num_active)
    policy.bind(context)
    for i in decoding:
        policy.decode.add(int(i), float(floats[LAST_TOKEN, i] + floats[TPOT_SLO, i]),
                          int(contexts[i]), 1.0)
    for i in range(num_active, len(requests)):
        policy.add_request(i, 0.0)
    return policy


def time_ticks(cls: type[SLOPolicy], num_active: int, repeats: int) -> float:
    """Median seconds of a `schedule` call over `repeats` ticks on each of three states."""
    times = []
    for seed in range(3):
        policy = _policy(cls, num_active, seed=seed)
        policy.schedule(0.0)  # warm: compiled kernels loaded, look-up caches filled
        for _ in range(repeats):
            start = time.perf_counter()
            policy.schedule(0.0)
            times.append(time.perf_counter() - start)
    return float(np.median(times))


def run(*, quick: bool = False, num_threads: int | None = None,
        json_path: Path | None = None) -> dict:
    """Time the tick at each size, print, and optionally write JSON."""
    del num_threads  # the scheduler is single-threaded
    repeats = 10 if quick else 50
    rows = [{"num_active": n, "numba_s": time_ticks(SLOPolicy, n, repeats),
             "python_s": time_ticks(_PythonKnapsackSLOPolicy, n, repeats)} for n in SIZES]
    sizes = np.log([r["num_active"] for r in rows])
    report = {
        "suite": "sched", "rows": rows,
        "growth_exponent_numba": float(np.polyfit(sizes, np.log([r["numba_s"] for r in rows]),
                                                  1)[0]),
        "growth_exponent_python": float(np.polyfit(sizes, np.log([r["python_s"] for r in rows]),
                                                   1)[0]),
    }
    return publish(report, print_report, json_path)


def print_report(report: dict) -> None:
    """The figures as a table."""
    print("slo policy: one tick's whole decision (median), N decoding + N/10 prompts waiting")
    print(f"  {'active':>7}{'slo (Numba)':>14}{'Python knapsack':>17}{'speed-up':>10}")
    for r in report["rows"]:
        print(f"  {r['num_active']:>7}{r['numba_s'] * 1e6:>12.0f}us{r['python_s'] * 1e6:>15.0f}us"
              f"{r['python_s'] / r['numba_s']:>9.1f}x")
    print(f"  growth exponent: {report['growth_exponent_numba']:.2f} (Numba), "
          f"{report['growth_exponent_python']:.2f} (Python); goal: < 100 us at 1,000 and "
          "< 500 us at 10,000")
